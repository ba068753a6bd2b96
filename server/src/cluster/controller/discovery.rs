//! Which workload kinds the cluster serves, found through API discovery
//! and looked for again every `discovery_every`: a kind whose CRD is
//! installed later (Kubeflow, Volcano, Argo Rollouts) is watched from
//! then on; a kind that is missing is simply not watched.

use super::Context;
use crate::cluster::view::kind_key;
use kube::api::ApiResource;
use kube::Client;
use quota::workload::{Adapter, ADAPTERS};
use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;

/// `discover`, retried until the API server answers.
pub(super) async fn until_discovered(client: &Client) -> Vec<(&'static Adapter, ApiResource)> {
    loop {
        match discover(client).await {
            Ok(k) => return k,
            Err(e) => {
                tracing::warn!(error = %e, "API discovery failed; retrying");
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
    }
}

impl Context {
    pub(super) fn set_installed(&self, kinds: &[(&'static Adapter, ApiResource)]) {
        *self.installed.lock().unwrap() = kinds
            .iter()
            .map(|(a, ar)| (kind_key(a.group, a.kind), ar.clone()))
            .collect();
    }

    /// Rediscover every `discovery_every`; a kind not `watched` yet gets
    /// its watch (whose first list triggers every quota: they may hold
    /// charges of it).
    pub(super) async fn discovery_loop(self: Arc<Self>, mut watched: HashSet<String>) {
        let mut tasks = JoinSet::new();
        loop {
            tokio::time::sleep(self.cfg.discovery_every).await;
            match discover(&self.client).await {
                Ok(kinds) => {
                    self.set_installed(&kinds);
                    for (adapter, ar) in kinds {
                        let k = kind_key(adapter.group, adapter.kind);
                        if watched.insert(k.clone()) {
                            tracing::info!(kind = %k, "workload kind installed: watching it");
                            tasks.spawn(self.clone().watch_workloads(adapter, ar, false));
                        }
                    }
                }
                Err(e) => tracing::debug!(error = %e, "API discovery failed"),
            }
        }
    }
}

/// The workload kinds the cluster serves, with the version to watch (the
/// group's preferred version when it has the kind, else the first that does).
pub async fn discover(client: &Client) -> kube::Result<Vec<(&'static Adapter, ApiResource)>> {
    let wanted: BTreeSet<&str> = ADAPTERS.iter().map(|a| a.group).collect();
    let groups = client.list_api_groups().await?;
    let mut out = Vec::new();
    for g in groups
        .groups
        .iter()
        .filter(|g| wanted.contains(g.name.as_str()))
    {
        let mut versions: Vec<&str> = Vec::new();
        if let Some(p) = &g.preferred_version {
            versions.push(&p.group_version);
        }
        versions.extend(g.versions.iter().map(|v| v.group_version.as_str()));
        let mut pending: Vec<&'static Adapter> =
            ADAPTERS.iter().filter(|a| a.group == g.name).collect();
        let mut seen = HashSet::new();
        for gv in versions {
            if pending.is_empty() || !seen.insert(gv) {
                continue;
            }
            let list = match client.list_api_group_resources(gv).await {
                Ok(l) => l,
                // A group version that vanished between the two calls.
                Err(kube::Error::Api(s)) if s.is_not_found() => continue,
                Err(e) => return Err(e),
            };
            pending.retain(|a| {
                let Some(r) = list
                    .resources
                    .iter()
                    .find(|r| r.kind == a.kind && !r.name.contains('/'))
                else {
                    return true;
                };
                let version = gv.rsplit('/').next().unwrap_or(gv).to_string();
                out.push((
                    *a,
                    ApiResource {
                        group: g.name.clone(),
                        version,
                        api_version: gv.to_string(),
                        kind: a.kind.to_string(),
                        plural: r.name.clone(),
                    },
                ));
                false
            });
        }
    }
    Ok(out)
}
