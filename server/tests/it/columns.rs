//! `kubectl get bizrq`'s columns say what the API and the portal say.
//!
//! In cluster mode, through the fake API server: the printer columns are
//! taken from the generated CRD and resolved on the objects as stored,
//! at a leaf, at a parent and at a root, and compared with the usage and
//! budgets APIs (in use: the subtree's running use, never a parent's
//! carve-outs; card-hours left: `periods::left`, its top-ups in). A
//! child's charge writes only the child: the controller restates the
//! parents' columns, fewer times than the children were charged
//! (docs/portal.md, "One truth on every screen").

use crate::cluster::{pod, replicaset, used, Cluster, HOUR, T0};
use crate::common::deployment;
use crate::support::Review;
use reqwest::Method;
use serde_json::{json, Value};

const GPU: &str = "requests.nvidia.com/gpu";
const CASH: &str = "cash/requests.nvidia.com/gpu";

/// The printer columns of the generated CRD, by name: their JSONPaths.
fn column_paths() -> Vec<(String, String)> {
    use kube::CustomResourceExt;
    let crd = bizrq::cluster::crd::BizGroupResourceQuota::crd();
    crd.spec.versions[0]
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| (c.name.clone(), c.json_path.clone()))
        .collect()
}

/// A column's JSONPath (`.status.summary.gpu`: the simple dotted paths
/// these columns use; anything else fails the test) resolved on `obj`,
/// as kubectl prints it ("" when absent, as `<none>`).
fn column(obj: &Value, name: &str) -> String {
    let (_, path) = column_paths()
        .into_iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no printer column {name}"));
    let rest = path
        .strip_prefix('.')
        .unwrap_or_else(|| panic!("{name}: {path} is not a dotted path"));
    let mut at = obj;
    for part in rest.split('.') {
        assert!(
            !part.is_empty() && part.chars().all(|c| c.is_ascii_alphanumeric()),
            "{name}: {path} is not a simple dotted path"
        );
        at = &at[part];
    }
    match at {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        v => v.to_string(),
    }
}

fn q(s: &str) -> quota::Quantity {
    s.parse()
        .unwrap_or_else(|e| panic!("{s:?} is not a quantity: {e}"))
}

/// The GPU and card-hours columns as the usage and budgets APIs give
/// them: the subtree's GPUs in use over hard, and the budget's left for
/// its own work (never below 0), rounded as the columns round.
async fn from_the_api(c: &Cluster, name: &str) -> (String, String) {
    let (st, usage) = c
        .server
        .api(Method::GET, &format!("/api/v1/quotas/{name}/usage"), None)
        .await;
    assert_eq!(st, reqwest::StatusCode::OK, "{usage}");
    let key = usage["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["key"] == GPU)
        .unwrap_or_else(|| panic!("{name}: no {GPU} in {usage}"));
    let gpu = format!(
        "{}/{}",
        quota::readable::decimal(q(key["inUse"].as_str().unwrap())),
        quota::readable::decimal(q(key["hard"].as_str().unwrap()))
    );
    let (st, budgets) = c
        .server
        .api(Method::GET, &format!("/api/v1/quotas/{name}/budgets"), None)
        .await;
    assert_eq!(st, reqwest::StatusCode::OK, "{budgets}");
    let b = budgets["budgets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["key"] == CASH)
        .unwrap_or_else(|| panic!("{name}: no {CASH} in {budgets}"));
    let left = q(b["left"].as_str().unwrap()).max(quota::Quantity::ZERO);
    (gpu, quota::readable::decimal(left))
}

/// Waits until the columns of `name` as stored are the API's, and
/// returns them.
async fn columns_agree(c: &Cluster, name: &str) -> (String, String) {
    let mut last = (String::new(), String::new(), String::new(), String::new());
    for _ in 0..400 {
        let obj = c.fake.quota(name);
        let shown = (column(&obj, "GPU"), column(&obj, "Card-hours Left"));
        let api = from_the_api(c, name).await;
        if shown == api {
            return shown;
        }
        last = (shown.0, shown.1, api.0, api.1);
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!(
        "{name}: kubectl's GPU and Card-hours Left never said what the API says \
         (columns {:?}, API {:?}): {}",
        (&last.0, &last.1),
        (&last.2, &last.3),
        c.fake.quota(name)
    );
}

/// A Deployment admitted through the webhook, then stored (so the
/// controller sees it and keeps its charge past the reservation).
async fn admit(c: &Cluster, uid: &str, workload: &str, quota: &str, gpus: i64) {
    let d = deployment(workload, quota, 1, gpus);
    let r = c
        .server
        .review("/validate/workloads", &Review::create(uid, d.clone()).obj())
        .await;
    assert_eq!(r["allowed"], true, "{workload} in {quota}: {r}");
    c.fake.put(d);
}

async fn top_up(c: &Cluster, to: &str, amount: &str) {
    let (st, v) = c
        .server
        .api(
            Method::POST,
            "/api/v1/transfers",
            Some(json!({"kind": "topUp", "to": to, "amounts": {CASH: amount},
                        "source": "grant", "reason": "a deadline"})),
        )
        .await;
    assert_eq!(st, reqwest::StatusCode::CREATED, "{v}");
    let id = v["id"].as_i64().unwrap();
    let (st, v) = c
        .server
        .api(
            Method::POST,
            &format!("/api/v1/transfers/{id}/approve"),
            None,
        )
        .await;
    assert_eq!(st, reqwest::StatusCode::OK, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_columns_are_the_apis_figures_at_leaves_and_parents() {
    let c = Cluster::start_configured(|a| a.summary_seconds = 3).await;
    let s = &c.server;
    s.create_quota("org", "", json!({GPU: "32", CASH: "1000"}))
        .await;
    s.create_quota("research", "org", json!({GPU: "24", CASH: "600"}))
        .await;
    s.create_quota("nlp", "research", json!({GPU: "8", CASH: "100"}))
        .await;
    s.create_quota("cv", "research", json!({GPU: "8", CASH: "100"}))
        .await;
    c.until("nlp", "first reconcile", |q| {
        !q["status"]["lastReconcileTime"].is_null()
    })
    .await;

    // Work in both teams and at the department itself; top-ups on a
    // team and on the department.
    admit(&c, "u-1", "train", "nlp", 2).await;
    admit(&c, "u-2", "vision", "cv", 1).await;
    admit(&c, "u-3", "own", "research", 1).await;
    top_up(&c, "nlp", "50").await;
    top_up(&c, "research", "20").await;

    // nlp's work runs an hour: 2 card-hours spent.
    c.fake.put(replicaset("nlp", "train"));
    c.fake.put(pod(
        "nlp",
        "train-1",
        "ReplicaSet",
        "train-7d9f",
        2,
        "2026-11-21T10:00:00Z",
    ));
    c.until_metric("bizrq_controller_tracked{kind=\"pod_runs\"} 1")
        .await;
    c.until("nlp", "window opened", |q| {
        q["status"]["lastReconcileTime"] == "2026-11-21T10:00:00.000Z"
    })
    .await;
    c.set_clock(T0 + HOUR);
    c.fake.remove("", "pods", "nlp", "train-1");
    c.until("nlp", "1 h accrued", |q| {
        q["status"]["lastReconcileTime"] == "2026-11-21T11:00:00.000Z"
    })
    .await;

    // A leaf: its own use, and 100 + 50 − 2 left.
    assert_eq!(
        columns_agree(&c, "nlp").await,
        ("2/8".to_string(), "148".to_string())
    );
    assert_eq!(
        columns_agree(&c, "cv").await,
        ("1/8".to_string(), "100".to_string())
    );
    // The department: 2 + 1 below it and 1 of its own run, where its
    // status.used holds its children's 16 carved out as well; 600 + 20
    // less the 200 its children hold.
    let research = c.fake.quota("research");
    assert_eq!(used(&research, GPU), "17", "carve-outs + own: {research}");
    assert_eq!(
        columns_agree(&c, "research").await,
        ("4/24".to_string(), "420".to_string())
    );
    // The root: everything runs below it; its status.used is research's 24.
    assert_eq!(
        columns_agree(&c, "org").await,
        ("4/32".to_string(), "400".to_string())
    );

    // Charges in cv write cv only: the parents' columns follow, restated
    // by the controller at most once per period (3 s here), not once
    // per charge.
    let status_writes = |name: &str| {
        let path = format!("PATCH /apis/bizrq.io/v1/bizgroupresourcequotas/{name}/status");
        c.fake
            .requests()
            .iter()
            .filter(|r| r.starts_with(&path))
            .count()
    };
    let (research_before, org_before) = (status_writes("research"), status_writes("org"));
    for i in 0..6 {
        admit(&c, &format!("u-b{i}"), &format!("burst-{i}"), "cv", 1).await;
    }
    assert_eq!(
        columns_agree(&c, "cv").await,
        ("7/8".to_string(), "100".to_string())
    );
    assert_eq!(columns_agree(&c, "research").await.0, "10/24");
    assert_eq!(columns_agree(&c, "org").await.0, "10/32");
    let research_writes = status_writes("research") - research_before;
    let org_writes = status_writes("org") - org_before;
    assert!(
        (1..6).contains(&research_writes) && (1..6).contains(&org_writes),
        "6 charges below: research written {research_writes} times, org {org_writes}"
    );
    let restated = || async {
        let (_, metrics) = s.get_text("/metrics").await;
        metrics
            .lines()
            .find_map(|l| l.strip_prefix("bizrq_summaries_restated_total "))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    assert!(restated().await >= 2);

    // Once the figures agree, the writes stop: two more periods restate
    // nothing and patch neither parent (no write whose text is the same),
    // also after org's stored status gains, by hand, a readable balance
    // bizrq does not derive (only the columns' text is judged).
    let mut org = c.fake.quota("org");
    org["status"]["readable"]["cash/example.com/left-behind"] = json!("1 hour");
    c.fake.put(org);
    tokio::time::sleep(std::time::Duration::from_secs(7)).await;
    let settled = (
        restated().await,
        status_writes("research"),
        status_writes("org"),
    );
    tokio::time::sleep(std::time::Duration::from_secs(7)).await;
    assert_eq!(
        (
            restated().await,
            status_writes("research"),
            status_writes("org")
        ),
        settled,
        "(restatements, research's status writes, org's) went on after the figures converged"
    );
}
