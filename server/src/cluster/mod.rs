//! Cluster mode: the quota objects as a Kubernetes custom resource.

pub mod crd;
pub mod store;
