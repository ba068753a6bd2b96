//! Pods, for the controller's cash accounting: which governed workload a pod
//! belongs to (up its owner references), when it held its resources, and a
//! ledger of pod runs kept across reconciles, so a pod deleted between two
//! reconciles still pays for its last stretch.

use crate::cash::Interval;
use crate::keys::KeyConfig;
use crate::resources::ResourceList;
use crate::time::parse_rfc3339;
use crate::usage::{check_amounts, nullable, pod_usage, qos_class, Models, PodSpec, QosClass};
use crate::workload::{adapter_for_kind, group_of, AdapterError, Source};
use serde::Deserialize;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

/// A controller owner reference: `apiVersion`, `kind`, `name`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Owner {
    pub api_version: String,
    pub kind: String,
    pub name: String,
}

impl Owner {
    /// The controller owner reference of an object, if it has one.
    pub fn controller_of(meta: &crate::usage::ObjectMeta) -> Option<Owner> {
        meta.owner_references
            .iter()
            .find(|o| o.controller == Some(true))
            .map(|o| Owner {
                api_version: o.api_version.clone(),
                kind: o.kind.clone(),
                name: o.name.clone(),
            })
    }
}

/// What the controller needs of a pod.
#[derive(Clone, Debug)]
pub struct PodFacts {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub owner: Option<Owner>,
    /// Shared: the pods of one template have equal specs, and a controller
    /// keeping half a million pods keeps one copy of each (see `View`).
    pub spec: Arc<PodSpec>,
    /// When it was bound to a node (PodScheduled), or started.
    pub scheduled_ms: Option<i64>,
    /// When its last container finished (Succeeded or Failed).
    pub finished_ms: Option<i64>,
    /// Its `spec.priority` (the PriorityClass value the API server set; 0
    /// when unset or unreadable).
    pub priority: i32,
    /// Whether the scheduler has found no node for it right now
    /// (`PodScheduled` False, reason `Unschedulable`).
    pub unschedulable: bool,
}

impl PodFacts {
    /// What the pod holds, in quota keys, with its workload's models.
    pub fn usage(&self, models: &Models, cfg: &KeyConfig) -> ResourceList {
        pod_usage(&self.spec, models, cfg)
    }

    pub fn qos(&self) -> QosClass {
        qos_class(&self.spec)
    }
}

#[derive(Deserialize)]
struct Pod {
    #[serde(default)]
    metadata: crate::usage::ObjectMeta,
    #[serde(default, deserialize_with = "nullable")]
    spec: PodSpec,
    #[serde(default, deserialize_with = "nullable")]
    status: PodStatus,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodStatus {
    #[serde(default)]
    phase: String,
    start_time: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    conditions: Vec<Condition>,
    #[serde(default, deserialize_with = "nullable")]
    container_statuses: Vec<ContainerStatus>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Condition {
    #[serde(rename = "type")]
    kind: String,
    status: String,
    last_transition_time: Option<String>,
    #[serde(default)]
    reason: Option<String>,
}

#[derive(Deserialize)]
struct ContainerStatus {
    #[serde(default)]
    state: Option<ContainerState>,
}

#[derive(Deserialize)]
struct ContainerState {
    terminated: Option<Terminated>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Terminated {
    finished_at: Option<String>,
}

pub fn read_pod(json: &str) -> Result<PodFacts, AdapterError> {
    pod_from(Source::Text(json))
}

/// `read_pod` of a pod a watch has parsed already.
pub fn read_pod_value(pod: &serde_json::Value) -> Result<PodFacts, AdapterError> {
    pod_from(Source::Value(pod))
}

fn pod_from(src: Source<'_>) -> Result<PodFacts, AdapterError> {
    let p: Pod = src.parse().map_err(|message| AdapterError::Parse {
        kind: "Pod".into(),
        message,
    })?;
    // The API server refuses such pods; a negative amount must never lower
    // what a quota accrues, whatever sent it.
    check_amounts(&p.spec).map_err(|b| {
        AdapterError::Invalid(format!(
            "bizrq: {} of Pod {}/{}: {}",
            b.subject, p.metadata.namespace, p.metadata.name, b.problem
        ))
    })?;
    let scheduled = p
        .status
        .conditions
        .iter()
        .find(|c| c.kind == "PodScheduled" && c.status == "True")
        .and_then(|c| c.last_transition_time.as_deref())
        .or(p.status.start_time.as_deref())
        .and_then(parse_rfc3339);
    let finished = if matches!(p.status.phase.as_str(), "Succeeded" | "Failed") {
        p.status
            .container_statuses
            .iter()
            .filter_map(|c| {
                c.state
                    .as_ref()?
                    .terminated
                    .as_ref()?
                    .finished_at
                    .as_deref()
            })
            .filter_map(parse_rfc3339)
            .max()
    } else {
        None
    };
    let unschedulable = p.status.conditions.iter().any(|c| {
        c.kind == "PodScheduled"
            && c.status == "False"
            && c.reason.as_deref() == Some("Unschedulable")
    });
    let owner = Owner::controller_of(&p.metadata);
    let priority = p.spec.priority;
    Ok(PodFacts {
        uid: p.metadata.uid,
        namespace: p.metadata.namespace,
        name: p.metadata.name,
        owner,
        spec: Arc::new(p.spec),
        scheduled_ms: scheduled,
        finished_ms: finished,
        priority,
        unschedulable,
    })
}

/// The governed workload a pod belongs to: walk up controller owners
/// (`controller_of` answers from the controller's caches) to the first
/// object of a known kind that is governed by its own right. A ReplicaSet
/// under a Deployment resolves to the Deployment; a Job under a CronJob to
/// the Job (Jobs are what is charged). Returns the workload reference.
pub fn owning_workload(
    namespace: &str,
    owner: Option<&Owner>,
    controller_of: impl Fn(&Owner) -> Option<Owner>,
) -> Option<String> {
    let mut current = owner?.clone();
    for _ in 0..8 {
        let up = controller_of(&current);
        if let Some(adapter) = adapter_for_kind(group_of(&current.api_version), &current.kind) {
            if adapter.governed(up.is_some()) {
                return Some(adapter.workload_ref(namespace, &current.name).into());
            }
        }
        current = up?;
    }
    None
}

/// One pod's run as the controller recorded it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodRun {
    pub quota: String,
    /// Shared between the runs of pods with the same usage.
    pub usage: Arc<ResourceList>,
    pub qos: Option<QosClass>,
    pub start_ms: i64,
    pub end_ms: Option<i64>,
    /// The workload reference (`group/Kind/namespace/name`) the pod
    /// belongs to, for the ledger's entries; empty when not known (a run
    /// stored before it was recorded).
    pub workload: Arc<str>,
}

impl PodRun {
    /// The run as `cash::accrue` reads it.
    pub fn interval(&self) -> Interval<'_> {
        Interval {
            usage: &self.usage,
            qos: self.qos,
            start_ms: self.start_ms,
            end_ms: self.end_ms,
        }
    }
}

/// Pod runs by pod uid. A run stays until a status write has accrued it to
/// its end (`settle`), so a pod deleted between two reconciles is charged
/// for its last stretch, and a reconcile whose write lost its
/// compare-and-swap finds every run still there for the retry.
///
/// A run recorded late — its pod or its workload seen only after a status
/// write had already paid past the run's start — is *unbilled* until a
/// written status has accrued it: that write bills it back from its start
/// (`budget::enforce::bill_late`), so no stretch of a run is lost to a watch that ran
/// behind. Only runs recorded once the controller is live (its first lists
/// done) can be late: what the first lists show was billed by an earlier
/// life up to the quota's `lastReconcileTime`. A run paid off and dropped
/// is remembered (`paid_off`) while its pod exists, so seeing the
/// finished pod again does not bill it twice.
#[derive(Clone, Debug, Default)]
pub struct PodRuns {
    runs: HashMap<String, PodRun>,
    /// Uids by quota, so one quota's runs are found without a scan.
    by_quota: HashMap<String, BTreeSet<String>>,
    /// Whether the controller's first lists are done (`set_live`).
    live: bool,
    /// Runs recorded while live that no written status has accrued yet.
    unbilled: HashSet<String>,
    /// Runs paid to their end and dropped whose pods may still be seen.
    paid_off: HashSet<String>,
}

impl PodRuns {
    fn index(&mut self, uid: &str, old_quota: Option<&str>, new_quota: &str) {
        if old_quota == Some(new_quota) {
            return;
        }
        if let Some(q) = old_quota {
            if let Some(set) = self.by_quota.get_mut(q) {
                set.remove(uid);
                if set.is_empty() {
                    self.by_quota.remove(q);
                }
            }
        }
        self.by_quota
            .entry(new_quota.to_string())
            .or_default()
            .insert(uid.to_string());
    }

    /// The controller's first lists are done: runs recorded from now on
    /// are unbilled until a written status accrues them.
    pub fn set_live(&mut self) {
        self.live = true;
    }

    /// A pod as observed (added or updated). An end already known is kept.
    pub fn observe(&mut self, uid: &str, mut run: PodRun) {
        if self.live && !self.runs.contains_key(uid) && !self.paid_off.contains(uid) {
            self.unbilled.insert(uid.to_string());
        }
        let old_quota = self.runs.get(uid).map(|old| {
            run.end_ms = match (old.end_ms, run.end_ms) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            old.quota.clone()
        });
        self.index(uid, old_quota.as_deref(), &run.quota);
        self.runs.insert(uid.to_string(), run);
    }

    /// The pod is gone: its run ends at `at_ms` unless it ended earlier.
    pub fn deleted(&mut self, uid: &str, at_ms: i64) {
        if let Some(r) = self.runs.get_mut(uid) {
            r.end_ms = Some(r.end_ms.map_or(at_ms, |e| e.min(at_ms)));
        }
    }

    /// The runs of one quota, for `reconcile`.
    pub fn intervals(&self, quota: &str) -> Vec<Interval<'_>> {
        self.runs_of(quota).map(PodRun::interval).collect()
    }

    /// After `quota`'s status was written with `lastReconcileTime` =
    /// `up_to_ms`: the runs of that write's snapshot (`billed`, their
    /// uids) are accrued, back from their start if they were unbilled;
    /// every run of the quota billed before and ended by then is fully
    /// paid. `billed` is None when nothing was written (runs that ended by
    /// the stored window's start, `up_to_ms`, were paid by an earlier
    /// write). Returns the uids dropped.
    pub fn settle(&mut self, quota: &str, up_to_ms: i64, billed: Option<&[String]>) -> Vec<String> {
        for uid in billed.into_iter().flatten() {
            // A run that moved to another quota since the snapshot: what
            // was billed is the part this quota kept (`{uid}@{quota}`).
            if self.by_quota.get(quota).is_some_and(|s| s.contains(uid)) {
                self.unbilled.remove(uid);
            } else {
                self.unbilled.remove(&format!("{uid}@{quota}"));
            }
        }
        let Some(uids) = self.by_quota.get_mut(quota) else {
            return Vec::new();
        };
        let runs = &mut self.runs;
        let unbilled = &self.unbilled;
        let mut paid = Vec::new();
        uids.retain(|uid| {
            let done = !unbilled.contains(uid)
                && runs
                    .get(uid)
                    .is_none_or(|r| r.end_ms.is_some_and(|e| e <= up_to_ms));
            if done {
                runs.remove(uid);
                paid.push(uid.clone());
            }
            !done
        });
        if uids.is_empty() {
            self.by_quota.remove(quota);
        }
        self.paid_off.extend(paid.iter().cloned());
        paid
    }

    /// Whether the run of `uid` was recorded late and not yet accrued.
    pub fn is_unbilled(&self, uid: &str) -> bool {
        self.unbilled.contains(uid)
    }

    /// Mark the run of `uid` unbilled (the part of a moved pod's run its
    /// old quota still owes, when the whole run was).
    pub fn mark_unbilled(&mut self, uid: &str) {
        if self.runs.contains_key(uid) {
            self.unbilled.insert(uid.to_string());
        }
    }

    /// The pod of `uid` is gone: nothing can show its paid-off run again.
    pub fn forget(&mut self, uid: &str) {
        self.paid_off.remove(uid);
    }

    /// A pod's run, if recorded.
    pub fn get(&self, uid: &str) -> Option<&PodRun> {
        self.runs.get(uid)
    }

    /// Record a run as given (restored from disk, or restarted under another
    /// quota), replacing what was there.
    pub fn replace(&mut self, uid: &str, run: PodRun) {
        let old_quota = self.runs.get(uid).map(|r| r.quota.clone());
        self.index(uid, old_quota.as_deref(), &run.quota);
        self.runs.insert(uid.to_string(), run);
    }

    /// The runs of one quota.
    pub fn runs_of<'a>(&'a self, quota: &str) -> impl Iterator<Item = &'a PodRun> + 'a {
        self.runs_with_uids(quota).map(|(_, r)| r)
    }

    /// The runs of one quota with their uids.
    pub fn runs_with_uids<'a>(
        &'a self,
        quota: &str,
    ) -> impl Iterator<Item = (&'a String, &'a PodRun)> + 'a {
        self.by_quota
            .get(quota)
            .into_iter()
            .flatten()
            .filter_map(|uid| self.runs.get_key_value(uid))
    }

    /// Every pod uid with a run.
    pub fn uids(&self) -> impl Iterator<Item = &String> {
        self.runs.keys()
    }

    pub fn len(&self) -> usize {
        self.runs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cash::{self, QosMultipliers};
    use crate::quantity::Quantity;

    const POD: &str = r#"{
      "apiVersion": "v1", "kind": "Pod",
      "metadata": {"name": "train-7d9f-abc", "namespace": "nlp", "uid": "p-1",
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "train-7d9f", "uid": "rs-1", "controller": true, "blockOwnerDeletion": true}]},
      "spec": {"nodeName": "gpu-17", "containers": [{"name": "t", "resources": {"limits": {"nvidia.com/gpu": "4", "cpu": "8", "memory": "64Gi"}}}]},
      "status": {"phase": "Succeeded", "startTime": "2026-11-21T10:00:05Z",
        "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-21T10:00:00Z"}],
        "containerStatuses": [{"name": "t", "state": {"terminated": {"exitCode": 0, "finishedAt": "2026-11-21T12:30:00Z"}}}]}
    }"#;

    fn owner(api: &str, kind: &str, name: &str) -> Owner {
        Owner {
            api_version: api.into(),
            kind: kind.into(),
            name: name.into(),
        }
    }

    #[test]
    fn reads_a_pod_as_the_api_server_returns_it() {
        let p = read_pod(POD).unwrap();
        assert_eq!(p.uid, "p-1");
        assert_eq!(
            p.scheduled_ms,
            parse_rfc3339("2026-11-21T10:00:00Z"),
            "scheduled, not started"
        );
        assert_eq!(p.finished_ms, parse_rfc3339("2026-11-21T12:30:00Z"));
        let models = Models {
            gpu: Some("A100".into()),
            ..Default::default()
        };
        let u = p.usage(&models, &KeyConfig::default());
        assert_eq!(u["requests.nvidia.com/gpu.A100"], Quantity::from_units(4));
        assert_eq!(p.qos(), QosClass::Guaranteed);
    }

    /// Reclaim orders victims by priority and sees physical pressure in
    /// unschedulable pods: both are read here, typed, not by the caller.
    #[test]
    fn a_pods_priority_and_unschedulability_are_read() {
        let p = read_pod(POD).unwrap();
        assert_eq!((p.priority, p.unschedulable), (0, false));
        let pending = POD
            .replace(r#""nodeName": "gpu-17","#, r#""priority": 1000,"#)
            .replace(
                r#"{"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-21T10:00:00Z"}"#,
                r#"{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}"#,
            );
        let p = read_pod(&pending).unwrap();
        assert_eq!((p.priority, p.unschedulable), (1000, true));
        // Not scheduled for another reason (a gate): not unschedulable.
        let gated = pending.replace(
            r#""reason": "Unschedulable""#,
            r#""reason": "SchedulingGated""#,
        );
        assert!(!read_pod(&gated).unwrap().unschedulable);
        // An int32 as Kubernetes converts it; a value that is no integer is 0.
        for (given, read) in [("-5", -5), ("null", 0), (r#""high""#, 0), ("4294967297", 1)] {
            let pod = pending.replace(r#""priority": 1000"#, &format!(r#""priority": {given}"#));
            assert_eq!(read_pod(&pod).unwrap().priority, read, "{given}");
        }
    }

    #[test]
    fn a_pod_with_a_negative_amount_is_refused() {
        let pod = POD.replace(r#""nvidia.com/gpu": "4""#, r#""nvidia.com/gpu": "-4""#);
        let err = read_pod(&pod).unwrap_err().to_string();
        assert_eq!(
            err,
            "bizrq: container \"t\" of Pod nlp/train-7d9f-abc: limits nvidia.com/gpu is negative (-4)"
        );
    }

    #[test]
    fn owners_resolve_to_the_governed_workload() {
        let rs = owner("apps/v1", "ReplicaSet", "train-7d9f");
        let deploy = owner("apps/v1", "Deployment", "train");
        let up = |o: &Owner| (o.kind == "ReplicaSet").then(|| deploy.clone());
        assert_eq!(
            owning_workload("nlp", Some(&rs), up).as_deref(),
            Some("apps/Deployment/nlp/train")
        );
        // A ReplicaSet of its own is the workload.
        assert_eq!(
            owning_workload("nlp", Some(&rs), |_| None).as_deref(),
            Some("apps/ReplicaSet/nlp/train-7d9f")
        );
        // A Job under a CronJob: the Job is what is charged.
        let job = owner("batch/v1", "Job", "nightly-2900");
        let cron = owner("batch/v1", "CronJob", "nightly");
        assert_eq!(
            owning_workload("ml", Some(&job), |_| Some(cron.clone())).as_deref(),
            Some("batch/Job/ml/nightly-2900")
        );
        // Kubeflow and Volcano own their pods directly.
        let tf = owner("kubeflow.org/v1", "TFJob", "bert");
        assert_eq!(
            owning_workload("ml", Some(&tf), |_| None).as_deref(),
            Some("kubeflow.org/TFJob/ml/bert")
        );
        // A bare pod or an unknown owner is not governed.
        assert_eq!(owning_workload("ml", None, |_| None), None);
        assert_eq!(
            owning_workload("ml", Some(&owner("v1", "Node", "n")), |_| None),
            None
        );
    }

    #[test]
    fn a_pod_deleted_between_reconciles_pays_its_last_stretch_once() {
        let gpus: ResourceList = [(
            "requests.nvidia.com/gpu".to_string(),
            Quantity::from_units(2),
        )]
        .into();
        let keys = vec![(
            "cash/requests.nvidia.com/gpu".to_string(),
            "requests.nvidia.com/gpu".to_string(),
        )];
        let run = PodRun {
            quota: "q".into(),
            usage: Arc::new(gpus),
            qos: None,
            start_ms: 0,
            end_ms: None,
            workload: "".into(),
        };
        let mut ledger = PodRuns::default();
        ledger.observe("p", run.clone());
        ledger.observe(
            "other",
            PodRun {
                quota: "other".into(),
                ..run.clone()
            },
        );
        let h = cash::MS_PER_HOUR as i64;
        // Reconcile at 1 h: one hour paid.
        let first = cash::accrue(
            &ledger.intervals("q"),
            &keys,
            0,
            h,
            &QosMultipliers::default(),
        );
        ledger.settle("q", h, None);
        // Deleted at 1.5 h, before the next reconcile at 2 h.
        ledger.deleted("p", h + h / 2);
        ledger.observe("p", run.clone()); // a late update from the cache changes nothing
        ledger.deleted("p", 2 * h);
        let second = cash::accrue(
            &ledger.intervals("q"),
            &keys,
            h,
            2 * h,
            &QosMultipliers::default(),
        );
        let total = first["cash/requests.nvidia.com/gpu"] + second["cash/requests.nvidia.com/gpu"];
        assert_eq!(
            cash::to_quantity(total),
            Quantity::from_units(3),
            "2 cards × 1.5 h"
        );
        ledger.settle("q", 2 * h, None);
        assert!(
            ledger.intervals("q").is_empty(),
            "fully paid runs are dropped"
        );
        assert_eq!(ledger.len(), 1, "other quotas' runs stay");
    }

    /// Which runs a write bills back: recorded while live, not in any
    /// written snapshot, and not a paid-off run seen again.
    #[test]
    fn runs_recorded_late_stay_unbilled_until_a_written_snapshot_holds_them() {
        let run = |end: Option<i64>| PodRun {
            quota: "q".into(),
            usage: Arc::new(ResourceList::new()),
            qos: None,
            start_ms: 0,
            end_ms: end,
            workload: "".into(),
        };
        let mut ledger = PodRuns::default();
        // The first lists: an earlier life billed these.
        ledger.observe("listed", run(None));
        assert!(!ledger.is_unbilled("listed"));
        ledger.set_live();
        ledger.observe("late", run(Some(50)));
        ledger.observe("listed", run(None)); // an update: not new
        assert!(ledger.is_unbilled("late") && !ledger.is_unbilled("listed"));
        // Nothing written: the late run is kept, ended or not.
        assert!(ledger.settle("q", 100, None).is_empty());
        // Written without it (recorded after that write's snapshot): kept.
        assert!(ledger
            .settle("q", 100, Some(&["listed".to_string()]))
            .is_empty());
        assert!(ledger.is_unbilled("late"));
        // Written with it: billed, and paid off since it ended.
        assert_eq!(
            ledger.settle("q", 100, Some(&["late".to_string()])),
            ["late"]
        );
        assert!(!ledger.is_unbilled("late"));
        // The finished pod seen again: not late a second time.
        ledger.observe("late", run(Some(50)));
        assert!(!ledger.is_unbilled("late"));
        assert_eq!(ledger.settle("q", 100, None), ["late"]);
        // Once its pod is gone, a new pod with that uid would be new.
        ledger.forget("late");
        ledger.observe("late", run(Some(50)));
        assert!(ledger.is_unbilled("late"));
        // Moved to another quota after q's snapshot held it: q's write
        // billed the part q kept (`late@q`), not the run under "other".
        ledger.replace("late@q", run(Some(60)));
        ledger.mark_unbilled("late@q");
        ledger.replace(
            "late",
            PodRun {
                quota: "other".into(),
                ..run(None)
            },
        );
        ledger.settle("q", 100, Some(&["late".to_string()]));
        assert!(!ledger.is_unbilled("late@q") && ledger.is_unbilled("late"));
    }

    /// The controller reads the pods its watch parsed: the same facts, or
    /// the same refusal, as from the text.
    #[test]
    fn a_parsed_pod_reads_as_its_text() {
        let negative = POD.replace(r#""nvidia.com/gpu": "4""#, r#""nvidia.com/gpu": "-4""#);
        for json in [
            POD,
            negative.as_str(),
            r#"{"spec":null,"status":null}"#,
            r#"{"spec":3}"#,
        ] {
            let value: serde_json::Value = serde_json::from_str(json).unwrap();
            assert_eq!(
                format!("{:?}", read_pod_value(&value)),
                crate::test_util::positionless(format!("{:?}", read_pod(json))),
                "{json}"
            );
        }
    }
}
