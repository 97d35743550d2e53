"""Recall that finds what the model needs: one pipeline ranks a scope's messages by their words and by their
vectors together (``semanticRecall.search``: ``"hybrid"``, ``"vector"``, ``"keyword"``). ``Memory.recall``, the
``semantic-recall`` processor, ``Memory.search`` and the CLI all go through it.
"""

from __future__ import annotations

from .._public import present_as
from ._rank import DEFAULT_KEYWORD_WEIGHT as DEFAULT_KEYWORD_WEIGHT
from ._searcher import SEARCH_MODES as SEARCH_MODES
from ._searcher import SearchMode as SearchMode

__all__ = (
    "DEFAULT_KEYWORD_WEIGHT",
    "SEARCH_MODES",
    "SearchMode",
)

present_as(globals(), __name__)
