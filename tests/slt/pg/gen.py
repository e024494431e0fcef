#!/usr/bin/env python3
"""Writes tests/slt/<name>.slt from tests/slt/pg/<name>.sql, with every expected result
taken from a real PostgreSQL 15 server.

    python3 tests/slt/pg/gen.py                  # every pg/*.sql except tables.sql
    python3 tests/slt/pg/gen.py subquery_in      # one file
    python3 tests/slt/pg/gen.py --check          # regenerate in memory, diff, exit 1 on change

It needs PostgreSQL 15's binaries (Debian: `apt-get install -y postgresql-15`; another
directory with `--pg-bin DIR` or PG_BIN). It starts its own server in a temporary
directory, listening on a Unix socket there only (no TCP), with the C locale (text
compares bytewise, as in Tarn), and stops it and removes the directory at the end. As
root it runs the server as the `postgres` user. The test runner never needs PostgreSQL:
the generated .slt files are committed.

The input is the .slt without results. Records are separated by blank lines; each is
optional `#` comment lines, then one of

    statement ok          the SQL must succeed; written as is
    statement error       the SQL must fail with one of ERRORS below; written with
                          Tarn's `<status> <Kind>: <message>` for that error
    query                 the SQL must have an ORDER BY that orders its rows totally,
                          or return at most one row
    query rowsort         rows compared as a multiset

followed by the SQL, exactly as Tarn runs it (`"ws"."t"` names, `USING engine`). A
record of comments alone is copied. `%include FILE` (alone on a line) inserts the lines
of pg/FILE. The column-type letters of `query` come from PostgreSQL's result types
(I integer, R float8, T text, B boolean); other result types are refused, so that no
expected value depends on formatting the runner does not share (numeric, float4, ...).

For PostgreSQL, ` USING engine` is dropped and each file runs in a fresh database with
a schema `ws`. Each file also runs in a second database whose tables are rewritten in
reverse physical order after every statement: a `query` whose rows come back in another
order there has ties in its ORDER BY, and the generator refuses it; so does any query
whose rows, as a multiset, or whose error differ between the two.
"""

import argparse
import csv
import difflib
import io
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SLT_DIR = os.path.dirname(HERE)
NULL = "<<NULL>>"
SPLIT = "@@SPLIT@@"

# PostgreSQL's message -> what the runner matches (a regex) for Tarn's error.
ERRORS = {
    "more than one row returned by a subquery used as an expression":
        "400 BadRequest: more than one row returned by a subquery used as an expression",
    "LIMIT must not be negative": "400 BadRequest: LIMIT must not be negative",
    "OFFSET must not be negative": "400 BadRequest: OFFSET must not be negative",
    "smallint out of range": "400 BadRequest: smallint out of range",
    "integer out of range": "400 BadRequest: integer out of range",
    "bigint out of range": "400 BadRequest: bigint out of range",
    "division by zero": "400 BadRequest: division by zero",
    "value out of range: overflow": "400 BadRequest: value out of range: overflow",
    "cannot take logarithm of zero": "400 BadRequest: cannot take logarithm of zero",
    "cannot take logarithm of a negative number":
        "400 BadRequest: cannot take logarithm of a negative number",
    '"1e1000" is out of range for type double precision':
        '400 BadRequest: "1e1000" is out of range for type double precision',
    '"1e39" is out of range for type real': '400 BadRequest: "1e39" is out of range for type real',
    # A numeric literal too large for real: PostgreSQL prints the numeric, Tarn (whose
    # literal is already a float8) says what overflowed.
    '"350000000000000000000000000000000000000" is out of range for type real':
        "400 BadRequest: value out of range: overflow",
    "syntax error at or near \"'b'\"": "400 BadRequest: syntax error at or near \"'b'\"",
    'relation "ws.twice" does not exist': '404 NotFound: relation "ws"."twice" does not exist',
    # bytea input.
    "invalid hexadecimal data: odd number of digits":
        "400 BadRequest: invalid hexadecimal data: odd number of digits",
    'invalid hexadecimal digit: "g"': '400 BadRequest: invalid hexadecimal digit: "g"',
    "invalid input syntax for type bytea": "400 BadRequest: invalid input syntax for type bytea",
    # Views (views_pg.sql).
    "cannot drop columns from view": "400 BadRequest: cannot drop columns from view",
    'cannot change name of view column "d" to "x"':
        '400 BadRequest: cannot change name of view column "d" to "x"',
    "cannot drop view ws.v1 because other objects depend on it":
        '409 Conflict: cannot drop view "ws"."v1" because other objects depend on it',
    "cannot drop table ws.t2 because other objects depend on it":
        '409 Conflict: cannot drop table "ws"."t2" because other objects depend on it',
}

TYPES = {
    "smallint": "I",
    "integer": "I",
    "bigint": "I",
    "double precision": "R",
    "text": "T",
    "character varying": "T",
    "boolean": "B",
}


class GenError(Exception):
    pass


class Server:
    """A private PostgreSQL server on a Unix socket in a temporary directory."""

    def __init__(self, bin_dir):
        self.bin = bin_dir
        self.dir = tempfile.mkdtemp(prefix="tarn-pg-")
        self.as_user = []
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self.data = os.path.join(self.dir, "data")
        self.started = False

    def _run(self, args, **kw):
        return subprocess.run(self.as_user + args, check=True, **kw)

    def start(self):
        self._run([os.path.join(self.bin, "initdb"), "-D", self.data, "-U", "postgres",
                   "--auth=trust", "--locale=C", "--encoding=UTF8"],
                  stdout=subprocess.DEVNULL)
        self._run([os.path.join(self.bin, "pg_ctl"), "-D", self.data, "-w",
                   "-l", os.path.join(self.dir, "log"),
                   "-o", f"-k {self.dir} -c listen_addresses='' -c fsync=off", "start"],
                  stdout=subprocess.DEVNULL)
        self.started = True

    def stop(self):
        try:
            if self.started:
                self._run([os.path.join(self.bin, "pg_ctl"), "-D", self.data, "-m", "fast",
                           "-w", "stop"], stdout=subprocess.DEVNULL)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def psql(self, db, script):
        """Runs a psql script; returns (exit code, stdout, stderr)."""
        p = subprocess.run(
            [os.path.join(self.bin, "psql"), "-X", "-q", "-t", "--csv",
             "-v", "ON_ERROR_STOP=1", "-h", self.dir, "-U", "postgres", "-d", db, "-f", "-"],
            input=script, capture_output=True, text=True)
        return p.returncode, p.stdout, p.stderr

    def execute(self, db, sql):
        rc, out, err = self.psql(db, sql.rstrip().rstrip(";") + "\n;\n")
        if rc != 0:
            raise GenError(f"failed in {db}: {sql}\n{err}")
        return out

    def query(self, db, sql):
        """(column types, rows as lists of strings or None, error message or None)."""
        body = sql.rstrip().rstrip(";")
        script = (f"\\pset null '{NULL}'\n{body} \\gdesc\n\\echo {SPLIT}\n{body}\n;\n")
        rc, out, err = self.psql(db, script)
        if SPLIT not in out:
            # An error already while describing (a constant that fails to fold): the
            # statement's error.
            m = re.search(r"ERROR:\s+(.*)", err)
            if rc != 0 and m:
                return [], None, m.group(1).strip()
            raise GenError(f"PostgreSQL could not describe: {sql}\n{err}")
        desc, data = out.split(SPLIT + "\n", 1)
        types = [row[1] for row in csv.reader(io.StringIO(desc))]
        if rc != 0:
            m = re.search(r"ERROR:\s+(.*)", err)
            if not m:
                raise GenError(f"psql failed without an ERROR: {sql}\n{err}")
            return types, None, m.group(1).strip()
        rows = list(csv.reader(io.StringIO(data)))
        return types, rows, None


def format_value(v, pg_type, sql):
    if v == NULL:
        return "NULL"
    kind = TYPES[pg_type]
    if kind == "B":
        return {"t": "true", "f": "false"}[v]
    if kind == "R":
        r = repr(float(v))
        if any(c in r for c in "en") or r == "-0.0":
            raise GenError(f"float {v!r} has no portable text form: {sql}")
        return r
    if kind == "T":
        if v == "":
            return "(empty)"
        if v == "NULL" or any(c.isspace() for c in v):
            raise GenError(f"text {v!r} would be ambiguous in the .slt: {sql}")
    return v


def read_input(path):
    lines = []
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("%include "):
                lines.extend(read_input(os.path.join(HERE, line.split(None, 1)[1].strip())))
            else:
                lines.append(line)
    return lines


def records(lines):
    rec = []
    for line in lines + [""]:
        if line.strip():
            rec.append(line)
        elif rec:
            yield rec
            rec = []


def shuffle_tables(server, db):
    """Rewrites every table of schema ws in reverse physical order."""
    out = server.execute(db, "SELECT tablename FROM pg_tables WHERE schemaname = 'ws' "
                             "ORDER BY tablename")
    for (t,) in csv.reader(io.StringIO(out)):
        server.execute(db, f'BEGIN; CREATE TEMP TABLE _r AS SELECT * FROM "ws"."{t}" '
                           f'ORDER BY ctid DESC; DELETE FROM "ws"."{t}"; '
                           f'INSERT INTO "ws"."{t}" SELECT * FROM _r; DROP TABLE _r; COMMIT')


def pg_sql(sql):
    return re.sub(r"\s+USING\s+engine\b", "", sql, flags=re.I)


def generate(server, name):
    src = os.path.join(HERE, name + ".sql")
    dbs = [f"slt_{name}", f"slt_{name}_shuffled"]
    for db in dbs:
        server.execute("postgres", f'DROP DATABASE IF EXISTS "{db}"')
        server.execute("postgres", f'CREATE DATABASE "{db}"')
        server.execute(db, 'CREATE SCHEMA "ws"')
    out = [f"# Generated by tests/slt/pg/gen.py from tests/slt/pg/{name}.sql: every expected",
           "# result is PostgreSQL 15's. Edit the .sql and rerun the generator; do not edit",
           "# this file by hand.", ""]
    counts = {"query": 0, "error": 0}
    for rec in records(read_input(src)):
        comments = [l for l in rec if l.startswith("#")]
        rest = [l for l in rec if not l.startswith("#")]
        # Comments come first in a record; a comment between SQL lines is refused.
        if rest and rec[:len(comments)] != comments:
            raise GenError(f"comments must come first in a record: {rec}")
        if not rest:
            out += comments + [""]
            continue
        head, sql = rest[0].split(), "\n".join(rest[1:])
        if not sql:
            raise GenError(f"record without SQL: {rec}")
        if head == ["statement", "ok"]:
            for i, db in enumerate(dbs):
                server.execute(db, pg_sql(sql))
                if i == 1:
                    shuffle_tables(server, db)
            out += comments + rest + [""]
        elif head == ["statement", "error"]:
            errs = [server.query(db, pg_sql(sql))[2] for db in dbs]
            if errs[0] is None or errs[0] != errs[1]:
                raise GenError(f"expected the same error in both databases, got {errs}: {sql}")
            if errs[0] not in ERRORS:
                raise GenError(f"error with no Tarn form in ERRORS: {errs[0]}: {sql}")
            out += comments + [f"statement error {ERRORS[errs[0]]}"] + rest[1:] + [""]
            counts["error"] += 1
        elif head[0] == "query" and head[1:] in ([], ["rowsort"]):
            rowsort = head[1:] == ["rowsort"]
            (types, rows, err), (types2, rows2, err2) = [server.query(db, pg_sql(sql))
                                                         for db in dbs]
            if err or err2:
                raise GenError(f"query failed ({err or err2}): {sql}")
            for t in types:
                if t not in TYPES:
                    raise GenError(f"result type {t} is not portable: {sql}")
            if not rowsort and len(rows) > 1 and not re.search(r"\border\s+by\b", sql, re.I):
                raise GenError(f"`query` of several rows needs an ORDER BY or rowsort: {sql}")
            if sorted(rows) != sorted(rows2):
                raise GenError(f"rows differ between the two databases: {sql}\n{rows}\n{rows2}")
            if not rowsort and rows != rows2:
                raise GenError(f"ORDER BY does not order totally: {sql}\n{rows}\n{rows2}")
            text = [[format_value(v, t, sql) for v, t in zip(r, types)] for r in rows]
            if rowsort:
                text.sort()
            letters = "".join(TYPES[t] for t in types)
            out += comments + [f"query {letters}" + (" rowsort" if rowsort else "")]
            out += rest[1:] + ["----"] + [" ".join(r) for r in text] + [""]
            counts["query"] += 1
        else:
            raise GenError(f"unknown record type {rest[0]!r}")
    for db in dbs:
        server.execute("postgres", f'DROP DATABASE "{db}"')
    while out and out[-1] == "":
        out.pop()
    return "\n".join(out) + "\n", counts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help="input names (pg/NAME.sql); default all")
    ap.add_argument("--pg-bin", default=os.environ.get("PG_BIN", "/usr/lib/postgresql/15/bin"))
    ap.add_argument("--check", action="store_true",
                    help="write nothing; exit 1 if a committed .slt differs")
    args = ap.parse_args()
    names = args.names or sorted(
        f[:-4] for f in os.listdir(HERE) if f.endswith(".sql") and f != "tables.sql")
    version = subprocess.run([os.path.join(args.pg_bin, "postgres"), "--version"],
                             capture_output=True, text=True, check=True).stdout.strip()
    if not re.search(r"\) 15\.", version):
        sys.exit(f"PostgreSQL 15 is needed, found {version}")
    server = Server(args.pg_bin)
    changed = False
    try:
        server.start()
        for name in names:
            t = time.time()
            text, counts = generate(server, name)
            dst = os.path.join(SLT_DIR, name + ".slt")
            old = open(dst).read() if os.path.exists(dst) else ""
            if args.check:
                if old != text:
                    changed = True
                    sys.stdout.writelines(difflib.unified_diff(
                        old.splitlines(True), text.splitlines(True), dst, dst + " (PostgreSQL)"))
            elif old != text:
                with open(dst, "w") as f:
                    f.write(text)
            print(f"{name}: {counts['query']} queries, {counts['error']} errors "
                  f"({time.time() - t:.1f}s){' changed' if old != text else ''}")
    except GenError as e:
        sys.exit(f"gen.py: {e}")
    finally:
        server.stop()
    print(version)
    if changed:
        sys.exit(1)


if __name__ == "__main__":
    main()
