//! Billing by quality from a real Prometheus (docs/real-usage.md,
//! "Billing by quality"): a price list with `billing: ByQuality` (CPU at
//! weight 2, the default quality weights 1 / 0.85 / 0.5 / 0.1), three
//! Jobs of alice's on `team`'s CPU budget — Burstable (requests 2 cores,
//! limit 4, using 3), Guaranteed (2 cores, using 2), BestEffort (one
//! card, no CPU asked, using half a core) — and their ledger checked to
//! the acc against the formula. Then Prometheus stopped: that stretch is
//! billed on request and marked so; no stretch is billed twice.
//!
//! CPU comes from a gauge of the test's exporter, read with a template
//! that forgets a point after 3 s (`last_over_time`), so a stretch
//! Prometheus did not scrape is unmeasured rather than the last value.

use super::prom::{Exporter, Prom};
use super::{now_ms, reading, until};
use crate::cluster::Cluster;
use crate::fakeapi::FakeApi;
use crate::support::jobs_of;
use bizrq::store::ledger::Selection;
use bizrq::store::sql::SqlStore;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use quota::object::budgets::{Entry, Reason};
use quota::real_usage::billing::{self, ON_REQUEST};
use quota::usage::QosClass;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

const CASH: &str = "cash/requests.cpu";
const NANO: i128 = 1_000_000_000;
/// The CPU weight of the price list, in per mille.
const W: i128 = 2000;

fn job_of(name: &str, resources: Value) -> DynamicObject {
    let mut j = crate::support::job(name).quota("team").named_uid().obj();
    j["spec"]["template"]["spec"]["containers"][0]["resources"] = resources;
    serde_json::from_value(j).unwrap()
}

fn pod_of(name: &str, owner: &str, resources: Value, since: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "uid": format!("pod-{name}"),
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": owner, "uid": format!("uid-{owner}"), "controller": true}]},
        "spec": {"nodeName": "node-1", "containers": [{"name": "c", "resources": resources}]},
        "status": {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": since}]}})
}

async fn entries(store: &SqlStore) -> Vec<Entry> {
    store
        .ledger_entries(
            &Selection {
                from_ms: 0,
                to_ms: i64::MAX,
                quotas: Some(&["team".to_string()]),
                key: Some(CASH),
            },
            1_000_000,
        )
        .await
        .unwrap()
        .unwrap()
}

fn of<'a>(es: &'a [Entry], workload: &str, reason: Reason) -> Vec<&'a Entry> {
    es.iter()
        .filter(|e| e.workload == format!("batch/Job/ml/{workload}") && e.reason == reason)
        .collect()
}

fn span(e: &Entry) -> i128 {
    (e.end_ms - e.start_ms) as i128
}

fn overlaps(a: &Entry, b: &Entry) -> bool {
    a.start_ms < b.end_ms && b.start_ms < a.end_ms
}

/// Billed use of `workload`, each entry exactly `per_ms` acc a
/// millisecond where no marker says part of it went unmeasured; returns
/// how many entries were whole.
fn check_use(es: &[Entry], workload: &str, qos: QosClass, per_ms: i128) -> usize {
    let used = of(es, workload, Reason::Use);
    let (marks, billed): (Vec<&Entry>, Vec<&Entry>) =
        used.into_iter().partition(|e| e.note == ON_REQUEST);
    let mut whole = 0;
    for e in &billed {
        assert_eq!(
            (e.qos, e.user.as_deref()),
            (Some(qos), Some("alice")),
            "{e:?}"
        );
        assert!(e.amount > 0 && e.amount % per_ms == 0, "{e:?}");
        assert!(
            e.amount <= per_ms * span(e),
            "never more than it ran: {e:?}"
        );
        if !marks.iter().any(|m| overlaps(m, e)) {
            assert_eq!(e.amount, per_ms * span(e), "the formula, to the acc: {e:?}");
            whole += 1;
        }
    }
    // No stretch billed twice, nor marked twice.
    for set in [&billed, &marks] {
        for (i, a) in set.iter().enumerate() {
            for b in &set[i + 1..] {
                assert!(!overlaps(a, b), "billed twice: {a:?} and {b:?}");
            }
        }
    }
    whole
}

async fn quota_status(c: &Cluster) -> Value {
    c.fake.quota("team")["status"].clone()
}

async fn billed_by_quality_from_a_real_prometheus(db: &str) {
    let exporter = Exporter::start().await;
    for (pod, cores) in [("burst-0", "3"), ("sure-0", "2"), ("best-0", "0.5")] {
        exporter.add_line(&format!(
            r#"bizrq_test_cpu_cores{{namespace="ml",pod="{pod}"}} {cores}"#
        ));
    }
    let mut prom = Prom::start(exporter.addr.unwrap()).await;
    prom.until_scraped("bizrq_test_cpu_cores").await;
    let dir = tempfile::tempdir().unwrap();
    let url = prom.url();
    let c = Cluster::on_wall_clock_at(FakeApi::new(), dir, db, move |a| {
        reading(url)(a);
        a.prometheus_query_cpu =
            "sum by (namespace, pod) (last_over_time(bizrq_test_cpu_cores[3s]))".into();
    })
    .await;
    let s = &c.server;

    // The price list, through the API server and bizrq's webhook: a
    // wrong billing and weights without ByQuality are refused, naming
    // the field.
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("bizrq.io", "v1", "PriceList"),
        "pricelists",
    );
    let lists: Api<DynamicObject> = Api::all_with(c.kubectl("admin"), &ar);
    let create = |version: Value| {
        let lists = lists.clone();
        async move {
            let o: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "bizrq.io/v1", "kind": "PriceList", "metadata": {"name": "default"},
                "spec": {"versions": [version]}}))
            .unwrap();
            lists
                .create(&PostParams::default(), &o)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        }
    };
    let err = create(json!({"effectiveFrom": "2020-01-01T00:00:00Z", "billing": "ByUse"}))
        .await
        .unwrap_err();
    assert!(
        err.contains("billing 'ByUse' is not ByRequest or ByQuality"),
        "{err}"
    );
    let err = create(json!({"effectiveFrom": "2020-01-01T00:00:00Z",
        "qualityWeights": {"aboveRequest": 0.5}}))
    .await
    .unwrap_err();
    assert!(
        err.contains("qualityWeights are read with billing: ByQuality only"),
        "{err}"
    );
    create(json!({"effectiveFrom": "2020-01-01T00:00:00Z", "billing": "ByQuality",
        "qualityWeights": {"guaranteed": 1, "burstableRequest": 0.85, "aboveRequest": 0.5, "bestEffort": 0.1},
        "weights": {"cpu": {"*": 2}}}))
    .await
    .unwrap();
    let prices = until("the price list followed", 30, async || {
        let (st, v) = s.api(Method::GET, "/api/v1/prices", None).await;
        assert_eq!(st, StatusCode::OK);
        (v["versions"].as_array().map_or(0, Vec::len) == 1).then_some(v)
    })
    .await;
    assert_eq!(prices["versions"][0]["billing"], "ByQuality", "{prices}");

    s.create_quota(
        "team",
        "",
        json!({"requests.cpu": "16", CASH: "1000", "requests.nvidia.com/gpu": "4"}),
    )
    .await;
    c.until("team", "first reconcile", |q| {
        !q["status"]["lastReconcileTime"].is_null()
    })
    .await;
    let burst = json!({"requests": {"cpu": "2"}, "limits": {"cpu": "4"}});
    let sure =
        json!({"requests": {"cpu": "2", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "1Gi"}});
    let best = json!({"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}});
    let jobs = jobs_of(&c, "alice", "ml");
    for (name, r) in [("burst", &burst), ("sure", &sure), ("best", &best)] {
        jobs.create(&PostParams::default(), &job_of(name, r.clone()))
            .await
            .unwrap();
    }
    let since = quota::time::format_rfc3339(now_ms() - 30_000);
    for (name, r) in [("burst", &burst), ("sure", &sure), ("best", &best)] {
        c.fake
            .put(pod_of(&format!("{name}-0"), name, r.clone(), &since));
    }
    c.until_metric("bizrq_controller_tracked{kind=\"pod_runs\"} 3")
        .await;
    let store = SqlStore::connect(db).await.unwrap();

    // Some seconds billed whole.
    until("burst's use billed", 90, async || {
        let es = entries(&store).await;
        let whole = of(&es, "burst", Reason::Use)
            .iter()
            .filter(|e| e.note.is_empty())
            .map(|e| span(e))
            .sum::<i128>();
        (whole >= 8_000).then_some(())
    })
    .await;
    let es = entries(&store).await;
    // Burstable: its 2 cores requested at 0.85, its 1 core above at 0.5,
    // both × the CPU weight 2 — (2 × 0.85 + 1 × 0.5) × 2 = 4.4 core-hours
    // an hour.
    assert!(check_use(&es, "burst", QosClass::Burstable, NANO * W * 500) > 0);
    let accrued = of(&es, "burst", Reason::Accrual);
    assert!(!accrued.is_empty());
    for e in &accrued {
        assert_eq!(e.qos, Some(QosClass::Burstable));
        assert_eq!(e.amount, 2 * NANO * span(e) * W * 850, "{e:?}");
    }
    // Guaranteed: on its request at 1, nothing on use.
    for e in of(&es, "sure", Reason::Accrual) {
        assert_eq!(e.amount, 2 * NANO * span(e) * W * 1000, "{e:?}");
    }
    assert!(of(&es, "sure", Reason::Use).is_empty());
    // BestEffort: half a core at 0.1; its card is not on this budget.
    assert!(check_use(&es, "best", QosClass::BestEffort, NANO / 2 * W * 100) > 0);
    assert!(of(&es, "best", Reason::Accrual).is_empty());

    // Prometheus stopped for a while, then started again: the stretch it
    // did not scrape is billed on request and marked; the rest is billed
    // as before, once.
    prom.stop().await;
    let stopped = now_ms();
    tokio::time::sleep(std::time::Duration::from_secs(8)).await;
    prom.restart().await;
    let restarted = now_ms();
    let es = until("the stretch after the restart billed", 120, async || {
        let es = entries(&store).await;
        let after = of(&es, "burst", Reason::Use)
            .iter()
            .any(|e| e.note.is_empty() && e.start_ms > restarted + 4_000);
        after.then_some(es)
    })
    .await;
    let marks: Vec<&Entry> = of(&es, "burst", Reason::Use)
        .into_iter()
        .filter(|e| e.note == ON_REQUEST)
        .collect();
    assert!(
        marks
            .iter()
            .any(|m| m.start_ms < restarted && m.end_ms > stopped + 3_000),
        "the stretch Prometheus missed is marked billed on request: {marks:?}"
    );
    assert!(marks.iter().all(|m| m.amount == 0));
    check_use(&es, "burst", QosClass::Burstable, NANO * W * 500);
    check_use(&es, "best", QosClass::BestEffort, NANO / 2 * W * 100);
    // The request was billed all along, stretch or not.
    let requested: i128 = of(&es, "burst", Reason::Accrual)
        .iter()
        .map(|e| e.amount)
        .sum();
    assert!(requested > 0);

    // The budget's spending is the ledger's, to the acc (once every
    // write's entries are appended), and a report by quality class adds
    // up to it.
    let (spent, ledger) = until("the ledger caught up with the status", 60, async || {
        let status = quota_status(&c).await;
        let per_mille: i128 = status["cashAccrued"][CASH]
            .as_str()
            .unwrap_or("0")
            .parse()
            .unwrap();
        let sum: i128 = entries(&store).await.iter().map(|e| e.amount).sum();
        (per_mille * 1000 == sum).then_some((per_mille * 1000, sum))
    })
    .await;
    assert_eq!(spent, ledger);
    // A second reader (another replica, a new leader) with a window
    // already billed, through the reader's own compare-and-swap: refused
    // by the quota's mark, nothing added.
    let es = entries(&store).await;
    let first = of(&es, "burst", Reason::Use)
        .into_iter()
        .find(|e| e.note.is_empty())
        .unwrap()
        .clone();
    let again = billing::Bill {
        quota: "team".into(),
        from_ms: first.start_ms,
        to_ms: first.end_ms,
        entries: vec![first],
        on_request: Vec::new(),
    };
    let list = c.running.service.price_list();
    let billed_again = c
        .running
        .service
        .update_status("team", false, |q| {
            let applied = billing::apply(&mut q.status, &q.spec, &again, &list).is_some();
            Ok((applied, applied))
        })
        .await
        .unwrap();
    assert!(!billed_again, "a window is billed once");
    let status = quota_status(&c).await;
    let per_mille: i128 = status["cashAccrued"][CASH]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(per_mille * 1000 >= spent, "nothing taken back either");
    let (st, r) = s
        .api(
            Method::GET,
            &format!(
                "/api/v1/reports?from=2026-01-01&to=2028-01-01&subtree=team&by=quality&key={CASH}"
            ),
            None,
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{r}");
    let rows = r["rows"].as_array().unwrap();
    let group = |g: &str| -> i128 {
        rows.iter()
            .filter(|row| row["group"] == g)
            .map(|row| row["amount"].as_str().unwrap().parse::<i128>().unwrap())
            .sum()
    };
    for g in [
        "Burstable request",
        "Guaranteed request",
        "above request",
        "BestEffort use",
    ] {
        assert!(group(g) > 0, "{g} in {r}");
    }
    let total: i128 = r["total"].as_str().unwrap().parse().unwrap();
    assert_eq!(
        total,
        group("Burstable request")
            + group("Guaranteed request")
            + group("above request")
            + group("BestEffort use"),
        "{r}"
    );
    assert!(total > 0 && total <= spent, "{total} of {spent}: {r}");
    assert!(quota_status(&c).await["qualityBilledTo"].is_string());
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn billed_by_quality_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    billed_by_quality_from_a_real_prometheus(&crate::common::fresh_sqlite(&dir)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn billed_by_quality_on_postgres() {
    billed_by_quality_from_a_real_prometheus(&crate::common::fresh_postgres().await).await;
}
