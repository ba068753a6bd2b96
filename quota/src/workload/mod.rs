//! Workload adapters: each kind turns its object into pod sets (count × pod
//! template usage), one file per kind. The table `ADAPTERS` is the only
//! place that names kinds; admission and reconcile look adapters up by
//! group/kind, by resource, or by a workload reference (`adapter_of`).

mod cronjob;
mod hpa;
mod job;
mod jobset;
mod kubeflow;
mod model;
mod read;
mod replicated;
pub mod runtime;
mod volcano;

pub use hpa::{read_hpa, read_hpa_value, read_scale_replicas, Hpa};
pub use model::{
    check_target, group_of, is_dns_subdomain, version_of, AdapterError, ChargeMode, PodSet,
    Workload, WorkloadKey, WorkloadRef, MAX_KIND, MAX_NAME, MAX_NAMESPACE, MAX_REPLICAS,
    MAX_RESOURCE_NAMES,
};
pub(crate) use read::Source;

use self::read::{parse, workload, Fault};
use crate::keys::KeyConfig;
use crate::quantity::MAX_NANOS;
use crate::usage::ObjectMeta;
use serde::Deserialize;

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
    pub fn checked_ref(&self, namespace: &str, name: &str) -> Result<WorkloadKey, AdapterError> {
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
    pub fn workload_ref(&self, namespace: &str, name: &str) -> WorkloadKey {
        WorkloadKey::of(self.group, self.kind, namespace, name)
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
        read: replicated::read_replicated,
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
        read: replicated::read_replicated,
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
        read: replicated::read_replicated,
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
        read: replicated::read_replicated,
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
        read: job::read_job,
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
        read: cronjob::read_cronjob,
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
        read: kubeflow::read_kubeflow,
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
        read: kubeflow::read_kubeflow,
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
        read: kubeflow::read_kubeflow,
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
        read: volcano::read_volcano,
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
        read: jobset::read_jobset,
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

impl WorkloadRef<'_> {
    /// The adapter of the kind this reference names.
    pub fn adapter(&self) -> Option<&'static Adapter> {
        adapter_for_kind(self.group, self.kind)
    }
}

/// The adapter of the workload `wref` names (`group/Kind/namespace/name`);
/// None when it is not a workload reference or names no kind bizrq reads.
pub fn adapter_of(wref: &str) -> Option<&'static Adapter> {
    WorkloadRef::parse(wref)?.adapter()
}

#[cfg(test)]
mod tests;
