"""What every store's keyword index shares: the text a message is indexed by, how texts and queries are cut into
words, and the ``KeywordSearch`` capability.

A message is indexed by the text it is embedded by (``message_text``), so the keyword and vector rankings see the
same words. Words are cut as SQLite's FTS5 ``porter unicode61 remove_diacritics 2`` tokenizer cuts them (letters and
digits of any script, lower case, accents dropped, English suffixes stemmed by Porter's algorithm); the in-memory and
PostgreSQL indexes cut them in Python with :func:`text_tokens`, which agrees with FTS5 word for word.

A query is text, never query syntax: it is cut into words, common English function words and repeats dropped
(:func:`query_terms`), and each store builds its own query from those words (SQLite quotes each one for FTS5,
PostgreSQL writes a ``tsquery`` literal of lexemes), so quotes, ``NEAR(``, ``*``, ``-``, ``:``, ``OR``,
parentheses, NUL bytes or lone surrogates never reach a query parser as syntax.

A store answers a keyword search with :class:`KeywordMatches`: the scope's statistics (its number of messages, their
average length in words, each query word's document frequency among them), its best candidates with their word
counts (best by :func:`keyword_ranking`, the one keyword score every store and ``threadmind.search`` use), and the
neighbours of those candidates and of any other messages the search names, read in the same trip to the store.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Protocol, TypeGuard, runtime_checkable

import msgspec

from ..codecs import Message
from ..embedders._chunking import message_text
from ._memo import memo

__all__ = ("KEYWORD_TERMS", "MAX_QUERY_TERMS", "NO_MATCHES", "SCORE_DIGITS", "STOP_WORDS", "CreatedTimes",
           "KeywordCandidate", "KeywordMatches", "KeywordSearch", "Neighbours", "bm25", "count_words", "idf",
           "indexed_text", "keyword_ranking", "lexemes_of", "query_terms", "stem", "supports_keywords", "text_tokens")

MAX_QUERY_TERMS = 32
"""Words of a query that are looked up at most (the first ones, after stop words and repeats are dropped)."""
KEYWORD_TERMS = 16
"""Words a keyword score uses at most: the rarest in the scope."""
SCORE_DIGITS = 9
"""Decimals a keyword score is rounded to, so that messages scoring alike tie in every store (each sums the same
terms in its own order)."""

# Generic English function words (pronouns, auxiliaries, determiners, prepositions, conjunctions, wh-words, and the
# pieces the tokenizer makes of "don't", "I'm", "we'll"): they match nearly every message and carry no topic.
# Written down before any measurement; not tuned to any data set.
STOP_WORDS: frozenset[str] = frozenset("""
a about above after again against all am an and any are as at be because been before being below between both but by
can could d did do does doing down during each few for from further had has have having he her here hers herself him
himself his how i if in into is it its itself just ll m me more most my myself no nor not now of off on once only or
other our ours ourselves out over own re s same she should so some such t than that the their theirs them themselves
then there these they this those through to too under until up ve very was we were what when where which while who
whom why will with would you your yours yourself yourselves
""".split())

_WORD = re.compile(r"[^\W_]+")  # letters and digits of any script; no underscores, no surrogates, no NUL
_ASCII_WORD = re.compile(r"[a-z0-9]+")


class KeywordCandidate(msgspec.Struct, frozen=True, gc=False):
    """A message of the scope matching some of the query's words: its length in words, how many times it holds
    each of the query's lexemes (stems), and its keyword score (:func:`keyword_ranking`'s). Not tracked by the
    garbage collector (a search makes dozens; its fields can hold no cycle)."""

    message_id: str
    thread_id: str
    resource_id: str
    length: int
    counts: dict[str, int]
    score: float = 0.0


Neighbours = dict[str, tuple[str | None, str | None]]
"""Per message id: the ids of the messages just before and just after it in its thread (None at an end)."""


class KeywordMatches(msgspec.Struct, frozen=True):
    """A keyword search's answer: the scope's statistics, its best candidates (best first by
    :func:`keyword_ranking`'s score, which each carries), and, when asked for, the neighbours of the candidates and
    of other messages."""

    docs: int  # messages of the scope with words
    average_length: float  # their average length in words
    frequencies: dict[str, int]  # per query lexeme: how many of the scope's messages hold it
    candidates: list[KeywordCandidate]
    neighbours: Neighbours = msgspec.field(default_factory=dict)  # of the candidates and the messages named


NO_MATCHES = KeywordMatches(0, 0.0, {}, [])


@runtime_checkable
class KeywordSearch(Protocol):
    """A store that keeps a keyword index of its messages, written with the message rows."""

    async def keyword_search(self, terms: Sequence[str], *, resource_id: str | None, thread_id: str | None,
                             limit: int, neighbours_of: Sequence[str] | None = None,
                             counts: bool = True) -> KeywordMatches:
        """The scope's statistics for ``terms`` (from :func:`query_terms`; keyed by their stems) and its best
        ``limit`` messages holding any of them, best first. The scope is the thread when ``thread_id`` is given,
        else the resource; a message outside it is never returned or counted. With ``neighbours_of``, the same
        trip also reads the neighbours of every candidate and of those messages. ``counts=False``: the caller reads
        the candidates' scores alone, so a store that scored them may leave their word counts empty."""
        ...

    async def neighbours(self, message_ids: Sequence[str]) -> Neighbours:
        """For each message, the ids of the messages just before and just after it in its thread (None at an end);
        unknown ids are left out."""
        ...

    async def keyword_backlog(self) -> int:
        """At most how many stored messages are not in the keyword index yet (written by another program)."""
        ...

    async def build_keyword_index(self, progress: Callable[[int, int], object] | None = None) -> int:
        """Index those messages in bounded batches, ``progress(done, total)`` after each (ending at ``(total, total)``
        whoever indexed the rest); returns how many it indexed."""
        ...


@runtime_checkable
class CreatedTimes(Protocol):
    """A store that reads when messages were created without reading the messages (hybrid recall's date lift reads
    the times of a whole keyword pool; the stores of this library all do)."""

    async def created_times(self, message_ids: Sequence[str], *, resource_id: str | None = None,
                            thread_id: str | None = None) -> dict[str, datetime]:
        """When each of ``message_ids`` was created, as the message reads back; unknown ids are left out. The
        scope they were found in (a keyword search's) may let a store answer from what it keeps of it."""
        ...


def supports_keywords(store: object) -> TypeGuard[KeywordSearch]:
    """Whether ``store`` keeps a keyword index (``KeywordSearch``)."""
    return isinstance(store, KeywordSearch)


def count_words(tokens: Sequence[str], lexemes: Iterable[str]) -> dict[str, int]:
    """How many times each of ``lexemes`` occurs in ``tokens`` (only those that do)."""
    wanted = lexemes if isinstance(lexemes, (set, frozenset)) else set(lexemes)
    counts: dict[str, int] = {}
    for token in tokens:
        if token in wanted:
            counts[token] = counts.get(token, 0) + 1
    return counts


def lexemes_of(terms: Sequence[str]) -> dict[str, str]:
    """The distinct stems of ``terms``, each with the first term that has it (the word a store is asked for)."""
    out: dict[str, str] = {}
    for term in terms:
        out.setdefault(stem(term), term)
    return out


def indexed_text(message: Message) -> str:
    """The text a message is found by: the text it is embedded by (empty: the message has no words to find)."""
    return message_text(message)


def query_terms(query: str) -> list[str]:
    """The words of ``query`` a keyword index is asked for, cut as texts are (lower case, accents dropped), stop
    words and repeats dropped, at most :data:`MAX_QUERY_TERMS`; a query made only of stop words keeps them (``"who
    is it"`` still finds something)."""
    words = _plain_words(query)
    kept = list(dict.fromkeys(w for w in words if w not in STOP_WORDS))
    if not kept:
        kept = list(dict.fromkeys(words))
    return kept[:MAX_QUERY_TERMS]


# -- words of a text, as the SQLite index cuts them (for the stores that index in Python) ---------------------------


def _plain_words(text: str) -> list[str]:
    """Letters and digits of any script, lower case, accents dropped (as FTS5's ``unicode61 remove_diacritics``)."""
    if text.isascii():
        return _ASCII_WORD.findall(text.lower())
    folded = unicodedata.normalize("NFKD", text.casefold())
    if not folded.isascii():
        folded = "".join(ch for ch in folded if not unicodedata.combining(ch))
    return _WORD.findall(folded)


def text_tokens(text: str) -> list[str]:
    """The words a text is indexed by, as FTS5's ``porter unicode61 remove_diacritics 2`` tokenizer makes them:
    letters and digits, lower case, accents dropped, English suffixes stemmed (Porter)."""
    return [stem(word) for word in _plain_words(text)]


_VOWELS = frozenset("aeiou")


class _Porter:
    """Martin Porter's 1980 suffix stripper, over one lower-case ASCII word (as in FTS5's ``porter``)."""

    def __init__(self, word: str) -> None:
        self.b = word
        self.k = len(word) - 1  # the end of the word being stemmed
        self.j = 0  # the end of the stem when a suffix matched

    def cons(self, i: int) -> bool:
        ch = self.b[i]
        if ch in _VOWELS:
            return False
        if ch == "y":
            return i == 0 or not self.cons(i - 1)
        return True

    def m(self) -> int:
        """The number of vowel-consonant sequences in b[0..j]."""
        n = i = 0
        j = self.j
        while i <= j and self.cons(i):
            i += 1
        while i <= j:
            while i <= j and not self.cons(i):
                i += 1
            if i > j:
                break
            n += 1
            while i <= j and self.cons(i):
                i += 1
        return n

    def vowel_in_stem(self) -> bool:
        return any(not self.cons(i) for i in range(self.j + 1))

    def double_c(self, j: int) -> bool:
        return j >= 1 and self.b[j] == self.b[j - 1] and self.cons(j)

    def cvc(self, i: int) -> bool:
        if i < 2 or not self.cons(i) or self.cons(i - 1) or not self.cons(i - 2):
            return False
        return self.b[i] not in "wxy"

    def ends(self, s: str) -> bool:
        if not self.b[: self.k + 1].endswith(s):
            return False
        self.j = self.k - len(s)
        return True

    def set_to(self, s: str) -> None:
        self.b = self.b[: self.j + 1] + s + self.b[self.k + 1:]
        self.k = self.j + len(s)

    def r(self, s: str) -> None:
        if self.m() > 0:
            self.set_to(s)

    def step1ab(self) -> None:
        if self.b[self.k] == "s":
            if self.ends("sses"):
                self.k -= 2
            elif self.ends("ies"):
                self.set_to("i")
            elif self.b[self.k - 1] != "s":
                self.k -= 1
        if self.ends("eed"):
            if self.m() > 0:
                self.k -= 1
        elif (self.ends("ed") or self.ends("ing")) and self.vowel_in_stem():
            self.k = self.j
            if self.ends("at"):
                self.set_to("ate")
            elif self.ends("bl"):
                self.set_to("ble")
            elif self.ends("iz"):
                self.set_to("ize")
            elif self.double_c(self.k):
                self.k -= 1
                if self.b[self.k] in "lsz":
                    self.k += 1
            else:
                self.j = self.k
                if self.m() == 1 and self.cvc(self.k):
                    self.set_to("e")

    def step1c(self) -> None:
        if self.ends("y") and self.vowel_in_stem():
            self.b = self.b[: self.k] + "i" + self.b[self.k + 1:]

    _STEP2 = (("ational", "ate"), ("tional", "tion"), ("enci", "ence"), ("anci", "ance"), ("izer", "ize"),
              ("bli", "ble"), ("alli", "al"), ("entli", "ent"), ("eli", "e"), ("ousli", "ous"), ("ization", "ize"),
              ("ation", "ate"), ("ator", "ate"), ("alism", "al"), ("iveness", "ive"), ("fulness", "ful"),
              ("ousness", "ous"), ("aliti", "al"), ("iviti", "ive"), ("biliti", "ble"), ("logi", "log"))
    _STEP3 = (("icate", "ic"), ("ative", ""), ("alize", "al"), ("iciti", "ic"), ("ical", "ic"), ("ful", ""),
              ("ness", ""))
    _STEP4 = ("al", "ance", "ence", "er", "ic", "able", "ible", "ant", "ement", "ment", "ent", "ion", "ou", "ism",
              "ate", "iti", "ous", "ive", "ize")

    def step23(self, table: tuple[tuple[str, str], ...]) -> None:
        for suffix, replacement in table:
            if self.ends(suffix):
                self.r(replacement)
                return

    def step4(self) -> None:
        for suffix in self._STEP4:
            if self.ends(suffix):
                if suffix == "ion" and not (self.j >= 0 and self.b[self.j] in "st"):
                    return
                if self.m() > 1:
                    self.k = self.j
                return

    def step5(self) -> None:
        self.j = self.k
        if self.b[self.k] == "e":
            a = self.m()
            if a > 1 or (a == 1 and not self.cvc(self.k - 1)):
                self.k -= 1
        if self.b[self.k] == "l" and self.double_c(self.k) and self.m() > 1:
            self.k -= 1

    def stem(self) -> str:
        if self.k <= 1:
            return self.b
        self.step1ab()
        if self.k > 0:
            self.step1c()
            self.step23(self._STEP2)
            self.step23(self._STEP3)
            self.step4()
            self.step5()
        return self.b[: self.k + 1]


def _stem(word: str) -> str:
    """The Porter stem of a lower-case word; words that are not plain ASCII letters, or shorter than 3, are kept."""
    if len(word) < 3 or not (word.isascii() and word.isalpha()):
        return word
    return _Porter(word).stem()


stem = memo(_stem, 65536)


def bm25(counts: dict[str, int], length: int, weights: dict[str, float], average_length: float) -> float:
    """Okapi BM25 (k1 1.2, b 0.75, as FTS5's ``bm25()``) of one message holding ``counts`` of the query's lexemes,
    ``weights`` being each lexeme's idf."""
    norm = 1.2 * (0.25 + 0.75 * length / (average_length or 1.0))
    return sum(weights[lexeme] * tf * 2.2 / (tf + norm) for lexeme, tf in counts.items() if lexeme in weights)


def keyword_ranking(matches: KeywordMatches, limit: int) -> list[KeywordCandidate]:
    """The best ``limit`` candidates, best first, each with its score: BM25 (the scope's statistics, the query's
    rarest :data:`KEYWORD_TERMS` words) times the square root of its idf coverage, the share of the query's weight
    (its words' idf) that the message holds: the classic coordination factor (BM25 alone over-rewards a very short
    message holding one common query word). A message holding only words in half the scope or more scores 0: still a
    candidate (its neighbours may lift it), ranked last."""
    docs = matches.docs
    present = sorted((n, i, lexeme) for i, (lexeme, n) in enumerate(matches.frequencies.items()) if n > 0)
    kept = [lexeme for _, _, lexeme in present[:KEYWORD_TERMS]]
    if not kept or not docs:
        return []
    weights = {lexeme: idf(matches.frequencies[lexeme], docs) for lexeme in kept}
    cover = {lexeme: max(0.0, math.log((docs - matches.frequencies[lexeme] + 0.5)
                                       / (matches.frequencies[lexeme] + 0.5))) for lexeme in kept}
    total = sum(cover.values())
    scored: list[KeywordCandidate] = []
    for candidate in matches.candidates:
        base = bm25(candidate.counts, candidate.length, weights, matches.average_length)
        if base <= 0.0:  # none of the words kept
            continue
        coverage = sum(cover[lexeme] for lexeme in candidate.counts if lexeme in cover) / total if total else 1.0
        scored.append(msgspec.structs.replace(candidate, score=round(base * math.sqrt(coverage), SCORE_DIGITS)))
    scored.sort(key=lambda candidate: -candidate.score)
    return scored[:limit]


def idf(frequency: int, docs: int) -> float:
    """FTS5's idf: ``ln((N - n + 0.5) / (n + 0.5))``, at least 1e-6 (a word in most messages weighs nearly 0)."""
    return max(math.log((docs - frequency + 0.5) / (frequency + 0.5)), 1e-6)
