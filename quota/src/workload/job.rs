//! Job: the pods it runs at once (parallelism, never more than
//! completions; none while suspended), its declared run time, and whether
//! it finished. Its spec is also a CronJob's and a JobSet's template.

use super::model::{check_count, Workload};
use super::read::{classes, parse_object, pod_set, workload, Fault, Finishing, Source};
use super::runtime;
use crate::keys::KeyConfig;
use crate::usage::{nullable, ObjectMeta, PodTemplate};
use serde::Deserialize;

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct JobSpec {
    parallelism: Option<i64>,
    completions: Option<i64>,
    pub(super) suspend: Option<bool>,
    #[serde(default)]
    pub(super) template: PodTemplate,
    active_deadline_seconds: Option<serde_json::Value>,
}

impl JobSpec {
    /// Pods running at once: parallelism, never more than completions;
    /// a suspended Job runs none. `at`: where the spec is (for errors).
    pub(super) fn active(&self, at: &str, meta: &ObjectMeta) -> Result<i64, Fault> {
        let check = |field: &str, n: Option<i64>| {
            n.map(|n| check_count(&format!("{at}.{field}"), n))
                .transpose()
                .map_err(|p| Fault::bad(meta, None, p))
        };
        let p = check("parallelism", self.parallelism)?.unwrap_or(1);
        let c = check("completions", self.completions)?;
        if self.suspend == Some(true) {
            return Ok(0);
        }
        Ok(c.map_or(p, |c| p.min(c)))
    }
}

#[derive(Deserialize)]
struct Job {
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(default, deserialize_with = "nullable")]
    spec: JobSpec,
    #[serde(default, deserialize_with = "nullable")]
    status: Finishing,
}

pub(super) fn read_job(src: Source<'_>, cfg: &KeyConfig) -> Result<Workload, Fault> {
    let o: Job = parse_object(src, |o: &Job| &o.metadata)?;
    let active = o.spec.active("spec", &o.metadata)?;
    let set = pod_set(
        "main",
        ("spec.parallelism", active),
        &o.spec.template,
        &o.metadata,
        cfg,
    )?;
    let run_time = runtime::declared(
        o.spec.active_deadline_seconds.as_ref(),
        None,
        &o.metadata.annotations,
    );
    Ok(Workload {
        run_time,
        finished: o.status.any(&["Complete", "Failed"]),
        finished_at: o.status.at(&["Complete", "Failed"]),
        priority_classes: classes([&o.spec.template]),
        ..workload(o.metadata, vec![set])
    })
}

#[derive(Default, Deserialize)]
pub(super) struct JobTemplate {
    #[serde(default, deserialize_with = "nullable")]
    pub(super) spec: JobSpec,
}
