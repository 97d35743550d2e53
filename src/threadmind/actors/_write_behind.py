"""Coalesced write-behind for vector rows; it lives with the vector stores (:mod:`threadmind.stores`)."""

from __future__ import annotations

from ..stores._write_behind import CoalescingRecords as CoalescingRecords

__all__ = ("CoalescingRecords",)
