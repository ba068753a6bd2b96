//! Sign-in with an identity provider, in SQL (migration 0021): who a
//! provider's (issuer, subject) is here, the sign-ins under way, the ID
//! tokens already used, the portal's group rules, and the roles the group
//! mapping gives — each write conditional on what the mapping saw, so a
//! hand change made meanwhile is never overwritten. Decisions are made in
//! `identity`; this module only reads and writes rows.

use super::accounts::{user_from_row, User, NO_PASSWORD, USER_COLUMNS};
use super::sql::SqlStore;
use super::{is_unique_violation, ResultExt, StoreError};
use crate::authz::{Role, Source};
use sqlx::any::AnyRow;
use sqlx::Row;
use std::collections::{BTreeMap, HashMap};

/// A provider's person as linked here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    pub issuer: String,
    pub subject: String,
    pub user_id: i64,
    pub last_login_ms: i64,
    pub refresh_token: Option<String>,
    /// The groups the provider named last.
    pub groups: Vec<String>,
    pub synced_at_ms: i64,
}

const IDENTITY_COLUMNS: &str =
    "issuer, subject, user_id, last_login_ms, refresh_token, groups, synced_at_ms";

fn identity_from_row(row: &AnyRow) -> Result<Identity, StoreError> {
    let groups: String = row.try_get("groups")?;
    Ok(Identity {
        issuer: row.try_get("issuer")?,
        subject: row.try_get("subject")?,
        user_id: row.try_get("user_id")?,
        last_login_ms: row.try_get("last_login_ms")?,
        refresh_token: row.try_get("refresh_token")?,
        groups: serde_json::from_str(&groups).unwrap_or_default(),
        synced_at_ms: row.try_get("synced_at_ms")?,
    })
}

/// A sign-in under way (its state's and browser cookie's digests).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Flow {
    pub state_sha256: String,
    pub browser_sha256: String,
    pub nonce: String,
    pub verifier: String,
    pub next_path: String,
    pub created_at_ms: i64,
}

/// A group rule kept in the portal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupRoleRow {
    pub group: String,
    /// `admin`, `owner` or `member`.
    pub role: String,
    /// "" for admin.
    pub quota: String,
    pub created_at_ms: i64,
    pub created_by: String,
}

/// What the group mapping does to one user, as one conditional write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MappedWrite<'a> {
    MakeAdmin,
    DropAdmin,
    Bind {
        quota: &'a str,
        role: Role,
        before: Option<Role>,
    },
    Unbind {
        quota: &'a str,
        role: Role,
    },
}

fn groups_json(groups: &[String]) -> String {
    serde_json::to_string(groups).unwrap_or_else(|_| "[]".into())
}

impl SqlStore {
    pub async fn identity(
        &self,
        issuer: &str,
        subject: &str,
    ) -> Result<Option<Identity>, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {IDENTITY_COLUMNS} FROM user_identities WHERE issuer = $1 AND subject = $2"
        ))
        .bind(issuer)
        .bind(subject)
        .fetch_optional(&self.write)
        .await?;
        row.as_ref().map(identity_from_row).transpose()
    }

    /// The identities of a user (one per issuer).
    pub async fn identities_of(&self, user_id: i64) -> Result<Vec<Identity>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {IDENTITY_COLUMNS} FROM user_identities WHERE user_id = $1 ORDER BY issuer"
        ))
        .bind(user_id)
        .fetch_all(&self.read)
        .await?;
        rows.iter().map(identity_from_row).collect()
    }

    /// Users linked to an identity provider (for the users page).
    pub async fn users_with_identity(&self) -> Result<HashMap<i64, String>, StoreError> {
        let rows = sqlx::query("SELECT user_id, issuer FROM user_identities")
            .fetch_all(&self.read)
            .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("user_id")?, r.try_get("issuer")?)))
            .collect()
    }

    /// A new user who signs in with the provider only, linked to
    /// (issuer, subject), in one transaction. `AlreadyExists` when the
    /// username is taken (by a local account, or another person).
    pub async fn sign_up(
        &self,
        issuer: &str,
        subject: &str,
        username: &str,
        now_ms: i64,
    ) -> Result<User, StoreError> {
        let mut tx = self.write.begin().await?;
        let row = sqlx::query(&format!(
            "INSERT INTO users (username, password_hash, is_admin, disabled, created_at_ms) \
             VALUES ($1, $2, 0, 0, $3) RETURNING {USER_COLUMNS}"
        ))
        .bind(username)
        .bind(NO_PASSWORD)
        .bind(now_ms)
        .fetch_one(&mut *tx)
        .await
        .on_unique(|| StoreError::AlreadyExists(format!("user {username}")))?;
        let user = user_from_row(&row)?;
        sqlx::query(
            "INSERT INTO user_identities (issuer, subject, user_id, created_at_ms, last_login_ms, synced_at_ms) \
             VALUES ($1, $2, $3, $4, $4, $4)",
        )
        .bind(issuer)
        .bind(subject)
        .bind(user.id)
        .bind(now_ms)
        .execute(&mut *tx)
        .await
        .on_unique(|| StoreError::AlreadyExists(format!("identity {subject}")))?;
        tx.commit().await?;
        Ok(user)
    }

    /// Adopts a local account for (issuer, subject): links it, and ends its
    /// password and everything made under it (the hash no password
    /// matches, a new credential generation), in one transaction. Only a
    /// person's account that is neither admin nor disabled is adopted; any
    /// other (or one that changed since it was read) is `Conflict`, and
    /// nothing is written. `AlreadyExists` when either end is linked.
    pub async fn adopt_identity(
        &self,
        issuer: &str,
        subject: &str,
        user_id: i64,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let mut tx = self.write.begin().await?;
        let ended = sqlx::query(
            "UPDATE users SET password_hash = $1, credential_gen = credential_gen + 1 \
             WHERE id = $2 AND is_admin = 0 AND disabled = 0 AND kind = 'person'",
        )
        .bind(NO_PASSWORD)
        .bind(user_id)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if ended != 1 {
            return Err(StoreError::Conflict(format!(
                "user {user_id} is an admin, a service account or disabled"
            )));
        }
        sqlx::query(
            "INSERT INTO user_identities (issuer, subject, user_id, created_at_ms, last_login_ms, synced_at_ms) \
             VALUES ($1, $2, $3, $4, $4, $4)",
        )
        .bind(issuer)
        .bind(subject)
        .bind(user_id)
        .bind(now_ms)
        .execute(&mut *tx)
        .await
        .on_unique(|| StoreError::AlreadyExists(format!("identity {subject}")))?;
        tx.commit().await?;
        Ok(())
    }

    /// What a sign-in or a refresh learnt: the groups, and the refresh
    /// token (`Some(None)`: the provider gave none this time, forget it;
    /// `None`: keep the one held).
    pub async fn record_identity(
        &self,
        issuer: &str,
        subject: &str,
        groups: &[String],
        refresh_token: Option<Option<&str>>,
        signed_in: bool,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let login = if signed_in {
            ", last_login_ms = $4"
        } else {
            ""
        };
        let refresh = if refresh_token.is_some() {
            ", refresh_token = $5"
        } else {
            ""
        };
        let sql = format!(
            "UPDATE user_identities SET groups = $3, synced_at_ms = $4{login}{refresh} \
             WHERE issuer = $1 AND subject = $2"
        );
        let mut q = sqlx::query(&sql)
            .bind(issuer)
            .bind(subject)
            .bind(groups_json(groups))
            .bind(now_ms);
        if let Some(t) = refresh_token {
            q = q.bind(t);
        }
        q.execute(&self.write).await?;
        Ok(())
    }

    /// Identities whose roles are due a refresh (with their refresh token,
    /// or, without one, to end what an old sign-in gave): last synced
    /// before `before_ms`, and a user who can still act (a live session or
    /// a live API token). Oldest first, at most `limit`.
    pub async fn identities_due(
        &self,
        before_ms: i64,
        now_ms: i64,
        limit: i64,
    ) -> Result<Vec<Identity>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM user_identities i JOIN users u ON u.id = i.user_id \
             WHERE i.synced_at_ms < $1 AND u.disabled = 0 \
               AND (EXISTS (SELECT 1 FROM sessions s WHERE s.user_id = i.user_id AND s.expiry_ms > $2) \
                 OR EXISTS (SELECT 1 FROM api_tokens t WHERE t.user_id = i.user_id \
                            AND t.revoked_at_ms IS NULL AND t.credential_gen = u.credential_gen)) \
             ORDER BY i.synced_at_ms LIMIT $3",
            IDENTITY_COLUMNS
                .split(", ")
                .map(|c| format!("i.{c} AS {c}"))
                .collect::<Vec<_>>()
                .join(", ")
        ))
        .bind(before_ms)
        .bind(now_ms)
        .bind(limit)
        .fetch_all(&self.write)
        .await?;
        rows.iter().map(identity_from_row).collect()
    }

    /// Takes an identity's refresh for this replica: true when its
    /// `synced_at_ms` was still `seen` (no other replica took it), and
    /// then it is `now_ms`. A refresh token is never used twice at once.
    pub async fn claim_refresh(&self, id: &Identity, now_ms: i64) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE user_identities SET synced_at_ms = $1 \
             WHERE issuer = $2 AND subject = $3 AND synced_at_ms = $4",
        )
        .bind(now_ms)
        .bind(&id.issuer)
        .bind(&id.subject)
        .bind(id.synced_at_ms)
        .execute(&self.write)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// A sign-in starts.
    pub async fn insert_flow(&self, f: &Flow) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO oidc_flows (state_sha256, browser_sha256, nonce, verifier, next_path, created_at_ms) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(&f.state_sha256)
        .bind(&f.browser_sha256)
        .bind(&f.nonce)
        .bind(&f.verifier)
        .bind(&f.next_path)
        .bind(f.created_at_ms)
        .execute(&self.write)
        .await?;
        Ok(())
    }

    /// The sign-in of a state, taken once: the row is deleted as it is
    /// read, so a callback replayed (or raced) finds nothing.
    pub async fn take_flow(&self, state_sha256: &str) -> Result<Option<Flow>, StoreError> {
        let row = sqlx::query(
            "DELETE FROM oidc_flows WHERE state_sha256 = $1 \
             RETURNING state_sha256, browser_sha256, nonce, verifier, next_path, created_at_ms",
        )
        .bind(state_sha256)
        .fetch_optional(&self.write)
        .await?;
        row.map(|r| {
            Ok(Flow {
                state_sha256: r.try_get("state_sha256")?,
                browser_sha256: r.try_get("browser_sha256")?,
                nonce: r.try_get("nonce")?,
                verifier: r.try_get("verifier")?,
                next_path: r.try_get("next_path")?,
                created_at_ms: r.try_get("created_at_ms")?,
            })
        })
        .transpose()
    }

    /// Sign-ins started since an instant (the cap on those under way).
    /// Makes room for one more sign-in under way when `keep` are: forgets
    /// the oldest beyond the newest `keep - 1`; how many went. A flood of
    /// starts pushes out the flood's own oldest, never a person's sign-in
    /// of a moment ago.
    pub async fn evict_oldest_flows(&self, keep: i64) -> Result<u64, StoreError> {
        let done = sqlx::query(
            "DELETE FROM oidc_flows WHERE created_at_ms <= \
             (SELECT created_at_ms FROM oidc_flows ORDER BY created_at_ms DESC LIMIT 1 OFFSET $1)",
        )
        .bind((keep - 1).max(0))
        .execute(&self.write)
        .await?;
        Ok(done.rows_affected())
    }

    pub async fn flows_since(&self, since_ms: i64) -> Result<i64, StoreError> {
        let row = sqlx::query("SELECT COUNT(*) FROM oidc_flows WHERE created_at_ms >= $1")
            .bind(since_ms)
            .fetch_one(&self.write)
            .await?;
        Ok(row.try_get::<i64, _>(0)?)
    }

    /// Forgets sign-ins started before an instant and tokens expired by
    /// another; how many rows went.
    pub async fn prune_sign_ins(
        &self,
        flows_before_ms: i64,
        now_ms: i64,
    ) -> Result<u64, StoreError> {
        let a = sqlx::query("DELETE FROM oidc_flows WHERE created_at_ms < $1")
            .bind(flows_before_ms)
            .execute(&self.write)
            .await?
            .rows_affected();
        let b = sqlx::query("DELETE FROM oidc_seen_tokens WHERE expires_at_ms < $1")
            .bind(now_ms)
            .execute(&self.write)
            .await?
            .rows_affected();
        Ok(a + b)
    }

    /// Records an ID token's use; false when it was used already.
    pub async fn first_use_of_token(
        &self,
        token_sha256: &str,
        expires_at_ms: i64,
    ) -> Result<bool, StoreError> {
        match sqlx::query(
            "INSERT INTO oidc_seen_tokens (token_sha256, expires_at_ms) VALUES ($1, $2)",
        )
        .bind(token_sha256)
        .bind(expires_at_ms)
        .execute(&self.write)
        .await
        {
            Ok(_) => Ok(true),
            Err(e) if is_unique_violation(&e) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// The portal's group rules, by group.
    pub async fn group_roles(&self) -> Result<Vec<GroupRoleRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT group_name, role, quota, created_at_ms, created_by FROM group_roles \
             ORDER BY group_name, role, quota",
        )
        .fetch_all(&self.read)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(GroupRoleRow {
                    group: r.try_get("group_name")?,
                    role: r.try_get("role")?,
                    quota: r.try_get("quota")?,
                    created_at_ms: r.try_get("created_at_ms")?,
                    created_by: r.try_get("created_by")?,
                })
            })
            .collect()
    }

    /// Adds a rule; false when it was there already.
    pub async fn add_group_role(
        &self,
        group: &str,
        role: &str,
        quota: &str,
        by: &str,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        match sqlx::query(
            "INSERT INTO group_roles (group_name, role, quota, created_at_ms, created_by) \
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(group)
        .bind(role)
        .bind(quota)
        .bind(now_ms)
        .bind(by)
        .execute(&self.write)
        .await
        {
            Ok(_) => Ok(true),
            Err(e) if is_unique_violation(&e) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Removes a rule; false when there was none.
    pub async fn remove_group_role(
        &self,
        group: &str,
        role: &str,
        quota: &str,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "DELETE FROM group_roles WHERE group_name = $1 AND role = $2 AND quota = $3",
        )
        .bind(group)
        .bind(role)
        .bind(quota)
        .execute(&self.write)
        .await?;
        Ok(done.rows_affected() > 0)
    }

    /// A user's admin flag and roles, each with who gave it.
    pub async fn roles_with_source(
        &self,
        user_id: i64,
    ) -> Result<(Option<Source>, BTreeMap<String, (Role, Source)>), StoreError> {
        let Some(user) = self.user_by_id(user_id).await? else {
            return Err(StoreError::NotFound(format!("user {user_id}")));
        };
        let rows = sqlx::query(
            "SELECT quota, role, source FROM role_bindings WHERE user_id = $1 ORDER BY quota",
        )
        .bind(user_id)
        .fetch_all(&self.write)
        .await?;
        let mut on = BTreeMap::new();
        for r in &rows {
            let (role, source): (String, String) = (r.try_get("role")?, r.try_get("source")?);
            let bad = || {
                StoreError::Backend(format!("unknown role '{role}' or source '{source}' stored"))
            };
            on.insert(
                r.try_get::<String, _>("quota")?,
                (
                    Role::parse(&role).ok_or_else(bad)?,
                    Source::parse(&source).ok_or_else(bad)?,
                ),
            );
        }
        Ok((user.is_admin.then_some(user.admin_source), on))
    }

    /// One change of the group mapping, made only if the user is still as
    /// the mapping saw it (a role given by hand meanwhile stands); whether
    /// it was made.
    pub async fn write_mapped(
        &self,
        user_id: i64,
        w: &MappedWrite<'_>,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let done = match w {
            MappedWrite::MakeAdmin => {
                sqlx::query(
                    "UPDATE users SET is_admin = 1, admin_source = 'mapping' \
                     WHERE id = $1 AND is_admin = 0",
                )
                .bind(user_id)
                .execute(&self.write)
                .await?
            }
            MappedWrite::DropAdmin => {
                sqlx::query(
                    "UPDATE users SET is_admin = 0 \
                     WHERE id = $1 AND is_admin = 1 AND admin_source = 'mapping'",
                )
                .bind(user_id)
                .execute(&self.write)
                .await?
            }
            MappedWrite::Bind {
                quota,
                role,
                before: None,
            } => {
                sqlx::query(
                    "INSERT INTO role_bindings (user_id, quota, role, created_at_ms, source) \
                     VALUES ($1, $2, $3, $4, 'mapping') ON CONFLICT (user_id, quota) DO NOTHING",
                )
                .bind(user_id)
                .bind(*quota)
                .bind(role.as_str())
                .bind(now_ms)
                .execute(&self.write)
                .await?
            }
            MappedWrite::Bind {
                quota,
                role,
                before: Some(old),
            } => {
                sqlx::query(
                    "UPDATE role_bindings SET role = $1 \
                     WHERE user_id = $2 AND quota = $3 AND role = $4 AND source = 'mapping'",
                )
                .bind(role.as_str())
                .bind(user_id)
                .bind(*quota)
                .bind(old.as_str())
                .execute(&self.write)
                .await?
            }
            MappedWrite::Unbind { quota, role } => {
                sqlx::query(
                    "DELETE FROM role_bindings \
                     WHERE user_id = $1 AND quota = $2 AND role = $3 AND source = 'mapping'",
                )
                .bind(user_id)
                .bind(*quota)
                .bind(role.as_str())
                .execute(&self.write)
                .await?
            }
        };
        Ok(done.rows_affected() == 1)
    }

    /// Sets (or clears) a user's Kubernetes username. `AlreadyExists` when
    /// another user has it.
    pub async fn set_kube_username(
        &self,
        user_id: i64,
        kube_username: Option<&str>,
    ) -> Result<(), StoreError> {
        sqlx::query("UPDATE users SET kube_username = $1 WHERE id = $2")
            .bind(kube_username)
            .bind(user_id)
            .execute(&self.write)
            .await
            .on_unique(|| {
                StoreError::AlreadyExists(format!(
                    "Kubernetes username {}",
                    kube_username.unwrap_or("")
                ))
            })?;
        Ok(())
    }

    /// Every user's Kubernetes username → portal username.
    pub async fn kube_usernames(&self) -> Result<HashMap<String, String>, StoreError> {
        let rows = sqlx::query(
            "SELECT kube_username, username FROM users WHERE kube_username IS NOT NULL",
        )
        .fetch_all(&self.read)
        .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("kube_username")?, r.try_get("username")?)))
            .collect()
    }

    /// The user a Kubernetes username belongs to.
    pub async fn user_by_kube_username(
        &self,
        kube_username: &str,
    ) -> Result<Option<User>, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {USER_COLUMNS} FROM users WHERE kube_username = $1"
        ))
        .bind(kube_username)
        .fetch_optional(&self.read)
        .await?;
        row.as_ref().map(user_from_row).transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::testdb::on_both_databases;

    on_both_databases!(sign_ins_are_taken_once_and_tokens_used_once);
    on_both_databases!(a_person_signs_up_once_and_the_mapping_writes_only_its_own);

    fn flow(state: &str, at: i64) -> Flow {
        Flow {
            state_sha256: state.into(),
            browser_sha256: "b".into(),
            nonce: "n".into(),
            verifier: "v".into(),
            next_path: "/".into(),
            created_at_ms: at,
        }
    }

    async fn sign_ins_are_taken_once_and_tokens_used_once(sql: &SqlStore) {
        sql.insert_flow(&flow("s1", 100)).await.unwrap();
        sql.insert_flow(&flow("s2", 200)).await.unwrap();
        assert_eq!(sql.flows_since(150).await.unwrap(), 1);
        assert_eq!(sql.take_flow("s1").await.unwrap(), Some(flow("s1", 100)));
        assert_eq!(sql.take_flow("s1").await.unwrap(), None, "once");
        assert_eq!(sql.prune_sign_ins(250, 0).await.unwrap(), 1);
        assert_eq!(sql.take_flow("s2").await.unwrap(), None, "pruned");
        assert!(sql.first_use_of_token("t", 1_000).await.unwrap());
        assert!(!sql.first_use_of_token("t", 1_000).await.unwrap());
        assert_eq!(sql.prune_sign_ins(0, 1_001).await.unwrap(), 1);
        assert!(sql.first_use_of_token("t", 2_000).await.unwrap());
    }

    async fn a_person_signs_up_once_and_the_mapping_writes_only_its_own(sql: &SqlStore) {
        let local = sql.create_user("bob", "h", false, 1).await.unwrap();
        assert!(matches!(
            sql.sign_up("https://idp", "s-bob", "bob", 2).await,
            Err(StoreError::AlreadyExists(_))
        ));
        assert!(
            sql.identity("https://idp", "s-bob")
                .await
                .unwrap()
                .is_none(),
            "nothing half made"
        );
        let alice = sql
            .sign_up("https://idp", "s-alice", "alice", 3)
            .await
            .unwrap();
        assert_eq!(alice.password_hash, NO_PASSWORD);
        assert!(matches!(
            sql.sign_up("https://idp", "s-alice", "alice2", 4).await,
            Err(StoreError::AlreadyExists(_))
        ));
        let groups = vec!["team-nlp".to_string()];
        sql.record_identity(
            "https://idp",
            "s-alice",
            &groups,
            Some(Some("rt-1")),
            true,
            5,
        )
        .await
        .unwrap();
        let id = sql
            .identity("https://idp", "s-alice")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (
                id.groups.clone(),
                id.refresh_token.as_deref(),
                id.synced_at_ms
            ),
            (groups, Some("rt-1"), 5)
        );
        assert!(sql.claim_refresh(&id, 9).await.unwrap());
        assert!(
            !sql.claim_refresh(&id, 10).await.unwrap(),
            "taken by the first"
        );
        // Mapping writes: only onto its own.
        let bind = |q: &'static str, role, before| MappedWrite::Bind {
            quota: q,
            role,
            before,
        };
        assert!(sql
            .write_mapped(alice.id, &bind("nlp", Role::Member, None), 6)
            .await
            .unwrap());
        assert!(sql
            .write_mapped(alice.id, &bind("nlp", Role::Owner, Some(Role::Member)), 6)
            .await
            .unwrap());
        sql.set_binding(alice.id, "cv", Role::Member, 6)
            .await
            .unwrap();
        assert!(
            !sql.write_mapped(alice.id, &bind("cv", Role::Owner, None), 6)
                .await
                .unwrap(),
            "hand stands"
        );
        assert!(!sql
            .write_mapped(
                alice.id,
                &MappedWrite::Unbind {
                    quota: "cv",
                    role: Role::Member
                },
                6
            )
            .await
            .unwrap());
        assert!(sql
            .write_mapped(alice.id, &MappedWrite::MakeAdmin, 6)
            .await
            .unwrap());
        let (admin, on) = sql.roles_with_source(alice.id).await.unwrap();
        assert_eq!(admin, Some(Source::Mapping));
        assert_eq!(on["nlp"], (Role::Owner, Source::Mapping));
        assert_eq!(on["cv"], (Role::Member, Source::Hand));
        // A hand grant over the mapping's role makes it the hand's.
        sql.set_binding(alice.id, "nlp", Role::Member, 7)
            .await
            .unwrap();
        assert!(!sql
            .write_mapped(
                alice.id,
                &MappedWrite::Unbind {
                    quota: "nlp",
                    role: Role::Member
                },
                7
            )
            .await
            .unwrap());
        assert!(sql
            .write_mapped(alice.id, &MappedWrite::DropAdmin, 7)
            .await
            .unwrap());
        sql.set_user_admin(local.id, true).await.unwrap();
        assert!(
            !sql.write_mapped(local.id, &MappedWrite::DropAdmin, 7)
                .await
                .unwrap(),
            "a hand admin stays"
        );
        // Kubernetes usernames: one user each.
        sql.set_kube_username(alice.id, Some("oidc:alice@example.com"))
            .await
            .unwrap();
        assert!(matches!(
            sql.set_kube_username(local.id, Some("oidc:alice@example.com"))
                .await,
            Err(StoreError::AlreadyExists(_))
        ));
        assert_eq!(
            sql.user_by_kube_username("oidc:alice@example.com")
                .await
                .unwrap()
                .map(|u| u.id),
            Some(alice.id)
        );
        assert_eq!(
            sql.kube_usernames().await.unwrap()["oidc:alice@example.com"],
            "alice"
        );
        sql.set_kube_username(alice.id, None).await.unwrap();
        assert!(sql.kube_usernames().await.unwrap().is_empty());
        // Group rules.
        assert!(sql
            .add_group_role("team-nlp", "member", "nlp", "admin", 8)
            .await
            .unwrap());
        assert!(!sql
            .add_group_role("team-nlp", "member", "nlp", "admin", 9)
            .await
            .unwrap());
        assert_eq!(sql.group_roles().await.unwrap().len(), 1);
        assert!(sql
            .remove_group_role("team-nlp", "member", "nlp")
            .await
            .unwrap());
        assert!(!sql
            .remove_group_role("team-nlp", "member", "nlp")
            .await
            .unwrap());
    }
}
