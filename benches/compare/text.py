#!/usr/bin/env python3
"""Tarn's BM25 and hybrid search vs tantivy (Rust and PyPI) and LanceDB, in one run.

What it measures, one query at a time, each latency the mean per query of the best of
up to five passes over the query set:

  * CISI (data/cisi: 1460 abstracts with MiniLM embeddings, 76 judged queries):
    top-10 latency and nDCG@10 of BM25, vector and hybrid search — Tarn through SQL
    (every fusion), tantivy's own BM25 (Rust, linked into tarn-text-bench; and the
    PyPI bindings), LanceDB's full-text search (its native FTS index) and its hybrid
    query (vector + FTS, default reranker: RRF);
  * hybrid latency vs the sum of its vector and BM25 parts (Tarn);
  * synthetic corpus (--docs, default 100,000 documents of 4–10 sentences drawn with a
    seed from the CISI abstracts, ~900 bytes each): indexing documents/s (Tarn's
    CREATE INDEX over sealed rows, load excluded and included; tantivy Rust and PyPI,
    one writer thread; LanceDB's create_fts_index) and BM25 top-10 latency over the 76
    CISI queries;
  * freshness: Tarn's BM25 latency right after inserting 1, 100 and 10,000 documents
    (not yet indexed: the first query analyzes them, the next ones reuse that), and
    once VACUUM indexed them.

Usage (from the repository root):
  python3 benches/compare/text.py                   # 100k documents
  python3 benches/compare/text.py --docs 20000      # quick

Needs ``pip install tantivy lancedb pyarrow numpy``. Tarn's side is built with
``cargo build --release -p tarn-rest-server -p tarn-benches --bin tarn-text-bench`` (the
package set of every script here; CARGO_TARGET_DIR, default the repository's target/)
unless --tarn-bin is given. Everything is written to
DIR/results.json (DIR: --work, default $CARGO_TARGET_DIR/compare-text).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CISI = REPO / "data" / "cisi"
K = 10
MIN_RUN = 1.5
BEST_OF = 5


def lines(path: Path) -> list[tuple[int, str]]:
    out = []
    for line in path.read_text().splitlines():
        v = json.loads(line)
        out.append((int(v["id"]), v["text"]))
    return out


def embeddings(path: Path):
    import numpy as np

    return np.fromfile(path, dtype="<f4").reshape(-1, 384)


def relevant(queries) -> list[set[int]]:
    rel: dict[int, set[int]] = {}
    for line in (CISI / "qrels.tsv").read_text().splitlines():
        q, d, *_ = line.split("\t")
        rel.setdefault(int(q), set()).add(int(d))
    return [rel.get(q, set()) for q, _ in queries]


def ndcg(ranked: list[list[int]], rel: list[set[int]]) -> float:
    total = 0.0
    for r, good in zip(ranked, rel):
        dcg = sum(1 / math.log2(i + 2) for i, d in enumerate(r[:K]) if d in good)
        ideal = sum(1 / math.log2(i + 2) for i in range(min(len(good), K)))
        total += dcg / ideal if ideal else 0.0
    return total / len(ranked)


def measure(n: int, one) -> tuple[list[list[int]], float]:
    """Rankings of the first pass and mean ms per query of the best pass."""
    first, best = None, float("inf")
    began = time.perf_counter()
    for p in range(BEST_OF):
        t0 = time.perf_counter()
        ranked = [one(i) for i in range(n)]
        best = min(best, (time.perf_counter() - t0) * 1e3 / n)
        if first is None:
            first = ranked
        if time.perf_counter() - began >= MIN_RUN and p >= 1:
            break
    return first, best


def tantivy_index(docs):
    import tantivy

    sb = tantivy.SchemaBuilder()
    sb.add_integer_field("id", stored=True, fast=True)
    sb.add_text_field("body", tokenizer_name="en_stem", index_option="position")
    index = tantivy.Index(sb.build())
    t0 = time.perf_counter()
    w = index.writer(heap_size=500_000_000, num_threads=1)
    for i, text in docs:
        w.add_document(tantivy.Document(id=i, body=text))
    w.commit()
    w.wait_merging_threads()
    secs = time.perf_counter() - t0
    index.reload()
    return index, secs


def tantivy_top(index, text: str) -> list[int]:
    q, _ = index.parse_query_lenient(text, ["body"])
    searcher = index.searcher()
    hits = searcher.search(q, K).hits
    return [searcher.doc(addr)["id"][0] for _, addr in hits]


def peers_cisi(out: dict) -> None:
    import numpy as np
    import pyarrow as pa
    import lancedb

    docs = lines(CISI / "corpus.jsonl")
    queries = lines(CISI / "queries.jsonl")
    rel = relevant(queries)
    demb = embeddings(CISI / "corpus_emb.f32")
    qemb = embeddings(CISI / "queries_emb.f32")
    nq = len(queries)

    index, secs = tantivy_index(docs)
    ranked, ms = measure(nq, lambda i: tantivy_top(index, queries[i][1]))
    out["tantivy_py"] = {"bm25": {"ms": ms, "ndcg10": ndcg(ranked, rel)}, "index_s": secs}

    tmp = tempfile.mkdtemp(prefix="lance-cisi-")
    try:
        db = lancedb.connect(tmp)
        table = pa.table(
            {
                "id": pa.array([d[0] for d in docs], pa.int64()),
                "body": pa.array([d[1] for d in docs]),
                "vector": pa.FixedSizeListArray.from_arrays(
                    pa.array(demb.reshape(-1), pa.float32()), 384
                ),
            }
        )
        tbl = db.create_table("cisi", table)
        t0 = time.perf_counter()
        tbl.create_fts_index("body")
        fts_index_s = time.perf_counter() - t0
        failures = {"fts": 0, "hybrid": 0}

        def fts(i):
            try:
                rows = (
                    tbl.search(queries[i][1], query_type="fts")
                    .select(["id"])
                    .limit(K)
                    .to_list()
                )
                return [r["id"] for r in rows]
            except Exception:  # noqa: BLE001 - a query LanceDB refuses counts as empty
                failures["fts"] += 1
                return []

        def vector(i):
            rows = (
                tbl.search(qemb[i], query_type="vector")
                .metric("cosine")
                .select(["id"])
                .limit(K)
                .to_list()
            )
            return [r["id"] for r in rows]

        def hybrid(i):
            try:
                rows = (
                    tbl.search(query_type="hybrid")
                    .vector(qemb[i])
                    .text(queries[i][1])
                    .select(["id"])
                    .limit(K)
                    .to_list()
                )
                return [r["id"] for r in rows]
            except Exception:  # noqa: BLE001
                failures["hybrid"] += 1
                return []

        lance = {"fts_index_s": fts_index_s}
        for name, f in [("fts", fts), ("vector_exact", vector), ("hybrid_rrf", hybrid)]:
            ranked, ms = measure(nq, f)
            lance[name] = {"ms": ms, "ndcg10": ndcg(ranked, rel)}
        lance["failed_queries"] = {k: v // max(1, 1) for k, v in failures.items()}
        out["lancedb"] = lance
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def peers_synth(work: Path, out: dict) -> None:
    import pyarrow as pa
    import lancedb

    docs = [(json.loads(l)["id"], json.loads(l)["text"]) for l in (work / "synth.jsonl").read_text().splitlines()]
    queries = lines(CISI / "queries.jsonl")
    nq = len(queries)
    index, secs = tantivy_index(docs)
    _, ms = measure(nq, lambda i: tantivy_top(index, queries[i][1]))
    out["tantivy_py"] = {"index_s": secs, "index_docs_per_s": len(docs) / secs, "bm25_ms": ms}
    del index

    tmp = tempfile.mkdtemp(prefix="lance-synth-")
    try:
        db = lancedb.connect(tmp)
        tbl = db.create_table(
            "t",
            pa.table({"id": pa.array([d[0] for d in docs], pa.int64()), "body": pa.array([d[1] for d in docs])}),
        )
        t0 = time.perf_counter()
        tbl.create_fts_index("body")
        lsecs = time.perf_counter() - t0

        def fts(i):
            try:
                rows = tbl.search(queries[i][1], query_type="fts").select(["id"]).limit(K).to_list()
                return [r["id"] for r in rows]
            except Exception:  # noqa: BLE001
                return []

        _, lms = measure(nq, fts)
        out["lancedb"] = {"fts_index_s": lsecs, "index_docs_per_s": len(docs) / lsecs, "fts_ms": lms}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=100_000)
    ap.add_argument("--work", type=Path, default=target / "compare-text")
    ap.add_argument("--tarn-bin", type=Path)
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)

    binary = args.tarn_bin
    if binary is None:
        subprocess.run(
            ["cargo", "build", "--release", "-p", "tarn-rest-server", "-p", "tarn-benches",
             "--bin", "tarn-text-bench"],
            cwd=REPO,
            check=True,
            env={**os.environ, "CARGO_TARGET_DIR": str(target)},
        )
        binary = target / "release" / "tarn-text-bench"
    print(f"tarn-text-bench: {args.docs} synthetic documents …", file=sys.stderr)
    run = subprocess.run(
        [str(binary), "--work", str(args.work), "--docs", str(args.docs), "--cisi", str(CISI)],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    )
    results = json.loads(run.stdout)
    print("peers: CISI …", file=sys.stderr)
    peers_cisi(results["cisi"])
    print("peers: synthetic corpus …", file=sys.stderr)
    peers_synth(args.work, results["synth"])
    (args.work / "results.json").write_text(json.dumps(results, indent=2))

    c, s = results["cisi"], results["synth"]
    t = c["tarn"]
    print(f"\nCISI ({c['docs']} documents, {c['queries']} judged queries), top-10, one query at a time")
    print(f"{'run':<40} {'ms/query':>9} {'nDCG@10':>8}")
    rows = [(f"Tarn SQL {k}", v) for k, v in t.items()]
    rows += [
        ("tantivy (Rust, linked) bm25", c["tantivy"]["bm25"]),
        ("tantivy (PyPI) bm25", c["tantivy_py"]["bm25"]),
        ("LanceDB fts", c["lancedb"]["fts"]),
        ("LanceDB vector (no index: exact)", c["lancedb"]["vector_exact"]),
        ("LanceDB hybrid (default reranker, RRF)", c["lancedb"]["hybrid_rrf"]),
    ]
    for name, v in rows:
        print(f"{name:<40} {v['ms']:>9.3f} {v['ndcg10']:>8.3f}")
    ratio = lambda v: "n/a" if v is None else f"{v:.2f}"  # a run left out is null
    print(f"Tarn hybrid / (vector + bm25): {ratio(c['hybrid_vs_parts'])}")
    print(f"Tarn hybrid / (vector + bm25 at top-100, as the hybrid runs them): {ratio(c['hybrid_vs_parts_top100'])}")
    print(f"Tarn bm25 / tantivy (Rust): {ratio(c['bm25_tarn_vs_tantivy'])}")
    print(f"LanceDB queries refused: {c['lancedb']['failed_queries']}")

    print(f"\nSynthetic corpus: {s['docs']} documents, {s['avg_words']:.0f} words each on average")
    print(f"{'engine':<40} {'index docs/s':>13} {'bm25 ms/query':>14}")
    print(f"{'Tarn (CREATE INDEX over sealed rows)':<40} {s['tarn']['index_docs_per_s']:>13.0f} {s['tarn']['bm25_ms']:>14.3f}")
    print(f"{'Tarn (load + index)':<40} {s['tarn']['load_and_index_docs_per_s']:>13.0f} {'':>14}")
    print(f"{'tantivy (Rust, 1 thread)':<40} {s['tantivy']['index_docs_per_s']:>13.0f} {s['tantivy']['bm25_ms']:>14.3f}")
    print(f"{'tantivy (PyPI, 1 thread)':<40} {s['tantivy_py']['index_docs_per_s']:>13.0f} {s['tantivy_py']['bm25_ms']:>14.3f}")
    print(f"{'LanceDB (create_fts_index, fts)':<40} {s['lancedb']['index_docs_per_s']:>13.0f} {s['lancedb']['fts_ms']:>14.3f}")
    print(f"Tarn bm25 / tantivy (Rust): {s['bm25_tarn_vs_tantivy']:.2f}; top-10 overlap with tantivy: {s['top10_overlap']:.3f}")
    print(f"Short queries (pruned): Tarn {s['tarn']['bm25_short_ms']:.3f} ms, tantivy (Rust) {s['tantivy']['bm25_short_ms']:.3f} ms, "
          f"ratio {s['bm25_short_tarn_vs_tantivy']:.2f}; top-10 overlap {s['short_top10_overlap']:.3f}")
    print("Freshness (Tarn bm25 ms/query):")
    for f in s["freshness"]:
        print(f"  {f['fresh_rows']:>6} rows not yet indexed: first query {f.get('first_ms', float('nan')):.3f}, then {f['ms']:.3f}")
    print(f"  once VACUUM indexed them:  {s['caught_up_ms']:.3f}")
    print(f"\nresults: {args.work / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
