#!/usr/bin/env python3
"""Tarn vs DuckDB vs SQLite (and PostgreSQL) on one machine, in one run.

Writes one deterministic input (``data.tsv``: id int8 primary key, body text ~50 B,
x float8, meta small JSON; ``keys.txt``: lookup keys), builds and runs the Rust binary
``tarn-compare`` on it, runs DuckDB and SQLite (Python bindings) on the same files, and
prints each engine's figures and the ratios other ÷ Tarn (> 1: Tarn is faster).

Workloads:
  1. bulk insert into a fresh on-disk database (several paths, see the table);
  2. ``SELECT id % 100 AS g, count(*), avg(x) FROM t GROUP BY g``: best of 5 after
     one warm-up;
  3. ``SELECT * FROM t WHERE id = ?``: p50 over the lookup keys (10,000 by default);
  4. with ``--durable-inserts N``: N single-row INSERTs into a fresh table, each its
     own committed and fsynced statement (Tarn SyncMode::Full, SQLite WAL with
     synchronous=FULL, DuckDB's default, PostgreSQL synchronous_commit=on, fsync=on).

With ``--pg-host DIR`` (the Unix socket directory of a running PostgreSQL server, user
``postgres``; ``run.py`` starts one) PostgreSQL runs the same workloads through
psycopg: ``COPY t FROM STDIN`` of the TSV for the bulk load.

Usage (from the repository root):
  python3 benches/compare/compare.py [--rows 1000000] [--data DIR] [--lookups 10000]

Needs ``pip install duckdb`` (``pyarrow`` optional: DuckDB's insert from an in-memory
Arrow table; ``psycopg`` for --pg-host). CARGO_TARGET_DIR is honoured for the build.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

FORMAT = 1
WORDS = [
    "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel",
    "india", "juliet", "kilo", "lima", "mike", "november", "oscar", "papa",
]
TAGS = ["red", "green", "blue", "cyan", "magenta", "yellow", "black", "white"]
SCAN = "SELECT id % 100 AS g, count(*), avg(x) FROM t GROUP BY g"
LOOKUP = "SELECT * FROM t WHERE id = ?"
INSERT_ONE = "INSERT INTO t VALUES (?, ?, ?, ?)"
# The Arrow bulk paths (Tarn insert_arrow, DuckDB INSERT…SELECT arrow) are timed this
# many times each and the best kept (tarn-compare's ARROW_RUNS is the same).
ARROW_RUNS = 3
REPO = Path(__file__).resolve().parents[2]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------- data


def generate(data: Path, rows: int, lookups: int, seed: int) -> None:
    """Writes data.tsv and keys.txt unless they exist for these parameters."""
    stamp = {"format": FORMAT, "rows": rows, "lookups": lookups, "seed": seed}
    stamp_path = data / "input.json"
    if stamp_path.exists() and json.loads(stamp_path.read_text()) == stamp:
        log(f"input: reusing {data / 'data.tsv'}")
        return
    log(f"input: generating {rows} rows (seed {seed}) ...")
    start = time.perf_counter()
    rng = random.Random(seed)
    with open(data / "data.tsv", "w", encoding="utf-8", newline="\n") as f:
        f.write("id\tbody\tx\tmeta\n")
        lines = []
        for i in range(1, rows + 1):
            body = ""
            while len(body) < 44:
                body = (body + " " if body else "") + rng.choice(WORDS)
            body = f"{body[:44]} {rng.randrange(100_000):05d}"
            x = round(rng.random() * 1000.0, 3)
            meta = '{"k": %d, "tag": "%s"}' % (rng.randrange(1000), rng.choice(TAGS))
            lines.append(f"{i}\t{body}\t{x!r}\t{meta}\n")
            if len(lines) == 100_000:
                f.writelines(lines)
                lines.clear()
        f.writelines(lines)
    krng = random.Random(seed + 1)
    keys = [krng.randint(1, rows) for _ in range(lookups)]
    (data / "keys.txt").write_text("".join(f"{k}\n" for k in keys))
    stamp_path.write_text(json.dumps(stamp))
    log(f"input: written in {time.perf_counter() - start:.1f} s")


def read_rows(data: Path) -> list[tuple]:
    with open(data / "data.tsv", encoding="utf-8") as f:
        next(f)
        out = []
        for line in f:
            i, body, x, meta = line.rstrip("\n").split("\t")
            out.append((int(i), body, float(x), meta))
        return out


def read_keys(data: Path) -> list[int]:
    return [int(k) for k in (data / "keys.txt").read_text().split()]


def sql_str(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def values_statements(rows: list[tuple], per: int = 1000) -> list[str]:
    out = []
    for start in range(0, len(rows), per):
        chunk = rows[start : start + per]
        vals = ", ".join(
            f"({i}, {sql_str(b)}, {x!r}, {sql_str(m)})" for i, b, x, m in chunk
        )
        out.append(f"INSERT INTO t VALUES {vals}")
    return out


def remove(*paths: Path) -> None:
    for p in paths:
        if p.exists():
            p.unlink()


def quantile(sorted_values: list[float], q: float) -> float:
    return sorted_values[round((len(sorted_values) - 1) * q)]


def scan_and_lookups(run_query, keys: list[int]) -> dict:
    runs = []
    for i in range(6):
        t = time.perf_counter()
        res = run_query(SCAN, None)
        secs = time.perf_counter() - t
        assert 0 < len(res) <= 100, res
        if i > 0:
            runs.append(secs)
    check = [sum(r[1] for r in res), sum(r[2] for r in res)]
    lat = []
    for k in keys:
        t = time.perf_counter()
        res = run_query(LOOKUP, (k,))
        lat.append(time.perf_counter() - t)
        assert len(res) == 1, (k, res)
    mean = sum(lat) / len(lat)
    lat.sort()
    return {
        "scan_runs_s": runs,
        "scan_best_s": min(runs),
        "scan_check": check,
        "lookups": len(lat),
        "lookup_p50_s": quantile(lat, 0.5),
        "lookup_p99_s": quantile(lat, 0.99),
        "lookup_mean_s": mean,
    }


def durable_inserts(execute, rows: list[tuple]) -> dict:
    """Times one autocommitted single-row INSERT per row (each commit made durable)."""
    lat = []
    start = time.perf_counter()
    for r in rows:
        t = time.perf_counter()
        execute(r)
        lat.append(time.perf_counter() - t)
    secs = time.perf_counter() - start
    lat.sort()
    return {"durable_inserts": len(rows), "durable_insert_s": secs,
            "durable_insert_p50_s": quantile(lat, 0.5) if lat else None}


# ------------------------------------------------------------------------- engines


def build_tarn() -> Path:
    cmd = [
        # The package set of every bench script (features resolve per set): one release
        # build of DataFusion serves them all.
        "cargo", "build", "--release", "-p", "tarn-rest-server", "-p", "tarn-benches", "--bin", "tarn-compare",
        "--message-format=json-render-diagnostics",
    ]
    log("tarn: " + " ".join(cmd))
    out = subprocess.run(cmd, cwd=REPO, check=True, stdout=subprocess.PIPE, text=True)
    exe = None
    for line in out.stdout.splitlines():
        msg = json.loads(line)
        if msg.get("reason") == "compiler-artifact" and msg.get("executable"):
            if msg["target"]["name"] == "tarn-compare":
                exe = msg["executable"]
    if exe is None:
        sys.exit("compare.py: cargo did not report the tarn-compare executable")
    return Path(exe)


def run_tarn(exe: Path, data: Path, rows: int, lookups: int, extra: list[str]) -> dict:
    cmd = [str(exe), "--data", str(data), "--rows", str(rows), "--lookups", str(lookups)]
    cmd += extra
    log("tarn: " + " ".join(cmd))
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True)
    return json.loads(out.stdout)


def run_duckdb(data: Path, rows: list[tuple], stmts: list[str] | None, keys: list[int],
               batch_sample: int | None = None, durable: int = 0) -> dict:
    import duckdb

    ddl = "CREATE TABLE t (id BIGINT PRIMARY KEY, body VARCHAR, x DOUBLE, meta JSON)"
    db = data / "duck.db"
    res: dict = {"engine": "duckdb", "version": duckdb.__version__}
    with duckdb.connect() as probe:
        res["threads"] = probe.execute("SELECT current_setting('threads')").fetchone()[0]

    def fresh():
        remove(db, Path(str(db) + ".wal"))
        con = duckdb.connect(str(db))
        con.execute(ddl)
        return con

    # (1b) from an in-memory Arrow table (parsing untimed), like Tarn's insert_arrow.
    try:
        import pyarrow as pa
        import pyarrow.csv as pacsv

        tbl = pacsv.read_csv(
            data / "data.tsv",
            parse_options=pacsv.ParseOptions(delimiter="\t", quote_char=False),
            convert_options=pacsv.ConvertOptions(
                column_types={"id": pa.int64(), "body": pa.string(), "x": pa.float64(),
                              "meta": pa.string()}
            ),
        )
        res["pyarrow"] = pa.__version__
        # Best of ARROW_RUNS fresh databases, as tarn-compare times insert_arrow.
        runs = []
        for _ in range(ARROW_RUNS):
            con = fresh()
            con.register("src", tbl)
            t = time.perf_counter()
            con.execute("INSERT INTO t SELECT * FROM src")
            con.execute("CHECKPOINT")
            runs.append(time.perf_counter() - t)
            con.close()
        del tbl
        res["arrow_s"] = min(runs)
        res["arrow_runs_s"] = runs
        log(f"duckdb: INSERT … SELECT arrow table best {res['arrow_s']:.2f} s of "
            + ", ".join(f"{r:.2f}" for r in runs))
    except ImportError:
        res["arrow_s"] = None
        log("duckdb: pyarrow not installed, skipping the Arrow path")

    # (1c) literal 1000-row INSERT … VALUES, autocommit (one commit per statement).
    if stmts is not None:
        con = fresh()
        t = time.perf_counter()
        for s in stmts:
            con.execute(s)
        con.execute("CHECKPOINT")
        res["values_1000_s"] = time.perf_counter() - t
        con.close()
        log(f"duckdb: values_1000 {res['values_1000_s']:.2f} s")

    # (1d) executemany in 10,000-row batches, one transaction each (like query_batch).
    # DuckDB's executemany runs ~1k rows/s (13 min for 1M rows), so --duckdb-batch-sample
    # times the first N rows and scales the time to all rows (reported as such).
    if stmts is not None:
        sample = rows if batch_sample is None else rows[:batch_sample]
        con = fresh()
        t = time.perf_counter()
        for start in range(0, len(sample), 10_000):
            con.execute("BEGIN")
            con.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", sample[start : start + 10_000])
            con.execute("COMMIT")
        con.execute("CHECKPOINT")
        res["batch_10k_s"] = (time.perf_counter() - t) * len(rows) / max(len(sample), 1)
        res["batch_10k_sampled_rows"] = len(sample)
        con.close()
        log(f"duckdb: executemany 10k {res['batch_10k_s']:.2f} s "
            f"({len(sample)} rows timed, scaled to {len(rows)})")

    # (1e) single-row INSERTs, autocommit: DuckDB writes and syncs its WAL per commit.
    if durable:
        con = fresh()
        res.update(durable_inserts(lambda r: con.execute(INSERT_ONE, r), rows[:durable]))
        con.close()
        log(f"duckdb: {durable} single-row inserts {res['durable_insert_s']:.2f} s")

    # (1a) the fastest idiomatic bulk path: INSERT … SELECT from read_csv (includes
    # parsing the TSV, in parallel), then CHECKPOINT so the data sits in the db file.
    # Done last: the queries below run on this database.
    con = fresh()
    tsv = str(data / "data.tsv").replace("'", "''")
    t = time.perf_counter()
    con.execute(
        f"INSERT INTO t SELECT * FROM read_csv('{tsv}', delim='\t', header=true, "
        "quote='', escape='', columns={'id': 'BIGINT', 'body': 'VARCHAR', "
        "'x': 'DOUBLE', 'meta': 'VARCHAR'})"
    )
    con.execute("CHECKPOINT")
    res["read_csv_s"] = time.perf_counter() - t
    res["disk_bytes"] = sum(
        p.stat().st_size for p in (db, Path(str(db) + ".wal")) if p.exists()
    )
    log(f"duckdb: INSERT … SELECT read_csv {res['read_csv_s']:.2f} s")

    def q(sql, params):
        return con.execute(sql, params).fetchall() if params else con.execute(sql).fetchall()

    res.update(scan_and_lookups(q, keys))
    con.close()
    remove(db, Path(str(db) + ".wal"))
    log(f"duckdb: scan best {res['scan_best_s']:.4f} s, lookup p50 "
        f"{res['lookup_p50_s'] * 1e6:.1f} µs")
    res["durability"] = ("default: WAL fsync on commit; timings include CHECKPOINT "
                         "(data written and synced to the database file)")
    return res


def run_sqlite(data: Path, rows: list[tuple], stmts: list[str] | None, keys: list[int],
               durable: int = 0) -> dict:
    db = data / "sqlite.db"
    res: dict = {"engine": "sqlite", "version": sqlite3.sqlite_version}

    def fresh():
        remove(db, Path(str(db) + "-wal"), Path(str(db) + "-shm"))
        con = sqlite3.connect(str(db), isolation_level=None)
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("PRAGMA synchronous=NORMAL")
        # INTEGER PRIMARY KEY: the rowid alias, SQLite's idiomatic int8 primary key.
        con.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT, x REAL, meta TEXT)")
        return con

    # (1a) executemany in one transaction.
    con = fresh()
    t = time.perf_counter()
    con.execute("BEGIN")
    con.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", rows)
    con.execute("COMMIT")
    res["executemany_s"] = time.perf_counter() - t
    log(f"sqlite: executemany {res['executemany_s']:.2f} s")

    def q(sql, params):
        return con.execute(sql, params or ()).fetchall()

    res.update(scan_and_lookups(q, keys))
    con.close()
    res["disk_bytes"] = sum(
        p.stat().st_size for p in (db, Path(str(db) + "-wal")) if p.exists()
    )
    log(f"sqlite: scan best {res['scan_best_s']:.4f} s, lookup p50 "
        f"{res['lookup_p50_s'] * 1e6:.1f} µs")

    # (1d) executemany in 10,000-row batches, one transaction each (like query_batch).
    if stmts is not None:
        con = fresh()
        t = time.perf_counter()
        for start in range(0, len(rows), 10_000):
            con.execute("BEGIN")
            con.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", rows[start : start + 10_000])
            con.execute("COMMIT")
        res["batch_10k_s"] = time.perf_counter() - t
        con.close()
        log(f"sqlite: executemany 10k {res['batch_10k_s']:.2f} s")

    # (1c) literal 1000-row INSERT … VALUES, autocommit (one commit per statement).
    if stmts is not None:
        con = fresh()
        t = time.perf_counter()
        for s in stmts:
            con.execute(s)
        res["values_1000_s"] = time.perf_counter() - t
        con.close()
        log(f"sqlite: values_1000 {res['values_1000_s']:.2f} s")

    # (1e) single-row INSERTs, autocommit, synchronous=FULL (WAL fsynced per commit).
    if durable:
        con = fresh()
        con.execute("PRAGMA synchronous=FULL")
        res.update(durable_inserts(lambda r: con.execute(INSERT_ONE, r), rows[:durable]))
        con.close()
        log(f"sqlite: {durable} single-row inserts (synchronous=FULL) "
            f"{res['durable_insert_s']:.2f} s")
    remove(db, Path(str(db) + "-wal"), Path(str(db) + "-shm"))
    res["durability"] = ("journal_mode=WAL, synchronous=NORMAL (no fsync per commit, "
                         "WAL synced at checkpoints)")
    return res


def run_postgres(data: Path, rows: list[tuple], keys: list[int], host: str,
                 durable: int = 0) -> dict:
    """PostgreSQL through psycopg 3 on a Unix socket: COPY, scan, lookups, durable
    single-row inserts. The server's settings are recorded as they are."""
    import psycopg

    con = psycopg.connect(f"host={host} user=postgres dbname=postgres", autocommit=True)
    res: dict = {"engine": "postgresql", "psycopg": psycopg.__version__}
    res["version"] = con.execute("SHOW server_version").fetchone()[0]
    res["settings"] = {k: con.execute(f"SHOW {k}").fetchone()[0] for k in (
        "fsync", "synchronous_commit", "wal_sync_method", "full_page_writes",
        "shared_buffers", "max_parallel_workers_per_gather", "jit")}
    ddl = ("CREATE TABLE t (id BIGINT PRIMARY KEY, body TEXT, x DOUBLE PRECISION, "
           "meta JSONB)")

    def fresh():
        con.execute("DROP TABLE IF EXISTS t")
        con.execute(ddl)

    # (1a) COPY FROM STDIN of the TSV file as it is (text format: tab-separated, no
    # quoting, like the file), one statement = one transaction, committed (fsync).
    runs = []
    for _ in range(ARROW_RUNS):
        fresh()
        t = time.perf_counter()
        with con.cursor() as cur, cur.copy("COPY t FROM STDIN") as cp, \
                open(data / "data.tsv", "rb") as f:
            f.readline()  # header
            while chunk := f.read(1 << 20):
                cp.write(chunk)
        runs.append(time.perf_counter() - t)
    res["copy_s"] = min(runs)
    res["copy_runs_s"] = runs
    log(f"postgresql: COPY best {res['copy_s']:.2f} s of " + ", ".join(f"{r:.2f}" for r in runs))
    # What any PostgreSQL user does after a bulk load (untimed): statistics and the
    # visibility map / hint bits, so the scans below do not pay for the load.
    t = time.perf_counter()
    con.execute("VACUUM (ANALYZE) t")
    res["vacuum_analyze_s"] = time.perf_counter() - t
    res["disk_bytes"] = con.execute("SELECT pg_total_relation_size('t')").fetchone()[0]

    def q(sql, params):
        sql = sql.replace("?", "%s")
        return con.execute(sql, params).fetchall() if params else con.execute(sql).fetchall()

    res.update(scan_and_lookups(q, keys))
    log(f"postgresql: scan best {res['scan_best_s']:.4f} s, lookup p50 "
        f"{res['lookup_p50_s'] * 1e6:.1f} µs")

    # (1e) single-row INSERTs, autocommit: each commit waits for its WAL fsync. A
    # CHECKPOINT first (untimed), so that writing out the bulk load does not compete.
    if durable:
        fresh()
        con.execute("CHECKPOINT")
        ins = INSERT_ONE.replace("?", "%s")
        res.update(durable_inserts(lambda r: con.execute(ins, r), rows[:durable]))
        log(f"postgresql: {durable} single-row inserts {res['durable_insert_s']:.2f} s")
    con.execute("DROP TABLE IF EXISTS t")
    con.close()
    res["durability"] = (f"fsync={res['settings']['fsync']}, synchronous_commit="
                         f"{res['settings']['synchronous_commit']} (WAL fsynced per commit)")
    return res


# -------------------------------------------------------------------------- report


def machine() -> dict:
    info = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "loadavg_start": os.getloadavg(),
    }
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


def fmt_secs(v: float | None) -> str:
    if v is None:
        return "-"
    if v < 1e-3:
        return f"{v * 1e6:.1f} µs"
    if v < 1:
        return f"{v * 1e3:.2f} ms"
    return f"{v:.2f} s"


def ratio(other: float | None, tarn: float | None) -> str:
    if other is None or tarn is None or tarn == 0:
        return "-"
    r = other / tarn
    return f"{r:.2f}" if r >= 0.1 else f"{r:.3g}"


def report(t: dict, d: dict, s: dict, parse_s: float) -> str:
    rows = [
        ("bulk from memory (best of 3)",
         "insert_arrow", t["insert_arrow_s"],
         "INSERT…SELECT arrow", d.get("arrow_s"),
         "executemany", s["executemany_s"]),
        ("bulk incl. TSV parse",
         "parse+insert_arrow", t["parse_s"] + t["insert_arrow_s"],
         "INSERT…SELECT read_csv", d["read_csv_s"],
         "parse+executemany", parse_s + s["executemany_s"]),
        ("1000-row INSERT VALUES",
         "values_1000", t.get("values_1000_s"),
         "values_1000", d.get("values_1000_s"),
         "values_1000", s.get("values_1000_s")),
        ("batch INSERT, 10k rows a call",
         "query_batch", t.get("batch_10k_s"),
         "executemany", d.get("batch_10k_s"),
         "executemany", s.get("batch_10k_s")),
        ("scan+aggregate (best of 5)",
         "query_arrow", t["scan_best_s"],
         "fetchall", d["scan_best_s"],
         "fetchall", s["scan_best_s"]),
        (f"pk lookup p50 ({t['lookups']} keys)",
         "query", t["lookup_p50_s"],
         "execute", d["lookup_p50_s"],
         "execute", s["lookup_p50_s"]),
        ("pk lookup p99",
         "query", t["lookup_p99_s"],
         "execute", d["lookup_p99_s"],
         "execute", s["lookup_p99_s"]),
    ]
    head = ("workload", "Tarn", "DuckDB", "SQLite", "DuckDB/Tarn", "SQLite/Tarn")
    lines = [head]
    for name, _tp, tv, _dp, dv, _sp, sv in rows:
        lines.append((name, fmt_secs(tv), fmt_secs(dv), fmt_secs(sv), ratio(dv, tv),
                      ratio(sv, tv)))
    widths = [max(len(r[i]) for r in lines) for i in range(len(head))]
    out = []
    for n, r in enumerate(lines):
        out.append("  ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i])
                             for i, c in enumerate(r)))
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    out.append("")
    out.append("paths: " + "; ".join(f"{r[0]}: Tarn {r[1]}, DuckDB {r[3]}, SQLite {r[5]}"
                                      for r in rows[:3]))
    out.append(f"Tarn insert_arrow with SyncMode::Full (fdatasync per commit): "
               f"{fmt_secs(t.get('insert_arrow_full_s'))}")
    out.append(f"Tarn TSV parse {fmt_secs(t['parse_s'])}, SQLite (Python) TSV parse "
               f"{fmt_secs(parse_s)}; Tarn values text build "
               f"{fmt_secs(t.get('values_1000_build_s'))} (untimed)")
    closed = t.get("disk_bytes_closed")
    closed = f" ({closed / 1e6:.0f} MB once closed: segments only, log emptied)" if closed else ""
    out.append(f"on disk after bulk load: Tarn {t['disk_bytes'] / 1e6:.0f} MB log + segments"
               f"{closed}, DuckDB {d['disk_bytes'] / 1e6:.0f} MB, SQLite "
               f"{s['disk_bytes'] / 1e6:.0f} MB")
    checks = {e: x["scan_check"] for e, x in (("tarn", t), ("duckdb", d), ("sqlite", s))}
    same = all(c[0] == t["scan_check"][0]
               and abs(c[1] - t["scan_check"][1]) <= 1e-6 * abs(t["scan_check"][1])
               for c in checks.values())
    out.append(f"scan result check (sum of count, sum of avg over groups): "
               f"{'identical' if same else 'MISMATCH'} {checks}")
    out.append(f"durability: Tarn {t['durability']}; DuckDB {d['durability']}; "
               f"SQLite {s['durability']}")
    return "\n".join(out)


def postgres_report(t: dict, p: dict) -> str:
    same = (p["scan_check"][0] == t["scan_check"][0]
            and abs(p["scan_check"][1] - t["scan_check"][1]) <= 1e-6 * abs(t["scan_check"][1]))
    return "\n".join([
        "",
        f"PostgreSQL {p['version']} ({p['durability']}; settings {p['settings']})",
        f"  COPY FROM STDIN (best of {ARROW_RUNS}) {fmt_secs(p['copy_s'])} vs Tarn parse+insert_arrow "
        f"{fmt_secs(t['parse_s'] + t['insert_arrow_s'])}: ratio {ratio(p['copy_s'], t['parse_s'] + t['insert_arrow_s'])}",
        f"  scan+aggregate {fmt_secs(p['scan_best_s'])} (ratio {ratio(p['scan_best_s'], t['scan_best_s'])}), "
        f"pk lookup p50 {fmt_secs(p['lookup_p50_s'])} (ratio {ratio(p['lookup_p50_s'], t['lookup_p50_s'])})",
        f"  scan result check against Tarn: {'identical' if same else 'MISMATCH'} {p['scan_check']}",
    ])


def durable_report(t: dict, d: dict, s: dict, p: dict | None) -> str:
    out = ["", "single-row durable INSERTs (one statement and commit each, fsynced)"]
    for name, e in (("Tarn SyncMode::Full", t), ("DuckDB default", d),
                    ("SQLite WAL synchronous=FULL", s), ("PostgreSQL", p)):
        if e and e.get("durable_insert_s"):
            n = e["durable_inserts"]
            out.append(f"  {name}: {n} in {fmt_secs(e['durable_insert_s'])} = "
                       f"{n / e['durable_insert_s']:.0f}/s, p50 {fmt_secs(e['durable_insert_p50_s'])}")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--lookups", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=42)
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    ap.add_argument("--data", type=Path, default=target / "compare",
                    help="input and scratch databases (default: $CARGO_TARGET_DIR/compare)")
    ap.add_argument("--json", type=Path, help="also write all figures here")
    ap.add_argument("--skip-values", action="store_true",
                    help="skip the 1000-row INSERT VALUES loads")
    ap.add_argument("--duckdb-batch-sample", type=int,
                    help="time DuckDB's executemany on this many rows and scale to --rows")
    ap.add_argument("--tarn-bin", type=Path, help="use this tarn-compare, do not build")
    ap.add_argument("--durable-inserts", type=int, default=0,
                    help="also time this many single-row durable INSERTs per engine")
    ap.add_argument("--pg-host", help="Unix socket directory of a running PostgreSQL "
                    "server (user postgres): run PostgreSQL too")
    args = ap.parse_args()

    args.data.mkdir(parents=True, exist_ok=True)
    info = machine()
    generate(args.data, args.rows, args.lookups, args.seed)
    exe = args.tarn_bin or build_tarn()

    extra = ["--skip-values"] if args.skip_values else []
    if args.durable_inserts:
        extra += ["--durable-inserts", str(args.durable_inserts)]
    tarn = run_tarn(exe, args.data, args.rows, args.lookups, extra)

    t = time.perf_counter()
    rows = read_rows(args.data)
    parse_s = time.perf_counter() - t
    keys = read_keys(args.data)
    stmts = None if args.skip_values else values_statements(rows)
    sqlite = run_sqlite(args.data, rows, stmts, keys, args.durable_inserts)
    sqlite["parse_s"] = parse_s
    duck = run_duckdb(args.data, rows, stmts, keys, args.duckdb_batch_sample,
                      args.durable_inserts)
    pg = None
    if args.pg_host:
        pg = run_postgres(args.data, rows, keys, args.pg_host, args.durable_inserts)
    info["loadavg_end"] = os.getloadavg()

    print(f"rows={args.rows} lookups={args.lookups} seed={args.seed} "
          f"cpus={info['cpus']} cpu={info.get('cpu', '?')} mem={info.get('mem', '?')}")
    print(f"Tarn {tarn['version']}, DuckDB {duck['version']} ({duck['threads']} threads), "
          f"SQLite {sqlite['version']}, Python {info['python']}")
    print(f"load average start {info['loadavg_start']}, end {info['loadavg_end']}")
    print()
    print(report(tarn, duck, sqlite, parse_s))
    if pg is not None:
        print(postgres_report(tarn, pg))
    if args.durable_inserts:
        print(durable_report(tarn, duck, sqlite, pg))
    all_figures = {"machine": info, "tarn": tarn, "duckdb": duck, "sqlite": sqlite,
                   "rows": args.rows, "seed": args.seed}
    if pg is not None:
        all_figures["postgresql"] = pg
    (args.data / "results.json").write_text(json.dumps(all_figures, indent=2))
    if args.json:
        args.json.write_text(json.dumps(all_figures, indent=2))


if __name__ == "__main__":
    main()
