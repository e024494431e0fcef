//! Bounded memory (in the `rss` binary, so no other test shares the process): a table
//! several times the memtable is written and read — a full scan, an aggregate and a
//! sort that must spill — while anonymous resident memory (`RssAnon`; pages of mapped
//! segment files don't count) stays far below the table's size.

use serde_json::json;
use tarn::arrow::array::RecordBatch;
use tarn::{Options, SyncMode, Tarn};
use tarn_tests::{fixture, id_body_x_batch, rss_anon};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const ROWS: i64 = 2_000_000;
const QUERY_MEMORY: usize = 256 << 20;
const BATCH: i64 = 50_000;
/// The table's least size on disk (its rows hold ~312 MB; how much more the files take
/// depends on how far compaction got).
const TABLE_FLOOR: u64 = 300 << 20;

fn batch(from: i64, to: i64) -> Result<RecordBatch, tarn::arrow::error::ArrowError> {
    // ~150 bytes of text per row, in a shuffled order so a sort has work to do.
    id_body_x_batch(
        from..to,
        |i| {
            let k = i.wrapping_mul(2_654_435_761) % 1_000_003;
            format!(
                "{k:07} {}",
                "the quick brown fox jumps over the lazy dog ".repeat(3)
            )
        },
        1.0,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rss_anon_stays_bounded_for_a_table_many_times_the_memtable() -> TestResult {
    let _serial = tarn_tests::RSS_SERIAL.lock().await;
    let Some(base) = rss_anon() else {
        return Ok(()); // not Linux: nothing to measure
    };
    let dir = tempfile::tempdir()?;
    let tarn = Tarn::open_with(
        dir.path(),
        Options::new()
            .sync(SyncMode::Process)
            .memtable_bytes(8 << 20)
            .query_memory(QUERY_MEMORY),
    )
    .await?;
    let s = fixture(&tarn).await?;
    s.query(
        "ws",
        r#"CREATE TABLE "ws"."big" (id INT8 PRIMARY KEY, body TEXT, x FLOAT8) USING engine"#,
        &[],
    )
    .await?;
    let mut peak = 0u64;
    let sample = |peak: &mut u64| {
        if let Some(r) = rss_anon() {
            *peak = (*peak).max(r.saturating_sub(base));
        }
    };
    let mut from = 0;
    let mut first_half = 0;
    while from < ROWS {
        s.insert_arrow("ws", "big", &[batch(from, from + BATCH)?])
            .await?;
        from += BATCH;
        sample(&mut peak);
        if from == ROWS / 2 {
            first_half = peak;
        }
    }
    let details = s.table("ws", "big").await?;
    assert_eq!(details.row_count, ROWS as u64);
    let table_bytes = (details.size_mb * 1024.0 * 1024.0) as u64;
    assert!(table_bytes > TABLE_FLOOR, "table is {table_bytes} bytes");
    let after_write = peak;

    // A full scan and aggregate streams through the mapped files.
    let r = s
        .query(
            "ws",
            r#"SELECT count(*), sum(x), max(length(body)) FROM "ws"."big""#,
            &[],
        )
        .await?;
    assert_eq!(r.rows.unwrap_or_default()[0][0], json!(ROWS));
    sample(&mut peak);
    // A sort of every row needs more than the 256 MiB query memory: it spills to disk.
    let r = s
        .query(
            "ws",
            r#"SELECT count(*) FROM (SELECT body, row_number() OVER (ORDER BY body) AS rn FROM "ws"."big") s WHERE rn % 1000 = 0"#,
            &[],
        )
        .await?;
    assert_eq!(r.rows.unwrap_or_default()[0][0], json!(ROWS / 1000));
    sample(&mut peak);
    // Key lookups read only what they need.
    let r = s
        .query(
            "ws",
            r#"SELECT x FROM "ws"."big" WHERE id = $1"#,
            &[json!(1_234_567)],
        )
        .await?;
    assert_eq!(r.rows.unwrap_or_default(), vec![vec![json!(567.0)]]);
    sample(&mut peak);
    eprintln!(
        "table {} MiB; RssAnon growth: {} MiB after half the rows, {} MiB after all, {} MiB peak with queries",
        table_bytes >> 20,
        first_half >> 20,
        after_write >> 20,
        peak >> 20
    );
    // Writing: memtable, commit and merge buffers and allocator slack, not the table. The
    // budget is a constant, not a share of `table_bytes` (which depends on how far
    // compaction got: 366 to 534 MiB on the same rows). With one malloc arena
    // (MALLOC_ARENA_MAX=1) the growth is ~110 MiB after half the rows and ~115 after all;
    // glibc's other arenas (up to 8 per core) each keep their own high-water mark.
    const WRITE_BUDGET: u64 = 256 << 20;
    assert!(
        after_write < WRITE_BUDGET,
        "RssAnon grew by {after_write} bytes writing a table of {table_bytes} bytes"
    );
    // The second half of the rows costs far less memory than its share of the table (what does
    // grow is allocator slack: glibc keeps a freed high-water mark per thread arena).
    assert!(
        after_write < first_half + TABLE_FLOOR / 3,
        "RssAnon grew from {first_half} to {after_write} bytes over the second half"
    );
    // Reading: the query memory budget on top, not the table.
    assert!(
        peak < after_write + QUERY_MEMORY as u64 + (64 << 20),
        "RssAnon peaked at {peak} bytes (query memory {QUERY_MEMORY})"
    );
    Ok(())
}

/// Large values made by plan nodes that run at once share `query_memory`: each branch
/// of a UNION ALL (and each partition and stage of a `string_agg`) was within its own
/// limits, and together they took 6 GB; wide rows DataFusion's operators repeat and
/// gather into batches of 8,192 rows (a cross join, a filter) are held too, and so are
/// the small pieces of a window's partitions. The statements answer or fail with a 400;
/// either way the process grows by about the budget, not by what was asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_values_of_nodes_running_at_once_share_query_memory() -> TestResult {
    let _serial = tarn_tests::RSS_SERIAL.lock().await;
    if rss_anon().is_none() {
        return Ok(()); // not Linux: nothing to measure
    }
    let tarn = Tarn::in_memory_with(Options::new().query_memory(QUERY_MEMORY)).await?;
    let s = fixture(&tarn).await?;
    // Sixteen branches of 60 rows of 1 MB each (under the 64 MiB batch limit alone).
    let branch = "SELECT s || 'x' AS v FROM (SELECT repeat('x', 1000000) || g s \
                  FROM generate_series(1, 60) g) t";
    let union = vec![branch; 16].join(" UNION ALL ");
    // 30 rows of 1 MB, each different.
    let wide = "SELECT repeat('x', 1000000) || g s FROM generate_series(1, 30) g";
    let statements = [
        format!("SELECT count(*) FROM ({union}) u WHERE length(v) > 0"),
        format!("SELECT v FROM ({union}) u"),
        // 40 groups of 100 values of 300 KB: 1.2 GB gathered in all.
        "SELECT y, length(string_agg(s, ',')) FROM (SELECT repeat('x', 300000) s \
         FROM generate_series(1, 100)) a, generate_series(1, 40) b(y) GROUP BY y"
            .to_string(),
        // Constants repeated over the rows of a batch (three such columns of a 60 MB
        // constant over 30 rows took 5.4 GB with a 2 GiB pool).
        "SELECT g, repeat('x', 15000000) a, repeat('y', 15000000) b FROM \
         generate_series(1, 30) g"
            .to_string(),
        // The same rows repeated by a cross join and gathered into batches of 8,192
        // rows by a filter and a sort, for an aggregate DataFusion runs per group.
        "SELECT y, cardinality(array_agg(s ORDER BY s)) FROM (SELECT repeat('x', 300000) \
         || g s FROM generate_series(1, 100) g) a, generate_series(1, 40) b(y) GROUP BY y \
         ORDER BY y LIMIT 1"
            .to_string(),
        // Wide rows repeated by a cross join feed a hash join through a repartition:
        // batches DataFusion makes and passes between its tasks outside the pool
        // (6 GB with a 2 GiB pool), counted by the allocator instead.
        format!(
            "SELECT count(*) FROM ({wide}) a JOIN (SELECT a.s k FROM ({wide}) a, \
             generate_series(1, 30) b) c ON a.s = c.k"
        ),
        format!("SELECT count(DISTINCT s || y) FROM ({wide}) a, generate_series(1, 30) b(y)"),
        // A recursive query's working table of wide rows.
        "WITH RECURSIVE r(n, s) AS (SELECT 1, repeat('x', 1000000) || g FROM \
         generate_series(1, 30) g UNION SELECT n + 1, s || 'x' FROM r WHERE n < 50) \
         SELECT count(*) FROM r"
            .to_string(),
        // A window with a partition per row: DataFusion keeps each partition's value
        // as an array of its own until the end, millions of small allocations that no
        // pool reservation and no header-counted block shows (10M rows took 3.95 GB).
        "SELECT x, sum(x) OVER (PARTITION BY x) FROM generate_series(1, 3000000) g(x)".to_string(),
        // Thirty 15 MB constants in a CASE: folded while planning, the planner's copies
        // of them took 3× their size before a row was read.
        format!(
            "SELECT length(CASE {} END) FROM generate_series(1, 2) g",
            (0..30)
                .map(|i| format!(
                    "WHEN g = {i} THEN repeat('{}', 15000000)",
                    char::from(b'a' + i as u8)
                ))
                .collect::<Vec<_>>()
                .join(" ")
        ),
    ];
    let mut statements: Vec<(String, Vec<serde_json::Value>)> =
        statements.into_iter().map(|sql| (sql, vec![])).collect();
    // A 20 MB text parameter named ten times: bound as a literal, each reference was
    // copied by the planner about ten times over (a 60 MB one named ten times took a
    // host past 6 GB).
    let big = json!("p".repeat(20_000_000));
    statements.push((
        format!(
            "SELECT {} FROM generate_series(1, 3) g",
            ["length($1 || g)"; 10].join(", ")
        ),
        vec![big.clone()],
    ));
    statements.push((
        "SELECT count(*) FROM generate_series(1, 3) g WHERE $1 = repeat('p', g) OR $1 LIKE '%q%' \
         OR strpos($1, 'q') > 7 OR position('q' in $1) > 0"
            .to_string(),
        vec![big.clone()],
    ));
    statements.push((
        "SELECT $1 AS a, $1 AS b, length($2)".to_string(),
        vec![big.clone(), big.clone()],
    ));
    // Text joined to a number (cast to text by `||`) is sized as text joined to text:
    // 20,000 rows of 200 KB took a host past 6 GB unsized.
    statements.push((
        "SELECT max(length(w)) FROM (SELECT repeat('x', 200000) || g AS w \
         FROM generate_series(1, 20000) g) s"
            .to_string(),
        vec![],
    ));
    // A call of it alone is a constant too, repeated over every row of a batch (8,192
    // rows of 20 MB: 160 GB, which the projection made outside any reservation).
    statements.push((
        "SELECT btrim($1), upper($1) || 'x' FROM generate_series(1, 8192)".to_string(),
        vec![big.clone()],
    ));
    // The same through query_batch (`-- batch` marks it), whose large texts bind by
    // number as query's do (a 60 MB one bound as a literal took 870 MB and 4.8 s).
    statements.push((
        format!(
            "-- batch\nSELECT {} FROM generate_series(1, 3) g",
            ["length($1 || g)"; 10].join(", ")
        ),
        vec![big],
    ));
    // Rows of millions of values as JSON: 32 bytes a value, 8 times a float4's Arrow
    // form and 256 times a boolean's. Charged every 256 rows, 200 rows of a million
    // float4s had grown a host to 6.9 GB before the first charge found them past a
    // 2 GiB limit.
    statements.push((
        "SELECT g, (SELECT array_agg(x % 2 = 0) FROM generate_series(1, 4000000) x) v \
         FROM generate_series(1, 20) g"
            .to_string(),
        vec![],
    ));
    // A large array parameter named twenty times is made one list once: each reference
    // had written, copied and parsed its own JSON text (thirty of a 60 MB one: 8.8 GB).
    statements.push((
        format!(
            "SELECT {} FROM generate_series(1, 2) g",
            ["cardinality($1::float4[]) + g"; 20].join(", ")
        ),
        vec![json!(vec![0.5; 3_000_000])],
    ));
    for (sql, params) in statements {
        let head = &sql[..sql.len().min(60)];
        let base = rss_anon().unwrap_or(0);
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let sampler = {
            let done = done.clone();
            std::thread::spawn(move || {
                let mut peak = 0u64;
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    peak = peak.max(rss_anon().unwrap_or(0).saturating_sub(base));
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                peak
            })
        };
        // Whether rows came back.
        let r = if sql.starts_with("-- batch") {
            s.query_batch("ws", &sql, &[params.clone(), params.clone()])
                .await
                .map(|b| b.statements == 2 && b.row_count == 6)
        } else {
            s.query("ws", &sql, &params)
                .await
                .map(|r| r.rows.as_ref().is_some_and(|rows| !rows.is_empty()))
        };
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        let peak = sampler.join().map_err(|_| "sampler panicked")?;
        match &r {
            Ok(answered) => assert!(answered, "{head}…: no rows"),
            Err(e) => {
                assert_eq!(e.status(), 400, "{e}");
                assert!(e.message().contains("query_memory"), "{}: {e}", head);
            }
        }
        eprintln!(
            "{}…: {} MiB peak growth, {}",
            head,
            peak >> 20,
            match &r {
                Ok(_) => "answered".to_string(),
                Err(e) => e.to_string(),
            }
        );
        assert!(
            peak < 3 * QUERY_MEMORY as u64,
            "{}…: RssAnon grew by {peak} bytes (query memory {QUERY_MEMORY})",
            head
        );
    }
    Ok(())
}

/// A result of many small batches (a recursive CTE's batches of one row each) is held
/// at about the size of its rows: each batch kept had a fixed cost that neither the
/// pool nor the allocator's count saw, and ten million one-row batches held 4 GB for
/// 160 MB of rows (an endless recursion took any host down).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_of_many_small_batches_are_held_at_the_size_of_their_rows() -> TestResult {
    let _serial = tarn_tests::RSS_SERIAL.lock().await;
    if rss_anon().is_none() {
        return Ok(()); // not Linux: nothing to measure
    }
    let tarn = Tarn::in_memory_with(
        Options::new()
            .query_memory(QUERY_MEMORY)
            .query_timeout(std::time::Duration::from_secs(60)),
    )
    .await?;
    let s = fixture(&tarn).await?;
    const N: i64 = 100_000;
    let sql = format!(
        "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r WHERE x < {N}) \
         SELECT x FROM r"
    );
    let base = rss_anon().unwrap_or(0);
    let t = std::time::Instant::now();
    let r = s.query_arrow("ws", &sql, &[]).await?;
    let grown = rss_anon().unwrap_or(0).saturating_sub(base);
    let batches = r.batches.as_deref().unwrap_or_default();
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    assert_eq!(rows, N as usize, "{sql}");
    eprintln!(
        "{}…: {} batches, {} MiB held, {:?}",
        &sql[..50],
        batches.len(),
        grown >> 20,
        t.elapsed()
    );
    // 100,000 rows of int8 are 0.8 MB; one batch per row held ~40 MB.
    assert!(batches.len() < 1000, "{sql}: {} batches", batches.len());
    assert!(grown < 24 << 20, "{sql}: RssAnon grew by {grown} bytes");
    Ok(())
}

/// RssAnon over `base` once it is under `bound`, or after ten seconds: the memory large
/// statements freed is handed back a second after the last one ended (later on a busy
/// machine), so this waits for it rather than for a fixed time.
async fn idle_rss_over(base: u64, bound: u64) -> u64 {
    let mut over = u64::MAX;
    for _ in 0..50 {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        over = rss_anon().unwrap_or(0).saturating_sub(base);
        if over < bound {
            break;
        }
    }
    over
}

/// Rows of 1 MB stream: a table of them is stored in blocks of at most 32 MB (one block
/// of 8,192 such rows could not be read under any limit), and the statement's filters,
/// repartitions and joins gather batches of about 32 MB instead of 8,192 rows — the
/// same for rows a recursive query makes from a wide constant. Before, the table
/// (one 300 MB block) could not be read at all under a 256 MiB pool, and the recursive
/// query held every row it made until the statement's backstop stopped it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wide_rows_stream_through_filters_and_recursion() -> TestResult {
    let _serial = tarn_tests::RSS_SERIAL.lock().await;
    if rss_anon().is_none() {
        return Ok(()); // not Linux: nothing to measure
    }
    let dir = tempfile::tempdir()?;
    let options = || {
        Options::new()
            .sync(SyncMode::Process)
            .query_memory(QUERY_MEMORY)
    };
    let tarn = Tarn::open_with(dir.path(), options()).await?;
    let (s, secret) = tarn_tests::fixture_with_key(&tarn).await?;
    s.query(
        "ws",
        "CREATE TABLE ws.wide AS SELECT g AS id, repeat('x', 1000000) || g AS w \
         FROM generate_series(1, 20) g",
        &[],
    )
    .await?;
    for from in (21..300).step_by(20) {
        s.query(
            "ws",
            &format!(
                "INSERT INTO ws.wide SELECT g, repeat('x', 1000000) || g \
                 FROM generate_series({from}, {}) g",
                from + 19
            ),
            &[],
        )
        .await?;
    }
    // Closed and opened again: the rows are in one segment file now.
    tarn.close().await?;
    let tarn = Tarn::open_with(dir.path(), options()).await?;
    let s = tarn_tests::reconnect(&tarn, &secret).await?;
    let base = rss_anon().unwrap_or(0);
    let r = s
        .query(
            "ws",
            "SELECT count(*), sum(length(w)) FROM ws.wide WHERE id % 7 <> 3",
            &[],
        )
        .await?;
    let kept: i64 = (1..=300).filter(|g| g % 7 != 3).count() as i64;
    let len: i64 = (1..=300i64)
        .filter(|g| g % 7 != 3)
        .map(|g| 1_000_000 + g.to_string().len() as i64)
        .sum();
    assert_eq!(
        r.rows.unwrap_or_default(),
        vec![vec![json!(kept), json!(len)]]
    );
    let grown = idle_rss_over(base, 200 << 20).await;
    assert!(
        grown < 200 << 20,
        "the filter grew RssAnon by {grown} bytes"
    );
    let r = s
        .query(
            "ws",
            "WITH RECURSIVE r(n, s) AS (SELECT 1, repeat('x', 1000000) UNION ALL \
             SELECT n + 1, s || 'a' FROM r WHERE n < 600) SELECT sum(length(s)) FROM r",
            &[],
        )
        .await?;
    let len: i64 = (0..600i64).map(|n| 1_000_000 + n).sum();
    assert_eq!(r.rows.unwrap_or_default(), vec![vec![json!(len)]]);
    let grown = idle_rss_over(base, 200 << 20).await;
    assert!(
        grown < 200 << 20,
        "the recursive query grew RssAnon by {grown} bytes"
    );
    // Sorts of wide rows are counted once: the rows a sort keeps were counted twice (as
    // its own and as rows passed on), and 700 MB of them was refused at once under
    // 2 GiB. Here 80 MB: counted twice (160 MB) with the sort's own copies (80 MB) it
    // is 240 MB before the scan's blocks under way (up to 2 × 32 MB); counted once, at
    // most 224 MB, within 256 MiB whatever the timing. (100 MB sat at the edge: with both partitions'
    // blocks under way, 264 MB, it was refused on a loaded machine.) A sort larger than
    // the pool is still refused, not spilled: DataFusion's merge reserves for every
    // spilled run at once.
    for (sql, want) in [
        (
            "SELECT id FROM ws.wide WHERE id <= 80 ORDER BY w DESC, id",
            json!(300),
        ),
        (
            "SELECT max(rn) FROM (SELECT row_number() OVER (ORDER BY w DESC) rn \
             FROM ws.wide WHERE id <= 80) t",
            json!(80),
        ),
    ] {
        let r = s.query("ws", sql, &[]).await?;
        let rows = r.rows.unwrap_or_default();
        if rows.len() == 80 {
            // '…x9' sorts above '…x80'.
            assert_eq!(rows[0], vec![json!(9)], "{sql}");
        } else {
            assert_eq!(rows, vec![vec![want]], "{sql}");
        }
        let grown = idle_rss_over(base, 200 << 20).await;
        assert!(grown < 200 << 20, "{sql}: RssAnon grew by {grown} bytes");
    }
    // The memory large statements freed is handed back once they pause: a server
    // stayed at gigabytes, idle, after one such statement.
    let r = s
        .query(
            "ws",
            "SELECT count(*), max(length(w || 'y')) FROM ws.wide",
            &[],
        )
        .await?;
    assert_eq!(
        r.rows.unwrap_or_default(),
        vec![vec![json!(300), json!(1_000_004)]]
    );
    let left = idle_rss_over(base, 96 << 20).await;
    eprintln!(
        "RssAnon after the statements: {} MiB over the start",
        left >> 20
    );
    assert!(
        left < 96 << 20,
        "idle, RssAnon stays {left} bytes over the start"
    );
    tarn.close().await?;
    Ok(())
}

/// A wide row repeated by a join is joined in steps of a few rows: a cross join made
/// one array as long as the probe batch from a 24 MB row (one allocation of 196 GB,
/// and the process aborted), and a hash join gathered 8,192 copies. The cross join now
/// answers; the hash join that still gathers too much is the limit's 400, and its
/// spawned work stops with the statement instead of growing on (it reached 6 GB after
/// the 400 was sent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wide_row_repeated_by_a_join_is_joined_in_steps() -> TestResult {
    let _serial = tarn_tests::RSS_SERIAL.lock().await;
    let Some(base) = rss_anon() else {
        return Ok(()); // not Linux: nothing to measure
    };
    let dir = tempfile::tempdir()?;
    let open = |query_memory: usize| {
        Tarn::open_with(
            dir.path(),
            Options::new()
                .sync(SyncMode::Process)
                .query_memory(query_memory),
        )
    };
    // The default pool, whose per-value limit lets a 3M-element array be made.
    let tarn = open(2 << 30).await?;
    let (s, secret) = tarn_tests::fixture_with_key(&tarn).await?;
    let r = s
        .query(
            "ws",
            "WITH a AS (SELECT array_agg(g) x FROM generate_series(1, 3000000) g) \
             SELECT sum(cardinality(x)) FROM a, generate_series(1, 10000)",
            &[],
        )
        .await?;
    assert_eq!(
        r.rows.unwrap_or_default(),
        vec![vec![json!(30_000_000_000i64)]]
    );
    let r = s
        .query(
            "ws",
            "WITH a AS (SELECT repeat('x', 5000000) t) \
             SELECT sum(length(t)) FROM a, generate_series(1, 2000)",
            &[],
        )
        .await?;
    assert_eq!(
        r.rows.unwrap_or_default(),
        vec![vec![json!(10_000_000_000i64)]]
    );
    tarn.close().await?;
    let tarn = open(QUERY_MEMORY).await?;
    let s = tarn_tests::reconnect(&tarn, &secret).await?;
    let e = s
        .query(
            "ws",
            "WITH a AS (SELECT 1 k, array_agg(g) x FROM generate_series(1, 900000) g) \
             SELECT sum(cardinality(a.x)) FROM a \
             JOIN (SELECT 1 k, g FROM generate_series(1, 20000) g) b ON a.k = b.k",
            &[],
        )
        .await
        .expect_err("8,192 copies of a 7 MB row are past the limit");
    assert_eq!(e.status(), 400, "{e}");
    assert!(e.to_string().contains("query_memory"), "{e}");
    let grown = idle_rss_over(base, 200 << 20).await;
    assert!(
        grown < 200 << 20,
        "after the 400, RssAnon grew by {grown} bytes"
    );
    tarn.close().await?;
    Ok(())
}
