"""The SQLite keyword index: an FTS5 table beside Mastra's messages, fed through a queue written with the rows.

``threadmind_keywords`` (FTS5, tokenizer ``porter unicode61 remove_diacritics 2``) holds one row per message with
words: ``text`` (the message's indexed text), ``scope`` (two number tokens standing for its resource and its
thread), ``message_id`` and ``words`` (its length in words; neither indexed). Its rowid is the message's rowid in
``mastra_messages``. ``threadmind_keyword_scopes`` keeps, per scope token, how many indexed messages it has, how
many words they hold and a version (random, new with every change), so a search has its scope's statistics without
reading the scope (BM25 is computed with the scope's statistics, not the whole file's: one tenant's words do not
weigh another's) and knows whether a block it holds is current.

**Writes.** An FTS5 write costs most of a small save (every transaction that touches the table flushes a new
segment: about 100 µs here, against about 35 µs for the whole save of one message). So a save, an update or a
thread moved to another resource only appends the ids of the messages whose words changed to
``threadmind_keyword_queue``, in the same transaction as the rows; :func:`fold` later indexes them in one batch
(about 11 µs a message) from the rows as they are then. A search folds whatever is queued before it reads, so a
message is findable by words in every process once its save returned, and the queue stays short. Deleting
messages or a thread drops their index rows at once (a queued id whose message is gone is skipped).

**Searches.** A scope of at most :data:`BLOCK_SCOPE` messages is searched from a :class:`KeywordBlock` (its rows in
memory, scored with numpy; ``_keyword_blocks``), built from the index at its first search and used while the
scope's version in ``threadmind_keyword_scopes`` is the one it holds (every write to the scope, in any process,
gives it a new one). Larger scopes are searched in FTS5: the scope token is matched with the query's words (``scope
: "1…" AND text : ("w1" OR "w2" …)``), so FTS5 visits only messages of the scope: one count per word (its document
frequency in the scope), then the best candidates by FTS5's own bm25, ranked again by ``keyword_ranking``. Either
way a row is kept only if its id, thread and resource are exactly the scope's (a collision of two scope numbers, or
a row Mastra rewrote meanwhile, can never return another resource's message). The same read can also fetch the
neighbours of the candidates and of other messages (hybrid recall's reply smoothing needs them): one trip. A block
keeps its messages' neighbours (at a miss, their whole threads are read in index order, about 0.5 µs a message; a
thread's block is built from its messages read in order, so it has them all from the start);
every insert, deletion or reordering of a message of the scope, words or not, gives the scope a new version, and
rows joining a block forget the neighbours kept in their threads.

**Following other processes.** A scope's row also keeps a lineage (``base``), which a change keeps only when it
adds messages past the highest rowid the scope ever took (``last_rowid``) and the scope's previous change was
written by this code too (``stamped`` is the version it wrote; a writer that does not know these columns leaves
them behind, and its change is never taken for an append). A block built or followed at a version of the same
lineage is brought up to date by reading the scope's messages past the ``last_rowid`` it saw (FTS5 by scope token
and rowid; messages of no words, in the threads whose neighbours it keeps) with their neighbours
(:func:`_caught_up`): with several processes on one file, a search after another process's save reads that save's
messages, not the scope. Any other change starts a new lineage, and the scope is read whole again; but messages of
no words that the catch-up finds without an index row (a process's start finds those saved since the last) keep it
(``_apply``).

**Without a trip.** While no other process has the file open (``SQLiteStore.cache_epoch``) and nothing was written
through this process's store objects on it since a scope's block last answered a search (their shared write
count), the block is still the scope's: a search of a scope of at most :data:`MEMORY_SCOPE` messages whose
neighbours are all kept is answered on the caller's thread (:func:`search_in_memory`).

**Rows Mastra wrote** (it does not know these tables) are indexed by :func:`catch_up_batch`: in bounded batches,
the messages past a watermark (``threadmind_meta``: ``keywords_through``) that have no index row, one short write
transaction each that re-reads the watermark, so processes opening one file at once share the work.
"""

from __future__ import annotations

import hashlib
import secrets
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import msgspec

from .._keyword_blocks import RESOURCE, THREAD, KeywordBlock, KeywordBlocks, Owner, Row
from .._keywords import (
    KEYWORD_TERMS,
    NO_MATCHES,
    KeywordCandidate,
    KeywordMatches,
    Neighbours,
    count_words,
    idf,
    indexed_text,
    keyword_ranking,
    lexemes_of,
    stem,
    text_tokens,
)
from .._memo import memo
from ._rows import chunks, message_from_row, placeholders

__all__ = ("CATCH_UP_BATCH", "Advance", "FOLD_BATCH", "KEYWORD_DDL", "catch_up_batch", "delete_keywords_of_ids",
           "delete_keywords_of_thread", "enqueue", "enqueue_thread", "fold", "fts5_available", "keyword_backlog",
           "neighbour_ids", "queued", "scope_token", "scope_versions", "search_in_memory", "search_keywords",
           "thread_neighbours")

KEYWORD_DDL = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS threadmind_keywords USING fts5("
    "text, scope, message_id UNINDEXED, words UNINDEXED, tokens UNINDEXED, "
    "tokenize = 'porter unicode61 remove_diacritics 2')",
    "CREATE TABLE IF NOT EXISTS threadmind_keyword_queue (seq INTEGER PRIMARY KEY, message_id TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS threadmind_keyword_scopes (token TEXT PRIMARY KEY, docs INTEGER NOT NULL, "
    "words INTEGER NOT NULL, version INTEGER NOT NULL DEFAULT 0, base INTEGER NOT NULL DEFAULT 0, "
    "last_rowid INTEGER NOT NULL DEFAULT 0, stamped INTEGER NOT NULL DEFAULT 0)",
)
SCOPE_COLUMNS = ("version", "base", "last_rowid", "stamped")
"""Columns of ``threadmind_keyword_scopes`` after ``docs`` and ``words``, each added in place to a file made
before it (``create_schema``)."""
BLOCK_SCOPE = 20_000
"""A scope of at most this many messages is searched from a :class:`KeywordBlock` kept in memory (built from
the index at its first search, about 15 µs a message, and kept up to date by this process's folds)."""
Advance = tuple[str, int, int, list[Row] | None]
"""A scope token's version before and after a committed write, and the rows it only added (None: not only)."""
CATCH_UP_BATCH = 5000
"""Messages looked at per catch-up batch (one short write transaction each); only those without an index row are
read whole, at most :data:`CATCH_UP_READS` a batch."""
CATCH_UP_READS = 500
FOLD_BATCH = 2000
"""Queued ids indexed per fold transaction."""
MEMORY_SCOPE = 2000
"""A scope of at most this many messages, unchanged since its last search, is searched on the caller's thread
without a trip to the database (its block scores in about 0.1 ms per 500 messages)."""
THREAD_FILL = 2000
"""A thread of which a block holds at most this many messages has its neighbours read whole at the first miss."""
CAUGHT_UP_PAIRS = 64
"""Messages another process added to a scope whose neighbours a block following it reads with them, at most."""
SMALL_SCOPE = 5000
"""A scope of at most this many messages is searched whole (every match counted here); a larger one is asked for
its document frequencies first and its best candidates by FTS5's bm25."""

_WATERMARK = "keywords_through"
# Reads of whole index rows go to FTS5's content table (``threadmind_keywords_content``: the rows as inserted, by
# rowid, one column ``c<i>`` per column of the table in declared order): 40 % faster than the same columns read
# through the virtual table, which fetches each row from there one statement at a time.
_CONTENT = "threadmind_keywords_content"
_C_SCOPE, _C_ID, _C_WORDS, _C_TOKENS = "c1", "c2", "c3", "c4"  # scope, message_id, words, tokens
_MESSAGE_COLS = 'id, content, role, type, "createdAt", thread_id, "resourceId", rowid'


def fts5_available(conn: sqlite3.Connection) -> bool:
    """Whether this SQLite was built with FTS5."""
    return any(row[0] == "ENABLE_FTS5" for row in conn.execute("PRAGMA compile_options"))


def _digits(value: str) -> str:
    # Digits only: the porter stemmer leaves them alone (a letter suffix could be stemmed into another scope).
    digest = int.from_bytes(hashlib.blake2b(value.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "big")
    return f"{digest % 10**18:018d}"


# a search names its scope's token three times; a hash costs 3-4 us
_TOKENS = {"1": memo(lambda value: "1" + _digits(value), 16_384), "2": memo(lambda value: "2" + _digits(value), 16_384)}


def _token(kind: str, value: str) -> str:
    return _TOKENS[kind](value)


def _scope(resource_id: str, thread_id: str) -> str:
    return f"{_token('1', resource_id)} {_token('2', thread_id)}"


# -- writes ----------------------------------------------------------------------------------------------


def enqueue(conn: sqlite3.Connection, ids: Iterable[str]) -> None:
    """(writer, with the rows) These messages' words may have changed: index them at the next fold."""
    queued = list(dict.fromkeys(ids))
    for chunk in chunks(queued):
        conn.execute("INSERT INTO threadmind_keyword_queue (message_id) VALUES "
                     + ",".join(["(?)"] * len(chunk)), chunk)


def enqueue_thread(conn: sqlite3.Connection, thread_id: str) -> None:
    """(writer) Every message of the thread (it moved to another resource)."""
    conn.execute("INSERT INTO threadmind_keyword_queue (message_id) "
                 "SELECT id FROM mastra_messages WHERE thread_id = ?", (thread_id,))


def delete_keywords_of_ids(conn: sqlite3.Connection, ids: Sequence[str]) -> None:
    """(writer, before the rows are deleted) Drop the index rows of these messages."""
    for chunk in chunks(ids):
        _drop(conn, f"SELECT rowid FROM mastra_messages WHERE id IN ({placeholders(len(chunk))})", chunk)


def delete_keywords_of_thread(conn: sqlite3.Connection, thread_id: str) -> None:
    """(writer, before the thread's rows are deleted) Drop the index rows of the thread's messages."""
    _drop(conn, "SELECT rowid FROM mastra_messages WHERE thread_id = ?", (thread_id,))


def _scopes_of(conn: sqlite3.Connection, rowids_sql: str, params: Sequence[object]) -> dict[str, list[int]]:
    """Zero changes for the scopes of the messages whose rowids the query selects (as ``_index_rows`` files them)."""
    deltas: dict[str, list[int]] = {}
    for thread_id, resource_id in conn.execute(
            "SELECT DISTINCT m.thread_id, coalesce(nullif(m.\"resourceId\", ''), t.\"resourceId\", '') "
            "FROM mastra_messages AS m LEFT JOIN mastra_threads AS t ON t.id = m.thread_id "
            f"WHERE m.rowid IN ({rowids_sql})", params):
        _count(deltas, _scope(resource_id, thread_id or ""), 0, 0)
    return deltas


def _drop(conn: sqlite3.Connection, rowids_sql: str, params: Sequence[object]) -> None:
    """Delete the index rows whose rowids the query selects, taking them out of their scopes' statistics; every
    scope of those messages (with words or not) gets a new version."""
    deltas = _scopes_of(conn, rowids_sql, params)
    old = conn.execute(f"SELECT scope, words FROM threadmind_keywords WHERE rowid IN ({rowids_sql})",
                       params).fetchall()
    if old:
        conn.execute(f"DELETE FROM threadmind_keywords WHERE rowid IN ({rowids_sql})", params)
    for scope, words in old:
        _count(deltas, scope, -1, -int(words))
    if deltas:
        _apply(conn, deltas)


def _count(deltas: dict[str, list[int]], scope: str, docs: int, words: int) -> None:
    for token in scope.split():
        entry = deltas.setdefault(token, [0, 0])
        entry[0] += docs
        entry[1] += words


def _apply(conn: sqlite3.Connection, deltas: dict[str, list[int]], appended: dict[str, tuple[int, int]] | None = None,
           quiet: dict[str, int] | None = None) -> dict[str, tuple[int, int]]:
    """Add ``deltas`` to the scopes' statistics and give every touched scope a new version (random: a version
    rolled back with its transaction is never reused); returns each token's (old, new) version.

    ``appended``: per token, the lowest and highest rowid of the messages this change added to the scope, when it
    only added messages (words or not). Such a change keeps the scope's lineage (``base``) if every one of them is
    past the scope's ``last_rowid`` (the highest rowid it ever took) and the scope's last change was written by this
    code (``stamped`` is its version: a writer that does not know these columns leaves them behind); any other
    change gives it a new one. So a reader holding a block at an earlier version of the same lineage reads only the
    rows past the ``last_rowid`` it saw (``_appended``).

    ``quiet``: per token, the highest rowid of the messages of no words the catch-up found without an index row
    (those this code folded, and those Mastra wrote). They keep the lineage wherever they are: a block of an earlier
    version either read its threads' order after such a message was written (a rowid below the ``last_rowid`` it
    saw: there before it), or reads it with the messages past that rowid (``_appended`` reads every message of the
    threads whose neighbours it keeps); so a restart's catch-up never sends other processes to read the scopes
    whole again."""
    tokens = list(deltas)
    old: dict[str, tuple[int, int, int, int]] = {}
    for some in chunks(tokens):
        old.update((token, (version, base, top, stamped)) for token, version, base, top, stamped in conn.execute(
            "SELECT token, version, base, last_rowid, stamped FROM threadmind_keyword_scopes WHERE token IN "
            f"({placeholders(len(some))})", some))
    appended, quiet = appended or {}, quiet or {}
    versions: dict[str, tuple[int, int]] = {}
    rows: list[tuple[str, int, int, int, int, int]] = []
    for token, (docs, words) in deltas.items():
        version, base, top, stamped = old.get(token, (0, 0, 0, 0))
        new = secrets.randbits(62) + 1
        span, loose = appended.get(token), quiet.get(token)
        if stamped != version or (span[0] <= top if span is not None else loose is None):
            base = secrets.randbits(62) + 1
        versions[token] = (version, new)
        rows.append((token, docs, words, new, base, max(top, span[1] if span is not None else 0, loose or 0)))
    for part in chunks(rows, 150):
        conn.execute("INSERT INTO threadmind_keyword_scopes (token, docs, words, version, base, last_rowid, stamped) "
                     "VALUES "
                     + ",".join(["(?,?,?,?,?,?,?)"] * len(part)) + " ON CONFLICT (token) DO UPDATE SET "
                     "docs = docs + excluded.docs, words = words + excluded.words, version = excluded.version, "
                     "base = excluded.base, last_rowid = max(last_rowid, excluded.last_rowid), "
                     "stamped = excluded.stamped",
                     [v for r in part for v in (*r, r[3])])
    return versions


def _owners(conn: sqlite3.Connection, thread_ids: Iterable[str]) -> dict[str, str]:
    owners: dict[str, str] = {}
    for chunk in chunks(list(dict.fromkeys(thread_ids))):
        owners.update(conn.execute(
            f'SELECT id, "resourceId" FROM mastra_threads WHERE id IN ({placeholders(len(chunk))})', chunk))
    return owners


def _index_rows(conn: sqlite3.Connection, rows: Sequence[tuple[Any, ...]],
                caught_up: bool = False) -> tuple[int, list[Advance]]:
    """Index message rows (``_MESSAGE_COLS``) as they are now, keeping the scopes' statistics; returns the index
    rows written and how each touched scope changed. ``caught_up``: the rows are the catch-up's (messages without
    an index row), whose messages of no words keep their scopes' lineages (``_apply``'s ``quiet``)."""
    owners = _owners(conn, (str(r[5]) for r in rows if not r[6]))
    fresh: list[tuple[int, str, str, str, int, str]] = []
    added: dict[str, list[Row]] = {}
    spans: dict[str, tuple[int, int]] = {}  # per scope token, the lowest and highest rowid it takes
    quiet: dict[str, int] = {}  # per scope token, the highest rowid of the catch-up's messages of no words
    deltas: dict[str, list[int]] = {}
    for r in rows:
        try:
            message = message_from_row(r)
        except Exception:  # a row that does not decode is reported where it is read: nothing to index
            continue
        text = indexed_text(message)
        thread_id = message.thread_id or ""
        tokens = text_tokens(text) if text else []
        scope = _scope(message.resource_id or owners.get(thread_id, ""), thread_id)
        resource_id = r[6] if r[6] is not None else owners.get(thread_id, "")  # as _scope_rows reads it
        joined = " ".join(tokens)
        if tokens:
            fresh.append((r[7], text, scope, r[0], len(tokens), joined))
        else:  # not indexed, but its thread's order changed: its scopes get new versions all the same
            _count(deltas, scope, 0, 0)
        rowid = int(r[7])
        for token in scope.split():  # (a block takes no row of no words, but forgets its thread's neighbours)
            added.setdefault(token, []).append((r[0], thread_id, resource_id, joined))
            if caught_up and not tokens:
                quiet[token] = max(quiet.get(token, rowid), rowid)
                continue
            low, high = spans.get(token, (rowid, rowid))
            spans[token] = (min(low, rowid), max(high, rowid))
    rowids = [r[7] for r in rows]
    removed: set[str] = set()
    for chunk in chunks(rowids):  # what the rows held before: out of their scopes' statistics
        marks = placeholders(len(chunk))
        for scope, words in conn.execute(f"SELECT scope, words FROM threadmind_keywords WHERE rowid IN ({marks})",
                                         chunk):
            _count(deltas, scope, -1, -int(words))
            removed.update(scope.split())
        conn.execute(f"DELETE FROM threadmind_keywords WHERE rowid IN ({marks})", chunk)
    for chunk in chunks(fresh, 200):
        conn.execute("INSERT INTO threadmind_keywords (rowid, text, scope, message_id, words, tokens) VALUES "
                     + ",".join(["(?,?,?,?,?,?)"] * len(chunk)), [v for row in chunk for v in row])
    for _, _, scope, _, count, _ in fresh:
        _count(deltas, scope, 1, count)
    versions = _apply(conn, deltas, {token: span for token, span in spans.items() if token not in removed},
                      {token: high for token, high in quiet.items() if token not in removed})
    return len(fresh), [(token, old, new, None if token in removed else added.get(token))
                        for token, (old, new) in versions.items()]


def fold(conn: sqlite3.Connection, size: int = FOLD_BATCH) -> tuple[int, list[Advance]]:
    """(writer) Index up to ``size`` queued ids from their rows as they are now; returns the ids taken (0: the
    queue was empty) and how the scopes changed."""
    taken = conn.execute("SELECT seq, message_id FROM threadmind_keyword_queue ORDER BY seq LIMIT ?",
                         (size,)).fetchall()
    if not taken:
        return 0, []
    ids = list(dict.fromkeys(mid for _, mid in taken))
    rows: list[tuple[Any, ...]] = []
    for chunk in chunks(ids):
        rows.extend(conn.execute(
            f"SELECT {_MESSAGE_COLS} FROM mastra_messages WHERE id IN ({placeholders(len(chunk))})", chunk))
    rows.sort(key=lambda row: int(row[7]))  # in rowid order, as a block read from the index has them (ties)
    _, advances = _index_rows(conn, rows)
    conn.execute("DELETE FROM threadmind_keyword_queue WHERE seq <= ?", (taken[-1][0],))
    return len(taken), advances


# -- reads -----------------------------------------------------------------------------------------------


def scope_versions(conn: sqlite3.Connection, tokens: Sequence[str]) -> dict[str, int]:
    """(in a transaction) The current version of each of these scope tokens that has one."""
    out: dict[str, int] = {}
    for chunk in chunks(list(tokens)):
        out.update((token, int(version)) for token, version in conn.execute(
            f"SELECT token, version FROM threadmind_keyword_scopes WHERE token IN ({placeholders(len(chunk))})",
            chunk))
    return out


def queued(conn: sqlite3.Connection) -> bool:
    """(reader) Whether ids wait to be indexed."""
    return conn.execute("SELECT 1 FROM threadmind_keyword_queue LIMIT 1").fetchone() is not None


def _match(scope_token: str, terms: Sequence[str]) -> str:
    words = " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)
    return f'scope : "{scope_token}" AND text : ({words})'


def scope_token(resource_id: str | None, thread_id: str | None) -> str:
    """The token of the scope a search of the thread (when given) or else the resource reads."""
    return _token("2", thread_id) if thread_id is not None else _token("1", resource_id or "")


def search_in_memory(blocks: KeywordBlocks, version: int, terms: Sequence[str], resource_id: str | None,
                     thread_id: str | None, limit: int, neighbours_of: Sequence[str] | None, *,
                     counts: bool = True) -> KeywordMatches | None:
    """What :func:`search_keywords` answers, from the scope's block alone, when the caller knows the scope is still
    at ``version`` (nothing was written since it read it, and no other process has the file open); None when that
    needs the database (no block at that version, a block over :data:`MEMORY_SCOPE`, a neighbour not kept)."""
    if not terms or limit <= 0 or (resource_id is None and thread_id is None):
        return None
    owner: Owner = (THREAD, thread_id) if thread_id is not None else (RESOURCE, resource_id or "")
    answer = blocks.matches(scope_token(resource_id, thread_id), version, owner, terms, limit,
                            most=MEMORY_SCOPE, counts=counts)
    if answer is None:
        return None
    found, block, epoch = answer
    if thread_id is not None and resource_id is not None and any(c.resource_id != resource_id
                                                                 for c in found.candidates):
        return None
    if neighbours_of is None:
        return found
    # (an id named twice is looked up twice: cheaper than making the ids distinct first)
    neighbours = blocks.cached_neighbours(block, epoch, [candidate.message_id for candidate in found.candidates]
                                          + list(neighbours_of))
    return None if neighbours is None else msgspec.structs.replace(found, neighbours=neighbours)


def search_keywords(conn: sqlite3.Connection, terms: Sequence[str], resource_id: str | None, thread_id: str | None,
                    limit: int, *, folded: bool = False, blocks: KeywordBlocks | None = None,
                    neighbours_of: Sequence[str] | None = None,
                    checked: Callable[[str, int], object] | None = None, counts: bool = True,
                    ) -> KeywordMatches | None:
    """(reader) The scope's statistics and its best ``limit`` candidates, and with ``neighbours_of`` the neighbours
    of those and of these (see the module docstring); None when ids are queued (fold first; ``folded``: this
    search folded already, and ids queued since are of saves that had not returned when it began). ``blocks``:
    the store's cached scopes, used and filled for scopes up to :data:`BLOCK_SCOPE` messages; ``checked(token,
    version)`` is told when a block answered at the version this read saw."""
    if not folded and queued(conn):
        return None
    found, block = _matches(conn, terms, resource_id, thread_id, limit, blocks, checked, counts)
    if neighbours_of is None:
        return found
    ids = list(dict.fromkeys([candidate.message_id for candidate in found.candidates] + list(neighbours_of)))
    if block is None or blocks is None:
        return msgspec.structs.replace(found, neighbours=neighbour_ids(conn, ids))
    # The block holds the scope's version this read sees, and every insert, deletion or reordering of a message of
    # the scope gives the scope a new one: neighbours its messages had are still theirs.
    held, epoch = block
    neighbours = blocks.neighbours(held, epoch, ids, lambda missing: _neighbours_read(conn, held, missing))
    return msgspec.structs.replace(found, neighbours=neighbours)


def _matches(conn: sqlite3.Connection, terms: Sequence[str], resource_id: str | None, thread_id: str | None,
             limit: int, blocks: KeywordBlocks | None, checked: Callable[[str, int], object] | None = None,
             counts: bool = True) -> tuple[KeywordMatches, tuple[KeywordBlock, int] | None]:
    """The scope's answer, and the block that gave it with its epoch then (None: FTS5 answered; its candidates
    always carry their counts)."""
    lexemes = lexemes_of(terms)
    if not lexemes or limit <= 0 or (resource_id is None and thread_id is None):
        return NO_MATCHES, None
    owner: Owner = (THREAD, thread_id) if thread_id is not None else (RESOURCE, resource_id or "")
    token = _token("2", owner[1]) if thread_id is not None else _token("1", owner[1])
    stats = conn.execute("SELECT docs, words, version, base, last_rowid, stamped FROM threadmind_keyword_scopes "
                         "WHERE token = ?", (token,)).fetchone()
    docs, words, version, base, last, stamped = (int(v) for v in stats) if stats is not None else (0,) * 6
    lineage = (base, last) if stamped == version else None  # (None: last written by code that keeps none)
    if blocks is not None and docs <= BLOCK_SCOPE:
        answer = blocks.matches(token, version, owner, terms, limit, counts=counts)
        if answer is None and lineage is not None and _caught_up(conn, blocks, token, owner, version, lineage,
                                                                   docs, words):
            answer = blocks.matches(token, version, owner, terms, limit, counts=counts)
        if answer is None:
            if thread_id is not None:  # a thread: its words and its order in one read
                part = _thread_part(conn, blocks, owner, resource_id, docs, words)
                if part is None:
                    rows, order = _thread_rows(conn, thread_id)
                    block = KeywordBlock(owner, rows)
                else:  # its words from its resource's block: its order alone is read
                    block, order = part, thread_neighbours(conn, [thread_id])
                for message_id, pair in order.items():  # (only the block's own messages are kept)
                    block.remember(message_id, pair)
            else:
                block = KeywordBlock(owner, _scope_rows(conn, token))
            block.lineage = lineage
            # scored before it is shared with the writer
            answer = block.matches(terms, limit, counts=counts), block, block.epoch
            blocks.put(token, version, block)
        found, block, epoch = answer
        # A thread asked for within a resource: messages of the thread filed under another resource are left out.
        if thread_id is None or resource_id is None or all(c.resource_id == resource_id for c in found.candidates):
            if checked is not None:
                checked(token, version)
            return found, (block, epoch)
    average = words / docs if docs else 0.0
    wanted = frozenset(lexemes)
    if docs <= SMALL_SCOPE:
        # Every message of the scope holding a query word, counted here: the document frequencies come with them.
        candidates = _candidates(conn, token, list(lexemes.values()), resource_id, thread_id, wanted, None)
        frequencies = dict.fromkeys(lexemes, 0)
        for candidate in candidates:
            for lexeme in candidate.counts:
                frequencies[lexeme] += 1
        every = KeywordMatches(docs, average, frequencies, candidates)
        return KeywordMatches(docs, average, frequencies, keyword_ranking(every, limit)), None
    per_word = conn.execute("SELECT " + ", ".join(
        ["(SELECT count(*) FROM threadmind_keywords WHERE threadmind_keywords MATCH ?)"] * len(lexemes)),
        [_match(token, [term]) for term in lexemes.values()]).fetchone()  # one statement, a count per word
    frequencies = {lexeme: int(n) for lexeme, n in zip(lexemes, per_word, strict=True)}
    present = [term for lexeme, term in lexemes.items() if frequencies[lexeme]]
    # A word in half the scope's messages or more weighs nothing in BM25 (idf at its floor) and would make nearly
    # every message a candidate: it is left out of the match unless no other word is left.
    weighty = [term for lexeme, term in lexemes.items()
               if frequencies[lexeme] and idf(frequencies[lexeme], docs) > 1e-6]
    present = sorted(weighty or present, key=lambda term: frequencies[stem(term)])[:KEYWORD_TERMS]
    if not present:
        return KeywordMatches(docs, average, frequencies, []), None
    best = KeywordMatches(docs, average, frequencies,
                          _candidates(conn, token, present, resource_id, thread_id, wanted, limit))
    return KeywordMatches(docs, average, frequencies, keyword_ranking(best, limit)), None


def _caught_up(conn: sqlite3.Connection, blocks: KeywordBlocks, token: str, owner: Owner, version: int,
               lineage: tuple[int, int], docs: int, words: int) -> bool:
    """Whether the block of ``token`` (of an earlier version of the scope's ``lineage``: since then the scope only
    took messages past the ``last_rowid`` the block saw, in this process or another) now holds ``version``, having
    taken those messages (the scope's statistics checked against it after). False: it is to be built again."""
    held = blocks.following(token, owner)
    if held is None:
        return False
    old, seen, threads = held
    if not isinstance(seen, tuple) or seen[0] != lineage[0]:
        return False
    rows = _appended(conn, token, threads, seen[1])
    # Their neighbours, for the block to bring those it kept up to date (a few statements' worth: past that, the
    # threads it kept are read again at the next miss).
    pairs = neighbour_ids(conn, [row[0] for row in rows]) if len(rows) <= CAUGHT_UP_PAIRS else None
    return blocks.catch_up(token, old, version, lineage, rows, pairs, docs, words)


def _appended(conn: sqlite3.Connection, token: str, threads: Sequence[str], last: int) -> list[Row]:
    """The messages of the scope ``token`` past rowid ``last``, in rowid order: those with words as
    :func:`_scope_rows` reads them, and those of ``threads`` (the block keeps neighbours in them) without (no words,
    no resource: a block takes none of them, but they move the neighbours it kept in their threads)."""
    read = conn.execute(
        f'SELECT k.rowid, c.{_C_ID}, m.thread_id, coalesce(m."resourceId", t."resourceId", \'\'), c.{_C_TOKENS} '
        f"FROM threadmind_keywords AS k JOIN {_CONTENT} AS c ON c.id = k.rowid "
        "JOIN mastra_messages AS m ON m.rowid = k.rowid LEFT JOIN mastra_threads AS t ON t.id = m.thread_id "
        f"WHERE threadmind_keywords MATCH ? AND k.rowid > ? AND m.id = c.{_C_ID}",
        (f'scope : "{token}"', last)).fetchall()
    worded = {row[1] for row in read}
    for chunk in chunks(list(threads)):
        read.extend((rowid, mid, tid, "", "") for rowid, mid, tid in conn.execute(
            f"SELECT rowid, id, thread_id FROM mastra_messages WHERE thread_id IN ({placeholders(len(chunk))}) "
            "AND rowid > ?", [*chunk, last]) if mid not in worded)
    read.sort(key=lambda row: int(row[0]))
    return [(row[1], row[2], row[3], row[4]) for row in read]


def _scope_rows(conn: sqlite3.Connection, token: str) -> list[Row]:
    """Every indexed message filed under the scope ``token``: id, thread, resource (its own, else its thread's)
    and stems (the block keeps those that are exactly of its scope)."""
    return conn.execute(
        f'SELECT c.{_C_ID}, m.thread_id, coalesce(m."resourceId", t."resourceId", \'\'), c.{_C_TOKENS} '
        f"FROM threadmind_keywords AS k JOIN {_CONTENT} AS c ON c.id = k.rowid "
        "JOIN mastra_messages AS m ON m.rowid = k.rowid LEFT JOIN mastra_threads AS t ON t.id = m.thread_id "
        f"WHERE threadmind_keywords MATCH ? AND m.id = c.{_C_ID}", (f'scope : "{token}"',)).fetchall()


def _thread_rows(conn: sqlite3.Connection, thread_id: str) -> tuple[list[Row], Neighbours]:
    """Every indexed message of the thread as :func:`_scope_rows` reads its scope (in rowid order), and the
    neighbours of all its messages (words or not), in one statement: the thread's messages by its
    ``(thread_id, createdAt)`` index, each with its index row (0.11 ms for 50 messages, against 0.14 ms for the
    scope's rows from FTS5 and 0.04 ms for the order)."""
    read = conn.execute(
        f'SELECT m.id, m.rowid, c.{_C_TOKENS}, coalesce(m."resourceId", t."resourceId", \'\') '
        "FROM mastra_messages AS m "
        f"LEFT JOIN {_CONTENT} AS c ON c.id = m.rowid AND c.{_C_ID} = m.id AND instr(c.{_C_SCOPE}, ?) "
        "LEFT JOIN mastra_threads AS t ON t.id = m.thread_id "  # (an index row filed under the thread's scope)
        'WHERE m.thread_id = ? ORDER BY m."createdAt", m.rowid', (_token("2", thread_id), thread_id)).fetchall()
    ids = [row[0] for row in read]
    order: Neighbours = {mid: (ids[at - 1] if at else None, ids[at + 1] if at + 1 < len(ids) else None)
                         for at, mid in enumerate(ids)}
    indexed = sorted((row for row in read if row[2] is not None), key=lambda row: int(row[1]))
    return [(row[0], thread_id, row[3], row[2]) for row in indexed], order


def _thread_part(conn: sqlite3.Connection, blocks: KeywordBlocks, owner: Owner, resource_id: str | None, docs: int,
                 words: int) -> KeywordBlock | None:
    """The block of a thread made from the block of ``resource_id`` (else of the thread's own resource) with no
    rows read, when that block holds the resource's version this read sees and every message of the thread's
    scope (its ``docs`` and ``words``: a message of the thread filed under another resource is not in it). None:
    the thread is read and built."""
    if resource_id is None:
        row = conn.execute('SELECT "resourceId" FROM mastra_threads WHERE id = ?', (owner[1],)).fetchone()
        if row is None or not isinstance(row[0], str):
            return None
        resource_id = row[0]
    token = _token("1", resource_id)
    stats = conn.execute("SELECT version FROM threadmind_keyword_scopes WHERE token = ?", (token,)).fetchone()
    if stats is None:
        return None
    part = blocks.part_of(token, int(stats[0]), (RESOURCE, resource_id), owner)
    if part is None or len(part.ids) != docs or part.words != words:
        return None
    return part


def _candidates(conn: sqlite3.Connection, token: str, terms: Sequence[str], resource_id: str | None,
                thread_id: str | None, wanted: frozenset[str], limit: int | None) -> list[KeywordCandidate]:
    """The scope's messages holding any of ``terms`` (the best ``limit`` by FTS5's bm25, or all), each kept only
    if its row is exactly of the scope."""
    sql = (f'SELECT c.{_C_ID}, m.thread_id, m."resourceId", c.{_C_TOKENS}, c.{_C_WORDS} '
           f"FROM threadmind_keywords AS k JOIN {_CONTENT} AS c ON c.id = k.rowid "
           f"JOIN mastra_messages AS m ON m.rowid = k.rowid WHERE threadmind_keywords MATCH ? AND m.id = c.{_C_ID}")
    params: list[object] = [_match(token, terms)]
    if thread_id is not None:
        sql += " AND m.thread_id = ?"
        params.append(thread_id)
    if resource_id is not None:  # a message without a resource of its own is its thread's
        sql += (' AND (m."resourceId" = ? OR (m."resourceId" IS NULL AND EXISTS (SELECT 1 FROM mastra_threads t '
                'WHERE t.id = m.thread_id AND t."resourceId" = ?)))')
        params += [resource_id, resource_id]
    if limit is not None:
        sql += " ORDER BY bm25(threadmind_keywords, 1.0, 0.0) LIMIT ?"
        params.append(limit)
    found: list[KeywordCandidate] = []
    for mid, tid, rid, tokens, length in conn.execute(sql, params):
        counts = count_words(tokens.split(), wanted)
        if counts:
            found.append(KeywordCandidate(mid, tid, rid or resource_id or "", int(length), counts))
    return found


def _neighbours_read(conn: sqlite3.Connection, block: KeywordBlock,
                     ids: Sequence[str]) -> dict[str, tuple[str | None, str | None]]:
    """The neighbours of ``ids``, and of every message of the threads of those that are the block's (when the
    block holds at most :data:`THREAD_FILL` of a thread's messages): a thread read in order costs about a tenth of
    reading one message's neighbours, so the scope's later searches find them kept. A block small enough to be
    searched without a trip (:data:`MEMORY_SCOPE`) has every thread whose neighbours it does not keep read too, so
    its next searches, whatever their words, need no trip for neighbours."""
    threads = {thread for mid in ids if (thread := block.thread_of(mid)) is not None
               and block.thread_sizes[thread] <= THREAD_FILL}
    if len(block.ids) <= MEMORY_SCOPE:
        threads.update(block.unread_threads(THREAD_FILL))
    found = thread_neighbours(conn, sorted(threads)) if threads else {}
    rest = [mid for mid in ids if mid not in found]
    if rest:
        found.update(neighbour_ids(conn, rest))
    return found


def thread_neighbours(conn: sqlite3.Connection,
                      thread_ids: Sequence[str]) -> dict[str, tuple[str | None, str | None]]:
    """(reader) The neighbours of every message of these threads, by (createdAt, rowid), in index order."""
    out: dict[str, tuple[str | None, str | None]] = {}
    for chunk in chunks(list(thread_ids)):
        rows = conn.execute(f"SELECT thread_id, id FROM mastra_messages WHERE thread_id IN "
                            f'({placeholders(len(chunk))}) ORDER BY thread_id, "createdAt", rowid', chunk).fetchall()
        for at, (thread_id, mid) in enumerate(rows):
            before = rows[at - 1][1] if at and rows[at - 1][0] == thread_id else None
            after = rows[at + 1][1] if at + 1 < len(rows) and rows[at + 1][0] == thread_id else None
            out[mid] = (before, after)
    return out


def neighbour_ids(conn: sqlite3.Connection, ids: Sequence[str]) -> dict[str, tuple[str | None, str | None]]:
    """(reader) The messages just before and after each one in its thread, by (createdAt, rowid): one statement."""
    out: dict[str, tuple[str | None, str | None]] = {}
    for chunk in chunks(list(dict.fromkeys(ids))):
        out.update((mid, (before, after)) for mid, before, after in conn.execute(
            "SELECT c.id, "
            '(SELECT p.id FROM mastra_messages p WHERE p.thread_id = c.thread_id AND ("createdAt", rowid) < '
            '(c."createdAt", c.rowid) ORDER BY p."createdAt" DESC, p.rowid DESC LIMIT 1), '
            '(SELECT n.id FROM mastra_messages n WHERE n.thread_id = c.thread_id AND ("createdAt", rowid) > '
            '(c."createdAt", c.rowid) ORDER BY n."createdAt", n.rowid LIMIT 1) '
            f"FROM mastra_messages c WHERE c.id IN ({placeholders(len(chunk))})", chunk))
    return out


def keyword_backlog(conn: sqlite3.Connection) -> int:
    """(reader) About how many messages may still lack an index row: rows past the watermark, or queued ids when
    more (most queued ids are of rows past it)."""
    row = conn.execute("SELECT value FROM threadmind_meta WHERE key = ?", (_WATERMARK,)).fetchone()
    through = int(row[0]) if row is not None else 0
    past = int(conn.execute("SELECT count(*) FROM mastra_messages WHERE rowid > ?", (through,)).fetchone()[0])
    return max(past, int(conn.execute("SELECT count(*) FROM threadmind_keyword_queue").fetchone()[0]))


def catch_up_batch(conn: sqlite3.Connection, size: int = CATCH_UP_BATCH) -> tuple[int, int, list[Advance]]:
    """(writer) Index the next ``size`` messages past the watermark that lack an index row (and fold the queue
    first); returns (messages looked at, rows written, how the scopes changed). (0, 0, []): the index is
    complete."""
    folded, advances = fold(conn)
    if folded:
        return folded, folded, advances
    row = conn.execute("SELECT value FROM threadmind_meta WHERE key = ?", (_WATERMARK,)).fetchone()
    through = int(row[0]) if row is not None else 0
    rowids = [r[0] for r in conn.execute("SELECT rowid FROM mastra_messages WHERE rowid > ? ORDER BY rowid LIMIT ?",
                                         (through, size))]
    if not rowids:
        return 0, 0, []
    # Most rows past the watermark are threadmind's own, indexed by a fold: only the others are read whole.
    present = {r[0] for r in conn.execute("SELECT rowid FROM threadmind_keywords WHERE rowid BETWEEN ? AND ?",
                                          (rowids[0], rowids[-1]))}
    missing: list[int] = []
    for at, rowid in enumerate(rowids):
        if rowid not in present:
            missing.append(rowid)
            if len(missing) == CATCH_UP_READS:  # a bounded transaction: the rest is the next batch's
                rowids = rowids[:at + 1]
                break
    rows: list[tuple[Any, ...]] = []
    for chunk in chunks(missing):
        rows.extend(conn.execute(
            f"SELECT {_MESSAGE_COLS} FROM mastra_messages WHERE rowid IN ({placeholders(len(chunk))})", chunk))
    written, advances = _index_rows(conn, rows, caught_up=True)
    conn.execute("INSERT INTO threadmind_meta (key, value) VALUES (?, ?) "
                 "ON CONFLICT (key) DO UPDATE SET value = excluded.value", (_WATERMARK, str(rowids[-1])))
    return len(rowids), written, advances
