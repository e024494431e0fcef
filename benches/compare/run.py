#!/usr/bin/env python3
"""Tarn beside its peers in one command: one Markdown table of measured figures.

    python3 benches/compare/run.py            # full sizes (~8 min on 2 cores once built)
    python3 benches/compare/run.py --quick    # small sizes (~1.5 min once built)
    python3 benches/compare/run.py --no-write # do not touch benches/RESULTS.md

What it does, in order:

1. makes (or reuses) a virtualenv in benches/compare/.venv with the PyPI peers (duckdb,
   lancedb, pyarrow, numpy, hnswlib, faiss-cpu, usearch, tantivy, psycopg[binary]) and
   runs itself again with that interpreter;
2. builds Tarn's drivers once: ``cargo build --release -p tarn-rest-server -p
   tarn-benches --bins`` (the package set every script here uses, so one release build
   of DataFusion serves them all; CARGO_TARGET_DIR is honoured, else target/);
3. starts a private PostgreSQL 15 server (``/usr/lib/postgresql/15/bin``, or --pg-bin /
   PG_BIN) on a Unix socket in a temporary directory (no TCP), with fsync=on and
   synchronous_commit=on, run as the ``postgres`` user when this runs as root, and stops
   it at the end, also on errors and Ctrl-C;
4. runs the existing scripts as child processes, each on its own deterministic data,
   and reads their JSON results: ``compare.py`` (Tarn, DuckDB, SQLite, PostgreSQL: bulk
   load, GROUP BY scan, primary-key lookups, single-row durable INSERTs),
   ``vectors.py`` (Tarn, hnswlib, faiss, usearch, LanceDB, numpy: recall/QPS, index
   build, filtered search, exact scan) and ``text.py`` (Tarn, tantivy in Rust and
   Python, LanceDB: BM25 and hybrid latency, nDCG@10 on CISI);
5. prints one Markdown table (every figure measured in this run) and writes it to
   benches/RESULTS.md with the date, machine, git commit and command.

The scripts' own detailed reports go to DIR/logs/*.txt (DIR: --work, default
$CARGO_TARGET_DIR/compare-run, else target/compare-run). Inputs are kept there for
the next run (they are regenerated when the parameters change); databases and indexes
are removed at the end (--clean also removes the inputs).

This file uses only the standard library at its top level.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
VENV = HERE / ".venv"
# (pip requirement, module imported to check it)
PEERS = [("duckdb", "duckdb"), ("lancedb", "lancedb"), ("pyarrow", "pyarrow"),
         ("numpy", "numpy"), ("hnswlib", "hnswlib"), ("faiss-cpu", "faiss"),
         ("usearch", "usearch"), ("tantivy", "tantivy"), ("psycopg[binary]", "psycopg")]
BINS = ("tarn-compare", "tarn-vector-bench", "tarn-text-bench")
PG_BIN = "/usr/lib/postgresql/15/bin"

SIZES = {
    "quick": {"sql_rows": 100_000, "lookups": 2_000, "durable": 300,
              "vec_n": 20_000, "vec_dim": 384, "vec_nq": 200, "efs": "16,32,64,128",
              "thresholds": "10", "filter_budget": 2.0, "text_docs": 10_000},
    "full": {"sql_rows": 1_000_000, "lookups": 10_000, "durable": 1_000,
             "vec_n": 100_000, "vec_dim": 384, "vec_nq": 1_000, "efs": "16,32,64,128,256",
             "thresholds": "1000,100,10,1", "filter_budget": 10.0, "text_docs": 100_000},
}


def log(msg: str) -> None:
    print(f"[run.py {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------- virtualenv


def venv_python() -> Path:
    return VENV / "bin" / "python"


def in_venv() -> bool:
    return Path(sys.prefix).resolve() == VENV.resolve()


def ensure_venv_and_reexec() -> None:
    """Creates the venv and installs what is missing, then runs this file inside it."""
    py = venv_python()
    if not py.exists():
        log(f"creating {VENV}")
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    check = "import importlib.util, sys; sys.exit(0 if all(importlib.util.find_spec(m) " \
            "for m in sys.argv[1:]) else 1)"
    modules = [m for _, m in PEERS]
    if subprocess.run([str(py), "-c", check, *modules]).returncode != 0:
        log("pip install " + " ".join(p for p, _ in PEERS))
        subprocess.run([str(py), "-m", "pip", "install", "-q", "--upgrade", "pip"], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", *[p for p, _ in PEERS]],
                       check=True)
    os.execv(str(py), [str(py), str(Path(__file__).resolve()), *sys.argv[1:]])


# ---------------------------------------------------------------------------- build


def build() -> dict[str, Path]:
    cmd = ["cargo", "build", "--release", "-p", "tarn-rest-server", "-p", "tarn-benches",
           "--bins", "--message-format=json-render-diagnostics"]
    log(" ".join(cmd))
    out = subprocess.run(cmd, cwd=REPO, check=True, stdout=subprocess.PIPE, text=True)
    exes = {}
    for line in out.stdout.splitlines():
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            continue
        if msg.get("reason") == "compiler-artifact" and msg.get("executable"):
            exes[msg["target"]["name"]] = Path(msg["executable"])
    missing = [b for b in BINS if b not in exes]
    if missing:
        sys.exit(f"run.py: cargo did not report {missing}")
    return exes


# ----------------------------------------------------------------------- PostgreSQL


class Postgres:
    """A private PostgreSQL server on a Unix socket in a temporary directory (as
    tests/slt/pg/gen.py runs one, but durable: fsync and synchronous_commit on)."""

    def __init__(self, bin_dir: str):
        self.bin = bin_dir
        self.dir = tempfile.mkdtemp(prefix="tarn-run-pg-")
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            import pwd

            pw = pwd.getpwnam("postgres")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self.data = os.path.join(self.dir, "data")
        self.started = False

    def _run(self, args: list[str]) -> None:
        subprocess.run(self.as_user + args, check=True, stdout=subprocess.DEVNULL)

    def start(self) -> None:
        self._run([os.path.join(self.bin, "initdb"), "-D", self.data, "-U", "postgres",
                   "--auth=trust", "--locale=C", "--encoding=UTF8"])
        self.started = True
        self._run([os.path.join(self.bin, "pg_ctl"), "-D", self.data, "-w",
                   "-l", os.path.join(self.dir, "log"),
                   "-o", f"-k {self.dir} -c listen_addresses='' -c fsync=on "
                         "-c synchronous_commit=on", "start"])

    def stop(self) -> None:
        try:
            if self.started:
                self._run([os.path.join(self.bin, "pg_ctl"), "-D", self.data, "-m", "fast",
                           "-w", "stop"])
        finally:
            self.started = False
            shutil.rmtree(self.dir, ignore_errors=True)


def find_pg_bin(arg: str | None) -> str | None:
    cand = arg or os.environ.get("PG_BIN") or PG_BIN
    if Path(cand, "pg_ctl").exists():
        return cand
    if arg is None and os.geteuid() == 0 and shutil.which("apt-get"):
        log("PostgreSQL 15 not found: apt-get install -y postgresql-15")
        r = subprocess.run(["apt-get", "install", "-y", "postgresql-15"],
                           stdout=subprocess.DEVNULL)
        if r.returncode == 0 and Path(cand, "pg_ctl").exists():
            return cand
    return None


# -------------------------------------------------------------------------- running


def run_script(name: str, args: list[str], logs: Path) -> float:
    """Runs benches/compare/NAME with this interpreter; stdout to logs/NAME.txt,
    stderr (progress) passes through. Returns the wall seconds."""
    cmd = [sys.executable, str(HERE / name), *args]
    log(" ".join(shlex.quote(c) for c in cmd))
    t = time.perf_counter()
    with open(logs / (Path(name).stem + ".txt"), "w") as out:
        subprocess.run(cmd, cwd=REPO, check=True, stdout=out)
    return time.perf_counter() - t


def remove_databases(*dirs: Path) -> None:
    """Removes the subdirectories (databases, indexes) of each work directory; the
    generated inputs (files) stay for the next run."""
    for d in dirs:
        if d.is_dir():
            for p in d.iterdir():
                if p.is_dir() and p.name != "logs":
                    shutil.rmtree(p, ignore_errors=True)


# -------------------------------------------------------------------------- figures


def fsecs(v: float | None) -> str:
    if v is None:
        return "—"
    if v < 1e-3:
        return f"{v * 1e6:.1f} µs"
    if v < 1:
        return f"{v * 1e3:.2f} ms"
    return f"{v:.2f} s"


def fms(v: float | None) -> str:
    return "—" if v is None else (f"{v:.3f} ms" if v < 10 else f"{v:.1f} ms")


def frate(v: float | None, unit: str) -> str:
    if v is None:
        return "—"
    if v >= 1e6:
        return f"{v / 1e6:.2f} M {unit}"
    if v >= 1e4:
        return f"{v / 1e3:.0f} k {unit}"
    return f"{v:.0f} {unit}"


def fratio(r: float | None) -> str:
    if r is None or r != r:
        return "—"
    return f"{r:.2f}×" if r >= 0.1 else f"{r:.3g}×"


def div(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


class Table:
    """Rows of (workload, engine, figure, ratio); ratio > 1 always means Tarn is better."""

    def __init__(self):
        self.rows: list[tuple[str, str, str, str]] = []
        self.notes: list[str] = []

    def note(self, text: str) -> str:
        """Adds a footnote (once) and returns its marker."""
        if text not in self.notes:
            self.notes.append(text)
        return f"[^{self.notes.index(text) + 1}]"

    def add(self, workload: str, engine: str, figure: str, ratio: str = "") -> None:
        self.rows.append((workload, engine, figure, ratio))

    def group(self, workload: str, tarn: tuple[str, str], peers: list[tuple[str, str, float | None]],
              extra: list[tuple[str, str]] = ()) -> None:
        """tarn: (engine, figure); peers: (engine, figure, ratio); extra: Tarn variants."""
        self.add(workload, tarn[0], tarn[1], "1 (base)" if tarn[1] != "—" else "—")
        for engine, fig in extra:
            self.add("", engine, fig, "")
        for engine, fig, r in peers:
            self.add("", engine, fig, fratio(r) if fig != "—" else "—")

    def markdown(self) -> str:
        out = ["| workload | engine | figure | Tarn's advantage (> 1: Tarn better) |",
               "|---|---|---|---|"]
        out += [f"| {w} | {e} | {f} | {r} |" for w, e, f, r in self.rows]
        if self.notes:
            out.append("")
            out += [f"[^{i + 1}]: {n}" for i, n in enumerate(self.notes)]
        return "\n".join(out)


def sql_rows(t: Table, res: dict, failed: str | None) -> list[str]:
    """Bulk load, scan, lookup and durable-insert rows from compare.py's results."""
    checks = []
    if failed:
        mark = t.note(f"compare.py failed: {failed}")
        t.add("SQL workloads", "all", "—" + mark, "—")
        return checks
    tarn, duck, lite = res["tarn"], res["duckdb"], res["sqlite"]
    pg = res.get("postgresql")
    rows = res["rows"]
    pgmark = "" if pg else t.note("PostgreSQL was not available (no server binaries), "
                                  "so it was not run.")

    def timed(secs):
        return "—" if secs is None else f"{fsecs(secs)} ({frate(rows / secs, 'rows/s')})"

    tb = tarn["insert_arrow_s"]
    bulk = t.note("SQL bulk durability: Tarn's bulk rows use SyncMode::Process (written to "
                  "the OS per commit, no fsync; the SyncMode::Full line fsyncs each commit); "
                  "DuckDB's include a CHECKPOINT; SQLite journal_mode=WAL, "
                  "synchronous=NORMAL; PostgreSQL COPY commits with fsync. Python engines' "
                  "timings include the Python call overhead (a few µs per call), Tarn's the "
                  "Rust API's. PostgreSQL: psycopg 3 over a Unix socket, default server "
                  "settings otherwise (shared_buffers 128MB), `VACUUM (ANALYZE)` after COPY, "
                  "untimed.")
    nopg = t.note("PostgreSQL has no in-memory Arrow/bulk API through its client "
                  "protocol; its bulk path is COPY, in the next row.")
    t.group(f"bulk insert from memory, {rows:,} rows{bulk}",
            ("Tarn `insert_arrow` (100k-row commits, SyncMode::Process)", timed(tb)),
            [("DuckDB `INSERT … SELECT` from Arrow + CHECKPOINT", timed(duck.get("arrow_s")),
              div(duck.get("arrow_s"), tb)),
             ("SQLite `executemany`, one transaction", timed(lite["executemany_s"]),
              div(lite["executemany_s"], tb)),
             ("PostgreSQL" + (pgmark or nopg), "—", None)],
            [("Tarn, same with SyncMode::Full", timed(tarn.get("insert_arrow_full_s")))])
    tp = tarn["parse_s"] + tarn["insert_arrow_s"]
    lp = res["sqlite"]["parse_s"] + lite["executemany_s"]
    t.group(f"bulk insert from the TSV file incl. parsing, {rows:,} rows",
            ("Tarn parse + `insert_arrow`", timed(tp)),
            [("DuckDB `read_csv` + CHECKPOINT", timed(duck["read_csv_s"]),
              div(duck["read_csv_s"], tp)),
             ("SQLite Python parse + `executemany`", timed(lp), div(lp, tp)),
             ("PostgreSQL `COPY FROM STDIN` (committed)" + pgmark,
              timed(pg["copy_s"]) if pg else "—", div(pg["copy_s"], tp) if pg else None)])
    scan_eng = [("DuckDB", duck), ("SQLite", lite)] + ([("PostgreSQL", pg)] if pg else [])
    t.group(f"GROUP BY scan (`id % 100`, count, avg) over {rows:,} rows, best of 5",
            ("Tarn", fsecs(tarn["scan_best_s"])),
            [(n, fsecs(e["scan_best_s"]), div(e["scan_best_s"], tarn["scan_best_s"]))
             for n, e in scan_eng] + ([] if pg else [("PostgreSQL" + pgmark, "—", None)]))
    t.group(f"PK lookup p50 (`WHERE id = $1`, {tarn['lookups']:,} random keys)",
            ("Tarn", fsecs(tarn["lookup_p50_s"])),
            [(n, fsecs(e["lookup_p50_s"]), div(e["lookup_p50_s"], tarn["lookup_p50_s"]))
             for n, e in scan_eng] + ([] if pg else [("PostgreSQL" + pgmark, "—", None)]))

    def per_s(e):
        if not e or not e.get("durable_insert_s"):
            return None
        return e["durable_inserts"] / e["durable_insert_s"]

    tdur = per_s(tarn)
    dn = tarn.get("durable_inserts") or 0
    durable_note = t.note("Durable single-row INSERTs: one autocommitted statement per "
                          "row, each made durable before it returns: Tarn SyncMode::Full "
                          "(fdatasync per commit), SQLite journal_mode=WAL + "
                          "synchronous=FULL, DuckDB defaults (WAL synced at commit), "
                          "PostgreSQL fsync=on + synchronous_commit=on.")
    t.group(f"single-row durable INSERTs ({dn:,} statements){durable_note}",
            ("Tarn SyncMode::Full", frate(tdur, "rows/s")),
            [(n, frate(per_s(e), "rows/s"), div(tdur, per_s(e)))
             for n, e in [("DuckDB", duck), ("SQLite", lite)]
             + ([("PostgreSQL", pg)] if pg else [])]
            + ([] if pg else [("PostgreSQL" + pgmark, "—", None)]))
    # Result agreement of the scan across engines.
    ref = tarn["scan_check"]
    for n, e in [("DuckDB", duck), ("SQLite", lite)] + ([("PostgreSQL", pg)] if pg else []):
        c = e["scan_check"]
        ok = c[0] == ref[0] and abs(c[1] - ref[1]) <= 1e-6 * abs(ref[1])
        checks.append(f"GROUP BY result (Σ count, Σ avg) of {n} vs Tarn: "
                      f"{'identical' if ok else 'MISMATCH ' + str(c) + ' vs ' + str(ref)}")
    return checks


def vector_rows(t: Table, res: dict, failed: str | None, sizes: dict) -> list[str]:
    checks = []
    if failed:
        t.add("vector search", "all", "—" + t.note(f"vectors.py failed: {failed}"), "—")
        return checks
    meta, tarn, peers, s = res["meta"], res["tarn"], res["peers"], res["summary"]
    vecs = f"{meta['n'] // 1000}k × {meta['dim']}"
    size = f"{vecs}, {meta['nq']} queries"
    at = s["qps_at_recall_0.95"]

    def q95(name):
        v = at.get(name) or {}
        if v.get("qps") is None:
            return "—", None, v.get("note")
        ge = "≥ " if v.get("lower_bound") else ""
        return f"{ge}{v['qps']:.0f} QPS", v["qps"], v.get("note")

    def err(name):
        sec = tarn.get(name) if name.startswith("tarn") else peers.get(name)
        return (sec or {}).get("error")

    tq_fig, tq, tq_note = q95("tarn sql")
    notes = []
    for name in ("tarn sql", "tarn graph", "hnswlib", "faiss", "usearch", "lancedb"):
        v = at.get(name) or {}
        if v.get("qps") is None:
            notes.append(f"{name}: {v.get('note', 'no figure')}")
    interp = t.note("QPS at recall@10 = 0.95: each engine sweeps ef_search over "
                    f"{sizes['efs']} (k = 10, M = 16, ef_construction = 200, cosine, one "
                    "query thread; Tarn SQL one query per statement, hnswlib/faiss/usearch "
                    "all queries in one batch call on one thread, LanceDB one query per "
                    "call); the QPS is interpolated linearly between the two ef settings "
                    "that bracket recall 0.95 (≥: the smallest ef already reaches it)."
                    + (" Not reached: " + "; ".join(notes) + "." if notes else ""))
    peers_q = []
    for name, label in (("hnswlib", "hnswlib"), ("faiss", "faiss IndexHNSWFlat"),
                        ("usearch", "usearch (f32)"), ("lancedb", "LanceDB IVF_HNSW")):
        fig, v, _ = q95(name)
        if err(name):
            fig = "—" + t.note(f"{name} failed: {err(name)}")
        peers_q.append((label, fig, div(tq, v)))
    tg_fig, _, _ = q95("tarn graph")
    t.group(f"vector QPS at recall@10 = 0.95 ({size}, clustered){interp}",
            ("Tarn SQL (`ORDER BY e <#> $1 DESC LIMIT 10`)", tq_fig),
            peers_q, [("Tarn graph (tarn-vector, direct)", tg_fig)])

    b = s["build_s"]
    threads = {"tarn graph": (tarn.get("graph") or {}).get("build_threads"),
               "tarn sql": (tarn.get("sql") or {}).get("build_threads")}
    for p in ("hnswlib", "faiss", "usearch", "lancedb"):
        threads[p] = (peers.get(p) or {}).get("build_threads")

    def bfig(name):
        v = b.get(name)
        if v is None:
            return "—"
        th = threads.get(name)
        return f"{v:.1f} s" + (f" ({th} threads)" if th else "")

    tb = b.get("tarn sql")
    bnote = t.note("Build threads: hnswlib, faiss and usearch 2 (set explicitly), LanceDB "
                   "its default (all cores), Tarn its default. Tarn `CREATE INDEX` runs over "
                   "the table's sealed rows (loaded and VACUUMed first, untimed).")
    t.group(f"HNSW index build ({vecs}){bnote}",
            ("Tarn `CREATE INDEX` (sealed rows)", bfig("tarn sql")),
            [(label, bfig(name), div(b.get(name), tb))
             for name, label in (("hnswlib", "hnswlib"), ("faiss", "faiss IndexHNSWFlat"),
                                 ("usearch", "usearch (f32)"), ("lancedb", "LanceDB IVF_HNSW"))],
            [("Tarn graph (tarn-vector, direct)", bfig("tarn graph"))])

    et, en = s["exact"]["tarn"], s["exact"]["numpy"]
    t.group(f"exact scan, 1 thread ({vecs}; GB/s of vectors scored)",
            ("Tarn exact top-10 (tarn-search)", "—" if et.get("gbps_search") is None
             else f"{et['gbps_search']:.2f} GB/s"),
            [("numpy `X @ q`, cosine, argpartition top-10", "—" if en.get("gbps_search") is None
              else f"{en['gbps_search']:.2f} GB/s", div(et.get("gbps_search"), en.get("gbps_search"))),
             ("numpy `X @ q` kernel only", "—" if en.get("gbps_kernel") is None
              else f"{en['gbps_kernel']:.2f} GB/s", div(et.get("gbps_kernel"), en.get("gbps_kernel")))],
            [("Tarn exact SQL (after DROP INDEX)", "—" if et.get("gbps_sql") is None
              else f"{et['gbps_sql']:.2f} GB/s"),
             ("Tarn kernel only", "—" if et.get("gbps_kernel") is None
              else f"{et['gbps_kernel']:.2f} GB/s")])

    f = s["filtered_1pct"]

    def ffig(v):
        if not v or v.get("mean_ms") is None:
            return "—"
        return f"{v['mean_ms']:.3f} ms, recall {v['recall']:.3f}" if v.get("recall") is not None \
            else f"{v['mean_ms']:.3f} ms"

    tf = (f.get("tarn sql") or {}).get("mean_ms")
    fnote = t.note(f"Filtered: `cat < 10` (1 % of rows), top-10, one query at a time, mean "
                   f"latency; peers at ef {res.get('filter_ef')}. hnswlib's filter is a Python "
                   "callable per visited node (its C++ functor is not reachable from "
                   "Python); faiss uses IDSelectorBitmap (its walk may return fewer than "
                   "10 ids); LanceDB prefilters with a BTree on cat. Slow paths ran for at "
                   f"most {res.get('filter_budget', sizes['filter_budget'])} s (first queries "
                   "only).")
    unote = t.note("usearch's Python bindings have no filtered search (the C++ predicate "
                   "is not exposed).")
    peers_f = []
    for name, label in (("hnswlib", "hnswlib `filter=`"), ("faiss", "faiss IDSelectorBitmap"),
                        ("lancedb", "LanceDB prefilter")):
        v = f.get(name)
        peers_f.append((label, ffig(v), div((v or {}).get("mean_ms"), tf)))
    peers_f.append(("usearch" + unote, "—", None))
    t.group(f"filtered top-10 latency at 1 % selectivity ({size}){fnote}",
            ("Tarn SQL `WHERE cat < 10`", ffig(f.get("tarn sql"))), peers_f)
    for name in ("tarn sql", "hnswlib", "faiss", "lancedb"):
        v = f.get(name) or {}
        if v.get("recall") is not None and v["recall"] < 0.9:
            checks.append(f"filtered 1 % recall of {name}: {v['recall']:.3f} (< 0.9)")
    return checks


def text_rows(t: Table, res: dict, failed: str | None) -> list[str]:
    checks = []
    if failed:
        t.add("text search", "all", "—" + t.note(f"text.py failed: {failed}"), "—")
        return checks
    c, s = res["cisi"], res["synth"]
    tc = c["tarn"]
    lance = c.get("lancedb") or {}

    def lat(v):
        return None if not v else v.get("ms")

    bm = lat(tc.get("bm25"))
    tv_note = t.note("tantivy (Rust) is driven by tarn-text-bench in Tarn's process "
                     "(lenient QueryParser, `TopDocs::with_limit(10).order_by_score()`, one "
                     "in-RAM index, one writer thread); it ranks as tantivy-py does (same "
                     "nDCG) but has measured slower than tantivy-py 0.27 on the same queries "
                     "and documents. The cause is not investigated; tantivy-py is the "
                     "conservative comparison. Latencies: mean per query of the best of up "
                     "to five passes, one query at a time.")
    t.group(f"BM25 top-10 latency, CISI ({c['docs']} docs, {c['queries']} queries){tv_note}",
            ("Tarn SQL `body <#> $1`", fms(bm)),
            [("tantivy (Rust, same process)", fms(c["tantivy"]["bm25"]["ms"]),
              div(c["tantivy"]["bm25"]["ms"], bm)),
             ("tantivy-py", fms(c["tantivy_py"]["bm25"]["ms"]),
              div(c["tantivy_py"]["bm25"]["ms"], bm)),
             ("LanceDB FTS", fms(lat(lance.get("fts"))), div(lat(lance.get("fts")), bm))])
    sb = s["tarn"]["bm25_ms"]
    t.group(f"BM25 top-10 latency, synthetic ({s['docs']:,} docs, CISI queries)",
            ("Tarn SQL", fms(sb)),
            [("tantivy (Rust, same process)", fms(s["tantivy"]["bm25_ms"]),
              div(s["tantivy"]["bm25_ms"], sb)),
             ("tantivy-py", fms(s["tantivy_py"]["bm25_ms"]), div(s["tantivy_py"]["bm25_ms"], sb)),
             ("LanceDB FTS", fms(s["lancedb"]["fts_ms"]), div(s["lancedb"]["fts_ms"], sb))])
    hy = lat(tc.get("hybrid"))
    hnote = t.note("Hybrid: Tarn `(e, body) <#> engine_hybrid_record($1, $2)` (default "
                   "fusion minmax 0.5/0.5, each arm's top 100 scored exactly; the rrf line "
                   "uses 'rrf'); LanceDB `search(query_type='hybrid')` with its default "
                   "reranker (RRF). LanceDB's vector search on CISI has no index (exact).")
    t.group(f"hybrid top-10 latency, CISI{hnote}",
            ("Tarn SQL (minmax)", fms(hy)),
            [("LanceDB hybrid (RRF)", fms(lat(lance.get("hybrid_rrf"))),
              div(lat(lance.get("hybrid_rrf")), hy))],
            [("Tarn SQL (rrf)", fms(lat(tc.get("hybrid_rrf"))))])

    def nd(v):
        return None if not v else v.get("ndcg10")

    def fnd(v):
        return "—" if v is None else f"{v:.3f}"

    for label, tkey, peers in (
            ("BM25 / FTS", "bm25", [("tantivy (Rust)", nd(c["tantivy"]["bm25"])),
                                    ("tantivy-py", nd(c["tantivy_py"]["bm25"])),
                                    ("LanceDB FTS", nd(lance.get("fts")))]),
            ("vector (MiniLM embeddings)", "vector",
             [("LanceDB (exact)", nd(lance.get("vector_exact")))]),
            ("hybrid", "hybrid", [("LanceDB hybrid (RRF)", nd(lance.get("hybrid_rrf")))])):
        tv = nd(tc.get(tkey))
        extra = [("Tarn SQL (rrf)", fnd(nd(tc.get("hybrid_rrf"))))] if tkey == "hybrid" else []
        t.group(f"nDCG@10 on CISI, {label} (higher is better)",
                ("Tarn SQL" + (" (minmax)" if tkey == "hybrid" else ""), fnd(tv)),
                [(n, fnd(v), div(tv, v)) for n, v in peers], extra)
    if s.get("top10_overlap") is not None:
        checks.append(f"BM25 top-10 overlap Tarn vs tantivy (Rust), synthetic corpus: "
                      f"{s['top10_overlap']:.3f}")
    failedq = lance.get("failed_queries")
    if failedq and any(failedq.values()):
        checks.append(f"LanceDB refused queries (counted as empty results): {failedq}")
    return checks


# ------------------------------------------------------------------------- machine


def machine() -> dict:
    info = {"cores": os.cpu_count(), "python": platform.python_version(),
            "kernel": platform.release()}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                info["ram_gib"] = round(int(line.split()[1]) / 1024 / 1024, 1)
                break
    except OSError:
        pass
    return info


def shown(p: Path) -> str:
    try:
        return str(p.relative_to(REPO))
    except ValueError:
        return str(p)


def git_commit() -> str:
    def git(*a):
        r = subprocess.run(["git", "--no-optional-locks", *a], cwd=REPO,
                           capture_output=True, text=True)
        return r.stdout.strip() if r.returncode == 0 else ""

    head = git("rev-parse", "--short=12", "HEAD") or "unknown"
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return head + (" (with uncommitted changes)" if dirty else "")


# ---------------------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes, < 5 min once built")
    ap.add_argument("--no-write", action="store_true", help="do not write benches/RESULTS.md")
    ap.add_argument("--only", default="sql,vectors,text",
                    help="comma-separated subset of sql,vectors,text (default all)")
    ap.add_argument("--work", type=Path, help="data and logs (default "
                    "$CARGO_TARGET_DIR/compare-run, else target/compare-run)")
    ap.add_argument("--pg-bin", help=f"PostgreSQL binaries (default PG_BIN or {PG_BIN})")
    ap.add_argument("--clean", action="store_true",
                    help="also remove the generated inputs at the end")
    ap.add_argument("--no-venv", action="store_true",
                    help="use this interpreter as it is (the peers must be importable)")
    args = ap.parse_args()
    if not args.no_venv and not in_venv():
        ensure_venv_and_reexec()  # does not return

    command = "python3 benches/compare/run.py" + "".join(
        " " + shlex.quote(a) for a in sys.argv[1:])
    mode = "quick" if args.quick else "full"
    sizes = SIZES[mode]
    only = set(args.only.split(","))
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    work = (args.work or target / "compare-run").resolve() / mode
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    dirs = {"sql": work / "sql", "vectors": work / "vectors", "text": work / "text"}
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)

    # Ctrl-C and SIGTERM both unwind through the finally blocks (PostgreSQL stops).
    def interrupted(*_):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)
    started = time.perf_counter()
    started_at = datetime.datetime.now(datetime.timezone.utc)
    info = machine()
    load_start = os.getloadavg()
    wall: dict[str, float] = {}

    t0 = time.perf_counter()
    exes = build()
    wall["build"] = time.perf_counter() - t0

    results: dict[str, dict | None] = {"sql": None, "vectors": None, "text": None}
    failures: dict[str, str | None] = {"sql": None, "vectors": None, "text": None}
    pg = None
    try:
        if "sql" in only:
            pg_bin = find_pg_bin(args.pg_bin)
            extra: list[str] = []
            if pg_bin:
                pg = Postgres(pg_bin)
                pg.start()
                log(f"PostgreSQL running on socket dir {pg.dir}")
                extra = ["--pg-host", pg.dir]
            else:
                log("PostgreSQL 15 not found: it is left out")
            out = dirs["sql"] / "run-results.json"
            out.unlink(missing_ok=True)
            try:
                wall["sql"] = run_script("compare.py", [
                    "--rows", str(sizes["sql_rows"]), "--lookups", str(sizes["lookups"]),
                    "--skip-values", "--durable-inserts", str(sizes["durable"]),
                    "--data", str(dirs["sql"]), "--tarn-bin", str(exes["tarn-compare"]),
                    "--json", str(out), *extra], logs)
                results["sql"] = json.loads(out.read_text())
            except subprocess.CalledProcessError as e:
                failures["sql"] = f"exit status {e.returncode} (see {logs / 'compare.txt'})"
            finally:
                if pg:
                    pg.stop()
                    pg = None
            remove_databases(dirs["sql"])

        if "vectors" in only:
            res_path = dirs["vectors"] / "results.json"
            res_path.unlink(missing_ok=True)
            try:
                wall["vectors"] = run_script("vectors.py", [
                    "--n", str(sizes["vec_n"]), "--dim", str(sizes["vec_dim"]),
                    "--nq", str(sizes["vec_nq"]), "--efs", sizes["efs"],
                    "--thresholds", sizes["thresholds"],
                    "--filter-budget", str(sizes["filter_budget"]), "--tarn-threads", "1",
                    "--peers", "hnswlib,faiss,usearch,lancedb,numpy",
                    "--data", str(dirs["vectors"]),
                    "--tarn-bin", str(exes["tarn-vector-bench"])], logs)
                results["vectors"] = json.loads(res_path.read_text())
            except subprocess.CalledProcessError as e:
                failures["vectors"] = f"exit status {e.returncode} (see {logs / 'vectors.txt'})"
            remove_databases(dirs["vectors"])

        if "text" in only:
            res_path = dirs["text"] / "results.json"
            res_path.unlink(missing_ok=True)
            try:
                wall["text"] = run_script("text.py", [
                    "--docs", str(sizes["text_docs"]), "--work", str(dirs["text"]),
                    "--tarn-bin", str(exes["tarn-text-bench"])], logs)
                results["text"] = json.loads(res_path.read_text())
            except subprocess.CalledProcessError as e:
                failures["text"] = f"exit status {e.returncode} (see {logs / 'text.txt'})"
            remove_databases(dirs["text"])
    finally:
        if pg:
            pg.stop()
        if args.clean:
            for d in dirs.values():
                shutil.rmtree(d, ignore_errors=True)

    table = Table()
    checks: list[str] = []
    if "sql" in only:
        checks += sql_rows(table, results["sql"] or {}, failures["sql"])
    if "vectors" in only:
        checks += vector_rows(table, results["vectors"] or {}, failures["vectors"], sizes)
    if "text" in only:
        checks += text_rows(table, results["text"] or {}, failures["text"])
    total = time.perf_counter() - started
    load_end = os.getloadavg()

    versions = []
    sqlr = results.get("sql") or {}
    if sqlr:
        versions += [f"DuckDB {sqlr['duckdb']['version']}", f"SQLite {sqlr['sqlite']['version']}"]
        if sqlr.get("postgresql"):
            versions.append(f"PostgreSQL {sqlr['postgresql']['version']}")
    from importlib import metadata

    for dist in ("lancedb", "pylance", "hnswlib", "faiss-cpu", "usearch", "tantivy", "numpy",
                 "psycopg"):
        try:
            versions.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            pass
    size_line = (f"sizes ({mode}): SQL {sizes['sql_rows']:,} rows, {sizes['lookups']:,} "
                 f"lookups, {sizes['durable']:,} durable INSERTs; vectors {sizes['vec_n']:,} × "
                 f"{sizes['vec_dim']} clustered, {sizes['vec_nq']} queries, ef "
                 f"{sizes['efs']}; text: CISI + {sizes['text_docs']:,} synthetic documents")
    head = [f"Tarn vs peers, {started_at:%Y-%m-%d %H:%M} UTC; {size_line}.",
            f"Machine: {info.get('cpu', '?')}, {info['cores']} cores, "
            f"{info.get('ram_gib', '?')} GiB RAM, Linux {info['kernel']}; git {git_commit()}; "
            "load average (1/5/15 min) at start " + "/".join(f"{x:.1f}" for x in load_start)
            + ", at end " + "/".join(f"{x:.1f}" for x in load_end)
            + " (the benchmarks themselves keep 1–2 cores busy; more is other work).",
            "Peers: " + ", ".join(versions) + f"; Python {info['python']}.",
            "Last column: Tarn's advantage, > 1 means Tarn is better: peer time ÷ Tarn "
            "time for durations, Tarn ÷ peer for throughputs (rows/s, QPS, GB/s) and "
            "nDCG; < 1 means the peer is better. Every figure was measured in this run."]
    tail = []
    if checks:
        tail.append("Checks: " + "; ".join(checks) + ".")
    tail.append("Wall time: " + ", ".join(f"{k} {v:.0f} s" for k, v in wall.items())
                + f"; total {total:.0f} s. Detailed reports: `{shown(logs)}`.")
    md = "\n\n".join(["\n".join(head), table.markdown(), "\n".join(tail)])
    print(md)
    if not args.no_write:
        doc = ["# Tarn beside its peers", "",
               f"Produced by `{command}` (from the repository root) on "
               f"{started_at:%Y-%m-%d}; regenerate it with the same command. "
               "See benches/README.md for what each workload measures.", "", md, ""]
        (REPO / "benches" / "RESULTS.md").write_text("\n".join(doc))
        log(f"written {REPO / 'benches' / 'RESULTS.md'}")
    log(f"total wall time {total:.0f} s")
    return 0 if not any(failures.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
