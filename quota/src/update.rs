//! What an update of a workload changes of what bizrq reads of it, and so
//! what must be judged again (docs/budgets.md §2, "Updates").
//!
//! Admission, budgets, queueing and pricing read, of each kind in the
//! adapter table: its pod sets' counts and per-pod requests, the model
//! labels that qualify those requests (and price them), each set's QoS
//! class (priced), its declared run time (a field or the annotation), the
//! PriorityClasses its templates name (queue order, preemption), the quota
//! label and whether it is governed (which quota holds it), and the
//! queueing opt-out label. An update that changes any of them is decided
//! as a create of the new object would be, given what the old one holds:
//! `changed` says which changed, `Changes` what that asks of admission.
//! An update that changes none of them (a status, an unrelated label)
//! changes nothing a decision read, and leaves what it holds alone.

use crate::budget::price_list::split_model;
use crate::budget::reservations::RunDecl;
use crate::queue::OPT_OUT_LABEL;
use crate::resources::ResourceList;
use crate::workload::{PodSet, Workload};
use std::collections::BTreeSet;

/// One input of admission's decisions about a workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Input {
    /// The quota label, or whether the workload is governed at all.
    Quota,
    /// How many pods a pod set runs (or which pod sets there are).
    Counts,
    /// What one pod of a set requests or is limited to.
    Requests,
    /// The model a request is qualified by (a model label).
    Model,
    /// A pod set's QoS class (it prices cash).
    Qos,
    /// The declared maximum run time: added, removed, changed, or wrong.
    RunTime,
    /// The PriorityClasses its pod templates name.
    PriorityClass,
    /// The queueing opt-out label (`queue::OPT_OUT_LABEL`).
    OptOut,
}

/// The inputs an update changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Changes(pub BTreeSet<Input>);

impl Changes {
    /// Every input: what an update whose old object cannot be read is
    /// judged on.
    pub fn all() -> Changes {
        use Input::*;
        Changes(
            [
                Quota,
                Counts,
                Requests,
                Model,
                Qos,
                RunTime,
                PriorityClass,
                OptOut,
            ]
            .into(),
        )
    }

    pub fn contains(&self, input: Input) -> bool {
        self.0.contains(&input)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// A cash budget reads it: what the workload reserves is judged again
    /// (more reserved when it grows, refused as a create when that does
    /// not fit; released when it shrinks), even when no count rises.
    pub fn budget(&self) -> bool {
        use Input::*;
        [Counts, Requests, Model, Qos, RunTime]
            .iter()
            .any(|i| self.contains(*i))
    }

    /// A quota's hard reads it: the charge is judged again (it already is
    /// whenever the charge differs; see `admission::charge`).
    pub fn charge(&self) -> bool {
        use Input::*;
        [Quota, Counts, Requests, Model]
            .iter()
            .any(|i| self.contains(*i))
    }

    /// A queue reads it: a queued workload's entry is judged again (the
    /// mutating webhook rebuilds the entry of a queued workload on every
    /// update).
    pub fn queue(&self) -> bool {
        use Input::*;
        [Counts, Requests, Model, RunTime, PriorityClass, OptOut]
            .iter()
            .any(|i| self.contains(*i))
    }
}

/// What changed between the `old` and the `new` object of an update, of
/// what admission, budgets, queueing and pricing read.
pub fn changed(old: &Workload, new: &Workload) -> Changes {
    let mut out = BTreeSet::new();
    if old.quota() != new.quota() || old.governed != new.governed {
        out.insert(Input::Quota);
    }
    let names = |w: &Workload| {
        w.pod_sets
            .iter()
            .map(|s| s.name.clone())
            .collect::<Vec<_>>()
    };
    if names(old) != names(new) {
        // Pod sets came or went: every set's count changed, and what the
        // new ones ask is read afresh.
        out.extend([Input::Counts, Input::Requests, Input::Model, Input::Qos]);
    } else {
        for (a, b) in old.pod_sets.iter().zip(&new.pod_sets) {
            compare_sets(a, b, &mut out);
        }
    }
    if old.run_time != new.run_time {
        out.insert(Input::RunTime);
    }
    if old.priority_classes != new.priority_classes {
        out.insert(Input::PriorityClass);
    }
    if old.meta.labels.get(OPT_OUT_LABEL) != new.meta.labels.get(OPT_OUT_LABEL) {
        out.insert(Input::OptOut);
    }
    Changes(out)
}

fn compare_sets(a: &PodSet, b: &PodSet, out: &mut BTreeSet<Input>) {
    if a.count != b.count {
        out.insert(Input::Counts);
    }
    if a.qos != b.qos {
        out.insert(Input::Qos);
    }
    if generic(&a.per_pod) != generic(&b.per_pod) {
        out.insert(Input::Requests);
    }
    if models(&a.per_pod) != models(&b.per_pod) {
        out.insert(Input::Model);
    }
}

/// `requests.nvidia.com/gpu.A100` → its resource `nvidia.com/gpu` and
/// model `A100`; None for a key without a model.
fn model_key(key: &str) -> Option<(&str, &str)> {
    let resource = key
        .strip_prefix("requests.")
        .or_else(|| key.strip_prefix("limits."))
        .unwrap_or(key);
    match split_model(resource) {
        (r, Some(m)) => Some((r, m)),
        _ => None,
    }
}

/// The keys not qualified by a model, with their amounts.
fn generic(per_pod: &ResourceList) -> Vec<(&String, &crate::Quantity)> {
    per_pod
        .iter()
        .filter(|(k, _)| model_key(k).is_none())
        .collect()
}

/// Which model qualifies each resource (amounts are the generic key's).
fn models(per_pod: &ResourceList) -> BTreeSet<(&str, &str)> {
    per_pod.keys().filter_map(|k| model_key(k)).collect()
}

impl RunDecl {
    /// What the new object `w` of an update declares, judged again when
    /// `changes` holds anything a budget reads.
    pub fn of_update(w: &Workload, changes: &Changes) -> RunDecl {
        match RunDecl::of(w) {
            RunDecl::Object(run) if changes.budget() => RunDecl::Changed(run),
            run => run,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::KeyConfig;
    use crate::workload::adapter_for_kind;
    use serde_json::json;

    fn job(v: serde_json::Value) -> Workload {
        adapter_for_kind("batch", "Job")
            .unwrap()
            .read(&v.to_string(), &KeyConfig::default())
            .unwrap()
    }

    fn base() -> serde_json::Value {
        json!({"metadata": {"name": "j", "namespace": "ml",
                "labels": {"biz.group.resource.quota": "team"}},
            "spec": {"parallelism": 4, "activeDeadlineSeconds": 3600,
                "template": {"spec": {"containers": [{"name": "c",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}})
    }

    #[test]
    fn a_longer_run_time_is_a_change_a_budget_reads() {
        let old = job(base());
        let mut v = base();
        v["spec"]["activeDeadlineSeconds"] = json!(32400);
        let c = changed(&old, &job(v));
        assert_eq!(c, Changes([Input::RunTime].into()));
        assert!(c.budget() && !c.charge());
    }

    #[test]
    fn an_unrelated_label_changes_nothing_read() {
        let old = job(base());
        let mut v = base();
        v["metadata"]["labels"]["team"] = json!("x");
        v["metadata"]["annotations"] = json!({"note": "hello"});
        assert!(changed(&old, &job(v)).is_empty());
    }

    #[test]
    fn the_annotation_removed_or_made_wrong_is_a_run_time_change() {
        let mut a = base();
        a["metadata"]["annotations"] = json!({"biz.group.resource.quota/max-runtime": "1m"});
        let old = job(a.clone());
        a["metadata"]["annotations"] = json!({});
        assert!(changed(&old, &job(a.clone())).contains(Input::RunTime));
        a["metadata"]["annotations"] = json!({"biz.group.resource.quota/max-runtime": "1.5h"});
        assert!(changed(&old, &job(a)).contains(Input::RunTime));
    }
}
