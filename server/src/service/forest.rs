//! The whole forest as the pages read it, kept between requests.
//!
//! An admin's overview and tree look at every quota (what is over, what
//! runs out, the roots' subtree usage). Reading and parsing 10,000 quotas
//! on every request cost seconds; here the forest and its subtree usage
//! are kept, and each request first reads only every quota's stamp (name,
//! version, uid: three short columns, or the watch cache in cluster mode)
//! and then only the quotas whose stamp changed. Nothing is served stale:
//! a request sees every write that committed before its stamps were read,
//! from this replica or another.

use super::{Service, ServiceError};
use crate::store::{Stamp, Stored};
use quota::rollup::subtree_in_use;
use quota::{Quota, ResourceList};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// Quotas by name with each one's subtree usage (Σ `selfUsed` of it and
/// its descendants, `quota::rollup::subtree_in_use`).
#[derive(Debug, Default)]
pub struct Forest {
    pub quotas: Vec<Quota>,
    pub in_use: BTreeMap<String, ResourceList>,
    /// What each of `quotas` is, in the same order.
    stamps: Vec<Stamp>,
}

impl Forest {
    /// A forest of the quotas given (a member's visible subtrees): every
    /// quota's descendants must be among them for its usage to be whole.
    pub fn of(mut quotas: Vec<Quota>) -> Forest {
        quotas.sort_by(|a, b| a.name().cmp(b.name()));
        let in_use = subtree_in_use(&quotas);
        Forest {
            quotas,
            in_use,
            stamps: Vec::new(),
        }
    }

    /// `name`'s subtree usage (empty when it has none).
    pub fn in_use_of(&self, name: &str) -> &ResourceList {
        static NONE: std::sync::OnceLock<ResourceList> = std::sync::OnceLock::new();
        self.in_use
            .get(name)
            .unwrap_or_else(|| NONE.get_or_init(ResourceList::new))
    }
}

/// The forest last read, refreshed by one request at a time.
#[derive(Default)]
pub(crate) struct ForestCache(tokio::sync::Mutex<Option<Arc<Forest>>>);

/// Figures of one refresh, for the log and the tests.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Refresh {
    /// Quotas read again (written since, or new).
    pub read: usize,
    /// Quotas kept from the last read.
    pub kept: usize,
    /// Of `read`, those taken from this process's own copy of the very
    /// version stamped (what it wrote itself): nothing read nor parsed.
    pub taken: usize,
}

impl Service {
    /// The forest `q`'s parent and siblings are read from, for what it
    /// could borrow now (`quota::rollup::with_borrowing`): none for a
    /// quota without a max. The quota page's keys table and
    /// `GET /api/v1/quotas/{name}/usage` both ask it and read it with
    /// [`family_in`] on the render threads, so their free now and
    /// borrowable now are one figure and nothing of the forest is copied.
    pub async fn family_of(&self, q: &Quota) -> Result<Option<Arc<Forest>>, ServiceError> {
        if q.spec.max.is_empty() {
            return Ok(None);
        }
        Ok(Some(self.forest().await?))
    }

    /// Every quota as of now, with its subtree usage. Reads the stamps of
    /// all and the quotas written since the last call (none: the same
    /// forest as before, shared).
    pub async fn forest(&self) -> Result<Arc<Forest>, ServiceError> {
        Ok(self.forest_refreshed().await?.0)
    }

    /// `forest`, and what it read.
    pub async fn forest_refreshed(&self) -> Result<(Arc<Forest>, Refresh), ServiceError> {
        let mut slot = self.forest.0.lock().await;
        let store = self.bulk.as_ref().unwrap_or(&self.store);
        let stamps = store.stamps().await?;
        if let Some(f) = slot.as_ref() {
            if f.stamps == stamps {
                let kept = f.quotas.len();
                let refresh = Refresh {
                    kept,
                    ..Refresh::default()
                };
                return Ok((f.clone(), refresh));
            }
        }
        // What is held, owned when no request still reads it.
        let held: HashMap<String, (Stamp, Quota)> = match slot.take() {
            None => HashMap::new(),
            Some(old) => {
                let old = Arc::try_unwrap(old).unwrap_or_else(|shared| Forest {
                    quotas: shared.quotas.clone(),
                    in_use: BTreeMap::new(),
                    stamps: shared.stamps.clone(),
                });
                old.stamps
                    .into_iter()
                    .zip(old.quotas)
                    .map(|(s, q)| (s.name.clone(), (s, q)))
                    .collect()
            }
        };
        // Changed since: this process's own copy of that very version
        // (what it wrote: an admission's charge) is taken as it is; only
        // what another process wrote is read and parsed again.
        let mut fresh: HashMap<String, Stored> = HashMap::new();
        let mut stale: Vec<String> = Vec::new();
        for (i, s) in stamps.iter().enumerate() {
            if held.get(&s.name).is_some_and(|(h, _)| h == s) {
                continue;
            }
            match self.cached(&s.name) {
                Some(c) if Stamp::of(&c) == *s => {
                    fresh.insert(s.name.clone(), (*c).clone());
                }
                _ => stale.push(s.name.clone()),
            }
            if i % YIELD_EVERY == YIELD_EVERY - 1 {
                tokio::task::yield_now().await;
            }
        }
        let taken = fresh.len();
        let kept = stamps.len() - taken - stale.len();
        // Written again (or deleted) after its stamp was read: kept as read,
        // with the stamp of what was read, so the next request reads it again.
        fresh.extend(
            store
                .get_many(&stale)
                .await?
                .into_iter()
                .map(|s| (s.quota.name().to_string(), s)),
        );
        let refresh = Refresh {
            read: fresh.len(),
            kept,
            taken,
        };
        let forest = build(stamps, fresh, held).await?;
        *slot = Some(forest.clone());
        Ok((forest, refresh))
    }

    /// The forest as `warm_cache` read it (every quota): the first
    /// `forest` after start reads only what was written since.
    pub(super) async fn seed_forest(&self, all: Vec<Stored>) {
        let stamps: Vec<Stamp> = all.iter().map(Stamp::of).collect();
        let fresh = all
            .into_iter()
            .map(|s| (s.quota.name().to_string(), s))
            .collect();
        if let Ok(f) = build(stamps, fresh, HashMap::new()).await {
            *self.forest.0.lock().await = Some(f);
        }
    }
}

/// Quotas between two yields to the runtime, where the forest is compared
/// on the async workers.
const YIELD_EVERY: usize = 1_000;

/// The forest of `stamps` from what was read (`fresh`) or held, with its
/// subtree usage: off the async workers (tens of ms over 10,000 quotas
/// that admissions would wait behind).
async fn build(
    stamps: Vec<Stamp>,
    mut fresh: HashMap<String, Stored>,
    mut held: HashMap<String, (Stamp, Quota)>,
) -> Result<Arc<Forest>, ServiceError> {
    tokio::task::spawn_blocking(move || {
        let mut quotas = Vec::with_capacity(stamps.len());
        let mut kept_stamps = Vec::with_capacity(stamps.len());
        for s in &stamps {
            if let Some(f) = fresh.remove(&s.name) {
                kept_stamps.push(Stamp::of(&f));
                quotas.push(f.quota);
            } else if let Some((h, q)) = held.remove(&s.name) {
                if h == *s {
                    kept_stamps.push(h);
                    quotas.push(q);
                }
            }
        }
        let in_use = subtree_in_use(&quotas);
        Arc::new(Forest {
            quotas,
            in_use,
            stamps: kept_stamps,
        })
    })
    .await
    .map_err(|e| ServiceError::Internal(format!("building the forest: {e}")))
}

/// `q`'s parent and siblings in `forest` (none without one).
pub fn family_in<'f>(forest: Option<&'f Forest>, q: &Quota) -> (Option<&'f Quota>, Vec<&'f Quota>) {
    let Some(forest) = forest else {
        return (None, Vec::new());
    };
    (
        forest.quotas.iter().find(|p| p.name() == q.spec.parent),
        forest
            .quotas
            .iter()
            .filter(|s| s.spec.parent == q.spec.parent)
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;
    use crate::service::Persist;
    use crate::store::sql::SqlStore;
    use crate::store::testdb::on_both_databases;
    use quota::cash::QosMultipliers;
    use quota::{KeyConfig, Quantity, QuotaSpec, QuotaStatus};

    fn service(store: &SqlStore) -> Service {
        Service::new(
            Arc::new(store.clone()),
            KeyConfig::default(),
            QosMultipliers::default(),
            Arc::new(Metrics::default()),
        )
    }

    fn spec(parent: &str, gpus: i64) -> QuotaSpec {
        QuotaSpec {
            parent: parent.into(),
            hard: [(
                "requests.nvidia.com/gpu".to_string(),
                Quantity::from_units(gpus),
            )]
            .into(),
            ..Default::default()
        }
    }

    async fn make(s: &Service, name: &str, parent: &str, gpus: i64) {
        s.create_quota(name, spec(parent, gpus), Persist::Here, "", false)
            .await
            .unwrap();
    }

    fn names(f: &Forest) -> Vec<&str> {
        f.quotas.iter().map(|q| q.name()).collect()
    }

    /// What a person is shown is read on the view store (in standalone
    /// mode the portal's own, niced connections), never on the service's
    /// own store, whose readers admissions wait for (docs/limits.md, "What
    /// the portal shared"): two databases tell which one was read.
    #[tokio::test]
    async fn a_viewers_subtrees_are_read_on_the_view_store() {
        let (own, view) = (
            crate::store::testdb::sqlite().await,
            crate::store::testdb::sqlite().await,
        );
        let shown = service(&view.store);
        make(&shown, "dept", "", 4).await;
        make(&shown, "team", "dept", 2).await;
        let svc = service(&own.store).with_view_store(Arc::new(view.store.clone()));
        let mut read: Vec<String> = svc
            .subtrees(&["dept".to_string()])
            .await
            .unwrap()
            .iter()
            .map(|q| q.name().to_string())
            .collect();
        read.sort();
        assert_eq!(read, ["dept", "team"]);
        let own_only = service(&own.store).subtrees(&["dept".to_string()]).await;
        assert!(
            own_only.unwrap().is_empty(),
            "the service's own store holds none"
        );
    }

    /// Kept between requests, it reads again only what was written since,
    /// by this replica or another, and never serves a stale copy: a
    /// change, a delete and a quota made again under an old name are all
    /// seen on the next request.
    async fn reads_only_what_changed_and_misses_nothing(store: &SqlStore) {
        let (a, b) = (service(store), service(store));
        make(&a, "ai", "", 10).await;
        make(&a, "nlp", "ai", 4).await;
        make(&a, "cv", "ai", 2).await;

        let (f, r) = a.forest_refreshed().await.unwrap();
        assert_eq!(names(&f), ["ai", "cv", "nlp"]);
        assert_eq!((r.read, r.kept), (3, 0));
        let (again, r) = a.forest_refreshed().await.unwrap();
        assert!(Arc::ptr_eq(&f, &again), "nothing written: the same forest");
        assert_eq!((r.read, r.kept), (0, 3));

        // Another replica resizes nlp (which changes ai's carve-out too).
        b.update_quota("nlp", spec("ai", 6), None, Persist::Here, false)
            .await
            .unwrap();
        let (f, r) = a.forest_refreshed().await.unwrap();
        assert_eq!((r.read, r.kept), (2, 1));
        let gpus = |f: &Forest, n: &str| {
            let q = f.quotas.iter().find(|q| q.name() == n).unwrap();
            quota::resources::get(&q.spec.hard, "requests.nvidia.com/gpu")
        };
        assert_eq!(gpus(&f, "nlp"), Quantity::from_units(6));
        let ai = f.quotas.iter().find(|q| q.name() == "ai").unwrap();
        assert_eq!(
            quota::resources::get(&ai.status.used, "requests.nvidia.com/gpu"),
            Quantity::from_units(8),
            "the parent's carve-out as written"
        );

        // Deleted, then made again under its name (a new uid; in SQL its
        // versions start again).
        b.delete_quota("cv", None, Persist::Here, false)
            .await
            .unwrap();
        let (f, _) = a.forest_refreshed().await.unwrap();
        assert_eq!(names(&f), ["ai", "nlp"]);
        make(&b, "cv", "ai", 1).await;
        let (f, r) = a.forest_refreshed().await.unwrap();
        assert_eq!(names(&f), ["ai", "cv", "nlp"]);
        assert_eq!(gpus(&f, "cv"), Quantity::from_units(1));
        assert_eq!(r.read, 2, "cv and its parent");

        // Subtree usage follows: a charge on nlp shows at ai.
        let nlp = b.get("nlp").await.unwrap();
        let mut status = nlp.quota.status.clone();
        status
            .self_used
            .insert("requests.nvidia.com/gpu".into(), Quantity::from_units(3));
        store_status(store, &nlp, &status).await;
        let f = a.forest().await.unwrap();
        assert_eq!(
            quota::resources::get(f.in_use_of("ai"), "requests.nvidia.com/gpu"),
            Quantity::from_units(3)
        );
        assert!(f.in_use_of("nobody").is_empty());
    }

    async fn store_status(store: &SqlStore, s: &Stored, status: &QuotaStatus) {
        use crate::store::QuotaStore;
        store.replace_status(s, status).await.unwrap();
    }

    /// After `warm_cache` the first forest reads no quota (the sweep and
    /// the sampler at start read only stamps), and what this process wrote
    /// since is taken from its own copy, not read and parsed again; what
    /// another process wrote is read.
    async fn starts_from_the_warm_cache_and_takes_its_own_writes(store: &SqlStore) {
        let (a, b) = (service(store), service(store));
        make(&b, "ai", "", 10).await;
        make(&b, "nlp", "ai", 4).await;
        make(&b, "cv", "ai", 2).await;
        assert_eq!(a.warm_cache().await.unwrap(), 3);
        let (f, r) = a.forest_refreshed().await.unwrap();
        assert_eq!(names(&f), ["ai", "cv", "nlp"]);
        assert_eq!(
            r,
            Refresh {
                read: 0,
                kept: 3,
                taken: 0
            }
        );

        // This process resizes cv (cv and ai written); another, nlp.
        a.update_quota("cv", spec("ai", 1), None, Persist::Here, false)
            .await
            .unwrap();
        let (f, r) = a.forest_refreshed().await.unwrap();
        assert_eq!(
            r,
            Refresh {
                read: 2,
                kept: 1,
                taken: 2
            }
        );
        b.update_quota("nlp", spec("ai", 5), None, Persist::Here, false)
            .await
            .unwrap();
        let (f2, r) = a.forest_refreshed().await.unwrap();
        assert_eq!((r.read, r.taken), (2, 0), "ai and nlp, as b wrote them");
        let gpus = |f: &Forest, n: &str| {
            let q = f.quotas.iter().find(|q| q.name() == n).unwrap();
            quota::resources::get(&q.spec.hard, "requests.nvidia.com/gpu")
        };
        assert_eq!(gpus(&f, "cv"), Quantity::from_units(1));
        assert_eq!(gpus(&f2, "nlp"), Quantity::from_units(5));
        // What it took is what the database holds.
        for q in &f2.quotas {
            let stored = b.get(q.name()).await.unwrap().quota;
            assert_eq!(q.spec, stored.spec);
            assert_eq!(q.status.used, stored.status.used);
        }
    }

    on_both_databases!(
        reads_only_what_changed_and_misses_nothing,
        starts_from_the_warm_cache_and_takes_its_own_writes
    );
}
