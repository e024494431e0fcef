#!/usr/bin/env python3
"""The REST host's overhead: the same requests through HTTP (wrk) and through the library.

Builds ``tarn-rest-server`` and ``tarn-rest-bench`` (release), prepares a database with
``tarn-rest-bench prepare`` (``--rows`` rows of ``--dim``-dimensional random vectors, a
primary key and an ``engine_index``), then for each workload — a key lookup of a random
id, and a top-10 vector search for one of 256 random vectors — and each connection count
(2 and 16):

- HTTP: the server on 127.0.0.1 and ``wrk -t1 -cN -dS --latency`` with a Lua script that
  POSTs the statement to ``/workspaces/bench/tables/query`` (Bearer key and org header,
  as a client of the hosted service does);
- library: ``tarn-rest-bench direct`` with N tasks making the same calls through
  ``Tarn::connect`` + ``Session::query`` and serializing the answer, as the server does.

Prints a Markdown table: requests/s and p99 latency of each, and the ratio library ÷
HTTP of requests/s (the cost of HTTP: 1.0 would be free). wrk and the server share the
machine's cores, as the library's caller does in the direct runs.

Usage (from the repository root):
  python3 benches/compare/rest.py [--rows 100000] [--dim 128] [--secs 10] [--data DIR]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def build() -> tuple[Path, Path]:
    """Both executables from one cargo call: one feature resolution, one DataFusion build."""
    cmd = ["cargo", "build", "--release", "-p", "tarn-rest-server", "-p", "tarn-benches",
           "--bin", "tarn-rest-server", "--bin", "tarn-rest-bench", "--message-format=json"]
    out = subprocess.run(cmd, cwd=REPO, check=True, stdout=subprocess.PIPE, text=True)
    exes = {}
    for line in out.stdout.splitlines():
        msg = json.loads(line)
        if msg.get("reason") == "compiler-artifact" and msg.get("executable"):
            exes[msg["target"]["name"]] = Path(msg["executable"])
    try:
        return exes["tarn-rest-server"], exes["tarn-rest-bench"]
    except KeyError as e:
        sys.exit(f"rest.py: cargo did not report the {e} executable")


def lua_script(path: Path, secret: str, sql: str, workload: str, rows: int, dim: int) -> None:
    """A wrk script: 256 request bodies made up front (random ids or vectors), one picked
    at random per request."""
    rng = random.Random(3)
    bodies = []
    for _ in range(256):
        if workload == "lookup":
            params = [rng.randrange(rows)]
        else:
            params = [[round(rng.uniform(-1, 1), 6) for _ in range(dim)]]
        bodies.append(json.dumps({"query": sql, "params": params}))
    lua = [
        'wrk.method = "POST"',
        f'wrk.headers["Authorization"] = "Bearer {secret}"',
        'wrk.headers["X-Service-Org-Id"] = "bench"',
        'wrk.headers["Content-Type"] = "application/json"',
        "local bodies = {",
        *[f"  [==[{b}]==]," for b in bodies],
        "}",
        "math.randomseed(7)",
        "request = function()",
        '  return wrk.format(nil, "/workspaces/bench/tables/query", nil, bodies[math.random(#bodies)])',
        "end",
    ]
    path.write_text("\n".join(lua) + "\n")


def parse_wrk(out: str) -> dict:
    def ms(text: str) -> float:
        m = re.match(r"([\d.]+)(us|ms|s)", text)
        if not m:
            raise ValueError(text)
        v, unit = float(m.group(1)), m.group(2)
        return v / 1000 if unit == "us" else v * 1000 if unit == "s" else v

    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    p50 = ms(re.search(r"\n\s+50%\s+(\S+)", out).group(1))
    p99 = ms(re.search(r"\n\s+99%\s+(\S+)", out).group(1))
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = re.search(r"Socket errors: (.*)", out)
    if bad or errors:
        sys.exit(f"rest.py: wrk saw failures:\n{out}")
    return {"rps": rps, "p50_ms": p50, "p99_ms": p99}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--secs", type=int, default=10)
    ap.add_argument("--data", type=Path, default=None, help="work directory (default: a temporary one)")
    args = ap.parse_args()
    if not shutil.which("wrk"):
        sys.exit("rest.py: wrk is not installed (Debian: apt-get install wrk)")

    server_exe, bench_exe = build()
    work = args.data or Path(tempfile.mkdtemp(prefix="tarn-rest-"))
    work.mkdir(parents=True, exist_ok=True)
    db = work / "db"
    if db.exists():
        shutil.rmtree(db)
    log(f"preparing {args.rows} rows x {args.dim} in {db} ...")
    prep = subprocess.run([str(bench_exe), "prepare", str(db), "--rows", str(args.rows), "--dim", str(args.dim)],
                          check=True, stdout=subprocess.PIPE, text=True)
    secret = json.loads(prep.stdout)["secret"]
    sql = json.loads(subprocess.run([str(bench_exe), "sql"], check=True, stdout=subprocess.PIPE, text=True).stdout)

    workloads = ["lookup", "search"]
    conns = [2, 16]
    http: dict[tuple[str, int], dict] = {}
    server = subprocess.Popen([str(server_exe), "--data", str(db), "serve", "--listen", "127.0.0.1:0"],
                              stdout=subprocess.PIPE, text=True)
    try:
        base = server.stdout.readline().strip().removeprefix("listening on ")
        for w in workloads:
            script = work / f"{w}.lua"
            lua_script(script, secret, sql[w], w, args.rows, args.dim)
            for c in conns:
                # A short warm-up (page cache, allocator), then the measured run.
                subprocess.run(["wrk", "-t1", f"-c{c}", "-d2s", "-s", str(script), base],
                               check=True, stdout=subprocess.DEVNULL)
                out = subprocess.run(["wrk", "-t1", f"-c{c}", f"-d{args.secs}s", "--latency", "-s", str(script), base],
                                     check=True, stdout=subprocess.PIPE, text=True).stdout
                http[(w, c)] = parse_wrk(out)
                log(f"http {w} c={c}: {http[(w, c)]}")
    finally:
        server.terminate()
        server.wait(timeout=120)

    direct: dict[tuple[str, int], dict] = {}
    for w in workloads:
        for c in conns:
            cmd = [str(bench_exe), "direct", str(db), "--secret", secret, "--workload", w,
                   "--conns", str(c), "--secs", str(args.secs), "--rows", str(args.rows), "--dim", str(args.dim)]
            direct[(w, c)] = json.loads(subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout)
            log(f"direct {w} c={c}: {direct[(w, c)]}")

    print(f"REST host vs library, {args.rows} rows x {args.dim} dims, {args.secs} s per run\n")
    print("| workload | connections | HTTP req/s | HTTP p99 ms | library req/s | library p99 ms | library ÷ HTTP (req/s) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for w in workloads:
        for c in conns:
            h, d = http[(w, c)], direct[(w, c)]
            print(f"| {w} | {c} | {h['rps']:.0f} | {h['p99_ms']:.2f} | {d['rps']:.0f} | {d['p99_ms']:.2f} "
                  f"| {d['rps'] / h['rps']:.2f} |")
    if args.data is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
