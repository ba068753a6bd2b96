//! Seed 004 in cluster mode (docs/budgets.md §4, §9): billing by run time
//! with delayed, job-level reclaim — and the work reclaim throws away
//! refunded by the borrower's policy; a Job that runs past the run time it
//! declared is suspended. Through the emulated API server and the shipped
//! webhooks, as kubectl users see it.
//!
//! `user-a` (cpu 6, max 10, 100 core-hours, refund `lastStretch` every
//! 30 min) runs `train` (2 × 2 cores, declared 2 h, priority 100) and
//! `sweep` (2 × 2 cores, declared 10 h, priority 0: it borrows 2 of
//! `user-b`'s idle guarantee). At 10:00 `user-b`'s Job-2 cannot be
//! scheduled: `sweep` is marked, and reclaimed once the grace is over. At
//! 10:50 it is suspended; its checkpoints were at 10:30, so the 20 minutes
//! since are refunded (4 cores × 20 min = 1.33 core-hours), once. At 12:01
//! `train` has run past its declared 2 h and is suspended.
//!
//! Its tests: `billing` (the story above), `once` (a refund made once
//! whatever fails); the helpers they share are here.

mod billing;
mod once;

use crate::cluster::{pod, Cluster, HOUR, T0};
use crate::common::*;
use crate::fakeapi::FakeApi;
use crate::support::{job, metric, until_first_event};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use std::time::Duration;

const KEY: &str = "cash/requests.cpu";
const MIN: i64 = 60_000;

async fn create_job(c: &Cluster, j: &Value) -> Result<(), String> {
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("batch", "v1", "Job"), "jobs");
    let api: Api<DynamicObject> = Api::namespaced_with(
        c.kubectl("alice"),
        j["metadata"]["namespace"].as_str().unwrap(),
        &ar,
    );
    let o: DynamicObject = serde_json::from_value(j.clone()).unwrap();
    match api.create(&PostParams::default(), &o).await {
        Ok(_) => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

fn running(ns: &str, name: &str, owner: &str, cpu: &str, priority: i64) -> Value {
    let mut p = pod(ns, name, "Job", owner, 0, "2026-11-21T10:00:00Z");
    p["spec"]["containers"][0]["resources"] =
        json!({"requests": {"cpu": cpu}, "limits": {"cpu": cpu}});
    p["spec"]["priority"] = json!(priority);
    p
}

fn accrued(q: &Value) -> i128 {
    q["status"]["cashAccrued"][KEY]
        .as_str()
        .unwrap_or("0")
        .parse()
        .unwrap()
}

/// Per mille of a core for `ms`: `status.cashAccrued`'s unit.
fn per_mille(cores: i128, ms: i128) -> i128 {
    cores * 1_000_000_000 * ms * 1000
}

async fn until_suspended(c: &Cluster, ns: &str, name: &str) {
    for _ in 0..400 {
        if c.fake.get("batch", "jobs", ns, name).unwrap()["spec"]["suspend"] == true {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "{ns}/{name} never suspended: {}",
        c.fake.get("batch", "jobs", ns, name).unwrap()
    );
}

const USER_A_STATUS: &str = "/apis/bizrq.io/v1/bizgroupresourcequotas/user-a/status";
const SWEEP: &str = "batch/Job/ns-a/sweep";

/// Seed 004's tree: `pool` (18 cores, 1,000 core-hours) over `user-a` (6,
/// max 10, refunds of the last 30-minute stretch) and `user-b` (12, max 14).
async fn seed_004_quotas(c: &Cluster) {
    let s = &c.server;
    s.create_quota("pool", "", json!({"requests.cpu": "18", KEY: "1000"}))
        .await;
    for (name, hard, max, budgets) in [
        (
            "user-a",
            "6",
            "10",
            json!({KEY: {"refund": {"kind": "lastStretch", "checkpointEverySeconds": 1800}}}),
        ),
        ("user-b", "12", "14", json!({})),
    ] {
        let (st, v) = s
            .api(
                Method::POST,
                "/api/v1/quotas",
                Some(
                    json!({"metadata": {"name": name}, "spec": {"parent": "pool",
                    "hard": {"requests.cpu": hard, KEY: "100"}, "max": {"requests.cpu": max},
                    "budgets": budgets}}),
                ),
            )
            .await;
        assert_eq!(st, StatusCode::CREATED, "{v}");
    }
}
