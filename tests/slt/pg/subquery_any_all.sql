# op ANY (subquery), op SOME (subquery) and op ALL (subquery), correlated and not, in
# every place an expression can stand. ANY is true if some comparison is true, else NULL
# if some is NULL, else false (false over no rows); ALL is false if some comparison is
# false, else NULL if some is NULL, else true (true over no rows), whatever the left side.

%include tables.sql

# Every operator with ANY, uncorrelated, over a set with a NULL (t2.x).
query
SELECT t1.d, t1.a, t1.a = ANY (SELECT x FROM "ws"."t2"), t1.a <> ANY (SELECT x FROM "ws"."t2"), t1.a < ANY (SELECT x FROM "ws"."t2"), t1.a <= ANY (SELECT x FROM "ws"."t2"), t1.a > ANY (SELECT x FROM "ws"."t2"), t1.a >= ANY (SELECT x FROM "ws"."t2") FROM "ws"."t1" t1 ORDER BY t1.d

# Every operator with ALL, uncorrelated, over a set with a NULL: never true.
query
SELECT t1.d, t1.a, t1.a = ALL (SELECT x FROM "ws"."t2"), t1.a <> ALL (SELECT x FROM "ws"."t2"), t1.a < ALL (SELECT x FROM "ws"."t2"), t1.a <= ALL (SELECT x FROM "ws"."t2"), t1.a > ALL (SELECT x FROM "ws"."t2"), t1.a >= ALL (SELECT x FROM "ws"."t2") FROM "ws"."t1" t1 ORDER BY t1.d

# Every operator with ALL over the same set without its NULL.
query
SELECT t1.d, t1.a, t1.a = ALL (SELECT x FROM "ws"."t2" WHERE x IS NOT NULL), t1.a <> ALL (SELECT x FROM "ws"."t2" WHERE x IS NOT NULL), t1.a < ALL (SELECT x FROM "ws"."t2" WHERE x IS NOT NULL), t1.a <= ALL (SELECT x FROM "ws"."t2" WHERE x IS NOT NULL), t1.a > ALL (SELECT x FROM "ws"."t2" WHERE x IS NOT NULL), t1.a >= ALL (SELECT x FROM "ws"."t2" WHERE x IS NOT NULL) FROM "ws"."t1" t1 ORDER BY t1.d

# Every operator with ANY over a set without NULLs.
query
SELECT t1.d, t1.b, t1.b = ANY (SELECT k FROM "ws"."t3" WHERE k IS NOT NULL), t1.b <> ANY (SELECT y FROM "ws"."t2" WHERE x = 2), t1.b < ANY (SELECT y FROM "ws"."t2" WHERE y IS NOT NULL), t1.b > ANY (SELECT y FROM "ws"."t2" WHERE x = 1) FROM "ws"."t1" t1 ORDER BY t1.d

# Over the empty table: ANY is false and ALL is true, for a NULL left side too.
query
SELECT t1.d, t1.a = ANY (SELECT a FROM "ws"."t0"), t1.a > ANY (SELECT a FROM "ws"."t0"), t1.a = ALL (SELECT a FROM "ws"."t0"), t1.a < ALL (SELECT a FROM "ws"."t0") FROM "ws"."t1" t1 ORDER BY t1.d

query
SELECT t1.d FROM "ws"."t1" t1 WHERE t1.a > ALL (SELECT a FROM "ws"."t0") ORDER BY t1.d

# A set that holds only NULL.
query
SELECT 1 = ANY (SELECT x FROM "ws"."t2" WHERE x IS NULL), 1 < ALL (SELECT x FROM "ws"."t2" WHERE x IS NULL), 1 <> ALL (SELECT x FROM "ws"."t2" WHERE x IS NULL)

# Literals and NULL on the left.
query
SELECT 9 >= ALL (SELECT x FROM "ws"."t2" WHERE x IS NOT NULL), 0 < ALL (SELECT x FROM "ws"."t2" WHERE x IS NOT NULL), NULL = ANY (SELECT x FROM "ws"."t2"), NULL <> ALL (SELECT x FROM "ws"."t2")

# SOME is ANY.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE t1.a > SOME (SELECT x FROM "ws"."t2" WHERE y > 15) ORDER BY t1.d

query
SELECT t1.d, t1.a = SOME (SELECT x FROM "ws"."t2"), t1.a <= SOME (SELECT k FROM "ws"."t3") FROM "ws"."t1" t1 ORDER BY t1.d

# = ANY is IN and <> ALL is NOT IN, NULLs included.
query
SELECT t1.d, t1.a = ANY (SELECT x FROM "ws"."t2") IS NOT DISTINCT FROM t1.a IN (SELECT x FROM "ws"."t2"), t1.a <> ALL (SELECT x FROM "ws"."t2") IS NOT DISTINCT FROM t1.a NOT IN (SELECT x FROM "ws"."t2") FROM "ws"."t1" t1 ORDER BY t1.d

# Uncorrelated in WHERE: the largest a (NULLs of t1 themselves compare to NULL).
query
SELECT t1.d FROM "ws"."t1" t1 WHERE t1.a >= ALL (SELECT x.a FROM "ws"."t1" x WHERE x.a IS NOT NULL) ORDER BY t1.d

# Uncorrelated <> ALL in WHERE over a set with a NULL: no row.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE t1.a <> ALL (SELECT x FROM "ws"."t2") ORDER BY t1.d

# Correlated = ALL: true over an empty correlated set (no match, or a NULL a).
query
SELECT t1.d, t1.b = ALL (SELECT y FROM "ws"."t2" WHERE t2.x = t1.a), t1.b = ANY (SELECT y FROM "ws"."t2" WHERE t2.x = t1.a) FROM "ws"."t1" t1 ORDER BY t1.d

# Correlated > ALL in WHERE: a NULL in the correlated set (a = 3) gives NULL.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE t1.b > ALL (SELECT y FROM "ws"."t2" WHERE t2.x < t1.a) ORDER BY t1.d

# Correlated > ALL in the SELECT list.
query
SELECT t1.d, t1.b > ALL (SELECT y FROM "ws"."t2" WHERE t2.x < t1.a), t1.b >= ALL (SELECT y FROM "ws"."t2" WHERE t2.x < t1.a AND y IS NOT NULL) FROM "ws"."t1" t1 ORDER BY t1.d

# Correlated < ANY with an inequality correlation.
query
SELECT t1.d, t1.b < ANY (SELECT y FROM "ws"."t2" WHERE t2.x > t1.a) FROM "ws"."t1" t1 ORDER BY t1.d

# Correlated on an expression of outer columns.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE t1.a * 10 >= ALL (SELECT y FROM "ws"."t2" WHERE t2.x <= t1.a + 1 AND y IS NOT NULL) ORDER BY t1.d

# Several outer references.
query
SELECT t1.d, t1.e <= ANY (SELECT x FROM "ws"."t2" WHERE t2.y BETWEEN t1.b AND t1.c / 5) FROM "ws"."t1" t1 ORDER BY t1.d

# An outer column in the subquery's SELECT list.
query
SELECT t1.d, t1.c > ALL (SELECT t1.b + y FROM "ws"."t2" WHERE y IS NOT NULL) FROM "ws"."t1" t1 ORDER BY t1.d

# Correlated sets against the empty table.
query
SELECT t1.d, t1.a > ALL (SELECT a FROM "ws"."t0" WHERE t0.a = t1.b), t1.a > ANY (SELECT a FROM "ws"."t0" WHERE t0.a = t1.b) FROM "ws"."t1" t1 ORDER BY t1.d

# int8 and float8 sets.
query
SELECT t1.d, t1.a < ALL (SELECT k FROM "ws"."t3" WHERE k > 2), t1.a > ANY (SELECT f FROM "ws"."t3") FROM "ws"."t1" t1 ORDER BY t1.d

query
SELECT t3.k, t3.f >= ALL (SELECT f FROM "ws"."t3" x WHERE x.f IS NOT NULL AND x.k <> t3.k) FROM "ws"."t3" t3 ORDER BY t3.k

# Text ANY and ALL (C collation: bytewise order).
query
SELECT t2.z FROM "ws"."t2" t2 WHERE t2.z > ALL (SELECT s FROM "ws"."t3" WHERE s IS NOT NULL) ORDER BY t2.z

query
SELECT t2.z, t2.z < ANY (SELECT s FROM "ws"."t3"), t2.z = ALL (SELECT s FROM "ws"."t3" WHERE s = t2.z) FROM "ws"."t2" t2 WHERE t2.z IS NOT NULL AND t2.z <> 'two' ORDER BY t2.z

# DISTINCT and GROUP BY inside the subquery.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE t1.a = ANY (SELECT DISTINCT x FROM "ws"."t2" WHERE y < 30) ORDER BY t1.d

query
SELECT t1.d, t1.b >= ALL (SELECT max(y) FROM "ws"."t2" GROUP BY x HAVING x <= t1.a) FROM "ws"."t1" t1 ORDER BY t1.d

# An aggregate per correlated set: ALL over one row.
query
SELECT t1.d, t1.b > ALL (SELECT min(y) FROM "ws"."t2" WHERE t2.x = t1.a) FROM "ws"."t1" t1 ORDER BY t1.d

# ORDER BY with LIMIT inside the subquery.
query
SELECT t1.d, t1.b > ALL (SELECT y FROM "ws"."t2" WHERE y IS NOT NULL ORDER BY y DESC LIMIT 2), t1.b <= ANY (SELECT y FROM "ws"."t2" WHERE t2.x > t1.a ORDER BY x, y LIMIT 2) FROM "ws"."t1" t1 ORDER BY t1.d

# Under OR.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE t1.a > ALL (SELECT x FROM "ws"."t2" WHERE x < 5) OR t1.b < 15 ORDER BY t1.d

query
SELECT t1.d FROM "ws"."t1" t1 WHERE t1.b = ANY (SELECT y FROM "ws"."t2" WHERE t2.x = t1.a) OR t1.a < ALL (SELECT k FROM "ws"."t3" WHERE k IS NOT NULL) ORDER BY t1.d

# Under NOT.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE NOT (t1.a > ANY (SELECT x FROM "ws"."t2" WHERE x IS NOT NULL)) ORDER BY t1.d

query
SELECT t1.d FROM "ws"."t1" t1 WHERE NOT (t1.b >= ALL (SELECT y FROM "ws"."t2" WHERE t2.x = t1.a)) ORDER BY t1.d

# IS NULL on an ALL with a NULL in the set.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE (t1.a < ALL (SELECT x FROM "ws"."t2")) IS NULL ORDER BY t1.d

# In CASE.
query
SELECT t1.d, CASE WHEN t1.b > ALL (SELECT y FROM "ws"."t2" WHERE t2.x = t1.a) THEN 'above' WHEN t1.b < ANY (SELECT y FROM "ws"."t2" WHERE t2.x = t1.a) THEN 'below' ELSE 'other' END FROM "ws"."t1" t1 ORDER BY t1.d

# In a CASE branch.
query
SELECT t1.d, CASE WHEN t1.e > 4 THEN t1.e > ALL (SELECT x FROM "ws"."t2" WHERE t2.y < t1.b) END FROM "ws"."t1" t1 ORDER BY t1.d

# In ORDER BY.
query
SELECT t1.d FROM "ws"."t1" t1 ORDER BY t1.b >= ALL (SELECT y FROM "ws"."t2" WHERE t2.x <= t1.a) DESC, t1.d

# Inside aggregates' arguments.
query
SELECT count(CASE WHEN t1.a > ANY (SELECT x FROM "ws"."t2") THEN 1 END), count(CASE WHEN t1.a < ALL (SELECT k FROM "ws"."t3" WHERE k > 3) THEN 1 END), bool_or(t1.b = ANY (SELECT y FROM "ws"."t2" WHERE t2.x = t1.a)) FROM "ws"."t1" t1

query
SELECT t1.a, bool_and(t1.b >= ALL (SELECT y FROM "ws"."t2" WHERE t2.x = t1.a)) FROM "ws"."t1" t1 GROUP BY t1.a ORDER BY t1.a

# In HAVING: an aggregate against ALL, uncorrelated.
query
SELECT t1.a, count(*) FROM "ws"."t1" t1 GROUP BY t1.a HAVING count(*) > ALL (SELECT x FROM "ws"."t2" WHERE x < 2) ORDER BY t1.a

# In HAVING, correlated on the grouping column.
query
SELECT t1.a, max(t1.b) FROM "ws"."t1" t1 GROUP BY t1.a HAVING max(t1.b) >= ALL (SELECT y FROM "ws"."t2" WHERE t2.x = t1.a) ORDER BY t1.a

# Nested two levels: the innermost subquery references the outermost query.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE t1.b > ALL (SELECT y FROM "ws"."t2" WHERE t2.x = ANY (SELECT x.a FROM "ws"."t1" x WHERE x.d < t1.d) AND y IS NOT NULL) ORDER BY t1.d

# Nested two levels: the innermost subquery references the middle one.
query
SELECT t1.d, t1.a = ANY (SELECT x FROM "ws"."t2" WHERE t2.y >= ALL (SELECT x.b FROM "ws"."t1" x WHERE x.a = t2.x)) FROM "ws"."t1" t1 ORDER BY t1.d

# Nested two levels, the innermost referencing both outer levels.
query
SELECT t1.d, t1.b = ANY (SELECT y FROM "ws"."t2" WHERE t2.x <= ALL (SELECT k FROM "ws"."t3" WHERE t3.k >= t1.a AND t3.k >= t2.x)) FROM "ws"."t1" t1 ORDER BY t1.d

# One subquery referencing two outer tables of a join.
query
SELECT t1.d, t3.k FROM "ws"."t1" t1 JOIN "ws"."t3" t3 ON t3.k < t1.a WHERE t1.b > ALL (SELECT y FROM "ws"."t2" WHERE t2.x > t3.k AND t2.x < t1.a) ORDER BY t1.d, t3.k

# In JOIN ... ON.
query
SELECT t1.d, t3.k FROM "ws"."t1" t1 JOIN "ws"."t3" t3 ON t3.k = ANY (SELECT x FROM "ws"."t2" WHERE t2.y = t1.b) ORDER BY t1.d, t3.k

# In LEFT JOIN ... ON, correlated with both sides.
query
SELECT t1.d, t3.k FROM "ws"."t1" t1 LEFT JOIN "ws"."t3" t3 ON t3.k = t1.a AND t1.b >= ALL (SELECT y FROM "ws"."t2" WHERE t2.x = t3.k) ORDER BY t1.d

# Self-correlated: rows whose b is the largest among rows with the same a.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE t1.b >= ALL (SELECT x.b FROM "ws"."t1" x WHERE x.a = t1.a) ORDER BY t1.d

# A scalar subquery inside ANY's subquery.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE t1.b > ANY (SELECT y FROM "ws"."t2" WHERE t2.x = (SELECT max(k) FROM "ws"."t3" WHERE t3.k < t1.a)) ORDER BY t1.d

# A scalar subquery with more than one row inside ALL is still an error.
statement error
SELECT t1.d FROM "ws"."t1" t1 WHERE t1.b > ALL (SELECT y FROM "ws"."t2" WHERE t2.x = (SELECT x FROM "ws"."t2" x WHERE x.x = t1.a))
