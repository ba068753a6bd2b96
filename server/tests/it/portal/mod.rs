//! The portal through real server processes on SQLite and PostgreSQL, by
//! subject: the role × route table, accounts (logins, tokens, sessions, the
//! bootstrap admin), quota pages, transfers, alerts and the audit log.
//! Shared here: the organisation most stories start from.

mod accounts;
mod alerts;
mod audit;
mod islands;
mod quotas;
mod table;
mod transfers;
mod transport;

use crate::common::*;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use std::time::Duration;

const ALICE_PW: &str = "alice-password-1234";
const BOB_PW: &str = "bob-password-12345";

fn quota(name: &str, parent: &str, gpu: &str, pods: &str) -> Value {
    json!({"metadata": {"name": name}, "spec": {"parent": parent, "hard": {"requests.nvidia.com/gpu": gpu, "pods": pods}}})
}

fn transfer(from: Option<&str>, to: &str, gpu: &str) -> Value {
    json!({"from": from, "to": to, "amounts": {GPU: gpu}, "reason": "a test"})
}

/// ai (16 GPUs) ─┬─ nlp (8) ── nlp-a (2)
///               └─ cv (4)
/// alice owns nlp, bob is a member of cv; each has a personal token.
struct Org {
    admin: Browser,
    alice: Browser,
    bob: Browser,
    alice_token: String,
    bob_token: String,
}

async fn org(s: &Server) -> Org {
    s.create_quota(
        "ai",
        "",
        json!({"requests.nvidia.com/gpu": "16", "pods": "100"}),
    )
    .await;
    s.create_quota(
        "nlp",
        "ai",
        json!({"requests.nvidia.com/gpu": "8", "pods": "40"}),
    )
    .await;
    s.create_quota(
        "cv",
        "ai",
        json!({"requests.nvidia.com/gpu": "4", "pods": "20"}),
    )
    .await;
    s.create_quota(
        "nlp-a",
        "nlp",
        json!({"requests.nvidia.com/gpu": "2", "pods": "10"}),
    )
    .await;
    let admin = Browser::admin(s).await;
    create_user(&admin, "alice", ALICE_PW).await;
    create_user(&admin, "bob", BOB_PW).await;
    bind(&admin, "alice", "nlp", "owner").await;
    bind(&admin, "bob", "cv", "member").await;
    let alice = Browser::logged_in(s, "alice", ALICE_PW).await;
    let bob = Browser::logged_in(s, "bob", BOB_PW).await;
    let alice_token = create_token(&alice, "alice-ci").await;
    let bob_token = create_token(&bob, "bob-ci").await;
    Org {
        admin,
        alice,
        bob,
        alice_token,
        bob_token,
    }
}
