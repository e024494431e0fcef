//! The tenancy model of SPEC §1: the permission matrix run exhaustively (every
//! `Session` method × every kind of caller), members and their roles, and API keys.
//!
//! The expected statuses are written here from SPEC §1's table, independently of the
//! library's own table (`tarn::PERMISSIONS`); what ties the two to the code is
//! `every_public_session_method_has_a_row`, which parses the facade's source and fails
//! when `Session` gains a public method that the table (and so this matrix) lacks.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use quote::ToTokens;

use serde_json::json;
use tarn::{Operation, Options, PERMISSIONS, Session, Tarn};
use tarn_tests::id_body_x_batch;

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Who makes the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Caller {
    /// An admin of organization `acme`, with `acme` set.
    Admin,
    /// A member (not admin) of `acme`, with `acme` set.
    Member,
    /// The admin of another organization, with `acme` set.
    Outsider,
    /// An admin of `acme` whose key was revoked after the session opened.
    Revoked,
    /// A member of `acme` removed after the session opened.
    Removed,
    /// The admin of `acme`, with no organization set.
    NoOrg,
}

const CALLERS: [Caller; 6] = [
    Caller::Admin,
    Caller::Member,
    Caller::Outsider,
    Caller::Revoked,
    Caller::Removed,
    Caller::NoOrg,
];

/// A fresh database: organization `acme` (admin `admin@`, member `member@`, and
/// `removed@` who was a member), workspace `ws` with table `t` (one row), and
/// organization `other` of `outsider@`.
struct World {
    admin: Session,
    member_id: String,
    /// A file of workspace `ws`.
    file_id: String,
    sessions: Vec<(Caller, Session)>,
}

async fn user_session(tarn: &Tarn, email: &str) -> tarn::Result<(String, Session)> {
    let u = tarn.create_user(email, email).await?;
    let k = tarn.create_api_key(&u.id, "k").await?;
    Ok((u.id, tarn.connect(&k.secret).await?))
}

async fn world() -> tarn::Result<World> {
    let tarn = Tarn::in_memory().await?;
    let (_, admin) = user_session(&tarn, "admin@example.com").await?;
    admin.create_organization("acme", "Acme").await?;
    let acme = admin.with_org("acme");
    acme.create_workspace("ws", "WS").await?;
    acme.query(
        "ws",
        r#"CREATE TABLE "ws"."t" (id INT8 PRIMARY KEY, body TEXT, x FLOAT8) USING engine"#,
        &[],
    )
    .await?;
    acme.query("ws", r#"INSERT INTO "ws"."t" VALUES (1, 'one', 1.0)"#, &[])
        .await?;
    // A view over no table, so that dropping "t" stays free of dependents.
    acme.query("ws", r#"CREATE VIEW "ws"."v" AS SELECT 1 AS one"#, &[])
        .await?;
    let file_id = acme
        .upload_file("ws", "a.txt", "text/plain", &b"file a"[..])
        .await?
        .id;

    let (member_id, member) = user_session(&tarn, "member@example.com").await?;
    acme.add_member("acme", "member@example.com", "member")
        .await?;
    let (removed_id, removed) = user_session(&tarn, "removed@example.com").await?;
    acme.add_member("acme", "removed@example.com", "member")
        .await?;
    let removed = removed.with_org("acme");
    removed.workspaces().await?; // it worked while a member...
    let (_, outsider) = user_session(&tarn, "outsider@example.com").await?;
    outsider.create_organization("other", "Other").await?;

    // A second key of the admin, revoked after its session opened.
    let me = admin.me().await?;
    let key = tarn.create_api_key(&me.id, "to revoke").await?;
    let revoked = tarn.connect(&key.secret).await?.with_org("acme");
    revoked.workspaces().await?;
    tarn.revoke_api_key(&key.id).await?;
    acme.remove_member("acme", &removed_id).await?; // ...and is removed while open

    let sessions = vec![
        (Caller::Admin, acme.clone()),
        (Caller::Member, member.with_org("acme")),
        (Caller::Outsider, outsider.with_org("acme")),
        (Caller::Revoked, revoked),
        (Caller::Removed, removed),
        (Caller::NoOrg, admin.clone()),
    ];
    Ok(World {
        admin: acme,
        member_id,
        file_id,
        sessions,
    })
}

/// The status SPEC §1 gives `op` for `caller` (200 for success).
fn expected(op: Operation, caller: Caller) -> u16 {
    use Operation as O;
    if op == O::WithOrg {
        return 200; // builds a session value; the calls made with it are checked
    }
    if caller == Caller::Revoked {
        return 401;
    }
    // Calls about the user, not an organization.
    if matches!(op, O::Me | O::Organizations | O::CreateOrganization) {
        return 200;
    }
    let names_its_org = matches!(
        op,
        O::Organization
            | O::UpdateOrganization
            | O::DeleteOrganization
            | O::Members
            | O::AddMember
            | O::UpdateMember
            | O::RemoveMember
    );
    let admin_only = matches!(
        op,
        O::UpdateOrganization
            | O::DeleteOrganization
            | O::AddMember
            | O::UpdateMember
            | O::RemoveMember
            | O::DeleteWorkspace
    );
    match caller {
        Caller::Outsider | Caller::Removed => 404,
        Caller::NoOrg if !names_its_org => 400,
        Caller::Member if admin_only => 403,
        _ => 200,
    }
}

/// Calls `op` through `s` on the world's resources; the status it ended with.
async fn call(op: Operation, s: &Session, w: &World) -> Result<u16, String> {
    use Operation as O;
    let batch = id_body_x_batch(2..3, |_| "two".into(), 1.0).map_err(|e| e.to_string())?;
    let r: tarn::Result<()> = match op {
        O::WithOrg => {
            let _ = s.with_org("acme");
            Ok(())
        }
        O::Me => s.me().await.map(drop),
        O::Organizations => s.organizations().await.map(drop),
        O::Organization => s.organization("acme").await.map(drop),
        O::CreateOrganization => s.create_organization("fresh", "Fresh").await.map(drop),
        O::UpdateOrganization => s.update_organization("acme", "Acme 2").await.map(drop),
        O::DeleteOrganization => s.delete_organization("acme").await,
        O::Members => s.members("acme").await.map(drop),
        O::AddMember => s
            .add_member("acme", "new@example.com", "member")
            .await
            .map(drop),
        O::UpdateMember => s
            .update_member("acme", &w.member_id, "admin")
            .await
            .map(drop),
        O::RemoveMember => s.remove_member("acme", &w.member_id).await,
        O::Workspaces => s.workspaces().await.map(drop),
        O::Workspace => s.workspace("ws").await.map(drop),
        O::CreateWorkspace => s.create_workspace("ws2", "WS2").await.map(drop),
        O::UpdateWorkspace => s.update_workspace("ws", "WS 2").await.map(drop),
        O::DeleteWorkspace => s.delete_workspace("ws").await,
        O::Tables => s.tables("ws").await.map(drop),
        O::Table => s.table("ws", "t").await.map(drop),
        O::DropTable => s.drop_table("ws", "t").await,
        O::Views => s.views("ws").await.map(drop),
        O::View => s.view("ws", "v").await.map(drop),
        O::Query => s
            .query("ws", r#"SELECT count(*) FROM "ws"."t""#, &[])
            .await
            .map(drop),
        O::QueryArrow => s
            .query_arrow("ws", r#"SELECT count(*) FROM "ws"."t""#, &[])
            .await
            .map(drop),
        O::InsertArrow => s.insert_arrow("ws", "t", &[batch]).await.map(drop),
        O::QueryBatch => s
            .query_batch(
                "ws",
                r#"INSERT INTO "ws"."t" (id, body) VALUES ($1, 'b')"#,
                &[vec![json!(3)], vec![json!(4)]],
            )
            .await
            .map(drop),
        O::UploadTable => s
            .upload_table("ws", "up", "up.csv", &b"a,b\n1,x\n"[..])
            .await
            .map(drop),
        O::UploadTableWithProgress => s
            .upload_table_with_progress("ws", "up", "up.json", &b"[{\"a\": 1}]"[..], |_| {})
            .await
            .map(drop),
        O::BindWorkspace => match s.bind_workspace("ws").await {
            Ok(b) => b
                .upload_table("up", "up.csv", &b"a,b\n1,x\n"[..])
                .await
                .map(drop),
            Err(e) => Err(e),
        },
        O::UploadFile => s
            .upload_file("ws", "b.txt", "text/plain", &b"file b"[..])
            .await
            .map(drop),
        O::Files => s.files("ws", None, None).await.map(drop),
        O::File => s.file("ws", &w.file_id).await.map(drop),
        O::FileContent => s.file_content("ws", &w.file_id).await.map(drop),
        O::DeleteFile => s.delete_file("ws", &w.file_id).await,
        other => return Err(format!("{other:?} has no call in this test: add one")),
    };
    Ok(match r {
        Ok(()) => 200,
        Err(e) => e.status(),
    })
}

/// Everything a caller could change in `acme`, as the admin sees it.
async fn state(w: &World) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    let a = &w.admin;
    let Ok(org) = a.organization("acme").await else {
        return Ok(json!("acme is gone"));
    };
    let mut tables = Vec::new();
    for ws in a.workspaces().await?.data {
        for t in a.tables(&ws.id).await? {
            tables.push(json!([ws.id, ws.name, t.name, t.row_count]));
        }
        for f in a.files(&ws.id, None, None).await?.data {
            tables.push(json!([ws.id, f.filename, f.size_bytes]));
        }
        tables.push(json!([ws.id, ws.name]));
    }
    let orgs: Vec<String> = a.organizations().await?.into_iter().map(|o| o.id).collect();
    Ok(json!({
        "org": serde_json::to_value(&org)?,
        "members": serde_json::to_value(a.members("acme").await?)?,
        "tables": tables,
        "orgs": orgs,
    }))
}

#[tokio::test]
async fn every_method_for_every_caller_has_the_status_of_the_matrix() -> TestResult {
    let mut failures = Vec::new();
    for p in PERMISSIONS {
        for caller in CALLERS {
            // A fresh world for each cell: successful calls change it.
            let w = world().await?;
            let s = &w
                .sessions
                .iter()
                .find(|(c, _)| *c == caller)
                .ok_or("no session")?
                .1;
            let before = state(&w).await?;
            let got = call(p.operation, s, &w).await?;
            let want = expected(p.operation, caller);
            if got != want {
                failures.push(format!("{}: {caller:?} got {got}, want {want}", p.method));
            }
            // A refused call changes nothing.
            if got != 200 && state(&w).await? != before {
                failures.push(format!(
                    "{}: {caller:?} was refused but changed the database",
                    p.method
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    Ok(())
}

/// The public methods of `Session` with their bodies' tokens, read from the facade's
/// source (every `impl Session` block of every file of `crates/tarn/src`; a macro
/// inside such a block, or one that could make a whole block, is an error).
fn session_methods() -> Result<BTreeSet<(String, String)>, Box<dyn std::error::Error>> {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates/tarn/src");
    let mut methods = BTreeSet::new();
    let mut files = vec![src];
    while let Some(path) = files.pop() {
        if path.is_dir() {
            for e in std::fs::read_dir(&path)? {
                files.push(e?.path());
            }
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let file = syn::parse_file(&std::fs::read_to_string(&path)?)?;
        let mut items: Vec<&syn::Item> = file.items.iter().collect();
        while let Some(item) = items.pop() {
            match item {
                syn::Item::Mod(m) => {
                    if let Some((_, inner)) = &m.content {
                        items.extend(inner.iter());
                    }
                }
                syn::Item::Macro(m) if m.mac.path.is_ident("macro_rules") => {}
                syn::Item::Macro(m) => {
                    return Err(
                        format!("an item macro in the facade: {}", m.to_token_stream()).into(),
                    );
                }
                syn::Item::Impl(i) if i.trait_.is_none() => {
                    let syn::Type::Path(ty) = i.self_ty.as_ref() else {
                        continue;
                    };
                    if ty.path.segments.last().is_none_or(|s| s.ident != "Session") {
                        continue;
                    }
                    for f in &i.items {
                        match f {
                            syn::ImplItem::Fn(f) if matches!(f.vis, syn::Visibility::Public(_)) => {
                                let body = f.block.to_token_stream().to_string();
                                methods.insert((f.sig.ident.to_string(), body));
                            }
                            // Methods a macro makes would escape this scan.
                            syn::ImplItem::Macro(m) => {
                                return Err(format!(
                                    "a macro in impl Session: {}",
                                    m.to_token_stream()
                                )
                                .into());
                            }
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
    }
    Ok(methods)
}

#[test]
fn every_public_session_method_has_a_row() -> TestResult {
    let with_bodies = session_methods()?;
    let methods: BTreeSet<String> = with_bodies.iter().map(|(m, _)| m.clone()).collect();
    assert!(methods.contains("query"), "found {methods:?}");
    let rows: BTreeSet<String> = PERMISSIONS.iter().map(|p| p.method.to_string()).collect();
    // Each method runs its own row's check (`with_org` checks nothing).
    for (method, body) in &with_bodies {
        let Some(p) = PERMISSIONS.iter().find(|p| p.method == method) else {
            continue;
        };
        if p.scope == tarn::Scope::Unchecked {
            continue;
        }
        let name = format!("Operation :: {:?}", p.operation);
        assert!(
            body.contains(&format!("authorize ({name} ,"))
                || body.contains(&format!("authorize_call ({name} ,")),
            "Session::{method} does not start with self.authorize({name}, …): {body}"
        );
    }
    let missing: Vec<_> = methods.difference(&rows).collect();
    let stale: Vec<_> = rows.difference(&methods).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "Session methods without a row in tarn::PERMISSIONS: {missing:?}; rows without a method: {stale:?}"
    );
    for p in PERMISSIONS {
        assert_eq!(p.operation.permission(), p, "{}", p.method);
    }
    Ok(())
}

#[tokio::test]
async fn members_are_listed_added_updated_and_removed() -> TestResult {
    let tarn = Tarn::in_memory().await?;
    let (admin_id, admin) = user_session(&tarn, "admin@example.com").await?;
    admin.create_organization("acme", "Acme").await?;
    let acme = admin.with_org("acme");

    let list = acme.members("acme").await?;
    assert_eq!(list.total_count, 1);
    assert_eq!(
        serde_json::to_value(&list.members)?,
        json!([{"user_id": admin_id, "email": "admin@example.com", "role": "admin"}])
    );

    // Roles are exactly `admin` or `member`.
    for bad in ["Admin", "owner", "", "member "] {
        let err = acme
            .add_member("acme", "x@example.com", bad)
            .await
            .err()
            .ok_or("a bad role was accepted")?;
        assert_eq!(err.status(), 400, "{bad:?}: {err}");
    }
    // Not an address; and addresses that would show otherwise than they are (U+202E
    // reverses what follows it in a member list, U+2028 breaks the line).
    for bad in [
        "not an e-mail",
        "eve\u{202e}moc.elpmaxe@x.com",
        "a@b\u{2028}.com",
    ] {
        assert_eq!(
            acme.add_member("acme", bad, "member")
                .await
                .err()
                .map(|e| e.status()),
            Some(400),
            "{bad:?}"
        );
    }

    // An existing user joins at once; an unknown e-mail is a pending invite.
    let (bob_id, bob) = user_session(&tarn, "bob@example.com").await?;
    let m = acme.add_member("acme", "Bob@Example.com", "member").await?;
    assert_eq!(
        (m.user_id.as_str(), m.email.as_str(), m.role.as_str()),
        (bob_id.as_str(), "bob@example.com", "member")
    );
    let carol = acme
        .add_member("acme", "carol@example.com", "admin")
        .await?;
    let detail = acme.organization("acme").await?;
    assert_eq!((detail.member_count, detail.pending_invites_count), (3, 1));
    let err = acme
        .add_member("acme", "bob@example.com", "admin")
        .await
        .err()
        .ok_or("a second add was accepted")?;
    assert_eq!(err.status(), 409, "{err}");
    // The invited user exists (unverified): creating it again is 409; a key verifies it.
    assert_eq!(
        tarn.create_user("carol@example.com", "Carol")
            .await
            .err()
            .map(|e| e.status()),
        Some(409)
    );
    let carol_key = tarn.create_api_key(&carol.user_id, "k").await?;
    assert_eq!(acme.organization("acme").await?.pending_invites_count, 0);
    let carol = tarn.connect(&carol_key.secret).await?;
    assert_eq!(carol.me().await?.organizations, vec!["acme".to_string()]);
    assert_eq!(bob.me().await?.organizations, vec!["acme".to_string()]);

    // Roles change; members cannot manage members.
    let bob = bob.with_org("acme");
    assert_eq!(
        bob.update_member("acme", &bob_id, "admin")
            .await
            .err()
            .map(|e| e.status()),
        Some(403)
    );
    let r = acme.update_member("acme", &bob_id, "admin").await?;
    assert_eq!(
        serde_json::to_value(&r)?,
        json!({"user_id": bob_id, "role": "admin"})
    );
    bob.update_organization("acme", "Acme by Bob").await?;
    assert_eq!(
        acme.update_member("acme", &bob_id, "root")
            .await
            .err()
            .map(|e| e.status()),
        Some(400)
    );
    assert_eq!(
        acme.update_member("acme", "no-such-user", "member")
            .await
            .err()
            .map(|e| e.status()),
        Some(404)
    );
    assert_eq!(
        acme.remove_member("acme", "no-such-user")
            .await
            .err()
            .map(|e| e.status()),
        Some(404)
    );

    // Removal ends access at once, also for a session already open.
    acme.create_workspace("ws", "WS").await?;
    bob.tables("ws").await?;
    acme.remove_member("acme", &bob_id).await?;
    assert_eq!(bob.tables("ws").await.err().map(|e| e.status()), Some(404));
    assert_eq!(
        bob.organization("acme").await.err().map(|e| e.status()),
        Some(404)
    );
    assert!(bob.me().await?.organizations.is_empty());
    assert_eq!(acme.members("acme").await?.total_count, 2);
    Ok(())
}

#[tokio::test]
async fn an_organization_always_keeps_an_admin() -> TestResult {
    let tarn = Tarn::in_memory().await?;
    let (admin_id, admin) = user_session(&tarn, "admin@example.com").await?;
    admin.create_organization("acme", "Acme").await?;
    let (other_id, other) = user_session(&tarn, "other@example.com").await?;
    admin
        .add_member("acme", "other@example.com", "member")
        .await?;

    // The only admin can neither step down nor leave.
    for err in [
        admin.update_member("acme", &admin_id, "member").await.err(),
        admin.remove_member("acme", &admin_id).await.err(),
    ] {
        let err = err.ok_or("the last admin was demoted or removed")?;
        assert_eq!(err.status(), 409, "{err}");
        assert!(err.message().contains("at least one admin"), "{err}");
    }
    // With a second admin, either may go.
    admin.update_member("acme", &other_id, "admin").await?;
    admin.update_member("acme", &admin_id, "member").await?;
    assert_eq!(
        admin
            .add_member("acme", "x@example.com", "member")
            .await
            .err()
            .map(|e| e.status()),
        Some(403)
    );
    let err = other
        .remove_member("acme", &other_id)
        .await
        .err()
        .ok_or("the last admin left")?;
    assert_eq!(err.status(), 409);
    other.remove_member("acme", &admin_id).await?;
    let list = other.members("acme").await?;
    assert_eq!(list.total_count, 1);
    assert_eq!(list.members[0].role, "admin");
    Ok(())
}

#[tokio::test]
async fn api_keys_list_when_they_were_last_used_and_never_the_secret() -> TestResult {
    let dir = tempfile::tempdir()?;
    let tarn = Tarn::open(dir.path()).await?;
    let user = tarn.create_user("k@example.com", "K").await?;
    let used = tarn.create_api_key(&user.id, "used").await?;
    let idle = tarn.create_api_key(&user.id, "idle").await?;
    assert!(used.secret.starts_with("tarn_") && used.secret.len() >= 40);
    let listed = tarn.api_keys(&user.id).await?;
    assert!(listed.iter().all(|k| k.last_used_at.is_none()));

    let s = tarn.connect(&used.secret).await?;
    s.me().await?;
    let listed = tarn.api_keys(&user.id).await?;
    let by_label = |label: &str| listed.iter().find(|k| k.label == label).cloned();
    let when = by_label("used")
        .and_then(|k| k.last_used_at)
        .ok_or("no last_used_at after a call")?;
    assert_eq!(when.len(), "2026-11-22T01:19:14Z".len(), "{when}");
    assert!(when.ends_with('Z'));
    assert_eq!(by_label("idle").and_then(|k| k.last_used_at), None);
    for k in &listed {
        let body = serde_json::to_string(k)?;
        assert!(!body.contains(&used.secret) && !body.contains(&idle.secret));
        assert!(!body.contains("secret"), "{body}");
    }

    // Uses are recorded on close and listed after a reopen.
    tarn.close().await?;
    drop((s, tarn));
    let tarn = Tarn::open(dir.path()).await?;
    let listed = tarn.api_keys(&user.id).await?;
    let after = listed
        .iter()
        .find(|k| k.label == "used")
        .and_then(|k| k.last_used_at.clone());
    assert_eq!(after.as_deref(), Some(when.as_str()));
    // A wrong secret of the right shape is 401, as is a revoked one.
    let mut wrong = used.secret.clone();
    let last = wrong.pop();
    wrong.push(if last == Some('0') { '1' } else { '0' });
    assert_eq!(
        tarn.connect(&wrong).await.err().map(|e| e.status()),
        Some(401)
    );
    tarn.revoke_api_key(&used.id).await?;
    assert_eq!(
        tarn.connect(&used.secret).await.err().map(|e| e.status()),
        Some(401)
    );
    Ok(())
}

// ---------------------------------------------------------------------------------
// Review repros: races between a call's `authorize` and the lock its change waits for.
// ---------------------------------------------------------------------------------

/// `acme` with workspace `ws` (table `t`, one row), its admin's session and a
/// member's session, both scoped to `acme`, and the member's user id.
async fn acme_with_member(tarn: &Tarn) -> tarn::Result<(Session, Session, String)> {
    let (_, admin) = user_session(tarn, "admin@example.com").await?;
    admin.create_organization("acme", "Acme").await?;
    let acme = admin.with_org("acme");
    acme.create_workspace("ws", "WS").await?;
    acme.query(
        "ws",
        r#"CREATE TABLE "ws"."t" (id INT8 PRIMARY KEY, body TEXT) USING engine"#,
        &[],
    )
    .await?;
    acme.query("ws", r#"INSERT INTO "ws"."t" VALUES (1, 'one')"#, &[])
        .await?;
    let (member_id, member) = user_session(tarn, "member@example.com").await?;
    acme.add_member("acme", "member@example.com", "member")
        .await?;
    Ok((acme, member.with_org("acme"), member_id))
}

/// An upload lands under the membership it started in or not at all (issue 34): a
/// member removed and added again while a table or file upload streams gets 404 and
/// creates nothing, though the catalog says they are a member when it commits (the
/// upload had landed, 201).
#[tokio::test]
async fn an_upload_of_a_member_removed_and_added_again_lands_nowhere() -> TestResult {
    use tokio::io::AsyncWriteExt;
    let tarn = Tarn::in_memory().await?;
    let (acme, member, member_id) = acme_with_member(&tarn).await?;
    let body: String = std::iter::once("a,b\n".to_string())
        .chain((0..50_000).map(|i| format!("{i},row {i}\n")))
        .collect();
    let body = body.into_bytes();
    for kind in ["table", "bound table", "file"] {
        // A client that sends part of the file, then waits: the pipe's buffer is
        // smaller than the part, so the write returning means the upload has begun.
        let (mut client, reader) = tokio::io::duplex(16 << 10);
        let upload = {
            let (member, kind) = (member.clone(), kind.to_string());
            tokio::spawn(async move {
                match kind.as_str() {
                    "table" => member
                        .upload_table("ws", "up", "up.csv", reader)
                        .await
                        .map(drop),
                    "bound table" => {
                        let ws = member.bind_workspace("ws").await?;
                        ws.upload_table("up", "up.csv", reader).await.map(drop)
                    }
                    _ => member
                        .upload_file("ws", "up.csv", "text/csv", reader)
                        .await
                        .map(drop),
                }
            })
        };
        client.write_all(&body[..200_000]).await?;
        acme.remove_member("acme", &member_id).await?;
        acme.add_member("acme", "member@example.com", "member")
            .await?;
        client.write_all(&body[200_000..]).await?;
        drop(client);
        let err = upload.await?.expect_err(kind);
        assert_eq!(err.status(), 404, "{kind}: {err}");
        assert!(acme.table("ws", "up").await.is_err(), "{kind}");
        assert_eq!(acme.files("ws", None, None).await?.total_count, 0, "{kind}");
    }
    // A membership kept throughout: the upload lands.
    member.upload_table("ws", "up", "up.csv", &body[..]).await?;
    Ok(())
}

/// `sql` run by `s` in workspace `ws` on a task of its own.
fn spawn_query(s: &Session, sql: impl Into<String>) -> tokio::task::JoinHandle<tarn::Result<()>> {
    let (s, sql) = (s.clone(), sql.into());
    tokio::spawn(async move { s.query("ws", &sql, &[]).await.map(drop) })
}

/// A cross join large enough that counting it takes a second or so.
const SLOW_FROM: &str = "FROM generate_series(1, 25000) AS a(v) \
    CROSS JOIN generate_series(1, 25000) AS b(w) WHERE a.v + b.w > 3";

/// A statement of `s` that holds the DDL lock for a second or so (a CREATE TABLE AS
/// over [`SLOW_FROM`]: `create_table` takes the DDL lock before it runs the query).
fn hold_ddl_lock(s: &Session) -> tokio::task::JoinHandle<tarn::Result<()>> {
    spawn_query(
        s,
        format!(r#"CREATE TABLE "ws"."slow" AS SELECT count(*) AS c {SLOW_FROM}"#),
    )
}

const SETTLE: std::time::Duration = std::time::Duration::from_millis(150);

/// A member removed while their SQL DDL would queue for the DDL lock (behind the
/// removal) creates nothing: the statement waits for the removal and is then refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn member_removed_while_queued_for_the_ddl_lock_cannot_create_a_table() -> TestResult {
    let tarn = Tarn::in_memory().await?;
    let (acme, member, member_id) = acme_with_member(&tarn).await?;

    let slow = hold_ddl_lock(&acme);
    tokio::time::sleep(SETTLE).await; // the slow statement holds the DDL lock
    // The removal queues first for the DDL lock...
    let removal = {
        let acme = acme.clone();
        tokio::spawn(async move { acme.remove_member("acme", &member_id).await })
    };
    tokio::time::sleep(SETTLE).await;
    // ...then the member's CREATE TABLE, which waits for the removal.
    let create = spawn_query(
        &member,
        r#"CREATE TABLE "ws"."sneaky" (id INT8) USING engine"#,
    );
    tokio::time::sleep(SETTLE).await;
    assert!(
        !slow.is_finished(),
        "the DDL lock was not held long enough for this test"
    );
    slow.await??;
    removal.await??;
    let created = create.await?;
    // The membership is gone: the member's session sees 404 from now on...
    assert_eq!(
        member.tables("ws").await.err().map(|e| e.status()),
        Some(404)
    );
    // ...and the statement that waited for the removal created nothing.
    let names: Vec<String> = acme
        .tables("ws")
        .await?
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert!(
        created.is_err() && !names.contains(&"sneaky".to_string()),
        "a removed member created a table after remove_member returned: {created:?}, tables {names:?}"
    );
    Ok(())
}

/// Revoking a key is effective immediately, also for open sessions: a call authorized
/// just before `revoke_api_key` committed, and queued behind it for the DDL lock, checks
/// the key again under the lock and is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn key_revoked_while_queued_for_the_ddl_lock_cannot_add_a_member() -> TestResult {
    let tarn = Tarn::in_memory().await?;
    let (acme, _member, _) = acme_with_member(&tarn).await?;
    let me = acme.me().await?;
    let key = tarn.create_api_key(&me.id, "to revoke").await?;
    let doomed = tarn.connect(&key.secret).await?.with_org("acme");

    let slow = hold_ddl_lock(&acme);
    tokio::time::sleep(SETTLE).await;
    let revoke = {
        let tarn = tarn.clone();
        let id = key.id.clone();
        tokio::spawn(async move { tarn.revoke_api_key(&id).await })
    };
    tokio::time::sleep(SETTLE).await;
    let add = {
        let doomed = doomed.clone();
        tokio::spawn(async move {
            doomed
                .add_member("acme", "intruder@example.com", "admin")
                .await
        })
    };
    tokio::time::sleep(SETTLE).await;
    assert!(
        !slow.is_finished(),
        "the DDL lock was not held long enough for this test"
    );
    slow.await??;
    revoke.await??;
    let added = add.await?;
    assert_eq!(doomed.me().await.err().map(|e| e.status()), Some(401));
    let members: Vec<String> = acme
        .members("acme")
        .await?
        .members
        .into_iter()
        .map(|m| m.email)
        .collect();
    assert!(
        added.is_err() && !members.contains(&"intruder@example.com".to_string()),
        "a revoked key added an admin after revoke_api_key returned: {added:?}, members {members:?}"
    );
    Ok(())
}

/// A statement that counts for minutes (far past any wait a revocation may take).
const ENDLESS_FROM: &str = "FROM generate_series(1, 100000) AS a(v) \
    CROSS JOIN generate_series(1, 100000) AS b(w) WHERE a.v + b.w > 3";

/// Revoking a key (or removing a member) whose long statement is under way stops the
/// statement instead of waiting for it: the revocation returns at once, not at the
/// statement timeout, the statement answers as the key's calls do from then on (401,
/// or 404 for the removed member) and applies nothing, and no call of the key — SQL or
/// not — works from the moment the revocation starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn revoking_a_key_stops_its_long_statement_at_once() -> TestResult {
    let tarn = Tarn::in_memory_with(Options::new().query_timeout(Duration::from_secs(600))).await?;
    let (acme, member, member_id) = acme_with_member(&tarn).await?;
    let me = acme.me().await?;
    for (what, sql) in [
        ("a query", format!("SELECT count(*) {ENDLESS_FROM}")),
        (
            "a write",
            format!(r#"INSERT INTO "ws"."t" (id, body) SELECT count(*), 'x' {ENDLESS_FROM}"#),
        ),
    ] {
        let key = tarn.create_api_key(&me.id, "to revoke").await?;
        let doomed = tarn.connect(&key.secret).await?.with_org("acme");
        let long = spawn_query(&doomed, sql.clone());
        tokio::time::sleep(SETTLE * 3).await;
        assert!(!long.is_finished(), "{what} ended early: {:?}", long.await);
        let started = Instant::now();
        let revoke = {
            let (tarn, id) = (tarn.clone(), key.id.clone());
            tokio::spawn(async move { tarn.revoke_api_key(&id).await })
        };
        revoke.await??;
        let waited = started.elapsed();
        let answer = long.await?;
        assert_eq!(
            answer.as_ref().err().map(|e| e.status()),
            Some(401),
            "{what}: {answer:?}"
        );
        // Minutes of counting were left: the revocation did not wait for them.
        assert!(
            waited < Duration::from_secs(60),
            "{what}: revoking waited {waited:?}"
        );
        assert_eq!(
            doomed.tables("ws").await.err().map(|e| e.status()),
            Some(401)
        );
        assert_eq!(
            doomed
                .create_workspace("sneaky", "S")
                .await
                .err()
                .map(|e| e.status()),
            Some(401)
        );
    }
    let r = acme
        .query(
            "ws",
            r#"SELECT count(*) FROM "ws"."t" WHERE body = 'x'"#,
            &[],
        )
        .await?;
    assert_eq!(
        r.rows,
        Some(vec![vec![json!(0)]]),
        "the stopped write applied rows"
    );

    // A member removed while their long statement runs: the same, with the member's 404.
    let long = spawn_query(&member, format!("SELECT count(*) {ENDLESS_FROM}"));
    tokio::time::sleep(SETTLE * 3).await;
    assert!(!long.is_finished());
    let started = Instant::now();
    acme.remove_member("acme", &member_id).await?;
    assert!(started.elapsed() < Duration::from_secs(60));
    let answer = long.await?;
    assert_eq!(
        answer.as_ref().err().map(|e| e.status()),
        Some(404),
        "{answer:?}"
    );
    // A removal that fails (the last admin) stops nothing of the admin's.
    let admin_id = me.id.clone();
    let long = spawn_query(&acme, format!("SELECT count(*) {SLOW_FROM}"));
    tokio::time::sleep(SETTLE).await;
    assert_eq!(
        acme.remove_member("acme", &admin_id)
            .await
            .err()
            .map(|e| e.status()),
        Some(409)
    );
    long.await??;
    Ok(())
}

/// "Removing a member ends access at once, also for sessions already open": a write
/// authorized before the removal but queued for its table's writer lock (held by a
/// slow writer) is waited for by `remove_member` — it lands before the removal returns,
/// never after — and the member's next write is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn member_removed_while_queued_for_a_table_lock_cannot_write() -> TestResult {
    let tarn = Tarn::in_memory().await?;
    let (acme, member, member_id) = acme_with_member(&tarn).await?;

    // The admin's slow INSERT holds `t`'s writer lock.
    let slow = spawn_query(
        &acme,
        format!(r#"INSERT INTO "ws"."t" (id, body) SELECT 1000 + count(*), 'slow' {SLOW_FROM}"#),
    );
    tokio::time::sleep(SETTLE).await;
    let write = spawn_query(
        &member,
        r#"INSERT INTO "ws"."t" VALUES (2, 'after removal')"#,
    );
    tokio::time::sleep(SETTLE).await;
    assert!(
        !slow.is_finished(),
        "the table lock was not held long enough for this test"
    );
    acme.remove_member("acme", &member_id).await?;
    // The removal waited for the member's write under way: if that write lands at all,
    // it is visible the moment the removal returns.
    let count_2 = r#"SELECT count(*) FROM "ws"."t" WHERE id = 2"#;
    let visible_at_removal = acme.query("ws", count_2, &[]).await?.rows;
    assert_eq!(
        member.tables("ws").await.err().map(|e| e.status()),
        Some(404)
    );
    // Nor can the member start another.
    assert_eq!(
        member
            .query("ws", r#"INSERT INTO "ws"."t" VALUES (3, 'x')"#, &[])
            .await
            .err()
            .map(|e| e.status()),
        Some(404)
    );
    slow.await??;
    let written = write.await?;
    let r = acme
        .query(
            "ws",
            r#"SELECT count(*) FROM "ws"."t" WHERE id IN (2, 3)"#,
            &[],
        )
        .await?;
    let rows_written = if written.is_ok() { 1 } else { 0 };
    assert_eq!(r.rows, Some(vec![vec![json!(rows_written)]]), "{written:?}");
    assert_eq!(
        visible_at_removal, r.rows,
        "a removed member wrote a row after remove_member returned: {written:?}"
    );
    Ok(())
}

/// The last-admin rule holds under concurrency: the checks run under the DDL lock
/// against the catalog as it is then (two admins demoting or removing each other, or
/// themselves, at once never leave `acme` without an admin).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_demotions_and_removals_keep_an_admin() -> TestResult {
    for round in 0..20 {
        let tarn = Tarn::in_memory().await?;
        let (a_id, a) = user_session(&tarn, "a@example.com").await?;
        a.create_organization("acme", "Acme").await?;
        let (b_id, b) = user_session(&tarn, "b@example.com").await?;
        a.add_member("acme", "b@example.com", "admin").await?;
        let (ra, rb) = match round % 3 {
            // Each demotes themselves.
            0 => {
                let (x, y) = tokio::join!(
                    tokio::spawn({
                        let (a, id) = (a.clone(), a_id.clone());
                        async move { a.update_member("acme", &id, "member").await.map(drop) }
                    }),
                    tokio::spawn({
                        let (b, id) = (b.clone(), b_id.clone());
                        async move { b.update_member("acme", &id, "member").await.map(drop) }
                    }),
                );
                (x?, y?)
            }
            // Each removes the other.
            1 => {
                let (x, y) = tokio::join!(
                    tokio::spawn({
                        let (a, id) = (a.clone(), b_id.clone());
                        async move { a.remove_member("acme", &id).await }
                    }),
                    tokio::spawn({
                        let (b, id) = (b.clone(), a_id.clone());
                        async move { b.remove_member("acme", &id).await }
                    }),
                );
                (x?, y?)
            }
            // Each removes themselves.
            _ => {
                let (x, y) = tokio::join!(
                    tokio::spawn({
                        let (a, id) = (a.clone(), a_id.clone());
                        async move { a.remove_member("acme", &id).await }
                    }),
                    tokio::spawn({
                        let (b, id) = (b.clone(), b_id.clone());
                        async move { b.remove_member("acme", &id).await }
                    }),
                );
                (x?, y?)
            }
        };
        let statuses = [&ra, &rb].map(|r| r.as_ref().err().map_or(200, |e| e.status()));
        assert_eq!(
            statuses.iter().filter(|s| **s == 200).count(),
            1,
            "round {round}: {statuses:?}"
        );
        let list = match a.members("acme").await {
            Ok(list) => list,
            Err(_) => b.members("acme").await?,
        };
        assert_eq!(
            list.members.iter().filter(|m| m.role == "admin").count(),
            1,
            "round {round}: {:?}",
            list.members
        );
    }
    Ok(())
}

/// An outsider learns nothing from the calls that name an organization or use the
/// session's: a real organization they are not in and one that does not exist give
/// the same status and message, and bad arguments (role, e-mail, id) are not checked
/// before membership.
#[tokio::test]
async fn outsiders_cannot_tell_an_organization_exists() -> TestResult {
    let tarn = Tarn::in_memory().await?;
    let (_, admin) = user_session(&tarn, "admin@example.com").await?;
    admin.create_organization("acme", "Acme").await?;
    admin.with_org("acme").create_workspace("ws", "WS").await?;
    let (member_id, _) = user_session(&tarn, "member@example.com").await?;
    admin
        .add_member("acme", "member@example.com", "member")
        .await?;
    let (_, outsider) = user_session(&tarn, "outsider@example.com").await?;

    async fn probe(s: &Session, org: &str, member_id: &str) -> Vec<(u16, String)> {
        let o = s.with_org(org);
        let rs: Vec<tarn::Result<()>> = vec![
            s.organization(org).await.map(drop),
            s.update_organization(org, "x").await.map(drop),
            s.delete_organization(org).await,
            s.members(org).await.map(drop),
            s.add_member(org, "x@example.com", "member").await.map(drop),
            s.add_member(org, "x@example.com", "owner").await.map(drop),
            s.add_member(org, "not an e-mail", "member").await.map(drop),
            s.update_member(org, member_id, "admin").await.map(drop),
            s.update_member(org, member_id, "root").await.map(drop),
            s.update_member(org, "no-such-user", "admin")
                .await
                .map(drop),
            s.remove_member(org, member_id).await,
            s.remove_member(org, "no-such-user").await,
            o.workspaces().await.map(drop),
            o.workspace("ws").await.map(drop),
            o.workspace("nope").await.map(drop),
            o.create_workspace("ws", "x").await.map(drop),
            o.create_workspace("Bad Id!", "x").await.map(drop),
            o.update_workspace("ws", "x").await.map(drop),
            o.delete_workspace("ws").await,
            o.tables("ws").await.map(drop),
            o.table("ws", "t").await.map(drop),
            o.drop_table("ws", "t").await,
            o.views("ws").await.map(drop),
            o.view("ws", "v").await.map(drop),
            o.view("ws", "nope").await.map(drop),
            o.query("ws", "SELEC nonsense", &[]).await.map(drop),
            o.query_batch("ws", "SELECT 1", &[]).await.map(drop),
        ];
        rs.into_iter()
            .map(|r| {
                r.err().map_or((200, String::new()), |e| {
                    (e.status(), e.message().replace(org, "<org>"))
                })
            })
            .collect()
    }
    let real = probe(&outsider, "acme", &member_id).await;
    let fake = probe(&outsider, "acmf", &member_id).await;
    assert_eq!(real, fake);
    assert!(real.iter().all(|(s, _)| *s == 404), "{real:?}");
    Ok(())
}

/// The re-check under the DDL lock that the admin calls do (SPEC §1 *Decided*), which
/// nothing else tests: an admin demoted while their `delete_organization` waits for
/// the DDL lock is refused (403) and the organization stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn admin_demoted_while_queued_for_the_ddl_lock_is_refused() -> TestResult {
    let tarn = Tarn::in_memory().await?;
    let (acme, member, member_id) = acme_with_member(&tarn).await?;
    acme.update_member("acme", &member_id, "admin").await?;
    let me = acme.me().await?;

    let slow = hold_ddl_lock(&acme);
    tokio::time::sleep(SETTLE).await;
    let demote = {
        let acme = acme.clone();
        tokio::spawn(async move { acme.update_member("acme", &member_id, "member").await })
    };
    tokio::time::sleep(SETTLE).await;
    let delete = {
        let member = member.clone();
        tokio::spawn(async move { member.delete_organization("acme").await })
    };
    tokio::time::sleep(SETTLE).await;
    assert!(
        !slow.is_finished(),
        "the DDL lock was not held long enough for this test"
    );
    slow.await??;
    demote.await??;
    assert_eq!(delete.await?.err().map(|e| e.status()), Some(403));
    assert_eq!(acme.organization("acme").await?.member_count, 2);
    assert_eq!(acme.me().await?.id, me.id);
    Ok(())
}

/// SPEC §2: bad parameters are 400. `add_member` is the first way a tenant (an
/// organization's admin, not the console) creates user records, and it accepts any
/// string with an `@`: each of these becomes a permanent pending user (users cannot
/// be deleted) listed among the organization's members.
#[tokio::test]
async fn add_member_rejects_malformed_emails() -> TestResult {
    let tarn = Tarn::in_memory().await?;
    let (_, admin) = user_session(&tarn, "admin@example.com").await?;
    admin.create_organization("acme", "Acme").await?;
    let mut accepted = Vec::new();
    for bad in [
        "@",
        "a@",
        "@example.com",
        "a b@example.com",
        "x\0@example.com",
        "a@b@c",
        // White space other than spaces around an address is refused, not trimmed.
        "\nq3@q.q",
        "q2@q.q\t",
        "q4@q.q\r\n",
        "\u{a0}q5@q.q",
        "q6@q.q\u{3000}",
    ] {
        if let Ok(m) = admin.add_member("acme", bad, "member").await {
            accepted.push(m.email);
        }
    }
    assert!(
        accepted.is_empty(),
        "accepted as e-mail addresses: {accepted:?}"
    );
    Ok(())
}

/// A pending invite as admin does not count as the admin an organization keeps: it may
/// never be accepted (a typo), and then nobody could manage the organization.
#[tokio::test]
async fn a_pending_admin_does_not_let_the_last_admin_go() -> TestResult {
    let tarn = Tarn::in_memory().await?;
    let (admin_id, admin) = user_session(&tarn, "admin@example.com").await?;
    admin.create_organization("acme", "Acme").await?;
    let typo = admin
        .add_member("acme", "amdin@example.com", "admin")
        .await?;
    for err in [
        admin.remove_member("acme", &admin_id).await.err(),
        admin.update_member("acme", &admin_id, "member").await.err(),
    ] {
        assert_eq!(err.map(|e| e.status()), Some(409));
    }
    // The pending admin itself can be demoted or removed.
    admin.update_member("acme", &typo.user_id, "member").await?;
    admin.remove_member("acme", &typo.user_id).await?;
    // Once verified (it has a key), it counts.
    let real = admin
        .add_member("acme", "second@example.com", "admin")
        .await?;
    tarn.create_api_key(&real.user_id, "k").await?;
    admin.remove_member("acme", &admin_id).await?;
    Ok(())
}

/// Display names and labels of catalog records are bounded (five organizations with
/// 50M-character names filled the catalog every tenant shares and made each DDL take a
/// second): past 256 characters, or with control characters, a 400 naming the field,
/// and nothing is stored.
#[tokio::test]
async fn names_and_labels_of_catalog_records_are_bounded() -> TestResult {
    let tarn = Tarn::in_memory().await?;
    let long = "n".repeat(tarn::MAX_TEXT_FIELD_CHARS + 1);
    let fine = "é".repeat(tarn::MAX_TEXT_FIELD_CHARS);
    let e = tarn.create_user("a@example.com", &long).await.unwrap_err();
    assert_eq!(e.status(), 400, "{e}");
    assert!(e.message().starts_with("name is too long"), "{e}");
    let user = tarn.create_user("a@example.com", &fine).await?;
    let e = tarn.create_api_key(&user.id, &long).await.unwrap_err();
    assert!(e.message().starts_with("label is too long"), "{e}");
    let key = tarn.create_api_key(&user.id, "k").await?;
    let s = tarn.connect(&key.secret).await?;
    for bad in [
        long.as_str(),
        "a\u{0}b",
        "a\u{2028}b",
        "evil\u{202E}gpj.exe",
        "",
        "   ",
    ] {
        let e = s.create_organization("big", bad).await.unwrap_err();
        assert_eq!(e.status(), 400, "{e}");
        assert!(e.message().starts_with("name "), "{e}");
    }
    assert!(s.organizations().await?.is_empty());
    s.create_organization("acme", &fine).await?;
    let s = s.with_org("acme");
    let e = s.update_organization("acme", &long).await.unwrap_err();
    assert_eq!(e.status(), 400, "{e}");
    let e = s.create_workspace("w", &long).await.unwrap_err();
    assert_eq!(e.status(), 400, "{e}");
    s.create_workspace("w", &fine).await?;
    let e = s.update_workspace("w", &long).await.unwrap_err();
    assert_eq!(e.status(), 400, "{e}");
    // A required display name is not empty (a member list of blank entries).
    for (e, what) in [
        (
            s.create_workspace("w2", "").await.unwrap_err(),
            "create_workspace",
        ),
        (
            s.update_workspace("w", " ").await.unwrap_err(),
            "update_workspace",
        ),
        (
            s.update_organization("acme", "").await.unwrap_err(),
            "update_organization",
        ),
    ] {
        assert_eq!(e.status(), 400, "{what}: {e}");
        assert_eq!(e.message(), "name must not be empty", "{what}");
    }
    assert_eq!(s.workspace("w").await?.workspace.name, fine);
    // Invalid ids and addresses are quoted in part, not echoed whole.
    let huge = "X".repeat(1 << 20);
    let e = s.create_workspace(&huge, "w").await.unwrap_err();
    assert_eq!(e.status(), 400, "{e}");
    assert!(e.message().len() < 300, "{} bytes", e.message().len());
    let e = s
        .add_member("acme", &format!("{huge} @x"), "member")
        .await
        .unwrap_err();
    assert_eq!(e.status(), 400, "{e}");
    assert!(e.message().len() < 300, "{} bytes", e.message().len());
    Ok(())
}

/// One user cannot fill the catalog all organizations share with organizations of its
/// own (25,000 slowed every tenant's DDL forty-fold), and an invited user removed before
/// getting a key is forgotten with the invitation (it was left counting toward no
/// organization's share).
#[tokio::test]
async fn organizations_per_user_and_withdrawn_invitations_are_bounded() -> TestResult {
    let tarn = Tarn::in_memory_with(tarn::Options::new().max_organizations_per_user(3)).await?;
    let ada = tarn.create_user("ada@example.com", "Ada").await?;
    let ada = tarn
        .connect(&tarn.create_api_key(&ada.id, "k").await?.secret)
        .await?;
    for id in ["o1", "o2", "o3"] {
        ada.create_organization(id, id).await?;
    }
    let e = ada.create_organization("o4", "o4").await.unwrap_err();
    assert_eq!(e.status(), 400, "{e}");
    assert!(e.message().contains("max_organizations_per_user"), "{e}");
    // Another user is not held by ada's count.
    let bob = tarn.create_user("bob@example.com", "Bob").await?;
    let bob = tarn
        .connect(&tarn.create_api_key(&bob.id, "k").await?.secret)
        .await?;
    bob.create_organization("b1", "b1").await?;
    // Deleting one makes room again.
    ada.delete_organization("o3").await?;
    ada.create_organization("o4", "o4").await?;

    // Invited, then removed before having a key: the user record goes too, so the
    // address can be created anew (409 while it lingered).
    let o1 = ada.with_org("o1");
    let invited = o1.add_member("o1", "carol@example.com", "member").await?;
    o1.remove_member("o1", &invited.user_id).await?;
    tarn.create_user("carol@example.com", "Carol").await?;
    // The same when the organization that invited them is deleted.
    o1.add_member("o1", "dan@example.com", "member").await?;
    ada.delete_organization("o1").await?;
    tarn.create_user("dan@example.com", "Dan").await?;
    // A user with a key, or still in another organization, stays.
    let o2 = ada.with_org("o2");
    let o4 = ada.with_org("o4");
    let erin = o2.add_member("o2", "erin@example.com", "member").await?;
    o4.add_member("o4", "erin@example.com", "member").await?;
    o2.remove_member("o2", &erin.user_id).await?;
    let e = tarn
        .create_user("erin@example.com", "Erin")
        .await
        .unwrap_err();
    assert_eq!(e.status(), 409, "{e}");
    Ok(())
}
