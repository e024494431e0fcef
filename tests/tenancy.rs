//! The tenancy model of SPEC §1: the permission matrix run exhaustively (every
//! `Session` method × every kind of caller), members and their roles, and API keys.
//!
//! The expected statuses are written here from SPEC §1's table, independently of the
//! library's own table (`tarn::PERMISSIONS`); what ties the two to the code is
//! `every_public_session_method_has_a_row`, which parses the facade's source and fails
//! when `Session` gains a public method that the table (and so this matrix) lacks.

use std::collections::BTreeSet;

use serde_json::json;
use tarn::{Operation, PERMISSIONS, Session, Tarn};
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

/// The public methods of `Session`, read from the facade's source (every `impl Session`
/// block of every file of `crates/tarn/src`).
fn session_methods() -> Result<BTreeSet<String>, Box<dyn std::error::Error>> {
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
                syn::Item::Impl(i) if i.trait_.is_none() => {
                    let syn::Type::Path(ty) = i.self_ty.as_ref() else {
                        continue;
                    };
                    if ty.path.segments.last().is_none_or(|s| s.ident != "Session") {
                        continue;
                    }
                    for f in &i.items {
                        if let syn::ImplItem::Fn(f) = f
                            && matches!(f.vis, syn::Visibility::Public(_))
                        {
                            methods.insert(f.sig.ident.to_string());
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
    let methods = session_methods()?;
    assert!(methods.contains("query"), "found {methods:?}");
    let rows: BTreeSet<String> = PERMISSIONS.iter().map(|p| p.method.to_string()).collect();
    let missing: Vec<_> = methods.difference(&rows).collect();
    let stale: Vec<_> = rows.difference(&methods).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "Session methods without a row in tarn::PERMISSIONS: {missing:?}; rows without a method: {stale:?}"
    );
    for p in PERMISSIONS {
        assert_eq!(p.operation.permission(), &p, "{}", p.method);
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
    assert_eq!(
        acme.add_member("acme", "not an e-mail", "member")
            .await
            .err()
            .map(|e| e.status()),
        Some(400)
    );

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
