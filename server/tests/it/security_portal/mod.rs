//! The portal's edges under hostile input, through real server processes,
//! by subject: logins (a flood, per-address limits, length caps), accounts
//! (sessions that end for good, passwords, redirects after login), roles
//! (co-owners, quotas deleted and made again), and what requests may carry
//! (transfer request caps, headers, escaping, control characters, 413).

mod accounts;
mod logins;
mod requests;
mod roles;

use crate::common::*;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const ALICE_PW: &str = "alice-password-1234";
const CAROL_PW: &str = "carol-password-1234";

/// ai (16) ─┬─ nlp (8) ── nlp-a (2)
///          └─ cv (4)
async fn tree(s: &Server) {
    for (name, parent, gpu) in [
        ("ai", "", "16"),
        ("nlp", "ai", "8"),
        ("cv", "ai", "4"),
        ("nlp-a", "nlp", "2"),
    ] {
        s.create_quota(name, parent, json!({ GPU: gpu })).await;
    }
}
