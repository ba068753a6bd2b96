//! What the service tells the world about its decisions: notices (in
//! cluster mode, Kubernetes Events). The service owns the trait; the
//! cluster's publisher (`cluster::events::Events`) implements it and is
//! passed in, so the service never depends on the cluster.

use k8s_openapi::api::core::v1::ObjectReference;

/// One notice on an object: a denial, cash running out, a reclaim mark.
#[derive(Clone, Debug, PartialEq)]
pub struct Notice {
    pub regarding: ObjectReference,
    pub warning: bool,
    pub reason: &'static str,
    pub action: &'static str,
    pub note: String,
}

/// Where notices go. Sending never blocks nor fails the caller.
pub trait Notifier: Send + Sync {
    fn emit(&self, n: Notice);
    /// False when notices go nowhere: callers skip building them.
    fn enabled(&self) -> bool;
}

/// Standalone: no cluster to tell.
pub struct Nowhere;

impl Notifier for Nowhere {
    fn emit(&self, _: Notice) {}

    fn enabled(&self) -> bool {
        false
    }
}
