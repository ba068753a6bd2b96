//! Cluster mode end to end, in process: the real server (HTTPS webhook,
//! JSON API, controller under leader election) over `kube::Client` talking
//! to the in-memory API server of `fakeapi`, which sends every write the
//! shipped `deploy/base/webhook.yaml` matches — bizrq's own included — to
//! that webhook, over TLS verified against the test's CA. A controlled
//! clock drives accrual and reservation expiry.

use crate::common::{deployment, review, test_clock, Server};
use crate::fakeapi::{FakeApi, PYTORCHJOB};
use reqwest::Method;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub const T0: i64 = 1_795_255_200_000; // 2026-11-21T10:00:00Z
pub const HOUR: i64 = 3_600_000;

pub struct Cluster {
    pub fake: FakeApi,
    pub server: Server,
    pub clock: Arc<AtomicI64>,
    pub running: bizrq::Running,
    pub _dir: tempfile::TempDir,
}

impl Cluster {
    pub async fn start() -> Cluster {
        Cluster::start_on(FakeApi::new(), tempfile::tempdir().unwrap(), T0).await
    }

    /// `start`, its arguments changed by `configure` after the harness
    /// set them.
    pub async fn start_configured(
        configure: impl FnOnce(&mut bizrq::config::ServeArgs),
    ) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let db = crate::common::fresh_sqlite(&dir);
        Cluster::replica_configured(FakeApi::new(), dir, T0, "bizrq-0", true, &db, configure).await
    }

    /// A replica over `fake`, its SQL database in `dir`, its clock at `at`.
    pub async fn start_on(fake: FakeApi, dir: tempfile::TempDir, at: i64) -> Cluster {
        Cluster::replica(fake, dir, at, "bizrq-0", true).await
    }

    /// A replica named `pod` over `fake`; with `serving`, the webhook
    /// Service of the shipped configuration routes to it.
    pub async fn replica(
        fake: FakeApi,
        dir: tempfile::TempDir,
        at: i64,
        pod: &str,
        serving: bool,
    ) -> Cluster {
        let db = crate::common::fresh_sqlite(&dir);
        Cluster::replica_on(fake, dir, at, pod, serving, &db).await
    }

    /// A replica as `replica`, its SQL database at `db` (one PostgreSQL
    /// database may be shared by replicas, as pods share it).
    pub async fn replica_on(
        fake: FakeApi,
        dir: tempfile::TempDir,
        at: i64,
        pod: &str,
        serving: bool,
        db: &str,
    ) -> Cluster {
        Cluster::replica_configured(fake, dir, at, pod, serving, db, |_| {}).await
    }

    /// A replica as `replica_on`, its arguments changed by `configure`
    /// after the harness set them.
    pub async fn replica_configured(
        fake: FakeApi,
        dir: tempfile::TempDir,
        at: i64,
        pod: &str,
        serving: bool,
        db: &str,
        configure: impl FnOnce(&mut bizrq::config::ServeArgs),
    ) -> Cluster {
        let (clock, c) = test_clock(at);
        Cluster::launch(fake, dir, Some((clock, c)), pod, serving, db, configure).await
    }

    /// One serving replica over `fake` on the wall clock, as in a cluster
    /// (a benchmark's: time passes by itself, `set_clock` does nothing),
    /// its arguments changed by `configure` after the harness set them.
    #[allow(dead_code)] // for benches/kueue.rs
    pub async fn on_wall_clock(
        fake: FakeApi,
        dir: tempfile::TempDir,
        configure: impl FnOnce(&mut bizrq::config::ServeArgs),
    ) -> Cluster {
        let db = crate::common::fresh_sqlite(&dir);
        Cluster::launch(fake, dir, None, "bizrq-0", true, &db, configure).await
    }

    /// One serving replica over `fake` on the wall clock, its SQL
    /// database at `db`, its arguments changed by `configure`.
    #[allow(dead_code)] // for benches/kueue.rs
    pub async fn on_wall_clock_at(
        fake: FakeApi,
        dir: tempfile::TempDir,
        db: &str,
        configure: impl FnOnce(&mut bizrq::config::ServeArgs),
    ) -> Cluster {
        Cluster::launch(fake, dir, None, "bizrq-0", true, db, configure).await
    }

    /// A replica on the test clock given (None: the wall clock).
    async fn launch(
        fake: FakeApi,
        dir: tempfile::TempDir,
        test_clock: Option<(Arc<AtomicI64>, bizrq::service::Clock)>,
        pod: &str,
        serving: bool,
        db: &str,
        configure: impl FnOnce(&mut bizrq::config::ServeArgs),
    ) -> Cluster {
        if std::env::var_os("BIZRQ_LOG").is_some() {
            bizrq::config::init_tracing(bizrq::config::LogFormat::Text);
        }
        let mut args = bizrq::config::ServeArgs::for_tests(db);
        let ca = webhook_certificate(dir.path());
        args.tls_cert = Some(dir.path().join("tls.crt"));
        args.tls_key = Some(dir.path().join("tls.key"));
        args.pod_name = Some(pod.into());
        args.admin_password = Some(crate::common::ADMIN_PASSWORD.into());
        args.discovery_seconds = 1;
        args.resync_seconds = 3600;
        // Every cluster test with queue marks on (docs/queueing.md §12).
        if marks_on() {
            args.queue_mark_key_file = Some(mark_key_file(dir.path()));
        }
        configure(&mut args);
        let (clock, c) = match test_clock {
            Some((clock, c)) => (clock, Some(c)),
            None => (Arc::default(), None),
        };
        let running = bizrq::start_with(&args, Some(fake.client()), c)
            .await
            .expect("server starts in cluster mode");
        if serving {
            fake.admit_with(&shipped_webhooks(), &ca, running.webhook_addr);
            fake.admit_with(&shipped_mutating_webhooks(), &ca, running.webhook_addr);
        }
        let server = Server::in_process(&running);
        Cluster {
            fake,
            server,
            clock,
            running,
            _dir: dir,
        }
    }

    /// Route the webhook Service of the shipped configuration to this
    /// replica (the other replica stops serving, or is not ready).
    pub fn serve_webhooks(&self) {
        let ca = std::fs::read_to_string(self.ca_path()).unwrap();
        self.fake
            .admit_with(&shipped_webhooks(), &ca, self.running.webhook_addr);
        self.fake
            .admit_with(&shipped_mutating_webhooks(), &ca, self.running.webhook_addr);
    }

    /// The CA that signed this replica's webhook certificate.
    pub fn ca_path(&self) -> std::path::PathBuf {
        self._dir.path().join("ca.crt")
    }

    /// A person's kubectl against this cluster.
    pub fn kubectl(&self, user: &str) -> kube::Client {
        self.fake.client_as(user)
    }

    /// A change to `quota` that means nothing (a label, `touched: n`), so
    /// the controller reconciles it now at the clock's time (a mark falling
    /// due or a window ending is a time, not an event; in a cluster the
    /// reconcile asks to run again then, here the test clock jumps).
    pub fn touch(&self, quota: &str, n: i64) {
        let mut q = self.fake.quota(quota);
        q["metadata"]["labels"] = serde_json::json!({"touched": n.to_string()});
        self.fake.put(q);
    }

    /// The quota `team` (16 cards, a budget of 1,000 card-hours) created
    /// through the JSON API and reconciled once, with the controller
    /// watching Jobs: alice's Jobs in namespace `ml`, ready to create.
    pub async fn cash_team_watching_jobs(&self) -> kube::Api<kube::api::DynamicObject> {
        self.server
            .create_quota(
                "team",
                "",
                json!({"requests.nvidia.com/gpu": "16", "cash/requests.nvidia.com/gpu": "1000"}),
            )
            .await;
        self.until("team", "first reconcile", |q| {
            !q["status"]["lastReconcileTime"].is_null()
        })
        .await;
        self.until_requested("job watch", |r| {
            r.starts_with("GET /apis/batch/v1/jobs?") && r.contains("watch=true")
        })
        .await;
        use kube::api::{ApiResource, GroupVersionKind};
        let jr =
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("batch", "v1", "Job"), "jobs");
        kube::Api::namespaced_with(self.kubectl("alice"), "ml", &jr)
    }

    pub fn set_clock(&self, ms: i64) {
        self.clock.store(ms, Ordering::SeqCst);
    }

    /// Wait (up to 40 s: a 2-core machine running builds beside the suite
    /// has taken over 20 for a watch event to reach a reconcile) until `f`
    /// holds of the quota as the API server has it.
    pub async fn until(&self, quota: &str, what: &str, f: impl Fn(&Value) -> bool) -> Value {
        for _ in 0..800 {
            if let Some(q) = self
                .fake
                .get("bizrq.io", "bizgroupresourcequotas", "", quota)
            {
                if f(&q) {
                    return q;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "{quota}: {what} never happened; last: {}",
            self.fake
                .get("bizrq.io", "bizgroupresourcequotas", "", quota)
                .unwrap_or_default()
        );
    }

    /// Wait (as `until`) until `quota` shows `wref` charged by a queue
    /// round (its charge's uid `queue:<object uid>`).
    pub async fn until_round_charged(&self, quota: &str, wref: &str, what: &str) -> Value {
        self.until(quota, what, |q| {
            q["status"]["workloads"][wref]["uid"]
                .as_str()
                .is_some_and(|u| u.starts_with("queue:"))
        })
        .await
    }

    /// The stored Job `ml/name` once it is no longer suspended, or as it
    /// is after 5 s (the caller asserts what it needs).
    pub async fn until_job_released(&self, name: &str) -> Value {
        let mut stored = Value::Null;
        for _ in 0..100 {
            stored = self
                .fake
                .get("batch", "jobs", "ml", name)
                .unwrap_or_default();
            if stored["spec"]["suspend"] != true {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        stored
    }

    /// Wait until a line of `/metrics` starts with `line`.
    pub async fn until_metric(&self, line: &str) {
        for _ in 0..400 {
            let (_, text) = self.server.get_text("/metrics").await;
            if text.lines().any(|l| l.starts_with(line)) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let (_, text) = self.server.get_text("/metrics").await;
        panic!("metric never showed {line:?}:\n{text}");
    }

    pub async fn until_requested(&self, what: &str, f: impl Fn(&str) -> bool) {
        for _ in 0..400 {
            if self.fake.requests().iter().any(|r| f(r)) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("never requested: {what}\n{:#?}", self.fake.requests());
    }
}

/// The ValidatingWebhookConfiguration bizrq ships.
pub fn shipped_webhooks() -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/base/webhook.yaml");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The shipped MutatingWebhookConfiguration (queued admission).
pub fn shipped_mutating_webhooks() -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/base/mutating-webhook.yaml");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A CA (`ca.crt`, returned) and the webhook's certificate for the Service
/// name the API server calls (`tls.crt`, `tls.key`), written into `dir`.
pub fn webhook_certificate(dir: &std::path::Path) -> String {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["bizrq.bizrq-system.svc".to_string()])
        .unwrap()
        .signed_by(&key, &ca, &ca_key)
        .unwrap();
    std::fs::write(dir.join("ca.crt"), ca.pem()).unwrap();
    std::fs::write(dir.join("tls.crt"), cert.pem()).unwrap();
    std::fs::write(dir.join("tls.key"), key.serialize_pem()).unwrap();
    ca.pem()
}

/// Whether the cluster tests run with queue marks on
/// (`BIZRQ_TEST_QUEUE_MARKS`, docs/queueing.md §12): a create that must
/// wait is then in the quota's status only after a round folds it.
pub fn marks_on() -> bool {
    std::env::var_os("BIZRQ_TEST_QUEUE_MARKS").is_some()
}

pub fn used<'a>(q: &'a Value, key: &str) -> &'a str {
    q["status"]["used"][key].as_str().unwrap_or("0")
}

/// A ReplicaSet of `deployment` and its pods, scheduled at `at`.
pub fn replicaset(ns: &str, deployment: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": format!("{deployment}-7d9f"), "namespace": ns,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": deployment, "uid": "x", "controller": true}]},
        "spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "c"}]}}}})
}

pub fn pod(
    ns: &str,
    name: &str,
    owner_kind: &str,
    owner: &str,
    gpus: i64,
    scheduled: &str,
) -> Value {
    let api = if owner_kind == "Job" {
        "batch/v1"
    } else {
        "apps/v1"
    };
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "uid": format!("pod-{name}"),
            "ownerReferences": [{"apiVersion": api, "kind": owner_kind, "name": owner, "uid": "y", "controller": true}]},
        "spec": {"nodeName": "gpu-1", "containers": [{"name": "c", "resources": {
            "requests": {"nvidia.com/gpu": gpus.to_string(), "cpu": "1"},
            "limits": {"nvidia.com/gpu": gpus.to_string(), "cpu": "1"}}}]},
        "status": {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": scheduled}]}})
}

const STATUS_PATH: &str = "/apis/bizrq.io/v1/bizgroupresourcequotas/nlp-team/status";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_keeps_status_true_over_the_api_boundary() {
    let c = Cluster::start().await;
    let s = &c.server;
    // Quotas through the JSON API: in cluster mode they are CRD objects.
    s.create_quota(
        "ai-platform",
        "",
        json!({"requests.nvidia.com/gpu": "16", "cash/requests.nvidia.com/gpu": "100"}),
    )
    .await;
    s.create_quota(
        "nlp-team",
        "ai-platform",
        json!({"requests.nvidia.com/gpu": "8", "cash/requests.nvidia.com/gpu": "50"}),
    )
    .await;
    let root = c.fake.quota("ai-platform");
    assert_eq!(
        used(&root, "requests.nvidia.com/gpu"),
        "8",
        "carved: {root}"
    );

    // The controller runs once this replica holds the Lease.
    c.until_requested("lease create", |r| {
        r.starts_with("POST /apis/coordination.k8s.io/v1/namespaces/bizrq-system/leases")
    })
    .await;
    let lease = c
        .fake
        .get(
            "coordination.k8s.io",
            "leases",
            "bizrq-system",
            "bizrq-controller",
        )
        .unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], "bizrq-0");
    // It watches what the cluster serves, and nothing it does not.
    for path in [
        "/api/v1/pods",
        "/apis/apps/v1/deployments",
        "/apis/batch/v1/jobs",
        "/apis/autoscaling/v2/horizontalpodautoscalers",
        "/apis/bizrq.io/v1/bizgroupresourcequotas",
    ] {
        c.until_requested(path, |r| {
            r.starts_with(&format!("GET {path}?")) && r.contains("watch=true")
        })
        .await;
    }
    assert!(
        !c.fake
            .requests()
            .iter()
            .any(|r| r.contains("/apis/kubeflow.org/")),
        "no calls for a kind whose CRD is missing"
    );

    // Admission: 2 replicas × 2 GPUs.
    let d = deployment("train", "nlp-team", 2, 2);
    let r = s
        .review(
            "/validate/workloads",
            &review("deployment-create.json", "u-1", Some(d.clone()), None),
        )
        .await;
    assert_eq!(r["allowed"], true, "{r}");
    c.until("nlp-team", "charged", |q| {
        used(q, "requests.nvidia.com/gpu") == "4"
    })
    .await;

    // The API server stores it; its ReplicaSet and pods start at T0.
    c.fake.put(d);
    c.fake.put(replicaset("nlp", "train"));
    c.fake.put(pod(
        "nlp",
        "train-1",
        "ReplicaSet",
        "train-7d9f",
        2,
        "2026-11-21T10:00:00Z",
    ));
    c.fake.put(pod(
        "nlp",
        "train-2",
        "ReplicaSet",
        "train-7d9f",
        2,
        "2026-11-21T10:00:00Z",
    ));
    // The controller has seen both pods run (its watches are live streams,
    // so the test waits for them before moving the clock).
    c.until_metric("bizrq_controller_tracked{kind=\"pod_runs\"} 2")
        .await;
    // The first reconcile opens the accrual window; the fresh admission
    // is kept as admitted (a reservation) for now.
    c.until("nlp-team", "window opened", |q| {
        q["status"]["lastReconcileTime"] == "2026-11-21T10:00:00.000Z"
    })
    .await;

    // A status write that loses its compare-and-swap is re-read and retried.
    c.fake.conflict_next(STATUS_PATH, 1);
    let before = c.fake.requests().len();
    // One pod is deleted after 1 h, the other at 1.5 h: 2×1 + 2×1.5 = 5
    // card-hours, including both last stretches.
    c.set_clock(T0 + HOUR);
    c.fake.remove("", "pods", "nlp", "train-2");
    let q = c
        .until("nlp-team", "1 h accrued", |q| {
            used(q, "cash/requests.nvidia.com/gpu") == "4"
        })
        .await;
    assert!(
        q["status"]["workloads"]["apps/Deployment/nlp/train"]["admitted"].is_null(),
        "observed by now, no longer a reservation: {q}"
    );
    let after: Vec<String> = c.fake.requests()[before..].to_vec();
    let puts: Vec<usize> = after
        .iter()
        .enumerate()
        .filter(|(_, r)| r.starts_with(&format!("PATCH {STATUS_PATH}")))
        .map(|(i, _)| i)
        .collect();
    assert!(puts.len() >= 2, "a retry after the 409: {after:#?}");
    assert!(
        after[puts[0]..puts[1]]
            .iter()
            .any(|r| r.starts_with("GET /apis/bizrq.io/v1/bizgroupresourcequotas/nlp-team")),
        "a fresh GET between the 409 and the retry: {after:#?}"
    );
    c.set_clock(T0 + HOUR + HOUR / 2);
    c.fake.remove("", "pods", "nlp", "train-1");
    let q = c
        .until("nlp-team", "1.5 h accrued", |q| {
            used(q, "cash/requests.nvidia.com/gpu") == "5"
        })
        .await;
    assert_eq!(q["status"]["lastReconcileTime"], "2026-11-21T11:30:00.000Z");

    // A workload admitted but never seen by the watch is kept while its
    // reservation is young, and dropped after.
    c.set_clock(T0 + 2 * HOUR);
    let e = deployment("eval", "nlp-team", 1, 2);
    let r = s
        .review(
            "/validate/workloads",
            &review("deployment-create.json", "u-2", Some(e), None),
        )
        .await;
    assert_eq!(r["allowed"], true, "{r}");
    c.until("nlp-team", "eval charged", |q| {
        used(q, "requests.nvidia.com/gpu") == "6"
    })
    .await;
    // The Deployment goes away without a review (e.g. deleted while the
    // webhook was down): its observed charge is dropped at once.
    c.fake.remove("apps", "deployments", "nlp", "train");
    c.until("nlp-team", "train dropped", |q| {
        used(q, "requests.nvidia.com/gpu") == "2"
    })
    .await;
    c.set_clock(T0 + 2 * HOUR + 5 * 60_000);
    // Any event touching the quota reconciles it (or the periodic resync).
    let mut q = c.fake.quota("nlp-team");
    q["metadata"]["labels"] = json!({"touched": "yes"});
    c.fake.put(q);
    c.until("nlp-team", "expired reservation dropped", |q| {
        used(q, "requests.nvidia.com/gpu") == "0"
    })
    .await;

    // A workload CRD installed later is discovered and watched.
    c.fake.install(PYTORCHJOB);
    c.until_requested("pytorchjobs watch", |r| {
        r.starts_with("GET /apis/kubeflow.org/v1/pytorchjobs?") && r.contains("watch=true")
    })
    .await;

    // A denial is an Event on the quota.
    let big = deployment("huge", "nlp-team", 9, 1);
    let r = s
        .review(
            "/validate/workloads",
            &review("deployment-create.json", "u-3", Some(big), None),
        )
        .await;
    assert_eq!(r["allowed"], false);
    for _ in 0..100 {
        if !c.fake.list("events.k8s.io", "events").is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let events = c.fake.list("events.k8s.io", "events");
    assert!(
        events
            .iter()
            .any(|e| e["reason"] == "AdmissionDenied" && e["regarding"]["name"] == "nlp-team"),
        "{events:#?}"
    );

    // The API reads the cluster too.
    let (st, list) = s.api(Method::GET, "/api/v1/quotas", None).await;
    assert_eq!(st, reqwest::StatusCode::OK);
    assert_eq!(list["items"].as_array().map(Vec::len), Some(2), "{list}");
    c.running.shutdown().await;
    let lease = c
        .fake
        .get(
            "coordination.k8s.io",
            "leases",
            "bizrq-system",
            "bizrq-controller",
        )
        .unwrap();
    assert!(
        lease["spec"]["holderIdentity"].is_null(),
        "released on shutdown: {lease}"
    );
}

/// A leader whose Lease renewal hangs (a stalled connection: no answer,
/// no error) stops running the controller at its renew deadline — here
/// `--lease-renew-deadline-seconds 3` — well before its 15 s Lease could
/// expire for another replica; once its calls are answered again it finds
/// the Lease still its own and leads again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_renewal_hangs_stops_at_its_renew_deadline() {
    let fake = FakeApi::new();
    let link = fake.own_link();
    let dir = tempfile::tempdir().unwrap();
    let db = crate::common::fresh_sqlite(&dir);
    let c = Cluster::replica_configured(link.clone(), dir, T0, "bizrq-0", true, &db, |args| {
        args.lease_renew_deadline_seconds = 3
    })
    .await;
    c.until_metric("bizrq_leader 1").await;
    // The last renewal before the hang began about one retry (2 s) ago at
    // most, so A stops about 1 to 3 s on (the unit test in `leader.rs`
    // pins the deadline on paused time); here: well inside the Lease.
    link.hang_lease_calls(true);
    let hung = std::time::Instant::now();
    c.until_metric("bizrq_leader 0").await;
    let stopped = hung.elapsed();
    assert!(
        stopped < Duration::from_secs(15),
        "stopped {stopped:?} after the hang began"
    );
    link.hang_lease_calls(false);
    c.until_metric("bizrq_leader 1").await;
    c.running.shutdown().await;
}

/// Pod runs outlive the controller: a pod deleted while no controller runs
/// still pays, up to the last moment the previous one was watching.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_runs_survive_a_restart() {
    let fake = FakeApi::new();
    let dir = tempfile::tempdir().unwrap();
    let db = crate::common::fresh_sqlite(&dir);
    let c = Cluster::start_on(fake.clone(), dir, T0).await;
    c.server
        .create_quota(
            "team",
            "",
            json!({"requests.nvidia.com/gpu": "8", "cash/requests.nvidia.com/gpu": "100"}),
        )
        .await;
    let d = deployment("train", "team", 1, 2);
    let r = c
        .server
        .review(
            "/validate/workloads",
            &review("deployment-create.json", "u-1", Some(d.clone()), None),
        )
        .await;
    assert_eq!(r["allowed"], true, "{r}");
    fake.put(d);
    fake.put(replicaset("nlp", "train"));
    fake.put(pod(
        "nlp",
        "train-1",
        "ReplicaSet",
        "train-7d9f",
        2,
        "2026-11-21T10:00:00Z",
    ));
    c.until_metric("bizrq_controller_tracked{kind=\"pod_runs\"} 1")
        .await;
    c.until("team", "window opened", |q| {
        q["status"]["lastReconcileTime"] == "2026-11-21T10:00:00.000Z"
    })
    .await;
    // The controller watches on for an hour; its ledger and watermark are
    // persisted (every 5 s).
    c.set_clock(T0 + HOUR);
    let pool = sqlx::SqlitePool::connect(&db).await.unwrap();
    let mut persisted = false;
    for _ in 0..200 {
        let row: Option<(String,)> =
            sqlx::query_as("SELECT value FROM settings WHERE key = 'controller_watermark_ms'")
                .fetch_optional(&pool)
                .await
                .unwrap();
        let runs: (i64,) = sqlx::query_as("SELECT count(*) FROM pod_runs")
            .fetch_one(&pool)
            .await
            .unwrap();
        if runs.0 == 1 && row.is_some_and(|(v,)| v == (T0 + HOUR).to_string()) {
            persisted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(persisted, "pod run and watermark persisted");
    pool.close().await;
    // It stops; meanwhile the pod is deleted and nobody sees it go.
    let Cluster {
        running, _dir: dir, ..
    } = c;
    running.shutdown().await;
    fake.remove("", "pods", "nlp", "train-1");
    // A new controller, two hours later: the run is restored, ends at the
    // watermark and is paid exactly once — 1 h × 2 cards, not 3 h, not 0,
    // not twice (whether or not the first controller had already accrued
    // its last hour) — and then leaves the ledger and the database.
    let c = Cluster::start_on(fake.clone(), dir, T0 + 3 * HOUR).await;
    c.until_metric("bizrq_controller_tracked{kind=\"pod_runs\"} 0")
        .await;
    let pool = sqlx::SqlitePool::connect(&db).await.unwrap();
    let mut gone = false;
    for _ in 0..200 {
        let runs: (i64,) = sqlx::query_as("SELECT count(*) FROM pod_runs")
            .fetch_one(&pool)
            .await
            .unwrap();
        if runs.0 == 0 {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        gone,
        "the paid run is deleted from the database (it was loaded)"
    );
    let q = c.fake.quota("team");
    assert_eq!(used(&q, "cash/requests.nvidia.com/gpu"), "2", "{q}");
}

/// The API server emulation with a bounded history (the Kueue benchmark
/// runs on it): a watch from a version older than what is kept is answered
/// as kube-apiserver answers it, one ERROR event, 410 Expired, which
/// kube-runtime's watcher takes as "list again"; a watch from a version
/// still kept gets every event after it.
#[tokio::test]
async fn a_watch_from_a_compacted_version_is_told_410_expired() {
    use futures::StreamExt;
    use kube::api::{Api, ApiResource, GroupVersionKind, WatchEvent, WatchParams};
    let fake = FakeApi::new();
    fake.bound_history(4);
    let class = |n: usize| {
        json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": format!("c{n}")}, "value": n})
    };
    let first = fake.put(class(0));
    for n in 1..20 {
        fake.put(class(n));
    }
    let api: Api<kube::api::DynamicObject> = Api::all_with(
        fake.client(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("scheduling.k8s.io", "v1", "PriorityClass"),
            "priorityclasses",
        ),
    );
    let old = first["metadata"]["resourceVersion"].as_str().unwrap();
    let mut events = api
        .watch(&WatchParams::default(), old)
        .await
        .unwrap()
        .boxed();
    match events.next().await {
        Some(Ok(WatchEvent::Error(e))) => {
            assert_eq!((e.code, e.reason.as_str()), (410, "Expired"), "{e:?}")
        }
        other => panic!("expected 410 Expired, got {other:?}"),
    }
    assert!(events.next().await.is_none(), "the stream ends");

    let recent = fake.put(class(20));
    fake.put(class(21));
    let rv = recent["metadata"]["resourceVersion"].as_str().unwrap();
    let mut events = api
        .watch(&WatchParams::default(), rv)
        .await
        .unwrap()
        .boxed();
    match events.next().await {
        Some(Ok(WatchEvent::Added(o))) => assert_eq!(o.metadata.name.as_deref(), Some("c21")),
        other => panic!("expected c21, got {other:?}"),
    }
}

/// The queue mark key every test replica shares (hex, 32 bytes).
pub const MARK_KEY: &str = "6d61726b2d6b65792d666f722d62697a72712d746573742d6f6e6c792d303031";

/// A key file holding `MARK_KEY` in `dir`.
pub fn mark_key_file(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("queue-mark-keys");
    std::fs::write(&path, format!("# test key\n{MARK_KEY}\n")).unwrap();
    path
}
