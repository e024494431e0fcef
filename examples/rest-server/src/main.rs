//! `tarn-rest-server`: the hosted service's REST interface over a Tarn directory.
//!
//! ```text
//! tarn-rest-server --data DIR add-user you@example.com --name You   # prints the API key
//! tarn-rest-server --data DIR serve --listen 127.0.0.1:8080
//! tarn-rest-server --data DIR revoke-key KEY_ID   # also while it serves (admin socket)
//! ```

mod admin;

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
    after_help = "Example:\n  tarn-rest-server --data ./db add-user me@example.com --name Me\n  tarn-rest-server --data ./db serve --listen 127.0.0.1:8080\n  tarn-rest-server --data ./db revoke-key 0b9e…   # while it serves, too"
)]
struct Cli {
    /// The database directory (created when missing). One process at a time opens it:
    /// stop the server before using `tarn` on the same directory. While the server
    /// runs, `add-user`, `add-key` and `revoke-key` are sent to it through its admin
    /// socket instead.
    #[arg(long, default_value = "tarn-data")]
    data: PathBuf,
    /// The admin socket `serve` listens on (mode 0600; only the server's own OS user
    /// is answered) and `add-user`, `add-key` and `revoke-key` look for a running
    /// server on. Default: DIR/admin.sock.
    #[arg(long, global = true)]
    admin_socket: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve until SIGINT or SIGTERM; then stop accepting, let requests under way finish,
    /// and close the database. Also listens on the admin socket, so that `add-user`,
    /// `add-key` and `revoke-key` work while it runs.
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
    /// `{"user_id", "key_id", "secret"}`. The secret is shown only here. Works on a
    /// stopped server's directory, or through a running server's admin socket.
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
    /// Works on a stopped server's directory, or through a running server's admin
    /// socket.
    #[command(after_help = "Example:\n  tarn-rest-server --data ./db add-key 6f1c… --label laptop")]
    AddKey {
        /// The user's id (from `add-user` or `GET /me`).
        user_id: String,
        /// A label to recognise the key by.
        #[arg(long, default_value = "rest")]
        label: String,
    },
    /// Revoke an API key: it is refused (401) from its next request. With the server
    /// running this goes through its admin socket and takes effect at once, without a
    /// restart (statements of the key under way are stopped, applying nothing);
    /// otherwise it opens the directory.
    #[command(after_help = "Example:\n  tarn-rest-server --data ./db revoke-key 0b9e…")]
    RevokeKey {
        /// The key's id.
        key_id: String,
    },
}

/// Counts what each statement holds, so that the `query_memory` limit also holds for
/// memory DataFusion does not report to its pool (see `tarn::StatementAllocator`).
#[global_allocator]
static ALLOCATOR: tarn::StatementAllocator = tarn::StatementAllocator;

/// Two runtimes: HTTP (accepting, parsing, answering, shutdown) and SQL statements, so a
/// statement that keeps its thread busy cannot stall the server (see `Config::statements`).
fn main() -> ExitCode {
    let cli = Cli::parse();
    // A panic on a statement thread is caught and answered (a value past Arrow's 2 GiB
    // offsets is the statement's 400; a bug is its 500, with the panic's words): the
    // default hook would also print it to the log with a backtrace note, as if the
    // server had crashed. With RUST_BACKTRACE set every panic is printed as usual.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let statement = std::thread::current().name() == Some("statements");
        if !statement || std::env::var_os("RUST_BACKTRACE").is_some() {
            default_hook(info);
        }
    }));
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
    let socket = cli
        .admin_socket
        .clone()
        .unwrap_or_else(|| cli.data.join("admin.sock"));
    let request = match &cli.command {
        Command::Serve { .. } => None,
        Command::AddUser { email, name } => Some(admin::Request::AddUser {
            email: email.clone(),
            name: name.clone(),
        }),
        Command::AddKey { user_id, label } => Some(admin::Request::AddKey {
            user_id: user_id.clone(),
            label: label.clone(),
        }),
        Command::RevokeKey { key_id } => Some(admin::Request::RevokeKey {
            key_id: key_id.clone(),
        }),
    };
    // A running server holds the directory: it runs the command for us.
    if let Some(request) = &request {
        match admin::send(&socket, request).await {
            Ok(None) => {}
            Ok(Some(admin::Reply::Ok(out))) => {
                if let Some(out) = out {
                    println!("{out}");
                }
                return ExitCode::SUCCESS;
            }
            Ok(Some(admin::Reply::Error { status, message })) => {
                eprintln!("ERROR ({status}): {message}");
                return ExitCode::from(1);
            }
            Err(e) => {
                eprintln!(
                    "ERROR: cannot reach the server on its admin socket {}: {e}",
                    socket.display()
                );
                return ExitCode::from(1);
            }
        }
    }
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
            let admin = match admin::Listener::bind(&socket) {
                Ok(l) => l,
                Err(e) => {
                    eprintln!(
                        "ERROR: cannot listen on the admin socket {} (--admin-socket): {e}",
                        socket.display()
                    );
                    return close(tarn, statements, ExitCode::from(1)).await;
                }
            };
            serve(
                &tarn,
                listen,
                config,
                Duration::from_secs(drain_secs),
                admin,
            )
            .await
        }
        Command::AddUser { .. } | Command::AddKey { .. } | Command::RevokeKey { .. } => {
            match request {
                Some(request) => match admin::execute(&tarn, request).await {
                    Ok(out) => {
                        if let Some(out) = out {
                            println!("{out}");
                        }
                        ExitCode::SUCCESS
                    }
                    Err(e) => fail(&e),
                },
                None => ExitCode::SUCCESS,
            }
        }
    };
    close(tarn, statements, code).await
}

/// Closes the database, then exits with `code` (or 1 when closing fails).
async fn close(tarn: Tarn, statements: tokio::runtime::Handle, code: ExitCode) -> ExitCode {
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

fn fail(e: &tarn::Error) -> ExitCode {
    eprintln!("ERROR ({}): {e}", e.status());
    ExitCode::from(1)
}

async fn serve(
    tarn: &Tarn,
    listen: SocketAddr,
    config: Config,
    drain: Duration,
    admin: admin::Listener,
) -> ExitCode {
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
    // Answered until the server stops (its file goes with `admin`).
    let admin_task = {
        let tarn = tarn.clone();
        tokio::spawn(async move { admin.serve(tarn).await })
    };
    let _stop_admin = AbortOnDrop(admin_task);
    let (stopping_tx, stopping_rx) = tokio::sync::oneshot::channel::<()>();
    let closing = tarn.clone();
    let server =
        axum::serve(listener, router(tarn.clone(), config)).with_graceful_shutdown(async move {
            shutdown_signal().await;
            eprintln!("shutting down: waiting for requests under way");
            // Requests waiting for background work (CREATE INDEX) answer now.
            closing.begin_close();
            let _ = stopping_tx.send(());
        });
    // Requests under way get `drain` to finish; past it their statements are stopped
    // (each answers 503, nothing of it applied; one committing finishes its commit), the
    // answers get a moment to go out, and what is left is dropped (exit status 1).
    let give_up = async move {
        if stopping_rx.await.is_ok() {
            tokio::time::sleep(drain).await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    let mut server = std::pin::pin!(server.into_future());
    tokio::select! {
        r = &mut server => if let Err(e) = r {
            eprintln!("ERROR: {e}");
            return ExitCode::from(1);
        },
        () = give_up => {
            eprintln!("requests still under way after {drain:?}: their statements are stopped");
            tarn.stop_statements();
            if tokio::time::timeout(Duration::from_secs(5), &mut server).await.is_err() {
                eprintln!("requests still under way 5 s later: dropped");
            }
            return ExitCode::from(1);
        }
    }
    ExitCode::SUCCESS
}

/// Aborts a task when dropped (whichever way `serve` returns).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
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
