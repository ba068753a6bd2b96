//! Test-only: a store on a fresh SQLite file or PostgreSQL database. The
//! PostgreSQL server is required, as in the integration tests.

use super::sql::SqlStore;

pub struct TestDb {
    pub store: SqlStore,
    postgres: Option<(String, String)>,
    _dir: Option<tempfile::TempDir>,
}

pub async fn sqlite() -> TestDb {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("bizrq.db").display());
    TestDb {
        store: SqlStore::connect(&url).await.unwrap(),
        postgres: None,
        _dir: Some(dir),
    }
}

pub async fn postgres() -> TestDb {
    let (base, db) = new_postgres_database().await;
    TestDb {
        store: SqlStore::connect(&format!("{base}/{db}")).await.unwrap(),
        postgres: Some((base, db)),
        _dir: None,
    }
}

/// A new, empty PostgreSQL database: the server's URL and its name.
pub async fn new_postgres_database() -> (String, String) {
    use sqlx::Connection;
    let base = std::env::var("BIZRQ_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".into());
    let mut conn = sqlx::postgres::PgConnection::connect(&format!("{base}/postgres"))
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL is required for these tests ({base}): {e}"));
    let db = format!("bizrq_t_{}", crate::util::new_uid().replace('-', ""));
    sqlx::query(&format!("CREATE DATABASE {db}"))
        .execute(&mut conn)
        .await
        .unwrap();
    (base, db)
}

/// Drops a database of `new_postgres_database`. Best effort: CI drops
/// every leftover bizrq_t_* database before a run.
pub async fn drop_postgres_database(base: &str, db: &str) {
    use sqlx::Connection;
    let mut conn = sqlx::postgres::PgConnection::connect(&format!("{base}/postgres"))
        .await
        .unwrap();
    // FORCE: a pool's connection may still be closing.
    let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"))
        .execute(&mut conn)
        .await;
}

impl TestDb {
    /// Drops a PostgreSQL database after a passing test.
    pub async fn finish(self) {
        self.store.close().await;
        if let Some((base, db)) = self.postgres {
            drop_postgres_database(&base, &db).await;
        }
    }
}

/// Each named `async fn(&SqlStore)` runs on SQLite and on PostgreSQL.
macro_rules! on_both_databases {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test]
            async fn sqlite() {
                let db = $crate::store::testdb::sqlite().await;
                super::$name(&db.store).await;
                db.finish().await;
            }
            #[tokio::test]
            async fn postgres() {
                let db = $crate::store::testdb::postgres().await;
                super::$name(&db.store).await;
                db.finish().await;
            }
        }
    )*};
}
pub(crate) use on_both_databases;
