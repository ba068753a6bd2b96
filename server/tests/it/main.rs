//! Integration tests: one binary, real server processes, real databases.

mod api;
mod bodies;
mod cluster;
mod common;
mod concurrency;
mod deferred;
mod demo;
mod fakeapi;
mod forged;
mod mail;
mod portal;
mod resync;
mod scenario;
mod slowloris;
mod transfers;
mod trust;
mod webhook;
