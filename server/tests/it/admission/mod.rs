//! Cluster mode as kube-apiserver and kubectl see it: every write goes
//! through the emulated API server of `fakeapi`, which calls bizrq's
//! webhooks as the shipped `deploy/base/webhook.yaml` says — bizrq's own
//! quota writes from the JSON API and the portal included. The parent's
//! carve-out is checked after every step: charged once, returned once.
//!
//! Its tests: `quota_writes`, `workload_writes`; the helpers they share
//! are here.

mod quota_writes;
mod workload_writes;

use crate::cluster::{Cluster, T0};
use crate::common::{deployment, hidden_field, Browser, ADMIN_PASSWORD};
use crate::fakeapi::{FakeApi, BIZRQ_USER};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

const GPU: &str = "requests.nvidia.com/gpu";

pub(crate) fn quotas(client: kube::Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("bizrq.io", "v1", "BizGroupResourceQuota");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "bizgroupresourcequotas");
    Api::all_with(client, &ar)
}

pub(crate) fn quota_object(name: &str, parent: &str, gpus: &str) -> DynamicObject {
    serde_json::from_value(
        json!({"apiVersion": "bizrq.io/v1", "kind": "BizGroupResourceQuota",
        "metadata": {"name": name}, "spec": {"parent": parent, "hard": {GPU: gpus}}}),
    )
    .unwrap()
}

/// The code, reason and message of a refused request.
pub(crate) fn refusal<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> (u16, String, String) {
    match r {
        Err(kube::Error::Api(s)) => (s.code, s.reason.clone(), s.message.clone()),
        other => panic!("expected a refusal from the API server, got {other:?}"),
    }
}

/// The parent's carve-out for `child` (None: none) and what its status
/// counts as used, as the API server holds them.
pub(crate) fn carve(c: &Cluster, parent: &str, child: &str) -> (Option<String>, String) {
    let p = c.fake.quota(parent);
    let carved = p["status"]["children"][child]["hard"][GPU]
        .as_str()
        .map(str::to_string);
    let used = p["status"]["used"][GPU].as_str().unwrap_or("0").to_string();
    (carved, used)
}

/// Wait (up to 30 s: the repair is eventual, and a loaded 2-core machine
/// running builds beside the suite has taken over 10) for `parent`'s
/// carve-out of a deleted `child` to be
/// gone and its used to be `used`. The review of a delete frees nothing;
/// the carve-out goes back once the child is seen gone (bizrq's own delete
/// reads it back; anyone's is seen by the controller's quota watch). So a
/// delete settles, where a create or an edit is exact at once.
pub(crate) async fn settles(c: &Cluster, parent: &str, child: &str, used: &str) {
    for _ in 0..600 {
        if carve(c, parent, child) == (None, used.to_string()) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(
        carve(c, parent, child),
        (None, used.to_string()),
        "{}",
        c.fake.quota(parent)["status"]
    );
}

fn own(op: &str) -> (String, String) {
    (op.to_string(), BIZRQ_USER.to_string())
}
