//! Workload adapters: each kind turns its object into pod sets (count × pod
//! template usage). The table `ADAPTERS` is the only place that names kinds;
//! admission and reconcile look adapters up by group/kind or resource.

use crate::keys::{KeyConfig, QUOTA_LABEL};
use crate::resources::{self, ResourceList};
use crate::usage::{nullable, pod_usage, qos_class, Models, ObjectMeta, PodTemplate, QosClass};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Pods of one template: `count` of them, each using `per_pod`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSet {
    pub name: String,
    pub count: i64,
    pub per_pod: ResourceList,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos: Option<QosClass>,
}

impl PodSet {
    pub fn usage(&self, count: i64) -> ResourceList {
        resources::scale(&self.per_pod, count as i128)
    }
}

/// Whether admitting a kind charges its usage or only checks that it fits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChargeMode {
    Charge,
    /// CronJob: its Jobs are charged when they are created; the CronJob is
    /// only refused when one run could not fit.
    CheckOnly,
}

/// A workload as admission and reconcile see it.
#[derive(Clone, Debug)]
pub struct Workload {
    pub meta: ObjectMeta,
    pub pod_sets: Vec<PodSet>,
    /// Not governed even if labelled (e.g. a ReplicaSet owned by a Deployment).
    pub governed: bool,
    pub mode: ChargeMode,
    pub warnings: Vec<String>,
}

impl Workload {
    /// The quota this workload is bound to, if any.
    pub fn quota(&self) -> Option<&str> {
        if !self.governed {
            return None;
        }
        self.meta
            .labels
            .get(QUOTA_LABEL)
            .map(String::as_str)
            .filter(|s| !s.is_empty())
    }

    pub fn usage(&self) -> ResourceList {
        let mut out = ResourceList::new();
        for s in &self.pod_sets {
            resources::add_into(&mut out, &s.usage(s.count));
        }
        out
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdapterError {
    #[error("cannot read {kind}: {message}")]
    Parse { kind: String, message: String },
}

/// One workload kind.
pub struct Adapter {
    pub group: &'static str,
    pub kind: &'static str,
    /// Plural resource name, as in AdmissionReview `resource` and RBAC.
    pub resource: &'static str,
    /// Has a `scale` subresource whose replicas drive the single pod set.
    pub scalable: bool,
    /// An object of this kind that has a controller owner is its owner's
    /// business, not governed itself (a ReplicaSet under a Deployment or a
    /// Rollout).
    pub defers_to_controller: bool,
    /// Whether admitting the kind charges it or only checks it fits.
    pub mode: ChargeMode,
    /// Where its spec holds a `suspend` flag that stops all its pods
    /// (empty: the kind cannot be suspended). Reclaim suspends such kinds.
    pub suspend_path: &'static [&'static str],
    read: fn(&str, &KeyConfig) -> Result<Workload, String>,
}

impl Adapter {
    pub fn read(&self, json: &str, cfg: &KeyConfig) -> Result<Workload, AdapterError> {
        let mut w = (self.read)(json, cfg).map_err(|message| AdapterError::Parse {
            kind: self.kind.to_string(),
            message,
        })?;
        self.classify(&mut w);
        Ok(w)
    }

    /// Only what binds an object to a quota — its metadata — without its
    /// pod sets: all admission needs of an old object it releases.
    pub fn read_binding(&self, json: &str) -> Result<Workload, AdapterError> {
        #[derive(Deserialize)]
        struct Meta {
            #[serde(default)]
            metadata: ObjectMeta,
        }
        let m: Meta = parse(json).map_err(|message| AdapterError::Parse {
            kind: self.kind.to_string(),
            message,
        })?;
        let mut w = workload(m.metadata, Vec::new());
        self.classify(&mut w);
        Ok(w)
    }

    fn classify(&self, w: &mut Workload) {
        let controlled = w
            .meta
            .owner_references
            .iter()
            .any(|o| o.controller == Some(true));
        w.governed = self.governed(controlled);
        w.mode = self.mode;
    }

    /// Whether an object of this kind is governed, given whether it has a
    /// controller owner.
    pub fn governed(&self, has_controller: bool) -> bool {
        !(self.defers_to_controller && has_controller)
    }

    /// Reference to an object of this kind, the key of its charge.
    pub fn workload_ref(&self, namespace: &str, name: &str) -> String {
        format!("{}/{}/{namespace}/{name}", self.group, self.kind)
    }
}

/// The parts of a workload reference `group/Kind/namespace/name`, as
/// `Adapter::workload_ref` writes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkloadRef<'a> {
    pub group: &'a str,
    pub kind: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
}

impl<'a> WorkloadRef<'a> {
    /// None for a string that is not a workload reference.
    pub fn parse(wref: &'a str) -> Option<WorkloadRef<'a>> {
        let mut parts = wref.splitn(4, '/');
        Some(WorkloadRef {
            group: parts.next()?,
            kind: parts.next()?,
            namespace: parts.next()?,
            name: parts.next()?,
        })
    }
}

pub static ADAPTERS: &[Adapter] = &[
    Adapter {
        group: "apps",
        kind: "Deployment",
        resource: "deployments",
        scalable: true,
        defers_to_controller: false,
        mode: ChargeMode::Charge,
        suspend_path: &[],
        read: read_replicated,
    },
    Adapter {
        group: "apps",
        kind: "StatefulSet",
        resource: "statefulsets",
        scalable: true,
        defers_to_controller: false,
        mode: ChargeMode::Charge,
        suspend_path: &[],
        read: read_replicated,
    },
    Adapter {
        group: "apps",
        kind: "ReplicaSet",
        resource: "replicasets",
        scalable: true,
        defers_to_controller: true,
        mode: ChargeMode::Charge,
        suspend_path: &[],
        read: read_replicated,
    },
    Adapter {
        group: "argoproj.io",
        kind: "Rollout",
        resource: "rollouts",
        scalable: true,
        defers_to_controller: false,
        mode: ChargeMode::Charge,
        suspend_path: &[],
        read: read_replicated,
    },
    Adapter {
        group: "batch",
        kind: "Job",
        resource: "jobs",
        scalable: false,
        defers_to_controller: false,
        mode: ChargeMode::Charge,
        suspend_path: &["spec", "suspend"],
        read: read_job,
    },
    Adapter {
        group: "batch",
        kind: "CronJob",
        resource: "cronjobs",
        scalable: false,
        defers_to_controller: false,
        mode: ChargeMode::CheckOnly,
        suspend_path: &["spec", "suspend"],
        read: read_cronjob,
    },
    Adapter {
        group: "kubeflow.org",
        kind: "TFJob",
        resource: "tfjobs",
        scalable: false,
        defers_to_controller: false,
        mode: ChargeMode::Charge,
        suspend_path: &["spec", "runPolicy", "suspend"],
        read: read_kubeflow,
    },
    Adapter {
        group: "kubeflow.org",
        kind: "PyTorchJob",
        resource: "pytorchjobs",
        scalable: false,
        defers_to_controller: false,
        mode: ChargeMode::Charge,
        suspend_path: &["spec", "runPolicy", "suspend"],
        read: read_kubeflow,
    },
    Adapter {
        group: "kubeflow.org",
        kind: "MPIJob",
        resource: "mpijobs",
        scalable: false,
        defers_to_controller: false,
        mode: ChargeMode::Charge,
        suspend_path: &["spec", "runPolicy", "suspend"],
        read: read_kubeflow,
    },
    Adapter {
        group: "batch.volcano.sh",
        kind: "Job",
        resource: "jobs",
        scalable: false,
        defers_to_controller: false,
        mode: ChargeMode::Charge,
        suspend_path: &[],
        read: read_volcano,
    },
];

pub fn adapter_for_kind(group: &str, kind: &str) -> Option<&'static Adapter> {
    ADAPTERS.iter().find(|a| a.group == group && a.kind == kind)
}

pub fn adapter_for_resource(group: &str, resource: &str) -> Option<&'static Adapter> {
    ADAPTERS
        .iter()
        .find(|a| a.group == group && a.resource == resource)
}

/// `apps/v1` → `apps`; `v1` → ``.
pub fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("")
}

fn parse<'a, T: Deserialize<'a>>(json: &'a str) -> Result<T, String> {
    serde_json::from_str(json).map_err(|e| e.to_string())
}

fn pod_set(
    name: &str,
    count: i64,
    tpl: &PodTemplate,
    meta: &ObjectMeta,
    cfg: &KeyConfig,
) -> PodSet {
    let models = Models::from_labels(&meta.labels, &tpl.metadata.labels);
    PodSet {
        name: name.to_string(),
        count: count.max(0),
        per_pod: pod_usage(&tpl.spec, &models, cfg),
        qos: Some(qos_class(&tpl.spec)),
    }
}

fn workload(meta: ObjectMeta, pod_sets: Vec<PodSet>) -> Workload {
    Workload {
        meta,
        pod_sets,
        governed: true,
        mode: ChargeMode::Charge,
        warnings: Vec::new(),
    }
}

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
fn read_replicated(json: &str, cfg: &KeyConfig) -> Result<Workload, String> {
    let o: Replicated = parse(json)?;
    let replicas = o.spec.replicas.unwrap_or(1);
    match &o.spec.template {
        Some(tpl) => {
            let set = pod_set("main", replicas, tpl, &o.metadata, cfg);
            Ok(workload(o.metadata, vec![set]))
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

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct JobSpec {
    parallelism: Option<i64>,
    completions: Option<i64>,
    suspend: Option<bool>,
    #[serde(default)]
    template: PodTemplate,
}

impl JobSpec {
    /// Pods running at once: parallelism, never more than completions;
    /// a suspended Job runs none.
    fn active(&self) -> i64 {
        if self.suspend == Some(true) {
            return 0;
        }
        let p = self.parallelism.unwrap_or(1);
        self.completions.map_or(p, |c| p.min(c))
    }
}

#[derive(Deserialize)]
struct Job {
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(default, deserialize_with = "nullable")]
    spec: JobSpec,
}

fn read_job(json: &str, cfg: &KeyConfig) -> Result<Workload, String> {
    let o: Job = parse(json)?;
    let set = pod_set("main", o.spec.active(), &o.spec.template, &o.metadata, cfg);
    Ok(workload(o.metadata, vec![set]))
}

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
#[derive(Default, Deserialize)]
struct JobTemplate {
    #[serde(default, deserialize_with = "nullable")]
    spec: JobSpec,
}

fn read_cronjob(json: &str, cfg: &KeyConfig) -> Result<Workload, String> {
    let mut o: CronJob = parse(json)?;
    // One run of the Job is what must fit, suspended or not.
    o.spec.job_template.spec.suspend = None;
    let spec = &o.spec.job_template.spec;
    let set = pod_set("run", spec.active(), &spec.template, &o.metadata, cfg);
    Ok(workload(o.metadata, vec![set]))
}

#[derive(Deserialize)]
struct Kubeflow {
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(default, deserialize_with = "nullable")]
    spec: KubeflowSpec,
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
struct RunPolicy {
    suspend: Option<bool>,
}

/// TFJob, PyTorchJob, MPIJob: one pod set per replica type.
fn read_kubeflow(json: &str, cfg: &KeyConfig) -> Result<Workload, String> {
    let o: Kubeflow = parse(json)?;
    let suspended = o.spec.run_policy.as_ref().and_then(|r| r.suspend) == Some(true);
    let sets = o
        .spec
        .tf_replica_specs
        .iter()
        .map(|(name, r)| {
            let n = if suspended {
                0
            } else {
                r.replicas.unwrap_or(1)
            };
            pod_set(name, n, &r.template, &o.metadata, cfg)
        })
        .collect();
    Ok(workload(o.metadata, sets))
}

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

fn read_volcano(json: &str, cfg: &KeyConfig) -> Result<Workload, String> {
    let o: VolcanoJob = parse(json)?;
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
            pod_set(
                &name,
                t.replicas.unwrap_or(1),
                &t.template,
                &o.metadata,
                cfg,
            )
        })
        .collect();
    Ok(workload(o.metadata, sets))
}

/// `autoscaling/v1` Scale: only the desired replicas matter.
pub fn read_scale_replicas(json: &str) -> Result<i64, AdapterError> {
    #[derive(Deserialize)]
    struct Scale {
        #[serde(default)]
        spec: ScaleSpec,
    }
    #[derive(Default, Deserialize)]
    struct ScaleSpec {
        #[serde(default)]
        replicas: i64,
    }
    let s: Scale = parse(json).map_err(|message| AdapterError::Parse {
        kind: "Scale".into(),
        message,
    })?;
    Ok(s.spec.replicas.max(0))
}

/// What admission needs of a HorizontalPodAutoscaler (v1 or v2).
#[derive(Clone, Debug)]
pub struct Hpa {
    pub meta: ObjectMeta,
    pub target_group: String,
    pub target_kind: String,
    pub target_name: String,
    pub max_replicas: i64,
}

pub fn read_hpa(json: &str) -> Result<Hpa, AdapterError> {
    #[derive(Deserialize)]
    struct H {
        #[serde(default)]
        metadata: ObjectMeta,
        spec: HSpec,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct HSpec {
        scale_target_ref: Target,
        max_replicas: i64,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Target {
        #[serde(default)]
        api_version: String,
        kind: String,
        name: String,
    }
    let h: H = parse(json).map_err(|message| AdapterError::Parse {
        kind: "HorizontalPodAutoscaler".into(),
        message,
    })?;
    Ok(Hpa {
        meta: h.metadata,
        target_group: group_of(&h.spec.scale_target_ref.api_version).to_string(),
        target_kind: h.spec.scale_target_ref.kind,
        target_name: h.spec.scale_target_ref.name,
        max_replicas: h.spec.max_replicas.max(0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quantity::Quantity;

    fn read(group: &str, kind: &str, json: &str) -> Workload {
        adapter_for_kind(group, kind)
            .unwrap()
            .read(json, &KeyConfig::default())
            .unwrap()
    }
    fn gpus(w: &Workload) -> Quantity {
        crate::resources::get(&w.usage(), "requests.nvidia.com/gpu")
    }
    const TPL: &str =
        r#"{"spec":{"containers":[{"resources":{"limits":{"nvidia.com/gpu":"2"}}}]}}"#;

    #[test]
    fn deployment_replicas_times_template() {
        let w = read(
            "apps",
            "Deployment",
            &format!(
                r#"{{"metadata":{{"name":"d","labels":{{"biz.group.resource.quota":"nlp"}}}},"spec":{{"replicas":3,"template":{TPL}}}}}"#
            ),
        );
        assert_eq!(w.quota(), Some("nlp"));
        assert_eq!(gpus(&w), Quantity::from_units(6));
        assert_eq!(
            crate::resources::get(&w.usage(), "pods"),
            Quantity::from_units(3)
        );
        let w = read(
            "apps",
            "StatefulSet",
            &format!(r#"{{"spec":{{"template":{TPL}}}}}"#),
        );
        assert_eq!(gpus(&w), Quantity::from_units(2), "replicas default to 1");
    }

    #[test]
    fn replicaset_with_a_controller_is_not_governed() {
        let w = read(
            "apps",
            "ReplicaSet",
            &format!(
                r#"{{"metadata":{{"labels":{{"biz.group.resource.quota":"nlp"}},"ownerReferences":[{{"apiVersion":"apps/v1","kind":"Deployment","name":"d","controller":true}}]}},"spec":{{"replicas":2,"template":{TPL}}}}}"#
            ),
        );
        assert_eq!(w.quota(), None);
        // An Argo Rollout's ReplicaSets are the Rollout's: not charged twice.
        let w = read(
            "apps",
            "ReplicaSet",
            &format!(
                r#"{{"metadata":{{"labels":{{"biz.group.resource.quota":"nlp"}},"ownerReferences":[{{"apiVersion":"argoproj.io/v1alpha1","kind":"Rollout","name":"r","controller":true}}]}},"spec":{{"replicas":2,"template":{TPL}}}}}"#
            ),
        );
        assert_eq!(w.quota(), None);
        // A ReplicaSet of its own is governed.
        let w = read(
            "apps",
            "ReplicaSet",
            &format!(
                r#"{{"metadata":{{"labels":{{"biz.group.resource.quota":"nlp"}}}},"spec":{{"replicas":2,"template":{TPL}}}}}"#
            ),
        );
        assert_eq!(w.quota(), Some("nlp"));
    }

    #[test]
    fn job_parallelism_completions_and_suspend() {
        let w = read(
            "batch",
            "Job",
            &format!(r#"{{"spec":{{"parallelism":4,"completions":2,"template":{TPL}}}}}"#),
        );
        assert_eq!(gpus(&w), Quantity::from_units(4));
        let w = read(
            "batch",
            "Job",
            &format!(r#"{{"spec":{{"parallelism":4,"suspend":true,"template":{TPL}}}}}"#),
        );
        assert_eq!(gpus(&w), Quantity::ZERO);
    }

    #[test]
    fn cronjob_checks_one_run() {
        let w = read(
            "batch",
            "CronJob",
            &format!(
                r#"{{"spec":{{"suspend":true,"jobTemplate":{{"spec":{{"parallelism":3,"template":{TPL}}}}}}}}}"#
            ),
        );
        assert_eq!(w.mode, ChargeMode::CheckOnly);
        assert_eq!(gpus(&w), Quantity::from_units(6));
    }

    #[test]
    fn kubeflow_replica_specs() {
        let tf = read(
            "kubeflow.org",
            "TFJob",
            &format!(
                r#"{{"spec":{{"tfReplicaSpecs":{{"PS":{{"replicas":1,"template":{TPL}}},"Worker":{{"replicas":4,"template":{TPL}}}}}}}}}"#
            ),
        );
        assert_eq!(gpus(&tf), Quantity::from_units(10));
        let pt = read(
            "kubeflow.org",
            "PyTorchJob",
            &format!(
                r#"{{"spec":{{"pytorchReplicaSpecs":{{"Master":{{"template":{TPL}}},"Worker":{{"replicas":3,"template":{TPL}}}}}}}}}"#
            ),
        );
        assert_eq!(gpus(&pt), Quantity::from_units(8));
        let mpi = read(
            "kubeflow.org",
            "MPIJob",
            &format!(
                r#"{{"spec":{{"runPolicy":{{"suspend":true}},"mpiReplicaSpecs":{{"Worker":{{"replicas":3,"template":{TPL}}}}}}}}}"#
            ),
        );
        assert_eq!(gpus(&mpi), Quantity::ZERO);
    }

    #[test]
    fn volcano_tasks() {
        let w = read(
            "batch.volcano.sh",
            "Job",
            &format!(
                r#"{{"spec":{{"minAvailable":3,"tasks":[{{"name":"ps","replicas":1,"template":{TPL}}},{{"replicas":2,"template":{TPL}}}]}}}}"#
            ),
        );
        assert_eq!(gpus(&w), Quantity::from_units(6));
        assert_eq!(w.pod_sets[1].name, "task-1");
    }

    #[test]
    fn rollout_and_lookup_by_resource() {
        let a = adapter_for_resource("argoproj.io", "rollouts").unwrap();
        assert_eq!(a.kind, "Rollout");
        assert_eq!(a.workload_ref("ml", "r"), "argoproj.io/Rollout/ml/r");
        assert!(adapter_for_kind("", "Pod").is_none());
    }

    #[test]
    fn scale_and_hpa() {
        assert_eq!(
            read_scale_replicas(
                r#"{"apiVersion":"autoscaling/v1","kind":"Scale","spec":{"replicas":7}}"#
            )
            .unwrap(),
            7
        );
        let h = read_hpa(r#"{"metadata":{"name":"h","namespace":"ml"},"spec":{"scaleTargetRef":{"apiVersion":"apps/v1","kind":"Deployment","name":"web"},"minReplicas":1,"maxReplicas":10}}"#).unwrap();
        assert_eq!((h.target_group.as_str(), h.max_replicas), ("apps", 10));
    }

    #[test]
    fn binding_reads_only_metadata() {
        // An old object is read for its binding alone: its spec is not parsed.
        let a = adapter_for_kind("batch", "CronJob").unwrap();
        let w = a
            .read_binding(r#"{"metadata":{"name":"n","labels":{"biz.group.resource.quota":"ml"}},"spec":{"jobTemplate":{"spec":{"template":{"spec":{"containers":[{"resources":{"requests":{"cpu":"lots"}}}]}}}}}}"#)
            .unwrap();
        assert_eq!(
            (w.quota(), w.mode, w.pod_sets.len()),
            (Some("ml"), ChargeMode::CheckOnly, 0)
        );
    }

    #[test]
    fn bad_quantity_is_a_clear_error() {
        let err = adapter_for_kind("apps", "Deployment")
            .unwrap()
            .read(r#"{"spec":{"template":{"spec":{"containers":[{"resources":{"requests":{"cpu":"lots"}}}]}}}}"#, &KeyConfig::default())
            .unwrap_err();
        assert!(
            err.to_string().contains("'lots' is not a quantity"),
            "{err}"
        );
    }
}
