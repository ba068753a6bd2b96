//! Volcano Job: one pod set per task; held in a queue by gating its pods
//! (`crate::hold`), which then run nothing.

use super::model::{PodSet, Workload};
use super::read::{classes, parse_object, pod_set, workload, Fault, Source};
use crate::keys::KeyConfig;
use crate::usage::{nullable, ObjectMeta, PodTemplate};
use serde::Deserialize;

#[derive(Deserialize)]
struct VolcanoJob {
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(default, deserialize_with = "nullable")]
    spec: VolcanoSpec,
}
#[derive(Default, Deserialize)]
struct VolcanoSpec {
    #[serde(default, deserialize_with = "nullable")]
    tasks: Vec<VolcanoTask>,
}
#[derive(Default, Deserialize)]
struct VolcanoTask {
    #[serde(default)]
    name: String,
    replicas: Option<i64>,
    #[serde(default)]
    template: PodTemplate,
}

pub(super) fn read_volcano(src: Source<'_>, cfg: &KeyConfig) -> Result<Workload, Fault> {
    let o: VolcanoJob = parse_object(src, |o: &VolcanoJob| &o.metadata)?;
    let sets = o
        .spec
        .tasks
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let name = if t.name.is_empty() {
                format!("task-{i}")
            } else {
                t.name.clone()
            };
            let field = format!("replicas of task {name:?}");
            pod_set(
                &name,
                (&field, t.replicas.unwrap_or(1)),
                &t.template,
                &o.metadata,
                cfg,
            )
        })
        .collect::<Result<Vec<PodSet>, _>>()?;
    // Held in its queue (`crate::hold`): its pods are gated and run
    // nothing, as a suspended Job's; the counts were checked all the same.
    let held = crate::hold::held_by_gates(&o.metadata, o.spec.tasks.iter().map(|t| &t.template));
    let sets = sets
        .into_iter()
        .map(|s| PodSet {
            count: if held { 0 } else { s.count },
            ..s
        })
        .collect();
    Ok(Workload {
        priority_classes: classes(o.spec.tasks.iter().map(|t| &t.template)),
        ..workload(o.metadata, sets)
    })
}
