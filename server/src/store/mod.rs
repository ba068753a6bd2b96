//! Where quota objects live. One abstraction, two homes: SQL (standalone) and
//! the cluster's CRD (cluster mode). Every write is a compare-and-swap on the
//! object's version; a stale writer gets `Conflict` and must re-read.

pub mod accounts;
pub mod alerts;
pub mod audit;
pub mod budgets;
pub mod history;
pub mod identity;
pub mod ledger;
pub mod outbox;
pub mod real_usage;
pub mod sessions;
pub mod shares;
pub mod sql;
#[cfg(test)]
pub(crate) mod testdb;
pub mod transfers;

use async_trait::async_trait;
use quota::{Quota, QuotaStatus};

/// A quota as read from the store, with the version its next write must name.
#[derive(Clone, Debug)]
pub struct Stored {
    pub quota: Quota,
    pub version: i64,
}

/// Which version of a quota a copy is: its name, version and uid (a quota
/// deleted and made again under its name starts a new uid, and in SQL its
/// versions again from 1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stamp {
    pub name: String,
    pub version: i64,
    pub uid: String,
}

/// Where the API server keeps a workload a review names but does not
/// carry (a `/scale`'s parent, an HPA's target): what a workload lookup
/// reads when its cache misses (`QuotaStore::workload_quota_at`).
#[derive(Clone, Copy)]
pub struct WorkloadAt<'a> {
    pub adapter: &'static quota::workload::Adapter,
    /// The API version served for the kind (the review's, or the
    /// HPA's `scaleTargetRef`), e.g. `v1`.
    pub version: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
}

impl Stamp {
    pub fn of(s: &Stored) -> Stamp {
        Stamp {
            name: s.quota.name().to_string(),
            version: s.version,
            uid: s.quota.metadata.uid.clone().unwrap_or_default(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("bizrq {0} not found")]
    NotFound(String),
    #[error("bizrq {0} already exists")]
    AlreadyExists(String),
    #[error("bizrq {0} was changed by someone else; read it again")]
    Conflict(String),
    #[error("store: {0}")]
    Backend(String),
    /// The store refused the write for a reason the person who asked can
    /// read (the API server or an admission webhook), already said as such
    /// in `message`; `kind` says what sort of refusal it is.
    #[error("{message}")]
    Refused { kind: Refusal, message: String },
}

/// What sort of refusal a store passes on (`StoreError::Refused`): the
/// service answers each as its own error of the same name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Invalid as sent.
    BadRequest,
    NotFound,
    AlreadyExists,
    /// Changed by someone else, in the refuser's words.
    Conflict,
    /// Not allowed: a webhook's denial or the API server's authorisation.
    Forbidden,
    /// Cannot be taken now; trying again later may succeed.
    Unavailable,
    /// The refuser failed.
    Internal,
}

impl StoreError {
    pub fn refused(kind: Refusal, message: impl Into<String>) -> StoreError {
        StoreError::Refused {
            kind,
            message: message.into(),
        }
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        StoreError::Backend(e.to_string())
    }
}

/// Whether a write broke a unique constraint: the one place that reads a
/// database error's kind. (By kind, not by constraint name: SQLite names
/// no constraint in its errors.)
pub(crate) fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.is_unique_violation())
}

/// Turns a unique violation into the error a caller can act on (as
/// realworld-axum-sqlx's `on_constraint`); any other failure stays a
/// backend error.
pub(crate) trait ResultExt<T> {
    fn on_unique(self, f: impl FnOnce() -> StoreError) -> Result<T, StoreError>;
}

impl<T> ResultExt<T> for Result<T, sqlx::Error> {
    fn on_unique(self, f: impl FnOnce() -> StoreError) -> Result<T, StoreError> {
        self.map_err(|e| {
            if is_unique_violation(&e) {
                f()
            } else {
                e.into()
            }
        })
    }
}

/// What a store's feed (a watch's copy of every quota) shows of one quota,
/// against a version the caller holds (`QuotaStore::watched`).
#[derive(Debug)]
pub enum Watched {
    /// The store has no feed: every read is a fresh one (SQL).
    NoFeed,
    /// The feed does not show it (not listed yet, or deleted).
    Missing,
    /// The feed's copy is not newer than the version held.
    NotNewer,
    /// The feed's copy, newer than the version held (or none was held).
    Newer(Box<Stored>),
}

#[async_trait]
pub trait QuotaStore: Send + Sync + 'static {
    async fn get(&self, name: &str) -> Result<Option<Stored>, StoreError>;
    /// `name` as this process's feed of the store shows it, with no
    /// request: possibly behind the store, so only for a decision that is
    /// safe on an old copy. `than`: the version the caller holds; the
    /// feed's copy is converted only when newer.
    fn watched(&self, _name: &str, _than: Option<i64>) -> Watched {
        Watched::NoFeed
    }
    /// `watched`, waiting up to `bound` for the feed to show a version of
    /// `name` newer than `than`: after a compare-and-swap lost to a newer
    /// version, the copy to decide again on comes through the feed with no
    /// request (woken by the feed, never polling). `NotNewer` once the
    /// bound passes; `NoFeed` and `Missing` at once.
    async fn watched_newer(&self, name: &str, than: i64, _bound: std::time::Duration) -> Watched {
        self.watched(name, Some(than))
    }
    /// The version `name` is at now, with its uid (None: gone), read
    /// fresh: what proves a kept copy current without reading and parsing
    /// the whole quota (the uid too: a quota deleted and made again may
    /// reach the same version, SQL's restart at 1). By default a whole
    /// read.
    async fn stamp(&self, name: &str) -> Result<Option<Stamp>, StoreError> {
        Ok(self.get(name).await?.map(|s| Stamp::of(&s)))
    }
    async fn list(&self) -> Result<Vec<Stored>, StoreError>;
    async fn children(&self, name: &str) -> Result<Vec<Stored>, StoreError>;
    /// `children`' quotas, shared: for a plan that only reads them (a
    /// queued create's review, a round's loan). A store with a feed keeps
    /// each conversion until the quota's version moves.
    async fn children_quotas(&self, name: &str) -> Result<Vec<std::sync::Arc<Quota>>, StoreError> {
        Ok(self
            .children(name)
            .await?
            .into_iter()
            .map(|s| std::sync::Arc::new(s.quota))
            .collect())
    }
    /// The quotas of the subtrees under `roots` (the roots included, each
    /// once, by name), without reading the rest of the forest: what a
    /// viewer bound to a few quotas may see costs what those subtrees hold.
    /// Bounded on bad data: a parent cycle is walked once.
    async fn subtrees(&self, roots: &[String]) -> Result<Vec<Stored>, StoreError> {
        let mut seen = std::collections::BTreeSet::new();
        let mut out = Vec::new();
        let mut queue: std::collections::VecDeque<String> = roots.iter().cloned().collect();
        while let Some(name) = queue.pop_front() {
            if !seen.insert(name.clone()) {
                continue;
            }
            if let Some(s) = self.get(&name).await? {
                out.push(s);
                queue.extend(
                    self.children(&name)
                        .await?
                        .into_iter()
                        .map(|c| c.quota.name().to_string()),
                );
            }
        }
        out.sort_by(|a, b| a.quota.name().cmp(b.quota.name()));
        Ok(out)
    }
    /// Each quota's name, version and uid, by name, without its spec or
    /// status: what a reader holding copies compares them with, to read
    /// again only what was written (or deleted and made anew) since.
    async fn stamps(&self) -> Result<Vec<Stamp>, StoreError> {
        Ok(self.list().await?.iter().map(Stamp::of).collect())
    }
    /// The quotas named (those that exist), by name.
    async fn get_many(&self, names: &[String]) -> Result<Vec<Stored>, StoreError> {
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            out.extend(self.get(name).await?);
        }
        out.sort_by(|a, b| a.quota.name().cmp(b.quota.name()));
        Ok(out)
    }
    /// Create a new object (spec and initial status). `AlreadyExists` if taken.
    async fn create(&self, quota: &Quota) -> Result<Stored, StoreError>;
    /// Replace spec and status, if `current.version` is still the latest.
    /// Returns the new version.
    async fn replace(&self, current: &Stored, quota: &Quota) -> Result<i64, StoreError>;
    /// Replace status only (the status subresource), compare-and-swap.
    /// Returns the new version. `current` must be the object as read (or as
    /// last written) at its version, unchanged: the SQL store writes only
    /// the charges that differ from it (`store::sql::charge_changes`), so a
    /// `current` changed in place would drop changes silently. The same
    /// holds for `replace`.
    async fn replace_status(
        &self,
        current: &Stored,
        status: &QuotaStatus,
    ) -> Result<i64, StoreError>;
    /// Read-modify-write of one quota under the database's lock on it, for
    /// a writer that just lost a compare-and-swap (another replica writes
    /// the same quota): `decide` gets the object as stored and returns the
    /// object to write, or None to write nothing. Returns the object written
    /// and its version (None: nothing written) once the write is durable.
    /// `None` altogether: this store has no such lock, and the caller goes
    /// on with its compare-and-swap. `known`: a copy of the quota the
    /// caller holds, perhaps of an older version; a charge it holds as
    /// stored is taken from it instead of being parsed again.
    async fn modify_locked(
        &self,
        _name: &str,
        _known: Option<&Stored>,
        _decide: &mut (dyn for<'s> FnMut(&'s Stored) -> Option<Quota> + Send),
    ) -> Option<Result<Option<Stored>, StoreError>> {
        None
    }
    /// Delete, if `current.version` is still the latest.
    async fn delete(&self, current: &Stored) -> Result<(), StoreError>;
    /// Which quota holds the charge of a workload reference, if any.
    async fn workload_quota(&self, workload: &str) -> Result<Option<String>, StoreError>;
    /// As `workload_quota`, for a workload stored at `at`: a store that
    /// can read the object itself answers a miss from its quota label
    /// (cluster: one GET, never a LIST of every quota). A store whose
    /// lookup is one indexed read (SQL) answers as `workload_quota`.
    async fn workload_quota_at(
        &self,
        workload: &str,
        _at: &WorkloadAt<'_>,
    ) -> Result<Option<String>, StoreError> {
        self.workload_quota(workload).await
    }
    /// Whether the backend answers (for /readyz).
    async fn ping(&self) -> Result<(), StoreError>;
    /// Waits (bounded) until this store's lists hold every write up to
    /// `version`, a resourceVersion another watch of the same objects has
    /// delivered (cluster: the controller's, which may run ahead of this
    /// store's cache). Whether they do. A store whose lists are read
    /// fresh (SQL) always does.
    async fn caught_up_to(&self, _version: i64) -> bool {
        true
    }
    /// The quotas whose summaries for people (`status.summary`,
    /// `kubectl get`'s columns) may have gone stale since the last call,
    /// each with its place (oldest first), as this store's own view of
    /// the quotas saw them change (cluster: `SummaryMarks`). None for a
    /// store that keeps no summaries (the SQL store).
    fn summary_marks(&self) -> Vec<(String, u64)> {
        Vec::new()
    }
    /// Marks taken (`summary_marks`) and not dealt with: given back.
    fn put_back_summary_marks(&self, _marks: Vec<(String, u64)>) {}
    /// Of the quotas `marked` (`summary_marks`) and every quota above
    /// them, those whose stored columns differ from what a write of their
    /// stored status would derive now (a parent's figures read its
    /// subtree, which a child's write moves without writing the parent),
    /// oldest mark first. A full pass over the store's copy: run it off
    /// the async workers. Cluster mode: the controller's `summaries`
    /// writes them.
    fn stale_summaries(&self, _marked: &[(String, u64)]) -> Vec<(String, u64)> {
        Vec::new()
    }
}
