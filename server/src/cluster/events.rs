//! Kubernetes Events on quotas and workloads: admission denials, cash
//! exhaustion, reclaim marks. Published off the hot path through a bounded
//! queue (a full queue drops and counts, never slows an admission); the
//! recorder folds repeats into an Event series.

use crate::metrics::Metrics;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::Client;
use quota::object::{API_GROUP, KIND};
use std::sync::Arc;
use tokio::sync::mpsc;

const QUEUE: usize = 1024;

#[derive(Clone, Debug)]
pub struct Notice {
    pub regarding: ObjectReference,
    pub warning: bool,
    pub reason: &'static str,
    pub action: &'static str,
    pub note: String,
}

/// Where Events go: a cluster, or nowhere (standalone).
#[derive(Clone, Default)]
pub struct Events {
    tx: Option<mpsc::Sender<Notice>>,
    metrics: Option<Arc<Metrics>>,
}

impl Events {
    pub fn start(client: Client, instance: String, metrics: Arc<Metrics>) -> Events {
        let (tx, mut rx) = mpsc::channel::<Notice>(QUEUE);
        let recorder = Recorder::new(
            client,
            Reporter {
                controller: "bizrq".into(),
                instance: Some(instance),
            },
        );
        tokio::spawn(async move {
            while let Some(n) = rx.recv().await {
                let ev = Event {
                    type_: if n.warning {
                        EventType::Warning
                    } else {
                        EventType::Normal
                    },
                    reason: n.reason.into(),
                    note: Some(truncate(&n.note, 1000)),
                    action: n.action.into(),
                    secondary: None,
                };
                if let Err(e) = recorder.publish(&ev, &n.regarding).await {
                    tracing::debug!(error = %e, reason = n.reason, "event not published");
                }
            }
        });
        Events {
            tx: Some(tx),
            metrics: Some(metrics),
        }
    }

    pub fn emit(&self, n: Notice) {
        let Some(tx) = &self.tx else { return };
        if tx.try_send(n).is_err() {
            if let Some(m) = &self.metrics {
                m.events_dropped.inc();
            }
        }
    }

    pub fn enabled(&self) -> bool {
        self.tx.is_some()
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

pub fn quota_ref(name: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some(format!("{API_GROUP}/v1")),
        kind: Some(KIND.into()),
        name: Some(name.into()),
        ..ObjectReference::default()
    }
}

/// A workload by its reference `group/Kind/ns/name` and `apiVersion`.
pub fn workload_ref(api_version: &str, wref: &str) -> Option<ObjectReference> {
    let w = quota::workload::WorkloadRef::parse(wref)?;
    Some(ObjectReference {
        api_version: Some(api_version.into()),
        kind: Some(w.kind.into()),
        namespace: Some(w.namespace.into()),
        name: Some(w.name.into()),
        ..ObjectReference::default()
    })
}

/// The quota a denial message names (`bizrq <quota>: …`).
pub fn denied_quota(message: &str) -> Option<&str> {
    message
        .strip_prefix("bizrq ")?
        .split_once(": ")
        .map(|(q, _)| q)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references() {
        assert_eq!(
            denied_quota("bizrq nlp-team: requests.nvidia.com/gpu.A100 asks 12, 8 left of 16"),
            Some("nlp-team")
        );
        assert_eq!(denied_quota("malformed"), None);
        let r = workload_ref("apps/v1", "apps/Deployment/nlp/train").unwrap();
        assert_eq!(r.namespace.as_deref(), Some("nlp"));
        assert_eq!(r.name.as_deref(), Some("train"));
        assert_eq!(
            quota_ref("q").kind.as_deref(),
            Some("BizGroupResourceQuota")
        );
        assert_eq!(truncate("ééé", 3), "é");
    }
}
