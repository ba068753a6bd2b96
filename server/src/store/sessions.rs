//! tower-sessions' `SessionStore` over our SQL store (`sessions`, migration
//! 0004). The sqlx stores of tower-sessions need a concrete pool; ours is
//! `Any` over SQLite or PostgreSQL, so this is the small store of our own.

use super::sql::SqlStore;
use super::StoreError;
use async_trait::async_trait;
use sqlx::Row;
use std::collections::HashMap;
use std::sync::Arc;
use tower_sessions::session::{Id, Record};
use tower_sessions::session_store::{self, SessionStore};

/// The session key under which the portal keeps the signed-in user's id;
/// copied to the `user_id` column so a user's sessions can be ended.
pub const USER_ID_KEY: &str = "user_id";

/// The session key under which sign-in keeps the user's credential
/// generation it signed in under (`users.credential_gen`). The session
/// works only while that is still the user's: a new password raises it,
/// so a sign-in whose insert raced the reset's delete is dead on its
/// first use. A session without it (made before the generation existed)
/// counts as generation 0.
pub const CREDENTIAL_GEN_KEY: &str = "credential_gen";

/// How often the expiry of a session whose data did not change is written
/// again. With an idle expiry tower-sessions saves the session on every
/// request to push it forward, and on SQLite each save is a write on the
/// one writer admissions commit on: a portal under load (clients retrying
/// their 429s) would make tens of such writes a second. A session then ends
/// after between `idle − 60 s` and `idle` without activity.
pub const EXPIRY_REFRESH_MS: i64 = 60_000;

/// Sessions whose stored state this process remembers at most; past it
/// the memory starts again (each then costs one more write).
const REMEMBERED: usize = 100_000;

#[derive(Clone)]
pub struct SqlSessionStore {
    sql: Arc<SqlStore>,
    /// Per session, what this process last read or wrote of it: a digest
    /// of its data and its stored expiry.
    stored: Arc<std::sync::Mutex<HashMap<Id, (u64, i64)>>>,
}

impl std::fmt::Debug for SqlSessionStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlSessionStore")
            .field("backend", &self.sql.backend)
            .finish()
    }
}

impl SqlSessionStore {
    pub fn new(sql: Arc<SqlStore>) -> SqlSessionStore {
        SqlSessionStore {
            sql,
            stored: Default::default(),
        }
    }

    fn remember(&self, id: Id, digest: u64, expiry_ms: i64) {
        let mut m = self.stored.lock().unwrap_or_else(|e| e.into_inner());
        if m.len() >= REMEMBERED && !m.contains_key(&id) {
            m.clear();
        }
        m.insert(id, (digest, expiry_ms));
    }

    fn forget(&self, id: &Id) {
        self.stored
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
    }

    /// Whether saving `digest` with `expiry_ms` would change nothing but
    /// push the stored expiry forward by less than `EXPIRY_REFRESH_MS`.
    fn unchanged(&self, id: &Id, digest: u64, expiry_ms: i64) -> bool {
        let m = self.stored.lock().unwrap_or_else(|e| e.into_inner());
        m.get(id).is_some_and(|&(d, stored)| {
            d == digest && expiry_ms >= stored && expiry_ms - stored < EXPIRY_REFRESH_MS
        })
    }
}

/// A digest of what a session stores (its data, in key order, and user).
fn digest(data: &HashMap<String, serde_json::Value>) -> u64 {
    use std::hash::{Hash, Hasher};
    let canon: std::collections::BTreeMap<&String, &serde_json::Value> = data
        .iter()
        .filter(|(k, _)| *k != PASSWORD_HASH_KEY)
        .collect();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_string(&canon)
        .unwrap_or_default()
        .hash(&mut h);
    h.finish()
}

fn backend(e: impl std::fmt::Display) -> session_store::Error {
    session_store::Error::Backend(e.to_string())
}

fn expiry_ms(record: &Record) -> i64 {
    (record.expiry_date.unix_timestamp_nanos() / 1_000_000) as i64
}

fn user_id(record: &Record) -> Option<i64> {
    record.data.get(USER_ID_KEY).and_then(|v| v.as_i64())
}

/// The session key under which sign-in leaves the password hash it
/// checked. It is never stored: `create` inserts the session only while the
/// user still has that hash and is enabled, in the inserting statement, so
/// a sign-in that raced a new password (which deletes the user's sessions)
/// or a disabling leaves no session behind.
pub const PASSWORD_HASH_KEY: &str = "password_hash_at_sign_in";

fn encode(record: &Record) -> session_store::Result<String> {
    let data: HashMap<&String, &serde_json::Value> = record
        .data
        .iter()
        .filter(|(k, _)| *k != PASSWORD_HASH_KEY)
        .collect();
    serde_json::to_string(&data).map_err(|e| session_store::Error::Encode(e.to_string()))
}

#[async_trait]
impl SessionStore for SqlSessionStore {
    /// Inserts under a fresh id, drawing another on the (unlikely) collision
    /// with an existing session rather than overwriting it.
    async fn create(&self, record: &mut Record) -> session_store::Result<()> {
        let data = encode(record)?;
        let checked_hash = record
            .data
            .get(PASSWORD_HASH_KEY)
            .and_then(|v| v.as_str())
            .map(str::to_string);
        let insert = match checked_hash {
            None => "INSERT INTO sessions (id, user_id, data, expiry_ms) VALUES ($1, $2, $3, $4)",
            Some(_) => {
                "INSERT INTO sessions (id, user_id, data, expiry_ms) \
                 SELECT $1, $2, $3, $4 WHERE EXISTS \
                   (SELECT 1 FROM users WHERE id = $2 AND password_hash = $5 AND disabled = 0)"
            }
        };
        loop {
            let mut query = sqlx::query(insert)
                .bind(record.id.to_string())
                .bind(user_id(record))
                .bind(&data)
                .bind(expiry_ms(record));
            if let Some(hash) = &checked_hash {
                query = query.bind(hash.as_str());
            }
            let res = query.execute(&self.sql.write).await;
            match res {
                Ok(done) if done.rows_affected() == 0 => {
                    // The password changed (or the user was disabled) since
                    // it was checked: the cookie names no session.
                    tracing::info!("a sign-in lost a race with a new password: no session made");
                    return Ok(());
                }
                Ok(_) => return Ok(()),
                Err(e) if super::is_unique_violation(&e) => {
                    record.id = Id::default();
                }
                Err(e) => return Err(backend(e)),
            }
        }
    }

    /// Updates a session that still exists, and nothing else. tower-sessions
    /// calls `save` only for a session it loaded (new ones go to `create`),
    /// so a missing row means it was deleted meanwhile — a logout, a new
    /// password, a disabled user — and a request still in flight must not
    /// bring it back.
    ///
    /// A save that changes no data and pushes the expiry forward by less
    /// than `EXPIRY_REFRESH_MS` is not written (`EXPIRY_REFRESH_MS`).
    async fn save(&self, record: &Record) -> session_store::Result<()> {
        let (d, expiry) = (digest(&record.data), expiry_ms(record));
        if self.unchanged(&record.id, d, expiry) {
            return Ok(());
        }
        sqlx::query("UPDATE sessions SET user_id = $1, data = $2, expiry_ms = $3 WHERE id = $4")
            .bind(user_id(record))
            .bind(encode(record)?)
            .bind(expiry)
            .bind(record.id.to_string())
            .execute(&self.sql.write)
            .await
            .map_err(backend)?;
        self.remember(record.id, d, expiry);
        Ok(())
    }

    /// Expired sessions are never loaded, whether or not they were deleted.
    async fn load(&self, id: &Id) -> session_store::Result<Option<Record>> {
        let row =
            sqlx::query("SELECT data, expiry_ms FROM sessions WHERE id = $1 AND expiry_ms > $2")
                .bind(id.to_string())
                .bind(crate::util::now_ms())
                .fetch_optional(&self.sql.read)
                .await
                .map_err(backend)?;
        let Some(row) = row else { return Ok(None) };
        let data: String = row.try_get("data").map_err(backend)?;
        let expiry: i64 = row.try_get("expiry_ms").map_err(backend)?;
        let data: HashMap<String, serde_json::Value> =
            serde_json::from_str(&data).map_err(|e| session_store::Error::Decode(e.to_string()))?;
        self.remember(*id, digest(&data), expiry);
        let expiry_date =
            time::OffsetDateTime::from_unix_timestamp_nanos(expiry as i128 * 1_000_000)
                .map_err(|e| session_store::Error::Decode(e.to_string()))?;
        Ok(Some(Record {
            id: *id,
            data,
            expiry_date,
        }))
    }

    async fn delete(&self, id: &Id) -> session_store::Result<()> {
        self.forget(id);
        sqlx::query("DELETE FROM sessions WHERE id = $1")
            .bind(id.to_string())
            .execute(&self.sql.write)
            .await
            .map_err(backend)?;
        Ok(())
    }
}

impl SqlStore {
    /// Deletes sessions that expired before an instant; how many.
    pub async fn delete_expired_sessions(&self, now_ms: i64) -> Result<u64, StoreError> {
        let done = sqlx::query("DELETE FROM sessions WHERE expiry_ms <= $1")
            .bind(now_ms)
            .execute(&self.write)
            .await?;
        Ok(done.rows_affected())
    }

    /// Ends every session of a user (disabled, or a new password); how
    /// many there were.
    pub async fn delete_sessions_of(&self, user_id: i64) -> Result<u64, StoreError> {
        let done = sqlx::query("DELETE FROM sessions WHERE user_id = $1")
            .bind(user_id)
            .execute(&self.write)
            .await?;
        Ok(done.rows_affected())
    }

    /// How many live sessions a user has (tests, the users page).
    pub async fn session_count_of(&self, user_id: i64, now_ms: i64) -> Result<i64, StoreError> {
        let row =
            sqlx::query("SELECT COUNT(*) FROM sessions WHERE user_id = $1 AND expiry_ms > $2")
                .bind(user_id)
                .bind(now_ms)
                .fetch_one(&self.read)
                .await?;
        Ok(row.try_get::<i64, _>(0)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::testdb::on_both_databases;

    on_both_databases!(an_unchanged_session_has_its_expiry_written_at_most_once_a_minute);

    async fn stored_expiry(sql: &SqlStore, id: &Id) -> i64 {
        sqlx::query("SELECT expiry_ms FROM sessions WHERE id = $1")
            .bind(id.to_string())
            .fetch_one(&sql.read)
            .await
            .unwrap()
            .try_get(0)
            .unwrap()
    }

    async fn an_unchanged_session_has_its_expiry_written_at_most_once_a_minute(sql: &SqlStore) {
        let store = SqlSessionStore::new(Arc::new(sql.clone()));
        let at = |ms: i64| {
            time::OffsetDateTime::from_unix_timestamp_nanos(ms as i128 * 1_000_000).unwrap()
        };
        let t0 = crate::util::now_ms() + 3_600_000;
        let mut record = Record {
            id: Id::default(),
            data: [("flash".to_string(), serde_json::json!("hi"))].into(),
            expiry_date: at(t0),
        };
        store.create(&mut record).await.unwrap();
        let loaded = store.load(&record.id).await.unwrap().unwrap();
        assert_eq!(loaded.data, record.data);
        // Requests within the minute push the expiry only in memory.
        for s in 1..=59 {
            record.expiry_date = at(t0 + s * 1_000);
            store.save(&record).await.unwrap();
        }
        assert_eq!(stored_expiry(sql, &record.id).await, t0);
        // A minute on, it is written.
        record.expiry_date = at(t0 + 60_000);
        store.save(&record).await.unwrap();
        assert_eq!(stored_expiry(sql, &record.id).await, t0 + 60_000);
        // A change of data is written at once.
        record.data.insert("flash".into(), serde_json::json!("bye"));
        record.expiry_date = at(t0 + 61_000);
        store.save(&record).await.unwrap();
        assert_eq!(stored_expiry(sql, &record.id).await, t0 + 61_000);
        assert_eq!(
            store.load(&record.id).await.unwrap().unwrap().data["flash"],
            "bye"
        );
        // Deleted: a later save brings nothing back.
        store.delete(&record.id).await.unwrap();
        record.expiry_date = at(t0 + 62_000);
        store.save(&record).await.unwrap();
        assert!(store.load(&record.id).await.unwrap().is_none());
    }
}
