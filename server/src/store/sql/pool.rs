//! The SQL store's connections: which database (`Backend`), its
//! migrations, and the options every pool is opened with.

use sqlx::any::AnyPoolOptions;
use sqlx::{Connection, Executor};
use std::time::Duration;

pub(super) static SQLITE_MIGRATIONS: sqlx::migrate::Migrator =
    sqlx::migrate!("../migrations/sqlite");

pub(super) static POSTGRES_MIGRATIONS: sqlx::migrate::Migrator =
    sqlx::migrate!("../migrations/postgres");

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// Connections of the background tasks (the alert sweep, the usage
/// sampler) on PostgreSQL: a pool of their own, so a sweep never holds the
/// connections admissions wait for.
pub(super) const BACKGROUND_CONNECTIONS: u32 = 2;

/// Connections of the portal's own pool (`SqlStore::portal`): a page
/// waits for its own kind only; half the heavy requests that may run at
/// once (8, `heavy::Config`), whose statements are short beside their
/// rendering.
pub(super) const PORTAL_CONNECTIONS: u32 = 4;

/// A pooled connection idle at least this long is pinged before it is
/// handed out (and replaced if the ping fails); one used more recently is
/// not (`pool_options`).
pub(super) const PING_IF_IDLE: Duration = Duration::from_secs(30);

/// What every pool shares. sqlx pings a connection before every acquire
/// by default: a round trip to the SQLite connection's worker thread, or
/// to PostgreSQL, before each statement, which costs a flat-out admission
/// profile a share of the server's CPU with the thread switches it causes
/// (docs/benchmarks.md, "Figures once kept in code comments"). Only a connection idle for
/// `PING_IF_IDLE` is pinged: one a statement just used is alive, and
/// a statement on a connection that broke since fails like any other.
pub(super) fn pool_options() -> AnyPoolOptions {
    AnyPoolOptions::new()
        .acquire_timeout(Duration::from_secs(30))
        .test_before_acquire(false)
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for >= PING_IF_IDLE {
                    conn.ping().await?;
                }
                Ok(true)
            })
        })
}

/// Every SQLite pool's options, with `n` connections: write-ahead log,
/// and the pragmas each connection is opened with.
///
/// A connection is never closed for its age or idleness (sqlx's defaults
/// close it after 30 minutes, or 10 idle): the next request would open
/// its replacement on whatever thread asked, and a connection opened on a
/// thread of the portal's niced runtime runs at the portal's priority
/// (its sqlx thread inherits it). The admissions' connections are opened
/// at start, on the main runtime, and kept (docs/limits.md).
pub(super) fn sqlite_options(n: u32) -> AnyPoolOptions {
    pool_options()
        .max_connections(n)
        .max_lifetime(None)
        .idle_timeout(None)
        .after_connect(|conn, _| {
            Box::pin(async move {
                for pragma in [
                    "PRAGMA journal_mode = WAL",
                    "PRAGMA synchronous = NORMAL",
                    "PRAGMA busy_timeout = 10000",
                    // The writer copies the log into the database
                    // once it holds 1,000 pages (SQLite's
                    // default), so the log restarts from its
                    // beginning: checkpoints from another
                    // connection alone never catch up with a
                    // writer that never pauses, and the log would
                    // grow without end under load (docs/benchmarks.md,
                    // "Writes of many quotas in one statement"). The background's checkpoints
                    // (`checkpoint`, every 200 ms) copy most of
                    // the log first, off the commit path, and
                    // what remains when writes stop.
                    "PRAGMA wal_autocheckpoint = 1000",
                ] {
                    conn.execute(pragma).await?;
                }
                Ok(())
            })
        })
}
