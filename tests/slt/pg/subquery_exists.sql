# EXISTS and NOT EXISTS subqueries, correlated and not, in every place an expression can
# stand. EXISTS is never NULL: it is true when the subquery has a row, whatever the row
# holds (NULLs, or an aggregate over no rows).

%include tables.sql

# Uncorrelated EXISTS over a non-empty and over the empty table.
query
SELECT EXISTS (SELECT 1 FROM "ws"."t2"), EXISTS (SELECT 1 FROM "ws"."t0"), NOT EXISTS (SELECT 1 FROM "ws"."t0")

# Uncorrelated EXISTS in WHERE: all rows or none.
query
SELECT count(*) FROM "ws"."t1" t1 WHERE EXISTS (SELECT 1 FROM "ws"."t2" WHERE x = 8)

query
SELECT count(*) FROM "ws"."t1" t1 WHERE EXISTS (SELECT 1 FROM "ws"."t0")

query
SELECT count(*) FROM "ws"."t1" t1 WHERE NOT EXISTS (SELECT 1 FROM "ws"."t0")

# Correlated EXISTS in WHERE on equality; a NULL outer key matches nothing.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE EXISTS (SELECT 1 FROM "ws"."t2" WHERE t2.x = t1.a) ORDER BY t1.d

# Correlated NOT EXISTS: rows with a NULL key are kept.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE NOT EXISTS (SELECT 1 FROM "ws"."t2" WHERE t2.x = t1.a) ORDER BY t1.d

# EXISTS and NOT EXISTS in the SELECT list are booleans, never NULL.
query
SELECT t1.d, EXISTS (SELECT 1 FROM "ws"."t2" WHERE t2.x = t1.a), NOT EXISTS (SELECT 1 FROM "ws"."t2" WHERE t2.y = t1.b) FROM "ws"."t1" t1 ORDER BY t1.d

# Two unaliased EXISTS in one SELECT list (both named exists).
query
SELECT EXISTS (SELECT 1 FROM "ws"."t2" WHERE x = 9), EXISTS (SELECT 1 FROM "ws"."t2" WHERE x = 7)

# Correlated EXISTS against the empty table.
query
SELECT t1.d, EXISTS (SELECT 1 FROM "ws"."t0" WHERE t0.a = t1.a), NOT EXISTS (SELECT 1 FROM "ws"."t0" WHERE t0.a = t1.a) FROM "ws"."t1" t1 ORDER BY t1.d

# A row of NULLs is a row: EXISTS of SELECT NULL is true.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE EXISTS (SELECT NULL FROM "ws"."t2" WHERE t2.x = t1.a AND t2.y IS NULL) ORDER BY t1.d

# An aggregate without GROUP BY always has a row: EXISTS is true even with no match.
query
SELECT t1.d, EXISTS (SELECT count(*) FROM "ws"."t2" WHERE t2.x = t1.a), EXISTS (SELECT max(y) FROM "ws"."t2" WHERE t2.x = t1.a) FROM "ws"."t1" t1 ORDER BY t1.d

# ... unless HAVING filters the single group out.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE EXISTS (SELECT count(*) FROM "ws"."t2" WHERE t2.x = t1.a HAVING count(*) > 1) ORDER BY t1.d

# With GROUP BY, no match is no group and no row.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE EXISTS (SELECT x FROM "ws"."t2" WHERE t2.x = t1.a GROUP BY x) ORDER BY t1.d

# Correlation in the subquery's HAVING.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE EXISTS (SELECT x FROM "ws"."t2" GROUP BY x HAVING count(*) > 1 AND x = t1.a) ORDER BY t1.d

# LIMIT 0 makes EXISTS false; OFFSET 1 asks for at least two matches.
query
SELECT t1.d, EXISTS (SELECT 1 FROM "ws"."t2" WHERE t2.x = t1.a LIMIT 0), EXISTS (SELECT 1 FROM "ws"."t2" WHERE t2.x = t1.a OFFSET 1) FROM "ws"."t1" t1 ORDER BY t1.d

# DISTINCT and ORDER BY with LIMIT inside EXISTS.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE EXISTS (SELECT DISTINCT y FROM "ws"."t2" WHERE t2.x < t1.a ORDER BY y LIMIT 1) ORDER BY t1.d

# Inequality correlation.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE EXISTS (SELECT 1 FROM "ws"."t2" WHERE t2.x > t1.a AND t2.y < t1.b) ORDER BY t1.d

# Inequality correlation, NOT EXISTS: no t2 row has a larger x.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE NOT EXISTS (SELECT 1 FROM "ws"."t2" WHERE t2.x > t1.a) ORDER BY t1.d

# Not-equal correlation.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE NOT EXISTS (SELECT 1 FROM "ws"."t2" WHERE t2.x <> t1.a AND t2.x < 3) ORDER BY t1.d

# Correlation on an expression of outer columns.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE EXISTS (SELECT 1 FROM "ws"."t2" WHERE t2.x = t1.a + 1) ORDER BY t1.d

query
SELECT t1.d FROM "ws"."t1" t1 WHERE EXISTS (SELECT 1 FROM "ws"."t2" WHERE t2.y = t1.b / 10 + t1.a * 9) ORDER BY t1.d

# Several outer references, ANDed.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE EXISTS (SELECT 1 FROM "ws"."t2" WHERE t2.x = t1.a AND t2.y = t1.b) ORDER BY t1.d

# Several outer references, ORed.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE EXISTS (SELECT 1 FROM "ws"."t2" WHERE t2.x = t1.a OR t2.y = t1.b) ORDER BY t1.d

# A range from two outer columns.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE EXISTS (SELECT 1 FROM "ws"."t2" WHERE t2.y BETWEEN t1.b - 10 AND t1.c / 10) ORDER BY t1.d

# A correlation that is a condition on the outer row alone.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE EXISTS (SELECT 1 FROM "ws"."t2" WHERE t1.e > 5) ORDER BY t1.d

# A FROM-less subquery with a correlated WHERE.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE EXISTS (SELECT 1 WHERE t1.a > 4) ORDER BY t1.d

# An outer column only in the subquery's SELECT list: no effect on EXISTS.
query
SELECT t1.d, EXISTS (SELECT t1.a FROM "ws"."t2"), EXISTS (SELECT t1.a) FROM "ws"."t1" t1 ORDER BY t1.d

# NULL-safe correlation.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE EXISTS (SELECT 1 FROM "ws"."t2" WHERE t2.x IS NOT DISTINCT FROM t1.a AND t2.y IS NOT DISTINCT FROM t1.b) ORDER BY t1.d

# Inner rows with NULLs: a NULL inner key matches no outer row.
query
SELECT t2.z FROM "ws"."t2" t2 WHERE NOT EXISTS (SELECT 1 FROM "ws"."t1" t1 WHERE t1.a = t2.x) AND t2.z IS NOT NULL ORDER BY t2.z

# Text correlation.
query
SELECT t2.x, t2.y, t2.z FROM "ws"."t2" t2 WHERE EXISTS (SELECT 1 FROM "ws"."t3" WHERE t3.s = t2.z) ORDER BY t2.x, t2.y

query rowsort
SELECT t2.x, t2.y, t2.z FROM "ws"."t2" t2 WHERE NOT EXISTS (SELECT 1 FROM "ws"."t3" WHERE t3.s = t2.z)

# float8 correlation.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE EXISTS (SELECT 1 FROM "ws"."t3" WHERE t3.f > t1.a) ORDER BY t1.d

# int8 against int4.
query
SELECT t3.k FROM "ws"."t3" t3 WHERE NOT EXISTS (SELECT 1 FROM "ws"."t1" t1 WHERE t1.a = t3.k) ORDER BY t3.k

# Outer references inside a UNION ALL in the subquery.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE EXISTS (SELECT x FROM "ws"."t2" WHERE t2.x = t1.a AND t2.y > 30 UNION ALL SELECT k FROM "ws"."t3" WHERE t3.k = t1.a AND t3.f > 3) ORDER BY t1.d

# EXISTS under OR.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE t1.a IS NULL OR EXISTS (SELECT 1 FROM "ws"."t2" WHERE t2.x = t1.a AND t2.y > 15) ORDER BY t1.d

# Two EXISTS under OR.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE EXISTS (SELECT 1 FROM "ws"."t2" WHERE t2.x = t1.a) OR EXISTS (SELECT 1 FROM "ws"."t3" WHERE t3.k = t1.a) ORDER BY t1.d

# EXISTS and NOT EXISTS under AND.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE EXISTS (SELECT 1 FROM "ws"."t2" WHERE t2.x = t1.a) AND NOT EXISTS (SELECT 1 FROM "ws"."t3" WHERE t3.k = t1.a) ORDER BY t1.d

# NOT over an expression containing EXISTS.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE NOT (EXISTS (SELECT 1 FROM "ws"."t2" WHERE t2.x = t1.a) AND t1.b > 15) ORDER BY t1.d

# NOT over an OR of EXISTS: with a NULL b, NOT (false OR NULL) drops the row.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE NOT (EXISTS (SELECT 1 FROM "ws"."t3" WHERE t3.k = t1.a) OR t1.b > 45) ORDER BY t1.d

# NOT NOT EXISTS.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE NOT (NOT EXISTS (SELECT 1 FROM "ws"."t2" WHERE t2.y = t1.b)) ORDER BY t1.d

# EXISTS compared with a boolean.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE EXISTS (SELECT 1 FROM "ws"."t2" WHERE t2.x = t1.a) = (t1.b > 20) ORDER BY t1.d

# In CASE: the condition and a branch.
query
SELECT t1.d, CASE WHEN EXISTS (SELECT 1 FROM "ws"."t2" WHERE t2.x = t1.a) THEN 'yes' WHEN t1.a IS NULL THEN 'null' ELSE 'no' END, CASE WHEN t1.b > 30 THEN EXISTS (SELECT 1 FROM "ws"."t3" WHERE t3.k = t1.a) END FROM "ws"."t1" t1 ORDER BY t1.d

# In ORDER BY.
query
SELECT t1.d FROM "ws"."t1" t1 ORDER BY EXISTS (SELECT 1 FROM "ws"."t2" WHERE t2.x = t1.a), t1.d DESC

# Inside aggregates' arguments.
query
SELECT sum(CASE WHEN EXISTS (SELECT 1 FROM "ws"."t2" WHERE t2.x = t1.a) THEN 1 ELSE 0 END), count(CASE WHEN NOT EXISTS (SELECT 1 FROM "ws"."t2" WHERE t2.x = t1.a) THEN 1 END), bool_or(EXISTS (SELECT 1 FROM "ws"."t0" WHERE t0.a = t1.a)) FROM "ws"."t1" t1

# Inside an aggregate's argument, per group.
query
SELECT t1.a, count(*) FILTER (WHERE EXISTS (SELECT 1 FROM "ws"."t2" WHERE t2.y = t1.b)) FROM "ws"."t1" t1 GROUP BY t1.a ORDER BY t1.a

# In HAVING, correlated on the grouping column.
query
SELECT t1.a, count(*) FROM "ws"."t1" t1 GROUP BY t1.a HAVING EXISTS (SELECT 1 FROM "ws"."t2" WHERE t2.x = t1.a) ORDER BY t1.a

query
SELECT t1.a, count(*) FROM "ws"."t1" t1 GROUP BY t1.a HAVING NOT EXISTS (SELECT 1 FROM "ws"."t2" WHERE t2.x = t1.a) ORDER BY t1.a

# Nested two levels: the innermost subquery references the outermost query.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE EXISTS (SELECT 1 FROM "ws"."t2" WHERE t2.x = t1.a AND NOT EXISTS (SELECT 1 FROM "ws"."t3" WHERE t3.k = t2.x AND t3.f < t1.e)) ORDER BY t1.d

# Nested two levels: the innermost subquery references only the outermost query.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE EXISTS (SELECT 1 FROM "ws"."t2" WHERE t2.y > 50 AND EXISTS (SELECT 1 FROM "ws"."t3" WHERE t3.k = t1.a)) ORDER BY t1.d

# Nested NOT EXISTS twice (relational division): a values of t1 for which every t3.k
# below 3 has a t2 row with x = k and y <= b.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE NOT EXISTS (SELECT 1 FROM "ws"."t3" WHERE t3.k < 3 AND NOT EXISTS (SELECT 1 FROM "ws"."t2" WHERE t2.x = t3.k AND t2.y <= t1.b)) ORDER BY t1.d

# EXISTS of a subquery that contains EXISTS.
query
SELECT t1.d, EXISTS (SELECT 1 WHERE EXISTS (SELECT 1 FROM "ws"."t2" WHERE t2.x = t1.a)) FROM "ws"."t1" t1 ORDER BY t1.d

# One subquery referencing two outer tables of a join.
query
SELECT t1.d, t3.k FROM "ws"."t1" t1 JOIN "ws"."t3" t3 ON t3.k < t1.a WHERE EXISTS (SELECT 1 FROM "ws"."t2" WHERE t2.x = t1.a AND t2.x = t3.k + 1) ORDER BY t1.d, t3.k

query
SELECT t1.d, t2.z FROM "ws"."t1" t1 JOIN "ws"."t2" t2 ON t2.x = t1.a WHERE NOT EXISTS (SELECT 1 FROM "ws"."t3" WHERE t3.s = t2.z OR t3.k = t1.e) ORDER BY t1.d, t2.z

# In JOIN ... ON.
query
SELECT t1.d, t3.k FROM "ws"."t1" t1 JOIN "ws"."t3" t3 ON t3.k = t1.a AND EXISTS (SELECT 1 FROM "ws"."t2" WHERE t2.x = t3.k) ORDER BY t1.d

# In LEFT JOIN ... ON, correlated with both sides.
query
SELECT t1.d, t3.k FROM "ws"."t1" t1 LEFT JOIN "ws"."t3" t3 ON t3.k = t1.a AND NOT EXISTS (SELECT 1 FROM "ws"."t2" WHERE t2.x = t3.k AND t2.y > t1.b) ORDER BY t1.d

# A subquery referencing the nullable side of a LEFT JOIN.
query
SELECT t1.d, t3.k FROM "ws"."t1" t1 LEFT JOIN "ws"."t3" t3 ON t3.k = t1.a WHERE NOT EXISTS (SELECT 1 FROM "ws"."t2" WHERE t2.x = t3.k) ORDER BY t1.d

# A correlated EXISTS in a derived table.
query
SELECT s.d FROM (SELECT t1.d, t1.a FROM "ws"."t1" t1 WHERE EXISTS (SELECT 1 FROM "ws"."t2" WHERE t2.x = t1.a)) s WHERE s.a > 1 ORDER BY s.d

# EXISTS with a scalar subquery inside.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE EXISTS (SELECT 1 FROM "ws"."t2" WHERE t2.y = (SELECT max(y) FROM "ws"."t2" x WHERE x.x = t1.a)) ORDER BY t1.d

# Counting with EXISTS and NOT EXISTS: together they cover every row.
query
SELECT (SELECT count(*) FROM "ws"."t1" t1 WHERE EXISTS (SELECT 1 FROM "ws"."t2" WHERE t2.x = t1.a)), (SELECT count(*) FROM "ws"."t1" t1 WHERE NOT EXISTS (SELECT 1 FROM "ws"."t2" WHERE t2.x = t1.a))

# Self-correlation: rows of t1 with a duplicate a.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE EXISTS (SELECT 1 FROM "ws"."t1" x WHERE x.a = t1.a AND x.d <> t1.d) ORDER BY t1.d

# A scalar subquery with more than one row inside EXISTS is still an error.
statement error
SELECT t1.d FROM "ws"."t1" t1 WHERE EXISTS (SELECT 1 FROM "ws"."t3" WHERE t3.k = (SELECT x FROM "ws"."t2" WHERE t2.x = t1.a))
