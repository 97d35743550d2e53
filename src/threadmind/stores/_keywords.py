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

import re
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import msgspec

from ..codecs import Message
from ..embedders import message_text

__all__ = ("MAX_QUERY_TERMS", "STOP_WORDS", "KeywordHit", "KeywordSearch", "indexed_text", "query_terms",
           "supports_keywords")

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


def supports_keywords(store: object) -> bool:
    """Whether ``store`` keeps a keyword index (``KeywordSearch``)."""
    return isinstance(store, KeywordSearch)


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
