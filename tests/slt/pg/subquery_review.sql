# Regressions from a hostile review of the subquery unnesting: joins of every kind inside
# correlated subqueries, LIMIT/OFFSET by subquery, UNION over rewritten values, -0.0,
# sums that overflow on the way, fixed-size vectors, names like the rule's own, ANY/ALL
# with NULLs, subqueries in VALUES, comma joins.

statement ok
CREATE TABLE "ws"."t" (id INT4, a INT4, b INT4) USING engine

statement ok
CREATE TABLE "ws"."x" (k INT4, v INT4, f FLOAT8) USING engine

statement ok
CREATE TABLE "ws"."u" (k INT4, v INT4) USING engine

statement ok
CREATE TABLE "ws"."e" (k INT4, v INT4) USING engine

statement ok
INSERT INTO "ws"."t" VALUES (1,1,10),(2,1,10),(3,2,20),(4,NULL,30),(5,NULL,NULL),(6,3,5),(7,4,20),(8,5,30)

statement ok
INSERT INTO "ws"."x" VALUES (1,5,1.5),(1,15,2.5),(2,NULL,NULL),(2,20,0.5),(NULL,7,7.0),(3,5,5.0),(3,5,5.0),(5,30,-1.0)

statement ok
INSERT INTO "ws"."u" VALUES (1,10),(2,20),(3,30),(4,NULL)

# A right join inside the subquery keeps its unmatched right rows for every outer row.
query
SELECT id, (SELECT count(*) FROM "ws"."x" x RIGHT JOIN "ws"."u" u ON u.k = x.k AND x.v > t.b) FROM "ws"."t" t ORDER BY id

query
SELECT id, (SELECT count(*) FROM (SELECT * FROM "ws"."x" x WHERE x.v > t.b) x RIGHT JOIN (SELECT * FROM "ws"."u" u WHERE u.v < t.b + 100) u ON u.k = x.k) FROM "ws"."t" t ORDER BY id

query
SELECT id, EXISTS (SELECT 1 FROM "ws"."x" x RIGHT JOIN "ws"."u" u ON u.k = x.k AND x.v > t.b WHERE x.k IS NULL) FROM "ws"."t" t ORDER BY id

# A full join inside the subquery.
query
SELECT id, (SELECT count(*) FROM "ws"."x" x FULL JOIN "ws"."u" u ON u.k = x.k AND x.v > t.b) FROM "ws"."t" t ORDER BY id

# LIMIT and OFFSET by subquery, ordered by a column the SELECT list drops.
query
SELECT a FROM "ws"."t" t ORDER BY b DESC, id LIMIT (SELECT 3)

query
SELECT a FROM "ws"."t" t ORDER BY b DESC, id OFFSET (SELECT 2)

query
SELECT id, (SELECT sum(x.v) FROM (SELECT x.v FROM "ws"."x" x ORDER BY x.v, x.f LIMIT (SELECT t.a)) x) FROM "ws"."t" t ORDER BY id

statement error
SELECT a FROM "ws"."t" t ORDER BY id LIMIT (SELECT -1)

statement error
SELECT a FROM "ws"."t" t ORDER BY id OFFSET (SELECT -1)

# UNION over a rewritten count(*), which the rewrite makes nullable.
query rowsort
SELECT (SELECT count(*) FROM "ws"."x" x WHERE x.k = t.a) FROM "ws"."t" t UNION SELECT (SELECT count(*) FROM "ws"."x" x WHERE x.k = t.a) FROM "ws"."t" t

query rowsort
SELECT (SELECT count(*) FROM "ws"."x" x WHERE x.k = t.a) FROM "ws"."t" t UNION SELECT 1

query rowsort
SELECT (SELECT count(*) FROM "ws"."x" x WHERE x.v < t.b) FROM "ws"."t" t UNION SELECT (SELECT count(*) FROM "ws"."x" x WHERE x.v > t.b) FROM "ws"."t" t

# ANY and ALL with every operator, NULLs on both sides, empty sets; uncorrelated and
# correlated.
query
SELECT id, b > ANY (SELECT v FROM "ws"."x"), b < ALL (SELECT v FROM "ws"."x"), b <> ANY (SELECT k FROM "ws"."u"), b = ALL (SELECT v FROM "ws"."u" WHERE k = 1), b >= ALL (SELECT v FROM "ws"."e"), b <= ANY (SELECT v FROM "ws"."e") FROM "ws"."t" ORDER BY id

query
SELECT id, b > ANY (SELECT u.v FROM "ws"."u" u WHERE u.k >= t.a), b < ALL (SELECT u.v FROM "ws"."u" u WHERE u.k >= t.a), b <> ALL (SELECT x.v FROM "ws"."x" x WHERE x.k = t.a), b = ANY (SELECT x.v * 2 FROM "ws"."x" x WHERE x.k = t.a) FROM "ws"."t" t ORDER BY id

query
SELECT id FROM "ws"."t" t WHERE b >= ALL (SELECT u.v FROM "ws"."u" u WHERE u.k <= t.a AND u.v IS NOT NULL) ORDER BY id

# Subqueries in VALUES.
query rowsort
VALUES (EXISTS (SELECT 1 FROM "ws"."x" x)), (1 IN (SELECT x.k FROM "ws"."x" x)), (7 = ANY (SELECT x.v FROM "ws"."x" x))

# A comma join and a correlated subquery: the join's condition comes first.
query
SELECT count(*) FROM "ws"."t" t, "ws"."u" s WHERE s.k = t.a AND s.v > (SELECT min(x.v) FROM "ws"."x" x WHERE x.k = t.a)

query
SELECT t.id, s.k FROM "ws"."t" t JOIN "ws"."u" s ON s.k = t.a AND s.v >= (SELECT min(x.v) FROM "ws"."x" x WHERE x.k = t.a) ORDER BY t.id

query
SELECT t.id, s.k FROM "ws"."t" t LEFT JOIN "ws"."u" s ON s.k = t.a AND s.v >= (SELECT min(x.v) FROM "ws"."x" x WHERE x.k = t.a) ORDER BY t.id

# -0.0 and 0.0 are one value: one row per outer row.
statement ok
CREATE TABLE "ws"."fl" (id INT4, f FLOAT8) USING engine

statement ok
INSERT INTO "ws"."fl" VALUES (1, 0.0), (2, -0.0), (3, 'NaN'), (4, 1.0)

query
SELECT a.id, (SELECT b.id FROM "ws"."fl" b WHERE b.f = a.f ORDER BY b.id LIMIT 1) FROM "ws"."fl" a ORDER BY a.id

query
SELECT a.id, (SELECT count(*) FROM "ws"."fl" b WHERE b.f < a.f), (SELECT count(*) FROM "ws"."fl" b WHERE b.f = a.f) FROM "ws"."fl" a ORDER BY a.id

# Sums that leave int8's range on the way but not in the end.
statement ok
CREATE TABLE "ws"."t2" (id INT4, a INT4) USING engine

statement ok
CREATE TABLE "ws"."s" (k INT4, v INT8) USING engine

statement ok
INSERT INTO "ws"."t2" VALUES (1, 2), (2, 4)

statement ok
INSERT INTO "ws"."s" VALUES (1, 9223372036854775807), (2, 9223372036854775807), (3, -9223372036854775807)

query
SELECT id, (SELECT sum(s.v) FROM "ws"."s" s WHERE s.k < t.a)::int8 FROM "ws"."t2" t ORDER BY id

query
SELECT k > 0 AS g, sum(v)::int8 FROM "ws"."s" GROUP BY k > 0 ORDER BY 1

query
SELECT sum(v)::int8 FROM "ws"."s"

# Fixed-size vectors on the preserved side of an outer join with a subquery in ON, and as
# a correlation column.
statement ok
CREATE TABLE "ws"."p1" (id INT4, v3 FLOAT4[3]) USING engine

statement ok
CREATE TABLE "ws"."q" (id INT4) USING engine

statement ok
INSERT INTO "ws"."p1" VALUES (1, '{1,2,3}'), (2, NULL)

statement ok
INSERT INTO "ws"."q" VALUES (1), (3), (4)

query
SELECT p.id, q.id FROM "ws"."p1" p LEFT JOIN "ws"."q" q ON q.id = p.id AND EXISTS (SELECT 1 FROM "ws"."q" q2 WHERE q2.id = p.id + 3) ORDER BY p.id, q.id

query
SELECT p.id, (SELECT count(*) FROM "ws"."p1" p2 WHERE p2.v3 = p.v3) FROM "ws"."p1" p ORDER BY p.id

# Columns named like the rule's generated ones.
statement ok
CREATE TABLE "ws"."c" (__d1 INT4, __d2 INT4, __value3 INT4) USING engine

statement ok
CREATE TABLE "ws"."x2" (k INT4, v INT4, __d1 INT4) USING engine

statement ok
INSERT INTO "ws"."c" VALUES (1, 2, 3), (2, 2, 2), (NULL, 1, 1)

statement ok
INSERT INTO "ws"."x2" VALUES (1, 10, 1), (2, 20, 2), (2, 5, 2)

query
SELECT c.__d1, (SELECT count(*) FROM "ws"."x2" x WHERE x.k = c.__d1), EXISTS (SELECT 1 FROM "ws"."x2" x WHERE x.__d1 = c.__d2) FROM "ws"."c" c ORDER BY 1
