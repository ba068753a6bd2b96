//! Real usage from a real Prometheus (docs/real-usage.md): Debian's
//! `prometheus` scrapes an exporter of the test's own (DCGM- and
//! cAdvisor-shaped series for the fake cluster's pods), and bizrq's
//! controller, on the wall clock, reads it with range queries over HTTP.
//! Then Prometheus stopped and started again, and one that never answers.

mod api;
mod client;
mod idle;
mod prom;
mod quality;

use crate::cluster::{pod, Cluster};
use crate::fakeapi::FakeApi;
use crate::support::{job, jobs_of, metric};
use bizrq::store::real_usage::By;
use bizrq::store::sql::SqlStore;
use kube::api::PostParams;
use prom::{Exporter, Hanging, PodLoad, Prom};
use quota::real_usage::readings::Readings;
use serde_json::json;
use std::time::{Duration, Instant};

/// For each `story(db)` named, a test on a fresh SQLite file and one on a
/// fresh PostgreSQL database.
macro_rules! on_both {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                let dir = tempfile::tempdir().unwrap();
                super::$name(&crate::common::fresh_sqlite(&dir)).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                super::$name(&crate::common::fresh_postgres().await).await;
            }
        }
    )*};
}

// After `on_both`, which it uses.
mod kube_name;

/// bizrq reading `url` every second, one-second steps, two seconds after
/// they end.
pub fn reading(url: String) -> impl FnOnce(&mut bizrq::config::ServeArgs) {
    move |a| {
        a.prometheus_url = Some(url);
        a.prometheus_every_seconds = 1;
        a.prometheus_step_seconds = 1;
        a.prometheus_delay_seconds = 2;
        a.prometheus_rate_range_seconds = 5;
        a.prometheus_timeout_seconds = 2;
        a.prometheus_alert_after_seconds = 3;
    }
}

pub fn load(cards: Vec<u32>, cores: f64) -> PodLoad {
    PodLoad {
        namespace: "ml".into(),
        cards,
        fb_mib: 40_000,
        cores,
        memory_bytes: 8 << 30,
    }
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Quota `team` (16 GPUs); alice's Jobs `train` (2 cards) and `notebook`
/// (1 card) admitted through the API server, their pods running since
/// half a minute ago.
async fn team_with_two_jobs(c: &Cluster) {
    c.server
        .create_quota("team", "", json!({"requests.nvidia.com/gpu": "16"}))
        .await;
    c.until("team", "first reconcile", |q| {
        !q["status"]["lastReconcileTime"].is_null()
    })
    .await;
    let jobs = jobs_of(c, "alice", "ml");
    for (name, cards) in [("train", 2), ("notebook", 1)] {
        let j = job(name).quota("team").cards(cards).named_uid().dynamic();
        jobs.create(&PostParams::default(), &j).await.unwrap();
    }
    let since = quota::time::format_rfc3339(now_ms() - 30_000);
    for (p, owner) in [
        ("train-0", "train"),
        ("train-1", "train"),
        ("notebook-0", "notebook"),
    ] {
        c.fake.put(pod("ml", p, "Job", owner, 1, &since));
    }
    c.until_metric("bizrq_controller_tracked{kind=\"pod_runs\"} 3")
        .await;
}

pub async fn until<T>(what: &str, secs: u64, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(secs) {
        if let Some(v) = f().await {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("{what} never happened in {secs} s");
}

async fn real_usage_is_read_from_a_real_prometheus(db: &str) {
    let exporter = Exporter::start().await;
    exporter.set("train-0", load(vec![90], 2.0));
    exporter.set("train-1", load(vec![70], 2.0));
    exporter.set("notebook-0", load(vec![0], 0.05));
    // A pod bizrq does not account, and values no pod can have: read,
    // checked, dropped and counted.
    exporter.add_line(r#"DCGM_FI_DEV_GPU_UTIL{namespace="ml",pod="stranger",gpu="0"} 100"#);
    exporter.add_line(r#"DCGM_FI_DEV_GPU_UTIL{namespace="ml",pod="broken",gpu="0"} NaN"#);
    exporter.add_line(r#"DCGM_FI_DEV_GPU_UTIL{namespace="ml",pod="negative",gpu="0"} -5"#);
    let prom = Prom::start(exporter.addr.unwrap()).await;
    prom.until_scraped("DCGM_FI_DEV_GPU_UTIL").await;

    let dir = tempfile::tempdir().unwrap();
    let c = Cluster::on_wall_clock_at(FakeApi::new(), dir, db, reading(prom.url())).await;
    team_with_two_jobs(&c).await;
    let store = SqlStore::connect(db).await.unwrap();
    let team = vec!["team".to_string()];
    // Ten seconds of both read.
    let rows = until("ten seconds of train measured", 90, async || {
        let w = store
            .real_usage_by(By::Workload, &team, 0, i64::MAX)
            .await
            .unwrap();
        let train = w.iter().find(|g| g.key == "batch/Job/ml/train")?;
        (train.figures.gpu.measured >= 2 * 10_000).then_some(w)
    })
    .await;
    let train = rows.iter().find(|g| g.key == "batch/Job/ml/train").unwrap();
    let notebook = rows
        .iter()
        .find(|g| g.key == "batch/Job/ml/notebook")
        .expect("the notebook read too");
    // 90 % and 70 %: 80 % when both are measured in a step.
    let eff = train.figures.gpu.efficiency_permille().unwrap();
    assert!((700..=900).contains(&eff), "train at {eff} ‰: {train:?}");
    assert_eq!(train.username, "alice", "the submitter, from the admission");
    assert!(train.figures.gpu.measured <= train.figures.gpu.allocated);
    assert!(train.figures.cpu.used > 0, "cAdvisor's CPU read: {train:?}");
    assert!(train.figures.memory.used > 0, "and its memory: {train:?}");
    assert_eq!(notebook.figures.gpu.busy, 0);
    assert!(notebook.figures.gpu.idle > 0, "{notebook:?}");
    // The notebook is idle now; train is not.
    let idle = store.idle_now(None).await.unwrap();
    assert_eq!(
        idle.iter().map(|i| i.workload.as_str()).collect::<Vec<_>>(),
        ["batch/Job/ml/notebook"]
    );
    assert_eq!(idle[0].user, "alice");
    // bizrq's own metrics say the same, and count what was dropped.
    let s = &c.server;
    assert_eq!(metric(s, "bizrq_real_usage_up ").await, 1.0);
    let busy = metric(
        s,
        "bizrq_gpu_card_seconds_total{quota=\"team\",figure=\"busy\"}",
    )
    .await;
    let measured = metric(
        s,
        "bizrq_gpu_card_seconds_total{quota=\"team\",figure=\"measured\"}",
    )
    .await;
    assert!(busy > 0.0 && busy < measured, "{busy} of {measured}");
    assert!(
        metric(
            s,
            "bizrq_real_usage_rejected_points_total{metric=\"gpu_busy\",reason=\"not_a_number\"}"
        )
        .await
            > 0.0
    );
    assert!(
        metric(
            s,
            "bizrq_real_usage_rejected_points_total{metric=\"gpu_busy\",reason=\"negative\"}"
        )
        .await
            > 0.0
    );
    assert_eq!(
        metric(s, "bizrq_gpu_idle_workloads{quota=\"team\"}").await,
        1.0
    );
    store.close().await;
}

on_both!(real_usage_is_read_from_a_real_prometheus);

/// Prometheus stopped mid-run: readings fail, real usage is unknown since
/// the last window read, admins are told, and admissions and reconciles
/// go on; started again, bizrq reads on from where it stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_stopped_then_started_again_stops_nothing_else() {
    let exporter = Exporter::start().await;
    exporter.set("train-0", load(vec![90], 1.0));
    exporter.set("train-1", load(vec![90], 1.0));
    exporter.set("notebook-0", load(vec![50], 1.0));
    let mut prom = Prom::start(exporter.addr.unwrap()).await;
    prom.until_scraped("DCGM_FI_DEV_GPU_UTIL").await;
    let dir = tempfile::tempdir().unwrap();
    let db = crate::common::fresh_sqlite(&dir);
    let c = Cluster::on_wall_clock_at(FakeApi::new(), dir, &db, reading(prom.url())).await;
    team_with_two_jobs(&c).await;
    let store = SqlStore::connect(&db).await.unwrap();
    let known = until("a first reading", 60, async || {
        store.real_usage_state().await.unwrap().known_to_ms
    })
    .await;

    prom.stop().await;
    let stopped = now_ms();
    let down: Readings = until("readings failing", 60, async || {
        let s = store.real_usage_state().await.unwrap();
        s.down_since_ms.is_some().then_some(s)
    })
    .await;
    assert!(
        down.error
            .as_deref()
            .unwrap()
            .contains("Prometheus did not answer"),
        "{down:?}"
    );
    let since = down.unknown_since(now_ms(), 60_000).expect("unknown now");
    assert!(
        since >= known && since <= stopped,
        "unknown since the last window read"
    );
    assert_eq!(metric(&c.server, "bizrq_real_usage_up ").await, 0.0);
    // Once it has lasted (3 s here), the admins are told.
    let unknown = |open: Vec<bizrq::alerts::Alert>| {
        open.into_iter()
            .filter(|a| a.kind == bizrq::alerts::Kind::RealUsageUnknown)
            .collect::<Vec<_>>()
    };
    let told = until("the admins' alert", 60, async || {
        unknown(store.open_alerts().await.unwrap()).pop()
    })
    .await;
    assert!(
        told.message.starts_with("Real usage unknown since"),
        "{}",
        told.message
    );
    // Nothing else waits: a Job is admitted and charged as usual.
    let started = Instant::now();
    jobs_of(&c, "alice", "ml")
        .create(
            &PostParams::default(),
            &job("more").quota("team").cards(4).dynamic(),
        )
        .await
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    c.until("team", "charged", |q| {
        q["status"]["used"]["requests.nvidia.com/gpu"] == "7"
    })
    .await;

    prom.restart().await;
    let back = until("readings again", 90, async || {
        let s = store.real_usage_state().await.unwrap();
        (s.down_since_ms.is_none() && s.known_to_ms.is_some_and(|k| k > stopped)).then_some(s)
    })
    .await;
    assert_eq!(back.unknown_since(now_ms(), 60_000), None);
    until("the admins' alert resolved", 30, async || {
        unknown(store.open_alerts().await.unwrap())
            .is_empty()
            .then_some(())
    })
    .await;
    assert_eq!(metric(&c.server, "bizrq_real_usage_up ").await, 1.0);
    // The gap was read once Prometheus was back: the window after the
    // last one read before the stop is in (allocated, not measured).
    let rows = store
        .real_usage_by(By::Workload, &["team".to_string()], 0, i64::MAX)
        .await
        .unwrap();
    let train = rows.iter().find(|g| g.key == "batch/Job/ml/train").unwrap();
    assert!(
        train.figures.gpu.allocated > train.figures.gpu.measured,
        "{train:?}"
    );
    store.close().await;
}

/// A Prometheus that never answers: each reading gives up at its timeout,
/// real usage is unknown, and admissions never wait for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prometheus_that_never_answers_is_down_and_nothing_waits_for_it() {
    let hanging = Hanging::start().await;
    let dir = tempfile::tempdir().unwrap();
    let db = crate::common::fresh_sqlite(&dir);
    let c = Cluster::on_wall_clock_at(FakeApi::new(), dir, &db, reading(hanging.url())).await;
    team_with_two_jobs(&c).await;
    let store = SqlStore::connect(&db).await.unwrap();
    let down = until("readings timing out", 60, async || {
        let s = store.real_usage_state().await.unwrap();
        s.down_since_ms.is_some().then_some(s)
    })
    .await;
    assert!(
        down.error.as_deref().unwrap().contains("timed out"),
        "{down:?}"
    );
    assert!(hanging.connections() > 0);
    for i in 0..3 {
        let started = Instant::now();
        jobs_of(&c, "alice", "ml")
            .create(
                &PostParams::default(),
                &job(&format!("more-{i}")).quota("team").cards(1).dynamic(),
            )
            .await
            .unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "an admission waited {:?}",
            started.elapsed()
        );
    }
    assert!(
        metric(
            &c.server,
            "bizrq_real_usage_readings_total{result=\"down\"}"
        )
        .await
            >= 1.0
    );
    assert!(
        metric(
            &c.server,
            "bizrq_real_usage_query_failures_total{metric=\"gpu_busy\",reason=\"down\"}"
        )
        .await
            >= 1.0
    );
    store.close().await;
}
