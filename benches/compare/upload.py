#!/usr/bin/env python3
"""Tables from files: Tarn's upload_table vs DuckDB and SQLite, in one run.

Writes one deterministic input twice, as CSV and as NDJSON (id int8, body text ~50 B,
x float8, day date, flag bool; the NDJSON rows also carry a nested object ``meta``),
then times, best of ``--runs`` each, a table made from each file in a fresh on-disk
database:

- Tarn: ``tarn-upload-bench`` (``Session::upload_table`` from a file, types inferred,
  durable when it returns);
- DuckDB: ``CREATE TABLE t AS SELECT * FROM read_csv_auto(...)`` / ``read_json_auto``
  and closing the database (its checkpoint), with ``threads=1`` and with every core;
- SQLite: the CLI's ``.import --csv`` (every column text) and, for NDJSON, Python's
  ``json`` with ``executemany`` in one transaction (SQLite has no JSON import).

Prints MB/s and rows/s per engine and the ratios Tarn ÷ other (> 1: Tarn is faster).

Usage (from the repository root):
  python3 benches/compare/upload.py [--rows 1000000] [--data DIR] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def generate(data: Path, rows: int) -> tuple[Path, Path]:
    csv_path, json_path = data / "upload.csv", data / "upload.ndjson"
    stamp = data / "upload.json"
    if stamp.exists() and json.loads(stamp.read_text()) == {"rows": rows, "format": 1}:
        return csv_path, json_path
    log(f"input: generating {rows} rows ...")
    rng = random.Random(11)
    with open(csv_path, "w", newline="\n") as c, open(json_path, "w", newline="\n") as j:
        c.write("id,body,x,day,flag\n")
        for i in range(rows):
            body = " ".join(rng.choice(WORDS) for _ in range(7))[:44] + f" {i % 100000:05d}"
            x = round(rng.random() * 1000.0, 3)
            day = f"20{rng.randrange(10, 25)}-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}"
            flag = "true" if i % 3 else "false"
            c.write(f"{i},{body},{x!r},{day},{flag}\n")
            j.write(
                json.dumps(
                    {"id": i, "body": body, "x": x, "day": day, "flag": i % 3 != 0,
                     "meta": {"k": i % 1000, "tag": rng.choice(WORDS)}}
                )
                + "\n"
            )
    stamp.write_text(json.dumps({"rows": rows, "format": 1}))
    return csv_path, json_path


def best(runs: int, f) -> float:
    out = []
    for _ in range(runs):
        out.append(f())
    return min(out)


def build_tarn() -> Path:
    # The package set of every bench script (features resolve per set): one release
    # build of DataFusion serves them all.
    cmd = ["cargo", "build", "--release", "-p", "tarn-rest-server", "-p", "tarn-benches", "--bin", "tarn-upload-bench",
           "--message-format=json"]
    out = subprocess.run(cmd, cwd=REPO, check=True, stdout=subprocess.PIPE, text=True)
    for line in out.stdout.splitlines():
        msg = json.loads(line)
        if msg.get("reason") == "compiler-artifact" and msg["target"]["name"] == "tarn-upload-bench":
            return Path(msg["executable"])
    sys.exit("upload.py: cargo did not report the tarn-upload-bench executable")


def tarn(exe: Path, path: Path, runs: int, work: Path) -> tuple[float, dict]:
    out = subprocess.run([str(exe), "--file", str(path), "--runs", str(runs), "--work", str(work)],
                         check=True, stdout=subprocess.PIPE, text=True)
    r = json.loads(out.stdout)
    return min(r["seconds"]), r


def duckdb_run(path: Path, reader: str, threads: int | None, work: Path) -> float:
    import duckdb

    def once() -> float:
        db = work / "duck.db"
        for p in (db, Path(str(db) + ".wal")):
            if p.exists():
                p.unlink()
        t = time.perf_counter()
        con = duckdb.connect(str(db))
        if threads:
            con.execute(f"SET threads={threads}")
        con.execute(f"CREATE TABLE t AS SELECT * FROM {reader}('{path}')")
        con.close()
        return time.perf_counter() - t

    return once


def sqlite_csv(path: Path, work: Path):
    def once() -> float:
        db = work / "lite.db"
        if db.exists():
            db.unlink()
        t = time.perf_counter()
        subprocess.run(["sqlite3", str(db), f".import --csv {path} t"], check=True)
        return time.perf_counter() - t

    return once


def sqlite_json(path: Path, work: Path):
    def once() -> float:
        db = work / "lite.db"
        if db.exists():
            db.unlink()
        t = time.perf_counter()
        con = sqlite3.connect(str(db))
        con.execute("CREATE TABLE t (id INTEGER, body TEXT, x REAL, day TEXT, flag INTEGER, meta TEXT)")
        with open(path) as f, con:
            con.executemany(
                "INSERT INTO t VALUES (?, ?, ?, ?, ?, ?)",
                ((r["id"], r["body"], r["x"], r["day"], r["flag"], json.dumps(r["meta"]))
                 for r in map(json.loads, f)),
            )
        con.close()
        return time.perf_counter() - t

    return once


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "tarn-upload-bench")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--tarn-bin", type=Path)
    a = ap.parse_args()
    a.data.mkdir(parents=True, exist_ok=True)
    csv_path, json_path = generate(a.data, a.rows)
    exe = a.tarn_bin or build_tarn()
    work = Path(tempfile.mkdtemp(dir=a.data))
    results = {}
    for kind, path, reader in (("csv", csv_path, "read_csv_auto"), ("ndjson", json_path, "read_json_auto")):
        size = path.stat().st_size
        log(f"{kind}: {size / 2**20:.0f} MiB")
        t_secs, t_info = tarn(exe, path, a.runs, work)
        row = {"bytes": size, "rows": t_info["rows"], "tarn": t_secs, "tarn_columns": t_info["columns"]}
        row["duckdb_1_thread"] = best(a.runs, duckdb_run(path, reader, 1, work))
        row["duckdb"] = best(a.runs, duckdb_run(path, reader, None, work))
        row["sqlite"] = best(a.runs, sqlite_csv(path, work) if kind == "csv" else sqlite_json(path, work))
        results[kind] = row
    print(json.dumps({"cpus": os.cpu_count(), "results": results}, indent=2))
    print()
    print(f"{'file':8} {'engine':16} {'seconds':>8} {'MB/s':>8} {'rows/s':>11} {'tarn speed-up':>13}")
    for kind, row in results.items():
        for engine in ("tarn", "duckdb_1_thread", "duckdb", "sqlite"):
            s = row[engine]
            print(f"{kind:8} {engine:16} {s:8.3f} {row['bytes'] / s / 1e6:8.1f} "
                  f"{row['rows'] / s:11,.0f} {s / row['tarn']:13.2f}")


if __name__ == "__main__":
    main()
