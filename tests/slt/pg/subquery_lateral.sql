# LATERAL subqueries that read the columns beside them, of every shape the unnesting
# takes (aggregates over an inequality, no FROM, ORDER BY … LIMIT, GROUP BY, LEFT JOIN
# … ON true, an inner join's ON, NULL outer values, two levels), and the ORDER BY of a
# derived table or WITH query kept for the query above it.

%include tables.sql

# An aggregate over an inequality: one row per outer row, 0 where nothing matches.
query
SELECT t1.d, s.c FROM "ws"."t1" t1 CROSS JOIN LATERAL (SELECT count(*) AS c FROM "ws"."t2" t2 WHERE t2.y > t1.b) s ORDER BY t1.d

# max over no row is NULL.
query
SELECT t1.d, s.m FROM "ws"."t1" t1 CROSS JOIN LATERAL (SELECT max(t2.y) AS m FROM "ws"."t2" t2 WHERE t2.x < t1.a) s ORDER BY t1.d

# Two aggregates and an expression over them, read unqualified.
query
SELECT t1.d, n, lo, hi - lo FROM "ws"."t1" t1, LATERAL (SELECT count(t2.y) AS n, min(t2.y) AS lo, max(t2.y) AS hi FROM "ws"."t2" t2 WHERE t2.x <= t1.a) s ORDER BY t1.d

# No FROM: the outer row's own values.
query
SELECT t1.d, s.twice, s.sum FROM "ws"."t1" t1, LATERAL (SELECT t1.a * 2 AS twice, t1.a + t1.b AS sum) s ORDER BY t1.d

# CROSS JOIN LATERAL with no FROM, ordered by its column.
query
SELECT t1.d, s.v FROM "ws"."t1" t1 CROSS JOIN LATERAL (SELECT t1.b * 2 AS v) s ORDER BY s.v NULLS FIRST, t1.d

# The best match per row, ORDER BY … LIMIT 1; rows without one are gone (inner join).
query
SELECT t1.d, s.y FROM "ws"."t1" t1, LATERAL (SELECT t2.y FROM "ws"."t2" t2 WHERE t2.x = t1.a AND t2.y IS NOT NULL ORDER BY t2.y DESC LIMIT 1) s ORDER BY t1.d

# LEFT JOIN LATERAL … ON true keeps them, with NULLs.
query
SELECT t1.d, s.y FROM "ws"."t1" t1 LEFT JOIN LATERAL (SELECT t2.y FROM "ws"."t2" t2 WHERE t2.x = t1.a AND t2.y IS NOT NULL ORDER BY t2.y DESC LIMIT 1) s ON true ORDER BY t1.d

# Every matching row, by an inequality.
query
SELECT t1.d, s.y FROM "ws"."t1" t1, LATERAL (SELECT t2.y FROM "ws"."t2" t2 WHERE t2.y < t1.e) s ORDER BY t1.d, s.y

# An inner join's ON filters the pairs.
query
SELECT t1.d, s.y FROM "ws"."t1" t1 JOIN LATERAL (SELECT t2.y FROM "ws"."t2" t2 WHERE t2.x = t1.a) s ON s.y > 15 ORDER BY t1.d, s.y

# A LEFT join's ON: a row none of whose pairs passes it is kept, with NULLs.
query
SELECT t1.d, s.y FROM "ws"."t1" t1 LEFT JOIN LATERAL (SELECT t2.y FROM "ws"."t2" t2 WHERE t2.x = t1.a) s ON s.y > 15 ORDER BY t1.d, s.y

# GROUP BY inside.
query
SELECT t1.d, g.x, g.n FROM "ws"."t1" t1, LATERAL (SELECT t2.x, count(*) AS n FROM "ws"."t2" t2 WHERE t2.y <= t1.b GROUP BY t2.x) g ORDER BY t1.d, g.x NULLS FIRST

# LEFT JOIN LATERAL of an aggregate: count is 0, never missing.
query
SELECT t1.d, s.c FROM "ws"."t1" t1 LEFT JOIN LATERAL (SELECT count(*) AS c FROM "ws"."t2" t2 WHERE t2.x = t1.a) s ON true ORDER BY t1.d

# NULL outer values find nothing by equality, and still count.
query
SELECT t1.d, s.c FROM "ws"."t1" t1, LATERAL (SELECT count(*) AS c FROM "ws"."t2" t2 WHERE t2.x = t1.a OR t1.a IS NULL) s ORDER BY t1.d

# The lateral's columns in the star and in WHERE.
query
SELECT * FROM "ws"."t1" t1, LATERAL (SELECT sum(t2.y) AS total FROM "ws"."t2" t2 WHERE t2.x = t1.a) s WHERE s.total IS NOT NULL ORDER BY t1.d

# A lateral reading an earlier lateral's column.
query
SELECT t1.d, a.v, b.w FROM "ws"."t1" t1, LATERAL (SELECT t1.a + 1 AS v) a, LATERAL (SELECT count(*) AS w FROM "ws"."t2" t2 WHERE t2.x = a.v) b ORDER BY t1.d

# A correlated scalar subquery inside the lateral, reading both levels.
query
SELECT t1.d, s.c FROM "ws"."t1" t1, LATERAL (SELECT count(*) AS c FROM "ws"."t2" t2 WHERE t2.y > (SELECT min(t3.k) FROM "ws"."t3" t3 WHERE t3.k >= t1.a)) s ORDER BY t1.d

# Aggregated over the lateral's rows.
query
SELECT t1.a, sum(s.c)::int8 FROM "ws"."t1" t1, LATERAL (SELECT count(*) AS c FROM "ws"."t2" t2 WHERE t2.x < t1.a) s GROUP BY t1.a ORDER BY t1.a NULLS FIRST

# A derived table's ORDER BY is kept for the query above it.
query
SELECT * FROM (SELECT d, b FROM "ws"."t1" ORDER BY d DESC) s LIMIT 3

# And a WITH query's.
query
WITH w AS (SELECT d, a FROM "ws"."t1" ORDER BY d DESC) SELECT * FROM w LIMIT 4
