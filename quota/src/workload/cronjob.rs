//! CronJob: checked, not charged: one run of its Job must fit; the Jobs it
//! creates are charged as Jobs.

use super::job::JobTemplate;
use super::model::Workload;
use super::read::{classes, parse_object, pod_set, workload, Fault, Source};
use crate::keys::KeyConfig;
use crate::usage::{nullable, ObjectMeta};
use serde::Deserialize;

#[derive(Deserialize)]
struct CronJob {
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(default, deserialize_with = "nullable")]
    spec: CronJobSpec,
}
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CronJobSpec {
    #[serde(default)]
    job_template: JobTemplate,
}

pub(super) fn read_cronjob(src: Source<'_>, cfg: &KeyConfig) -> Result<Workload, Fault> {
    let mut o: CronJob = parse_object(src, |o: &CronJob| &o.metadata)?;
    // One run of the Job is what must fit, suspended or not.
    o.spec.job_template.spec.suspend = None;
    let spec = &o.spec.job_template.spec;
    let at = "spec.jobTemplate.spec";
    let active = spec.active(at, &o.metadata)?;
    let set = pod_set(
        "run",
        (&format!("{at}.parallelism"), active),
        &spec.template,
        &o.metadata,
        cfg,
    )?;
    let priority_classes = classes([&spec.template]);
    Ok(Workload {
        priority_classes,
        ..workload(o.metadata, vec![set])
    })
}
