//! Workspace files vs copying the same file with the operating system, in one run
//! (issue 11's benchmark: upload and download MB/s, target ≥ 0.8× `cp`).
//!
//! ```text
//! tarn-files-bench [--mb 512] [--work DIR] [--runs 3]
//! ```
//!
//! Writes a `--mb` MiB file of pseudo-random bytes in `--work` (default: a temporary
//! directory on the same file system as the database), then, best of `--runs` each:
//!
//! - `cp`: `/bin/cp` of the file to a new name, and `cp + fsync` (the copy made durable
//!   with `sync -f` — what an upload promises: its bytes survive a power cut once it
//!   returns);
//! - `upload`: `Session::upload_file` from a `tokio::fs::File` (streamed, hashed with
//!   SHA-256, fsynced, renamed, recorded);
//! - `download`: `Session::file_content` copied to a new file (`tokio::io::copy` with
//!   8 MiB buffers), and the same copy without writing (`read`: the reader alone).
//!
//! Prints one JSON object (MB/s per run and the ratios to `cp`).

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use serde_json::json;
use tarn::{Options, Tarn};
use tarn_benches::{SplitMix64, fixture};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

struct Args {
    mb: usize,
    work: Option<PathBuf>,
    runs: usize,
}

fn args() -> Result<Args, BoxError> {
    let mut a = Args {
        mb: 512,
        work: None,
        runs: 3,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--mb" => a.mb = value()?.parse()?,
            "--work" => a.work = Some(PathBuf::from(value()?)),
            "--runs" => a.runs = value()?.parse()?,
            other => return Err(format!("unknown flag {other}").into()),
        }
    }
    Ok(a)
}

/// The best (shortest) of `runs` timings of `f`, in seconds.
async fn best<F, Fut>(runs: usize, mut f: F) -> Result<f64, BoxError>
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = Result<(), BoxError>>,
{
    let mut best = f64::INFINITY;
    for i in 0..runs {
        let t = Instant::now();
        f(i).await?;
        best = best.min(t.elapsed().as_secs_f64());
    }
    Ok(best)
}

fn run(cmd: &str, args: &[&Path]) -> Result<(), BoxError> {
    let status = Command::new(cmd).args(args).status()?;
    if !status.success() {
        return Err(format!("{cmd} failed: {status}").into());
    }
    Ok(())
}

async fn main_() -> Result<serde_json::Value, BoxError> {
    let a = args()?;
    let tmp = tempfile::tempdir_in(a.work.clone().unwrap_or_else(std::env::temp_dir))?;
    let source = tmp.path().join("source.bin");
    {
        let mut rng = SplitMix64::new(42);
        let mut f = std::fs::File::create(&source)?;
        let mut block = vec![0u8; 1 << 20];
        for _ in 0..a.mb {
            for chunk in block.chunks_mut(8) {
                chunk.copy_from_slice(&rng.next_u64().to_le_bytes()[..chunk.len()]);
            }
            std::io::Write::write_all(&mut f, &block)?;
        }
        f.sync_all()?;
    }
    let bytes = (a.mb << 20) as f64;
    let mbps = |secs: f64| bytes / secs / (1 << 20) as f64;

    let cp = best(a.runs, |i| {
        let dest = tmp.path().join(format!("cp{i}.bin"));
        let source = source.clone();
        async move { run("cp", &[&source, &dest]) }
    })
    .await?;
    let cp_sync = best(a.runs, |i| {
        let dest = tmp.path().join(format!("cps{i}.bin"));
        let source = source.clone();
        async move {
            run("cp", &[&source, &dest])?;
            run("sync", &[Path::new("-f"), &dest])
        }
    })
    .await?;
    for i in 0..a.runs {
        let _ = std::fs::remove_file(tmp.path().join(format!("cp{i}.bin")));
        let _ = std::fs::remove_file(tmp.path().join(format!("cps{i}.bin")));
    }

    let tarn = Tarn::open_with(tmp.path().join("db"), Options::new()).await?;
    let s = fixture(&tarn).await?;
    let ids = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let upload = best(a.runs, |i| {
        let (s, source, ids) = (s.clone(), source.clone(), ids.clone());
        async move {
            let f = tokio::fs::File::open(&source).await?;
            let info = s
                .upload_file("ws", &format!("f{i}.bin"), "application/octet-stream", f)
                .await?;
            ids.lock().map_err(|e| e.to_string())?.push(info.id);
            Ok(())
        }
    })
    .await?;
    let ids = ids.lock().map_err(|e| e.to_string())?.clone();
    let id = ids.first().cloned().ok_or("no upload")?;
    for other in &ids[1..] {
        s.delete_file("ws", other).await?;
    }
    let download = best(a.runs, |i| {
        let (s, id) = (s.clone(), id.clone());
        let dest = tmp.path().join(format!("dl{i}.bin"));
        async move {
            let c = s.file_content("ws", &id).await?;
            let mut reader = tokio::io::BufReader::with_capacity(8 << 20, c.reader);
            let mut out = tokio::fs::File::create(&dest).await?;
            out.set_max_buf_size(8 << 20);
            tokio::io::copy_buf(&mut reader, &mut out).await?;
            out.flush().await?;
            drop(out);
            std::fs::remove_file(&dest)?;
            Ok(())
        }
    })
    .await?;
    let read = best(a.runs, |_| {
        let (s, id) = (s.clone(), id.clone());
        async move {
            let mut c = s.file_content("ws", &id).await?;
            let mut buf = vec![0u8; 1 << 20];
            let mut n = 0usize;
            loop {
                let k = c.reader.read(&mut buf).await?;
                if k == 0 {
                    break;
                }
                n += k;
            }
            if n != a.mb << 20 {
                return Err(format!("read {n} bytes").into());
            }
            Ok(())
        }
    })
    .await?;
    tarn.close().await?;
    Ok(json!({
        "mb": a.mb,
        "mb_per_s": {
            "cp": mbps(cp),
            "cp_fsync": mbps(cp_sync),
            "upload": mbps(upload),
            "download": mbps(download),
            "read": mbps(read),
        },
        "upload_vs_cp": cp / upload,
        "upload_vs_cp_fsync": cp_sync / upload,
        "download_vs_cp": cp / download,
    }))
}

#[tokio::main]
async fn main() -> ExitCode {
    match main_().await {
        Ok(v) => {
            println!("{v}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tarn-files-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
