//! The admin socket: `add-user`, `add-key` and `revoke-key` while the server runs.
//!
//! The server holds its database directory, so another process cannot open it; a key
//! that leaked would otherwise have to wait for a restart to be revoked. `serve` listens
//! on a Unix socket (by default `DIR/admin.sock`) and the three subcommands, finding a
//! server there, send it their command instead of opening the directory. The socket is
//! made mode 0600 and the server answers only connections whose peer runs as the
//! socket's owner (the server's own OS user, checked with `SO_PEERCRED`): exactly who
//! could run the same commands on the stopped directory.
//!
//! One request per connection: a JSON line `{"command": "revoke-key", "key_id": …}` and
//! one JSON line back, `{"ok": OUTPUT}` (`null` when the command prints nothing) or
//! `{"error": {"status", "message"}}`.

use std::io::ErrorKind;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tarn::Tarn;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

/// A command the server runs for the admin socket (and the subcommands run offline).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "kebab-case")]
pub enum Request {
    /// `add-user EMAIL --name N`.
    AddUser {
        /// The user's e-mail.
        email: String,
        /// Display name.
        name: String,
    },
    /// `add-key USER_ID --label L`.
    AddKey {
        /// The user's id.
        user_id: String,
        /// The key's label.
        label: String,
    },
    /// `revoke-key KEY_ID`.
    RevokeKey {
        /// The key's id.
        key_id: String,
    },
}

/// The server's answer.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    /// Done: what the subcommand prints (nothing for `null`).
    Ok(Option<Value>),
    /// Refused or failed.
    Error {
        /// The error's status (as `tarn::Error::status`).
        status: u16,
        /// What went wrong.
        message: String,
    },
}

/// The longest request line read (a command is a few hundred bytes).
const MAX_REQUEST: u64 = 64 << 10;

/// Runs `request` against the open database: what the subcommand prints, if anything.
pub async fn execute(tarn: &Tarn, request: Request) -> tarn::Result<Option<Value>> {
    match request {
        Request::AddUser { email, name } => {
            let user = tarn.create_user(&email, &name).await?;
            let key = tarn.create_api_key(&user.id, "rest").await?;
            Ok(Some(key_json(&user.id, &key)))
        }
        Request::AddKey { user_id, label } => {
            let key = tarn.create_api_key(&user_id, &label).await?;
            Ok(Some(key_json(&user_id, &key)))
        }
        Request::RevokeKey { key_id } => {
            tarn.revoke_api_key(&key_id).await?;
            Ok(None)
        }
    }
}

fn key_json(user_id: &str, key: &tarn::NewApiKey) -> Value {
    serde_json::json!({"user_id": user_id, "key_id": key.id, "secret": key.secret})
}

/// Sends `request` to a server listening on `path`. `Ok(None)` when none listens there
/// (no socket, or a stale one a stopped server left): the caller opens the directory
/// itself.
pub async fn send(path: &Path, request: &Request) -> std::io::Result<Option<Reply>> {
    let stream = match UnixStream::connect(path).await {
        Ok(s) => s,
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::ConnectionRefused) => {
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    // Only to a server run by this user: a socket path in a shared directory could be
    // another user's listener, which would take the request and could answer a
    // revocation it never made.
    let peer = stream.peer_cred()?.uid();
    let me = own_uid()?;
    if peer != me {
        return Err(std::io::Error::new(
            ErrorKind::PermissionDenied,
            format!("the admin socket is served by uid {peer}, not by this user (uid {me})"),
        ));
    }
    let (read, mut write) = stream.into_split();
    let mut line = serde_json::to_vec(request).map_err(std::io::Error::other)?;
    line.push(b'\n');
    write.write_all(&line).await?;
    write.shutdown().await?;
    let mut answer = Vec::new();
    BufReader::new(read)
        .take(MAX_REQUEST)
        .read_until(b'\n', &mut answer)
        .await?;
    serde_json::from_slice(&answer).map(Some).map_err(|e| {
        std::io::Error::new(
            ErrorKind::InvalidData,
            format!("the server's answer on the admin socket is not understood: {e}"),
        )
    })
}

/// The user this process runs as (the owner of its `/proc/self`; Linux, where the
/// server runs).
fn own_uid() -> std::io::Result<u32> {
    Ok(std::fs::metadata("/proc/self")?.uid())
}

/// The listening admin socket; its file is removed when this is dropped.
pub struct Listener {
    listener: UnixListener,
    path: PathBuf,
    /// The socket file's owner: the only user whose connections are answered.
    owner: u32,
}

impl Listener {
    /// Listens on `path`, replacing a socket a stopped server left there (but not one a
    /// running server answers on, nor a file that is not a socket).
    pub fn bind(path: &Path) -> std::io::Result<Listener> {
        match std::fs::symlink_metadata(path) {
            Ok(m) if m.file_type().is_socket() => {
                if std::os::unix::net::UnixStream::connect(path).is_ok() {
                    return Err(std::io::Error::new(
                        ErrorKind::AddrInUse,
                        "another server answers on it",
                    ));
                }
                std::fs::remove_file(path)?;
            }
            Ok(_) => {
                return Err(std::io::Error::new(
                    ErrorKind::AlreadyExists,
                    "a file that is not a socket is in the way",
                ));
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let listener = UnixListener::bind(path)?;
        // Only the owner may connect (the peer check below covers the instant before).
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
        // This process's user, not the socket file's owner read back through a path
        // that could have been swapped meanwhile.
        let owner = own_uid()?;
        Ok(Listener {
            listener,
            path: path.to_path_buf(),
            owner,
        })
    }

    /// Answers connections until the future is dropped, one task per connection.
    pub async fn serve(&self, tarn: Tarn) {
        loop {
            let stream = match self.listener.accept().await {
                Ok((s, _)) => s,
                Err(e) => {
                    eprintln!("admin socket: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let (tarn, owner) = (tarn.clone(), self.owner);
            tokio::spawn(async move {
                if let Err(e) = answer(stream, &tarn, owner).await {
                    eprintln!("admin socket: {e}");
                }
            });
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Reads one request from `stream`, runs it and writes the reply.
async fn answer(stream: UnixStream, tarn: &Tarn, owner: u32) -> std::io::Result<()> {
    let peer = stream.peer_cred()?.uid();
    let (read, mut write) = stream.into_split();
    let reply = if peer != owner {
        Reply::Error {
            status: 403,
            message: format!(
                "the admin socket answers only its owner (uid {owner}), not uid {peer}"
            ),
        }
    } else {
        let mut line = Vec::new();
        let mut read = BufReader::new(read).take(MAX_REQUEST);
        let read_line = read.read_until(b'\n', &mut line);
        match tokio::time::timeout(Duration::from_secs(30), read_line).await {
            Err(_) => Reply::Error {
                status: 400,
                message: "no request within 30 s".into(),
            },
            Ok(Err(e)) => return Err(e),
            // Cut at the limit before its line ended.
            Ok(Ok(n)) if n as u64 >= MAX_REQUEST && line.last() != Some(&b'\n') => Reply::Error {
                status: 400,
                message: format!(
                    "the request is longer than {MAX_REQUEST} bytes (an e-mail, name or \
                         label that long is not valid anyway)"
                ),
            },
            Ok(Ok(_)) => match serde_json::from_slice::<Request>(&line) {
                Err(e) => Reply::Error {
                    status: 400,
                    message: format!("not a request: {e}"),
                },
                Ok(request) => match execute(tarn, request).await {
                    Ok(out) => Reply::Ok(out),
                    Err(e) => Reply::Error {
                        status: e.status(),
                        message: e.to_string(),
                    },
                },
            },
        }
    };
    let mut out = serde_json::to_vec(&reply).map_err(std::io::Error::other)?;
    out.push(b'\n');
    write.write_all(&out).await?;
    write.shutdown().await
}
