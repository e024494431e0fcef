#!/usr/bin/env python3
"""Tarn's vector search vs hnswlib, faiss, usearch, LanceDB and a numpy exact scan, on one machine.

What it measures, on one deterministic data directory shared by every engine:

  * approximate k-NN (k = 10, cosine): recall@10 against exact ground truth and
    queries per second at single-thread query time, for each ef_search in --efs.
    All HNSW graphs use M = 16 and ef_construction = 200. The headline figure is the
    QPS at recall@10 = 0.95, interpolated linearly between the two ef settings that
    bracket 0.95;
  * filtered k-NN: ``cat < t`` for selectivities 100 %, 10 %, 1 %, 0.1 % (each
    engine's own filtered path, ef = --filter-ef, default 64): recall@10 against
    exact filtered ground truth, QPS, latency. Slow paths stop after
    --filter-budget seconds per threshold and report the queries they got through;
  * index build seconds (with the thread count used; builds may use both cores)
    and peak RSS of each engine's process (``ru_maxrss`` of the child, which
    includes the loaded dataset);
  * exact scan speed: GB/s of ``X @ q`` (numpy, 1 thread) next to Tarn's exact scan,
    both against a single-thread memory read bandwidth reference.

Engines: Tarn (the Rust binary ``tarn-vector-bench``, which prints one JSON object),
hnswlib (``knn_query`` batch, its filter= callable for filtered search), faiss
(``IndexHNSWFlat``, inner product on normalised vectors, ``IDSelectorBitmap`` for
filters), usearch (``Index(metric='cos', dtype='f32', connectivity=16,
expansion_add=200)``, expansion_search swept like ef; no filtered path in its Python
bindings), LanceDB (IVF_HNSW_FLAT with one partition if accepted, else IVF_HNSW_SQ;
one query per call as the headline, all queries in one call as a second figure,
prefilter ``where`` with a BTree on cat) and numpy. Every peer, and the data
generation, runs in its own child process (this file re-invoked with ``--child``):
threads are pinned through the environment before numpy is imported, and this
parent stays small, which keeps each child's ru_maxrss its own (Linux carries the
parent's high-water mark into a fork+exec'ed child).

Data directory (little-endian, row-major, no headers): meta.json, base.f32 (n×dim,
raw, not normalised), cat.i32 (n, uniform in [0, 1000)), queries.f32 (nq×dim),
gt.i32 (nq×100 exact top-100 by cosine, ties → lower row id), gt_cat_<t>.i32 (nq×10
exact top-10 among rows with cat < t, padded with -1). It is reused when present
with the same parameters (stamp.json). Datasets:
  * ``clustered``: n/1000 (10..1000) Gaussian centres N(0, 1), each point = centre +
    N(0, 1) noise, queries fresh draws from the same mixture. A query's top-10 lie
    in its cluster, but ~1000 cluster members at nearly equal similarity make the
    order inside the cluster, i.e. recall, depend on ef;
  * ``cisi``: the 1460 CISI abstracts embedded in data/cisi, 76 queries.

Usage (from the repository root):
  python3 benches/compare/vectors.py --preset 100k
  python3 benches/compare/vectors.py --preset 1m
  python3 benches/compare/vectors.py --dataset cisi
  python3 benches/compare/vectors.py --n 20000 --dim 384 --nq 200 --skip-tarn

Needs ``pip install numpy hnswlib faiss-cpu usearch lancedb pyarrow``. Tarn is built with
``cargo build --release -p tarn-rest-server -p tarn-benches --bin tarn-vector-bench``
(the package set of every script here, so that they share one release build;
CARGO_TARGET_DIR, default the repository's target/) unless --tarn-bin is given. --skip-tarn / --skip-peers
reuse the skipped side from an earlier DIR/results.json when there is one. Everything
is written to DIR/results.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CISI = REPO / "data" / "cisi"
THRESHOLDS = [1000, 100, 10, 1]  # cat < t: 100 %, 10 %, 1 %, 0.1 %
K = 10
GT_K = 100
M = 16
EF_CONSTRUCTION = 200
TARGET_RECALL = 0.95
PRESETS = {"100k": (100_000, 384, 1000), "1m": (1_000_000, 128, 1000)}
# Generator version and knobs: part of the reuse stamp so a change regenerates.
GEN_FORMAT = 1
NOISE_SIGMA = 1.0
ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------- data


def n_clusters(n: int) -> int:
    # ~1000 points per cluster (at least 10 clusters, at most 1000). With ~100 points
    # per cluster an HNSW search at ef >= 64 simply exhausts the query's cluster and
    # recall is ~1.0 from ef = 16 on; with ~1000 the ordering inside the cluster
    # decides recall and the ef sweep crosses 0.95 in the middle of the range.
    return min(1000, max(10, n // 1000))


def draw_clustered(rng, centres, m: int, block: int = 65536):
    """m points, each = random centre + N(0, NOISE_SIGMA²) noise, float32 throughout."""
    import numpy as np

    out = np.empty((m, centres.shape[1]), dtype=np.float32)
    for s in range(0, m, block):
        e = min(m, s + block)
        labels = rng.integers(0, len(centres), e - s)
        out[s:e] = rng.standard_normal((e - s, centres.shape[1]), dtype=np.float32)
        out[s:e] *= NOISE_SIGMA
        out[s:e] += centres[labels]
    return out


def make_clustered(n: int, dim: int, nq: int, seed: int):
    """Base, cat and queries; queries come from the same mixture but are fresh draws."""
    import numpy as np

    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((n_clusters(n), dim), dtype=np.float32)
    base = draw_clustered(rng, centres, n)
    cat = rng.integers(0, 1000, n, dtype=np.int32)
    queries = draw_clustered(rng, centres, nq)
    return base, cat, queries


def load_cisi(seed: int):
    import numpy as np

    dim = 384
    base = np.fromfile(CISI / "corpus_emb.f32", dtype="<f4").reshape(-1, dim)
    queries = np.fromfile(CISI / "queries_emb.f32", dtype="<f4").reshape(-1, dim)
    cat = np.random.default_rng(seed).integers(0, 1000, len(base), dtype=np.int32)
    return base, cat, queries


def normalised(x):
    import numpy as np

    norms = np.linalg.norm(x, axis=1, keepdims=True)
    norms[norms == 0] = 1.0  # a zero vector stays zero: similarity 0 to everything
    return (x / norms).astype(np.float32)


def exact_topk(base_n, queries_n, k: int, rows=None):
    """Exact top-k row ids by inner product of normalised vectors, best first.

    Ties are broken by lower row id: every candidate scoring >= the k-th best score
    is kept and sorted by (-score, id), so the cut at k is exact. Works in query
    blocks so at most ~50 M scores are materialised at once. ``rows`` restricts the
    search to that (ascending) subset of row ids; missing slots are -1.
    """
    import numpy as np

    nq = len(queries_n)
    out = np.full((nq, k), -1, dtype=np.int32)
    sub = base_n if rows is None else base_n[rows]
    m = len(sub)
    kk = min(k, m)
    if kk == 0:
        return out
    block = max(1, min(nq, 50_000_000 // m))
    for s in range(0, nq, block):
        scores = queries_n[s : s + block] @ sub.T
        kth = np.partition(scores, m - kk, axis=1)[:, m - kk]
        for i, row in enumerate(scores):
            cand = np.flatnonzero(row >= kth[i])
            top = cand[np.lexsort((cand, -row[cand]))[:kk]]
            out[s + i, :kk] = top if rows is None else rows[top]
    return out


def write_f32(path: Path, a) -> None:
    a.astype("<f4", copy=False).tofile(path)


def write_i32(path: Path, a) -> None:
    a.astype("<i4", copy=False).tofile(path)


def expected_files(meta: dict) -> dict[str, int]:
    n, dim, nq = meta["n"], meta["dim"], meta["nq"]
    files = {"base.f32": n * dim * 4, "cat.i32": n * 4, "queries.f32": nq * dim * 4,
             "gt.i32": nq * GT_K * 4}
    for t in meta["thresholds"]:
        files[f"gt_cat_{t}.i32"] = nq * K * 4
    return files


def prepare(data: Path, dataset: str, n: int, dim: int, nq: int, seed: int,
            thresholds: list[int] = THRESHOLDS) -> dict:
    """Writes the data directory unless it already holds these parameters; returns meta."""
    import numpy as np

    if dataset == "cisi":
        # Shape comes from the files; --n/--dim/--nq do not apply.
        dim = 384
        n = (CISI / "corpus_emb.f32").stat().st_size // (dim * 4)
        nq = (CISI / "queries_emb.f32").stat().st_size // (dim * 4)
    meta = {"dataset": dataset, "n": n, "dim": dim, "nq": nq, "seed": seed,
            "thresholds": thresholds}
    gen = {"format": GEN_FORMAT}
    if dataset == "clustered":
        gen.update(clusters=n_clusters(n), noise_sigma=NOISE_SIGMA)
    stamp = {"meta": meta, "generator": gen}
    stamp_path = data / "stamp.json"
    files = expected_files(meta)
    if (stamp_path.exists() and json.loads(stamp_path.read_text()) == stamp
            and all((data / f).exists() and (data / f).stat().st_size == size
                    for f, size in files.items())):
        log(f"data: reusing {data}")
        return meta

    log(f"data: generating {dataset} n={n} dim={dim} nq={nq} seed={seed} in {data} ...")
    start = time.perf_counter()
    for old in ("stamp.json", "meta.json"):  # an interrupted run must not look complete
        (data / old).unlink(missing_ok=True)
    if dataset == "cisi":
        base, cat, queries = load_cisi(seed)
    else:
        base, cat, queries = make_clustered(n, dim, nq, seed)
    write_f32(data / "base.f32", base)
    write_i32(data / "cat.i32", cat)
    write_f32(data / "queries.f32", queries)
    log(f"data: vectors written in {time.perf_counter() - start:.1f} s, ground truth ...")

    base_n, queries_n = normalised(base), normalised(queries)
    del base
    write_i32(data / "gt.i32", exact_topk(base_n, queries_n, GT_K))
    for t in thresholds:
        rows = np.flatnonzero(cat < t)
        write_i32(data / f"gt_cat_{t}.i32", exact_topk(base_n, queries_n, K, rows))
    (data / "meta.json").write_text(json.dumps(meta))
    stamp_path.write_text(json.dumps(stamp))
    log(f"data: done in {time.perf_counter() - start:.1f} s")
    return meta


def load_data(data: Path) -> dict:
    """Everything a child needs, as numpy arrays (base raw, as stored)."""
    import numpy as np

    meta = json.loads((data / "meta.json").read_text())
    n, dim, nq = meta["n"], meta["dim"], meta["nq"]
    d = {"meta": meta,
         "base": np.fromfile(data / "base.f32", dtype="<f4").reshape(n, dim),
         "cat": np.fromfile(data / "cat.i32", dtype="<i4"),
         "queries": np.fromfile(data / "queries.f32", dtype="<f4").reshape(nq, dim),
         "gt": np.fromfile(data / "gt.i32", dtype="<i4").reshape(nq, GT_K)[:, :K]}
    d["gt_cat"] = {t: np.fromfile(data / f"gt_cat_{t}.i32", dtype="<i4").reshape(nq, K)
                   for t in meta["thresholds"]}
    return d


# ------------------------------------------------------------------ measuring helpers


def recall(found, gt) -> float | None:
    """Mean over queries of |found ∩ gt| / |gt|, ignoring -1 padding in gt.

    Queries whose ground truth is empty (no row passes the filter) are left out.
    """
    import numpy as np

    found = np.asarray(found)
    valid = gt >= 0
    hits = ((found[:, :, None] == gt[:, None, :]) & valid[:, None, :]).any(axis=2)
    denom = valid.sum(axis=1)
    keep = denom > 0
    if not keep.any():
        return None  # (not NaN: results.json stays strict JSON)
    return float((hits.sum(axis=1)[keep] / denom[keep]).mean())


def best_time(fn, min_total: float = 1.0, max_reps: int = 5) -> tuple[float, object]:
    """Best wall time of fn() over up to max_reps runs (stops after min_total s)."""
    best, result, spent, reps = float("inf"), None, 0.0, 0
    while reps < max_reps and (reps == 0 or spent < min_total):
        t = time.perf_counter()
        result = fn()
        secs = time.perf_counter() - t
        best, spent, reps = min(best, secs), spent + secs, reps + 1
    return best, result


def budgeted(search_one, nq: int, budget_s: float, chunk: int = 1):
    """Runs search_one(start, end) over query chunks until all done or budget spent.

    Slow filtered paths (a Python callable per graph node, or a near-exhaustive
    graph walk at 0.1 %) would otherwise take minutes per threshold; figures are then
    over the first ``done`` queries. Returns (rows, per-chunk seconds, done).
    """
    rows, lat, done, spent = [], [], 0, 0.0
    while done < nq and (done == 0 or spent < budget_s):
        end = min(nq, done + chunk)
        t = time.perf_counter()
        rows.extend(search_one(done, end))
        secs = time.perf_counter() - t
        lat.append(secs / (end - done))
        spent += secs
        done = end
    return rows, lat, done, spent


def latency_stats(lat_s: list[float], done: int, spent: float) -> dict:
    srt = sorted(lat_s)
    return {"queries": done, "qps": done / spent if spent else None,
            "mean_ms": spent / done * 1e3 if done else None,
            "p50_ms": srt[len(srt) // 2] * 1e3 if srt else None}


def no_rows(threshold: int, mask) -> dict | None:
    """The filtered entry for a threshold no row passes (tiny data sets), else None."""
    if mask.any():
        return None
    return {"threshold": threshold, "rows": 0, "note": "no row passes the filter"}


def pad(ids, k: int = K) -> list[int]:
    ids = [int(i) for i in ids][:k]
    return ids + [-1] * (k - len(ids))


def package_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def vm_hwm_mb() -> float | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


# -------------------------------------------------------------------- peer children
# Each runs in its own process and returns a JSON-able dict.


def child_hnswlib(data: Path, efs: list[int], filter_ef: int, budget: float) -> dict:
    import hnswlib
    import numpy as np

    d = load_data(data)
    n, dim = d["meta"]["n"], d["meta"]["dim"]
    res = {"engine": "hnswlib", "version": package_version("hnswlib"),
           "space": "cosine", "build_threads": 2, "query_threads": 1, "notes": []}
    index = hnswlib.Index(space="cosine", dim=dim)
    index.init_index(max_elements=n, M=M, ef_construction=EF_CONSTRUCTION, random_seed=100)
    index.set_num_threads(2)
    t = time.perf_counter()
    index.add_items(d["base"], np.arange(n))
    res["build_s"] = time.perf_counter() - t
    log(f"hnswlib: build {res['build_s']:.1f} s")

    index.set_num_threads(1)
    queries = d["queries"]
    res["runs"] = []
    for ef in efs:
        index.set_ef(ef)
        index.knn_query(queries[: min(50, len(queries))], k=K)  # warm-up
        secs, (labels, _) = best_time(lambda: index.knn_query(queries, k=K))
        r = {"ef": ef, "threads": 1, "recall": recall(labels, d["gt"]),
             "qps": len(queries) / secs}
        res["runs"].append(r)
        log(f"hnswlib: ef {ef} recall {r['recall']:.4f} qps {r['qps']:.0f}")

    # filter= is a Python callable invoked per visited node (GIL round trip each
    # time), so this measures hnswlib's filtered path *through Python*, not its C++.
    res["notes"].append("filtered: hnswlib filter= Python callable per visited node "
                        "(slow by construction; C++ filter functors are not "
                        "reachable from Python)")
    index.set_ef(filter_ef)
    res["filtered"] = []
    for t_ in d["meta"]["thresholds"]:
        mask = d["cat"] < t_
        if empty := no_rows(t_, mask):
            res["filtered"].append(empty)
            continue
        allowed = mask.tolist().__getitem__  # fastest callable: a builtin method
        k_eff = min(K, int(mask.sum()))  # hnswlib raises if asked for more than exist
        errors = 0

        def one(s, e):
            nonlocal errors
            try:
                labels, _ = index.knn_query(queries[s:e], k=k_eff, filter=allowed)
                return [pad(labels[0])]
            except RuntimeError:  # hnswlib raises when it finds fewer than k
                errors += 1
                return [pad([])]

        rows, lat, done, spent = budgeted(one, len(queries), budget)
        f = {"threshold": t_, "rows": int(mask.sum()), "ef": filter_ef,
             "recall": recall(np.array(rows), d["gt_cat"][t_][:done]), "errors": errors}
        f.update(latency_stats(lat, done, spent))
        res["filtered"].append(f)
        log(f"hnswlib: filter cat<{t_} recall {fmt(f['recall'], '.4f')} qps {f['qps']:.1f} "
            f"({done} queries)")
    return res


def child_faiss(data: Path, efs: list[int], filter_ef: int, budget: float) -> dict:
    import faiss
    import numpy as np

    d = load_data(data)
    n, dim = d["meta"]["n"], d["meta"]["dim"]
    res = {"engine": "faiss", "version": faiss.__version__,
           "index": f"IndexHNSWFlat(dim, {M}, METRIC_INNER_PRODUCT) on normalised vectors",
           "build_threads": 2, "query_threads": 1, "notes": []}
    base = d.pop("base")
    faiss.normalize_L2(base)  # in place: no second copy of the data set
    queries = np.ascontiguousarray(d["queries"])
    faiss.normalize_L2(queries)
    index = faiss.IndexHNSWFlat(dim, M, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = EF_CONSTRUCTION
    faiss.omp_set_num_threads(2)
    t = time.perf_counter()
    index.add(base)
    res["build_s"] = time.perf_counter() - t
    log(f"faiss: build {res['build_s']:.1f} s")
    del base  # the index holds its own copy

    faiss.omp_set_num_threads(1)
    res["runs"] = []
    for ef in efs:
        params = faiss.SearchParametersHNSW(efSearch=ef)
        index.search(queries[:50], K, params=params)  # warm-up
        secs, (_, labels) = best_time(lambda: index.search(queries, K, params=params))
        r = {"ef": ef, "threads": 1, "recall": recall(labels, d["gt"]),
             "qps": len(queries) / secs}
        res["runs"].append(r)
        log(f"faiss: ef {ef} recall {r['recall']:.4f} qps {r['qps']:.0f}")

    res["filtered"] = []
    if not hasattr(faiss, "IDSelectorBitmap"):
        res["notes"].append("filtered: faiss.IDSelectorBitmap not available")
        return res
    res["notes"].append("filtered: SearchParametersHNSW(sel=IDSelectorBitmap, "
                        f"efSearch={filter_ef}), batch search in chunks of 10 queries")
    for t_ in d["meta"]["thresholds"]:
        mask = d["cat"] < t_
        if empty := no_rows(t_, mask):
            res["filtered"].append(empty)
            continue
        bits = np.packbits(mask, bitorder="little")  # faiss reads bit i&7 of byte i>>3
        sel = faiss.IDSelectorBitmap(n, faiss.swig_ptr(bits))
        params = faiss.SearchParametersHNSW(sel=sel, efSearch=filter_ef)

        def one(s, e):
            _, labels = index.search(queries[s:e], K, params=params)
            return labels.tolist()

        rows, lat, done, spent = budgeted(one, len(queries), budget, chunk=10)
        found = np.array(rows)
        f = {"threshold": t_, "rows": int(mask.sum()), "ef": filter_ef,
             "recall": recall(found, d["gt_cat"][t_][:done]),
             # faiss's HNSW walk ends as if unfiltered, so at low selectivity it
             # returns fewer than k ids (-1): the share of such empty slots.
             "empty_slots": float((found < 0).mean())}
        f.update(latency_stats(lat, done, spent))
        f["p50_ms"] = None  # chunks of 10: per-query p50 is not observed
        res["filtered"].append(f)
        log(f"faiss: filter cat<{t_} recall {fmt(f['recall'], '.4f')} qps {f['qps']:.1f}, "
            f"{100 * f['empty_slots']:.0f} % of result slots empty")
    return res


def child_usearch(data: Path, efs: list[int]) -> dict:
    import numpy as np
    import usearch
    from usearch.index import Index

    d = load_data(data)
    n, dim = d["meta"]["n"], d["meta"]["dim"]
    # dtype f32: usearch's default for cosine is bf16 (quantised vectors); f32 keeps
    # full float32 vectors like every other engine here.
    res = {"engine": "usearch", "version": usearch.__version__,
           "index": f"Index(ndim={dim}, metric='cos', dtype='f32', connectivity={M}, "
                    f"expansion_add={EF_CONSTRUCTION})",
           "build_threads": 2, "query_threads": 1,
           "notes": ["dtype f32 (usearch's default for cos is bf16)",
                     "filtered: no filtered search in the Python bindings (the C++ "
                     "predicate callback is not exposed): not measured"]}
    index = Index(ndim=dim, metric="cos", dtype="f32", connectivity=M,
                  expansion_add=EF_CONSTRUCTION)
    base = d.pop("base")
    t = time.perf_counter()
    index.add(np.arange(n, dtype=np.uint64), base, threads=2)
    res["build_s"] = time.perf_counter() - t
    log(f"usearch: build {res['build_s']:.1f} s")
    del base

    queries = d["queries"]
    res["runs"] = []
    for ef in efs:
        index.expansion_search = ef
        index.search(queries[: min(50, len(queries))], K, threads=1)  # warm-up
        secs, matches = best_time(lambda: index.search(queries, K, threads=1))
        labels = np.asarray(matches.keys).astype(np.int64)
        r = {"ef": ef, "threads": 1, "recall": recall(labels, d["gt"]),
             "qps": len(queries) / secs}
        res["runs"].append(r)
        log(f"usearch: ef {ef} recall {r['recall']:.4f} qps {r['qps']:.0f}")
    res["filtered"] = []
    return res


def child_lancedb_build(data: Path, table_dir: Path) -> dict:
    """Writes the table and builds the vector index (separate process from queries)."""
    import lancedb
    import numpy as np
    import pyarrow as pa
    from lancedb.index import BTree, HnswFlat, HnswSq

    d = load_data(data)
    n, dim = d["meta"]["n"], d["meta"]["dim"]
    vectors = pa.FixedSizeListArray.from_arrays(pa.array(d.pop("base").ravel()), dim)
    table = pa.table({"id": pa.array(np.arange(n, dtype=np.int64)), "vector": vectors,
                      "cat": pa.array(d["cat"])})
    res = {"engine": "lancedb", "version": lancedb.__version__, "notes": [],
           "build_threads": os.environ.get("LANCE_CPU_THREADS", os.cpu_count())}
    db = lancedb.connect(str(table_dir))
    t = time.perf_counter()
    tbl = db.create_table("vectors", data=table, mode="overwrite")
    res["load_s"] = time.perf_counter() - t
    del table, vectors

    # The unified config API; the deprecated create_index(metric=..., index_type=...)
    # builds exactly these objects. FLAT keeps full float32 vectors like the others.
    common = dict(distance_type="cosine", num_partitions=1, m=M,
                  ef_construction=EF_CONSTRUCTION)
    for name, cls in (("IVF_HNSW_FLAT", HnswFlat), ("IVF_HNSW_SQ", HnswSq)):
        try:
            t = time.perf_counter()
            tbl.create_index("vector", config=cls(**common))
            res["build_s"] = time.perf_counter() - t
            res["index_type"] = name
            break
        except Exception as e:  # noqa: BLE001 - record why and try the next type
            res["notes"].append(f"{name} rejected: {type(e).__name__}: {e}")
    else:
        raise RuntimeError("lancedb: no HNSW index type accepted: " + "; ".join(res["notes"]))
    log(f"lancedb: load {res['load_s']:.1f} s, {res['index_type']} build {res['build_s']:.1f} s")

    # A scalar index on the filter column is what a LanceDB user would add for
    # prefiltered search; it is timed separately and not part of build_s.
    try:
        t = time.perf_counter()
        tbl.create_index("cat", config=BTree())
        res["scalar_index_s"] = time.perf_counter() - t
        res["notes"].append("BTree scalar index on cat (for the prefilter)")
    except Exception as e:  # noqa: BLE001
        res["notes"].append(f"BTree on cat failed: {type(e).__name__}: {e}")
    try:
        res["indices"] = [str(i) for i in tbl.list_indices()]
        stats = tbl.index_stats("vector_idx")
        if stats is not None:
            res["indexed_rows"] = stats.num_indexed_rows
            res["unindexed_rows"] = stats.num_unindexed_rows
    except Exception as e:  # noqa: BLE001 - informative only
        res["notes"].append(f"index stats unavailable: {e}")
    res["disk_bytes"] = sum(p.stat().st_size for p in table_dir.rglob("*") if p.is_file())
    return res


def child_lancedb_query(data: Path, table_dir: Path, efs: list[int], filter_ef: int,
                        budget: float) -> dict:
    import lancedb
    import numpy as np

    d = load_data(data)
    queries = d["queries"]
    tbl = lancedb.connect(str(table_dir)).open_table("vectors")
    threads = os.environ.get("LANCE_CPU_THREADS")
    res = {"query_threads": threads, "notes": [
        "runs: one query per call, tbl.search(q).distance_type('cosine').limit(10)"
        ".ef(ef).select(['id', '_distance']).to_arrow(); includes the Python/Arrow "
        "per-call overhead",
        "batch_runs: all queries in one tbl.search([q, ...]) call (Lance's batch path, "
        "the analogue of hnswlib/faiss batch calls)",
        f"queries with LANCE_CPU_THREADS={threads} (Lance's IO runtime keeps its own "
        "threads)"]}

    def builder(q, ef):
        # Selecting _distance too: without it Lance logs a deprecation warning per query.
        return (tbl.search(q, vector_column_name="vector").distance_type("cosine")
                .limit(K).ef(ef).select(["id", "_distance"]))

    def query(q, ef, where=None):
        b = builder(q, ef)
        if where is not None:
            b = b.where(where, prefilter=True)
        return pad(b.to_arrow()["id"].to_pylist())

    def batch(ef):
        out = builder(list(queries), ef).to_arrow()
        rows = [[] for _ in queries]
        for qi, i in zip(out["query_index"].to_pylist(), out["id"].to_pylist()):
            rows[qi].append(i)
        return [pad(r) for r in rows]

    for q in queries[: min(20, len(queries))]:
        query(q, efs[0])  # warm-up: opens the index, fills caches
    res["runs"], res["batch_runs"] = [], []
    for ef in efs:
        rows, lat, done, spent = budgeted(lambda s, e: [query(queries[s], ef)],
                                          len(queries), float("inf"))
        r = {"ef": ef, "threads": 1, "recall": recall(np.array(rows), d["gt"]),
             "qps": done / spent, "p50_ms": sorted(lat)[len(lat) // 2] * 1e3}
        res["runs"].append(r)
        secs, rows = best_time(lambda: batch(ef), min_total=1.0, max_reps=3)
        res["batch_runs"].append({"ef": ef, "threads": 1, "qps": len(queries) / secs,
                                  "recall": recall(np.array(rows), d["gt"])})
        log(f"lancedb: ef {ef} recall {r['recall']:.4f} qps {r['qps']:.0f} "
            f"(batched {res['batch_runs'][-1]['qps']:.0f})")

    res["filtered"] = []
    for t_ in d["meta"]["thresholds"]:
        mask = d["cat"] < t_
        if empty := no_rows(t_, mask):
            res["filtered"].append(empty)
            continue
        where = f"cat < {t_}"
        rows, lat, done, spent = budgeted(
            lambda s, e: [query(queries[s], filter_ef, where)], len(queries), budget)
        f = {"threshold": t_, "rows": int(mask.sum()), "ef": filter_ef,
             "recall": recall(np.array(rows), d["gt_cat"][t_][:done])}
        f.update(latency_stats(lat, done, spent))
        res["filtered"].append(f)
        log(f"lancedb: prefilter {where} recall {fmt(f['recall'], '.4f')} qps {f['qps']:.0f}")
    return res


def child_numpy(data: Path) -> dict:
    """Single-thread exact scan GB/s and a memory read bandwidth reference."""
    import numpy as np

    d = load_data(data)
    base = np.ascontiguousarray(d["base"])
    n, dim = base.shape
    nbytes = base.nbytes
    inv_norms = 1.0 / np.maximum(np.linalg.norm(base, axis=1), 1e-30).astype(np.float32)
    qs = d["queries"][:5]

    def kernel():
        for q in qs:
            base @ q

    def search():  # what an exact top-10 query costs: scores, cosine, top-k
        for q in qs:
            s = (base @ q) * inv_norms
            top = np.argpartition(-s, K)[:K]
            top[np.argsort(-s[top])]

    kernel()
    k_s, _ = best_time(kernel, min_total=2.0, max_reps=10)
    s_s, _ = best_time(search, min_total=2.0, max_reps=10)
    res = {"engine": "numpy", "version": np.__version__, "threads": 1,
           "env": {k: os.environ.get(k) for k in ONE_THREAD},
           "data_bytes": nbytes,
           "gbps_kernel": nbytes * len(qs) / k_s / 1e9,
           "gbps_search": nbytes * len(qs) / s_s / 1e9}
    del d, base

    # Read bandwidth: a sum over 1 GiB of uint64 (far larger than any cache), one
    # thread; it is a streaming read with trivial arithmetic.
    big = np.ones(1 << 27, dtype=np.uint64)
    r_s, _ = best_time(lambda: np.add.reduce(big), min_total=1.0, max_reps=5)
    res["bandwidth_gbps"] = big.nbytes / r_s / 1e9
    res["bandwidth_method"] = "np.add.reduce over 1 GiB uint64, best of up to 5"
    res["process_threads"] = int(next(
        line.split()[1] for line in Path("/proc/self/status").read_text().splitlines()
        if line.startswith("Threads:")))
    log(f"numpy: X@q {res['gbps_kernel']:.2f} GB/s, exact top-10 "
        f"{res['gbps_search']:.2f} GB/s, read bandwidth {res['bandwidth_gbps']:.2f} GB/s")
    return res


def run_child_main(args) -> None:
    kind, data = args.child, args.data
    efs = parse_ints(args.efs)
    if kind == "hnswlib":
        res = child_hnswlib(data, efs, args.filter_ef, args.filter_budget)
    elif kind == "faiss":
        res = child_faiss(data, efs, args.filter_ef, args.filter_budget)
    elif kind == "usearch":
        res = child_usearch(data, efs)
    elif kind == "lancedb-build":
        res = child_lancedb_build(data, args.lance_dir)
    elif kind == "lancedb-query":
        res = child_lancedb_query(data, args.lance_dir, efs, args.filter_ef,
                                  args.filter_budget)
    elif kind == "numpy":
        res = child_numpy(data)
    elif kind == "prepare":
        res = prepare(data, args.dataset, args.n, args.dim, args.nq, args.seed,
                      parse_ints(args.thresholds))
    else:
        raise SystemExit(f"unknown child {kind}")
    if kind != "prepare":
        res["vm_hwm_mb"] = vm_hwm_mb()
    print(json.dumps(res), flush=True)


# ------------------------------------------------------------------ parent: running


def run_process(cmd: list[str], env: dict | None = None) -> tuple[str, float, float]:
    """Runs cmd (stderr passes through); returns (stdout, peak RSS MB, wall seconds).

    os.wait4 gives this child's own ru_maxrss, unlike RUSAGE_CHILDREN which is the
    maximum over every child ever waited for.
    """
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, env=env, text=True)
    out = p.stdout.read()
    p.stdout.close()
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise RuntimeError(f"{cmd[0]} ... exited with {p.returncode}")
    return out, usage.ru_maxrss / 1024, time.perf_counter() - t


def run_peer(kind: str, args, extra_env: dict | None = None) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", kind,
           "--data", str(args.data), "--efs", args.efs,
           "--filter-ef", str(args.filter_ef), "--filter-budget", str(args.filter_budget)]
    if args.lance_dir is not None:
        cmd += ["--lance-dir", str(args.lance_dir)]
    env = dict(os.environ, **ONE_THREAD, **(extra_env or {}))
    log(f"peer: {kind}")
    out, rss, wall = run_process(cmd, env)
    res = json.loads(out.strip().splitlines()[-1])
    res["peak_rss_mb"] = rss  # == the child's VmHWM, as this process stays small
    res["wall_s"] = wall
    return res


def run_prepare(args) -> dict:
    """Data generation and ground truth run in a child with numpy's default threads.

    Keeping big arrays out of this process matters for memory figures: a child's
    ru_maxrss starts at its parent's high-water mark (Linux carries it over exec).
    """
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "prepare",
           "--data", str(args.data), "--dataset", args.dataset, "--n", str(args.n),
           "--dim", str(args.dim), "--nq", str(args.nq), "--seed", str(args.seed),
           "--thresholds", args.thresholds]
    out, _, _ = run_process(cmd)
    return json.loads(out.strip().splitlines()[-1])


def run_lancedb(args) -> dict:
    """Build and query in two processes: the build may use every core (Lance's
    default), the queries are pinned to one CPU thread."""
    args.lance_dir = Path(tempfile.mkdtemp(prefix="lancedb-", dir=args.data))
    try:
        build = run_peer("lancedb-build", args)
        query = run_peer("lancedb-query", args, {"LANCE_CPU_THREADS": "1"})
    finally:
        shutil.rmtree(args.lance_dir, ignore_errors=True)
        args.lance_dir = None
    res = dict(build)
    res["notes"] = build.get("notes", []) + query.get("notes", [])
    res.update({k: query.get(k) for k in ("runs", "batch_runs", "filtered",
                                          "query_threads")})
    res["build_peak_rss_mb"] = build["peak_rss_mb"]
    res["peak_rss_mb"] = query["peak_rss_mb"]  # serving process
    res["vm_hwm_mb"] = query.get("vm_hwm_mb")
    return res


def run_peers(args) -> dict:
    peers = {}
    runners = {"hnswlib": lambda: run_peer("hnswlib", args),
               "faiss": lambda: run_peer("faiss", args),
               "usearch": lambda: run_peer("usearch", args),
               "lancedb": lambda: run_lancedb(args),
               "numpy": lambda: run_peer("numpy", args)}
    for name in args.peers.split(","):
        try:
            peers[name] = runners[name]()
        except Exception as e:  # noqa: BLE001 - one failing peer must not lose the rest
            log(f"peer {name} failed: {e}")
            peers[name] = {"engine": name, "error": str(e)}
    return peers


def target_dir() -> Path:
    return Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))


def build_tarn() -> Path:
    # The package set of every bench script (features resolve per set): one release
    # build of DataFusion serves them all.
    cmd = ["cargo", "build", "--release", "-p", "tarn-rest-server", "-p", "tarn-benches",
           "--bin", "tarn-vector-bench", "--message-format=json-render-diagnostics"]
    log("tarn: " + " ".join(cmd))
    env = dict(os.environ, CARGO_TARGET_DIR=str(target_dir()))
    out = subprocess.run(cmd, cwd=REPO, check=True, stdout=subprocess.PIPE, text=True,
                         env=env)
    exe = None
    for line in out.stdout.splitlines():
        msg = json.loads(line)
        if (msg.get("reason") == "compiler-artifact" and msg.get("executable")
                and msg["target"]["name"] == "tarn-vector-bench"):
            exe = msg["executable"]
    if exe is None:
        raise RuntimeError("cargo did not report the tarn-vector-bench executable")
    return Path(exe)


def run_tarn(args) -> dict:
    exe = args.tarn_bin or build_tarn()
    work = args.data / "tarn-work"
    cmd = [str(exe), "--data", str(args.data), "--work", str(work), "--efs", args.efs,
           "--threads", args.tarn_threads]
    log("tarn: " + " ".join(cmd))
    out, rss, wall = run_process(cmd)
    res = json.loads(out)
    res["process_peak_rss_mb"] = rss
    res["wall_s"] = wall
    return res


# ------------------------------------------------------------------ parent: summary


def single_thread_runs(section: dict | None) -> list[dict]:
    runs = (section or {}).get("runs") or []
    return sorted((r for r in runs if r.get("threads", 1) == 1 and r.get("recall") is not None
                   and r.get("qps") is not None), key=lambda r: r["ef"])


def qps_at_recall(runs: list[dict], target: float = TARGET_RECALL) -> dict:
    """QPS at the target recall, linear between the bracketing ef settings.

    If even the smallest ef reaches the target, its QPS is a lower bound ("≥"); if no
    ef reaches it, there is no figure and the best recall is reported instead.
    """
    if not runs:
        return {"qps": None, "note": "no runs"}
    if runs[0]["recall"] >= target:
        return {"qps": runs[0]["qps"], "lower_bound": True,
                "note": f"≥: ef {runs[0]['ef']} already at recall {runs[0]['recall']:.3f}"}
    for lo, hi in zip(runs, runs[1:]):
        if lo["recall"] < target <= hi["recall"]:
            w = (target - lo["recall"]) / (hi["recall"] - lo["recall"])
            return {"qps": lo["qps"] + w * (hi["qps"] - lo["qps"]),
                    "note": f"between ef {lo['ef']} and {hi['ef']}"}
    best = max(r["recall"] for r in runs)
    return {"qps": None, "note": f"recall {target} not reached (max {best:.3f})"}


def filtered_at(section: dict | None, threshold: int) -> dict | None:
    for f in (section or {}).get("filtered") or []:
        if f.get("threshold") == threshold:
            return f
    return None


def ratio(other, tarn) -> float | None:
    if other is None or tarn is None or tarn == 0:
        return None
    return other / tarn


def summarise(tarn: dict, peers: dict) -> dict:
    sections = {"tarn graph": tarn.get("graph"), "tarn search": tarn.get("search"),
                "tarn sql": tarn.get("sql"), "hnswlib": peers.get("hnswlib"),
                "faiss": peers.get("faiss"), "usearch": peers.get("usearch"),
                "lancedb": peers.get("lancedb")}
    lance_batch = {"runs": (peers.get("lancedb") or {}).get("batch_runs")}
    at95 = {name: qps_at_recall(single_thread_runs(sec)) for name, sec in sections.items()}
    at95["lancedb batched"] = qps_at_recall(single_thread_runs(lance_batch))
    filt = {name: filtered_at(sections[name], 10)
            for name in ("tarn sql", "lancedb", "hnswlib", "faiss", "usearch")}
    builds = {name: (sec or {}).get("build_s") for name, sec in sections.items()
              if name != "tarn search"}
    exact_t = tarn.get("exact") or {}
    exact_n = peers.get("numpy") or {}
    return {"qps_at_recall_0.95": at95, "filtered_1pct": filt, "build_s": builds,
            "exact": {"tarn": exact_t, "numpy": {k: exact_n.get(k) for k in
                                                 ("gbps_kernel", "gbps_search",
                                                  "bandwidth_gbps")}}}


# ------------------------------------------------------------------ parent: report


def fmt(v, spec: str = ".0f") -> str:
    if v is None or (isinstance(v, float) and v != v):
        return "-"
    return format(v, spec)


def pct_or_dash(v) -> str:
    return "-" if v is None else f"{100 * v:.0f} %"


def fmt_ratio(r) -> str:
    if r is None:
        return "-"
    return f"{r:.2f}" if r >= 0.1 else f"{r:.3g}"


def table(head: tuple, rows: list[tuple]) -> str:
    lines = [tuple(head)] + [tuple(str(c) for c in r) for r in rows]
    widths = [max(len(r[i]) for r in lines) for i in range(len(head))]
    out = []
    for n, r in enumerate(lines):
        out.append("  ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i])
                             for i, c in enumerate(r)).rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def engine_tables(tarn: dict, peers: dict) -> list[str]:
    out = []
    sections = [("Tarn graph (direct)", tarn.get("graph")),
                ("Tarn search (tarn-search over the table)", tarn.get("search")),
                ("Tarn SQL", tarn.get("sql")), ("hnswlib", peers.get("hnswlib")),
                ("faiss IndexHNSWFlat", peers.get("faiss")),
                ("usearch Index (f32)", peers.get("usearch")),
                ("LanceDB " + str((peers.get("lancedb") or {}).get("index_type", "")),
                 peers.get("lancedb"))]
    batch = (peers.get("lancedb") or {}).get("batch_runs")
    if batch:
        sections.append(("LanceDB, all queries in one search() call", {"runs": batch}))
    for title, sec in sections:
        if not sec:
            continue
        if sec.get("error"):
            out.append(f"{title}: FAILED: {sec['error']}")
            continue
        rows = [(r.get("ef"), r.get("threads", 1), fmt(r.get("recall"), ".4f"),
                 fmt(r.get("qps"))) for r in sorted(sec.get("runs") or [],
                                                   key=lambda r: (r.get("threads", 1),
                                                                  r.get("ef", 0)))]
        extra = []
        if sec.get("build_s") is not None:
            extra.append(f"build {sec['build_s']:.1f} s"
                         + (f" ({sec['build_threads']} threads)" if sec.get("build_threads")
                            else ""))
        for key, label in (("load_s", "load"), ("segments", "segments"),
                           ("peak_rss_mb", "peak RSS MB"), ("version", "version")):
            if sec.get(key) is not None:
                v = sec[key]
                extra.append(f"{label} {v:.1f}" if isinstance(v, float) else f"{label} {v}")
        out.append(title + (": " + ", ".join(extra) if extra else ""))
        out.append(table(("ef", "threads", "recall@10", "QPS"), rows))
        for note in sec.get("notes") or []:
            out.append(f"  note: {note}")
        out.append("")
    return out


def filtered_table(tarn: dict, peers: dict, thresholds: list[int]) -> str:
    engines = [("Tarn SQL", tarn.get("sql")), ("LanceDB prefilter", peers.get("lancedb")),
               ("hnswlib filter=", peers.get("hnswlib")), ("faiss IDSelector", peers.get("faiss"))]
    rows = []
    for t in thresholds:
        # Rows passing the filter: the peers report it; Tarn may not.
        passing = next((f["rows"] for _, sec in engines
                        if (f := filtered_at(sec, t)) and f.get("rows") is not None), "?")
        for name, sec in engines:
            f = filtered_at(sec, t)
            if f is None:
                continue
            rows.append((f"{t / 10:g} %", name, passing, fmt(f.get("recall"), ".4f"),
                         fmt(f.get("qps"), ".1f"), fmt(f.get("mean_ms"), ".3f"),
                         fmt(f.get("p50_ms"), ".3f"), fmt(f.get("exact_mean_ms"), ".3f"),
                         pct_or_dash(f.get("empty_slots")),
                         f.get("queries", "all" if f.get("qps") is not None else "-")))
    head = ("selectivity", "engine", "rows", "recall@10", "QPS", "mean ms", "p50 ms",
            "exact ms", "empty", "queries")
    return (table(head, rows) + "\n  empty: share of result slots returned as -1 "
            "(fewer than k ids found); queries: how many ran within --filter-budget")


def summary_text(s: dict, tarn: dict, peers: dict, filter_ef: int) -> list[str]:
    out = []
    at = s["qps_at_recall_0.95"]
    tg, ts, tq = (at[k]["qps"] for k in ("tarn graph", "tarn search", "tarn sql"))
    rows = []
    for name, v in at.items():
        rows.append((name, fmt(v["qps"]), fmt_ratio(ratio(v["qps"], tg)),
                     fmt_ratio(ratio(v["qps"], ts)), fmt_ratio(ratio(v["qps"], tq)),
                     v["note"]))
    out.append("QPS at recall@10 = 0.95, 1 query thread (ratio = engine ÷ Tarn; > 1: "
               "the engine is faster than Tarn)")
    out.append(table(("engine", "QPS@0.95", "÷ graph", "÷ search", "÷ SQL", "how"), rows))
    out.append("")

    f = s["filtered_1pct"]
    tq_f = (f.get("tarn sql") or {}).get("qps")
    rows = [(name, fmt((v or {}).get("recall"), ".4f"), fmt((v or {}).get("qps"), ".1f"),
             fmt_ratio(ratio((v or {}).get("qps"), tq_f)), (v or {}).get("queries", "-"))
            for name, v in f.items()]
    out.append(f"filtered search at 1 % (cat < 10), peers at ef {filter_ef}")
    out.append(table(("engine", "recall@10", "QPS", "÷ Tarn SQL", "queries"), rows))
    out.append("")

    b = s["build_s"]
    tb = b.get("tarn graph")
    threads = {"tarn graph": (tarn.get("graph") or {}).get("build_threads"),
               "tarn sql": (tarn.get("sql") or {}).get("build_threads")}
    for p in ("hnswlib", "faiss", "usearch", "lancedb"):
        threads[p] = (peers.get(p) or {}).get("build_threads")
    rows = [(name, fmt(v, ".2f"), threads.get(name) or "?", fmt_ratio(ratio(v, tb)))
            for name, v in b.items()]
    out.append("index build seconds (ratio = engine ÷ Tarn graph; > 1: Tarn builds faster)")
    out.append(table(("engine", "build s", "threads", "÷ Tarn graph"), rows))
    lance = peers.get("lancedb") or {}
    if lance.get("load_s") is not None:
        out.append(f"  LanceDB table write {lance['load_s']:.2f} s (not in build); "
                   f"Tarn SQL load {fmt((tarn.get('sql') or {}).get('load_s'), '.2f')} s")
    out.append("")

    et, en = s["exact"]["tarn"], s["exact"]["numpy"]
    bw_t, bw_n = et.get("bandwidth_gbps"), en.get("bandwidth_gbps")

    def pct(v, bw):
        return "-" if v is None or not bw else f"{100 * v / bw:.0f} %"

    rows = [("Tarn kernel", fmt(et.get("gbps_kernel"), ".2f"), pct(et.get("gbps_kernel"), bw_t),
             pct(et.get("gbps_kernel"), bw_n)),
            ("Tarn exact search", fmt(et.get("gbps_search"), ".2f"),
             pct(et.get("gbps_search"), bw_t), pct(et.get("gbps_search"), bw_n)),
            ("Tarn exact SQL", fmt(et.get("gbps_sql"), ".2f"), pct(et.get("gbps_sql"), bw_t),
             pct(et.get("gbps_sql"), bw_n)),
            ("numpy X @ q", fmt(en.get("gbps_kernel"), ".2f"), pct(en.get("gbps_kernel"), bw_t),
             pct(en.get("gbps_kernel"), bw_n)),
            ("numpy exact top-10", fmt(en.get("gbps_search"), ".2f"),
             pct(en.get("gbps_search"), bw_t), pct(en.get("gbps_search"), bw_n))]
    out.append(f"exact scan, 1 thread (read bandwidth: Tarn {fmt(bw_t, '.2f')} GB/s, "
               f"numpy {fmt(bw_n, '.2f')} GB/s)")
    out.append(table(("scan", "GB/s", "% Tarn bw", "% numpy bw"), rows))
    nbytes = (peers.get("numpy") or {}).get("data_bytes")
    if nbytes is not None and nbytes < 64 << 20:
        out.append(f"  note: the base is {nbytes / 1e6:.1f} MB and may sit in cache; GB/s "
                   "above the DRAM bandwidth is then expected")
    out.append("")

    rows = [("Tarn graph", fmt((tarn.get("graph") or {}).get("peak_rss_mb"))),
            ("Tarn SQL", fmt((tarn.get("sql") or {}).get("peak_rss_mb"))),
            ("Tarn process", fmt(tarn.get("process_peak_rss_mb")))]
    for p in ("hnswlib", "faiss", "usearch", "lancedb"):
        rows.append((p, fmt((peers.get(p) or {}).get("peak_rss_mb"))))
    rows.append(("numpy (with its 1 GiB bandwidth buffer)",
                 fmt((peers.get("numpy") or {}).get("peak_rss_mb"))))
    out.append("peak RSS MB (peers: whole child process, dataset loaded included; LanceDB: "
               f"query process, build process {fmt(lance.get('build_peak_rss_mb'))})")
    out.append(table(("engine", "peak RSS MB"), rows))
    return out


def machine() -> dict:
    info = {"python": platform.python_version(), "platform": platform.platform(),
            "cpus": os.cpu_count(), "loadavg_start": os.getloadavg()}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                info["mem"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return info


def report(meta: dict, info: dict, tarn: dict, peers: dict, s: dict, filter_ef: int) -> str:
    out = [f"dataset {meta['dataset']}: n={meta['n']} dim={meta['dim']} nq={meta['nq']} "
           f"seed={meta['seed']}, k={K}, M={M}, ef_construction={EF_CONSTRUCTION}",
           f"machine: {info.get('cpus')} cpus, {info.get('cpu', '?')}, {info.get('mem', '?')}; "
           f"load average start {info['loadavg_start']}, end {info.get('loadavg_end')}", ""]
    reused = [name for name, res in [("tarn", tarn), *peers.items()] if res.get("reused")]
    if reused:
        out += [f"reused from an earlier results.json (not rerun): {', '.join(reused)}", ""]
    if tarn.get("error"):
        out.append(f"Tarn: FAILED: {tarn['error']}")
    out += engine_tables(tarn, peers)
    out.append("filtered search (cat < t), all thresholds")
    out.append(filtered_table(tarn, peers, meta["thresholds"]))
    out.append("")
    out.append("=" * 30 + " summary " + "=" * 30)
    out += summary_text(s, tarn, peers, filter_ef)
    return "\n".join(out)


# -------------------------------------------------------------------------- main


def parse_ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", choices=["clustered", "cisi"], default="clustered")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="100k",
                    help="n/dim/nq for clustered (explicit --n/--dim/--nq win)")
    ap.add_argument("--n", type=int)
    ap.add_argument("--dim", type=int)
    ap.add_argument("--nq", type=int)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--data", type=Path, help="data directory (default: "
                    "$CARGO_TARGET_DIR/compare-vectors/<name>)")
    ap.add_argument("--efs", default="16,32,64,128,256")
    ap.add_argument("--filter-ef", type=int, default=64)
    ap.add_argument("--thresholds", default=",".join(map(str, THRESHOLDS)),
                    help="filters cat < t to measure (t per mille of the rows; 10 = 1 %%)")
    ap.add_argument("--filter-budget", type=float, default=10.0,
                    help="seconds per (peer, threshold) for filtered queries; slower "
                         "paths are measured on the first queries only")
    ap.add_argument("--tarn-threads", default="1,2")
    ap.add_argument("--peers", default="hnswlib,faiss,usearch,lancedb,numpy")
    ap.add_argument("--tarn-bin", type=Path, help="use this tarn-vector-bench, do not build")
    ap.add_argument("--skip-tarn", action="store_true")
    ap.add_argument("--skip-peers", action="store_true")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--lance-dir", type=Path, help=argparse.SUPPRESS)
    return ap.parse_args()


def default_data_dir(args) -> Path:
    if args.dataset == "cisi":
        name = f"cisi-s{args.seed}"
    else:
        name = f"clustered-{args.n}x{args.dim}-q{args.nq}-s{args.seed}"
    return target_dir() / "compare-vectors" / name


def previous_results(data: Path, meta: dict) -> dict:
    """An earlier results.json for the same data, to keep the side we skip."""
    path = data / "results.json"
    if path.exists():
        old = json.loads(path.read_text())
        if old.get("meta") == meta:
            return old
    return {}


def main() -> None:
    args = parse_args()
    if args.child:
        run_child_main(args)
        return
    n, dim, nq = PRESETS[args.preset]
    args.n, args.dim, args.nq = args.n or n, args.dim or dim, args.nq or nq
    args.data = (args.data or default_data_dir(args)).resolve()
    args.data.mkdir(parents=True, exist_ok=True)
    info = machine()
    meta = run_prepare(args)
    old = previous_results(args.data, meta)

    if args.skip_tarn:
        tarn = dict(old.get("tarn") or {}, reused=bool(old.get("tarn")))
    else:
        try:
            tarn = run_tarn(args)
        except Exception as e:  # noqa: BLE001 - still run and report the peers
            log(f"tarn failed: {e}")
            tarn = {"error": str(e)}
    # Peers not run now (--skip-peers, or left out of --peers) keep their figures
    # from an earlier run on the same data, marked as reused.
    peers = {name: dict(res, reused=True) for name, res in (old.get("peers") or {}).items()}
    if not args.skip_peers:
        peers.update(run_peers(args))
    reused = sorted(name for name, res in peers.items() if res.get("reused"))
    if reused or tarn.get("reused"):
        log("reused from the previous results.json: "
            + ", ".join(reused + (["tarn"] if tarn.get("reused") else [])))
    info["loadavg_end"] = os.getloadavg()

    s = summarise(tarn, peers)
    print(report(meta, info, tarn, peers, s, args.filter_ef))
    results = {"meta": meta, "machine": info, "data_dir": str(args.data),
               "efs": parse_ints(args.efs), "filter_ef": args.filter_ef,
               "tarn": tarn, "peers": peers, "summary": s}
    (args.data / "results.json").write_text(json.dumps(results, indent=2, allow_nan=False))
    log(f"results: {args.data / 'results.json'}")


if __name__ == "__main__":
    main()
