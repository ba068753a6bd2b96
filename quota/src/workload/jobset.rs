//! JobSet: one pod set per replicated job, `replicas` Jobs each running
//! its template's pods at once.

use super::job::JobTemplate;
use super::model::{check_count, Workload};
use super::read::{classes, parse_object, pod_set, workload, Fault, Finishing, Source};
use crate::keys::KeyConfig;
use crate::usage::{nullable, ObjectMeta};
use serde::Deserialize;

#[derive(Deserialize)]
struct JobSet {
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(default, deserialize_with = "nullable")]
    spec: JobSetSpec,
    #[serde(default, deserialize_with = "nullable")]
    status: Finishing,
}
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct JobSetSpec {
    #[serde(default, deserialize_with = "nullable")]
    replicated_jobs: Vec<ReplicatedJob>,
    suspend: Option<bool>,
}
#[derive(Default, Deserialize)]
struct ReplicatedJob {
    #[serde(default)]
    name: String,
    replicas: Option<i64>,
    #[serde(default)]
    template: JobTemplate,
}

/// JobSet (`jobset.x-k8s.io/v1alpha2`): one pod set per replicated job,
/// its `replicas` Jobs each running their template's pods at once
/// (parallelism, never more than completions). `spec.suspend` of the
/// JobSet stops all of them (the JobSet controller suspends its Jobs);
/// a Job template's own `suspend` is the JobSet controller's to set, so
/// it is not read. Finished on its `Completed` or `Failed` condition.
pub(super) fn read_jobset(src: Source<'_>, cfg: &KeyConfig) -> Result<Workload, Fault> {
    let mut o: JobSet = parse_object(src, |o: &JobSet| &o.metadata)?;
    let suspended = o.spec.suspend == Some(true);
    let sets = o
        .spec
        .replicated_jobs
        .iter_mut()
        .enumerate()
        .map(|(i, r)| {
            let name = if r.name.is_empty() {
                format!("job-{i}")
            } else {
                r.name.clone()
            };
            let field = format!("replicas of replicatedJob {name:?}");
            // Checked even when suspended: resuming must not bring it in.
            let jobs = check_count(&field, r.replicas.unwrap_or(1))
                .map_err(|p| Fault::bad(&o.metadata, None, p))?;
            r.template.spec.suspend = None;
            let at = format!("replicatedJob {name:?} template.spec");
            let each = r.template.spec.active(&at, &o.metadata)?;
            let field = format!("replicas × parallelism of replicatedJob {name:?}");
            let n = check_count(&field, jobs.saturating_mul(each))
                .map_err(|p| Fault::bad(&o.metadata, None, p))?;
            let n = if suspended { 0 } else { n };
            pod_set(
                &name,
                (&field, n),
                &r.template.spec.template,
                &o.metadata,
                cfg,
            )
        })
        .collect::<Result<_, _>>()?;
    let templates = o.spec.replicated_jobs.iter();
    Ok(Workload {
        finished: o.status.any(&["Completed", "Failed"]),
        finished_at: o.status.at(&["Completed", "Failed"]),
        priority_classes: classes(templates.map(|r| &r.template.spec.template)),
        ..workload(o.metadata, sets)
    })
}
