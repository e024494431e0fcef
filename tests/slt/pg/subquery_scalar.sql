# Scalar subqueries, correlated and not, in every place an expression can stand, with
# PostgreSQL's NULL semantics: no row is NULL, count(*) of no rows is 0, and more than one
# row is an error.

%include tables.sql

# Uncorrelated: one value for every outer row.
query
SELECT t1.d, (SELECT max(x) FROM "ws"."t2") FROM "ws"."t1" t1 ORDER BY t1.d

# Uncorrelated, alone: aggregates over the empty table, and a non-aggregate with no row.
query
SELECT (SELECT count(*) FROM "ws"."t0"), (SELECT max(a) FROM "ws"."t0"), (SELECT a FROM "ws"."t0")

# Uncorrelated in WHERE.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE t1.b > (SELECT min(y) FROM "ws"."t2" WHERE x = 2) ORDER BY t1.d

# Uncorrelated and empty in WHERE: a comparison with NULL keeps no row.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE t1.a > (SELECT a FROM "ws"."t0") ORDER BY t1.d

# Two unaliased scalar subqueries in one SELECT list (both are named count).
query
SELECT (SELECT count(*) FROM "ws"."t1"), (SELECT count(*) FROM "ws"."t2")

# Two unaliased correlated scalar subqueries with the same output name.
query
SELECT t1.d, (SELECT count(*) FROM "ws"."t2" WHERE t2.x = t1.a), (SELECT count(*) FROM "ws"."t2" WHERE t2.y = t1.b) FROM "ws"."t1" t1 ORDER BY t1.d

# The same subquery twice in one SELECT list.
query
SELECT t1.d, (SELECT max(y) FROM "ws"."t2" WHERE t2.x = t1.a), (SELECT max(y) FROM "ws"."t2" WHERE t2.x = t1.a) FROM "ws"."t1" t1 ORDER BY t1.d

# Correlated count(*): 0, never NULL, for outer rows with no match and with a NULL key.
query
SELECT t1.d, t1.a, (SELECT count(*) FROM "ws"."t2" WHERE t2.x = t1.a) FROM "ws"."t1" t1 ORDER BY t1.d

# Correlated count(column) counts non-NULL values only, and is 0 for no match.
query
SELECT t1.d, (SELECT count(y) FROM "ws"."t2" WHERE t2.x = t1.a) FROM "ws"."t1" t1 ORDER BY t1.d

# The count bug: an expression over count(*) of no rows is computed from 0.
query
SELECT t1.d, (SELECT count(*) + 1 FROM "ws"."t2" WHERE t2.x = t1.a), (SELECT coalesce(count(*), 5) FROM "ws"."t2" WHERE t2.x = t1.a) FROM "ws"."t1" t1 ORDER BY t1.d

# The count bug in WHERE: rows with no match compare 0 = 0.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE (SELECT count(*) FROM "ws"."t2" WHERE t2.x = t1.a) = 0 ORDER BY t1.d

# The count bug against the empty table: every row counts 0.
query
SELECT t1.d, (SELECT count(*) FROM "ws"."t0" WHERE t0.a = t1.a) FROM "ws"."t1" t1 ORDER BY t1.d

# sum, max of no rows are NULL.
query
SELECT t1.d, (SELECT sum(y) FROM "ws"."t2" WHERE t2.x = t1.a), (SELECT max(z) FROM "ws"."t2" WHERE t2.x = t1.a) FROM "ws"."t1" t1 ORDER BY t1.d

# GROUP BY inside the subquery: no match is no group, so no row, so NULL (not 0).
query
SELECT t1.d, (SELECT count(*) FROM "ws"."t2" WHERE t2.x = t1.a GROUP BY t2.x) FROM "ws"."t1" t1 ORDER BY t1.d

# HAVING inside the subquery: a group filtered out gives NULL.
query
SELECT t1.d, (SELECT max(y) FROM "ws"."t2" WHERE t2.x <= t1.a HAVING count(*) > 3) FROM "ws"."t1" t1 ORDER BY t1.d

# Correlation in the subquery's HAVING.
query
SELECT t1.d, (SELECT count(*) FROM "ws"."t2" GROUP BY t2.x HAVING t2.x = t1.a) FROM "ws"."t1" t1 ORDER BY t1.d

# Inequality correlation.
query
SELECT t1.d, (SELECT max(y) FROM "ws"."t2" WHERE t2.x < t1.a), (SELECT min(y) FROM "ws"."t2" WHERE t2.x >= t1.a) FROM "ws"."t1" t1 ORDER BY t1.d

# Not-equal correlation.
query
SELECT t1.d, (SELECT count(*) FROM "ws"."t2" WHERE t2.x <> t1.a) FROM "ws"."t1" t1 ORDER BY t1.d

# Correlation on an expression of outer columns.
query
SELECT t1.d, (SELECT count(*) FROM "ws"."t2" WHERE t2.x = t1.a + 1), (SELECT max(z) FROM "ws"."t2" WHERE t2.y = t1.a * 10) FROM "ws"."t1" t1 ORDER BY t1.d

# Correlation on an expression of both sides.
query
SELECT t1.d, (SELECT count(*) FROM "ws"."t2" WHERE t2.x + t2.y = t1.a + t1.b) FROM "ws"."t1" t1 ORDER BY t1.d

# NULL-safe correlation: IS NOT DISTINCT FROM matches a NULL outer key to NULL inner keys.
query
SELECT t1.d, (SELECT count(*) FROM "ws"."t2" WHERE t2.x IS NOT DISTINCT FROM t1.a) FROM "ws"."t1" t1 ORDER BY t1.d

# Outer references inside a derived table (a UNION ALL) of the subquery.
query
SELECT t1.d, (SELECT count(*) FROM (SELECT x AS v FROM "ws"."t2" WHERE t2.x = t1.a UNION ALL SELECT k FROM "ws"."t3" WHERE t3.k = t1.a) u) FROM "ws"."t1" t1 ORDER BY t1.d

# A correlated subquery over a CTE.
query
WITH big AS (SELECT x, y FROM "ws"."t2" WHERE y >= 20) SELECT t1.d, (SELECT count(*) FROM big WHERE big.x = t1.a) FROM "ws"."t1" t1 ORDER BY t1.d

# Several outer references in one subquery.
query
SELECT t1.d, (SELECT count(*) FROM "ws"."t2" WHERE t2.x >= t1.a AND t2.y <= t1.b) FROM "ws"."t1" t1 ORDER BY t1.d

# Outer references joined by OR.
query
SELECT t1.d, (SELECT count(*) FROM "ws"."t2" WHERE t2.x = t1.a OR t2.y = t1.b) FROM "ws"."t1" t1 ORDER BY t1.d

# An outer column in the subquery's SELECT list.
query
SELECT t1.d, (SELECT t1.b + max(y) FROM "ws"."t2" WHERE t2.x = t1.a), (SELECT max(y) - t1.e FROM "ws"."t2") FROM "ws"."t1" t1 ORDER BY t1.d

# A subquery with no FROM that returns an outer column.
query
SELECT t1.d, (SELECT t1.b * 2) FROM "ws"."t1" t1 ORDER BY t1.d

# A subquery whose only reference to the outer row is in its SELECT list: still one row
# each (LIMIT 1), or NULL over the empty table.
query
SELECT t1.d, (SELECT t1.a FROM "ws"."t2" LIMIT 1), (SELECT t1.a FROM "ws"."t0") FROM "ws"."t1" t1 ORDER BY t1.d

# A non-aggregate subquery that matches zero or one row (t3.k is unique); int4 = int8.
query
SELECT t1.d, (SELECT s FROM "ws"."t3" WHERE t3.k = t1.a) FROM "ws"."t1" t1 ORDER BY t1.d

# float8 and text values from a correlated subquery.
query
SELECT t1.d, (SELECT f FROM "ws"."t3" WHERE t3.k = t1.a), (SELECT max(f) FROM "ws"."t3" WHERE t3.k < t1.a) FROM "ws"."t1" t1 ORDER BY t1.d

# Correlation on text and on float8 columns.
query
SELECT t2.z, (SELECT count(*) FROM "ws"."t3" WHERE t3.s = t2.z), (SELECT min(s) FROM "ws"."t3" WHERE t3.f < t2.x) FROM "ws"."t2" t2 WHERE t2.z IS NOT NULL AND t2.z <> 'two' ORDER BY t2.z

# ORDER BY and LIMIT inside the subquery: the next row by a.
query
SELECT t1.d, (SELECT x.b FROM "ws"."t1" x WHERE x.a > t1.a ORDER BY x.a, x.d LIMIT 1) FROM "ws"."t1" t1 ORDER BY t1.d

# ORDER BY DESC with LIMIT and OFFSET inside the subquery (NULLs sort first in DESC).
query
SELECT t1.d, (SELECT y FROM "ws"."t2" WHERE t2.x <= t1.a ORDER BY y DESC LIMIT 1), (SELECT y FROM "ws"."t2" WHERE t2.x <= t1.a ORDER BY y DESC LIMIT 1 OFFSET 1) FROM "ws"."t1" t1 ORDER BY t1.d

# Correlation in the subquery's ORDER BY: the y nearest to b.
query
SELECT t1.d, (SELECT y FROM "ws"."t2" ORDER BY abs(y - t1.b), y LIMIT 1) FROM "ws"."t1" t1 ORDER BY t1.d

# DISTINCT inside the subquery makes duplicates one row.
query
SELECT t1.d, (SELECT DISTINCT x FROM "ws"."t2" WHERE t2.x = t1.a), (SELECT DISTINCT y FROM "ws"."t2" WHERE t2.x = t1.a AND t2.y = t1.b) FROM "ws"."t1" t1 ORDER BY t1.d

# A scalar subquery of type boolean.
query
SELECT t1.d, (SELECT max(y) > t1.b FROM "ws"."t2" WHERE t2.x = t1.a) FROM "ws"."t1" t1 ORDER BY t1.d

# Correlated in WHERE: rows whose b is the largest y of their a.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE t1.b = (SELECT max(y) FROM "ws"."t2" WHERE t2.x = t1.a) ORDER BY t1.d

# Correlated in WHERE with an inequality, and against the same table.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE t1.b > (SELECT min(x.b) FROM "ws"."t1" x WHERE x.a < t1.a) ORDER BY t1.d

# Correlated in WHERE combined with OR.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE t1.a IS NULL OR t1.b < (SELECT max(y) FROM "ws"."t2" WHERE t2.x = t1.a) ORDER BY t1.d

# IS NULL on a scalar subquery.
query
SELECT t1.d FROM "ws"."t1" t1 WHERE (SELECT max(y) FROM "ws"."t2" WHERE t2.x = t1.a) IS NULL ORDER BY t1.d

# Scalar subqueries in arithmetic and in coalesce.
query
SELECT t1.d, t1.a + (SELECT count(*) FROM "ws"."t2" WHERE t2.x = t1.a), coalesce((SELECT max(y) FROM "ws"."t2" WHERE t2.x = t1.a), -1) FROM "ws"."t1" t1 ORDER BY t1.d

# In CASE: the condition, and each branch.
query
SELECT t1.d, CASE WHEN (SELECT count(*) FROM "ws"."t2" WHERE t2.x = t1.a) > 1 THEN 'many' WHEN (SELECT count(*) FROM "ws"."t2" WHERE t2.x = t1.a) = 1 THEN 'one' ELSE 'none' END FROM "ws"."t1" t1 ORDER BY t1.d

query
SELECT t1.d, CASE WHEN t1.a > 3 THEN (SELECT max(y) FROM "ws"."t2" WHERE t2.x < t1.a) ELSE (SELECT min(y) FROM "ws"."t2" WHERE t2.x >= t1.a) END FROM "ws"."t1" t1 ORDER BY t1.d

# A CASE branch that is not taken is not an error even if its subquery has several rows.
query
SELECT t1.d, CASE WHEN t1.a = 3 THEN (SELECT y FROM "ws"."t2" WHERE t2.x = t1.a) ELSE 0 END FROM "ws"."t1" t1 ORDER BY t1.d

# In ORDER BY, with the row id as tie-breaker.
query
SELECT t1.d, t1.a FROM "ws"."t1" t1 ORDER BY (SELECT count(*) FROM "ws"."t2" WHERE t2.x <= t1.a) DESC, t1.d

# In ORDER BY with NULLs from the subquery (NULLs last in ASC).
query
SELECT t1.d FROM "ws"."t1" t1 ORDER BY (SELECT max(y) FROM "ws"."t2" WHERE t2.x = t1.a), t1.d

# Inside an aggregate's argument.
query
SELECT sum((SELECT max(y) FROM "ws"."t2" WHERE t2.x = t1.a)), max((SELECT count(*) FROM "ws"."t2" WHERE t2.x < t1.a)), count((SELECT max(y) FROM "ws"."t2" WHERE t2.x = t1.a)), count(*) FROM "ws"."t1" t1

# Inside an aggregate's argument, per group.
query
SELECT t1.a, sum((SELECT min(y) FROM "ws"."t2" WHERE t2.y > t1.b)), max((SELECT count(*) FROM "ws"."t2" WHERE t2.y <= t1.b)) FROM "ws"."t1" t1 GROUP BY t1.a ORDER BY t1.a

# As a GROUP BY key.
query
SELECT (SELECT count(*) FROM "ws"."t2" WHERE t2.x = t1.a) AS n, count(*) FROM "ws"."t1" t1 GROUP BY 1 ORDER BY 1

# In HAVING, uncorrelated.
query
SELECT t1.a, count(*) FROM "ws"."t1" t1 GROUP BY t1.a HAVING count(*) >= (SELECT count(*) FROM "ws"."t2" WHERE x = 2) ORDER BY t1.a

# In HAVING, correlated on the grouping column.
query
SELECT t1.a, count(*) FROM "ws"."t1" t1 GROUP BY t1.a HAVING count(*) < (SELECT count(*) FROM "ws"."t2" WHERE t2.x = t1.a) ORDER BY t1.a

# In HAVING, comparing an aggregate with a correlated subquery.
query
SELECT t1.a, max(t1.b) FROM "ws"."t1" t1 GROUP BY t1.a HAVING max(t1.b) >= (SELECT max(y) FROM "ws"."t2" WHERE t2.x = t1.a) ORDER BY t1.a

# In the SELECT list of a grouped query, correlated on the grouping column.
query
SELECT t1.a, count(*), (SELECT count(*) FROM "ws"."t2" WHERE t2.x = t1.a) FROM "ws"."t1" t1 GROUP BY t1.a ORDER BY t1.a

# Nested two levels: the innermost subquery references the outermost query.
query
SELECT t1.d, (SELECT count(*) FROM "ws"."t2" WHERE t2.y > (SELECT min(x.b) FROM "ws"."t1" x WHERE x.a = t1.a)) FROM "ws"."t1" t1 ORDER BY t1.d

# Nested two levels: the innermost subquery references the middle one.
query
SELECT t1.d, (SELECT max((SELECT count(*) FROM "ws"."t1" x WHERE x.a = t2.x)) FROM "ws"."t2" WHERE t2.x <= t1.a) FROM "ws"."t1" t1 ORDER BY t1.d

# Nested two levels: the innermost subquery references both outer levels.
query
SELECT t1.d, (SELECT count(*) FROM "ws"."t2" WHERE (SELECT count(*) FROM "ws"."t3" WHERE t3.k >= t2.x AND t3.k <= t1.a) > 1) FROM "ws"."t1" t1 ORDER BY t1.d

# A scalar subquery in the FROM-less SELECT of a scalar subquery.
query
SELECT t1.d, (SELECT (SELECT max(y) FROM "ws"."t2" WHERE t2.x = t1.a) + 1) FROM "ws"."t1" t1 ORDER BY t1.d

# One subquery referencing two outer tables of a join.
query
SELECT t1.d, t3.k, (SELECT count(*) FROM "ws"."t2" WHERE t2.x <= t1.a AND t2.x >= t3.k) FROM "ws"."t1" t1 JOIN "ws"."t3" t3 ON t3.k <= t1.a ORDER BY t1.d, t3.k

# A subquery referencing the nullable side of a LEFT JOIN.
query
SELECT t1.d, t3.k, (SELECT count(*) FROM "ws"."t2" WHERE t2.x = t3.k) FROM "ws"."t1" t1 LEFT JOIN "ws"."t3" t3 ON t3.k = t1.a ORDER BY t1.d

# In JOIN ... ON, correlated with the left side.
query
SELECT t1.d, t3.k FROM "ws"."t1" t1 JOIN "ws"."t3" t3 ON t3.k = (SELECT max(x) FROM "ws"."t2" WHERE t2.x < t1.a) ORDER BY t1.d

# In LEFT JOIN ... ON, correlated with both sides.
query
SELECT t1.d, t3.k FROM "ws"."t1" t1 LEFT JOIN "ws"."t3" t3 ON t3.k = t1.a AND (SELECT count(*) FROM "ws"."t2" WHERE t2.x = t3.k AND t2.y <= t1.b) > 0 ORDER BY t1.d

# In a derived table's SELECT list, then filtered outside.
query
SELECT s.d, s.n FROM (SELECT t1.d, (SELECT count(*) FROM "ws"."t2" WHERE t2.x = t1.a) AS n FROM "ws"."t1" t1) s WHERE s.n > 0 ORDER BY s.d

# Uncorrelated in LIMIT.
query
SELECT t1.d FROM "ws"."t1" t1 ORDER BY t1.d LIMIT (SELECT count(*) FROM "ws"."t3" WHERE k < 4)

# Exactly one row from a subquery that could return several: no error.
query
SELECT (SELECT x FROM "ws"."t2" WHERE x = 8), (SELECT y FROM "ws"."t2" WHERE x = 3)

# More than one row, uncorrelated.
statement error
SELECT (SELECT x FROM "ws"."t2")

# More than one row, uncorrelated, in WHERE.
statement error
SELECT t1.d FROM "ws"."t1" t1 WHERE t1.a = (SELECT x FROM "ws"."t2" WHERE x < 3)

# More than one row for some outer rows (a = 1 and a = 2 match two rows of t2).
statement error
SELECT t1.d, (SELECT y FROM "ws"."t2" WHERE t2.x = t1.a) FROM "ws"."t1" t1

# More than one row because of a duplicate row in t2 (DISTINCT would make it one).
statement error
SELECT t1.d, (SELECT y FROM "ws"."t2" WHERE t2.x = t1.a AND t2.y = t1.b) FROM "ws"."t1" t1

# More than one row from a correlated subquery in WHERE.
statement error
SELECT t1.d FROM "ws"."t1" t1 WHERE t1.b > (SELECT y FROM "ws"."t2" WHERE t2.x < t1.a)

# More than one row from a GROUP BY subquery (one row per group).
statement error
SELECT t1.d, (SELECT count(*) FROM "ws"."t2" WHERE t2.x <= t1.a GROUP BY t2.x) FROM "ws"."t1" t1

# More than one row in a nested subquery.
statement error
SELECT t1.d, (SELECT count(*) FROM "ws"."t3" WHERE t3.k = (SELECT x FROM "ws"."t2" WHERE t2.x <= t1.a)) FROM "ws"."t1" t1
