//! `bizrq repair`: the statuses of a standalone database made writable and
//! clean again, when a version that did not check a review's strings
//! stored one no identifier may hold (a NUL in a username, a review uid, a
//! workload or an extra resource name; docs/hostile-input.md). Each quota
//! is read, repaired by the pure `quota::repair`, and written back
//! with the store's compare-and-swap, so a server running beside it loses
//! nothing: a write that races the repair makes it read the quota again.

use crate::store::{QuotaStore, StoreError};

/// Rounds of read, repair and write per quota before it is given up.
const ROUNDS: usize = 8;

/// What the repair did to one quota.
#[derive(Debug, PartialEq, Eq)]
pub struct Repaired {
    pub quota: String,
    pub changes: Vec<String>,
}

/// Repairs every quota of `store` (with `dry_run`, only says what it would
/// change). Returns the quotas that held something to repair.
pub async fn repair_all(
    store: &dyn QuotaStore,
    dry_run: bool,
) -> Result<Vec<Repaired>, StoreError> {
    let mut out = Vec::new();
    for stored in store.list().await? {
        let name = stored.quota.name().to_string();
        if let Some(r) = repair_one(store, &name, dry_run).await? {
            out.push(r);
        }
    }
    Ok(out)
}

async fn repair_one(
    store: &dyn QuotaStore,
    name: &str,
    dry_run: bool,
) -> Result<Option<Repaired>, StoreError> {
    for _ in 0..ROUNDS {
        let Some(current) = store.get(name).await? else {
            return Ok(None);
        };
        let mut status = current.quota.status.clone();
        let changes = quota::repair::repair(&mut status, &current.quota.spec);
        if changes.is_empty() {
            return Ok(None);
        }
        let repaired = Repaired {
            quota: name.to_string(),
            changes,
        };
        if dry_run {
            return Ok(Some(repaired));
        }
        match store.replace_status(&current, &status).await {
            Ok(_) => return Ok(Some(repaired)),
            Err(StoreError::Conflict(_)) => continue,
            Err(e) => return Err(e),
        }
    }
    Err(StoreError::Conflict(name.to_string()))
}
