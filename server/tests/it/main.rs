//! Integration tests: one binary, real server processes, real databases.

mod api;
mod cluster;
mod common;
mod concurrency;
mod demo;
mod fakeapi;
mod mail;
mod portal;
mod resync;
mod scenario;
mod security_portal;
mod transfers;
mod webhook;
