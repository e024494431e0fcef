# The tables (shared by every subquery_*.sql): t1.d is a unique row id; t1.a, t1.b, t1.c,
# t1.e have NULLs and duplicates; t2 has a duplicate row, NULL keys and NULL values; t3 has
# int8, float8 and text columns; t0 is empty.
statement ok
CREATE TABLE "ws"."t1" (a INT4, b INT4, c INT4, d INT4, e INT4) USING engine

statement ok
INSERT INTO "ws"."t1" VALUES (1, 10, 100, 1, 5), (2, 20, 200, 2, NULL), (2, 25, NULL, 3, 7), (3, NULL, 300, 4, 3), (4, 40, 400, 5, 4), (5, 50, 500, 6, 9), (NULL, 60, 600, 7, 1), (NULL, NULL, NULL, 8, NULL), (6, 10, 100, 9, 6), (8, 80, 800, 10, 2)

statement ok
CREATE TABLE "ws"."t2" (x INT4, y INT4, z TEXT) USING engine

statement ok
INSERT INTO "ws"."t2" VALUES (1, 10, 'one'), (1, 11, 'uno'), (2, 20, 'two'), (2, 20, 'two'), (3, NULL, 'three'), (NULL, 30, 'nx'), (4, 40, NULL), (8, 80, 'eight'), (NULL, NULL, NULL), (9, 5, 'a')

statement ok
CREATE TABLE "ws"."t3" (k INT8, f FLOAT8, s TEXT) USING engine

statement ok
INSERT INTO "ws"."t3" VALUES (1, 1.5, 'one'), (2, -2.0, 'b'), (3, NULL, 'three'), (4000000000, 2.5, 'a'), (NULL, 0.25, 'eight'), (6, 4.0, NULL)

statement ok
CREATE TABLE "ws"."t0" (a INT4) USING engine
