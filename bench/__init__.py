"""Benchmarks for threadmind (scripts printing JSON figures) and the shared deterministic workload."""

from __future__ import annotations
