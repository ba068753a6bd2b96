//! The SQL store (SQLite or PostgreSQL through sqlx `Any`): spec and status
//! as JSON text, a version column for compare-and-swap, and the status's
//! charges each a row of `charges`. A write names the charges it changed
//! (`charge_changes`) in the quota's row, and a trigger applies them in
//! the same statement (migration 0018): an admission writes the one charge
//! it changed, not every charge the quota holds, and a write stays one
//! statement.

mod pool;
pub mod query;
mod queue;
mod quotas;
pub mod rows;

use super::StoreError;
pub use pool::Backend;
use pool::{
    pool_options, sqlite_options, BACKGROUND_CONNECTIONS, PORTAL_CONNECTIONS, POSTGRES_MIGRATIONS,
    SQLITE_MIGRATIONS,
};
use queue::Writes;
use sqlx::{AnyPool, Row};
use std::sync::Arc;

#[derive(Clone)]
pub struct SqlStore {
    pub(super) read: AnyPool,
    /// SQLite has one writer; a one-connection pool queues writers in
    /// process instead of letting them spin on SQLITE_BUSY. PostgreSQL
    /// shares one pool for both.
    pub(super) write: AnyPool,
    /// The background tasks' own connections (`SqlStore::background`).
    bg_read: AnyPool,
    bg_write: AnyPool,
    /// Where `get` and `version` read a quota: the writer (a
    /// read-modify-write stays on one connection), or, in the portal's
    /// store (`SqlStore::portal`), its own read connections.
    fresh: AnyPool,
    /// The database's URL, for the pools opened later (`portal`).
    url: Arc<str>,
    pub backend: Backend,
    /// How old ledger entries are rolled up (`roll_up_ledger`; set from
    /// the configuration at start).
    pub(super) ledger_rollup:
        std::sync::Arc<std::sync::RwLock<quota::budget::ledger_rollup::Policy>>,
    /// Status writes waiting to go to the database together (`Writes`).
    writes: Arc<Writes>,
}

impl SqlStore {
    /// Connects, creating a SQLite file if missing, and applies migrations.
    pub async fn connect(url: &str) -> anyhow::Result<SqlStore> {
        sqlx::any::install_default_drivers();
        let backend = if url.starts_with("sqlite:") {
            Backend::Sqlite
        } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
            Backend::Postgres
        } else {
            anyhow::bail!(
                "unsupported database URL '{}': use sqlite://FILE or postgres://...",
                redacted_url(url)
            );
        };
        let store = match backend {
            Backend::Sqlite => {
                let url = if url.contains('?') || url.contains(":memory:") {
                    url.to_string()
                } else {
                    format!("{url}?mode=rwc")
                };
                let opts = sqlite_options;
                let write = opts(1).connect(&url).await?;
                SQLITE_MIGRATIONS.run(&write).await?;
                // All four opened now, on the main runtime (see
                // `sqlite_options`), not later by a portal request.
                let read = opts(4).min_connections(4).connect(&url).await?;
                // SQLite has one writer: the background shares the write
                // connection (a second one would spin on SQLITE_BUSY against
                // admissions) and writes in short transactions; it reads on
                // a connection of its own, opened when first used.
                // (An in-memory database is one per connection: read there.)
                let bg_read = if url.contains(":memory:") {
                    read.clone()
                } else {
                    opts(1).connect_lazy(&url)?
                };
                SqlStore {
                    read,
                    bg_write: write.clone(),
                    fresh: write.clone(),
                    write,
                    bg_read,
                    url: url.into(),
                    backend,
                    ledger_rollup: Default::default(),
                    writes: Default::default(),
                }
            }
            Backend::Postgres => {
                // Kept open (see `sqlite_options`): a connection reopened
                // by a portal request would register its socket with the
                // portal's niced runtime.
                let pool = pool_options()
                    .max_connections(16)
                    .max_lifetime(None)
                    .idle_timeout(None)
                    .connect(url)
                    .await?;
                POSTGRES_MIGRATIONS.run(&pool).await?;
                let bg = pool_options()
                    .max_connections(BACKGROUND_CONNECTIONS)
                    .connect_lazy(url)?;
                SqlStore {
                    read: pool.clone(),
                    fresh: pool.clone(),
                    write: pool,
                    bg_read: bg.clone(),
                    bg_write: bg,
                    url: url.into(),
                    backend,
                    ledger_rollup: Default::default(),
                    writes: Default::default(),
                }
            }
        };
        Ok(store)
    }

    pub async fn close(&self) {
        self.write.close().await;
        self.read.close().await;
        self.bg_write.close().await;
        self.bg_read.close().await;
    }

    /// SQLite: copies what the write-ahead log holds into the database
    /// (`PRAGMA wal_checkpoint(PASSIVE)`), on the background's read
    /// connection: most of what the writer's own checkpoints (every 1,000
    /// pages of log, `wal_autocheckpoint`, in a commit) would copy, and
    /// what they left when writes stopped. A
    /// passive checkpoint waits for no reader or writer: admissions commit
    /// meanwhile. Returns the log's frames and how many are now copied
    /// (`None` on PostgreSQL).
    pub async fn checkpoint(&self) -> Result<Option<(i64, i64)>, StoreError> {
        if self.backend != Backend::Sqlite {
            return Ok(None);
        }
        let row = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)")
            .fetch_one(&self.bg_read)
            .await?;
        Ok(Some((row.try_get(1)?, row.try_get(2)?)))
    }

    /// The same database through the background tasks' connections: on
    /// PostgreSQL a pool of `BACKGROUND_CONNECTIONS`, on SQLite a read
    /// connection of their own and the one writer, shared. What runs over
    /// every quota (the alert sweep, the usage sampler) goes through it,
    /// so it waits for its own connections, never for the admissions'.
    pub fn background(&self) -> SqlStore {
        SqlStore {
            read: self.bg_read.clone(),
            write: self.bg_write.clone(),
            bg_read: self.bg_read.clone(),
            bg_write: self.bg_write.clone(),
            fresh: self.bg_write.clone(),
            url: self.url.clone(),
            backend: self.backend,
            // Shared: one policy.
            ledger_rollup: self.ledger_rollup.clone(),
            // Its own: its writes go to its own connections.
            writes: Default::default(),
        }
    }

    /// The same database through the portal's own connections, opened
    /// when first used, so on the thread that first needs one: a thread of
    /// the portal's runtime, whose lower scheduling priority (nice 10 on
    /// Linux) a thread inherits from the thread that creates it. sqlx runs
    /// each SQLite connection on a thread of its own, which then runs the
    /// portal's SQL (sessions, samples, reports, a page's quota) at the
    /// portal's priority rather than the admissions'. On SQLite it reads on
    /// `PORTAL_CONNECTIONS` connections of its own and writes through the
    /// one writer (sessions, accounts: a second writer would spin on
    /// SQLITE_BUSY against admissions); its `get` reads there too, a
    /// committed snapshot, not through the writer. On PostgreSQL a pool of
    /// `PORTAL_CONNECTIONS` for both, whose sockets belong to the portal's
    /// runtime, which alone uses them.
    pub fn portal(&self) -> Result<SqlStore, StoreError> {
        let bad = |e: sqlx::Error| StoreError::Backend(e.to_string());
        let (read, write, fresh) = match self.backend {
            // An in-memory database is one per connection: the same ones.
            Backend::Sqlite if self.url.contains(":memory:") => {
                (self.read.clone(), self.write.clone(), self.fresh.clone())
            }
            Backend::Sqlite => {
                let read = sqlite_options(PORTAL_CONNECTIONS)
                    .connect_lazy(&self.url)
                    .map_err(bad)?;
                (read.clone(), self.write.clone(), read)
            }
            Backend::Postgres => {
                let pool = pool_options()
                    .max_connections(PORTAL_CONNECTIONS)
                    .connect_lazy(&self.url)
                    .map_err(bad)?;
                (pool.clone(), pool.clone(), pool)
            }
        };
        Ok(SqlStore {
            read,
            write,
            fresh,
            bg_read: self.bg_read.clone(),
            bg_write: self.bg_write.clone(),
            url: self.url.clone(),
            backend: self.backend,
            ledger_rollup: self.ledger_rollup.clone(),
            writes: Default::default(),
        })
    }

    pub async fn setting(&self, key: &str) -> Result<Option<String>, StoreError> {
        let row = sqlx::query("SELECT value FROM settings WHERE key = $1")
            .bind(key)
            .fetch_optional(&self.read)
            .await?;
        Ok(row.map(|r| r.get::<String, _>(0)))
    }

    pub async fn set_setting(&self, key: &str, value: &str) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO settings (key, value) VALUES ($1, $2) \
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        )
        .bind(key)
        .bind(value)
        .execute(&self.write)
        .await?;
        Ok(())
    }

    /// Where the sizes of the statements of quota writes go (`/metrics`).
    pub fn observe_writes(&self, sizes: prometheus_client::metrics::histogram::Histogram) {
        let _ = self.writes.sizes.set(sizes);
    }

    /// Quota writes that went out in a statement with others so far.
    pub fn coalesced_writes(&self) -> u64 {
        self.writes
            .coalesced
            .load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// A database URL fit for logs and errors: the password of its user part
/// and every parameter whose name ends in `password` replaced by `***`.
/// What is not a `scheme://` URL (a `host=… password=…` DSN) shows only its
/// scheme, since nothing in it can be told apart from a secret.
pub fn redacted_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return match url.split_once(':') {
            Some((scheme, _)) if is_scheme(scheme) => format!("{scheme}:(redacted)"),
            _ => "(unparsable URL)".into(),
        };
    };
    if !is_scheme(scheme) {
        return "(unparsable URL)".into();
    }
    // The user part ends at the last `@`: a password may hold an unencoded
    // `@`, `/`, `?` or `#`. A user name holds none of `/?#`, so an `@` that
    // follows one of them is in the path or query, not in the user part.
    let (user, host_on) = match rest.rsplit_once('@') {
        Some((user, host_on)) => {
            let name = user.split_once(':').map_or(user, |(n, _)| n);
            if name.contains(['/', '?', '#']) {
                (None, rest)
            } else {
                let shown = if user.contains(':') {
                    format!("{name}:***@")
                } else {
                    format!("{name}@")
                };
                (Some(shown), host_on)
            }
        }
        None => (None, rest),
    };
    let (head, query) = match host_on.split_once('?') {
        Some((h, q)) => (h, Some(q)),
        None => (host_on, None),
    };
    let mut out = format!("{scheme}://{}{head}", user.unwrap_or_default());
    if let Some(q) = query {
        // A part without `=` after a password is the rest of that password
        // (an unencoded `&` in it): it goes too.
        let mut in_secret = false;
        let mut params = Vec::new();
        for p in q.split('&') {
            match p.split_once('=') {
                Some((k, _)) if k.to_ascii_lowercase().ends_with("password") => {
                    in_secret = true;
                    params.push(format!("{k}=***"));
                }
                Some(_) => {
                    in_secret = false;
                    params.push(p.to_string());
                }
                None if in_secret => {}
                None => params.push(p.to_string()),
            }
        }
        out.push('?');
        out.push_str(&params.join("&"));
    }
    out
}

fn is_scheme(s: &str) -> bool {
    s.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

#[cfg(test)]
mod tests {
    use super::queue::*;
    use super::rows::*;
    use super::*;
    use crate::store::testdb::on_both_databases;
    use crate::store::{QuotaStore, Stored};
    use quota::object::{Charge, Quota, QuotaSpec, QuotaStatus};
    use quota::workload::PodSet;

    fn charge(cards: i64, uid: &str) -> Charge {
        Charge {
            pod_sets: vec![PodSet {
                name: "main".into(),
                count: cards,
                per_pod: [("requests.nvidia.com/gpu".to_string(), "1".parse().unwrap())].into(),
                qos: None,
            }],
            hpa: None,
            since: "2026-11-23T00:00:00.000Z".into(),
            uid: uid.into(),
            admitted: None,
        }
    }

    /// A quota of `cards` GPUs.
    fn gpus(cards: &str) -> QuotaSpec {
        QuotaSpec {
            hard: [(
                "requests.nvidia.com/gpu".to_string(),
                cards.parse().unwrap(),
            )]
            .into(),
            ..Default::default()
        }
    }

    /// A busy status is written with the JSON its unchanged charges kept
    /// from the last write: what is read back is what was written each time,
    /// a changed charge as changed, a released one gone (its binding too).
    async fn a_busy_status_reads_back_as_written(store: &SqlStore) {
        let spec = gpus("100");
        let mut current = store.create(&Quota::new("busy", spec)).await.unwrap();
        let w = |i: usize| format!("apps/Deployment/ml/w{i}");
        for round in 0..3usize {
            let mut status = current.quota.status.clone();
            for i in 0..20 {
                let cards = if i == round { 2 } else { 1 };
                status
                    .workloads
                    .insert(w(i), charge(cards, &format!("u{i}")));
            }
            if round == 2 {
                status.workloads.remove(&w(7));
            }
            status.refresh(&current.quota.spec);
            let version = store.replace_status(&current, &status).await.unwrap();
            current = store.get("busy").await.unwrap().unwrap();
            assert_eq!(current.version, version);
            assert_eq!(current.quota.status, status, "round {round}");
        }
        assert_eq!(current.quota.status.workloads[&w(2)].pod_sets[0].count, 2);
        assert_eq!(current.quota.status.workloads[&w(1)].pod_sets[0].count, 1);
        assert_eq!(
            store.workload_quota(&w(3)).await.unwrap().as_deref(),
            Some("busy")
        );
        assert_eq!(store.workload_quota(&w(7)).await.unwrap(), None);
        // Each charge is stored in the very JSON it was written in (a
        // later read beside a copy that holds it shares it instead of
        // parsing it: `Workloads::insert_json`).
        let stored: String =
            sqlx::query("SELECT charge FROM charges WHERE quota = 'busy' AND workload = $1")
                .bind(w(2))
                .fetch_one(&store.read)
                .await
                .unwrap()
                .get(0);
        assert_eq!(stored, serde_json::to_string(&charge(2, "u2")).unwrap());
    }

    /// Writes of many quotas at once go out coalesced (`Writes`): each
    /// answered as if written alone. A current version is written (its
    /// bindings with it), a stale one loses its swap, a deleted quota is
    /// not found, and a workload moved from one quota to another in the
    /// same statement is bound to where it went.
    async fn coalesced_writes_answer_each_as_if_alone(store: &SqlStore) {
        let spec = gpus("100");
        let n = 60;
        let mut current = Vec::new();
        for i in 0..n {
            let q = Quota::new(&format!("q{i}"), spec.clone());
            let mut s = store.create(&q).await.unwrap();
            // q0 holds "moving", which q1 takes over below.
            if i == 0 {
                let mut status = s.quota.status.clone();
                status
                    .workloads
                    .insert("apps/Deployment/ml/moving".into(), charge(1, "m"));
                let v = store.replace_status(&s, &status).await.unwrap();
                s = store.get("q0").await.unwrap().unwrap();
                assert_eq!(s.version, v);
            }
            current.push(s);
        }
        // Every third quota moves on before the storm: its copy is stale.
        for s in current.iter().skip(2).step_by(3) {
            let mut status = s.quota.status.clone();
            status.workloads.insert(
                format!("apps/Deployment/ml/other-{}", s.quota.name()),
                charge(1, "o"),
            );
            store.replace_status(s, &status).await.unwrap();
        }
        let gone = store.get("q5").await.unwrap().unwrap();
        store.delete(&gone).await.unwrap();
        let tasks: Vec<_> = current
            .iter()
            .cloned()
            .map(|s| {
                let store = store.clone();
                tokio::spawn(async move {
                    let name = s.quota.name().to_string();
                    let mut status = s.quota.status.clone();
                    status.workloads.remove("apps/Deployment/ml/moving");
                    status
                        .workloads
                        .insert(format!("apps/Deployment/ml/w-{name}"), charge(2, "w"));
                    if name == "q1" {
                        status
                            .workloads
                            .insert("apps/Deployment/ml/moving".into(), charge(1, "m"));
                    }
                    (name, store.replace_status(&s, &status).await)
                })
            })
            .collect();
        for (i, t) in tasks.into_iter().enumerate() {
            let (name, result) = t.await.unwrap();
            let stored = store.get(&name).await.unwrap();
            let mine = format!("apps/Deployment/ml/w-{name}");
            if i == 5 {
                assert!(
                    matches!(result, Err(StoreError::NotFound(_))),
                    "{name}: {result:?}"
                );
                assert!(stored.is_none());
                assert_eq!(store.workload_quota(&mine).await.unwrap(), None);
            } else if i >= 2 && (i - 2) % 3 == 0 {
                assert!(
                    matches!(result, Err(StoreError::Conflict(_))),
                    "{name}: {result:?}"
                );
                let stored = stored.unwrap();
                assert!(!stored.quota.status.workloads.contains_key(&mine), "{name}");
                assert_eq!(store.workload_quota(&mine).await.unwrap(), None);
            } else {
                let version = result.unwrap_or_else(|e| panic!("{name}: {e}"));
                let stored = stored.unwrap();
                assert_eq!(stored.version, version, "{name}");
                assert_eq!(stored.quota.status.workloads[&mine].pod_sets[0].count, 2);
                assert_eq!(
                    store.workload_quota(&mine).await.unwrap().as_deref(),
                    Some(name.as_str())
                );
            }
        }
        assert_eq!(
            store
                .workload_quota("apps/Deployment/ml/moving")
                .await
                .unwrap()
                .as_deref(),
            Some("q1")
        );
        // They went out together, not one by one.
        assert!(
            store.coalesced_writes() >= 20,
            "{}",
            store.coalesced_writes()
        );
    }

    /// SQLite: writes that never pause keep the write-ahead log small. It
    /// is copied into the database by the writer every 1,000 pages and
    /// then restarts from its beginning; before, only checkpoints from
    /// another connection ran, which never caught up with such a writer,
    /// and the log grew by tens of MB a second under load.
    #[tokio::test]
    async fn the_log_stays_small_under_writes_that_never_pause() {
        let db = crate::store::testdb::sqlite().await;
        let store = &db.store;
        let row = sqlx::query("PRAGMA database_list")
            .fetch_one(&store.read)
            .await
            .unwrap();
        let wal = format!("{}-wal", row.get::<String, _>(2));
        let spec = gpus("100000");
        let mut current = Vec::new();
        for i in 0..100 {
            current.push(
                store
                    .create(&Quota::new(&format!("q{i}"), spec.clone()))
                    .await
                    .unwrap(),
            );
        }
        // 40 rounds of a charge more on each quota: 4,000 commits, each
        // appending every page it changed (the quota's row, the new
        // charge's row and its two index entries) to the log: far past the
        // bound below when only another connection checkpoints.
        for round in 0..40 {
            for s in current.iter_mut() {
                let mut status = s.quota.status.clone();
                status.workloads.insert(
                    format!("apps/Deployment/ml/{}-{round}", s.quota.name()),
                    charge(1, "u"),
                );
                let v = store.replace_status(s, &status).await.unwrap();
                s.quota.status = status;
                s.version = v;
            }
        }
        let size = std::fs::metadata(&wal).unwrap().len();
        assert!(size < 12 << 20, "the log holds {} MB", size >> 20);
        db.finish().await;
    }

    /// A flusher that ends without emptying the queue (a panic, or its
    /// task dropped unrun) gives its place back and answers what is queued
    /// with an error: nobody waits for a flusher that will never come, and
    /// the next write starts one.
    #[test]
    fn a_flusher_that_ends_early_strands_nobody() {
        let writes = Arc::new(Writes::default());
        let (done, mut answer) = tokio::sync::oneshot::channel();
        {
            let mut q = writes.queue.lock().unwrap();
            q.flushers = 1;
            q.pending.push(PendingWrite {
                name: "q".into(),
                version: 1,
                uid: None,
                spec: "{}".into(),
                status: "{}".into(),
                charges: Default::default(),
                done,
            });
        }
        drop(Running {
            writes: writes.clone(),
            armed: true,
        });
        let q = writes.queue.lock().unwrap();
        assert_eq!((q.flushers, q.pending.len()), (0, 0));
        assert!(matches!(
            answer.try_recv(),
            Err(tokio::sync::oneshot::error::TryRecvError::Closed)
        ));
    }

    /// A small random generator (xorshift), so a failing run repeats.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    /// Charges are rows of their own, written with the quota's row: after
    /// rounds of random changes (charges added, resized, released, moved
    /// between quotas) written at once from many tasks (coalesced, one
    /// statement for many quotas), one by one, and through the ledger's
    /// transaction, every read gives each quota exactly the charges of
    /// its last write, and each workload is found in the quota holding it.
    async fn every_read_gives_the_charges_last_written(store: &SqlStore) {
        let mut root = Quota::new("root", gpus("1000"));
        root.status
            .workloads
            .insert("apps/Job/ml/at-root".into(), charge(1, "r"));
        store.create(&root).await.unwrap();
        let mut current = Vec::new();
        for i in 0..12 {
            let mut spec = gpus("100");
            spec.parent = "root".into();
            current.push(
                store
                    .create(&Quota::new(&format!("q{i:02}"), spec))
                    .await
                    .unwrap(),
            );
        }
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for round in 0..8 {
            let mut tasks = Vec::new();
            let mut taken: std::collections::HashSet<String> = current
                .iter()
                .flat_map(|s| s.quota.status.workloads.keys().cloned())
                .collect();
            for (i, s) in current.iter().enumerate() {
                let mut status = s.quota.status.clone();
                for _ in 0..rng.below(6) {
                    let w = format!("apps/Deployment/ml/w{}", rng.below(40));
                    match rng.below(3) {
                        0 => {
                            status.workloads.remove(&w);
                        }
                        1 => {
                            if let Some(c) = status.workloads.get_mut(&w) {
                                c.pod_sets[0].count += 1;
                            }
                        }
                        _ => {
                            // One workload in one quota at a time: none
                            // held, or taken this round, by another.
                            if taken.insert(w.clone()) {
                                status.workloads.insert(w, charge(1, &format!("u{round}")));
                            }
                        }
                    }
                }
                status.refresh(&s.quota.spec);
                if i == round {
                    // A write through the ledger's transaction: an entry
                    // it accrued is stored with it.
                    status.ledger.0.push(quota::object::budgets::Entry {
                        quota: String::new(),
                        key: "bizrq.io/gpu-hours".into(),
                        workload: String::new(),
                        namespace: "ml".into(),
                        model: None,
                        qos: None,
                        user: None,
                        start_ms: 1_000 * round as i64,
                        end_ms: 1_000 * round as i64 + 1,
                        amount: 1,
                        reason: quota::object::budgets::Reason::Accrual,
                        note: String::new(),
                    });
                }
                let store = store.clone();
                let s = s.clone();
                let t = tokio::spawn(async move {
                    let v = store.replace_status(&s, &status).await.unwrap();
                    status.ledger = Default::default();
                    Stored {
                        quota: Quota { status, ..s.quota },
                        version: v,
                    }
                });
                // Every other round one by one, else all at once.
                if round % 2 == 1 {
                    let done = t.await.unwrap();
                    tasks.push(tokio::spawn(std::future::ready(done)));
                } else {
                    tasks.push(t);
                }
            }
            for (s, t) in current.iter_mut().zip(tasks) {
                *s = t.await.unwrap();
            }
            let expect: Vec<_> = current
                .iter()
                .map(|s| (s.quota.name(), &s.quota.status))
                .collect();
            let check = |read: Vec<Stored>, how: &str| {
                let read: Vec<_> = read
                    .into_iter()
                    .filter(|s| s.quota.name() != "root")
                    .collect();
                assert_eq!(read.len(), expect.len(), "{how}, round {round}");
                for (r, (name, status)) in read.iter().zip(&expect) {
                    assert_eq!(r.quota.name(), *name, "{how}");
                    assert_eq!(
                        &r.quota.status.workloads, &status.workloads,
                        "{how}: {name}, round {round}"
                    );
                    assert_eq!(&r.quota.status, *status, "{how}: {name}, round {round}");
                }
            };
            check(store.list().await.unwrap(), "list");
            check(store.children("root").await.unwrap(), "children");
            check(store.subtrees(&["root".into()]).await.unwrap(), "subtrees");
            let names: Vec<String> = expect.iter().map(|(n, _)| n.to_string()).collect();
            check(store.get_many(&names).await.unwrap(), "get_many");
            let mut one = Vec::new();
            for n in &names {
                one.push(store.get(n).await.unwrap().unwrap());
            }
            check(one, "get");
            for (name, status) in &expect {
                for w in status.workloads.keys() {
                    assert_eq!(
                        store.workload_quota(w).await.unwrap().as_deref(),
                        Some(*name)
                    );
                }
            }
        }
        let root = store.get("root").await.unwrap().unwrap();
        assert_eq!(root.quota.status.workloads.len(), 1);
        assert_eq!(
            store
                .workload_quota("apps/Job/ml/at-root")
                .await
                .unwrap()
                .as_deref(),
            Some("root")
        );
        // A deleted quota's charges go with it.
        let q0 = store.get("q00").await.unwrap().unwrap();
        let held: Vec<String> = q0.quota.status.workloads.keys().cloned().collect();
        store.delete(&q0).await.unwrap();
        for w in held {
            assert_eq!(store.workload_quota(&w).await.unwrap(), None);
        }
        let left: i64 = sqlx::query("SELECT COUNT(*) FROM charges WHERE quota = 'q00'")
            .fetch_one(&store.read)
            .await
            .unwrap()
            .get(0);
        assert_eq!(left, 0);
    }

    /// Under PostgreSQL's row lock (`modify_locked`) the decision sees the
    /// quota's charges, and what it changes of them is written.
    async fn a_locked_write_sees_and_writes_the_charges(store: &SqlStore) {
        let mut q = Quota::new("locked", gpus("10"));
        q.status
            .workloads
            .insert("apps/Job/ml/a".into(), charge(1, "a"));
        q.status
            .workloads
            .insert("apps/Job/ml/b".into(), charge(1, "b"));
        store.create(&q).await.unwrap();
        let mut seen = None;
        let mut decide = |s: &Stored| {
            seen = Some(s.quota.status.workloads.clone());
            let mut q = s.quota.clone();
            q.status.workloads.remove("apps/Job/ml/a");
            q.status
                .workloads
                .get_mut("apps/Job/ml/b")
                .unwrap()
                .pod_sets[0]
                .count = 3;
            q.status
                .workloads
                .insert("apps/Job/ml/c".into(), charge(2, "c"));
            Some(q)
        };
        let Some(done) = store.modify_locked("locked", None, &mut decide).await else {
            assert_eq!(store.backend, Backend::Sqlite);
            return;
        };
        let written = done.unwrap().unwrap();
        assert_eq!(seen.unwrap(), q.status.workloads);
        let read = store.get("locked").await.unwrap().unwrap();
        assert_eq!(read.version, written.version);
        assert_eq!(read.quota.status.workloads, written.quota.status.workloads);
        assert_eq!(
            read.quota.status.workloads.keys().collect::<Vec<_>>(),
            ["apps/Job/ml/b", "apps/Job/ml/c"]
        );
        assert_eq!(
            read.quota.status.workloads["apps/Job/ml/b"].pod_sets[0].count,
            3
        );
    }

    /// A database written before charges had rows of their own (up to
    /// migration 0017, charges in the status JSON) is migrated: each
    /// charge becomes a row, the statuses lose theirs, and every quota
    /// reads back as it was, its workloads found where they are.
    async fn charges_move_out_of_statuses_written_before(url: &str, migrations: &str) {
        sqlx::any::install_default_drivers();
        let old = tempfile::tempdir().unwrap();
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../migrations")
            .join(migrations);
        for f in std::fs::read_dir(&dir).unwrap() {
            let f = f.unwrap();
            if f.file_name().to_string_lossy().as_ref() < "0018" {
                std::fs::copy(f.path(), old.path().join(f.file_name())).unwrap();
            }
        }
        let pool = sqlx::any::AnyPoolOptions::new()
            .max_connections(1)
            .connect(url)
            .await
            .unwrap();
        let before = sqlx::migrate::Migrator::new(old.path()).await.unwrap();
        assert_eq!(before.iter().count(), 17);
        before.run(&pool).await.unwrap();
        let spec = gpus("10");
        let mut busy = QuotaStatus::default();
        busy.workloads
            .insert("apps/Job/ml/a".into(), charge(1, "a"));
        busy.workloads
            .insert("apps/Job/ml/b".into(), charge(2, "b"));
        busy.refresh(&spec);
        let mut idle = QuotaStatus::default();
        idle.refresh(&spec);
        for (name, status) in [("busy", &busy), ("idle", &idle)] {
            sqlx::query(
                "INSERT INTO quotas (name, parent, spec, status, version, uid, created_at) \
                 VALUES ($1, '', $2, $3, 3, $4, '2026-11-01T00:00:00Z')",
            )
            .bind(name)
            .bind(to_json(&spec).unwrap())
            .bind(serde_json::to_string(status).unwrap())
            .bind(format!("uid-{name}"))
            .execute(&pool)
            .await
            .unwrap();
        }
        let held: i64 = sqlx::query("SELECT COUNT(*) FROM workload_bindings")
            .fetch_one(&pool)
            .await
            .unwrap()
            .get(0);
        assert_eq!(held, 2);
        pool.close().await;

        let store = SqlStore::connect(url).await.unwrap();
        let read = store.get("busy").await.unwrap().unwrap();
        assert_eq!(read.version, 3);
        assert_eq!(read.quota.status, busy);
        assert_eq!(store.get("idle").await.unwrap().unwrap().quota.status, idle);
        let raw: String = sqlx::query("SELECT status FROM quotas WHERE name = 'busy'")
            .fetch_one(&store.read)
            .await
            .unwrap()
            .get(0);
        assert!(!raw.contains("workloads"), "{raw}");
        assert_eq!(
            store
                .workload_quota("apps/Job/ml/b")
                .await
                .unwrap()
                .as_deref(),
            Some("busy")
        );
        // A bizrq from before still running beside this one would write
        // statuses with their charges inside: refused, not half-applied.
        for old_sql in [
            "UPDATE quotas SET status = $1, version = version + 1 WHERE name = 'idle'",
            "INSERT INTO quotas (name, parent, spec, status, version, uid, created_at) \
             VALUES ('old-new', '', '{}', $1, 1, 'u', '2026-11-28T00:00:00Z')",
        ] {
            let refused = sqlx::query(old_sql)
                .bind(serde_json::to_string(&busy).unwrap())
                .execute(&store.write)
                .await
                .unwrap_err();
            assert!(
                refused.to_string().contains("older than this database"),
                "{old_sql}: {refused}"
            );
        }
        assert_eq!(store.get("idle").await.unwrap().unwrap().quota.status, idle);
        // And it is written as any other since.
        let mut status = read.quota.status.clone();
        status.workloads.remove("apps/Job/ml/a");
        store.replace_status(&read, &status).await.unwrap();
        let read = store.get("busy").await.unwrap().unwrap();
        assert_eq!(read.quota.status, status);
        assert_eq!(store.workload_quota("apps/Job/ml/a").await.unwrap(), None);
        store.close().await;
    }

    #[tokio::test]
    async fn charges_move_out_of_statuses_written_before_on_sqlite() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("old.db").display());
        charges_move_out_of_statuses_written_before(&url, "sqlite").await;
    }

    #[tokio::test]
    async fn charges_move_out_of_statuses_written_before_on_postgres() {
        let (base, db) = crate::store::testdb::new_postgres_database().await;
        charges_move_out_of_statuses_written_before(&format!("{base}/{db}"), "postgres").await;
        crate::store::testdb::drop_postgres_database(&base, &db).await;
    }

    on_both_databases!(
        a_busy_status_reads_back_as_written,
        coalesced_writes_answer_each_as_if_alone,
        every_read_gives_the_charges_last_written,
        a_locked_write_sees_and_writes_the_charges,
    );
}
