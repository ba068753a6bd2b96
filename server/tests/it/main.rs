//! Integration tests: one binary, real server processes, real databases.

mod admission;
mod api;
mod bodies;
mod carve_safety;
mod cluster;
mod cluster_errors;
mod common;
mod concurrency;
mod deferred;
mod demo;
mod edges;
mod errors;
mod fakeapi;
mod forged;
mod group_commit;
mod mail;
mod periods;
mod portal;
mod queueing;
mod resync;
mod scenario;
mod security_portal;
mod slowloris;
mod transfers;
mod trust;
mod webhook;
