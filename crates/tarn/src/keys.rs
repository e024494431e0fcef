//! Users and API keys, and connecting with a key: what [`Tarn`] does before a
//! [`Session`] exists.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tarn_catalog::{ApiKeyRecord, Catalog, CatalogOp, Timestamp, UserRecord};
use tarn_storage::Op;

use crate::access::revoked;
use crate::{
    ApiKeyInfo, Bucket, Error, NewApiKey, Result, Session, Tarn, User, check_text_field,
    constant_time_eq, hash_secret, new_secret, new_user, normalize_email,
};

impl Tarn {
    /// Writes the key uses counted since open to the catalog (see `Inner::key_uses`).
    pub(crate) async fn record_key_uses(&self) -> Result<()> {
        if self.db().is_closed() {
            return Ok(());
        }
        let unrecorded = || -> Vec<(String, Timestamp)> {
            let catalog = self.catalog();
            self.inner
                .key_uses
                .lock()
                .iter()
                .filter_map(|(id, u)| Some((id.clone(), Timestamp::from_unix_seconds(u.get()?))))
                .filter(|(id, at)| catalog.api_key(id).is_some_and(|k| k.last_used < Some(*at)))
                .collect()
        };
        // Nothing to record: no wait for the DDL lock (a DDL statement in flight).
        if unrecorded().is_empty() {
            return Ok(());
        }
        let ddl = self.inner.engine.locks().ddl().await;
        let uses = unrecorded();
        if uses.is_empty() {
            return Ok(());
        }
        self.commit(
            vec![Op::Catalog(CatalogOp::RecordKeyUses { uses })],
            vec![ddl],
        )
        .await
    }

    /// Creates a user (the embedded stand-in for the web console). E-mails are unique
    /// (compared in lower case). An e-mail added to an organization before its user
    /// existed ([`Session::add_member`]) already has an unverified user: this is 409 too.
    pub async fn create_user(&self, email: &str, name: &str) -> Result<User> {
        let email = normalize_email(email)?;
        check_text_field("name", name)?;
        let ddl = self.inner.engine.locks().ddl().await;
        if self.catalog().user_by_email(&email).is_some() {
            return Err(Error::conflict(format!("user \"{email}\" already exists")));
        }
        let user = new_user(email, name.to_string());
        self.commit(
            vec![Op::Catalog(CatalogOp::CreateUser(user.clone()))],
            vec![ddl],
        )
        .await?;
        Ok(self.user_view(&self.catalog(), &user))
    }

    pub(crate) fn user_view(&self, catalog: &Catalog, u: &UserRecord) -> User {
        User {
            id: u.id.clone(),
            email: u.email.clone(),
            name: u.name.clone(),
            verified: u.verified,
            organizations: catalog
                .orgs_of(&u.id)
                .iter()
                .map(|o| o.id.clone())
                .collect(),
            display_name: u.name.clone(),
            date_joined: u.date_joined.unix_seconds(),
        }
    }

    /// Creates an API key for a user; the secret is returned only here (only its SHA-256
    /// is stored). The user becomes verified.
    pub async fn create_api_key(&self, user_id: &str, label: &str) -> Result<NewApiKey> {
        check_text_field("label", label)?;
        let ddl = self.inner.engine.locks().ddl().await;
        let catalog = self.catalog();
        let user = catalog.user(user_id).ok_or_else(|| {
            Error::not_found(format!(
                "user {} does not exist",
                tarn_catalog::shown(user_id)
            ))
        })?;
        let secret = new_secret();
        let record = ApiKeyRecord {
            id: uuid::Uuid::new_v4().to_string(),
            user_id: user_id.to_string(),
            label: label.to_string(),
            hash: hash_secret(&secret),
            created_at: Timestamp::now(),
            revoked: false,
            last_used: None,
        };
        let mut ops = vec![Op::Catalog(CatalogOp::CreateApiKey(record.clone()))];
        if !user.verified {
            ops.push(Op::Catalog(CatalogOp::VerifyUser {
                user_id: user_id.to_string(),
            }));
        }
        self.commit(ops, vec![ddl]).await?;
        Ok(NewApiKey {
            id: record.id,
            label: record.label,
            secret,
            created_at: record.created_at.iso(),
        })
    }

    /// A user's API keys (never the secrets), with when each was last used.
    pub async fn api_keys(&self, user_id: &str) -> Result<Vec<ApiKeyInfo>> {
        let catalog = self.catalog();
        if catalog.user(user_id).is_none() {
            return Err(Error::not_found(format!(
                "user {} does not exist",
                tarn_catalog::shown(user_id)
            )));
        }
        let uses = self.inner.key_uses.lock();
        Ok(catalog
            .api_keys_of(user_id)
            .into_iter()
            .map(|k| ApiKeyInfo {
                id: k.id.clone(),
                label: k.label.clone(),
                created_at: k.created_at.iso(),
                last_used_at: k
                    .last_used
                    .max(
                        uses.get(&k.id)
                            .and_then(|u| u.get())
                            .map(Timestamp::from_unix_seconds),
                    )
                    .map(Timestamp::iso),
                revoked: k.revoked,
            })
            .collect())
    }

    /// Revokes a key: it never connects again, and its open sessions are refused at
    /// once. The key's SQL statements under way stop (they apply nothing and answer
    /// 401, as the key's calls do from now on), except commits already under way, which
    /// this waits for: nothing the key does lands after this returns.
    pub async fn revoke_api_key(&self, key_id: &str) -> Result<()> {
        let _gate = self.inner.gates.revoke_key(key_id).await;
        let ddl = self.inner.engine.locks().ddl().await;
        match self.catalog().api_key(key_id) {
            None => Err(Error::not_found(format!(
                "API key {} does not exist",
                tarn_catalog::shown(key_id)
            ))),
            Some(k) if k.revoked => Ok(()),
            Some(_) => {
                self.commit(
                    vec![Op::Catalog(CatalogOp::RevokeApiKey {
                        key_id: key_id.to_string(),
                    })],
                    vec![ddl],
                )
                .await
            }
        }
    }

    /// A session for the key's user; 401 for an unknown or revoked key.
    ///
    /// The secret's SHA-256 finds the key (how long that lookup takes can only tell
    /// something about the digest, which says nothing about the secret), and the stored
    /// digest is then compared with the computed one in constant time.
    pub async fn connect(&self, secret: &str) -> Result<Session> {
        self.check_open()?;
        let catalog = self.catalog();
        let hash = hash_secret(secret);
        let key = catalog
            .api_key_by_hash(&hash)
            .filter(|k| !k.revoked && constant_time_eq(k.hash.as_bytes(), hash.as_bytes()))
            .ok_or_else(revoked)?;
        let used = {
            let mut uses = self.inner.key_uses.lock();
            match uses.get(&key.id) {
                Some(u) => u.clone(),
                None => uses.entry(key.id.clone()).or_default().clone(),
            }
        };
        used.record();
        Ok(Session {
            tarn: self.clone(),
            user_id: key.user_id.clone(),
            key_id: key.id.clone(),
            org: None,
            settings: Arc::default(),
            used,
        })
    }

    pub(crate) fn check_open(&self) -> Result<()> {
        if self.db().is_closed() {
            return Err(tarn_storage::Error::Closed.into());
        }
        Ok(())
    }

    pub(crate) fn check_rate(&self, key_id: &str) -> Result<()> {
        let Some((rate, burst)) = self.inner.options.rate_limit else {
            return Ok(());
        };
        let mut buckets = self.inner.buckets.lock();
        let now = Instant::now();
        let b = buckets.entry(key_id.to_string()).or_insert(Bucket {
            tokens: burst as f64,
            at: now,
        });
        b.tokens = (b.tokens + now.duration_since(b.at).as_secs_f64() * rate).min(burst as f64);
        b.at = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            Ok(())
        } else {
            let wait = if rate > 0.0 {
                (1.0 - b.tokens) / rate
            } else {
                3600.0
            };
            Err(Error::rate_limited(Duration::from_secs_f64(wait)))
        }
    }
}
