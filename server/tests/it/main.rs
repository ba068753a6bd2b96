//! Integration tests: one binary, real server processes, real databases.

mod api;
mod common;
mod concurrency;
mod resync;
mod webhook;
