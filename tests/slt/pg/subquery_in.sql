# IN and NOT IN with subqueries, correlated and not, in every place an expression can
# stand, with three-valued logic: v IN (set) is NULL when v is NULL and the set is not
# empty, or when there is no match and the set holds a NULL; NOT IN is its negation. Over
# an empty set IN is false and NOT IN is true, even for a NULL v.

%include tables.sql

# Uncorrelated IN in WHERE; a NULL outer value is never IN.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE t1.a IN (SELECT x FROM "ws"."t2") ORDER BY t1.d

# Uncorrelated NOT IN over a set with a NULL: no row at all.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE t1.a NOT IN (SELECT x FROM "ws"."t2") ORDER BY t1.d

# NOT IN over the same set without its NULLs: NULL outer values are still dropped.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE t1.a NOT IN (SELECT x FROM "ws"."t2" WHERE x IS NOT NULL) ORDER BY t1.d

# IN and NOT IN in the SELECT list show the NULLs.
query
SELECT t1.d, t1.a, t1.a IN (SELECT x FROM "ws"."t2"), t1.a NOT IN (SELECT x FROM "ws"."t2"), t1.a NOT IN (SELECT x FROM "ws"."t2" WHERE x IS NOT NULL) FROM "ws"."t1" t1 ORDER BY t1.d

# Over the empty table: IN is false and NOT IN is true, for NULL values too.
query
SELECT t1.d, t1.a IN (SELECT a FROM "ws"."t0"), t1.a NOT IN (SELECT a FROM "ws"."t0") FROM "ws"."t1" t1 ORDER BY t1.d

query
SELECT t1.d FROM "ws"."t1" t1 WHERE t1.a NOT IN (SELECT a FROM "ws"."t0") ORDER BY t1.d

# A set that holds only NULL: IN and NOT IN are NULL for every value.
query
SELECT t1.d, t1.a IN (SELECT x FROM "ws"."t2" WHERE x IS NULL), t1.a NOT IN (SELECT x FROM "ws"."t2" WHERE x IS NULL) FROM "ws"."t1" t1 ORDER BY t1.d

# Literal NULL on the left.
query
SELECT NULL IN (SELECT x FROM "ws"."t2"), NULL NOT IN (SELECT x FROM "ws"."t2"), NULL IN (SELECT a FROM "ws"."t0"), NULL NOT IN (SELECT a FROM "ws"."t0")

# Literals on the left, a set with a NULL on the right.
query
SELECT 1 IN (SELECT x FROM "ws"."t2"), 7 IN (SELECT x FROM "ws"."t2"), 1 NOT IN (SELECT x FROM "ws"."t2"), 7 NOT IN (SELECT x FROM "ws"."t2")

# Two unaliased IN subqueries in one SELECT list.
query
SELECT 2 IN (SELECT x FROM "ws"."t2"), 3 IN (SELECT k FROM "ws"."t3")

# int4 IN int8, and int4 IN float8 (4 = 4.0).
query
SELECT t1.d, t1.a IN (SELECT k FROM "ws"."t3"), t1.a IN (SELECT f FROM "ws"."t3") FROM "ws"."t1" t1 ORDER BY t1.d

# int8 NOT IN int4 with a NULL in the set: NULL for every non-match.
query
SELECT t3.k, t3.k NOT IN (SELECT a FROM "ws"."t1") FROM "ws"."t3" t3 ORDER BY t3.k

# Text IN and NOT IN (t3.s holds a NULL).
query
SELECT t2.z FROM "ws"."t2" t2 WHERE t2.z IN (SELECT s FROM "ws"."t3") ORDER BY t2.z

query
SELECT t2.z FROM "ws"."t2" t2 WHERE t2.z NOT IN (SELECT s FROM "ws"."t3") ORDER BY t2.z

query
SELECT t2.z FROM "ws"."t2" t2 WHERE t2.z NOT IN (SELECT s FROM "ws"."t3" WHERE s IS NOT NULL) ORDER BY t2.z

# float8 IN float8 (y / 4 has a NULL, x / 2 has none).
query
SELECT t3.k, t3.f IN (SELECT y::float8 / 4 FROM "ws"."t2"), t3.f IN (SELECT x::float8 / 2 FROM "ws"."t2" WHERE x IS NOT NULL) FROM "ws"."t3" t3 ORDER BY t3.k

# An expression on either side.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE t1.a + 1 IN (SELECT x * 2 FROM "ws"."t2") ORDER BY t1.d

# IN over VALUES with a NULL.
query
SELECT t1.d, t1.a IN (VALUES (1), (NULL)), t1.a NOT IN (VALUES (1), (NULL)) FROM "ws"."t1" t1 ORDER BY t1.d

# Correlated IN: b among the y of the same a.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE t1.b IN (SELECT y FROM "ws"."t2" WHERE t2.x = t1.a) ORDER BY t1.d

# Correlated NOT IN: a NULL in the correlated set (a = 3) drops the row, an empty set
# (no match, or a NULL a) keeps it even when b is NULL.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE t1.b NOT IN (SELECT y FROM "ws"."t2" WHERE t2.x = t1.a) ORDER BY t1.d

# Correlated IN and NOT IN in the SELECT list.
query
SELECT t1.d, t1.b IN (SELECT y FROM "ws"."t2" WHERE t2.x = t1.a), t1.b NOT IN (SELECT y FROM "ws"."t2" WHERE t2.x = t1.a) FROM "ws"."t1" t1 ORDER BY t1.d

# Correlated with an inequality.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE t1.a IN (SELECT x FROM "ws"."t2" WHERE t2.y > t1.b) ORDER BY t1.d

query
SELECT t1.d, t1.e NOT IN (SELECT x FROM "ws"."t2" WHERE t2.y < t1.b) FROM "ws"."t1" t1 ORDER BY t1.d

# Correlated on an expression of outer columns.
query
SELECT t1.d, t1.b + 10 IN (SELECT y FROM "ws"."t2" WHERE t2.x = t1.a + 1 OR t2.x = t1.a - 1) FROM "ws"."t1" t1 ORDER BY t1.d

# Several outer references.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE t1.e IN (SELECT x FROM "ws"."t2" WHERE t2.y <= t1.b AND t2.x <> t1.a) ORDER BY t1.d

# An outer column in the subquery's SELECT list.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE t1.b IN (SELECT t1.a * 10 FROM "ws"."t2") ORDER BY t1.d

query
SELECT t1.d, 22 IN (SELECT t1.b + x FROM "ws"."t2"), 22 IN (SELECT t1.b + x FROM "ws"."t2" WHERE x IS NOT NULL) FROM "ws"."t1" t1 ORDER BY t1.d

# Correlated NOT IN over the empty table.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE t1.a NOT IN (SELECT a FROM "ws"."t0" WHERE t0.a = t1.b) ORDER BY t1.d

# Correlated sets that are empty, hold a NULL, or both, for NULL and non-NULL values.
query
SELECT t1.d, t1.e IN (SELECT y FROM "ws"."t2" WHERE t2.x = t1.a), t1.e NOT IN (SELECT y FROM "ws"."t2" WHERE t2.x = t1.a) FROM "ws"."t1" t1 ORDER BY t1.d

# DISTINCT inside the subquery changes nothing.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE t1.a IN (SELECT DISTINCT x FROM "ws"."t2") ORDER BY t1.d

# GROUP BY and HAVING inside the subquery.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE t1.a IN (SELECT x FROM "ws"."t2" GROUP BY x HAVING count(*) > 1) ORDER BY t1.d

query
SELECT t1.d, t1.a NOT IN (SELECT x FROM "ws"."t2" GROUP BY x HAVING count(y) < 2) FROM "ws"."t1" t1 ORDER BY t1.d

# An aggregate per correlated set.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE t1.b IN (SELECT max(y) FROM "ws"."t2" WHERE t2.x <= t1.a) ORDER BY t1.d

# ORDER BY with LIMIT inside the subquery (NULLs come first in DESC).
query
SELECT t1.d, t1.a IN (SELECT x FROM "ws"."t2" ORDER BY y DESC, x LIMIT 3), t1.a IN (SELECT x FROM "ws"."t2" ORDER BY y, x LIMIT 3) FROM "ws"."t1" t1 ORDER BY t1.d

# Correlated, with ORDER BY and LIMIT: is b + 10 the y of the next t2 row by x?
query
SELECT t1.d, t1.b + 10 IN (SELECT y FROM "ws"."t2" WHERE t2.x > t1.a ORDER BY x, y LIMIT 1) FROM "ws"."t1" t1 ORDER BY t1.d

# IN under OR.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE t1.a IN (SELECT x FROM "ws"."t2" WHERE y > 30) OR t1.b > 55 ORDER BY t1.d

# Two IN under OR, one correlated.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE t1.a IN (SELECT k FROM "ws"."t3" WHERE f > 2) OR t1.b IN (SELECT y FROM "ws"."t2" WHERE t2.x = t1.a) ORDER BY t1.d

# NOT IN under OR: a NULL from NOT IN with a false other side drops the row.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE t1.a NOT IN (SELECT x FROM "ws"."t2") OR t1.b < 20 ORDER BY t1.d

# NOT (IN): NULL stays NULL.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE NOT (t1.a IN (SELECT x FROM "ws"."t2" WHERE x IS NOT NULL)) ORDER BY t1.d

# NOT (NOT IN) keeps the rows IN keeps (NOT NULL is NULL).
query
SELECT t1.d FROM "ws"."t1" t1 WHERE NOT (t1.a NOT IN (SELECT x FROM "ws"."t2")) ORDER BY t1.d

# IS NOT TRUE / IS NULL on IN.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE (t1.a IN (SELECT x FROM "ws"."t2")) IS NOT TRUE ORDER BY t1.d

query
SELECT t1.d FROM "ws"."t1" t1 WHERE (t1.e NOT IN (SELECT x FROM "ws"."t2")) IS NULL ORDER BY t1.d

# NOT over an AND with IN.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE NOT (t1.a IN (SELECT x FROM "ws"."t2" WHERE x IS NOT NULL) AND t1.b > 15) ORDER BY t1.d

# In CASE: three outcomes for three-valued IN.
query
SELECT t1.d, CASE WHEN t1.e IN (SELECT x FROM "ws"."t2") THEN 'in' WHEN t1.e NOT IN (SELECT x FROM "ws"."t2") THEN 'out' ELSE 'unknown' END FROM "ws"."t1" t1 ORDER BY t1.d

# In a CASE branch.
query
SELECT t1.d, CASE WHEN t1.a > 2 THEN t1.b IN (SELECT y FROM "ws"."t2" WHERE t2.x = t1.a) ELSE false END FROM "ws"."t1" t1 ORDER BY t1.d

# In ORDER BY (false, true, NULL: NULLs last).
query
SELECT t1.d FROM "ws"."t1" t1 ORDER BY t1.e IN (SELECT x FROM "ws"."t2"), t1.d

# Inside aggregates' arguments.
query
SELECT count(CASE WHEN t1.a IN (SELECT x FROM "ws"."t2") THEN 1 END), count(CASE WHEN t1.a NOT IN (SELECT x FROM "ws"."t2" WHERE x IS NOT NULL) THEN 1 END), sum(CASE WHEN t1.b IN (SELECT y FROM "ws"."t2" WHERE t2.x = t1.a) THEN t1.b END) FROM "ws"."t1" t1

query
SELECT t1.a, bool_and(t1.b IN (SELECT y FROM "ws"."t2" WHERE t2.x <= t1.a)) FROM "ws"."t1" t1 GROUP BY t1.a ORDER BY t1.a

# In HAVING: an aggregate IN an uncorrelated subquery.
query
SELECT t1.a, count(*) FROM "ws"."t1" t1 GROUP BY t1.a HAVING count(*) IN (SELECT x FROM "ws"."t2" WHERE x > 1) ORDER BY t1.a

# In HAVING, correlated on the grouping column.
query
SELECT t1.a, max(t1.b) FROM "ws"."t1" t1 GROUP BY t1.a HAVING max(t1.b) NOT IN (SELECT y FROM "ws"."t2" WHERE t2.x = t1.a) ORDER BY t1.a

# Nested two levels: the innermost subquery references the outermost query.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE t1.a IN (SELECT x FROM "ws"."t2" WHERE t2.y IN (SELECT x.b FROM "ws"."t1" x WHERE x.a = t1.a)) ORDER BY t1.d

# Nested two levels: NOT IN inside IN, the inner set correlated with the middle query.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE t1.a IN (SELECT x FROM "ws"."t2" WHERE t2.x NOT IN (SELECT k FROM "ws"."t3" WHERE t3.f < t2.y AND k IS NOT NULL)) ORDER BY t1.d

# Nested two levels, the innermost referencing both outer levels.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE t1.b IN (SELECT y FROM "ws"."t2" WHERE t2.x IN (SELECT k FROM "ws"."t3" WHERE t3.k <= t1.a AND t3.k >= t2.x)) ORDER BY t1.d

# One subquery referencing two outer tables of a join.
query
SELECT t1.d, t3.k FROM "ws"."t1" t1 JOIN "ws"."t3" t3 ON t3.k < t1.a WHERE t1.b IN (SELECT y FROM "ws"."t2" WHERE t2.x = t1.a AND t2.x > t3.k + 1) ORDER BY t1.d, t3.k

query
SELECT t1.d, t3.s FROM "ws"."t1" t1 JOIN "ws"."t3" t3 ON t3.k = t1.a WHERE t3.s NOT IN (SELECT z FROM "ws"."t2" WHERE t2.x = t1.a AND z IS NOT NULL) ORDER BY t1.d

# In JOIN ... ON.
query
SELECT t1.d, t3.k FROM "ws"."t1" t1 JOIN "ws"."t3" t3 ON t3.k = t1.a AND t1.b IN (SELECT y FROM "ws"."t2") ORDER BY t1.d

# In LEFT JOIN ... ON, correlated with both sides.
query
SELECT t1.d, t3.k FROM "ws"."t1" t1 LEFT JOIN "ws"."t3" t3 ON t3.k = t1.a AND t1.b NOT IN (SELECT y FROM "ws"."t2" WHERE t2.x = t3.k) ORDER BY t1.d

# In JOIN ... ON with the joined table's column.
query
SELECT t1.d, t2.z FROM "ws"."t1" t1 JOIN "ws"."t2" t2 ON t2.x = t1.a AND t2.z IN (SELECT s FROM "ws"."t3") ORDER BY t1.d, t2.z

# Self-correlated: a values that appear with a larger b elsewhere.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE t1.a IN (SELECT x.a FROM "ws"."t1" x WHERE x.b > t1.b) ORDER BY t1.d

# IN with a scalar subquery inside the subquery.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE t1.a IN (SELECT x FROM "ws"."t2" WHERE t2.y > (SELECT min(b) FROM "ws"."t1" x WHERE x.a = t1.a)) ORDER BY t1.d

# A scalar subquery with more than one row inside IN is still an error.
statement error
SELECT t1.d FROM "ws"."t1" t1 WHERE t1.a IN (SELECT x FROM "ws"."t2" WHERE t2.y = (SELECT y FROM "ws"."t2" x WHERE x.x = t1.a))
