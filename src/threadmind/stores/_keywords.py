"""What every store's keyword index shares: the text a message is indexed by, the words of a query, and the
``KeywordSearch`` capability.

A message is indexed by the text it is embedded by (``message_text``), so the keyword and vector rankings see the
same words. A query is text, never query syntax: it is cut into words (letters and digits of any script), folded
to lower case, common English function words dropped, repeats removed and the rest capped, and each store builds
its own query from those words (SQLite FTS5 quotes each one, PostgreSQL passes them to ``websearch_to_tsquery``).
Quotes, ``NEAR(``, ``*``, ``-``, ``:``, ``OR``, parentheses, NUL bytes or lone surrogates therefore never reach a
query parser as syntax.
"""

from __future__ import annotations

import functools
import math
import re
import unicodedata
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

import msgspec

from ..codecs import Message
from ..embedders import message_text

__all__ = ("MAX_QUERY_TERMS", "STOP_WORDS", "KeywordHit", "KeywordSearch", "bm25_hits", "indexed_text",
           "query_terms", "stem", "supports_keywords", "text_tokens")

MAX_QUERY_TERMS = 32
"""Words of a query that are searched at most (the first ones, after stop words and repeats are dropped)."""

# Generic English function words: they match nearly every message and carry no topic. Not tuned to any data set.
STOP_WORDS: frozenset[str] = frozenset("""
a about above after again against all am an and any are as at be because been before being below between both but
by can could did do does doing down during each few for from further had has have having he her here hers herself
him himself his how i if in into is it its itself just me more most my myself no nor not now of off on once only or
other our ours ourselves out over own same she should so some such than that the their theirs them themselves then
there these they this those through to too under until up very was we were what when where which while who whom why
will with would you your yours yourself yourselves
""".split())

_WORD = re.compile(r"[^\W_]+")  # letters and digits of any script; no underscores, no surrogates, no NUL


class KeywordHit(msgspec.Struct, frozen=True):
    """A message matched by words: higher ``score`` ranks first (each store's own scale: FTS5's bm25 negated,
    PostgreSQL's ts_rank, the in-memory store's BM25)."""

    message_id: str
    thread_id: str
    resource_id: str
    score: float


@runtime_checkable
class KeywordSearch(Protocol):
    """A store that keeps a keyword index of its messages, written with the message rows."""

    async def keyword_search(self, terms: Sequence[str], *, resource_id: str | None, thread_id: str | None,
                             limit: int) -> list[KeywordHit]:
        """The best ``limit`` messages of the scope (the thread when ``thread_id`` is given, else the resource)
        containing any of ``terms`` (from :func:`query_terms`), best first; never a message outside the scope."""
        ...

    async def keyword_backlog(self) -> int:
        """At most how many stored messages are not in the keyword index yet (written by another program)."""
        ...

    async def build_keyword_index(self, progress: Callable[[int, int], object] | None = None) -> int:
        """Index those messages in bounded batches, ``progress(done, total)`` after each; returns how many."""
        ...


def supports_keywords(store: object) -> bool:
    """Whether ``store`` keeps a keyword index (``KeywordSearch``)."""
    return isinstance(store, KeywordSearch)


def bm25_hits(terms: set[str], docs: Sequence[tuple[Message, str, dict[str, int], int]],
              limit: int) -> list[KeywordHit]:
    """Okapi BM25 (k1 1.2, b 0.75, FTS5's) of ``docs`` (message, its resource, word counts, length) for the stemmed
    ``terms``, the best ``limit`` with any of them; statistics over ``docs`` (the scope)."""
    if not docs:
        return []
    n = len(docs)
    average = sum(length for *_, length in docs) / n or 1.0
    df = {t: sum(1 for _, _, counts, _ in docs if t in counts) for t in terms}
    idf = {t: max(math.log((n - f + 0.5) / (f + 0.5)), 1e-6) for t, f in df.items() if f}
    scored: list[tuple[float, int, KeywordHit]] = []
    for order, (message, resource, counts, length) in enumerate(docs):
        score = 0.0
        for t, weight in idf.items():
            tf = counts.get(t, 0)
            if tf:
                score += weight * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * length / average))
        if score > 0.0:
            scored.append((-score, order, KeywordHit(message.id, message.thread_id or "", resource, score)))
    scored.sort(key=lambda item: (item[0], item[1]))
    return [hit for *_, hit in scored[:limit]]


def indexed_text(message: Message) -> str:
    """The text a message is found by: the text it is embedded by (empty: the message has no words to find)."""
    return message_text(message)


def query_terms(query: str) -> list[str]:
    """The words of ``query`` a keyword index is asked for: lower case, stop words and repeats dropped, at most
    :data:`MAX_QUERY_TERMS`; a query made only of stop words keeps them (``"who is it"`` still finds something)."""
    words = [w.casefold() for w in _WORD.findall(query)]
    kept = list(dict.fromkeys(w for w in words if w not in STOP_WORDS))
    if not kept:
        kept = list(dict.fromkeys(words))
    return kept[:MAX_QUERY_TERMS]


# -- words of a text, as the SQLite index cuts them (for the stores that index in Python) ---------------------------


def text_tokens(text: str) -> list[str]:
    """The words a text is indexed by, as FTS5's ``porter unicode61 remove_diacritics 2`` tokenizer makes them:
    letters and digits, lower case, accents dropped, English suffixes stemmed (Porter)."""
    folded = unicodedata.normalize("NFKD", text.casefold())
    plain = "".join(ch for ch in folded if not unicodedata.combining(ch))
    return [stem(word) for word in _WORD.findall(plain)]


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


@functools.lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """The Porter stem of a lower-case word; words that are not plain ASCII letters, or shorter than 3, are kept."""
    if len(word) < 3 or not (word.isascii() and word.isalpha()):
        return word
    return _Porter(word).stem()
