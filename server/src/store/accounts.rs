//! The portal's accounts in SQL (migration 0004): users, their role
//! bindings on quotas, personal API tokens and failed logins. Decisions
//! (who may do what, when a login is refused) are made in `portal`; this
//! module only reads and writes rows.

use super::sql::SqlStore;
use super::{ResultExt, StoreError};
use crate::authz::{Binding, Role, Source};
use sqlx::any::AnyRow;
use sqlx::Row;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    pub id: i64,
    pub username: String,
    /// PHC string (argon2id).
    pub password_hash: String,
    pub is_admin: bool,
    pub disabled: bool,
    pub created_at_ms: i64,
    /// Rises with every new password; a session or token made under an
    /// older one no longer works (migration 0019).
    pub credential_gen: i64,
    /// Who made the user an admin (or last did): by hand or the group
    /// mapping, which takes away only what it gave (migration 0021).
    pub admin_source: Source,
    /// The username the Kubernetes API server gives the same person, in
    /// the canonical form `status.users` keeps (migration 0021).
    pub kube_username: Option<String>,
    /// A service account: never signs in, acts through the API tokens an
    /// admin makes for it (migration 0022).
    pub is_service: bool,
}

/// The password hash of a user who signs in with the identity provider
/// only: no PHC string, so no password ever matches it.
pub const NO_PASSWORD: &str = "!sign-in-with-provider";

/// A personal API token as listed (the token itself is never stored).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiToken {
    pub id: i64,
    pub user_id: i64,
    pub name: String,
    pub created_at_ms: i64,
    pub last_used_ms: Option<i64>,
    pub revoked_at_ms: Option<i64>,
    /// When it stops working (None: when revoked).
    pub expires_at_ms: Option<i64>,
    /// The quotas (and their subtrees) it is held to (None: everything its
    /// user may do).
    pub scope: Option<Vec<String>>,
}

/// What a new token may do and for how long.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TokenTerms {
    pub expires_at_ms: Option<i64>,
    pub scope: Option<Vec<String>>,
}

/// A role binding with its user's name, for the users page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserBinding {
    pub user_id: i64,
    pub binding: Binding,
    /// Given by hand or by the group mapping.
    pub source: Source,
}

/// What a new password did: how many API tokens it revoked, and the
/// user's credential generation from now on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PasswordSet {
    pub revoked: u64,
    pub credential_gen: i64,
}

pub(crate) const USER_COLUMNS: &str =
    "id, username, password_hash, is_admin, disabled, created_at_ms, credential_gen, admin_source, kube_username, kind";
const TOKEN_COLUMNS: &str =
    "id, user_id, name, created_at_ms, last_used_ms, revoked_at_ms, expires_at_ms, scope";
/// Browsers and addresses the login limiter trusts, kept per user.
pub const MAX_TRUSTED: i64 = 20;
/// A token's last use is written at most this often, not on every request.
const TOUCH_EVERY_MS: i64 = 60_000;

fn scope_json(terms: &TokenTerms) -> Option<String> {
    terms
        .scope
        .as_ref()
        .map(|s| serde_json::to_string(s).unwrap_or_else(|_| "[]".into()))
}

fn flag(b: bool) -> i16 {
    b as i16
}

pub(crate) fn user_from_row(row: &AnyRow) -> Result<User, StoreError> {
    let admin_source: String = row.try_get("admin_source")?;
    Ok(User {
        id: row.try_get("id")?,
        username: row.try_get("username")?,
        password_hash: row.try_get("password_hash")?,
        is_admin: row.try_get::<i64, _>("is_admin")? != 0,
        disabled: row.try_get::<i64, _>("disabled")? != 0,
        created_at_ms: row.try_get("created_at_ms")?,
        credential_gen: row.try_get("credential_gen")?,
        admin_source: Source::parse(&admin_source).ok_or_else(|| {
            StoreError::Backend(format!("unknown admin source '{admin_source}' stored"))
        })?,
        kube_username: row.try_get("kube_username")?,
        is_service: row.try_get::<String, _>("kind")? == "service",
    })
}

fn token_from_row(row: &AnyRow) -> Result<ApiToken, StoreError> {
    Ok(ApiToken {
        id: row.try_get("id")?,
        user_id: row.try_get("user_id")?,
        name: row.try_get("name")?,
        created_at_ms: row.try_get("created_at_ms")?,
        last_used_ms: row.try_get("last_used_ms")?,
        revoked_at_ms: row.try_get("revoked_at_ms")?,
        expires_at_ms: row.try_get("expires_at_ms")?,
        scope: row
            .try_get::<Option<String>, _>("scope")?
            // A scope that does not read back scopes the token to nothing:
            // closed, never unscoped.
            .map(|s| serde_json::from_str(&s).unwrap_or_default()),
    })
}

fn binding_from_row(row: &AnyRow) -> Result<UserBinding, StoreError> {
    let role: String = row.try_get("role")?;
    let source: String = row.try_get("source")?;
    Ok(UserBinding {
        source: Source::parse(&source)
            .ok_or_else(|| StoreError::Backend(format!("unknown role source '{source}' stored")))?,
        user_id: row.try_get("user_id")?,
        binding: Binding {
            quota: row.try_get("quota")?,
            role: Role::parse(&role)
                .ok_or_else(|| StoreError::Backend(format!("unknown role '{role}' stored")))?,
        },
    })
}

impl SqlStore {
    pub async fn count_users(&self) -> Result<i64, StoreError> {
        let row = sqlx::query("SELECT COUNT(*) FROM users")
            .fetch_one(&self.read)
            .await?;
        Ok(row.try_get::<i64, _>(0)?)
    }

    /// `AlreadyExists` when the username is taken.
    pub async fn create_user(
        &self,
        username: &str,
        password_hash: &str,
        is_admin: bool,
        now_ms: i64,
    ) -> Result<User, StoreError> {
        let res = sqlx::query(&format!(
            "INSERT INTO users (username, password_hash, is_admin, disabled, created_at_ms) \
             VALUES ($1, $2, $3, 0, $4) RETURNING {USER_COLUMNS}"
        ))
        .bind(username)
        .bind(password_hash)
        .bind(flag(is_admin))
        .bind(now_ms)
        .fetch_one(&self.write)
        .await;
        let row = res.on_unique(|| StoreError::AlreadyExists(format!("user {username}")))?;
        user_from_row(&row)
    }

    pub async fn user_by_name(&self, username: &str) -> Result<Option<User>, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {USER_COLUMNS} FROM users WHERE username = $1"
        ))
        .bind(username)
        .fetch_optional(&self.read)
        .await?;
        row.as_ref().map(user_from_row).transpose()
    }

    pub async fn user_by_id(&self, id: i64) -> Result<Option<User>, StoreError> {
        let row = sqlx::query(&format!("SELECT {USER_COLUMNS} FROM users WHERE id = $1"))
            .bind(id)
            .fetch_optional(&self.read)
            .await?;
        row.as_ref().map(user_from_row).transpose()
    }

    /// Every user, by name.
    pub async fn users(&self) -> Result<Vec<User>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {USER_COLUMNS} FROM users ORDER BY username"
        ))
        .fetch_all(&self.read)
        .await?;
        rows.iter().map(user_from_row).collect()
    }

    /// By hand: an admin made so here stays one whatever the groups say.
    pub async fn set_user_admin(&self, id: i64, is_admin: bool) -> Result<(), StoreError> {
        sqlx::query("UPDATE users SET is_admin = $1, admin_source = 'hand' WHERE id = $2")
            .bind(flag(is_admin))
            .bind(id)
            .execute(&self.write)
            .await?;
        Ok(())
    }

    /// Disabling also ends the user's sessions (its tokens stop working
    /// because every request checks the user).
    pub async fn set_user_disabled(&self, id: i64, disabled: bool) -> Result<(), StoreError> {
        sqlx::query("UPDATE users SET disabled = $1 WHERE id = $2")
            .bind(flag(disabled))
            .bind(id)
            .execute(&self.write)
            .await?;
        if disabled {
            self.delete_sessions_of(id).await?;
        }
        Ok(())
    }

    /// A new password, in one transaction with its consequences: the
    /// user's credential generation rises (so a session or token made
    /// under the old password stops working, even one whose insert raced
    /// this transaction), every session of the user ends, its live API
    /// tokens are revoked (whoever knew the old password may have made
    /// them). The browsers and addresses it signed in from stay trusted by
    /// the login limiter: they prove nothing without the new password, and
    /// forgetting them would leave the user open to a lockout just after a
    /// reset. How many tokens were revoked, and the new generation.
    pub async fn set_password_hash(
        &self,
        id: i64,
        hash: &str,
        now_ms: i64,
    ) -> Result<PasswordSet, StoreError> {
        let mut tx = self.write.begin().await?;
        let row = sqlx::query(
            "UPDATE users SET password_hash = $1, credential_gen = credential_gen + 1 \
             WHERE id = $2 RETURNING credential_gen",
        )
        .bind(hash)
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
        let credential_gen = match row {
            Some(r) => r.try_get::<i64, _>(0)?,
            None => return Err(StoreError::NotFound(format!("user {id}"))),
        };
        sqlx::query("DELETE FROM sessions WHERE user_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        let revoked = sqlx::query(
            "UPDATE api_tokens SET revoked_at_ms = $1 WHERE user_id = $2 AND revoked_at_ms IS NULL",
        )
        .bind(now_ms)
        .bind(id)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        tx.commit().await?;
        Ok(PasswordSet {
            revoked,
            credential_gen,
        })
    }

    pub async fn bindings_of(&self, user_id: i64) -> Result<Vec<Binding>, StoreError> {
        let rows = sqlx::query(
            "SELECT user_id, quota, role, source FROM role_bindings WHERE user_id = $1 ORDER BY quota",
        )
        .bind(user_id)
        .fetch_all(&self.read)
        .await?;
        rows.iter()
            .map(|r| binding_from_row(r).map(|b| b.binding))
            .collect()
    }

    /// Every binding of every user.
    pub async fn all_bindings(&self) -> Result<Vec<UserBinding>, StoreError> {
        let rows =
            sqlx::query("SELECT user_id, quota, role, source FROM role_bindings ORDER BY quota")
                .fetch_all(&self.read)
                .await?;
        rows.iter().map(binding_from_row).collect()
    }

    /// The users bound to a quota itself (not through an ancestor), with
    /// their role: who to notify about it, who to show as its owners.
    pub async fn bindings_on(&self, quota: &str) -> Result<Vec<(User, Role)>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {}, b.role AS role FROM role_bindings b JOIN users u ON u.id = b.user_id \
             WHERE b.quota = $1 ORDER BY u.username",
            USER_COLUMNS
                .split(", ")
                .map(|c| format!("u.{c} AS {c}"))
                .collect::<Vec<_>>()
                .join(", ")
        ))
        .bind(quota)
        .fetch_all(&self.read)
        .await?;
        rows.iter()
            .map(|r| {
                let role: String = r.try_get("role")?;
                let role = Role::parse(&role)
                    .ok_or_else(|| StoreError::Backend(format!("unknown role '{role}' stored")))?;
                Ok((user_from_row(r)?, role))
            })
            .collect()
    }

    /// Binds a user to a quota with a role by hand, replacing the role it
    /// had there (a role the mapping gave becomes the hand's). Returns the
    /// role it replaced.
    pub async fn set_binding(
        &self,
        user_id: i64,
        quota: &str,
        role: Role,
        now_ms: i64,
    ) -> Result<Option<Role>, StoreError> {
        let before = self
            .bindings_of(user_id)
            .await?
            .into_iter()
            .find(|b| b.quota == quota)
            .map(|b| b.role);
        sqlx::query(
            "INSERT INTO role_bindings (user_id, quota, role, created_at_ms) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (user_id, quota) DO UPDATE SET role = excluded.role, source = 'hand'",
        )
        .bind(user_id)
        .bind(quota)
        .bind(role.as_str())
        .bind(now_ms)
        .execute(&self.write)
        .await?;
        Ok(before)
    }

    /// Binds a user to a quota with a role only if its role there is still
    /// `expected` (None: no binding), so a check of the role replaced
    /// cannot be raced. Whether it was written.
    pub async fn set_binding_if(
        &self,
        user_id: i64,
        quota: &str,
        role: Role,
        expected: Option<Role>,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let done = match expected {
            None => {
                sqlx::query(
                    "INSERT INTO role_bindings (user_id, quota, role, created_at_ms) \
                     VALUES ($1, $2, $3, $4) ON CONFLICT (user_id, quota) DO NOTHING",
                )
                .bind(user_id)
                .bind(quota)
                .bind(role.as_str())
                .bind(now_ms)
                .execute(&self.write)
                .await?
            }
            Some(old) => {
                sqlx::query(
                    "UPDATE role_bindings SET role = $1, source = 'hand' \
                     WHERE user_id = $2 AND quota = $3 AND role = $4",
                )
                .bind(role.as_str())
                .bind(user_id)
                .bind(quota)
                .bind(old.as_str())
                .execute(&self.write)
                .await?
            }
        };
        Ok(done.rows_affected() == 1)
    }

    /// A quota is gone: its role bindings and alert rules go with it, each
    /// removal audited (actor `bizrq`), in one transaction, so a later quota
    /// of the same name starts with none. Standalone, a trigger on `quotas`
    /// does the same in the deleting transaction (migration 0009); this is
    /// for cluster mode, where the controller observes the deletion. How
    /// many bindings and rules were removed.
    pub async fn forget_quota(&self, quota: &str, now_ms: i64) -> Result<(u64, u64), StoreError> {
        let mut tx = self.write.begin().await?;
        let rows = sqlx::query(
            "SELECT u.username AS username, b.role AS role FROM role_bindings b \
             JOIN users u ON u.id = b.user_id WHERE b.quota = $1 ORDER BY u.username",
        )
        .bind(quota)
        .fetch_all(&mut *tx)
        .await?;
        let mut entries = Vec::new();
        for r in &rows {
            let (user, role): (String, String) = (r.try_get("username")?, r.try_get("role")?);
            entries.push(super::audit::entry(
                now_ms,
                crate::authz::SYSTEM_ACTOR,
                super::audit::action::ROLE_REMOVE,
                quota,
                Some(serde_json::json!({"user": user, "quota": quota, "role": role})),
                None,
                &format!("{user} is no longer {role} of {quota}: the quota was deleted"),
            ));
        }
        let rules = sqlx::query(
            "SELECT key, warn_percent, crit_percent, forecast_horizon_hours FROM alert_rules \
             WHERE quota = $1 ORDER BY key",
        )
        .bind(quota)
        .fetch_all(&mut *tx)
        .await?;
        for r in &rules {
            let key: String = r.try_get("key")?;
            let before = serde_json::json!({
                "quota": quota,
                "key": key,
                "warn_percent": r.try_get::<i64, _>("warn_percent")?,
                "crit_percent": r.try_get::<i64, _>("crit_percent")?,
                "forecast_horizon_hours": r.try_get::<Option<i64>, _>("forecast_horizon_hours")?,
            });
            entries.push(super::audit::entry(
                now_ms,
                crate::authz::SYSTEM_ACTOR,
                super::audit::action::ALERT_RULE,
                quota,
                Some(before),
                None,
                &format!("alert rule for {key} on {quota} removed: the quota was deleted"),
            ));
        }
        for e in &entries {
            sqlx::query(
                "INSERT INTO audit_log (at_ms, actor, action, target, before, after, detail) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
            )
            .bind(e.at_ms)
            .bind(&e.actor)
            .bind(&e.action)
            .bind(&e.target)
            .bind(e.before.as_deref())
            .bind(e.after.as_deref())
            .bind(&e.detail)
            .execute(&mut *tx)
            .await?;
        }
        let bindings = sqlx::query("DELETE FROM role_bindings WHERE quota = $1")
            .bind(quota)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        let rules = sqlx::query("DELETE FROM alert_rules WHERE quota = $1")
            .bind(quota)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        tx.commit().await?;
        Ok((bindings, rules))
    }

    /// Every quota that holds role bindings or alert rules but is not in
    /// `live` (the quotas a complete list of the cluster found) is
    /// forgotten as [`Self::forget_quota`] does, audited: its deletion was
    /// missed (no controller ran, or the watch relisted). The names not
    /// listed come from one statement, `live` passed as one JSON array.
    /// How many quotas were forgotten.
    pub async fn forget_quotas_not_in(
        &self,
        live: &std::collections::BTreeSet<String>,
        now_ms: i64,
    ) -> Result<usize, StoreError> {
        let live_json =
            serde_json::to_string(live).map_err(|e| StoreError::Backend(e.to_string()))?;
        let listed = match self.backend {
            super::sql::Backend::Sqlite => "SELECT value FROM json_each($1)",
            super::sql::Backend::Postgres => "SELECT json_array_elements_text($1::json)",
        };
        let rows = sqlx::query(&format!(
            "SELECT quota FROM role_bindings WHERE quota NOT IN ({listed}) \
             UNION SELECT quota FROM alert_rules WHERE quota NOT IN ({listed}) ORDER BY 1"
        ))
        .bind(live_json)
        .fetch_all(&self.write)
        .await?;
        for r in &rows {
            let quota: String = r.try_get(0)?;
            self.forget_quota(&quota, now_ms).await?;
        }
        Ok(rows.len())
    }

    /// Removes a user's binding on a quota only if it is still `role` (the
    /// role the caller checked it may take away); whether it was removed.
    pub async fn remove_binding(
        &self,
        user_id: i64,
        quota: &str,
        role: Role,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "DELETE FROM role_bindings WHERE user_id = $1 AND quota = $2 AND role = $3",
        )
        .bind(user_id)
        .bind(quota)
        .bind(role.as_str())
        .execute(&self.write)
        .await?;
        Ok(done.rows_affected() > 0)
    }

    /// A new token of the user signed in by session `session_id` under
    /// credential generation `credential_gen`, or None when that session
    /// is gone. The token carries the session's generation and works only
    /// while that is the user's ([`Self::live_token`]): a new password
    /// raises it, so a token whose insert raced the reset (READ COMMITTED
    /// does not make the `EXISTS` wait for the reset's delete) is dead all
    /// the same.
    pub async fn create_token(
        &self,
        user_id: i64,
        session_id: &str,
        credential_gen: i64,
        name: &str,
        token_sha256: &str,
        now_ms: i64,
    ) -> Result<Option<ApiToken>, StoreError> {
        self.create_token_with(
            user_id,
            session_id,
            credential_gen,
            name,
            token_sha256,
            &TokenTerms::default(),
            now_ms,
        )
        .await
    }

    /// [`Self::create_token`] with an expiry and a scope.
    #[allow(clippy::too_many_arguments)]
    pub async fn create_token_with(
        &self,
        user_id: i64,
        session_id: &str,
        credential_gen: i64,
        name: &str,
        token_sha256: &str,
        terms: &TokenTerms,
        now_ms: i64,
    ) -> Result<Option<ApiToken>, StoreError> {
        let row = sqlx::query(&format!(
            "INSERT INTO api_tokens (user_id, name, token_sha256, created_at_ms, credential_gen, expires_at_ms, scope) \
             SELECT $1, $2, $3, $4, $6, $7, $8 \
              WHERE EXISTS (SELECT 1 FROM sessions WHERE id = $5 AND user_id = $1) \
             RETURNING {TOKEN_COLUMNS}"
        ))
        .bind(user_id)
        .bind(name)
        .bind(token_sha256)
        .bind(now_ms)
        .bind(session_id)
        .bind(credential_gen)
        .bind(terms.expires_at_ms)
        .bind(scope_json(terms))
        .fetch_optional(&self.write)
        .await?;
        row.as_ref().map(token_from_row).transpose()
    }

    /// A token of a service account, made by an admin: it carries the
    /// account's credential generation as it is now.
    pub async fn create_service_token(
        &self,
        user_id: i64,
        name: &str,
        token_sha256: &str,
        terms: &TokenTerms,
        now_ms: i64,
    ) -> Result<Option<ApiToken>, StoreError> {
        let row = sqlx::query(&format!(
            "INSERT INTO api_tokens (user_id, name, token_sha256, created_at_ms, credential_gen, expires_at_ms, scope) \
             SELECT id, $2, $3, $4, credential_gen, $5, $6 FROM users WHERE id = $1 AND kind = 'service' \
             RETURNING {TOKEN_COLUMNS}"
        ))
        .bind(user_id)
        .bind(name)
        .bind(token_sha256)
        .bind(now_ms)
        .bind(terms.expires_at_ms)
        .bind(scope_json(terms))
        .fetch_optional(&self.write)
        .await?;
        row.as_ref().map(token_from_row).transpose()
    }

    /// A service account: a user of its own kind with no password.
    /// `AlreadyExists` when the name is taken.
    pub async fn create_service_account(
        &self,
        username: &str,
        now_ms: i64,
    ) -> Result<User, StoreError> {
        let res = sqlx::query(&format!(
            "INSERT INTO users (username, password_hash, is_admin, disabled, created_at_ms, kind) \
             VALUES ($1, $2, 0, 0, $3, 'service') RETURNING {USER_COLUMNS}"
        ))
        .bind(username)
        .bind(NO_PASSWORD)
        .bind(now_ms)
        .fetch_one(&self.write)
        .await;
        let row = res.on_unique(|| StoreError::AlreadyExists(format!("user {username}")))?;
        user_from_row(&row)
    }

    /// A user's tokens, newest first (revoked ones too). A token made
    /// under a password replaced meanwhile never worked: it shows revoked
    /// from its creation.
    pub async fn tokens_of(&self, user_id: i64) -> Result<Vec<ApiToken>, StoreError> {
        let rows = sqlx::query(
            "SELECT t.id AS id, t.user_id AS user_id, t.name AS name, \
                    t.created_at_ms AS created_at_ms, t.last_used_ms AS last_used_ms, \
                    t.expires_at_ms AS expires_at_ms, t.scope AS scope, \
                    COALESCE(t.revoked_at_ms, CASE WHEN t.credential_gen <> u.credential_gen \
                      THEN t.created_at_ms END) AS revoked_at_ms \
               FROM api_tokens t JOIN users u ON u.id = t.user_id \
              WHERE t.user_id = $1 ORDER BY t.id DESC",
        )
        .bind(user_id)
        .fetch_all(&self.read)
        .await?;
        rows.iter().map(token_from_row).collect()
    }

    /// The live token with this hash at `now_ms`: not revoked, not
    /// expired, and made under its user's current credential generation.
    pub async fn live_token(
        &self,
        token_sha256: &str,
        now_ms: i64,
    ) -> Result<Option<ApiToken>, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {} FROM api_tokens t JOIN users u ON u.id = t.user_id \
             WHERE t.token_sha256 = $1 AND t.revoked_at_ms IS NULL \
               AND t.credential_gen = u.credential_gen \
               AND (t.expires_at_ms IS NULL OR t.expires_at_ms > $2)",
            TOKEN_COLUMNS
                .split(", ")
                .map(|c| format!("t.{c} AS {c}"))
                .collect::<Vec<_>>()
                .join(", ")
        ))
        .bind(token_sha256)
        .bind(now_ms)
        .fetch_optional(&self.read)
        .await?;
        row.as_ref().map(token_from_row).transpose()
    }

    /// Records a use of a token (at most once a minute per token).
    pub async fn touch_token(&self, id: i64, now_ms: i64) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE api_tokens SET last_used_ms = $1 \
             WHERE id = $2 AND (last_used_ms IS NULL OR last_used_ms < $3)",
        )
        .bind(now_ms)
        .bind(id)
        .bind(now_ms - TOUCH_EVERY_MS)
        .execute(&self.write)
        .await?;
        Ok(())
    }

    /// Revokes one of a user's tokens; the token as it was, if it was live.
    pub async fn revoke_token(
        &self,
        user_id: i64,
        id: i64,
        now_ms: i64,
    ) -> Result<Option<ApiToken>, StoreError> {
        let row = sqlx::query(&format!(
            "UPDATE api_tokens SET revoked_at_ms = $1 \
             WHERE id = $2 AND user_id = $3 AND revoked_at_ms IS NULL RETURNING {TOKEN_COLUMNS}"
        ))
        .bind(now_ms)
        .bind(id)
        .bind(user_id)
        .fetch_optional(&self.write)
        .await?;
        row.as_ref().map(token_from_row).transpose()
    }

    /// Failed logins for a username from a client since an instant.
    pub async fn login_failures(
        &self,
        username: &str,
        client: &str,
        since_ms: i64,
    ) -> Result<Vec<i64>, StoreError> {
        let rows = sqlx::query(
            "SELECT at_ms FROM login_failures WHERE username = $1 AND client = $2 AND at_ms >= $3 \
             ORDER BY at_ms",
        )
        .bind(username)
        .bind(client)
        .bind(since_ms)
        .fetch_all(&self.write)
        .await?;
        rows.iter().map(|r| Ok(r.try_get::<i64, _>(0)?)).collect()
    }

    pub async fn add_login_failure(
        &self,
        username: &str,
        client: &str,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        sqlx::query("INSERT INTO login_failures (username, client, at_ms) VALUES ($1, $2, $3)")
            .bind(username)
            .bind(client)
            .bind(now_ms)
            .execute(&self.write)
            .await?;
        Ok(())
    }

    /// Takes back the failure recorded for an attempt that could not be
    /// checked (the password hasher was busy): one row, as that attempt
    /// added one. Rows of one (username, client, instant) are alike, so any
    /// one of them is that attempt's; deleting them all would also take
    /// back real failures made in the same millisecond.
    pub async fn clear_login_failure(
        &self,
        username: &str,
        client: &str,
        at_ms: i64,
    ) -> Result<(), StoreError> {
        let one_row = match self.backend {
            super::sql::Backend::Sqlite => {
                "DELETE FROM login_failures WHERE rowid IN (SELECT rowid FROM login_failures \
                 WHERE username = $1 AND client = $2 AND at_ms = $3 LIMIT 1)"
            }
            super::sql::Backend::Postgres => {
                "DELETE FROM login_failures WHERE ctid = (SELECT ctid FROM login_failures \
                 WHERE username = $1 AND client = $2 AND at_ms = $3 LIMIT 1 FOR UPDATE SKIP LOCKED)"
            }
        };
        sqlx::query(one_row)
            .bind(username)
            .bind(client)
            .bind(at_ms)
            .execute(&self.write)
            .await?;
        Ok(())
    }

    /// A successful login forgets the failures before it.
    pub async fn clear_login_failures(
        &self,
        username: &str,
        client: &str,
    ) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM login_failures WHERE username = $1 AND client = $2")
            .bind(username)
            .bind(client)
            .execute(&self.write)
            .await?;
        Ok(())
    }

    /// The user a browser's device token (by its SHA-256) was given to,
    /// if the browser signed in with it since `since_ms`.
    pub async fn device_user(
        &self,
        token_sha256: &str,
        since_ms: i64,
    ) -> Result<Option<i64>, StoreError> {
        let row = sqlx::query(
            "SELECT user_id FROM login_devices WHERE token_sha256 = $1 AND last_used_ms >= $2",
        )
        .bind(token_sha256)
        .bind(since_ms)
        .fetch_optional(&self.read)
        .await?;
        Ok(row.map(|r| r.try_get::<i64, _>(0)).transpose()?)
    }

    /// A browser signed in as `user_id` with this device token: remembered
    /// (or its last use moved), keeping the user's [`MAX_TRUSTED`] most
    /// recently used browsers.
    pub async fn remember_device(
        &self,
        user_id: i64,
        token_sha256: &str,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let mut tx = self.write.begin().await?;
        sqlx::query(
            "INSERT INTO login_devices (token_sha256, user_id, created_at_ms, last_used_ms) \
             VALUES ($1, $2, $3, $3) \
             ON CONFLICT (token_sha256) DO UPDATE SET last_used_ms = excluded.last_used_ms \
             WHERE login_devices.user_id = excluded.user_id",
        )
        .bind(token_sha256)
        .bind(user_id)
        .bind(now_ms)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "DELETE FROM login_devices WHERE user_id = $1 AND token_sha256 NOT IN \
             (SELECT token_sha256 FROM login_devices WHERE user_id = $1 \
              ORDER BY last_used_ms DESC LIMIT $2)",
        )
        .bind(user_id)
        .bind(MAX_TRUSTED)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Whether `user_id` signed in from address key `client` since
    /// `since_ms`.
    pub async fn is_usual_address(
        &self,
        user_id: i64,
        client: &str,
        since_ms: i64,
    ) -> Result<bool, StoreError> {
        let row = sqlx::query(
            "SELECT 1 FROM login_addresses WHERE user_id = $1 AND client = $2 AND last_ms >= $3",
        )
        .bind(user_id)
        .bind(client)
        .bind(since_ms)
        .fetch_optional(&self.read)
        .await?;
        Ok(row.is_some())
    }

    /// `user_id` signed in from address key `client`: remembered, keeping
    /// the user's [`MAX_TRUSTED`] most recent addresses.
    pub async fn remember_address(
        &self,
        user_id: i64,
        client: &str,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let mut tx = self.write.begin().await?;
        sqlx::query(
            "INSERT INTO login_addresses (user_id, client, last_ms) VALUES ($1, $2, $3) \
             ON CONFLICT (user_id, client) DO UPDATE SET last_ms = excluded.last_ms",
        )
        .bind(user_id)
        .bind(client)
        .bind(now_ms)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "DELETE FROM login_addresses WHERE user_id = $1 AND client NOT IN \
             (SELECT client FROM login_addresses WHERE user_id = $1 \
              ORDER BY last_ms DESC LIMIT $2)",
        )
        .bind(user_id)
        .bind(MAX_TRUSTED)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Forgets browsers and addresses not used to sign in since
    /// `before_ms`; how many.
    pub async fn prune_login_trust(&self, before_ms: i64) -> Result<u64, StoreError> {
        let devices = sqlx::query("DELETE FROM login_devices WHERE last_used_ms < $1")
            .bind(before_ms)
            .execute(&self.write)
            .await?
            .rows_affected();
        let addresses = sqlx::query("DELETE FROM login_addresses WHERE last_ms < $1")
            .bind(before_ms)
            .execute(&self.write)
            .await?
            .rows_affected();
        Ok(devices + addresses)
    }

    /// Deletes failures older than an instant; how many.
    pub async fn prune_login_failures(&self, before_ms: i64) -> Result<u64, StoreError> {
        let done = sqlx::query("DELETE FROM login_failures WHERE at_ms < $1")
            .bind(before_ms)
            .execute(&self.write)
            .await?;
        Ok(done.rows_affected())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::audit::{AuditFilter, AuditRecord};
    use crate::store::sessions::SqlSessionStore;
    use crate::store::testdb::on_both_databases;
    use std::sync::Arc;
    use tower_sessions::session::{Id, Record};
    use tower_sessions::SessionStore;

    on_both_databases!(
        users_bindings_and_tokens,
        sessions_load_save_expire,
        audit_filters_and_is_append_only,
        login_failures_count_and_prune,
        a_busy_attempt_takes_back_only_its_own_failure,
        a_token_is_made_only_while_its_session_lives,
        a_sign_in_that_raced_a_new_password_stores_no_session,
        quotas_not_listed_lose_their_roles_and_rules,
        a_token_made_under_a_replaced_password_never_works,
        trusted_browsers_and_addresses_are_kept_bounded_and_outlive_a_password,
        tokens_expire_carry_their_scope_and_service_accounts_get_theirs,
    );

    async fn tokens_expire_carry_their_scope_and_service_accounts_get_theirs(sql: &SqlStore) {
        let u = sql.create_user("ulla", "h1", false, 5).await.unwrap();
        sqlx::query(
            "INSERT INTO sessions (id, user_id, data, expiry_ms) VALUES ('s-u', $1, '{}', 1)",
        )
        .bind(u.id)
        .execute(&sql.write)
        .await
        .unwrap();
        let terms = TokenTerms {
            expires_at_ms: Some(1_000),
            scope: Some(vec!["nlp".into(), "cv".into()]),
        };
        let t = sql
            .create_token_with(u.id, "s-u", 0, "ci", "sha-ci", &terms, 10)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (t.expires_at_ms, t.scope.clone()),
            (terms.expires_at_ms, terms.scope.clone())
        );
        assert_eq!(
            sql.live_token("sha-ci", 999).await.unwrap().unwrap().scope,
            terms.scope
        );
        assert!(
            sql.live_token("sha-ci", 1_000).await.unwrap().is_none(),
            "expired"
        );
        assert_eq!(
            sql.tokens_of(u.id).await.unwrap()[0].expires_at_ms,
            Some(1_000)
        );
        // A service account: no password, tokens made without a session.
        let svc = sql.create_service_account("ci-bot", 20).await.unwrap();
        assert!(svc.is_service && svc.password_hash == NO_PASSWORD);
        assert!(!u.is_service);
        let st = sql
            .create_service_token(svc.id, "deploy", "sha-svc", &TokenTerms::default(), 21)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            sql.live_token("sha-svc", 10_000).await.unwrap().unwrap().id,
            st.id
        );
        assert!(
            sql.create_service_token(u.id, "x", "sha-x", &TokenTerms::default(), 22)
                .await
                .unwrap()
                .is_none(),
            "a person's tokens are made by the person"
        );
        assert!(matches!(
            sql.create_service_account("ulla", 23).await,
            Err(StoreError::AlreadyExists(_))
        ));
    }

    async fn users_bindings_and_tokens(sql: &SqlStore) {
        assert_eq!(sql.count_users().await.unwrap(), 0);
        let a = sql.create_user("alice", "h1", false, 5).await.unwrap();
        assert!(matches!(
            sql.create_user("alice", "h2", true, 6).await,
            Err(StoreError::AlreadyExists(_))
        ));
        let b = sql.create_user("bob", "h3", true, 7).await.unwrap();
        assert_ne!(a.id, b.id);
        assert_eq!(sql.user_by_name("alice").await.unwrap(), Some(a.clone()));
        assert_eq!(sql.user_by_id(b.id).await.unwrap().unwrap().username, "bob");
        assert!(sql.user_by_name("carol").await.unwrap().is_none());
        sql.set_user_admin(a.id, true).await.unwrap();
        sql.set_user_disabled(a.id, true).await.unwrap();
        sql.set_password_hash(a.id, "h9", 1).await.unwrap();
        let a2 = sql.user_by_id(a.id).await.unwrap().unwrap();
        assert!(a2.is_admin && a2.disabled && a2.password_hash == "h9");
        assert_eq!(
            sql.users()
                .await
                .unwrap()
                .iter()
                .map(|u| u.username.as_str())
                .collect::<Vec<_>>(),
            ["alice", "bob"]
        );

        // One role per user and quota; setting again replaces it.
        assert_eq!(
            sql.set_binding(a.id, "nlp", Role::Member, 1).await.unwrap(),
            None
        );
        assert_eq!(
            sql.set_binding(a.id, "nlp", Role::Owner, 2).await.unwrap(),
            Some(Role::Member)
        );
        sql.set_binding(a.id, "cv", Role::Member, 3).await.unwrap();
        sql.set_binding(b.id, "nlp", Role::Member, 3).await.unwrap();
        let bind = |q: &str, role| Binding {
            quota: q.into(),
            role,
        };
        assert_eq!(
            sql.bindings_of(a.id).await.unwrap(),
            [bind("cv", Role::Member), bind("nlp", Role::Owner)]
        );
        let on_nlp = sql.bindings_on("nlp").await.unwrap();
        assert_eq!(
            on_nlp
                .iter()
                .map(|(u, r)| (u.username.as_str(), *r))
                .collect::<Vec<_>>(),
            [("alice", Role::Owner), ("bob", Role::Member)]
        );
        assert_eq!(sql.all_bindings().await.unwrap().len(), 3);
        assert!(
            !sql.remove_binding(a.id, "cv", Role::Owner).await.unwrap(),
            "alice is member of cv: a removal checked as of owner takes nothing"
        );
        assert!(sql.remove_binding(a.id, "cv", Role::Member).await.unwrap());
        assert!(!sql.remove_binding(a.id, "cv", Role::Member).await.unwrap());

        // Tokens: found by hash while live, touched at most once a minute.
        sqlx::query(
            "INSERT INTO sessions (id, user_id, data, expiry_ms) VALUES ('s-b', $1, '{}', 1)",
        )
        .bind(b.id)
        .execute(&sql.write)
        .await
        .unwrap();
        let t = sql
            .create_token(b.id, "s-b", 0, "ci", "sha-1", 100)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (t.user_id, t.last_used_ms, t.revoked_at_ms),
            (b.id, None, None)
        );
        assert_eq!(sql.live_token("sha-1", 0).await.unwrap().unwrap().id, t.id);
        assert!(sql.live_token("sha-2", 0).await.unwrap().is_none());
        sql.touch_token(t.id, 1_000).await.unwrap();
        sql.touch_token(t.id, 30_000).await.unwrap();
        assert_eq!(
            sql.tokens_of(b.id).await.unwrap()[0].last_used_ms,
            Some(1_000)
        );
        sql.touch_token(t.id, 70_000).await.unwrap();
        assert_eq!(
            sql.tokens_of(b.id).await.unwrap()[0].last_used_ms,
            Some(70_000)
        );
        assert!(
            sql.revoke_token(a.id, t.id, 5).await.unwrap().is_none(),
            "not alice's"
        );
        assert_eq!(
            sql.revoke_token(b.id, t.id, 5).await.unwrap().unwrap().name,
            "ci"
        );
        assert!(
            sql.revoke_token(b.id, t.id, 6).await.unwrap().is_none(),
            "once"
        );
        assert!(sql.live_token("sha-1", 0).await.unwrap().is_none());
        assert_eq!(sql.tokens_of(b.id).await.unwrap()[0].revoked_at_ms, Some(5));
    }

    fn record(user: Option<i64>, expiry_ms: i64) -> Record {
        let mut data = std::collections::HashMap::new();
        if let Some(u) = user {
            data.insert(crate::store::sessions::USER_ID_KEY.to_string(), u.into());
        }
        data.insert("csrf".to_string(), "t".into());
        Record {
            id: Id::default(),
            data,
            expiry_date: time::OffsetDateTime::from_unix_timestamp_nanos(
                expiry_ms as i128 * 1_000_000,
            )
            .unwrap(),
        }
    }

    async fn sessions_load_save_expire(sql: &SqlStore) {
        let store = SqlSessionStore::new(Arc::new(sql.clone()));
        let now = crate::util::now_ms();
        let mut live = record(Some(1), now + 60_000);
        store.create(&mut live).await.unwrap();
        assert_eq!(store.load(&live.id).await.unwrap(), Some(live.clone()));
        // A colliding id on create gets a fresh one, not the other's row.
        let mut twin = record(Some(2), now + 60_000);
        twin.id = live.id;
        store.create(&mut twin).await.unwrap();
        assert_ne!(twin.id, live.id);
        assert_eq!(store.load(&live.id).await.unwrap(), Some(live.clone()));
        // Save updates.
        live.data.insert("csrf".into(), "u".into());
        store.save(&live).await.unwrap();
        assert_eq!(
            store.load(&live.id).await.unwrap().unwrap().data["csrf"],
            "u"
        );
        // Expired: never loaded, and swept.
        let mut old = record(None, now - 1);
        store.create(&mut old).await.unwrap();
        assert_eq!(store.load(&old.id).await.unwrap(), None);
        assert_eq!(sql.delete_expired_sessions(now).await.unwrap(), 1);
        // A user's sessions end together.
        assert_eq!(sql.session_count_of(1, now).await.unwrap(), 1);
        sql.delete_sessions_of(1).await.unwrap();
        assert_eq!(store.load(&live.id).await.unwrap(), None);
        assert!(store.load(&twin.id).await.unwrap().is_some());
        store.delete(&twin.id).await.unwrap();
        assert_eq!(store.load(&twin.id).await.unwrap(), None);
        // A request in flight saving a deleted session does not bring it back.
        store.save(&twin).await.unwrap();
        assert_eq!(store.load(&twin.id).await.unwrap(), None);
        store.save(&live).await.unwrap();
        assert_eq!(
            store.load(&live.id).await.unwrap(),
            None,
            "ended with its user"
        );
    }

    async fn audit_filters_and_is_append_only(sql: &SqlStore) {
        let e = |at, actor: &str, action: &str, target: &str| AuditRecord {
            id: 0,
            at_ms: at,
            actor: actor.into(),
            action: action.into(),
            target: target.into(),
            before: None,
            after: Some(r#"{"x":1}"#.into()),
            detail: String::new(),
        };
        for r in [
            e(10, "alice", "quota.create", "nlp-a"),
            e(20, "admin", "quota.update", "nlp"),
            e(30, "alice", "quota.delete", "nlp-a"),
            e(40, "admin", "user.create", "user:bob"),
        ] {
            sql.append_audit(&r).await.unwrap();
        }
        let ats = |f: AuditFilter| async move {
            sql.audit(&f, 100)
                .await
                .unwrap()
                .iter()
                .map(|r| r.at_ms)
                .collect::<Vec<_>>()
        };
        assert_eq!(ats(AuditFilter::default()).await, [40, 30, 20, 10]);
        let f = |g: fn(&mut AuditFilter)| {
            let mut f = AuditFilter::default();
            g(&mut f);
            f
        };
        assert_eq!(ats(f(|f| f.actor = Some("alice".into()))).await, [30, 10]);
        assert_eq!(ats(f(|f| f.target = Some("nlp".into()))).await, [20]);
        assert_eq!(
            ats(f(|f| f.action = Some("user.create".into()))).await,
            [40]
        );
        assert_eq!(
            ats(f(|f| {
                f.from_ms = Some(20);
                f.to_ms = Some(40);
            }))
            .await,
            [30, 20]
        );
        assert_eq!(
            ats(f(
                |f| f.targets_in = Some(vec!["nlp-a".into(), "user:bob".into()])
            ))
            .await,
            [40, 30, 10]
        );
        assert!(ats(f(|f| f.targets_in = Some(vec![]))).await.is_empty());
        let newest = sql.audit(&AuditFilter::default(), 1).await.unwrap();
        assert_eq!(newest.len(), 1);
        assert_eq!(newest[0].after.as_deref(), Some(r#"{"x":1}"#));
        assert_eq!(
            ats(f(|f| f.before_id = Some(3))).await,
            [20, 10],
            "paging back by id"
        );
        for stmt in ["UPDATE audit_log SET actor = 'x'", "DELETE FROM audit_log"] {
            let err = sqlx::query(stmt).execute(&sql.write).await.unwrap_err();
            assert!(err.to_string().contains("append-only"), "{stmt}: {err}");
        }
        assert_eq!(ats(AuditFilter::default()).await.len(), 4);
    }

    async fn login_failures_count_and_prune(sql: &SqlStore) {
        for at in [10, 20, 30] {
            sql.add_login_failure("carol", "1.2.3.4", at).await.unwrap();
        }
        sql.add_login_failure("carol", "5.6.7.8", 25).await.unwrap();
        assert_eq!(
            sql.login_failures("carol", "1.2.3.4", 15).await.unwrap(),
            [20, 30]
        );
        assert_eq!(sql.prune_login_failures(21).await.unwrap(), 2);
        assert_eq!(
            sql.login_failures("carol", "1.2.3.4", 0).await.unwrap(),
            [30]
        );
        sql.clear_login_failures("carol", "1.2.3.4").await.unwrap();
        assert!(sql
            .login_failures("carol", "1.2.3.4", 0)
            .await
            .unwrap()
            .is_empty());
        assert_eq!(
            sql.login_failures("carol", "5.6.7.8", 0).await.unwrap(),
            [25]
        );
    }

    async fn a_busy_attempt_takes_back_only_its_own_failure(sql: &SqlStore) {
        for _ in 0..3 {
            sql.add_login_failure("dora", "1.2.3.4", 40).await.unwrap();
        }
        sql.clear_login_failure("dora", "1.2.3.4", 40)
            .await
            .unwrap();
        sql.clear_login_failure("dora", "1.2.3.4", 40)
            .await
            .unwrap();
        assert_eq!(
            sql.login_failures("dora", "1.2.3.4", 0).await.unwrap(),
            [40],
            "two busy attempts and one real failure in one millisecond"
        );
    }

    async fn a_sign_in_that_raced_a_new_password_stores_no_session(sql: &SqlStore) {
        let store = SqlSessionStore::new(Arc::new(sql.clone()));
        let u = sql.create_user("fred", "old-hash", false, 5).await.unwrap();
        let signed_in = |hash: &str| {
            let mut r = record(Some(u.id), crate::util::now_ms() + 60_000);
            r.data.insert(
                crate::store::sessions::PASSWORD_HASH_KEY.to_string(),
                hash.into(),
            );
            r
        };
        // Checked against the old hash; the new password lands first.
        let mut late = signed_in("old-hash");
        sql.set_password_hash(u.id, "new-hash", 10).await.unwrap();
        store.create(&mut late).await.unwrap();
        assert_eq!(store.load(&late.id).await.unwrap(), None);
        assert_eq!(sql.session_count_of(u.id, 0).await.unwrap(), 0);
        // Checked against the current hash: stored, without the hash.
        let mut fresh = signed_in("new-hash");
        store.create(&mut fresh).await.unwrap();
        let loaded = store.load(&fresh.id).await.unwrap().expect("stored");
        assert!(!loaded
            .data
            .contains_key(crate::store::sessions::PASSWORD_HASH_KEY));
    }

    async fn quotas_not_listed_lose_their_roles_and_rules(sql: &SqlStore) {
        let g = sql.create_user("gina", "h", false, 5).await.unwrap();
        for q in ["ai", "cv", "it's"] {
            sql.set_binding(g.id, q, Role::Owner, 1).await.unwrap();
        }
        let rule = crate::alerts::Rule {
            key: "*".into(),
            warn_percent: 50,
            crit_percent: 90,
            forecast_horizon_hours: None,
            allocation_percent: None,
        };
        sql.set_alert_rule("nlp", &rule).await.unwrap();
        sql.set_alert_rule("ai", &rule).await.unwrap();
        let live = ["ai".to_string()].into_iter().collect();
        assert_eq!(sql.forget_quotas_not_in(&live, 9).await.unwrap(), 3);
        assert_eq!(
            sql.bindings_of(g.id).await.unwrap(),
            [Binding {
                quota: "ai".into(),
                role: Role::Owner
            }]
        );
        assert!(sql.alert_rules("nlp").await.unwrap().is_empty());
        assert_eq!(sql.alert_rules("ai").await.unwrap().len(), 1);
        let audit = sql
            .audit(
                &AuditFilter {
                    actor: Some("bizrq".into()),
                    ..Default::default()
                },
                10,
            )
            .await
            .unwrap();
        assert_eq!(audit.len(), 3, "{audit:?}");
        assert_eq!(sql.forget_quotas_not_in(&live, 10).await.unwrap(), 0);
    }

    async fn a_token_is_made_only_while_its_session_lives(sql: &SqlStore) {
        let u = sql.create_user("erin", "h1", false, 5).await.unwrap();
        sqlx::query(
            "INSERT INTO sessions (id, user_id, data, expiry_ms) VALUES ('s-e', $1, '{}', 1)",
        )
        .bind(u.id)
        .execute(&sql.write)
        .await
        .unwrap();
        // The password changes (ending the session) before the request that
        // was already past sign-in inserts its token.
        sql.set_password_hash(u.id, "h2", 10).await.unwrap();
        assert!(sql
            .create_token(u.id, "s-e", 0, "late", "sha-late", 11)
            .await
            .unwrap()
            .is_none());
        assert!(sql.tokens_of(u.id).await.unwrap().is_empty());
    }

    async fn a_token_made_under_a_replaced_password_never_works(sql: &SqlStore) {
        let u = sql.create_user("hana", "h1", false, 5).await.unwrap();
        assert_eq!(u.credential_gen, 0);
        sqlx::query(
            "INSERT INTO sessions (id, user_id, data, expiry_ms) VALUES ('s-h', $1, '{}', 1)",
        )
        .bind(u.id)
        .execute(&sql.write)
        .await
        .unwrap();
        let set = sql.set_password_hash(u.id, "h2", 10).await.unwrap();
        assert_eq!(set.credential_gen, 1);
        // The race the EXISTS alone lost: the insert still saw the session
        // (put back here as READ COMMITTED let it see it).
        sqlx::query(
            "INSERT INTO sessions (id, user_id, data, expiry_ms) VALUES ('s-h', $1, '{}', 1)",
        )
        .bind(u.id)
        .execute(&sql.write)
        .await
        .unwrap();
        let t = sql
            .create_token(u.id, "s-h", 0, "raced", "sha-raced", 11)
            .await
            .unwrap()
            .expect("inserted");
        assert!(sql.live_token("sha-raced", 0).await.unwrap().is_none());
        assert_eq!(
            sql.tokens_of(u.id).await.unwrap()[0].revoked_at_ms,
            Some(t.created_at_ms),
            "listed as revoked from its creation"
        );
        // Made under the current generation: live.
        sql.create_token(u.id, "s-h", 1, "now", "sha-now", 12)
            .await
            .unwrap()
            .unwrap();
        assert!(sql.live_token("sha-now", 0).await.unwrap().is_some());
        assert_eq!(
            sql.set_password_hash(u.id, "h3", 13).await.unwrap(),
            PasswordSet {
                revoked: 2,
                credential_gen: 2
            },
            "the raced token is revoked for good with the live one"
        );
        assert!(sql.live_token("sha-now", 0).await.unwrap().is_none());
    }

    async fn trusted_browsers_and_addresses_are_kept_bounded_and_outlive_a_password(
        sql: &SqlStore,
    ) {
        let u = sql.create_user("ivan", "h1", false, 5).await.unwrap();
        let v = sql.create_user("vera", "h1", false, 5).await.unwrap();
        for i in 0..(MAX_TRUSTED + 5) {
            sql.remember_device(u.id, &format!("dev-{i}"), 100 + i)
                .await
                .unwrap();
            sql.remember_address(u.id, &format!("10.0.0.{i}"), 100 + i)
                .await
                .unwrap();
        }
        // The oldest five went; the rest are known.
        assert_eq!(sql.device_user("dev-0", 0).await.unwrap(), None);
        assert_eq!(sql.device_user("dev-5", 0).await.unwrap(), Some(u.id));
        assert!(!sql.is_usual_address(u.id, "10.0.0.4", 0).await.unwrap());
        assert!(sql.is_usual_address(u.id, "10.0.0.5", 0).await.unwrap());
        assert!(!sql.is_usual_address(v.id, "10.0.0.5", 0).await.unwrap());
        // Not used since: not trusted.
        assert_eq!(sql.device_user("dev-5", 106).await.unwrap(), None);
        // Another user cannot take a browser's token over.
        sql.remember_device(v.id, "dev-6", 200).await.unwrap();
        assert_eq!(sql.device_user("dev-6", 0).await.unwrap(), Some(u.id));
        // Old ones are pruned; a new password keeps the rest.
        assert_eq!(sql.prune_login_trust(110).await.unwrap(), 2 * 5);
        sql.set_password_hash(u.id, "h2", 300).await.unwrap();
        assert_eq!(sql.device_user("dev-20", 0).await.unwrap(), Some(u.id));
        assert!(sql.is_usual_address(u.id, "10.0.0.20", 0).await.unwrap());
    }
}
