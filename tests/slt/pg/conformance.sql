# Conformance with PostgreSQL where DataFusion answers otherwise: integer overflow (in
# arithmetic, unary minus, aggregates and windows, at the type PostgreSQL computes in),
# float division by zero and overflow, logarithms of zero and negatives, text too large
# for a float type, INSERT of fewer values than columns, IS NOT DISTINCT FROM with AND,
# far timestamps.

statement ok
CREATE TABLE "ws"."n" (i2 INT2, i4 INT4, i8 INT8, f4 REAL, f8 FLOAT8, d INT4 DEFAULT 7) USING engine

statement ok
INSERT INTO "ws"."n" (i2, i4, i8, f4, f8) VALUES (32767, 2147483647, 9223372036854775807, 1.5, 1e308), (-32768, -2147483648, -9223372036854775808, -1.5, -1e308), (1, 1, 1, 0, 0)

# Integer arithmetic is done in the operand's type; a literal that fits is an int4.
statement error
SELECT i4 + 1 FROM "ws"."n"

statement error
SELECT i4 * 2 FROM "ws"."n"

statement error
SELECT i4 - 1 FROM "ws"."n" WHERE i4 < 0

statement error
SELECT i8 + 1 FROM "ws"."n"

statement error
SELECT i2 + i2 FROM "ws"."n"

statement error
SELECT 2147483647 + 1

statement error
SELECT 9223372036854775807 + 1

query
SELECT i4 + 1 FROM "ws"."n" WHERE i4 = 1

query
SELECT i4::int8 + 1 FROM "ws"."n" WHERE i4 > 1

query
SELECT i4 + 2147483648 FROM "ws"."n" WHERE i4 = 1

# Unary minus of the smallest value.
statement error
SELECT -i8 FROM "ws"."n"

statement error
SELECT -i4 FROM "ws"."n"

query
SELECT -i2 FROM "ws"."n" WHERE i2 = 1

# Aggregates over int8 are exact (the cast keeps the result int8 in PostgreSQL too).
query
SELECT sum(i8)::int8 FROM "ws"."n"

query
SELECT sum(i4) FROM "ws"."n"

# Floats: division by zero, overflow.
statement error
SELECT f8 / 0 FROM "ws"."n"

statement error
SELECT 1.5::float8 / 0::float8

statement error
SELECT f8 * 10 FROM "ws"."n"

statement error
SELECT f8 + f8 FROM "ws"."n"

statement error
SELECT '1e1000'::float8

statement error
SELECT '1e39'::real

query
SELECT f4 / 2 + 0.5::float8 FROM "ws"."n" ORDER BY 1

statement error
INSERT INTO "ws"."n" (f4) VALUES (3.5e38)

statement error
INSERT INTO "ws"."n" (f8) VALUES ('1e1000')

# Logarithms.
statement error
SELECT ln(0)

statement error
SELECT ln(-1)

statement error
SELECT log(0)

statement error
SELECT log10(-2)

query
SELECT ln(1)

# INSERT without a column list fills what it leaves out with defaults.
statement ok
INSERT INTO "ws"."n" VALUES (8)

statement ok
INSERT INTO "ws"."n" VALUES (9, 10)

statement ok
INSERT INTO "ws"."n" SELECT 11

query
SELECT i2, i4, d FROM "ws"."n" WHERE i2 >= 8 ORDER BY i2

# IS NOT DISTINCT FROM binds tighter than AND.
query
SELECT count(*) FROM "ws"."n" WHERE i4 IS NOT DISTINCT FROM 1 AND i8 IS NOT DISTINCT FROM 1

query
SELECT count(*) FROM "ws"."n" WHERE i4 IS DISTINCT FROM NULL AND i2 IS DISTINCT FROM 1

# Timestamps far from now compare and compute.
statement ok
CREATE TABLE "ws"."ts" (t TIMESTAMPTZ) USING engine

statement ok
INSERT INTO "ws"."ts" VALUES ('9999-12-31 00:00:00+00'), ('0001-01-01 00:00:00+00')

query
SELECT count(*) FROM "ws"."ts" WHERE t > now()

query
SELECT count(*) FROM "ws"."ts" WHERE t < '1000-01-01'::timestamptz

query
SELECT count(*) FROM "ws"."ts" WHERE t > '9999-12-30'::timestamptz
