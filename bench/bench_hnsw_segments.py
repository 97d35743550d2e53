"""One hnswlib graph against the same vectors in several graphs: what a bounded load would cost the searches.

hnswlib's ``load_index`` holds the GIL for the whole file, so a process can bound that stall only by keeping its
vectors in several graphs, each loaded on its own; a search of a large scope then searches every graph.

Run: ``python -m bench.bench_hnsw_segments [--vectors 131072] [--segments 4] [--dir DIR]``. Prints JSON: the
``load_index`` time of the whole graph and of the largest segment, and per ``fetch`` (candidates asked of hnswlib,
``ef`` = max(64, fetch)) the query p50 on the whole graph, over every segment, and an exact search over the scope
that would ask that fetch at top 4 (``fetch = 8 × vectors / scope``) from a cached block.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import hnswlib  # type: ignore[import-untyped]
import numpy as np
import numpy.typing as npt

_DIM = 384
_FETCHES = (8, 100, 400, 1000)
F32 = npt.NDArray[np.float32]


def clustered(n: int, seed: int = 7) -> F32:
    """``n`` unit vectors around 256 centres (closer to text embeddings than uniform noise)."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((256, _DIM)).astype(np.float32)
    data = centres[rng.integers(0, 256, n)] + 0.6 * rng.standard_normal((n, _DIM)).astype(np.float32)
    unit: F32 = (data / np.linalg.norm(data, axis=1, keepdims=True)).astype(np.float32)
    return unit


def _saved(rows: F32, first_label: int, path: Path) -> None:
    index: Any = hnswlib.Index(space="cosine", dim=_DIM)
    index.init_index(max_elements=len(rows), M=16, ef_construction=64)
    index.add_items(rows, np.arange(first_label, first_label + len(rows)), num_threads=2)
    index.save_index(str(path))


def _loaded(path: Path) -> tuple[Any, float]:
    index: Any = hnswlib.Index(space="cosine", dim=_DIM)
    started = time.perf_counter()
    index.load_index(str(path))
    return index, time.perf_counter() - started


def _p50_ms(samples: Sequence[float]) -> float:
    return round(statistics.median(samples) * 1000.0, 3)


def measure(vectors: int, segments: int, folder: Path, queries: int = 200) -> dict[str, Any]:
    """Build, load and query one graph and ``segments`` graphs of the same ``vectors``."""
    data = clustered(vectors)
    share = vectors // segments
    _saved(data, 0, folder / "whole.bin")
    for i in range(segments):
        _saved(data[i * share:(i + 1) * share], i * share, folder / f"segment-{i}.bin")
    _loaded(folder / "whole.bin")  # the file into the page cache
    whole, whole_load = _loaded(folder / "whole.bin")
    parts = [_loaded(folder / f"segment-{i}.bin") for i in range(segments)]
    rng = np.random.default_rng(11)
    asked = data[rng.integers(0, vectors, queries)] + 0.1 * rng.standard_normal((queries, _DIM)).astype(np.float32)
    report: dict[str, Any] = {
        "vectors": vectors, "segments": segments, "load_whole_ms": round(whole_load * 1000.0, 1),
        "load_largest_segment_ms": round(max(t for _, t in parts) * 1000.0, 1),
        "load_all_segments_ms": round(sum(t for _, t in parts) * 1000.0, 1), "queries": {},
    }
    for fetch in _FETCHES:
        ef = max(64, fetch)
        whole.set_ef(ef)
        for index, _ in parts:
            index.set_ef(ef)
        on_whole: list[float] = []
        on_segments: list[float] = []
        for query in asked:
            started = time.perf_counter()
            whole.knn_query(query, k=fetch, num_threads=1)
            on_whole.append(time.perf_counter() - started)
            started = time.perf_counter()
            for index, _ in parts:
                index.knn_query(query, k=min(fetch, share), num_threads=1)
            on_segments.append(time.perf_counter() - started)
        scope = data[:min(vectors, 8 * vectors // fetch)]
        exact: list[float] = []
        for query in asked[:50]:
            started = time.perf_counter()
            np.argpartition(-(scope @ query), 4)[:4]
            exact.append(time.perf_counter() - started)
        whole_ms, segments_ms = _p50_ms(on_whole), _p50_ms(on_segments)
        report["queries"][str(fetch)] = {
            "whole_p50_ms": whole_ms, "segments_p50_ms": segments_ms,
            "segments_over_whole": round(segments_ms / whole_ms, 1) if whole_ms else None,
            "exact_scope_vectors": len(scope), "exact_p50_ms": _p50_ms(exact),
        }
    return report


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vectors", type=int, default=131_072)
    parser.add_argument("--segments", type=int, default=4)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--dir", help="where the graphs are written (default: a temporary folder)")
    args = parser.parse_args(argv)
    if args.vectors < args.segments * 1000 or args.segments < 2:
        parser.error("--segments must be at least 2, with at least 1 000 vectors each")
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        print(json.dumps(measure(args.vectors, args.segments, Path(folder), args.queries), indent=2))


if __name__ == "__main__":
    main()
