"""A scope's keyword rows in memory, scored with numpy: a keyword search of a cached scope costs about 0.15 ms
(500 messages) instead of an FTS5 query and a Python count per matching message (about 4 ms on the shared
workload, whose common words match nearly every message).

A :class:`KeywordBlock` holds every message of one scope (a resource, or a thread) that has words: its id, thread,
resource and length, and per word (stem) the messages holding it with their counts. :meth:`KeywordBlock.matches`
answers what ``KeywordSearch.keyword_search`` answers, scored exactly as ``keyword_ranking`` scores (the tests hold
the two to the same candidates and scores), so only the best few become Python objects.

:class:`KeywordBlocks` keeps blocks by scope token with the version of the scope they hold. The SQL index gives a
scope a new random version with every change to it, in the same transaction, in any process: a search uses a block
only when the versions agree (a version rolled back with its transaction is never reused, so a block can never
match a state that was not committed). After a fold of new messages commits, :meth:`KeywordBlocks.advance` appends
them to the blocks of their scopes, so a chat that saves and then searches keeps its block. Messages another
process added reach a block through :meth:`KeywordBlocks.catch_up`, when the store can tell that the scope only
gained messages since the block's version (its ``lineage``: SQLite keeps a lineage per scope, PostgreSQL the
version of each row); anything else (an update, a deletion, a thread moved) leaves the block behind, and the next
search builds it again. The blocks are shared by the store's reader and writer threads under one lock; their
postings stay under a budget, least recently used out first.
"""

from __future__ import annotations

import math
import threading
from collections import Counter, OrderedDict, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from itertools import chain, count, repeat

import numpy as np
import numpy.typing as npt

from ._keywords import KEYWORD_TERMS, SCORE_DIGITS, KeywordCandidate, KeywordMatches, lexemes_of

__all__ = ("BLOCK_BUDGET", "RESOURCE", "THREAD", "CountedRow", "KeywordBlock", "KeywordBlocks", "Lineage", "Owner",
           "Row", "Version")

BLOCK_BUDGET = 4_000_000
"""Postings (a word in a message, counted once) the cached blocks of one store hold at most (about 100 MB)."""
_I32 = np.int32
_F64 = np.float64
# a word's postings: documents, counts, BM25 parts, and the word's idf coverage
_Scored = tuple[npt.NDArray[np.int32], npt.NDArray[np.float64], npt.NDArray[np.float64], float]
Row = tuple[str, str, str, str]  # message id, thread id, resource id, its stems joined by spaces
# message id, thread id, resource id, its length in words, and how often each stem occurs in it (PostgreSQL rows, whose
# stored length counts words the tsvector leaves out)
CountedRow = tuple[str, str, str, int, dict[str, int]]
# a scope's version: SQLite's (a random number, new with every change) or PostgreSQL's (its slots' counters)
Version = int | tuple[tuple[int, int], ...]
Owner = tuple[str, str]  # (RESOURCE or THREAD, its id)
# How a block follows its scope's changes made elsewhere: SQLite's (lineage, highest rowid seen), PostgreSQL's
# message id -> its row's version (xmin)
Lineage = tuple[int, int] | dict[str, str]
RESOURCE, THREAD = "resource", "thread"
_UNKNOWN = ("\x00?", "\x00?")  # neighbours not kept (a kept pair equal to it would only send a search to SQL)


_SORTED_WHOLE = 256  # hits sorted whole below this many (one numpy call against five; 100 hits: 5 us against 10)
_NO_DOCS: npt.NDArray[np.int32] = np.empty(0, dtype=np.int32)
_NO_COUNTS: npt.NDArray[np.float64] = np.empty(0, dtype=np.float64)


class _Postings:
    """The messages holding one word and its count in each: those of the block's first rows (numpy slices of
    :class:`_Built`), then Python lists that grow as rows join; and the arrays a search scores with, made on the
    first search that needs them (most of a scope's words are never searched for), kept for the next (a resource's
    block answers many searches). Nothing of a word's part of a message's score depends on the query but which
    words it keeps: each posting's ``idf × tf × 2.2 / (tf + norm)`` and the word's idf coverage are kept too, while
    the block's statistics stay the same (until messages join it)."""

    __slots__ = ("_norm", "_scored", "base_counts", "base_docs", "counts", "docs", "stale")

    def __init__(self, base_docs: npt.NDArray[np.int32] = _NO_DOCS,
                 base_counts: npt.NDArray[np.float64] = _NO_COUNTS) -> None:
        self.base_docs = base_docs
        self.base_counts = base_counts
        self.docs: list[int] = []
        self.counts: list[int] = []
        self.stale = True
        self._scored: _Scored | None = None
        self._norm: npt.NDArray[np.float64] | None = None  # the block's norms the scores were computed with

    def __len__(self) -> int:
        return len(self.base_docs) + len(self.docs)

    def scored(self, norm: npt.NDArray[np.float64], n: int) -> _Scored:
        """The documents, counts, BM25 parts and the word's idf coverage in a block of ``n`` messages whose length
        norms are ``norm``."""
        if not self.current(norm):
            _score_together([self], norm, n)
        assert self._scored is not None
        return self._scored

    def current(self, norm: npt.NDArray[np.float64]) -> bool:
        """Whether the word's scores were made with ``norm`` (the block's norms now) and no row joined since."""
        return not self.stale and self._scored is not None and self._norm is norm

    def flush(self) -> None:
        """The rows that joined become part of the arrays: the next search converts only newer ones."""
        if self.docs:
            self.base_docs = np.concatenate((self.base_docs, np.asarray(self.docs, dtype=_I32)))
            self.base_counts = np.concatenate((self.base_counts, np.asarray(self.counts, dtype=_F64)))
            self.docs, self.counts = [], []


def _score_together(words: Sequence[_Postings], norm: npt.NDArray[np.float64], n: int) -> None:
    """Score these words' postings in a block of ``n`` messages whose length norms are ``norm``, in one pass of
    numpy for all of them (each posting's part equals the one made word by word: the same operations in the same
    order), each word keeping its slices."""
    for word in words:
        word.flush()
    sizes = [len(word.base_docs) for word in words]
    raws = [math.log((n - size + 0.5) / (size + 0.5)) for size in sizes]  # FTS5's idf, before its floor
    if len(words) == 1:
        docs, tf = words[0].base_docs, words[0].base_counts
        parts = max(raws[0], 1e-6) * tf * 2.2 / (tf + norm[docs])
    else:
        docs = np.concatenate([word.base_docs for word in words])
        tf = np.concatenate([word.base_counts for word in words])
        idf = np.repeat(np.array([max(raw, 1e-6) for raw in raws], dtype=_F64), sizes)
        parts = idf * tf * 2.2 / (tf + norm[docs])
    start = 0
    for word, size, raw in zip(words, sizes, raws, strict=True):
        end = start + size
        word._scored = (docs[start:end], tf[start:end], parts[start:end], max(raw, 0.0))
        word._norm = norm
        word.stale = False
        start = end


class _Built:
    """The postings of the rows a block was built with, word by word in one pass of numpy (no Python work per
    posting, nor per word): per word, a run of ``docs`` (ascending) and ``counts``; :meth:`run` gives its bounds."""

    __slots__ = ("_bounds", "_numbers", "_scores", "_starts", "counts", "docs", "rows", "words")

    def __init__(self, words_of: Sequence[Sequence[str]], counts_of: Sequence[Sequence[int]] | None) -> None:
        lengths = [len(words) for words in words_of]
        total = sum(lengths)
        # Each word numbered on first sight, in C (a defaultdict whose default is the next number): 50 messages of
        # 31 words 206 -> 106 us with the tally below, against a vocabulary dict and a lookup per word.
        number: defaultdict[str, int] = defaultdict(count().__next__)
        word_ids = np.fromiter(map(number.__getitem__, chain.from_iterable(words_of)), dtype=np.int64, count=total)
        vocabulary = list(number)
        rows = max(1, len(words_of))
        docs = np.repeat(np.arange(len(words_of), dtype=np.int64), lengths)
        keys = word_ids * rows + docs  # by word, then by document
        span = len(vocabulary) * rows
        if counts_of is None and span <= 8 * total + 4096:  # each word as often as it occurs: tallied in place
            tally = np.bincount(keys, minlength=span)
            keys = np.flatnonzero(tally)
            counts = tally[keys].astype(_F64)
        elif counts_of is None:  # a sparse block (many words, each in few messages): sorted
            keys, tally = np.unique(keys, return_counts=True)
            counts = tally.astype(_F64)
        else:  # (word, count) pairs, each pair once
            order = np.argsort(keys, kind="stable")
            keys = keys[order]
            counts = np.fromiter(chain.from_iterable(counts_of), dtype=_F64, count=total)[order]
        word_of = keys // rows
        self.docs: npt.NDArray[np.int32] = (keys % rows).astype(_I32)
        self.counts: npt.NDArray[np.float64] = counts
        self._bounds = np.searchsorted(word_of, np.arange(len(vocabulary) + 1))
        self._starts: list[int] = self._bounds.tolist()
        number.default_factory = None  # numbered: a word not among them is not added by a lookup
        self._numbers: dict[str, int] = number
        self.rows = len(words_of)
        self._scores: tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.float64]] | None = None
        #: Per word searched for: its run of the arrays, scored with the norms of ``_scores`` (made anew with them).
        self.words: dict[str, _Scored] = {}

    def part(self, docs: Sequence[int]) -> _Built:
        """The postings of the rows ``docs`` (ascending) alone, those rows numbered from 0 in that order: what a
        build from those rows makes, but for the words' numbers (shared with this one; a word none of them holds
        has an empty run, which :meth:`run` answers as absent)."""
        renumber = np.full(self.rows, -1, dtype=np.int64)
        renumber[np.asarray(docs, dtype=np.int64)] = np.arange(len(docs), dtype=np.int64)
        new = renumber[self.docs]
        keep = new >= 0
        part = _Built.__new__(_Built)
        part.docs = new[keep].astype(_I32)
        part.counts = self.counts[keep]
        before = np.zeros(len(keep) + 1, dtype=np.int64)  # how many postings kept before each position
        np.cumsum(keep, out=before[1:])
        part._bounds = before[self._bounds]
        part._starts = part._bounds.tolist()
        part._numbers = self._numbers  # never changed after a build (no default: a lookup adds nothing)
        part.rows = len(docs)
        part._scores = None
        part.words = {}
        return part

    def run(self, word: str) -> tuple[int, int, int] | None:
        """The word's number and the bounds of its run of ``docs`` and ``counts`` (None: no row held it)."""
        number = self._numbers.get(word)
        if number is None:
            return None
        starts = self._starts
        start, end = starts[number], starts[number + 1]
        return (number, start, end) if end > start else None  # (empty in a part: see part)

    def postings(self, word: str) -> _Postings | None:
        """The word's postings as a :class:`_Postings` (None: no row held it)."""
        run = self.run(word)
        if run is None:
            return None
        _, start, end = run
        return _Postings(self.docs[start:end], self.counts[start:end])

    def scores(self, norm: npt.NDArray[np.float64]) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """Each posting's BM25 part and each word's idf coverage (:meth:`_Postings.scored`'s) for every word at once,
        asked while the block holds the rows it was built with alone: a resource's block searched for new words then
        scores them with no numpy work a word. Each idf is Python's ``math.log`` of one of the few distinct document
        frequencies, so the scores equal those computed word by word."""
        if self._scores is not None and self._scores[0] is norm:
            return self._scores[1], self._scores[2]
        n = self.rows
        sizes = np.diff(self._bounds)
        distinct, which = np.unique(sizes, return_inverse=True)
        raws = [math.log((n - size + 0.5) / (size + 0.5)) for size in distinct.tolist()]
        idf = np.repeat(np.array([max(raw, 1e-6) for raw in raws], dtype=_F64)[which], sizes)
        covers = np.array([max(raw, 0.0) for raw in raws], dtype=_F64)[which]
        tf = self.counts
        parts = idf * tf * 2.2 / (tf + norm[self.docs])
        self._scores = (norm, parts, covers)
        self.words = {}
        return parts, covers

    def forget_scores(self) -> None:
        """Rows joined the block: its words are scored one by one from now on (:class:`_Postings`)."""
        self._scores = None
        self.words = {}


class KeywordBlock:
    """One scope's keyword rows (see the module docstring). The rows it is built with are posted in one pass of
    numpy (:class:`_Built`); a word's postings become a :class:`_Postings` when a search or a joining row needs
    it."""

    __slots__ = ("_built", "_docs", "_lengths", "_lengths_array", "_remembered", "created", "epoch", "ids",
                 "lineage", "neighbours", "owner", "postings", "resources", "size", "thread_sizes", "threads", "words")

    def __init__(self, owner: Owner, rows: Iterable[Row | CountedRow]) -> None:
        self.owner = owner
        self.ids: list[str] = []
        self.threads: list[str] = []
        self.resources: list[str] = []
        self._lengths: list[float] = []
        self._lengths_array: npt.NDArray[np.float64] | None = None  # the length norms (made by a search)
        self._docs: dict[str, int] = {}
        self.words = 0
        self.size = 0
        self.postings: dict[str, _Postings] = {}
        #: The block's messages' neighbours in their threads as read while it holds its scope's version (None: no
        #: such message; see :meth:`remember`). Rows joining the block forget those of their threads and bump
        #: ``epoch``, so a read that began before cannot store what it saw.
        self.neighbours: dict[str, tuple[str | None, str | None] | None] = {}
        self._remembered: dict[str, set[str]] = {}  # thread -> its messages in ``neighbours``
        #: When the block's messages were created, as read while it holds its scope's version (a change to a kept
        #: message's time, an update, is never an append: the block is dropped with what it kept).
        self.created: dict[str, datetime] = {}
        self.thread_sizes: Counter[str] = Counter()  # thread -> how many of its messages the block holds
        self.epoch = 0
        #: The store's note of how the block can follow its scope's changes made elsewhere (SQLite: the scope's
        #: lineage and the highest rowid it had, see ``_fts._caught_up``; PostgreSQL: each of the scope's messages'
        #: row version, see ``_keyword_search``; None: it cannot).
        self.lineage: Lineage | None = None
        self._built: _Built | None = None
        self._build(rows)

    def __contains__(self, message_id: object) -> bool:
        return message_id in self._docs

    def holds(self, row: Row | CountedRow) -> bool:
        """Whether ``row`` belongs to the block's scope (its resource, or its thread)."""
        kind, value = self.owner
        return (row[2] if kind == RESOURCE else row[1]) == value

    def thread_of(self, message_id: str) -> str | None:
        """The thread of one of the block's messages (None: not the block's)."""
        doc = self._docs.get(message_id)
        return None if doc is None else self.threads[doc]

    def remembered_threads(self) -> Iterable[str]:
        """The threads some of whose messages' neighbours the block keeps."""
        return self._remembered.keys()

    def unread_threads(self, most: int) -> list[str]:
        """The threads of the block, of at most ``most`` of its messages, none of whose neighbours it keeps."""
        remembered = self._remembered
        return [thread for thread, size in self.thread_sizes.items() if size <= most and thread not in remembered]

    def remember(self, message_id: str, pair: tuple[str | None, str | None] | None) -> None:
        """Keep the neighbours of one of the block's messages (any other message is not kept: a change to its
        thread need not change this scope's version)."""
        doc = self._docs.get(message_id)
        if doc is not None:
            self.neighbours[message_id] = pair
            self._remembered.setdefault(self.threads[doc], set()).add(message_id)

    def part(self, owner: Owner, thread_id: str) -> KeywordBlock | None:
        """A block of ``owner``'s scope, the thread ``thread_id``, made of this block's messages of that thread with
        no rows read: equal to the one its rows would build (the same messages in the same order, the same
        postings) when this block holds every message of the thread's scope, which the caller checks by the
        scope's size. None when this block has none of them or some joined it after its build."""
        built = self._built
        if built is None or not self.thread_sizes.get(thread_id):
            return None
        docs = [doc for doc, thread in enumerate(self.threads) if thread == thread_id]
        if docs[-1] >= built.rows:
            return None
        block = KeywordBlock(owner, ())
        ids, resources, lengths = self.ids, self.resources, self._lengths
        block.ids = [ids[doc] for doc in docs]
        block.threads = [thread_id] * len(docs)
        block.resources = [resources[doc] for doc in docs]
        block._lengths = [lengths[doc] for doc in docs]
        block._docs = {message_id: at for at, message_id in enumerate(block.ids)}
        block.words = int(sum(block._lengths))
        block.thread_sizes[thread_id] = len(docs)
        block._built = built.part(docs)
        block.size = len(block._built.docs)
        return block

    def _build(self, rows: Iterable[Row | CountedRow]) -> None:
        """Take the block's first rows, as :meth:`extend` would, their postings made in one pass."""
        self.epoch += 1
        words_of: list[list[str]] = []
        counts_of: list[list[int] | None] = []
        at = 2 if self.owner[0] == RESOURCE else 1  # the row's resource, or its thread: the block's scope
        scope = self.owner[1]
        docs, ids, threads, resources, lengths = self._docs, self.ids, self.threads, self.resources, self._lengths
        sizes: dict[str, int] = {}
        words_in = 0
        for row in rows:
            counts: list[int] | None
            if len(row) == 4:
                message_id, thread_id, resource_id, tokens = row
                words = tokens.split()
                length, counts = len(words), None
            else:
                message_id, thread_id, resource_id, length, tally = row
                words, counts = list(tally), list(tally.values())
            if length <= 0 or message_id in docs or row[at] != scope:
                continue
            docs[message_id] = len(ids)
            ids.append(message_id)
            threads.append(thread_id)
            sizes[thread_id] = sizes.get(thread_id, 0) + 1
            resources.append(resource_id)
            lengths.append(float(length))
            words_in += length
            words_of.append(words)
            counts_of.append(counts)
        self.thread_sizes.update(sizes)
        self.words += words_in
        if not words_of:
            return
        if all(counts is None for counts in counts_of):
            built = _Built(words_of, None)
        else:  # counted rows (PostgreSQL's), or both kinds: every row as (word, count) pairs
            for at, counts in enumerate(counts_of):
                if counts is None:
                    tally = Counter(words_of[at])
                    words_of[at], counts_of[at] = list(tally), list(tally.values())
            built = _Built(words_of, [counts or [] for counts in counts_of])
        self._built = built
        self.size = len(built.docs)

    def _entry(self, word: str) -> _Postings | None:
        """The word's postings, made from the built rows' the first time (None: no message holds it)."""
        entry = self.postings.get(word)
        if entry is None and self._built is not None:
            entry = self._built.postings(word)
            if entry is not None:
                self.postings[word] = entry
        return entry

    def extend(self, rows: Iterable[Row | CountedRow],
               pairs: Mapping[str, tuple[str | None, str | None]] | None = None) -> None:
        """Add the messages of the scope that are not in the block yet (their postings appended); a message of no
        words is left out, as the index leaves it out of the scope's statistics, but the neighbours kept in its
        thread are forgotten as for any other (pass it with no words). With ``pairs``, the neighbours of every
        message of ``rows`` as the scope has them now (the rows being all the scope took since the block's version),
        the neighbours kept in their threads are brought up to date instead (:meth:`_patch`)."""
        postings = self.postings
        rows = list(rows)
        if pairs is None:
            for thread_id in {row[1] for row in rows}:
                for message_id in self._remembered.pop(thread_id, ()):
                    self.neighbours.pop(message_id, None)
        self.epoch += 1
        for row in rows:
            tally: Mapping[str, int]
            if len(row) == 4:
                message_id, thread_id, resource_id, tokens = row
                words = tokens.split()
                length, tally = len(words), Counter(words)
            else:
                message_id, thread_id, resource_id, length, tally = row
            if length <= 0 or message_id in self._docs or not self.holds(row):
                continue
            doc = len(self.ids)
            self._docs[message_id] = doc
            self.ids.append(message_id)
            self.threads.append(thread_id)
            self.thread_sizes[thread_id] += 1
            self.resources.append(resource_id)
            self._lengths.append(float(length))
            self._lengths_array = None
            self.words += length
            for word, n in tally.items():
                entry = postings.get(word)
                if entry is None:
                    entry = self._entry(word)
                    if entry is None:
                        entry = postings[word] = _Postings()
                entry.docs.append(doc)
                entry.counts.append(n)
                entry.stale = True
            self.size += len(tally)
        if self._built is not None and self._built.rows != len(self.ids):
            self._built.forget_scores()
        if pairs is not None:
            self._patch(rows, pairs)

    def _patch(self, rows: Sequence[Row | CountedRow], pairs: Mapping[str, tuple[str | None, str | None]]) -> None:
        """Bring the neighbours kept in the threads of ``rows`` up to date once those messages were inserted: each
        new message's pair as read, and a kept message now beside one of them pointing at it (only insertions
        happened: a deletion or a reordering is not an append). A thread none of whose neighbours were kept stays
        unread."""
        fresh = {row[0] for row in rows}
        known = self.neighbours
        for row in rows:
            message_id, pair = row[0], pairs.get(row[0])
            if row[1] not in self._remembered:
                continue
            if pair is None:  # (not read: what its thread kept is forgotten)
                for kept in self._remembered.pop(row[1]):
                    known.pop(kept, None)
                continue
            self.remember(message_id, pair)
            before, after = pair
            if before is not None and before not in fresh and (held := known.get(before)) is not None:
                known[before] = (held[0], message_id)
            if after is not None and after not in fresh and (held := known.get(after)) is not None:
                known[after] = (message_id, held[1])

    def matches(self, terms: Sequence[str], limit: int, *, counts: bool = True) -> KeywordMatches:
        """The scope's statistics for ``terms`` and its best ``limit`` candidates by BM25 (k1 1.2, b 0.75) over the
        rarest :data:`KEYWORD_TERMS` words times the square root of their idf coverage; without ``counts`` their
        word counts are left empty (a quarter of the work, which a caller reading the scores alone never needs)."""
        n = len(self.ids)
        frequencies: dict[str, int] = {}
        if not n:
            return KeywordMatches(0, 0.0, dict.fromkeys(lexemes_of(terms), 0), [])
        average = self.words / n
        if self._lengths_array is None:  # each message's BM25 length norm, k1 (0.25 + 0.75 length / average)
            self._lengths_array = 1.2 * (0.25 + 0.75 * np.asarray(self._lengths, dtype=_F64) / average)
        norm = self._lengths_array
        built = self._built
        if built is not None and built.rows == n:
            kept, scored = self._built_words(built, norm, terms, frequencies)
        else:
            kept, scored = self._grown_words(norm, terms, frequencies)
        if not scored:
            return KeywordMatches(n, average, frequencies, [])
        # One numpy call a step whatever the number of words (a search's cost is mostly calls, not elements).
        if len(scored) == 1:
            docs, parts = scored[0][0], scored[0][2]
        else:
            docs = np.concatenate([p[0] for p in scored])
            parts = np.concatenate([p[2] for p in scored])
        # BM25 (k1 1.2, b 0.75) with FTS5's idf floor, times the square root of the idf coverage (keyword_ranking's).
        bm25 = np.bincount(docs, weights=parts, minlength=n)
        hit = np.flatnonzero(bm25)  # every message holding a kept word, even one scoring 0
        covers = [p[3] for p in scored]
        total = sum(covers)
        values = bm25[hit]
        if total > 0 and len(scored) > 1:  # (one word: every hit holds all of the query's idf)
            weights = np.repeat(np.array(covers, dtype=_F64), [len(p[0]) for p in scored])
            values *= np.sqrt(np.bincount(docs, weights=weights, minlength=n)[hit] / total)
        values = np.round(values, SCORE_DIGITS)  # ties stay ties whatever the order of the sums
        if len(hit) > max(limit, _SORTED_WHOLE):  # the best `limit`, and every message tying with the last of them
            near = values >= -np.partition(-values, limit - 1)[limit - 1]
            hit, values = hit[near], values[near]
        order = np.lexsort((hit, -values))[:limit]  # best first; ties in the order the messages were indexed
        hit, values = hit[order], values[order]
        tallies: list[dict[str, int]] = [{} for _ in range(len(hit))]
        if counts:
            which = np.repeat(np.arange(len(kept)), [frequencies[lexeme] for lexeme in kept])  # each posting's word
            tf = np.concatenate([p[1] for p in scored])
            row_of = np.full(n, -1, dtype=np.int64)
            row_of[hit] = np.arange(len(hit))
            rows = row_of[docs]
            picked = np.flatnonzero(rows >= 0)  # the hits' postings: their counts
            for row, word, value in zip(rows[picked].tolist(), map(kept.__getitem__, which[picked].tolist()),
                                        tf[picked].astype(np.int64).tolist(), strict=True):
                tallies[row][word] = value
        ids, threads, resources, sizes_of = self.ids, self.threads, self.resources, self._lengths
        candidates = [KeywordCandidate(ids[doc], threads[doc], resources[doc], int(sizes_of[doc]), tallies[row], value)
                      for row, (doc, value) in enumerate(zip(hit.tolist(), values.tolist(), strict=True))]
        return KeywordMatches(n, average, frequencies, candidates)

    @staticmethod
    def _built_words(built: _Built, norm: npt.NDArray[np.float64], terms: Sequence[str],
                     frequencies: dict[str, int]) -> tuple[list[str], list[_Scored]]:
        """The rarest :data:`KEYWORD_TERMS` of the query's lexemes the block holds, scored, while it holds only the
        rows it was built with: slices of the arrays scored for all its words at once (no object a word, so a word
        a scope was never searched for costs no more than one it was)."""
        whole = built.scores(norm)
        words = built.words
        present: list[tuple[int, int, str, _Scored]] = []  # (messages holding it, query order, stem, scored)
        for lexeme in lexemes_of(terms):
            word = words.get(lexeme)
            if word is None:
                run = built.run(lexeme)
                if run is None:
                    frequencies[lexeme] = 0
                    continue
                number, start, end = run
                parts, covers = whole
                word = words[lexeme] = (built.docs[start:end], built.counts[start:end], parts[start:end],
                                        float(covers[number]))
            size = frequencies[lexeme] = len(word[0])
            present.append((size, len(present), lexeme, word))
        present.sort()
        del present[KEYWORD_TERMS:]
        return [lexeme for _, _, lexeme, _ in present], [word for _, _, _, word in present]

    def _grown_words(self, norm: npt.NDArray[np.float64], terms: Sequence[str],
                     frequencies: dict[str, int]) -> tuple[list[str], list[_Scored]]:
        """As :meth:`_built_words`, once rows joined the block: each word's postings, scored and kept."""
        n = len(self.ids)
        present: list[tuple[int, int, str, _Postings]] = []  # (messages holding it, query order, stem, postings)
        for lexeme in lexemes_of(terms):
            entry = self._entry(lexeme)
            size = frequencies[lexeme] = 0 if entry is None else len(entry.base_docs) + len(entry.docs)
            if entry is not None and size:
                present.append((size, len(present), lexeme, entry))
        if not present:
            return [], []
        present.sort()
        del present[KEYWORD_TERMS:]
        entries = [entry for _, _, _, entry in present]
        stale = [entry for entry in entries if not entry.current(norm)]
        if stale:  # (after rows joined, every word: one pass for all)
            _score_together(stale, norm, n)
        return [lexeme for _, _, lexeme, _ in present], [entry.scored(norm, n) for entry in entries]


class KeywordBlocks:
    """Blocks by scope token with the version they hold (see the module docstring); thread-safe."""

    def __init__(self, budget: int = BLOCK_BUDGET) -> None:
        self._budget = budget
        self._blocks: OrderedDict[str, tuple[Version, KeywordBlock]] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()
        #: Blocks built (a scope's rows read whole), and brought up to date with what another process added.
        self.built = 0
        self.followed = 0

    def matches(self, token: str, version: Version, owner: Owner, terms: Sequence[str], limit: int, *,
                most: int | None = None, counts: bool = True) -> tuple[KeywordMatches, KeywordBlock, int] | None:
        """What the block of ``token`` answers for ``terms`` if it holds ``version`` of ``owner``'s scope (and at
        most ``most`` messages), with the block and its epoch then (``counts``: as :meth:`KeywordBlock.matches`)."""
        with self._lock:  # a fold may be extending this very block on the writer thread
            entry = self._blocks.get(token)
            if entry is None or entry[0] != version or entry[1].owner != owner:
                return None
            if most is not None and len(entry[1].ids) > most:
                return None
            self._blocks.move_to_end(token)
            return entry[1].matches(terms, limit, counts=counts), entry[1], entry[1].epoch

    def neighbours(self, block: KeywordBlock, epoch: int, message_ids: Sequence[str],
                   read: Callable[[list[str]], Mapping[str, tuple[str | None, str | None]]],
                   ) -> dict[str, tuple[str | None, str | None]]:
        """The neighbours of ``message_ids``: those ``block`` kept while it held the version it held at ``epoch``
        (the version the caller's read sees), the others ``read`` (which may answer for more messages: what it read
        of the block's is kept in it too) and kept in it (for callers on several threads: a fold may be extending
        the block meanwhile)."""
        known = block.neighbours
        cached = {mid: known[mid] for mid in message_ids if mid in known}
        if block.epoch != epoch:  # rows joined the block since the caller's version: nothing kept is the caller's
            cached = {}
        missing = [mid for mid in message_ids if mid not in cached]
        fresh = read(missing) if missing else {}
        with self._lock:
            if block.epoch == epoch:
                for mid, pair in fresh.items():
                    block.remember(mid, pair)
                for mid in missing:
                    if mid not in fresh:
                        block.remember(mid, None)
        found = {mid: pair for mid, pair in cached.items() if pair is not None}
        found.update((mid, fresh[mid]) for mid in missing if mid in fresh)
        return found

    def cached_neighbours(self, block: KeywordBlock, epoch: int,
                          message_ids: Sequence[str]) -> dict[str, tuple[str | None, str | None]] | None:
        """The neighbours of ``message_ids`` if ``block``, still at ``epoch``, kept all of them (else None)."""
        with self._lock:
            if block.epoch != epoch:
                return None
            pairs = list(map(block.neighbours.get, message_ids, repeat(_UNKNOWN)))
        if _UNKNOWN in pairs:
            return None
        return {mid: pair for mid, pair in zip(message_ids, pairs, strict=True) if pair is not None}

    def kept_times(self, token: str, version: Version, owner: Owner, message_ids: Sequence[str]) -> dict[str, datetime]:
        """The creation times of ``message_ids`` that the block of ``token`` kept, if it holds ``version`` of
        ``owner``'s scope (else none)."""
        with self._lock:
            entry = self._blocks.get(token)
            if entry is None or entry[0] != version or entry[1].owner != owner:
                return {}
            created = entry[1].created
            return {mid: created[mid] for mid in message_ids if mid in created}

    def remember_times(self, token: str, version: Version, owner: Owner, times: Mapping[str, datetime]) -> None:
        """Keep the creation times of the block's messages among ``times`` (read while the scope of ``token`` was at
        ``version``) if the block holds that version."""
        with self._lock:
            entry = self._blocks.get(token)
            if entry is None or entry[0] != version or entry[1].owner != owner:
                return
            block = entry[1]
            block.created.update((mid, at) for mid, at in times.items() if mid in block)

    def remember(self, token: str, version: Version, pairs: Mapping[str, tuple[str | None, str | None]]) -> bool:
        """Keep ``pairs`` (neighbours as the scope's ``version`` has them) in the block of ``token`` if it holds that
        version (its own messages only); whether it does."""
        with self._lock:
            entry = self._blocks.get(token)
            if entry is None or entry[0] != version:
                return False
            block = entry[1]
            for message_id, pair in pairs.items():
                block.remember(message_id, pair)
            return True

    def get(self, token: str, version: Version, owner: Owner) -> KeywordBlock | None:
        """The block of ``token`` if it holds ``version`` of ``owner``'s scope (for callers on one thread, which
        score it themselves)."""
        with self._lock:
            entry = self._blocks.get(token)
            if entry is None or entry[0] != version or entry[1].owner != owner:
                return None
            self._blocks.move_to_end(token)
            return entry[1]

    def part_of(self, token: str, version: Version, owner: Owner, part: Owner) -> KeywordBlock | None:
        """:meth:`KeywordBlock.part` of the block of ``token`` for the thread ``part`` names, if that block holds
        ``version`` of ``owner``'s scope (made under the lock: a fold may be extending it)."""
        with self._lock:
            entry = self._blocks.get(token)
            if entry is None or entry[0] != version or entry[1].owner != owner:
                return None
            return entry[1].part(part, part[1])

    def holds_thread(self, thread_id: str, resource: str | None = None) -> bool:
        """Whether a resource's block that can follow its scope by row versions holds messages of the thread (the
        block of ``resource``, a token, else any): :meth:`part_by_marks` may then make its part."""
        with self._lock:
            return self._source(thread_id, resource) is not None

    def part_by_marks(self, thread_id: str, part: Owner, marks: Mapping[str, str],
                      resource: str | None = None) -> KeywordBlock | None:
        """:meth:`KeywordBlock.part` for ``part`` (the thread ``thread_id``'s scope) of the block of ``resource``
        (a token), else of the first resource's block found holding messages of the thread, if that block has seen
        each row of the thread's scope at the row version ``marks`` gives (PostgreSQL's ``xmin``: a row updated,
        moved or added since does not match; the caller checks the part holds every message of the scope)."""
        with self._lock:
            source = self._source(thread_id, resource)
            if source is None:
                return None
            lineage = source.lineage
            assert isinstance(lineage, dict)
            if any(lineage.get(mid) != mark for mid, mark in marks.items()):
                return None
            return source.part(part, thread_id)

    def _source(self, thread_id: str, resource: str | None) -> KeywordBlock | None:
        """(under the lock) The resource's block :meth:`part_by_marks` takes a thread's part from."""
        if resource is not None:
            entry = self._blocks.get(resource)
            source = None if entry is None else entry[1]
        else:
            source = next((block for _, block in self._blocks.values()
                           if block.owner[0] == RESOURCE and block.thread_sizes.get(thread_id)), None)
        if source is None or source.owner[0] != RESOURCE or not isinstance(source.lineage, dict) or \
                not source.thread_sizes.get(thread_id):
            return None
        return source

    def held(self, token: str, owner: Owner) -> tuple[Version, KeywordBlock] | None:
        """The block of ``token`` with the version it holds, whatever that is, if it is ``owner``'s."""
        with self._lock:
            entry = self._blocks.get(token)
            return entry if entry is not None and entry[1].owner == owner else None

    def following(self, token: str, owner: Owner) -> tuple[Version, Lineage, list[str]] | None:
        """The version and the lineage of ``owner``'s block of ``token``, and the threads whose neighbours it
        keeps (those a message of no words joining changes), read together (a fold on the writer thread may be
        extending it); None: no such block, or one that cannot follow its scope."""
        with self._lock:
            entry = self._blocks.get(token)
            if entry is None or entry[1].owner != owner or entry[1].lineage is None:
                return None
            return entry[0], entry[1].lineage, list(entry[1].remembered_threads())

    def catch_up(self, token: str, old: Version, new: Version, lineage: Lineage,
                 rows: Sequence[Row | CountedRow], pairs: Mapping[str, tuple[str | None, str | None]] | None,
                 docs: int, words: int) -> bool:
        """The block of ``token``, still at ``old``, takes the ``rows`` it does not hold (read at ``new``: the
        scope's messages added since, see ``_fts._caught_up``; ``pairs``: their neighbours then, if read) and holds
        ``new`` with ``lineage`` if it then has the scope's ``docs`` and ``words``; else it is dropped. Whether it
        holds ``new``."""
        with self._lock:
            entry = self._blocks.get(token)
            if entry is None or entry[0] != old:
                return False
            block = entry[1]
            before = block.size
            block.extend([row for row in rows if row[0] not in block], pairs)
            self._size += block.size - before
            if len(block.ids) != docs or block.words != words:
                self._drop(token)
                return False
            block.lineage = lineage
            self.followed += 1
            self._blocks[token] = (new, block)
            self._blocks.move_to_end(token)
            self._shrink()
            return True

    def put(self, token: str, version: Version, block: KeywordBlock) -> None:
        """Keep ``block`` as holding ``version`` (unless it alone is over the budget)."""
        with self._lock:
            self.built += 1
            self._drop(token)
            if block.size > self._budget:
                return
            self._blocks[token] = (version, block)
            self._size += block.size
            self._shrink()

    def tokens(self, most: int) -> list[str]:
        """The tokens of the ``most`` most recently used blocks."""
        with self._lock:
            blocks = self._blocks
            if len(blocks) <= most:
                return list(blocks)
            return list(reversed([token for token, _ in zip(reversed(blocks), range(most), strict=False)]))

    def advance(self, token: str, old: Version, new: Version, rows: Sequence[Row | CountedRow] | None) -> None:
        """A committed change took the scope of ``token`` from version ``old`` to ``new``, adding ``rows`` only
        (None: anything else changed). A block holding ``old`` takes the rows that are of its scope; one holding
        ``new`` already (a search built it meanwhile) stays; any other is dropped."""
        with self._lock:
            entry = self._blocks.get(token)
            if entry is None or entry[0] == new:
                return
            version, block = entry
            if rows is None or version != old or any(row[0] in block for row in rows):
                self._drop(token)
                return
            before = block.size
            block.extend(rows)
            self._blocks[token] = (new, block)
            self._size += block.size - before
            self._shrink()

    def advance_all(self, advances: Iterable[tuple[str, Version, Version, Sequence[Row | CountedRow] | None]]) -> None:
        """:meth:`advance` for each scope a committed write changed."""
        for token, old, new, rows in advances:
            self.advance(token, old, new, rows)

    def drop(self, token: str) -> None:
        """Forget the block of ``token`` (its scope changed in a way it cannot follow)."""
        with self._lock:
            self._drop(token)

    def version_of(self, token: str) -> Version | None:
        """The version the block of ``token`` holds (None: no block)."""
        with self._lock:
            entry = self._blocks.get(token)
            return None if entry is None else entry[0]

    def clear(self) -> None:
        with self._lock:
            self._blocks.clear()
            self._size = 0

    def __len__(self) -> int:
        return len(self._blocks)

    def _drop(self, token: str) -> None:
        entry = self._blocks.pop(token, None)
        if entry is not None:
            self._size -= entry[1].size

    def _shrink(self) -> None:
        while self._size > self._budget and self._blocks:
            _, (_, old) = self._blocks.popitem(last=False)
            self._size -= old.size
