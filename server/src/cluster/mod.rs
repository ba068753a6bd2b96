//! Cluster mode: the quota objects as a Kubernetes custom resource, the
//! reconcile controller, leader election and Kubernetes Events.

pub mod controller;
pub mod crd;
pub mod events;
pub mod leader;
pub mod mark_keys;
pub mod prices;
pub mod priority;
pub mod store;
pub mod view;
