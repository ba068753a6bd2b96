//! Deployment, StatefulSet, ReplicaSet and Argo Rollout: one pod set,
//! `spec.replicas` × `spec.template`.

use super::model::Workload;
use super::read::{classes, parse_object, pod_set, workload, Fault, Source};
use crate::keys::KeyConfig;
use crate::usage::{nullable, ObjectMeta, PodTemplate};
use serde::Deserialize;

#[derive(Deserialize)]
struct Replicated {
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(default, deserialize_with = "nullable")]
    spec: ReplicatedSpec,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReplicatedSpec {
    replicas: Option<i64>,
    template: Option<PodTemplate>,
    workload_ref: Option<serde_json::Value>,
}

/// Deployment, StatefulSet, ReplicaSet, Argo Rollout: replicas × template.
pub(super) fn read_replicated(src: Source<'_>, cfg: &KeyConfig) -> Result<Workload, Fault> {
    let o: Replicated = parse_object(src, |o: &Replicated| &o.metadata)?;
    let replicas = o.spec.replicas.unwrap_or(1);
    match &o.spec.template {
        Some(tpl) => {
            let set = pod_set("main", ("spec.replicas", replicas), tpl, &o.metadata, cfg)?;
            Ok(Workload {
                priority_classes: classes([tpl]),
                ..workload(o.metadata, vec![set])
            })
        }
        None => {
            let mut w = workload(o.metadata, Vec::new());
            if o.spec.workload_ref.is_some() {
                w.warnings.push("bizrq: a Rollout with workloadRef is counted through the referenced Deployment".into());
            }
            Ok(w)
        }
    }
}
