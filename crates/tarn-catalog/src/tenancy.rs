//! Users, API keys, organizations, members and workspaces: the records of who may
//! do what where, and the catalog's lookups of them.

use serde::{Deserialize, Serialize};

use crate::{Catalog, Timestamp};

/// A user.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserRecord {
    /// User id (a UUID).
    pub id: String,
    /// E-mail address, unique.
    pub email: String,
    /// Display name.
    pub name: String,
    /// Whether the user has had an API key (invited users are unverified until then).
    pub verified: bool,
    /// When the user was made (stored as Unix seconds).
    pub date_joined: Timestamp,
}

/// An API key; only the SHA-256 of the secret is kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApiKeyRecord {
    /// Key id (a UUID).
    pub id: String,
    /// Owner.
    pub user_id: String,
    /// Free-form label.
    pub label: String,
    /// Hex SHA-256 of the secret.
    pub hash: String,
    /// When it was made (stored as ISO 8601 text).
    #[serde(with = "crate::time::iso_text")]
    pub created_at: Timestamp,
    /// Revoked keys never authenticate again.
    pub revoked: bool,
    /// When the key was last used (stored as Unix seconds), as of the last time uses were
    /// recorded (the facade counts uses in memory and records them on close).
    #[serde(default)]
    pub last_used: Option<Timestamp>,
}

/// An organization.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OrgRecord {
    /// Id chosen by the creator.
    pub id: String,
    /// Display name.
    pub name: String,
    /// Creating user id.
    pub creator: String,
    /// When it was made (stored as ISO 8601 text).
    #[serde(with = "crate::time::iso_text")]
    pub created_at: Timestamp,
}

/// A member's role in an organization.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// May do everything in the organization.
    Admin,
    /// May read and write data but not manage the organization.
    Member,
}

impl Role {
    /// Parses `admin` or `member` exactly.
    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "admin" => Some(Role::Admin),
            "member" => Some(Role::Member),
            _ => None,
        }
    }

    /// The role's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Member => "member",
        }
    }
}

/// Membership of a user in an organization.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemberRecord {
    /// Organization id.
    pub org_id: String,
    /// User id.
    pub user_id: String,
    /// Role.
    pub role: Role,
}

/// A workspace: the SQL schema of its tables.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkspaceRecord {
    /// Id chosen by the creator, unique within the organization.
    pub id: String,
    /// Owning organization.
    pub org_id: String,
    /// Display name.
    pub name: String,
    /// When it was made (stored as ISO 8601 text).
    #[serde(with = "crate::time::iso_text")]
    pub created_at: Timestamp,
    /// Chosen when the workspace is created (a UUID) and never reused: it tells this
    /// workspace from an earlier one of the same id that was deleted, which the id and
    /// `created_at` (whole seconds) cannot. An upload is bound to the workspace it
    /// started in by it. Empty for workspaces created before it existed (any workspace
    /// created since has one, so it still differs from theirs).
    #[serde(default)]
    pub uid: String,
}

impl Catalog {
    /// A user by id.
    pub fn user(&self, id: &str) -> Option<&UserRecord> {
        self.users.get(id)
    }

    /// A user by e-mail.
    pub fn user_by_email(&self, email: &str) -> Option<&UserRecord> {
        self.users_by_email
            .get(email)
            .and_then(|id| self.users.get(id))
    }

    /// An API key by id.
    pub fn api_key(&self, id: &str) -> Option<&ApiKeyRecord> {
        self.api_keys.get(id)
    }

    /// The API key whose secret hashes to `hash`.
    pub fn api_key_by_hash(&self, hash: &str) -> Option<&ApiKeyRecord> {
        self.keys_by_hash
            .get(hash)
            .and_then(|id| self.api_keys.get(id))
    }

    /// A user's API keys, oldest first.
    pub fn api_keys_of(&self, user_id: &str) -> Vec<&ApiKeyRecord> {
        let mut keys: Vec<_> = self
            .api_keys
            .values()
            .filter(|k| k.user_id == user_id)
            .collect();
        keys.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
        keys
    }

    /// An organization by id.
    pub fn org(&self, id: &str) -> Option<&OrgRecord> {
        self.orgs.get(id)
    }

    /// The role of `user_id` in `org_id`, if a member.
    pub fn role(&self, org_id: &str, user_id: &str) -> Option<Role> {
        self.members
            .get(&(org_id.to_string(), user_id.to_string()))
            .copied()
    }

    /// The organizations `user_id` belongs to, by id.
    pub fn orgs_of(&self, user_id: &str) -> Vec<&OrgRecord> {
        self.members
            .keys()
            .filter(|(_, u)| u == user_id)
            .filter_map(|(o, _)| self.orgs.get(o))
            .collect()
    }

    /// Members of an organization as (user, role).
    pub fn members_of(&self, org_id: &str) -> Vec<(&UserRecord, Role)> {
        self.members
            .iter()
            .filter(|((o, _), _)| o == org_id)
            .filter_map(|((_, u), r)| self.users.get(u).map(|u| (u, *r)))
            .collect()
    }

    /// A workspace of an organization.
    pub fn workspace(&self, org_id: &str, ws_id: &str) -> Option<&WorkspaceRecord> {
        self.workspaces
            .get(&(org_id.to_string(), ws_id.to_string()))
    }

    /// Workspaces of an organization, by id.
    pub fn workspaces_of(&self, org_id: &str) -> Vec<&WorkspaceRecord> {
        self.workspaces
            .iter()
            .filter(|((o, _), _)| o == org_id)
            .map(|(_, w)| w)
            .collect()
    }
}
