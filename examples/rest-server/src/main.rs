//! `tarn-rest-server`: the hosted service's REST interface over a Tarn directory.
//!
//! ```text
//! tarn-rest-server --data DIR add-user you@example.com --name You   # prints the API key
//! tarn-rest-server --data DIR serve --listen 127.0.0.1:8080
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use tarn::Tarn;
use tarn_rest_server::{Config, router};

#[derive(Parser)]
#[command(
    name = "tarn-rest-server",
    version,
    about = "Serve the data-workspace REST interface from a Tarn directory",
    after_help = "Example:\n  tarn-rest-server --data ./db add-user me@example.com --name Me\n  tarn-rest-server --data ./db serve --listen 127.0.0.1:8080"
)]
struct Cli {
    /// The database directory (created when missing). One process at a time opens it:
    /// stop the server before using `tarn` on the same directory.
    #[arg(long, default_value = "tarn-data")]
    data: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve until SIGINT or SIGTERM; then stop accepting, let requests under way finish,
    /// and close the database.
    #[command(
        after_help = "Example:\n  tarn-rest-server --data ./db serve --listen 127.0.0.1:8080"
    )]
    Serve {
        /// Address to listen on (port 0 picks a free port; the line `listening on
        /// http://ADDR` on standard output tells which).
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
        /// Largest JSON request body in bytes (413 beyond it).
        #[arg(long, default_value_t = Config::default().max_body_bytes)]
        max_body_bytes: usize,
        /// Largest multipart upload in bytes (413 beyond it).
        #[arg(long, default_value_t = Config::default().max_upload_bytes)]
        max_upload_bytes: u64,
        /// Seconds to wait for requests under way at shutdown before dropping them
        /// (a dropped request applies nothing).
        #[arg(long, default_value_t = 60)]
        drain_secs: u64,
        /// Requests per second allowed to each API key (a token bucket; 429 with
        /// `Retry-After` past it). Unlimited when not given.
        #[arg(long)]
        rate_limit: Option<f64>,
        /// The bucket's size: requests a key may make at once after a pause.
        #[arg(long, default_value_t = 20)]
        burst: u32,
    },
    /// Create a user and an API key (the hosted service's web console does this); prints
    /// `{"user_id", "key_id", "secret"}`. The secret is shown only here.
    #[command(
        after_help = "Example:\n  tarn-rest-server --data ./db add-user me@example.com --name Me"
    )]
    AddUser {
        /// The user's e-mail (unique).
        email: String,
        /// Display name.
        #[arg(long, default_value = "")]
        name: String,
    },
    /// Create another API key for a user; prints `{"user_id", "key_id", "secret"}`.
    #[command(after_help = "Example:\n  tarn-rest-server --data ./db add-key 6f1c… --label laptop")]
    AddKey {
        /// The user's id (from `add-user` or `GET /me`).
        user_id: String,
        /// A label to recognise the key by.
        #[arg(long, default_value = "rest")]
        label: String,
    },
    /// Revoke an API key: it is refused from its next request.
    #[command(after_help = "Example:\n  tarn-rest-server --data ./db revoke-key 0b9e…")]
    RevokeKey {
        /// The key's id.
        key_id: String,
    },
}

/// Two runtimes: HTTP (accepting, parsing, answering, shutdown) and SQL statements, so a
/// statement that keeps its thread busy cannot stall the server (see `Config::statements`).
fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = |name: &str, threads: Option<usize>| {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.enable_all().thread_name(name);
        if let Some(n) = threads {
            b.worker_threads(n);
        }
        b.build()
    };
    let (http, statements) = match (runtime("http", Some(2)), runtime("statements", None)) {
        (Ok(h), Ok(s)) => (h, s),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("ERROR: cannot start a runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let code = http.block_on(run(cli, statements.handle().clone()));
    // A statement still busy in a single poll is abandoned: the process ends anyway.
    statements.shutdown_timeout(Duration::from_secs(2));
    http.shutdown_timeout(Duration::from_secs(2));
    code
}

async fn run(cli: Cli, statements: tokio::runtime::Handle) -> ExitCode {
    let mut options = tarn::Options::new();
    if let Command::Serve {
        rate_limit: Some(rps),
        burst,
        ..
    } = &cli.command
    {
        options = options.rate_limit(*rps, *burst);
    }
    // The database lives on the statement runtime (its background work too).
    let data = cli.data.clone();
    let tarn = match statements
        .spawn(async move { Tarn::open_with(&data, options).await })
        .await
    {
        Ok(Ok(t)) => t,
        Ok(Err(e)) => return fail(&e),
        Err(e) => {
            eprintln!("ERROR: {e}");
            return ExitCode::from(1);
        }
    };
    let code = match cli.command {
        Command::Serve {
            listen,
            max_body_bytes,
            max_upload_bytes,
            drain_secs,
            ..
        } => {
            let config = Config {
                max_body_bytes,
                max_upload_bytes,
                statements: Some(statements.clone()),
            };
            serve(&tarn, listen, config, Duration::from_secs(drain_secs)).await
        }
        Command::AddUser { email, name } => match add_user(&tarn, &email, &name).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(&e),
        },
        Command::AddKey { user_id, label } => match tarn.create_api_key(&user_id, &label).await {
            Ok(k) => {
                print_key(&user_id, &k);
                ExitCode::SUCCESS
            }
            Err(e) => fail(&e),
        },
        Command::RevokeKey { key_id } => match tarn.revoke_api_key(&key_id).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(&e),
        },
    };
    // Closing waits for statements under way; one stuck in a single long poll past the
    // drain cannot be waited for, and then the process ends without the checkpoint
    // (the log has every acknowledged commit).
    let closing = statements.spawn(async move { tarn.close().await });
    match tokio::time::timeout(Duration::from_secs(30), closing).await {
        Ok(Ok(Ok(()))) => code,
        Ok(Ok(Err(e))) => fail(&e),
        Ok(Err(e)) => {
            eprintln!("ERROR: {e}");
            ExitCode::from(1)
        }
        Err(_) => {
            eprintln!(
                "ERROR: the database did not close within 30 s; the log keeps what was acknowledged"
            );
            ExitCode::from(1)
        }
    }
}

async fn add_user(tarn: &Tarn, email: &str, name: &str) -> tarn::Result<()> {
    let user = tarn.create_user(email, name).await?;
    let key = tarn.create_api_key(&user.id, "rest").await?;
    print_key(&user.id, &key);
    Ok(())
}

fn print_key(user_id: &str, key: &tarn::NewApiKey) {
    println!(
        "{}",
        serde_json::json!({"user_id": user_id, "key_id": key.id, "secret": key.secret})
    );
}

fn fail(e: &tarn::Error) -> ExitCode {
    eprintln!("ERROR ({}): {e}", e.status());
    ExitCode::from(1)
}

async fn serve(tarn: &Tarn, listen: SocketAddr, config: Config, drain: Duration) -> ExitCode {
    let listener = match tokio::net::TcpListener::bind(listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("ERROR: cannot listen on {listen}: {e}");
            return ExitCode::from(1);
        }
    };
    match listener.local_addr() {
        Ok(addr) => println!("listening on http://{addr}"),
        Err(e) => {
            eprintln!("ERROR: {e}");
            return ExitCode::from(1);
        }
    }
    let (stopping_tx, stopping_rx) = tokio::sync::oneshot::channel::<()>();
    let server =
        axum::serve(listener, router(tarn.clone(), config)).with_graceful_shutdown(async move {
            shutdown_signal().await;
            eprintln!("shutting down: waiting for requests under way");
            let _ = stopping_tx.send(());
        });
    // Requests under way get `drain` to finish; past it they are given up (exit status
    // 1): each statement applies wholly or not at all, and one still running is aborted
    // at its next await or abandoned with the process.
    let give_up = async move {
        if stopping_rx.await.is_ok() {
            tokio::time::sleep(drain).await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        r = server => if let Err(e) = r {
            eprintln!("ERROR: {e}");
            return ExitCode::from(1);
        },
        () = give_up => {
            eprintln!("requests still under way after {drain:?}: dropped");
            return ExitCode::from(1);
        }
    }
    ExitCode::SUCCESS
}

async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("cannot watch SIGTERM ({e}); Ctrl-C still stops the server");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
