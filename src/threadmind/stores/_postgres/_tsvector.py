"""The PostgreSQL keyword index: ``threadmind_keywords`` (a ``tsvector`` per message, GIN-indexed), written in the
statement that saves the message rows, and ranked by BM25 in SQL.

The words are cut in Python exactly as the SQLite index's FTS5 tokenizer cuts them (``text_tokens``: letters and
digits, lower case, accents dropped, Porter stems) and sent as a ``tsvector`` literal with their positions, so
PostgreSQL's own parser and dictionaries never change them and a query matches the same words on every store. A
query is a ``tsquery`` literal of quoted lexemes joined by ``|``; lexemes are letters and digits only, so nothing a
user types can become ``tsquery`` syntax.

A search matches the scope's rows (``resource_id`` or ``thread_id``, each indexed) with the GIN index, and ranks them
by Okapi BM25 (k1 1.2, b 0.75) with the scope's own statistics: its number of messages, their average length, and
each word's document frequency among them. Rows are deleted with their messages, follow a thread moved to another
resource, and are re-made when a message is updated; messages Mastra wrote are indexed by :data:`CATCH_UP_SQL` in
batches (a message without words gets an empty row, so it is not picked again).

Every statement that writes keyword rows also bumps, in the same statement, the version of each scope its rows left
or joined (``threadmind_keyword_versions``: a counter per resource and thread slot, :data:`BUMPED`); a scope's
version is its slots' counters, which only grow, so any committed change to a scope changes it. A process keeps
searched scopes in memory while their version stays (``_keyword_search``). A resource has
:data:`SCOPE_SLOTS` counters, one picked by the writing thread, so saves to its threads seldom wait on one row.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from ...codecs import Message
from .._keyword_blocks import RESOURCE, THREAD, CountedRow, Owner
from .._keywords import KEYWORD_TERMS, SCORE_DIGITS, KeywordCandidate, KeywordMatches, indexed_text, stem, text_tokens

__all__ = ("BLOCK_SQL", "BUMPED", "CATCH_UP_SQL", "DELETE_IDS_SQL", "DELETE_THREAD_SQL", "FOLLOW_SQL",
           "KEYWORD_COLUMNS", "MOVE_THREAD_SQL", "NEIGHBOURS_SQL", "ROWS_SQL", "SCOPE_SLOTS", "SEARCH_SQL",
           "THREAD_ORDER_SQL", "UPSERT_SQL", "VERSION_SQL", "block_rows", "entry_columns", "keyword_entries",
           "keyword_rows", "matches_from_rows", "scope_key", "tsquery_literal", "tsvector_literal", "version")

_MAX_POSITION = 16383  # tsvector positions stop here
_MAX_LEXEME = 255  # longer "words" (a base64 blob, a long URL) are not words anyone searches for
_MAX_POSITIONS = 256  # positions a lexeme keeps in a tsvector

#: Parameters of :data:`UPSERT_SQL` after the first: ids, threads, resources, lengths, tsvector literals.
KEYWORD_COLUMNS = 5

#: Version slots of a resource scope: the resource's writers bump the slot of their thread, so saves to different
#: threads of one resource seldom wait on each other's version row.
SCOPE_SLOTS = 16


def _bumping(touched: str) -> str:
    """The CTE ``bumped``: one more on the version slot of every scope of the ``touched`` (thread_id,
    resource_id) rows (its thread's scope, and its resource's slot for its thread), in one order."""
    return f"""bumped AS (
  INSERT INTO threadmind_keyword_versions AS v (scope, slot, n)
  SELECT s.scope, s.slot, 1 FROM (
    SELECT 'r:' || x.resource_id AS scope, hashtext(x.thread_id) & {SCOPE_SLOTS - 1} AS slot FROM {touched} x
    UNION SELECT 't:' || x.thread_id, 0 FROM {touched} x
  ) s ORDER BY s.scope, s.slot
  ON CONFLICT (scope, slot) DO UPDATE SET n = v.n + 1
  RETURNING v.scope, v.slot, v.n
)"""


#: The ``bumped`` CTE of a statement whose ``touched`` CTE names the rows it changed, before and after.
BUMPED = _bumping("touched")

# $1.. the columns of ``keyword_rows``. Writes the rows, and bumps the scopes they left and joined.
UPSERT_SQL = f"""
WITH u AS (
  SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::text[]) AS u(id, thread_id, resource_id,
                                                                                      len, tsv)
), before AS (
  SELECT k.thread_id, k.resource_id FROM threadmind_keywords k WHERE k.message_id = ANY($1::text[])
), up AS (
  INSERT INTO threadmind_keywords AS k (message_id, thread_id, resource_id, len, tsv)
  SELECT u.id, u.thread_id, u.resource_id, u.len, u.tsv::tsvector FROM u
  ON CONFLICT (message_id) DO UPDATE SET thread_id = EXCLUDED.thread_id, resource_id = EXCLUDED.resource_id,
    len = EXCLUDED.len, tsv = EXCLUDED.tsv
  RETURNING k.thread_id, k.resource_id
), touched AS (
  SELECT thread_id, resource_id FROM before UNION SELECT thread_id, resource_id FROM up
), {BUMPED}
SELECT count(*) FROM bumped
"""
DELETE_IDS_SQL = f"""
WITH touched AS (
  DELETE FROM threadmind_keywords WHERE message_id = ANY($1::text[]) RETURNING thread_id, resource_id
), {BUMPED}
SELECT count(*) FROM bumped
"""
DELETE_THREAD_SQL = f"""
WITH touched AS (
  DELETE FROM threadmind_keywords WHERE thread_id = $1 RETURNING thread_id, resource_id
), {BUMPED}
SELECT count(*) FROM bumped
"""
MOVE_THREAD_SQL = f"""
WITH before AS (
  SELECT thread_id, resource_id FROM threadmind_keywords WHERE thread_id = $1
), moved AS (
  UPDATE threadmind_keywords SET resource_id = $2 WHERE thread_id = $1 RETURNING thread_id, resource_id
), touched AS (
  SELECT thread_id, resource_id FROM before UNION SELECT thread_id, resource_id FROM moved
), {BUMPED}
SELECT count(*) FROM bumped
"""
# $1 a scope key (``scope_key``): its version, its slots and their counters (each only grows, so any committed change
# to the scope changes them).
_SLOTS = "SELECT array_agg(slot ORDER BY slot), array_agg(n ORDER BY slot) FROM threadmind_keyword_versions"
VERSION_SQL = f"{_SLOTS} WHERE scope = $1"
# The scope's rows, words or not, each with the version of the row (``xmin``: the transaction that wrote it, new with
# every insert or update of the row) and its length, as three arrays (decoded far faster than as many records): what
# a kept block compares to follow the scope (FOLLOW_SQL).
_MARKS = ("(SELECT array_agg(k.message_id), array_agg(k.xmin::text), array_agg(k.len) FROM "
          "(SELECT message_id, xmin, len FROM threadmind_keywords WHERE {column} = $2 LIMIT $3) AS k) "
          "AS m(ids, marks, lens)")
# $1 a scope key, $2 its resource or thread, $3 the most rows wanted: the scope's version, its rows with words and
# every row's mark, in one snapshot.
_BLOCK_SQL = f"""
SELECT v.slots, v.counts,
       ARRAY(SELECT ROW(k.message_id, k.thread_id, k.resource_id, k.len, k.tsv::text) FROM threadmind_keywords k
             WHERE k.{{column}} = $2 AND k.len > 0 ORDER BY k.message_id LIMIT $3),
       m.ids, m.marks, m.lens
FROM ({_SLOTS} WHERE scope = $1) AS v(slots, counts) CROSS JOIN {_MARKS}
"""
BLOCK_SQL = {RESOURCE: _BLOCK_SQL.format(column="resource_id"), THREAD: _BLOCK_SQL.format(column="thread_id")}
# $1..$3 as BLOCK_SQL's: the scope's version and every row's mark, in one snapshot.
_FOLLOW_SQL = f"""
SELECT v.slots, v.counts, m.ids, m.marks, m.lens
FROM ({_SLOTS} WHERE scope = $1) AS v(slots, counts) CROSS JOIN {_MARKS}
"""
FOLLOW_SQL = {RESOURCE: _FOLLOW_SQL.format(column="resource_id"), THREAD: _FOLLOW_SQL.format(column="thread_id")}

# $1 the tsquery literal, $2 the query's lexemes, $3 resource (or NULL), $4 thread (or NULL), $5 limit. One row per
# candidate, best first by the keyword score of ``keyword_ranking`` (BM25 with the scope's statistics over the 16
# rarest words, times the square root of the idf coverage; counts of those words only), each carrying the scope's
# statistics too; a single row with no candidate when none matches.
SEARCH_SQL = f"""
WITH scope AS (
  SELECT k.message_id, k.thread_id, k.resource_id, k.len, k.tsv FROM threadmind_keywords k
  WHERE ($3::text IS NULL OR k.resource_id = $3) AND ($4::text IS NULL OR k.thread_id = $4) AND k.len > 0
), stats AS (
  SELECT count(*)::bigint AS n, COALESCE(sum(len), 0)::bigint AS total FROM scope
), words AS (
  SELECT m.message_id, m.thread_id, m.resource_id, m.len, w.lexeme, cardinality(w.positions) AS tf
  FROM scope m, unnest(m.tsv) AS w(lexeme, positions, weights)
  WHERE m.tsv @@ $1::tsquery AND w.lexeme = ANY($2::text[])
), df AS (
  SELECT lexeme, count(*) AS df FROM words GROUP BY lexeme
), kept AS (
  SELECT d.lexeme, GREATEST(ln((s.n - d.df + 0.5) / (d.df + 0.5))::float8, 1e-6) AS weight,
         GREATEST(ln((s.n - d.df + 0.5) / (d.df + 0.5))::float8, 0) AS cover
  FROM df d CROSS JOIN stats s
  ORDER BY d.df, array_position($2::text[], d.lexeme) LIMIT {KEYWORD_TERMS}
), total AS (
  SELECT COALESCE(sum(cover), 0) AS cover FROM kept
), ranked AS (
  SELECT w.message_id, w.thread_id, w.resource_id, w.len, array_agg(w.lexeme) AS lexemes, array_agg(w.tf) AS tfs,
         sum(k.weight * w.tf * 2.2
             / (w.tf + 1.2 * (0.25 + 0.75 * w.len / GREATEST(s.total::float8 / GREATEST(s.n, 1), 1))))
         * CASE WHEN t.cover > 0 THEN sqrt(sum(k.cover) / t.cover) ELSE 1 END AS raw
  FROM words w JOIN kept k USING (lexeme) CROSS JOIN stats s CROSS JOIN total t
  GROUP BY w.message_id, w.thread_id, w.resource_id, w.len, t.cover
), scored AS (
  SELECT *, round(raw::numeric, {SCORE_DIGITS})::float8 AS score FROM ranked
  ORDER BY score DESC, message_id
  LIMIT $5
)
SELECT s.n, s.total, ARRAY(SELECT lexeme FROM df), ARRAY(SELECT df FROM df),
       r.message_id, r.thread_id, r.resource_id, r.len, r.lexemes, r.tfs, r.score
FROM stats s LEFT JOIN scored r ON true
"""

# $1 message ids: the messages just before and after each one in its thread (by createdAt, then sequence). The
# redundant bound on "createdAt" lets the (thread_id, "createdAt") index start each scan at the message itself (an
# incremental sort then settles ties), instead of walking the thread from its far end.
NEIGHBOURS_SQL = """
WITH c AS (
  SELECT m.id, m.thread_id, m."createdAt" AS at,
         COALESCE((SELECT s.seq FROM threadmind_message_seq s WHERE s.message_id = m.id), -1) AS q
  FROM mastra_messages m WHERE m.id = ANY($1::text[])
)
SELECT c.id,
  (SELECT p.id FROM mastra_messages p LEFT JOIN threadmind_message_seq ps ON ps.message_id = p.id
   WHERE p.thread_id = c.thread_id AND p."createdAt" <= c.at
     AND (p."createdAt", COALESCE(ps.seq, -1), p.id COLLATE "C") < (c.at, c.q, c.id COLLATE "C")
   ORDER BY p."createdAt" DESC, COALESCE(ps.seq, -1) DESC, p.id COLLATE "C" DESC LIMIT 1),
  (SELECT n.id FROM mastra_messages n LEFT JOIN threadmind_message_seq ns ON ns.message_id = n.id
   WHERE n.thread_id = c.thread_id AND n."createdAt" >= c.at
     AND (n."createdAt", COALESCE(ns.seq, -1), n.id COLLATE "C") > (c.at, c.q, c.id COLLATE "C")
   ORDER BY n."createdAt", COALESCE(ns.seq, -1), n.id COLLATE "C" LIMIT 1)
FROM c
"""
# $1 thread ids: their messages in each thread's order (NEIGHBOURS_SQL's), thread by thread.
THREAD_ORDER_SQL = """
SELECT m.thread_id, m.id FROM mastra_messages m LEFT JOIN threadmind_message_seq s ON s.message_id = m.id
WHERE m.thread_id = ANY($1::text[])
ORDER BY m.thread_id, m."createdAt", COALESCE(s.seq, -1), m.id COLLATE "C"
"""
# $1 message ids, $2 their scope's key: their rows as BLOCK_SQL reads them, each one's row version, the scope's
# version and the ids' neighbours (NEIGHBOURS_SQL's), in one snapshot.
ROWS_SQL = f"""
SELECT ARRAY(SELECT ROW(k.message_id, k.thread_id, k.resource_id, k.len, k.tsv::text) FROM threadmind_keywords k
             WHERE k.message_id = ANY($1::text[]) ORDER BY k.message_id),
       ARRAY(SELECT ROW(k.message_id, k.xmin::text) FROM threadmind_keywords k WHERE k.message_id = ANY($1::text[])),
       v.slots, v.counts,
       ARRAY(SELECT ROW(n.*) FROM ({NEIGHBOURS_SQL}) AS n)
FROM ({_SLOTS} WHERE scope = $2) AS v(slots, counts)
"""

CATCH_UP_SQL = """
SELECT m.id, m.content, m.role, m.type, m."createdAt", m."createdAtZ", m.thread_id,
       COALESCE(m."resourceId", t."resourceId")
FROM mastra_messages m LEFT JOIN mastra_threads t ON t.id = m.thread_id
WHERE NOT EXISTS (SELECT 1 FROM threadmind_keywords k WHERE k.message_id = m.id)
LIMIT $1
"""


def tsvector_literal(text: str) -> tuple[str, int]:
    """The ``tsvector`` literal of ``text``'s words with their positions, and how many words it has."""
    literal, length, _ = _tsvector(text)
    return literal, length


def _tsvector(text: str) -> tuple[str, int, dict[str, int]]:
    """The literal, the number of words, and each kept stem's count as the index stores it (its positions).

    A stem met again is written again with its next position: PostgreSQL merges repeated lexemes of a literal,
    their positions in order and at most 256 of them, into the value the grouped literal gives (checked on 2 000
    texts), and the literal is one format call: 24.8 -> 20.3 us a workload message of 31 words (8.7 us of it
    cutting and stemming)."""
    tokens = text_tokens(text)
    kept = tokens[:_MAX_POSITION]
    if kept and max(map(len, kept)) <= _MAX_LEXEME:
        tally = Counter(kept)
        if max(tally.values()) > _MAX_POSITIONS:
            tally = Counter({token: min(n, _MAX_POSITIONS) for token, n in tally.items()})
        # (stems are letters and digits: no quote, no brace) one format call for every position
        return ("'" + "':{} '".join(kept) + "':{}").format(*range(1, len(kept) + 1)), len(tokens), tally
    positions: dict[str, list[int]] = {}  # (a stem too long to index, or no words: stems grouped here)
    for position, token in enumerate(kept, start=1):
        if len(token) <= _MAX_LEXEME:
            spots = positions.get(token)
            if spots is None:
                positions[token] = [position]
            else:
                spots.append(position)
    parts: list[str] = []
    counts: dict[str, int] = {}
    for token, spots in positions.items():  # most words occur once: no inner join (18 against 25 µs a message)
        if len(spots) == 1:
            parts.append(f"'{token}':{spots[0]}")
            counts[token] = 1
        else:
            spots = spots[:_MAX_POSITIONS]
            parts.append(f"'{token}':" + ",".join(map(str, spots)))
            counts[token] = len(spots)
    return " ".join(parts), len(tokens), counts


_LEXEME = re.compile(r"'([^']*)':([0-9A-D,]+)")


def block_rows(rows: Sequence[Any]) -> list[CountedRow]:
    """Block rows from :data:`BLOCK_SQL`'s (id, thread, resource, length, ``tsv::text``) records: each stem's
    count is the number of its positions, as :data:`SEARCH_SQL` counts it."""
    return [(r[0], r[1], r[2], int(r[3]), {lexeme: spots.count(",") + 1 for lexeme, spots in _LEXEME.findall(r[4])})
            for r in rows]


def scope_key(owner: Owner) -> str:
    """The key of a keyword scope in ``threadmind_keyword_versions``."""
    kind, value = owner
    return ("r:" if kind == RESOURCE else "t:") + value


def version(slots: Sequence[int] | None, counts: Sequence[int] | None) -> tuple[tuple[int, int], ...]:
    """A scope's version from its slots and their counters (none: never written)."""
    return tuple(zip(slots or (), counts or (), strict=True))


def tsquery_literal(terms: Sequence[str]) -> tuple[str, list[str]]:
    """The ``tsquery`` literal matching any of ``terms`` (stemmed as indexed), and the lexemes."""
    lexemes = list(dict.fromkeys(stem(t) for t in terms if len(t) <= _MAX_LEXEME))
    return " | ".join(f"'{lexeme}'" for lexeme in lexemes), lexemes


def keyword_entries(messages: Sequence[tuple[Message, str]]) -> list[tuple[CountedRow, str]]:
    """For ``(message, resource_id)`` pairs (the last of repeated ids wins): each one's block row and ``tsvector``
    literal."""
    latest = {m.id: (m, resource) for m, resource in messages}
    entries: list[tuple[CountedRow, str]] = []
    for mid, (message, resource) in latest.items():
        literal, length, counts = _tsvector(indexed_text(message))
        entries.append(((mid, message.thread_id or "", resource, length, counts), literal))
    return entries


def keyword_rows(messages: Sequence[tuple[Message, str]]) -> list[list[object]]:
    """The :data:`UPSERT_SQL` parameters for ``(message, resource_id)`` pairs (the last of repeated ids wins)."""
    return entry_columns(keyword_entries(messages))


def entry_columns(entries: Sequence[tuple[CountedRow, str]]) -> list[list[object]]:
    """The :data:`UPSERT_SQL` parameters of :func:`keyword_entries`."""
    columns: list[list[object]] = [[] for _ in range(KEYWORD_COLUMNS)]
    for (mid, thread_id, resource, length, _), literal in entries:
        for column, value in zip(columns, (mid, thread_id, resource, length, literal), strict=True):
            column.append(value)
    return columns


def matches_from_rows(rows: Sequence[Any], lexemes: Sequence[str]) -> KeywordMatches:
    """:class:`KeywordMatches` from the rows of :data:`SEARCH_SQL`."""
    if not rows:
        return KeywordMatches(0, 0.0, dict.fromkeys(lexemes, 0), [])
    docs, total, df_lexemes, df_counts = rows[0][0], rows[0][1], rows[0][2], rows[0][3]
    frequencies = dict.fromkeys(lexemes, 0)
    frequencies.update(zip(df_lexemes, (int(n) for n in df_counts), strict=True))
    candidates = [KeywordCandidate(r[4], r[5], r[6], int(r[7]), dict(zip(r[8], (int(t) for t in r[9]), strict=True)),
                                   float(r[10])) for r in rows if r[4] is not None]
    return KeywordMatches(int(docs), int(total) / int(docs) if docs else 0.0, frequencies, candidates)
