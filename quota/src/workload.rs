//! Workload adapters: each kind turns its object into pod sets (count × pod
//! template usage). The table `ADAPTERS` is the only place that names kinds;
//! admission and reconcile look adapters up by group/kind or resource.

use crate::budget::runtime::{self, RunTime, RunTimeError};
use crate::keys::{KeyConfig, QUOTA_LABEL};
use crate::quantity::MAX_NANOS;
use crate::resources::{self, ResourceList};
use crate::usage::{
    check_amounts, nullable, pod_usage, qos_class, BadAmount, Models, ObjectMeta, PodTemplate,
    QosClass,
};
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
    /// Its declared maximum run time (docs/budgets.md §2), or why the
    /// declaration is wrong: an error matters only where a budget would
    /// reserve on it, so it is kept here, not refused by the reader.
    pub run_time: Result<Option<RunTime>, RunTimeError>,
    /// It has finished (a Job's or a Kubeflow job's status says it
    /// completed or failed): its budget reservations settle. Its pod sets
    /// are read as declared all the same: only a reader that can see its
    /// pods may judge that it runs nothing (`Workload::finish`).
    pub finished: bool,
    /// When it finished: the latest `lastTransitionTime` among its true
    /// finishing conditions (epoch ms), if they carry one.
    pub finished_at: Option<i64>,
    /// The PriorityClasses its pod templates name, sorted, each once: what
    /// queueing orders and preempts by (`queue::priority`).
    pub priority_classes: Vec<String>,
}

impl Workload {
    /// A finished workload runs nothing for good: its pod sets at 0 pods.
    /// Only for a reader that knows no pod of it still runs, or that reads
    /// a status the API server keeps (an UPDATE's stored status).
    pub fn finish(&mut self) {
        if self.finished {
            for s in &mut self.pod_sets {
                s.count = 0;
            }
        }
    }

    /// Forget what its status says: a CREATE's status is written by the
    /// client (the API server clears it only after mutating admission), so
    /// a forged `Complete` must not read as running nothing.
    pub fn ignore_status(&mut self) {
        self.finished = false;
        self.finished_at = None;
    }
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

/// Kubernetes replica counts are int32. The bound keeps a count times a
/// per-pod amount (at most `MAX_NANOS`) inside i128.
pub const MAX_REPLICAS: i64 = i32::MAX as i64;
/// Longest object name Kubernetes accepts (a DNS-1123 subdomain).
pub const MAX_NAME: usize = 253;
/// Longest namespace (a DNS-1123 label), and longest kind.
pub const MAX_NAMESPACE: usize = 63;
pub const MAX_KIND: usize = 63;

/// Distinct resource names (requests and limits counted apart) one
/// workload may ask for, over all its pods: a real pod asks for a few
/// (CPU, memory, storage, a GPU, hugepages, an RDMA device); each name is
/// kept in its quota's status, so thousands of made-up ones would make
/// every later write of that quota carry them.
pub const MAX_RESOURCE_NAMES: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdapterError {
    #[error("cannot read {kind}: {message}")]
    Parse { kind: String, message: String },
    /// Read, but holding what no workload may: a negative or unaccountably
    /// large amount or count, a name longer than Kubernetes allows.
    #[error("{0}")]
    Invalid(String),
}

/// Why an adapter refused an object, before the kind is known to say so.
enum Fault {
    Parse(String),
    Bad {
        /// `ns/name`, or empty when the name itself is at fault.
        object: String,
        /// Where in it (`container "worker"`); None: the object as a whole.
        subject: Option<String>,
        problem: String,
    },
}

impl Fault {
    fn bad(meta: &ObjectMeta, subject: Option<String>, problem: String) -> Fault {
        Fault::Bad {
            object: object_name(meta),
            subject,
            problem,
        }
    }
}

fn object_name(meta: &ObjectMeta) -> String {
    match (meta.namespace.as_str(), meta.name.as_str()) {
        ("", name) => name.to_string(),
        (ns, "") => format!("{ns}/(no name yet)"),
        (ns, name) => format!("{ns}/{name}"),
    }
}

/// `field` at `n`: refused when negative (it would lower `used`) or beyond
/// any replica count Kubernetes allows.
fn check_count(field: &str, n: i64) -> Result<i64, String> {
    if n < 0 {
        Err(format!("{field} is negative ({n})"))
    } else if n > MAX_REPLICAS {
        Err(format!("{field} is {n}; at most {MAX_REPLICAS}"))
    } else {
        Ok(n)
    }
}

fn check_len(field: &str, value: &str, max: usize) -> Result<(), String> {
    if value.len() > max {
        Err(format!(
            "{field} is {} characters long; Kubernetes allows at most {max}",
            value.len()
        ))
    } else {
        Ok(())
    }
}

/// A namespace is a DNS-1123 label (empty: not namespaced); a name is
/// a path segment, as Kubernetes has them for every kind.
fn check_names(
    ns_field: &str,
    namespace: &str,
    name_field: &str,
    name: &str,
) -> Result<(), String> {
    check_len(ns_field, namespace, MAX_NAMESPACE)?;
    check_len(name_field, name, MAX_NAME)?;
    let label = namespace
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !namespace.starts_with('-')
        && !namespace.ends_with('-');
    if !label {
        return Err(format!(
            "{ns_field} {namespace:?} is not a namespace: lowercase letters, digits and '-'"
        ));
    }
    if name.contains(['/', '%']) || name == "." || name == ".." {
        return Err(format!(
            "{name_field} {name:?} is not a name: it may not contain '/' or '%', nor be '.' or '..'"
        ));
    }
    Ok(())
}

/// A workload's namespace and name, as they make its reference (the key
/// of its charge): no longer than Kubernetes allows, so a hostile name
/// never reaches the database's index, and without a '/', so the
/// reference reads back as the namespace and name that made it.
pub fn check_target(namespace: &str, name: &str) -> Result<(), String> {
    check_names("namespace", namespace, "name", name)
}

/// Whether `name` is a DNS-1123 subdomain, as the API server requires of
/// the name of every workload kind bizrq reads (Pods, Deployments, Jobs
/// and the custom resources): lowercase letters, digits, '-' and '.',
/// each '.'-separated part starting and ending with a letter or digit.
pub fn is_dns_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME
        && name.split('.').all(|part| {
            let b = part.as_bytes();
            let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
            !b.is_empty()
                && alnum(&b[0])
                && alnum(&b[b.len() - 1])
                && b.iter().all(|c| alnum(c) || *c == b'-')
        })
}

/// An object's namespace and name as the API server would take them: a
/// namespace that is a DNS-1123 label, and a name that is a DNS-1123
/// subdomain (empty: a CREATE whose name is still to be generated). In a
/// cluster the API server refused any other before asking; standalone
/// (`/api/v1/check`, reviews sent by hand) this refuses it alike.
fn check_meta(meta: &ObjectMeta) -> Result<(), Fault> {
    check_names(
        "metadata.namespace",
        &meta.namespace,
        "metadata.name",
        &meta.name,
    )
    .and_then(|()| {
        if meta.name.is_empty() || is_dns_subdomain(&meta.name) {
            Ok(())
        } else {
            Err(format!(
                "metadata.name {:?} is not a DNS-1123 subdomain: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit",
                meta.name
            ))
        }
    })
    .map_err(|problem| Fault::Bad {
        object: String::new(),
        subject: None,
        problem,
    })
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
    /// Where its pod templates are (`*`: each element of a list), for a
    /// kind without a suspend flag that queues by gating its pods
    /// (`crate::hold`, `Hold::PodGate`); empty otherwise.
    pub gate_templates: &'static [&'static str],
    read: fn(Source<'_>, &KeyConfig) -> Result<Workload, Fault>,
}

/// Where a reader takes an object from: the JSON text of an admission
/// review, or a value a watch has already parsed. Both give the same
/// answer; a watched object is not printed and parsed again.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Source<'a> {
    Text(&'a str),
    Value(&'a serde_json::Value),
}

impl<'a> Source<'a> {
    pub(crate) fn parse<T: Deserialize<'a>>(self) -> Result<T, String> {
        match self {
            Source::Text(json) => serde_json::from_str(json),
            Source::Value(v) => T::deserialize(v),
        }
        .map_err(|e| e.to_string())
    }
}

impl Adapter {
    /// `obj` with its suspend flag (`suspend_path`) set to `to`, the levels
    /// above it made where missing; `obj` unchanged for a kind without one
    /// or a path through a non-object. Read with `to = false`, what a
    /// suspended workload runs once admitted.
    pub fn with_suspend(&self, obj: &serde_json::Value, to: bool) -> serde_json::Value {
        let path = self.suspend_path;
        if path.is_empty() {
            return obj.clone();
        }
        let mut out = obj.clone();
        let mut cur = &mut out;
        for (i, k) in path.iter().enumerate() {
            let Some(m) = cur.as_object_mut() else {
                return obj.clone();
            };
            if i + 1 == path.len() {
                m.insert((*k).to_string(), serde_json::Value::Bool(to));
                break;
            }
            cur = m
                .entry((*k).to_string())
                .or_insert_with(|| serde_json::json!({}));
        }
        out
    }

    /// The object's pod sets, refused when any count or amount is negative
    /// or what its pods come to is more than a quota could account.
    pub fn read(&self, json: &str, cfg: &KeyConfig) -> Result<Workload, AdapterError> {
        self.read_from(Source::Text(json), cfg)
    }

    /// `read` of an object a watch has parsed already.
    pub fn read_value(
        &self,
        object: &serde_json::Value,
        cfg: &KeyConfig,
    ) -> Result<Workload, AdapterError> {
        self.read_from(Source::Value(object), cfg)
    }

    fn read_from(&self, src: Source<'_>, cfg: &KeyConfig) -> Result<Workload, AdapterError> {
        self.check_type(src)?;
        let mut w = (self.read)(src, cfg).map_err(|f| self.refusal(f))?;
        let usage = w.usage();
        if usage.len() > MAX_RESOURCE_NAMES {
            let problem = format!(
                "it asks for {} different resources; a workload may ask for at most \
                 {MAX_RESOURCE_NAMES} (the limit on resource names per workload, docs/limits.md)",
                usage.len()
            );
            return Err(self.refusal(Fault::bad(&w.meta, None, problem)));
        }
        if let Some((k, v)) = usage.into_iter().find(|(_, v)| v.nanos() > MAX_NANOS) {
            let problem = format!(
                "its pods come to {v} of {k}; at most {} units",
                MAX_NANOS / crate::quantity::NANO
            );
            return Err(self.refusal(Fault::bad(&w.meta, None, problem)));
        }
        self.classify(&mut w);
        Ok(w)
    }

    /// The object's own `apiVersion` and `kind`, where it states them, are
    /// this adapter's: a review that names one kind over an object of
    /// another (a Deployment under `kind: Job`) is refused, never read by
    /// the wrong kind's rules — nor held back by a patch at a path the
    /// object does not have. Objects that leave them out (a list's items)
    /// are read as the kind they were asked for.
    fn check_type(&self, src: Source<'_>) -> Result<(), AdapterError> {
        #[derive(Deserialize)]
        struct TypeMeta {
            #[serde(default, rename = "apiVersion")]
            api_version: Option<String>,
            #[serde(default)]
            kind: Option<String>,
        }
        let t: TypeMeta = match src {
            Source::Text(json) => match serde_json::from_str(json) {
                Ok(t) => t,
                // Not an object with string fields there: the reader's own
                // parse says what is wrong.
                Err(_) => return Ok(()),
            },
            Source::Value(v) => TypeMeta {
                api_version: v
                    .get("apiVersion")
                    .and_then(|a| a.as_str())
                    .map(str::to_string),
                kind: v.get("kind").and_then(|k| k.as_str()).map(str::to_string),
            },
        };
        let group_ok = t
            .api_version
            .as_deref()
            .is_none_or(|a| group_of(a) == self.group);
        let kind_ok = t.kind.as_deref().is_none_or(|k| k == self.kind);
        if group_ok && kind_ok {
            return Ok(());
        }
        let said = |v: &Option<String>| v.as_deref().unwrap_or("(none)").to_string();
        let group = if self.group.is_empty() {
            "core"
        } else {
            self.group
        };
        Err(AdapterError::Invalid(format!(
            "bizrq: the request is for a {} ({group}) but its object says apiVersion {:?}, \
             kind {:?}: refused, an object is judged only as the kind it is",
            self.kind,
            said(&t.api_version),
            said(&t.kind),
        )))
    }

    /// How a queued workload of this kind is held back until admitted: its
    /// suspend flag, else a gate on its pods, else not at all.
    pub fn hold(&self) -> crate::hold::Hold {
        use crate::hold::Hold;
        if !self.suspend_path.is_empty() {
            Hold::Suspend(self.suspend_path)
        } else if !self.gate_templates.is_empty() {
            Hold::PodGate(self.gate_templates)
        } else {
            Hold::Never
        }
    }

    fn refusal(&self, f: Fault) -> AdapterError {
        match f {
            Fault::Parse(message) => AdapterError::Parse {
                kind: self.kind.to_string(),
                message,
            },
            Fault::Bad {
                object,
                subject,
                problem,
            } => {
                let of = subject.map(|s| format!("{s} of ")).unwrap_or_default();
                let sep = if object.is_empty() { "" } else { " " };
                AdapterError::Invalid(format!("bizrq: {of}{}{sep}{object}: {problem}", self.kind))
            }
        }
    }

    /// `workload_ref` of a namespace and name taken from outside (an
    /// admission request), refused when longer than Kubernetes allows.
    pub fn checked_ref(&self, namespace: &str, name: &str) -> Result<String, AdapterError> {
        check_target(namespace, name)
            .map_err(|p| AdapterError::Invalid(format!("bizrq: {}: {p}", self.kind)))?;
        Ok(self.workload_ref(namespace, name))
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
    /// None for a string that is not a workload reference, or whose parts
    /// are longer than Kubernetes allows.
    pub fn parse(wref: &'a str) -> Option<WorkloadRef<'a>> {
        let mut parts = wref.splitn(4, '/');
        let r = WorkloadRef {
            group: parts.next()?,
            kind: parts.next()?,
            namespace: parts.next()?,
            name: parts.next()?,
        };
        let fits = r.group.len() <= MAX_NAME
            && r.kind.len() <= MAX_KIND
            && check_target(r.namespace, r.name).is_ok();
        fits.then_some(r)
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
        gate_templates: &[],
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
        gate_templates: &[],
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
        gate_templates: &[],
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
        gate_templates: &[],
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
        gate_templates: &[],
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
        gate_templates: &[],
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
        gate_templates: &[],
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
        gate_templates: &[],
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
        gate_templates: &[],
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
        gate_templates: &["spec", "tasks", "*", "template"],
        read: read_volcano,
    },
    Adapter {
        group: "jobset.x-k8s.io",
        kind: "JobSet",
        resource: "jobsets",
        scalable: false,
        defers_to_controller: false,
        mode: ChargeMode::Charge,
        suspend_path: &["spec", "suspend"],
        gate_templates: &[],
        read: read_jobset,
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

/// `apps/v1` → `v1`; `v1` → `v1`.
pub fn version_of(api_version: &str) -> &str {
    api_version
        .rsplit_once('/')
        .map(|(_, v)| v)
        .unwrap_or(api_version)
}

fn parse<'a, T: Deserialize<'a>>(json: &'a str) -> Result<T, String> {
    Source::Text(json).parse()
}

/// Parses an object and checks its name, for the read functions below.
fn parse_object<'a, T: Deserialize<'a>>(
    src: Source<'a>,
    meta: impl Fn(&T) -> &ObjectMeta,
) -> Result<T, Fault> {
    let o: T = src.parse().map_err(Fault::Parse)?;
    check_meta(meta(&o))?;
    Ok(o)
}

/// `count` pods of `tpl` (`count` as the object holds it in `field`),
/// refused when the count or an amount is negative or too large.
fn pod_set(
    name: &str,
    (field, count): (&str, i64),
    tpl: &PodTemplate,
    meta: &ObjectMeta,
    cfg: &KeyConfig,
) -> Result<PodSet, Fault> {
    let count = check_count(field, count).map_err(|p| Fault::bad(meta, None, p))?;
    check_amounts(&tpl.spec)
        .map_err(|BadAmount { subject, problem }| Fault::bad(meta, Some(subject), problem))?;
    let models = Models::from_labels(&meta.labels, &tpl.metadata.labels);
    let per_pod = pod_usage(&tpl.spec, &models, cfg);
    if let Some((k, v)) = per_pod.iter().find(|(_, v)| v.nanos() > MAX_NANOS) {
        let problem = format!(
            "one pod comes to {v} of {k}; at most {} units",
            MAX_NANOS / crate::quantity::NANO
        );
        return Err(Fault::bad(meta, Some(format!("pod set {name:?}")), problem));
    }
    Ok(PodSet {
        name: name.to_string(),
        count,
        per_pod,
        qos: Some(qos_class(&tpl.spec)),
    })
}

fn workload(meta: ObjectMeta, pod_sets: Vec<PodSet>) -> Workload {
    Workload {
        run_time: runtime::declared(None, None, &meta.annotations),
        finished: false,
        finished_at: None,
        priority_classes: Vec::new(),
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

/// The PriorityClasses `templates` name, sorted, each once.
fn classes<'a>(templates: impl IntoIterator<Item = &'a PodTemplate>) -> Vec<String> {
    let mut out: Vec<String> = templates
        .into_iter()
        .filter_map(|t| t.spec.priority_class_name.clone())
        .filter(|c| !c.is_empty())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Deployment, StatefulSet, ReplicaSet, Argo Rollout: replicas × template.
fn read_replicated(src: Source<'_>, cfg: &KeyConfig) -> Result<Workload, Fault> {
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

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct JobSpec {
    parallelism: Option<i64>,
    completions: Option<i64>,
    suspend: Option<bool>,
    #[serde(default)]
    template: PodTemplate,
    active_deadline_seconds: Option<serde_json::Value>,
}

impl JobSpec {
    /// Pods running at once: parallelism, never more than completions;
    /// a suspended Job runs none. `at`: where the spec is (for errors).
    fn active(&self, at: &str, meta: &ObjectMeta) -> Result<i64, Fault> {
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

/// The conditions of a batch object's status: enough to say it finished.
#[derive(Default, Deserialize)]
struct Finishing {
    #[serde(default, deserialize_with = "nullable")]
    conditions: Vec<Condition>,
}

#[derive(Default, Deserialize)]
struct Condition {
    #[serde(default, rename = "type")]
    kind: String,
    #[serde(default)]
    status: String,
    #[serde(default, rename = "lastTransitionTime")]
    last_transition_time: Option<String>,
}

impl Finishing {
    /// Whether a condition among `kinds` is true.
    fn any(&self, kinds: &[&str]) -> bool {
        self.conditions
            .iter()
            .any(|c| c.status == "True" && kinds.contains(&c.kind.as_str()))
    }

    /// The latest transition time of a true condition among `kinds`.
    fn at(&self, kinds: &[&str]) -> Option<i64> {
        self.conditions
            .iter()
            .filter(|c| c.status == "True" && kinds.contains(&c.kind.as_str()))
            .filter_map(|c| c.last_transition_time.as_deref())
            .filter_map(crate::time::parse_rfc3339)
            .max()
    }
}

fn read_job(src: Source<'_>, cfg: &KeyConfig) -> Result<Workload, Fault> {
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

fn read_cronjob(src: Source<'_>, cfg: &KeyConfig) -> Result<Workload, Fault> {
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
fn read_kubeflow(src: Source<'_>, cfg: &KeyConfig) -> Result<Workload, Fault> {
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

fn read_volcano(src: Source<'_>, cfg: &KeyConfig) -> Result<Workload, Fault> {
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
fn read_jobset(src: Source<'_>, cfg: &KeyConfig) -> Result<Workload, Fault> {
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
    check_count("spec.replicas", s.spec.replicas)
        .map_err(|p| AdapterError::Invalid(format!("bizrq: Scale: {p}")))
}

/// What admission needs of a HorizontalPodAutoscaler (v1 or v2).
#[derive(Clone, Debug)]
pub struct Hpa {
    pub meta: ObjectMeta,
    pub target_group: String,
    /// The version of the target's `apiVersion` (`apps/v1` → `v1`).
    pub target_version: String,
    pub target_kind: String,
    pub target_name: String,
    pub max_replicas: i64,
}

pub fn read_hpa(json: &str) -> Result<Hpa, AdapterError> {
    hpa_from(Source::Text(json))
}

/// `read_hpa` of an object a watch has parsed already.
pub fn read_hpa_value(object: &serde_json::Value) -> Result<Hpa, AdapterError> {
    hpa_from(Source::Value(object))
}

fn hpa_from(src: Source<'_>) -> Result<Hpa, AdapterError> {
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
    const KIND: &str = "HorizontalPodAutoscaler";
    let h: H = src.parse().map_err(|message| AdapterError::Parse {
        kind: KIND.into(),
        message,
    })?;
    let target = &h.spec.scale_target_ref;
    check_target(&h.metadata.namespace, &h.metadata.name)
        .and_then(|()| {
            check_names(
                "metadata.namespace",
                &h.metadata.namespace,
                "spec.scaleTargetRef.name",
                &target.name,
            )
        })
        .and_then(|()| check_len("spec.scaleTargetRef.kind", &target.kind, MAX_KIND))
        .and_then(|()| check_count("spec.maxReplicas", h.spec.max_replicas))
        .map_err(|p| AdapterError::Invalid(format!("bizrq: {KIND}: {p}")))?;
    Ok(Hpa {
        target_group: group_of(&h.spec.scale_target_ref.api_version).to_string(),
        target_version: version_of(&h.spec.scale_target_ref.api_version).to_string(),
        target_kind: h.spec.scale_target_ref.kind,
        target_name: h.spec.scale_target_ref.name,
        max_replicas: h.spec.max_replicas,
        meta: h.metadata,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quantity::Quantity;

    #[test]
    fn an_object_of_another_kind_than_the_request_names_is_refused() {
        let job = adapter_for_kind("batch", "Job").unwrap();
        let keys = KeyConfig::default();
        let spec = r#""spec":{"template":{"spec":{"containers":[{"resources":{"requests":{"cpu":"1"}}}]}}}"#;
        let deployment = format!(
            r#"{{"apiVersion":"apps/v1","kind":"Deployment","metadata":{{"name":"web","namespace":"ml"}},{spec}}}"#
        );
        let e = job.read(&deployment, &keys).unwrap_err().to_string();
        assert_eq!(
            e,
            "bizrq: the request is for a Job (batch) but its object says apiVersion \"apps/v1\", \
             kind \"Deployment\": refused, an object is judged only as the kind it is"
        );
        let value: serde_json::Value = serde_json::from_str(&deployment).unwrap();
        assert_eq!(
            job.read_value(&value, &keys).unwrap_err().to_string(),
            e,
            "a parsed object is judged alike"
        );
        // The kind alone, or the group alone, wrong is as wrong.
        for bad in [
            format!(r#"{{"apiVersion":"batch/v1","kind":"CronJob",{spec}}}"#),
            format!(r#"{{"apiVersion":"apps/v1","kind":"Job",{spec}}}"#),
            format!(r#"{{"kind":"Deployment",{spec}}}"#),
        ] {
            assert!(job.read(&bad, &keys).is_err(), "{bad}");
        }
        // Its own kind, any version, or no type at all (a list's items).
        for good in [
            format!(r#"{{"apiVersion":"batch/v1","kind":"Job",{spec}}}"#),
            format!(r#"{{"apiVersion":"batch/v2","kind":"Job",{spec}}}"#),
            format!(r#"{{{spec}}}"#),
        ] {
            assert!(job.read(&good, &keys).is_ok(), "{good}");
        }
    }

    /// A workload asking for more distinct resource names than
    /// `MAX_RESOURCE_NAMES` is refused naming the limit; at the limit it
    /// is read.
    #[test]
    fn a_workload_with_more_resource_names_than_the_limit_is_refused() {
        let job = adapter_for_kind("batch", "Job").unwrap();
        let with = |n: usize| {
            let requests: Vec<String> = (0..n)
                .map(|i| format!(r#""example.com/r{i:05}":"1""#))
                .collect();
            format!(
                r#"{{"metadata":{{"name":"wide","namespace":"ml"}},"spec":{{"template":{{"spec":{{"containers":[{{"resources":{{"requests":{{{}}}}}}}]}}}}}}}}"#,
                requests.join(",")
            )
        };
        let keys = KeyConfig::default();
        let e = job.read(&with(20_000), &keys).unwrap_err().to_string();
        assert!(
            e.contains("different resources; a workload may ask for at most 64"),
            "{e}"
        );
        let fits = job.read(&with(10), &keys).unwrap();
        assert!(fits.usage().len() <= MAX_RESOURCE_NAMES);
    }

    /// The adapters read the declared run time as `runtime::max_runtime`
    /// reads the object, without a second parse; a wrong one is kept as an
    /// error, not refused (only a budget that reserves on it refuses).
    #[test]
    fn adapters_read_the_declared_run_time_as_max_runtime_does() {
        let objects = [
            (
                "batch",
                "Job",
                r#"{"metadata":{"name":"j","namespace":"n","annotations":{"biz.group.resource.quota/max-runtime":"3h"}},"spec":{"activeDeadlineSeconds":7200}}"#,
            ),
            (
                "kubeflow.org",
                "PyTorchJob",
                r#"{"metadata":{"name":"p","namespace":"n"},"spec":{"runPolicy":{"activeDeadlineSeconds":600}}}"#,
            ),
            (
                "apps",
                "Deployment",
                r#"{"metadata":{"name":"d","namespace":"n","annotations":{"biz.group.resource.quota/max-runtime":"1d"}},"spec":{}}"#,
            ),
            (
                "batch",
                "Job",
                r#"{"metadata":{"name":"j","namespace":"n"},"spec":{"activeDeadlineSeconds":null}}"#,
            ),
            (
                "batch",
                "Job",
                r#"{"metadata":{"name":"j","namespace":"n","annotations":{"biz.group.resource.quota/max-runtime":"1.5h"}}}"#,
            ),
            (
                "batch",
                "Job",
                r#"{"metadata":{"name":"j","namespace":"n"},"spec":{"activeDeadlineSeconds":0}}"#,
            ),
        ];
        let mut got = Vec::new();
        for (group, kind, json) in objects {
            let w = read(group, kind, json);
            let value: serde_json::Value = serde_json::from_str(json).unwrap();
            assert_eq!(w.run_time, runtime::max_runtime(&value), "{json}");
            got.push(w.run_time.map(|r| r.map(|r| r.ms)).ok());
        }
        assert_eq!(
            got,
            [
                Some(Some(7_200_000)),
                Some(Some(600_000)),
                Some(Some(86_400_000)),
                Some(None),
                None,
                None
            ]
        );
    }

    #[test]
    fn a_finished_job_says_so() {
        let done = |group, kind, status: &str| {
            let json =
                format!(r#"{{"metadata":{{"name":"j","namespace":"n"}},"status":{status}}}"#);
            read(group, kind, &json).finished
        };
        assert!(done(
            "batch",
            "Job",
            r#"{"conditions":[{"type":"Complete","status":"True"}]}"#
        ));
        assert!(done(
            "batch",
            "Job",
            r#"{"conditions":[{"type":"Failed","status":"True"}]}"#
        ));
        assert!(!done(
            "batch",
            "Job",
            r#"{"conditions":[{"type":"Suspended","status":"True"},{"type":"Complete","status":"False"}]}"#
        ));
        assert!(!done("batch", "Job", "null"));
        assert!(done(
            "kubeflow.org",
            "PyTorchJob",
            r#"{"conditions":[{"type":"Succeeded","status":"True"}]}"#
        ));
        assert!(!done(
            "apps",
            "Deployment",
            r#"{"conditions":[{"type":"Complete","status":"True"}]}"#
        ));
    }

    #[test]
    fn a_finished_job_runs_nothing() {
        let job = |status: &str| {
            format!(
                r#"{{"metadata":{{"name":"j","namespace":"n"}},"spec":{{"parallelism":3,"template":{TPL}}},"status":{status}}}"#
            )
        };
        let running = read("batch", "Job", &job("null"));
        assert_eq!(gpus(&running), Quantity::from_units(6));
        for done in [
            r#"{"conditions":[{"type":"Complete","status":"True","lastTransitionTime":"2026-11-29T11:00:00Z"}]}"#,
            r#"{"conditions":[{"type":"Failed","status":"True","lastTransitionTime":"2026-11-29T11:00:00Z"}]}"#,
        ] {
            let mut w = read("batch", "Job", &job(done));
            assert!(w.finished);
            assert_eq!(
                w.finished_at,
                crate::time::parse_rfc3339("2026-11-29T11:00:00Z")
            );
            // Read as declared: its pods may still run.
            assert_eq!(gpus(&w), Quantity::from_units(6), "{done}");
            let mut created = w.clone();
            w.finish();
            assert_eq!(gpus(&w), Quantity::from_units(0), "{done}");
            assert_eq!(w.pod_sets.len(), 1, "its pod sets kept, at 0 pods");
            // A CREATE's status is the client's: ignored.
            created.ignore_status();
            created.finish();
            assert!(!created.finished);
            assert_eq!(gpus(&created), Quantity::from_units(6), "{done}");
        }
    }

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
        // Held in its queue (annotation and every template gated): it
        // runs nothing, as a suspended Job; counts are checked all the same.
        let gated = r#"{"spec":{"schedulingGates":[{"name":"biz.group.resource.quota/queued"}],"containers":[{"resources":{"limits":{"nvidia.com/gpu":"1"}}}]}}"#;
        let obj = |ann: &str, tpl2: &str, n: i64| {
            format!(
                r#"{{"metadata":{{"annotations":{{{ann}}}}},"spec":{{"tasks":[{{"replicas":{n},"template":{gated}}},{{"replicas":2,"template":{tpl2}}}]}}}}"#
            )
        };
        let held = r#""biz.group.resource.quota/queued":"true""#;
        let w = read("batch.volcano.sh", "Job", &obj(held, gated, 1));
        assert_eq!(gpus(&w), Quantity::ZERO);
        assert_eq!(
            w.pod_sets.iter().map(|s| s.count).collect::<Vec<_>>(),
            [0, 0]
        );
        // Released (annotation gone), or a template left ungated: it runs.
        assert_eq!(
            gpus(&read("batch.volcano.sh", "Job", &obj("", gated, 1))),
            Quantity::from_units(3)
        );
        assert_eq!(
            gpus(&read("batch.volcano.sh", "Job", &obj(held, TPL, 1))),
            Quantity::from_units(5)
        );
        let a = adapter_for_kind("batch.volcano.sh", "Job").unwrap();
        assert!(a
            .read(&obj(held, gated, -1), &KeyConfig::default())
            .is_err());
        assert_eq!(
            a.hold(),
            crate::hold::Hold::PodGate(&["spec", "tasks", "*", "template"])
        );
        assert!(crate::queue::queueable(a));
        // Never suspended by reclaim or preemption: nothing stops its pods.
        assert_eq!(crate::reclaim::Stop::of(a), crate::reclaim::Stop::Never);
    }

    #[test]
    fn jobset_replicated_jobs() {
        let tpl = |p: i64, c: i64| {
            format!(
                r#"{{"spec":{{"parallelism":{p},"completions":{c},"suspend":true,"template":{TPL}}}}}"#
            )
        };
        let obj = |suspend: bool| {
            format!(
                r#"{{"spec":{{"suspend":{suspend},"replicatedJobs":[{{"name":"driver","template":{}}},{{"name":"workers","replicas":3,"template":{}}}]}}}}"#,
                tpl(1, 1),
                tpl(4, 2)
            )
        };
        let w = read("jobset.x-k8s.io", "JobSet", &obj(false));
        // driver: 1 × 1; workers: 3 Jobs × min(4, 2): the templates' own
        // suspend flags are the JobSet controller's, not read.
        assert_eq!(
            w.pod_sets.iter().map(|s| s.count).collect::<Vec<_>>(),
            [1, 6]
        );
        assert_eq!(gpus(&w), Quantity::from_units(14));
        assert_eq!(w.pod_sets[1].name, "workers");
        let s = read("jobset.x-k8s.io", "JobSet", &obj(true));
        assert_eq!(gpus(&s), Quantity::ZERO, "suspended: runs nothing");
        let a = adapter_for_kind("jobset.x-k8s.io", "JobSet").unwrap();
        assert_eq!(a.suspend_path, ["spec", "suspend"]);
        assert!(crate::queue::queueable(a));
        // Hostile counts are refused, suspended or not.
        let keys = KeyConfig::default();
        for bad in [
            r#"{"spec":{"suspend":true,"replicatedJobs":[{"name":"w","replicas":-1}]}}"#,
            r#"{"spec":{"replicatedJobs":[{"name":"w","replicas":100000,"template":{"spec":{"parallelism":100000}}}]}}"#,
        ] {
            let e = a.read(bad, &keys).unwrap_err().to_string();
            assert!(e.contains("replicatedJob"), "{e}");
        }
        // Finished on its condition.
        let done = r#"{"spec":{},"status":{"conditions":[{"type":"Completed","status":"True"}]}}"#;
        assert!(a.read(done, &keys).unwrap().finished);
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
        assert_eq!(h.target_version, "v1", "where a lookup GETs the target");
        assert_eq!((group_of("v1"), version_of("v1")), ("", "v1"));
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

    /// One object of each adapter's kind: `tpl` as its pod template and
    /// `n` as the count its spec holds.
    fn each_kind(tpl: &str, n: &str) -> Vec<(&'static Adapter, String)> {
        let meta = r#""metadata":{"name":"bert","namespace":"ml"}"#;
        ADAPTERS
            .iter()
            .map(|a| {
                let spec = match (a.group, a.kind) {
                    ("batch", "Job") => format!(r#"{{"parallelism":{n},"template":{tpl}}}"#),
                    ("batch", "CronJob") => {
                        format!(r#"{{"jobTemplate":{{"spec":{{"parallelism":{n},"template":{tpl}}}}}}}"#)
                    }
                    ("kubeflow.org", _) => format!(
                        r#"{{"pytorchReplicaSpecs":{{"Worker":{{"replicas":{n},"template":{tpl}}}}}}}"#
                    ),
                    ("batch.volcano.sh", _) => {
                        format!(r#"{{"tasks":[{{"name":"w","replicas":{n},"template":{tpl}}}]}}"#)
                    }
                    ("jobset.x-k8s.io", _) => format!(
                        r#"{{"replicatedJobs":[{{"name":"w","replicas":{n},"template":{{"spec":{{"template":{tpl}}}}}}}]}}"#
                    ),
                    _ => format!(r#"{{"replicas":{n},"template":{tpl}}}"#),
                };
                (a, format!(r#"{{{meta},"spec":{spec}}}"#))
            })
            .collect()
    }

    fn refusal(a: &Adapter, json: &str) -> String {
        match a.read(json, &KeyConfig::default()) {
            Err(AdapterError::Invalid(m)) => m,
            other => panic!("{} {}: {other:?}", a.group, a.kind),
        }
    }

    #[test]
    fn a_negative_request_is_refused_naming_the_container_and_key() {
        let tpl = r#"{"spec":{"containers":[{"name":"worker","resources":{"requests":{"nvidia.com/gpu":"-100"}}}]}}"#;
        for (a, json) in each_kind(tpl, "2") {
            assert_eq!(
                refusal(a, &json),
                format!(
                    "bizrq: container \"worker\" of {} ml/bert: requests nvidia.com/gpu is negative (-100)",
                    a.kind
                )
            );
        }
    }

    #[test]
    fn a_negative_limit_init_container_or_overhead_is_refused() {
        for (tpl, says) in [
            (
                r#"{"spec":{"containers":[{"resources":{"limits":{"cpu":"-1"}}}]}}"#,
                "container #0 of",
            ),
            (
                r#"{"spec":{"containers":[],"initContainers":[{"name":"setup","resources":{"limits":{"memory":"-1Gi"}}}]}}"#,
                "init container \"setup\" of",
            ),
            (
                r#"{"spec":{"containers":[],"overhead":{"cpu":"-250m"}}}"#,
                "pod overhead of",
            ),
        ] {
            for (a, json) in each_kind(tpl, "1") {
                let m = refusal(a, &json);
                assert!(m.contains(says) && m.contains("is negative (-"), "{m}");
            }
        }
    }

    #[test]
    fn a_negative_or_huge_count_is_refused() {
        for n in ["-1", "2147483648"] {
            for (a, json) in each_kind(TPL, n) {
                let m = refusal(a, &json);
                assert!(
                    m.starts_with(&format!("bizrq: {} ml/bert: ", a.kind)),
                    "{m}"
                );
                assert!(m.contains(n), "{m}");
            }
        }
        // Completions too, and a suspended Job's counts all the same.
        let job = adapter_for_kind("batch", "Job").unwrap();
        let m = refusal(
            job,
            &format!(r#"{{"spec":{{"suspend":true,"completions":-3,"template":{TPL}}}}}"#),
        );
        assert!(m.ends_with("spec.completions is negative (-3)"), "{m}");
    }

    #[test]
    fn what_no_quota_could_account_is_refused() {
        // Each amount parses (2^63 - 1 units), but one pod of two such
        // containers, or many pods of one, comes to more.
        let big = r#"{"resources":{"requests":{"cpu":"9223372036854775807"}}}"#;
        let two = format!(r#"{{"spec":{{"containers":[{big},{big}]}}}}"#);
        for (a, json) in each_kind(&two, "1") {
            assert!(refusal(a, &json).contains("one pod comes to"));
        }
        let one = format!(r#"{{"spec":{{"containers":[{big}]}}}}"#);
        for (a, json) in each_kind(&one, "3") {
            assert!(refusal(a, &json).contains("its pods come to"));
        }
    }

    #[test]
    fn names_longer_than_kubernetes_allows_are_refused() {
        let a = adapter_for_kind("apps", "Deployment").unwrap();
        let long = "n".repeat(254);
        let json = format!(r#"{{"metadata":{{"name":"{long}"}},"spec":{{"template":{TPL}}}}}"#);
        assert_eq!(
            refusal(a, &json),
            "bizrq: Deployment: metadata.name is 254 characters long; Kubernetes allows at most 253"
        );
        let json = format!(
            r#"{{"metadata":{{"name":"d","namespace":"{}"}}}}"#,
            "s".repeat(64)
        );
        assert!(refusal(a, &json).contains("metadata.namespace is 64 characters"));
        assert!(a.checked_ref("ml", &long).is_err());
        assert!(a.checked_ref(&"s".repeat(64), "d").is_err());
        assert_eq!(
            a.checked_ref("ml", &"n".repeat(253)).unwrap(),
            a.workload_ref("ml", &"n".repeat(253))
        );
        assert!(WorkloadRef::parse(&a.workload_ref("ml", &long)).is_none());
        assert!(WorkloadRef::parse(&format!("apps/{}/ml/d", "K".repeat(64))).is_none());
        assert!(WorkloadRef::parse("apps/Deployment/ml/d").is_some());
    }

    /// Found by fuzzing (admission_review): a namespace "/nlp" made the
    /// reference "apps/Deployment//nlp/d", which reads back as namespace ""
    /// and name "nlp/d": a charge filed under another workload's name.
    #[test]
    fn a_name_or_namespace_that_would_not_read_back_is_refused() {
        let a = adapter_for_kind("batch.volcano.sh", "Job").unwrap();
        for (ns, name) in [
            ("/nlp", "d"),
            ("nlp", "a/b"),
            ("nlp", "50%"),
            ("Nlp", "d"),
            ("-x", "d"),
            ("nlp", ".."),
        ] {
            let err = a.checked_ref(ns, name).unwrap_err().to_string();
            assert!(err.starts_with("bizrq: Job: "), "{err}");
            let json = format!(r#"{{"metadata":{{"name":"{name}","namespace":"{ns}"}}}}"#);
            assert!(refusal(a, &json).contains("is not a"), "{ns} {name}");
        }
        for (ns, name) in [("nlp", "d"), ("", "d"), ("ml-2", "Train.v1:x")] {
            let wref = a.checked_ref(ns, name).unwrap();
            let back = WorkloadRef::parse(&wref).map(|r| (r.namespace, r.name));
            assert_eq!(back, Some((ns, name)));
        }
    }

    /// Standalone, nothing but bizrq checks a name (issue 29): one the API
    /// server would refuse is refused as it would be, naming the field.
    #[test]
    fn an_object_name_that_is_not_a_dns_subdomain_is_refused() {
        let a = adapter_for_kind("apps", "Deployment").unwrap();
        for bad in [
            "Web", "web_1", "-web", "web-", "we..b", ".web", "web.", "wéb", "a b", "a:b",
        ] {
            let json = format!(
                r#"{{"metadata":{{"name":"{bad}","namespace":"nlp"}},"spec":{{"template":{TPL}}}}}"#
            );
            let err = refusal(a, &json);
            assert!(
                err.contains("metadata.name") && err.contains("is not a DNS-1123 subdomain"),
                "{bad}: {err}"
            );
        }
        for good in ["web", "web-1", "a.b-c.d9", "0", &"n".repeat(253)] {
            let json = format!(
                r#"{{"metadata":{{"name":"{good}","namespace":"nlp"}},"spec":{{"template":{TPL}}}}}"#
            );
            assert!(a.read(&json, &KeyConfig::default()).is_ok(), "{good}");
        }
        // A CREATE whose name the API server is still to generate.
        let json = format!(
            r#"{{"metadata":{{"generateName":"web-","namespace":"nlp"}},"spec":{{"template":{TPL}}}}}"#
        );
        assert!(a.read(&json, &KeyConfig::default()).is_ok());
        assert!(!is_dns_subdomain(&"n".repeat(254)));
    }

    #[test]
    fn a_negative_scale_or_hpa_is_refused() {
        let err = read_scale_replicas(r#"{"spec":{"replicas":-5}}"#).unwrap_err();
        assert_eq!(
            err.to_string(),
            "bizrq: Scale: spec.replicas is negative (-5)"
        );
        let err = read_hpa(
            r#"{"spec":{"scaleTargetRef":{"kind":"Deployment","name":"web"},"maxReplicas":-1}}"#,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "bizrq: HorizontalPodAutoscaler: spec.maxReplicas is negative (-1)"
        );
        let long = "w".repeat(254);
        let hpa = format!(
            r#"{{"spec":{{"scaleTargetRef":{{"kind":"Deployment","name":"{long}"}},"maxReplicas":1}}}}"#
        );
        assert!(read_hpa(&hpa).is_err());
    }

    /// The controller reads what its watches parsed; the webhook reads the
    /// review's text. Both must come to the same workload, or the same
    /// refusal, for every kind: numbers as numbers or strings, nulls,
    /// negative counts, bad quantities.
    #[test]
    fn a_parsed_object_reads_as_its_text() {
        let templates = [
            (TPL, "3"),
            (TPL, "-1"),
            (
                r#"{"spec":{"containers":[{"resources":{"requests":{"cpu":0.5,"nvidia.com/gpu":2}}}]}}"#,
                "2",
            ),
            (
                r#"{"spec":{"containers":[{"resources":{"requests":{"cpu":"lots"}}}]}}"#,
                "1",
            ),
            (r#"{"metadata":null,"spec":null}"#, "null"),
        ];
        for (tpl, n) in templates {
            for (a, json) in each_kind(tpl, n) {
                let value: serde_json::Value = serde_json::from_str(&json).unwrap();
                assert_eq!(
                    format!("{:?}", a.read_value(&value, &KeyConfig::default())),
                    crate::test_util::positionless(format!(
                        "{:?}",
                        a.read(&json, &KeyConfig::default())
                    )),
                    "{json}"
                );
            }
        }
        for json in [
            r#"{"metadata":{"name":"h","namespace":"ml"},"spec":{"scaleTargetRef":{"apiVersion":"apps/v1","kind":"Deployment","name":"web"},"minReplicas":1,"maxReplicas":10}}"#,
            r#"{"spec":{"scaleTargetRef":{"kind":"Deployment","name":"web"},"maxReplicas":-1}}"#,
            r#"{"spec":{}}"#,
        ] {
            let value: serde_json::Value = serde_json::from_str(json).unwrap();
            assert_eq!(
                format!("{:?}", read_hpa_value(&value)),
                crate::test_util::positionless(format!("{:?}", read_hpa(json))),
                "{json}"
            );
        }
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
