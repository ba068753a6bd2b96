//! What a workload is once read: its pod sets, how admitting it counts,
//! its reference (`group/Kind/namespace/name`), and the bounds Kubernetes
//! puts on the names and counts an object may hold.

use super::runtime::{RunTime, RunTimeError};
use crate::keys::QUOTA_LABEL;
use crate::resources::{self, ResourceList};
use crate::usage::{ObjectMeta, QosClass};
use serde::{Deserialize, Serialize};

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

/// `field` at `n`: refused when negative (it would lower `used`) or beyond
/// any replica count Kubernetes allows.
pub(super) fn check_count(field: &str, n: i64) -> Result<i64, String> {
    if n < 0 {
        Err(format!("{field} is negative ({n})"))
    } else if n > MAX_REPLICAS {
        Err(format!("{field} is {n}; at most {MAX_REPLICAS}"))
    } else {
        Ok(n)
    }
}

pub(super) fn check_len(field: &str, value: &str, max: usize) -> Result<(), String> {
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
pub(super) fn check_names(
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

/// A workload's reference, `group/Kind/namespace/name`: the key of its
/// charge, its queue entry and its ledger entries. Made only by an adapter
/// from an object's namespace and name (`Adapter::workload_ref`,
/// `Adapter::checked_ref`) or parsed from a string, which checks it
/// ([`WorkloadKey::parse`]); stored (in a quota's status, a queue entry, the
/// budget ledger) as that string, which it dereferences to.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WorkloadKey(String);

impl WorkloadKey {
    pub(crate) fn of(group: &str, kind: &str, namespace: &str, name: &str) -> WorkloadKey {
        WorkloadKey(format!("{group}/{kind}/{namespace}/{name}"))
    }

    /// None for a string that is not a workload reference, or whose parts
    /// are longer than Kubernetes allows.
    pub fn parse(wref: &str) -> Option<WorkloadKey> {
        WorkloadRef::parse(wref).map(|_| WorkloadKey(wref.to_string()))
    }

    /// Its group, kind, namespace and name.
    pub fn parts(&self) -> WorkloadRef<'_> {
        let mut parts = self.0.splitn(4, '/');
        let mut next = || parts.next().unwrap_or("");
        WorkloadRef {
            group: next(),
            kind: next(),
            namespace: next(),
            name: next(),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::ops::Deref for WorkloadKey {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for WorkloadKey {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for WorkloadKey {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl From<WorkloadKey> for String {
    fn from(k: WorkloadKey) -> String {
        k.0
    }
}

impl std::fmt::Display for WorkloadKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl PartialEq<str> for WorkloadKey {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for WorkloadKey {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<String> for WorkloadKey {
    fn eq(&self, other: &String) -> bool {
        &self.0 == other
    }
}

/// The parts of a workload reference `group/Kind/namespace/name`, as
/// `Adapter::workload_ref` writes it ([`WorkloadKey::parts`]).
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
