"""The SQLite keyword index: an FTS5 table beside Mastra's messages, fed through a queue written with the rows.

``threadmind_keywords`` (FTS5, tokenizer ``porter unicode61 remove_diacritics 2``) holds one row per message with
words: ``text`` (the message's indexed text), ``scope`` (two number tokens standing for its resource and its
thread), ``message_id`` and ``words`` (its length in words; neither indexed). Its rowid is the message's rowid in
``mastra_messages``. ``threadmind_keyword_scopes`` keeps, per scope token, how many indexed messages it has and
how many words they hold, so a search has its scope's statistics without reading the scope (BM25 is computed with
the scope's statistics, not the whole file's: one tenant's words do not weigh another's).

**Writes.** An FTS5 write costs most of a small save (every transaction that touches the table flushes a new
segment: about 100 µs here, against about 35 µs for the whole save of one message). So a save, an update or a
thread moved to another resource only appends the ids of the messages whose words changed to
``threadmind_keyword_queue``, in the same transaction as the rows; :func:`fold` later indexes them in one batch
(about 11 µs a message) from the rows as they are then. A search folds whatever is queued before it reads, so a
message is findable by words in every process once its save returned, and the queue stays short. Deleting
messages or a thread drops their index rows at once (a queued id whose message is gone is skipped).

**Searches.** The scope token is matched with the query's words (``scope : "1…" AND text : ("w1" OR "w2" …)``), so
FTS5 visits only messages of the scope: one count per word (its document frequency in the scope), then the best
candidates by FTS5's own bm25, joined to ``mastra_messages`` by rowid and kept only if their id, thread and resource
are exactly the scope's (a collision of two scope numbers, or a row Mastra rewrote meanwhile, can never return
another resource's message); their words are counted in Python from the indexed text.

**Rows Mastra wrote** (it does not know these tables) are indexed by :func:`catch_up_batch`: in bounded batches,
the messages past a watermark (``threadmind_meta``: ``keywords_through``) that have no index row, one short write
transaction each that re-reads the watermark, so processes opening one file at once share the work.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

from ._keywords import (
    KEYWORD_TERMS,
    NO_MATCHES,
    KeywordCandidate,
    KeywordMatches,
    count_words,
    idf,
    indexed_text,
    lexemes_of,
    stem,
    text_tokens,
)
from ._sqlite_rows import chunks, message_from_row, placeholders

__all__ = ("CATCH_UP_BATCH", "FOLD_BATCH", "KEYWORD_DDL", "catch_up_batch", "delete_keywords_of_ids",
           "delete_keywords_of_thread", "enqueue", "enqueue_thread", "fold", "fts5_available", "keyword_backlog",
           "neighbour_ids", "queued", "search_keywords")

KEYWORD_DDL = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS threadmind_keywords USING fts5("
    "text, scope, message_id UNINDEXED, words UNINDEXED, tokens UNINDEXED, "
    "tokenize = 'porter unicode61 remove_diacritics 2')",
    "CREATE TABLE IF NOT EXISTS threadmind_keyword_queue (seq INTEGER PRIMARY KEY, message_id TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS threadmind_keyword_scopes (token TEXT PRIMARY KEY, docs INTEGER NOT NULL, "
    "words INTEGER NOT NULL)",
)
CATCH_UP_BATCH = 500
"""Messages read per catch-up batch (one short write transaction each)."""
FOLD_BATCH = 2000
"""Queued ids indexed per fold transaction."""
SMALL_SCOPE = 5000
"""A scope of at most this many messages is searched whole (every match counted here); a larger one is asked for
its document frequencies first and its best candidates by FTS5's bm25."""

_WATERMARK = "keywords_through"
_MESSAGE_COLS = 'id, content, role, type, "createdAt", thread_id, "resourceId", rowid'


def fts5_available(conn: sqlite3.Connection) -> bool:
    """Whether this SQLite was built with FTS5."""
    return any(row[0] == "ENABLE_FTS5" for row in conn.execute("PRAGMA compile_options"))


def _token(kind: str, value: str) -> str:
    # Digits only: the porter stemmer leaves them alone (a letter suffix could be stemmed into another scope).
    digest = int.from_bytes(hashlib.blake2b(value.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "big")
    return f"{kind}{digest % 10**18:018d}"


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


def _drop(conn: sqlite3.Connection, rowids_sql: str, params: Sequence[object]) -> None:
    """Delete the index rows whose rowids the query selects, taking them out of their scopes' statistics."""
    old = conn.execute(f"SELECT scope, words FROM threadmind_keywords WHERE rowid IN ({rowids_sql})",
                       params).fetchall()
    if not old:
        return
    conn.execute(f"DELETE FROM threadmind_keywords WHERE rowid IN ({rowids_sql})", params)
    deltas: dict[str, list[int]] = {}
    for scope, words in old:
        _count(deltas, scope, -1, -int(words))
    _apply(conn, deltas)


def _count(deltas: dict[str, list[int]], scope: str, docs: int, words: int) -> None:
    for token in scope.split():
        entry = deltas.setdefault(token, [0, 0])
        entry[0] += docs
        entry[1] += words


def _apply(conn: sqlite3.Connection, deltas: dict[str, list[int]]) -> None:
    rows = [(token, docs, words) for token, (docs, words) in deltas.items() if docs or words]
    for chunk in chunks(rows, 300):
        conn.execute("INSERT INTO threadmind_keyword_scopes (token, docs, words) VALUES "
                     + ",".join(["(?,?,?)"] * len(chunk)) + " ON CONFLICT (token) DO UPDATE SET "
                     "docs = docs + excluded.docs, words = words + excluded.words", [v for r in chunk for v in r])


def _owners(conn: sqlite3.Connection, thread_ids: Iterable[str]) -> dict[str, str]:
    owners: dict[str, str] = {}
    for chunk in chunks(list(dict.fromkeys(thread_ids))):
        owners.update(conn.execute(
            f'SELECT id, "resourceId" FROM mastra_threads WHERE id IN ({placeholders(len(chunk))})', chunk))
    return owners


def _index_rows(conn: sqlite3.Connection, rows: Sequence[tuple[Any, ...]]) -> int:
    """Index message rows (``_MESSAGE_COLS``) as they are now, keeping the scopes' statistics; returns the index
    rows written."""
    owners = _owners(conn, (str(r[5]) for r in rows if not r[6]))
    fresh: list[tuple[int, str, str, str, int, str]] = []
    for r in rows:
        try:
            message = message_from_row(r)
        except Exception:  # a row that does not decode is reported where it is read: nothing to index
            continue
        text = indexed_text(message)
        thread_id = message.thread_id or ""
        tokens = text_tokens(text) if text else []
        if tokens:
            fresh.append((r[7], text, _scope(message.resource_id or owners.get(thread_id, ""), thread_id), r[0],
                          len(tokens), " ".join(tokens)))
    rowids = [r[7] for r in rows]
    deltas: dict[str, list[int]] = {}
    for chunk in chunks(rowids):  # what the rows held before: out of their scopes' statistics
        marks = placeholders(len(chunk))
        for scope, words in conn.execute(f"SELECT scope, words FROM threadmind_keywords WHERE rowid IN ({marks})",
                                         chunk):
            _count(deltas, scope, -1, -int(words))
        conn.execute(f"DELETE FROM threadmind_keywords WHERE rowid IN ({marks})", chunk)
    for chunk in chunks(fresh, 200):
        conn.execute("INSERT INTO threadmind_keywords (rowid, text, scope, message_id, words, tokens) VALUES "
                     + ",".join(["(?,?,?,?,?,?)"] * len(chunk)), [v for row in chunk for v in row])
    for _, _, scope, _, count, _ in fresh:
        _count(deltas, scope, 1, count)
    _apply(conn, deltas)
    return len(fresh)


def fold(conn: sqlite3.Connection, size: int = FOLD_BATCH) -> int:
    """(writer) Index up to ``size`` queued ids from their rows as they are now; returns the ids taken (0: the
    queue was empty)."""
    taken = conn.execute("SELECT seq, message_id FROM threadmind_keyword_queue ORDER BY seq LIMIT ?",
                         (size,)).fetchall()
    if not taken:
        return 0
    ids = list(dict.fromkeys(mid for _, mid in taken))
    rows: list[tuple[Any, ...]] = []
    for chunk in chunks(ids):
        rows.extend(conn.execute(
            f"SELECT {_MESSAGE_COLS} FROM mastra_messages WHERE id IN ({placeholders(len(chunk))})", chunk))
    _index_rows(conn, rows)
    conn.execute("DELETE FROM threadmind_keyword_queue WHERE seq <= ?", (taken[-1][0],))
    return len(taken)


# -- reads -----------------------------------------------------------------------------------------------


def queued(conn: sqlite3.Connection) -> bool:
    """(reader) Whether ids wait to be indexed."""
    return conn.execute("SELECT 1 FROM threadmind_keyword_queue LIMIT 1").fetchone() is not None


def _match(scope_token: str, terms: Sequence[str]) -> str:
    words = " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)
    return f'scope : "{scope_token}" AND text : ({words})'


def search_keywords(conn: sqlite3.Connection, terms: Sequence[str], resource_id: str | None, thread_id: str | None,
                    limit: int, *, folded: bool = False) -> KeywordMatches | None:
    """(reader) The scope's statistics and its best ``limit`` candidates (see the module docstring); None when ids
    are queued (fold first; ``folded``: this search folded already, and ids queued since are of saves that had not
    returned when it began)."""
    if not folded and queued(conn):
        return None
    lexemes = lexemes_of(terms)
    if not lexemes or limit <= 0 or (resource_id is None and thread_id is None):
        return NO_MATCHES
    token = _token("2", thread_id) if thread_id is not None else _token("1", resource_id or "")
    stats = conn.execute("SELECT docs, words FROM threadmind_keyword_scopes WHERE token = ?", (token,)).fetchone()
    docs, words = (int(stats[0]), int(stats[1])) if stats is not None else (0, 0)
    average = words / docs if docs else 0.0
    wanted = frozenset(lexemes)
    if docs <= SMALL_SCOPE:
        # Every message of the scope holding a query word, counted here: the document frequencies come with them.
        candidates = _candidates(conn, token, list(lexemes.values()), resource_id, thread_id, wanted, None)
        frequencies = dict.fromkeys(lexemes, 0)
        for candidate in candidates:
            for lexeme in candidate.counts:
                frequencies[lexeme] += 1
        return KeywordMatches(docs, average, frequencies, candidates)
    counts = conn.execute("SELECT " + ", ".join(
        ["(SELECT count(*) FROM threadmind_keywords WHERE threadmind_keywords MATCH ?)"] * len(lexemes)),
        [_match(token, [term]) for term in lexemes.values()]).fetchone()  # one statement, a count per word
    frequencies = {lexeme: int(n) for lexeme, n in zip(lexemes, counts, strict=True)}
    present = [term for lexeme, term in lexemes.items() if frequencies[lexeme]]
    # A word in half the scope's messages or more weighs nothing in BM25 (idf at its floor) and would make nearly
    # every message a candidate: it is left out of the match unless no other word is left.
    weighty = [term for lexeme, term in lexemes.items()
               if frequencies[lexeme] and idf(frequencies[lexeme], docs) > 1e-6]
    present = sorted(weighty or present, key=lambda term: frequencies[stem(term)])[:KEYWORD_TERMS]
    if not present:
        return KeywordMatches(docs, average, frequencies, [])
    return KeywordMatches(docs, average, frequencies,
                          _candidates(conn, token, present, resource_id, thread_id, wanted, limit))


def _candidates(conn: sqlite3.Connection, token: str, terms: Sequence[str], resource_id: str | None,
                thread_id: str | None, wanted: frozenset[str], limit: int | None) -> list[KeywordCandidate]:
    """The scope's messages holding any of ``terms`` (the best ``limit`` by FTS5's bm25, or all), each kept only
    if its row is exactly of the scope."""
    sql = ('SELECT k.message_id, m.thread_id, m."resourceId", k.tokens, k.words '
           "FROM threadmind_keywords AS k JOIN mastra_messages AS m ON m.rowid = k.rowid "
           "WHERE threadmind_keywords MATCH ? AND m.id = k.message_id")
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


def catch_up_batch(conn: sqlite3.Connection, size: int = CATCH_UP_BATCH) -> tuple[int, int]:
    """(writer) Index the next ``size`` messages past the watermark that lack an index row (and fold the queue
    first); returns (messages looked at, rows written). (0, 0): the index is complete."""
    folded = fold(conn)
    if folded:
        return folded, folded
    row = conn.execute("SELECT value FROM threadmind_meta WHERE key = ?", (_WATERMARK,)).fetchone()
    through = int(row[0]) if row is not None else 0
    rows = conn.execute(f"SELECT {_MESSAGE_COLS} FROM mastra_messages WHERE rowid > ? ORDER BY rowid LIMIT ?",
                        (through, size)).fetchall()
    if not rows:
        return 0, 0
    rowids = [r[7] for r in rows]
    present = {r[0] for r in conn.execute(
        f"SELECT rowid FROM threadmind_keywords WHERE rowid IN ({placeholders(len(rowids))})", rowids)}
    written = _index_rows(conn, [r for r in rows if r[7] not in present])
    conn.execute("INSERT INTO threadmind_meta (key, value) VALUES (?, ?) "
                 "ON CONFLICT (key) DO UPDATE SET value = excluded.value", (_WATERMARK, str(rowids[-1])))
    return len(rows), written
