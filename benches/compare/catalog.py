#!/usr/bin/env python3
"""Catalog writes of one tenant beside another's thousands of wide tables, over the REST
host, in one run.

Starts ``tarn-rest-server`` (release) on 127.0.0.1 over a fresh directory with two users,
each with an organization and a workspace. Times organization B's CREATE TABLE and
new-workspace calls (median of ``--calls``) first with an empty catalog, then after
organization A has created ``--tables`` tables of ``--columns`` columns (or as many as
its share of the catalog takes), and prints the ratio loaded ÷ empty: 1.0 means B's
writes do not pay for A's records. Then times B's calls again while A keeps writing
beside them from another connection, at its share (``busy``): 1.0 means A's writes at
its share do not hold up B's. (A catalog write copies the published catalog; each
table's definition had been copied column by column, which made B's CREATE TABLE
10–100× slower beside 2,470 tables of 200 columns.)

Usage (from the repository root):
  python3 benches/compare/catalog.py [--tables 2000] [--columns 200] [--calls 30]
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def build_server() -> Path:
    # The package set of every bench script (features resolve per set): one release
    # build of DataFusion serves them all.
    cmd = ["cargo", "build", "--release", "-p", "tarn-rest-server", "-p", "tarn-benches",
           "--bin", "tarn-rest-server", "--message-format=json"]
    out = subprocess.run(cmd, cwd=REPO, check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        msg = json.loads(line)
        if msg.get("reason") == "compiler-artifact" and msg.get("executable") and \
                msg["target"]["name"] == "tarn-rest-server":
            return Path(msg["executable"])
    raise SystemExit("cargo build did not report the tarn-rest-server executable")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Client:
    def __init__(self, port: int, key: str, org: str | None = None):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        self.headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        if org:
            self.headers["X-Service-Org-Id"] = org

    def post(self, path: str, body: dict) -> tuple[int, dict]:
        self.conn.request("POST", path, json.dumps(body), self.headers)
        r = self.conn.getresponse()
        data = r.read()
        return r.status, (json.loads(data) if data else {})

    def sql(self, ws: str, query: str) -> tuple[int, dict]:
        return self.post(f"/workspaces/{ws}/tables/query", {"query": query, "params": []})


def add_user(server: Path, data: Path, email: str) -> str:
    out = subprocess.run([str(server), "--data", str(data), "add-user", email, "--name", email],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["secret"]


def timed(calls: int, f) -> float:
    times = []
    for i in range(calls):
        t = time.perf_counter()
        f(i)
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tables", type=int, default=2000)
    ap.add_argument("--columns", type=int, default=200)
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--server", type=Path, help="a built tarn-rest-server (default: build it)")
    args = ap.parse_args()
    server = args.server or build_server()
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "db"
        key_a, key_b = add_user(server, data, "a@example.com"), add_user(server, data, "b@example.com")
        port = free_port()
        proc = subprocess.Popen([str(server), "--data", str(data), "serve", "--listen", f"127.0.0.1:{port}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(200):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    time.sleep(0.1)
            a, b = Client(port, key_a, "orga"), Client(port, key_b, "orgb")
            for c, org in ((a, "orga"), (b, "orgb")):
                assert c.post("/organizations", {"id": org, "name": org})[0] in (200, 201)
                assert c.post("/workspaces", {"id": "ws", "name": "ws"})[0] in (200, 201)
            round_no = [0]

            def b_calls() -> tuple[float, float]:
                round_no[0] += 1
                r = round_no[0]

                def create(i: int) -> None:
                    status, body = b.sql("ws", f'CREATE TABLE "ws"."b{r}_{i}" (id int8, x int8, body text)')
                    assert status == 200, body

                def workspace(i: int) -> None:
                    status, body = b.post("/workspaces", {"id": f"w{r}_{i}", "name": "w"})
                    assert status in (200, 201), body

                return timed(args.calls, create), timed(args.calls, workspace)

            empty = b_calls()
            log(f"empty catalog: B's CREATE TABLE {empty[0]:.2f} ms, new workspace {empty[1]:.2f} ms")
            cols = ", ".join(f"c{i} int8" for i in range(args.columns))
            made = 0
            t0 = time.perf_counter()
            for i in range(args.tables):
                status, body = a.sql("ws", f'CREATE TABLE "ws"."a{i}" ({cols})')
                if status != 200:
                    log(f"A's table {i} refused ({status}): {body.get('error', {}).get('message', '')[:160]}")
                    break
                made += 1
                if made % 500 == 0:
                    log(f"A: {made} tables ({time.perf_counter() - t0:.1f} s)")
            loaded = b_calls()
            log(f"beside A's {made} tables of {args.columns} columns: B's CREATE TABLE {loaded[0]:.2f} ms, "
                f"new workspace {loaded[1]:.2f} ms")
            # A writes on (each call refused or not, at its share) while B's calls run.
            stop = threading.Event()
            a_calls = [0]

            def a_writes() -> None:
                a2 = Client(port, key_a, "orga")
                i = 0
                while not stop.is_set():
                    a2.sql("ws", f'CREATE TABLE "ws"."busy{i}" ({cols})')
                    a_calls[0] += 1
                    i += 1

            writer = threading.Thread(target=a_writes)
            writer.start()
            try:
                busy = b_calls()
            finally:
                stop.set()
                writer.join()
            log(f"while A writes on ({a_calls[0]} calls): B's CREATE TABLE {busy[0]:.2f} ms, "
                f"new workspace {busy[1]:.2f} ms")
            print(json.dumps({
                "a_tables": made, "a_columns": args.columns, "a_seconds": round(time.perf_counter() - t0, 1),
                "b_create_table_ms": {"empty": round(empty[0], 3), "loaded": round(loaded[0], 3),
                                      "ratio": round(loaded[0] / empty[0], 2)},
                "b_new_workspace_ms": {"empty": round(empty[1], 3), "loaded": round(loaded[1], 3),
                                       "ratio": round(loaded[1] / empty[1], 2)},
                "busy": {"a_calls": a_calls[0],
                         "b_create_table_ms": round(busy[0], 3),
                         "b_create_table_ratio": round(busy[0] / empty[0], 2),
                         "b_new_workspace_ms": round(busy[1], 3),
                         "b_new_workspace_ratio": round(busy[1] / empty[1], 2)},
            }, indent=2))
        finally:
            proc.terminate()
            proc.wait(timeout=60)


if __name__ == "__main__":
    main()
