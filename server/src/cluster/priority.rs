//! PriorityClasses (`scheduling.k8s.io/v1`, cluster-scoped) for queued
//! admission's priority (docs/queueing.md §3). The controller watches them
//! on the leader (`controller::watches`) and keeps its copy here; the
//! mutating webhook runs on every replica and, where no watch has listed,
//! reads them through the API: one LIST (a cluster has a handful of
//! classes), kept `FETCHED_TTL` so a burst of Job creates costs one read.
//! A class created meanwhile is seen by the controller's next round, which
//! resolves every entry's classes again from its watch.

use crate::service::queue::PriorityLookup;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, ListParams};
use kube::Client;
use quota::queue::priority::Classes;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a replica without the watch trusts a read of the classes.
pub const FETCHED_TTL: Duration = Duration::from_secs(30);

pub struct PriorityCache {
    client: Client,
    watched: Mutex<Option<Arc<Classes>>>,
    fetched: Mutex<Option<(Instant, Arc<Classes>)>>,
}

impl PriorityCache {
    pub fn new(client: Client) -> PriorityCache {
        PriorityCache {
            client,
            watched: Mutex::default(),
            fetched: Mutex::default(),
        }
    }
}

#[async_trait::async_trait]
impl PriorityLookup for PriorityCache {
    async fn classes(&self) -> Result<Arc<Classes>, String> {
        if let Some(c) = self.watched() {
            return Ok(c);
        }
        if let Some((at, c)) = self.fetched.lock().unwrap().as_ref() {
            if at.elapsed() < FETCHED_TTL {
                return Ok(c.clone());
            }
        }
        let api: Api<PriorityClass> = Api::all(self.client.clone());
        let list = api
            .list(&ListParams::default())
            .await
            .map_err(|e| format!("PriorityClasses could not be read: {e}"))?;
        let classes = Arc::new(Classes::new(list.items.iter().filter_map(|p| {
            Some((
                p.metadata.name.as_deref()?,
                p.value?,
                p.global_default.unwrap_or(false),
            ))
        })));
        *self.fetched.lock().unwrap() = Some((Instant::now(), classes.clone()));
        Ok(classes)
    }

    fn watched(&self) -> Option<Arc<Classes>> {
        self.watched.lock().unwrap().clone()
    }

    fn set_watched(&self, classes: Option<Classes>) {
        *self.watched.lock().unwrap() = classes.map(Arc::new);
    }
}
