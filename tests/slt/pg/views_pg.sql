# Views against PostgreSQL 15's answers: over tables, joins, aggregates, CTEs, set
# operations, correlated subqueries, window functions and other views; column lists,
# OR REPLACE that adds columns, and views that read current rows.
%include tables.sql

statement ok
CREATE VIEW "ws"."v1" AS SELECT a, b, d FROM "ws"."t1" WHERE a IS NOT NULL

query
SELECT a, b, d FROM "ws"."v1" ORDER BY d

query
SELECT count(*), sum(a), max(b) FROM "ws"."v1"

# A column list renames the query's columns.
statement ok
CREATE VIEW "ws"."v2" (k, total, n) AS SELECT x, sum(y), count(*) FROM "ws"."t2" GROUP BY x

query
SELECT k, total, n FROM "ws"."v2" ORDER BY k NULLS FIRST

query
SELECT k FROM "ws"."v2" WHERE total > 15 ORDER BY k

# A join of two tables.
statement ok
CREATE VIEW "ws"."v3" AS SELECT t1.d, t1.a, t2.z FROM "ws"."t1" t1 JOIN "ws"."t2" t2 ON t2.x = t1.a

query
SELECT d, a, z FROM "ws"."v3" ORDER BY d, z

# A view of a view, joined with a table.
statement ok
CREATE VIEW "ws"."v4" AS SELECT v.d, v.a, t3.s FROM "ws"."v1" v LEFT JOIN "ws"."t3" t3 ON t3.k = v.a

query
SELECT d, a, s FROM "ws"."v4" ORDER BY d

# A CTE and a window function inside a view.
statement ok
CREATE VIEW "ws"."v5" AS WITH r AS (SELECT d, b, rank() OVER (ORDER BY b DESC NULLS LAST, d) AS rk FROM "ws"."t1") SELECT d, b, rk FROM r WHERE rk <= 4

query
SELECT d, b, rk FROM "ws"."v5" ORDER BY rk

# UNION and UNION ALL.
statement ok
CREATE VIEW "ws"."v6" AS SELECT a AS v FROM "ws"."t1" UNION SELECT x FROM "ws"."t2"

query
SELECT v FROM "ws"."v6" ORDER BY v NULLS FIRST

statement ok
CREATE VIEW "ws"."v7" AS SELECT z AS s FROM "ws"."t2" WHERE x < 3 UNION ALL SELECT s FROM "ws"."t3" WHERE k < 3

query rowsort
SELECT s FROM "ws"."v7"

# Correlated subqueries in the view's select list and WHERE.
statement ok
CREATE VIEW "ws"."v8" AS SELECT d, (SELECT count(*) FROM "ws"."t2" t2 WHERE t2.x = t1.a) AS matches FROM "ws"."t1" t1 WHERE EXISTS (SELECT 1 FROM "ws"."t2" t2 WHERE t2.y > t1.b)

query
SELECT d, matches FROM "ws"."v8" ORDER BY d

# A view read in a subquery, an IN list and a join with itself.
query
SELECT d FROM "ws"."t1" WHERE a IN (SELECT k FROM "ws"."v2" WHERE n > 1) ORDER BY d

query
SELECT a.d, b.d FROM "ws"."v1" a JOIN "ws"."v1" b ON b.a = a.a AND b.d > a.d ORDER BY a.d, b.d

query
SELECT (SELECT max(total) FROM "ws"."v2") AS m

# A view reads the rows as they are now.
statement ok
INSERT INTO "ws"."t1" VALUES (9, 90, 900, 11, 8)

query
SELECT count(*), max(d) FROM "ws"."v1"

statement ok
DELETE FROM "ws"."t1" WHERE d = 11

query
SELECT count(*), max(d) FROM "ws"."v1"

# OR REPLACE may add columns after the old ones.
statement ok
CREATE OR REPLACE VIEW "ws"."v1" AS SELECT a, b, d, c FROM "ws"."t1" WHERE a > 2

query
SELECT a, b, d, c FROM "ws"."v1" ORDER BY d

# A view's star is fixed when it is made: a column added later is not in it.
statement ok
CREATE VIEW "ws"."v9" AS SELECT * FROM "ws"."t3"

statement ok
ALTER TABLE "ws"."t3" ADD COLUMN extra INT4

query
SELECT * FROM "ws"."v9" ORDER BY k NULLS FIRST

# Aggregates and grouping over a view.
query
SELECT a, count(*) FROM "ws"."v3" GROUP BY a ORDER BY a

query
SELECT z, count(*) FROM "ws"."v3" GROUP BY z HAVING count(*) > 1 ORDER BY z

# What depends on a view or table keeps it, and OR REPLACE keeps the columns' names.
statement error
DROP VIEW "ws"."v1"

statement error
DROP TABLE "ws"."t2"

statement error
CREATE OR REPLACE VIEW "ws"."v1" AS SELECT a, b FROM "ws"."t1"

statement error
CREATE OR REPLACE VIEW "ws"."v1" AS SELECT a, b, d AS x, c FROM "ws"."t1"

# DROP VIEW, and IF EXISTS.
statement ok
DROP VIEW "ws"."v8"

statement ok
DROP VIEW IF EXISTS "ws"."v8"

# CASCADE drops the views that read the dropped one.
statement ok
DROP VIEW "ws"."v1" CASCADE

query
SELECT count(*) FROM "ws"."v3"
