//! An upload larger than memory (in the `rss` binary, so no other test shares the
//! process): a generated 2 GiB CSV stream becomes a table while anonymous resident
//! memory (`RssAnon`; pages of mapped segment files don't count) stays a small
//! fraction of the file.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use serde_json::json;
use tarn::{Options, SyncMode, Tarn};
use tarn_tests::{fixture, rss_anon};
use tokio::io::{AsyncRead, ReadBuf};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const FILE_BYTES: u64 = 2 << 30;

/// A CSV file generated as it is read: `id,x,body` rows of about 200 bytes until
/// `FILE_BYTES`, never held whole.
struct Generated {
    next: u64,
    buf: Vec<u8>,
    at: usize,
    sent: u64,
    /// Rows generated (shared with the test).
    rows: Arc<AtomicU64>,
    /// Highest RssAnon seen while reading (shared with the test).
    peak: Arc<AtomicU64>,
}

impl AsyncRead for Generated {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        if this.at == this.buf.len() {
            if this.sent >= FILE_BYTES {
                return Poll::Ready(Ok(()));
            }
            this.buf.clear();
            this.at = 0;
            if this.next == 0 {
                this.buf.extend_from_slice(b"id,x,body\n");
            }
            while this.buf.len() < 1 << 20 {
                let i = this.next;
                this.next += 1;
                let k = i.wrapping_mul(2_654_435_761) % 1_000_003;
                this.buf.extend_from_slice(
                    format!(
                        "{i},{}.25,\"row {k:07}, {}\"\n",
                        i % 1000,
                        "the quick brown fox jumps over the lazy dog ".repeat(4)
                    )
                    .as_bytes(),
                );
            }
            this.rows.store(this.next, Ordering::Relaxed);
            if let Some(r) = rss_anon() {
                this.peak.fetch_max(r, Ordering::Relaxed);
            }
        }
        let n = (this.buf.len() - this.at).min(out.remaining());
        out.put_slice(&this.buf[this.at..this.at + n]);
        this.at += n;
        this.sent += n as u64;
        Poll::Ready(Ok(()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rss_anon_stays_bounded_uploading_a_file_larger_than_memory_budgets() -> TestResult {
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
            .query_memory(256 << 20),
    )
    .await?;
    let s = fixture(&tarn).await?;
    let rows = Arc::new(AtomicU64::new(0));
    let peak = Arc::new(AtomicU64::new(base));
    let file = Generated {
        next: 0,
        buf: Vec::new(),
        at: 0,
        sent: 0,
        rows: rows.clone(),
        peak: peak.clone(),
    };
    let up = s.upload_table("ws", "big", "big.csv", file).await?;
    let generated = rows.load(Ordering::Relaxed);
    assert_eq!(up.row_count, generated);
    assert_eq!(up.columns, ["id", "x", "body"]);
    let got = s
        .query(
            "ws",
            r#"SELECT count(*), sum(id), min(x), max(x) FROM "ws"."big""#,
            &[],
        )
        .await?
        .rows
        .unwrap_or_default();
    assert_eq!(
        got,
        vec![vec![
            json!(generated),
            json!(generated * (generated - 1) / 2),
            json!(0.25),
            json!(999.25)
        ]]
    );
    let after = rss_anon().unwrap_or(base);
    let growth = peak.load(Ordering::Relaxed).max(after).saturating_sub(base);
    eprintln!(
        "uploaded {} MiB ({generated} rows); RssAnon growth {} MiB",
        FILE_BYTES >> 20,
        growth >> 20
    );
    assert!(
        growth < 256 << 20,
        "RssAnon grew by {} MiB uploading {} MiB",
        growth >> 20,
        FILE_BYTES >> 20
    );
    tarn.close().await?;
    Ok(())
}
