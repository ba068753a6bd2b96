//! Kubeflow's TFJob, PyTorchJob and MPIJob: one pod set per replica type,
//! its declared run time from `spec.runPolicy`, and whether it finished.

use super::model::{check_count, Workload};
use super::read::{classes, parse_object, pod_set, workload, Fault, Finishing, Source};
use super::runtime;
use crate::keys::KeyConfig;
use crate::usage::{nullable, ObjectMeta, PodTemplate};
use serde::Deserialize;
use std::collections::BTreeMap;

#[derive(Deserialize)]
struct Kubeflow {
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(default, deserialize_with = "nullable")]
    spec: KubeflowSpec,
    #[serde(default, deserialize_with = "nullable")]
    status: Finishing,
}
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct KubeflowSpec {
    #[serde(
        default,
        alias = "pytorchReplicaSpecs",
        alias = "mpiReplicaSpecs",
        alias = "xgbReplicaSpecs"
    )]
    tf_replica_specs: BTreeMap<String, ReplicaSpec>,
    #[serde(default)]
    run_policy: Option<RunPolicy>,
}
#[derive(Default, Deserialize)]
struct ReplicaSpec {
    replicas: Option<i64>,
    #[serde(default)]
    template: PodTemplate,
}
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RunPolicy {
    suspend: Option<bool>,
    active_deadline_seconds: Option<serde_json::Value>,
}

/// TFJob, PyTorchJob, MPIJob: one pod set per replica type.
pub(super) fn read_kubeflow(src: Source<'_>, cfg: &KeyConfig) -> Result<Workload, Fault> {
    let o: Kubeflow = parse_object(src, |o: &Kubeflow| &o.metadata)?;
    let suspended = o.spec.run_policy.as_ref().and_then(|r| r.suspend) == Some(true);
    let sets = o
        .spec
        .tf_replica_specs
        .iter()
        .map(|(name, r)| {
            let field = format!("replicas of {name:?}");
            let n = r.replicas.unwrap_or(1);
            // Checked even when suspended: resuming must not bring it in.
            check_count(&field, n).map_err(|p| Fault::bad(&o.metadata, None, p))?;
            let n = if suspended { 0 } else { n };
            pod_set(name, (&field, n), &r.template, &o.metadata, cfg)
        })
        .collect::<Result<_, _>>()?;
    let deadline = o
        .spec
        .run_policy
        .as_ref()
        .and_then(|r| r.active_deadline_seconds.as_ref());
    let run_time = runtime::declared(None, deadline, &o.metadata.annotations);
    Ok(Workload {
        run_time,
        finished: o.status.any(&["Succeeded", "Failed"]),
        finished_at: o.status.at(&["Succeeded", "Failed"]),
        priority_classes: classes(o.spec.tf_replica_specs.values().map(|r| &r.template)),
        ..workload(o.metadata, sets)
    })
}
