//! Organizations and their members, as a [`Session`] manages them.

use tarn_catalog::{Catalog, CatalogOp, OrgRecord, UserRecord};
use tarn_storage::Op;

use crate::access::{Locked, org_not_found};
use crate::{
    Error, IdName, Member, MemberList, MemberRole, Operation, Organization, OrganizationDetail,
    Result, Role, Session, check_display_name, new_user, normalize_email,
};

impl Session {
    /// Organizations the user belongs to.
    pub async fn organizations(&self) -> Result<Vec<Organization>> {
        let access = self.authorize(Operation::Organizations, "")?;
        Ok(access
            .catalog
            .orgs_of(&self.user_id)
            .into_iter()
            .map(org_view)
            .collect())
    }

    /// One organization with member and pending-invite counts.
    pub async fn organization(&self, id: &str) -> Result<OrganizationDetail> {
        let access = self.authorize(Operation::Organization, id)?;
        let org = access.catalog.org(id).ok_or_else(|| org_not_found(id))?;
        let members = access.catalog.members_of(id);
        Ok(OrganizationDetail {
            organization: org_view(org),
            member_count: members.len() as u64,
            pending_invites_count: members.iter().filter(|(u, _)| !u.verified).count() as u64,
        })
    }

    /// Creates an organization; the creator becomes its admin.
    pub async fn create_organization(&self, id: &str, name: &str) -> Result<IdName> {
        self.authorize(Operation::CreateOrganization, "")?;
        tarn_catalog::validate_id("organization", id)?;
        check_display_name(name)?;
        let Locked { ddl, catalog, .. } = self
            .lock_and_recheck(Operation::CreateOrganization, "")
            .await?;
        if catalog.org(id).is_some() {
            return Err(Error::conflict(format!(
                "organization \"{id}\" already exists"
            )));
        }
        let limit = self.tarn.inner.options.max_organizations_per_user;
        if catalog.orgs_created_by(&self.user_id) >= limit {
            return Err(Error::bad(format!(
                "this user has created {limit} organizations, the most one user may have \
                 (limit max_organizations_per_user); delete one first"
            )));
        }
        self.tarn
            .commit(
                vec![
                    Op::Catalog(CatalogOp::CreateOrg(OrgRecord {
                        id: id.to_string(),
                        name: name.to_string(),
                        creator: self.user_id.clone(),
                        created_at: tarn_catalog::Timestamp::now(),
                    })),
                    put_member(id, &self.user_id, Role::Admin),
                ],
                vec![ddl],
            )
            .await?;
        Ok(IdName {
            id: id.to_string(),
            name: name.to_string(),
        })
    }

    /// Renames an organization (admin).
    pub async fn update_organization(&self, id: &str, name: &str) -> Result<IdName> {
        self.authorize(Operation::UpdateOrganization, id)?;
        check_display_name(name)?;
        let Locked { ddl, .. } = self
            .lock_and_recheck(Operation::UpdateOrganization, id)
            .await?;
        self.tarn
            .commit(
                vec![Op::Catalog(CatalogOp::RenameOrg {
                    org_id: id.to_string(),
                    name: name.to_string(),
                })],
                vec![ddl],
            )
            .await?;
        Ok(IdName {
            id: id.to_string(),
            name: name.to_string(),
        })
    }

    /// Deletes an organization with its members, workspaces and tables (admin).
    pub async fn delete_organization(&self, id: &str) -> Result<()> {
        self.authorize(Operation::DeleteOrganization, id)?;
        let Locked { ddl, catalog, .. } = self
            .lock_and_recheck(Operation::DeleteOrganization, id)
            .await?;
        let mut guards = vec![ddl];
        for t in catalog.all_tables().filter(|t| t.org_id == id) {
            guards.push(self.locks().table(t.id).await);
        }
        self.tarn
            .commit(
                vec![Op::Catalog(CatalogOp::DeleteOrg {
                    org_id: id.to_string(),
                })],
                guards,
            )
            .await
    }

    /// The members of organization `org`, by e-mail.
    pub async fn members(&self, org: &str) -> Result<MemberList> {
        let access = self.authorize(Operation::Members, org)?;
        let mut members: Vec<Member> = access
            .catalog
            .members_of(org)
            .into_iter()
            .map(|(u, role)| member_view(u, role))
            .collect();
        members.sort_by(|a, b| a.email.cmp(&b.email));
        Ok(MemberList {
            total_count: members.len() as u64,
            members,
        })
    }

    /// Adds the user with e-mail `email` to organization `org` as `role` (`admin` or
    /// `member`, else 400; admin only). An e-mail with no user yet creates an unverified
    /// user (a pending invite, counted in `pending_invites_count` until the user gets
    /// an API key). An existing member is 409.
    pub async fn add_member(&self, org: &str, email: &str, role: &str) -> Result<Member> {
        self.authorize(Operation::AddMember, org)?;
        let role = parse_role(role)?;
        let email = normalize_email(email)?;
        let Locked { ddl, catalog, .. } = self.lock_and_recheck(Operation::AddMember, org).await?;
        let mut ops = Vec::new();
        let user = match catalog.user_by_email(&email) {
            Some(u) => {
                if catalog.role(org, &u.id).is_some() {
                    return Err(Error::conflict(format!(
                        "user \"{email}\" is already a member of organization \"{org}\""
                    )));
                }
                u.clone()
            }
            None => {
                let u = new_user(email, String::new());
                ops.push(Op::Catalog(CatalogOp::CreateUser(u.clone())));
                u
            }
        };
        ops.push(put_member(org, &user.id, role));
        self.tarn.commit(ops, vec![ddl]).await?;
        Ok(member_view(&user, role))
    }

    /// Changes a member's role (admin only). Demoting the organization's last admin is
    /// 409; a user who is not a member is 404.
    pub async fn update_member(&self, org: &str, user_id: &str, role: &str) -> Result<MemberRole> {
        self.authorize(Operation::UpdateMember, org)?;
        let role = parse_role(role)?;
        let Locked { ddl, catalog, .. } =
            self.lock_and_recheck(Operation::UpdateMember, org).await?;
        let current = catalog
            .role(org, user_id)
            .ok_or_else(|| member_not_found(org, user_id))?;
        if current == Role::Admin
            && role != Role::Admin
            && other_admins(&catalog, org, user_id) == 0
        {
            return Err(last_admin(org));
        }
        if current != role {
            self.tarn
                .commit(vec![put_member(org, user_id, role)], vec![ddl])
                .await?;
        }
        Ok(MemberRole {
            user_id: user_id.to_string(),
            role: role.as_str().to_string(),
        })
    }

    /// Removes a member (admin only); that user's sessions lose the organization at
    /// once. The member's SQL statements under way stop (they apply nothing and answer
    /// 404, as the member's calls do from now on), except commits already under way,
    /// which this waits for: nothing the member does lands after this returns. Removing the last admin is 409; a non-member is 404.
    pub async fn remove_member(&self, org: &str, user_id: &str) -> Result<()> {
        let access = self.authorize(Operation::RemoveMember, org)?;
        // A removal that would fail stops none of the member's calls: checked first
        // (and again under the DDL lock, below).
        removable(&access.catalog, org, user_id)?;
        // The member's calls under way stop, and their commits finish, first (see
        // `access::Gates`); the gate is taken before the DDL lock, which those calls
        // may be waiting for.
        let _gate = self.tarn.inner.gates.remove_member(org, user_id).await;
        let Locked { ddl, catalog, .. } =
            self.lock_and_recheck(Operation::RemoveMember, org).await?;
        removable(&catalog, org, user_id)?;
        self.tarn
            .commit(
                vec![Op::Catalog(CatalogOp::RemoveMember {
                    org_id: org.to_string(),
                    user_id: user_id.to_string(),
                })],
                vec![ddl],
            )
            .await
    }
}

/// 404 for a non-member, 409 for the last admin.
fn removable(catalog: &tarn_catalog::Catalog, org: &str, user_id: &str) -> Result<()> {
    let current = catalog
        .role(org, user_id)
        .ok_or_else(|| member_not_found(org, user_id))?;
    if current == Role::Admin && other_admins(catalog, org, user_id) == 0 {
        return Err(last_admin(org));
    }
    Ok(())
}

fn parse_role(role: &str) -> Result<Role> {
    Role::parse(role).ok_or_else(|| {
        Error::bad(format!(
            "invalid role \"{role}\": a role is \"admin\" or \"member\""
        ))
    })
}

fn member_not_found(org: &str, user_id: &str) -> Error {
    Error::not_found(format!(
        "user {} is not a member of organization {}",
        tarn_catalog::shown(user_id),
        tarn_catalog::shown(org)
    ))
}

fn last_admin(org: &str) -> Error {
    Error::conflict(format!(
        "organization \"{org}\" must keep at least one admin"
    ))
}

/// How many admins of organization `org` other than `user_id` can act: verified users
/// (a pending invite as admin may never be accepted, so it does not keep the
/// organization managed).
fn other_admins(catalog: &Catalog, org: &str, user_id: &str) -> usize {
    catalog
        .members_of(org)
        .iter()
        .filter(|(u, r)| *r == Role::Admin && u.verified && u.id != user_id)
        .count()
}

/// The catalog op that makes `user_id` a member of `org` as `role`.
fn put_member(org: &str, user_id: &str, role: Role) -> Op {
    Op::Catalog(CatalogOp::PutMember(tarn_catalog::MemberRecord {
        org_id: org.to_string(),
        user_id: user_id.to_string(),
        role,
    }))
}

fn member_view(u: &UserRecord, role: Role) -> Member {
    Member {
        user_id: u.id.clone(),
        email: u.email.clone(),
        role: role.as_str().to_string(),
    }
}

fn org_view(o: &OrgRecord) -> Organization {
    Organization {
        id: o.id.clone(),
        name: o.name.clone(),
        creator: o.creator.clone(),
        created_at: o.created_at.iso(),
    }
}
