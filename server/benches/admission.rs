//! Admission benchmark (prints figures; not a timed test).
//!
//!   cargo bench -p bizrq --bench admission                 # full run, floor and bizrq side by side
//!   cargo bench -p bizrq --bench admission -- --quotas 10000 --seconds 20 --rate 1000 --clients 64
//!   cargo bench -p bizrq --bench admission -- --hot --replicas 2 --database-url postgres://…
//!   cargo test  -p bizrq --bench admission -- --smoke      # seconds-long smoke run (CI)
//!   ... -- --database-url postgres://postgres@127.0.0.1:5432/bench   # on PostgreSQL
//!
//! Part 1 measures the pure decision (parse the review, adapter → pod sets,
//! plan, charge) with no I/O; part 2 the whole path: HTTPS, AdmissionReview
//! JSON, the service layer and the SQL store's compare-and-swap, against a
//! tree of `--quotas` quotas, first paced at `--rate` reviews/s (latency),
//! then as fast as `--clients` clients go (throughput). The server is the
//! real `bizrq` binary in its own process (`--replicas` of them on one
//! database, the clients taking turns); the load generator shares the
//! machine's two cores with it, so the server's own CPU per admission is
//! reported too.
//!
//! The same load is first sent to the floor: this executable again, run as
//! a server that does only what any webhook must (axum and rustls, parse the
//! AdmissionReview, answer allowed, no state), so both figures come from
//! one run on one machine in one state and are printed side by side.
//! `--hot` aims every review at one quota (64 workloads changing size);
//! `--no-floor` skips the floor.
//!
//! `--cluster` runs `bizrq` in cluster mode instead: its quotas are CRD
//! objects on the in-memory API server of the integration tests
//! (`tests/it/fakeapi`, included below rather than copied: one fake, so
//! the bench measures against the same resourceVersion compare-and-swap the
//! tests prove), served here over plain HTTP with a kubeconfig, each write
//! taking `--write-delay-ms` (5 by default) as etcd's commit would. Every
//! review goes to one hot quota; the status PUTs the API server received
//! are counted beside the reviews.

use bizrq::metrics::Metrics;
use bizrq::service::{Persist, Service};
use bizrq::store::sql::SqlStore;
use quota::cash::QosMultipliers;
use quota::object::{Quota, QuotaSpec};
use quota::workload::adapter_for_kind;
use quota::KeyConfig;
use serde_json::Value;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Opts {
    smoke: bool,
    quotas: usize,
    seconds: u64,
    rate: u64,
    clients: usize,
    database_url: Option<String>,
    hot: bool,
    replicas: usize,
    floor: bool,
    cluster: bool,
    write_delay_ms: u64,
    same_again: bool,
    /// Width of the latency-over-time windows (`--window-seconds`).
    window: Duration,
    /// Where the windows and the server's background runs go (`--csv`).
    csv: Option<String>,
    /// `--sweep-seconds`: the server's alert sweep and usage sample that
    /// often (its defaults, 300 s and 60 s, when not given).
    sweep_seconds: Option<u64>,
    /// `--no-pure`: skip part 1 (the pure decision).
    pure: bool,
}

fn opts() -> Opts {
    let args: Vec<String> = std::env::args().collect();
    let val = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let smoke = args.iter().any(|a| a == "--smoke");
    Opts {
        smoke,
        quotas: val("--quotas")
            .and_then(|v| v.parse().ok())
            .unwrap_or(if smoke { 300 } else { 10_000 }),
        seconds: val("--seconds")
            .and_then(|v| v.parse().ok())
            .unwrap_or(if smoke { 2 } else { 15 }),
        rate: val("--rate")
            .and_then(|v| v.parse().ok())
            .unwrap_or(if smoke { 200 } else { 1000 }),
        clients: val("--clients").and_then(|v| v.parse().ok()).unwrap_or(64),
        database_url: val("--database-url"),
        hot: args.iter().any(|a| a == "--hot" || a == "--cluster"),
        replicas: val("--replicas")
            .and_then(|v| v.parse().ok())
            .unwrap_or(1)
            .max(1),
        floor: !args.iter().any(|a| a == "--no-floor"),
        cluster: args.iter().any(|a| a == "--cluster"),
        same_again: args.iter().any(|a| a == "--same-again"),
        write_delay_ms: val("--write-delay-ms")
            .and_then(|v| v.parse().ok())
            .unwrap_or(5),
        window: Duration::from_secs_f64(
            val("--window-seconds")
                .and_then(|v| v.parse::<f64>().ok())
                .filter(|v| *v > 0.0)
                .unwrap_or(1.0),
        ),
        csv: val("--csv"),
        sweep_seconds: val("--sweep-seconds").and_then(|v| v.parse().ok()),
        pure: !args.iter().any(|a| a == "--no-pure"),
    }
}

fn fixture() -> Value {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let review: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("deployment-create.json")).unwrap())
            .unwrap();
    let deployment: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("deployment.json")).unwrap())
            .unwrap();
    let mut r = review;
    r["request"]["object"] = deployment;
    r
}

/// A CREATE review of a one-replica, one-card Deployment bound to `quota`.
fn review_body(base: &Value, quota: &str, n: u64) -> Vec<u8> {
    Template::new(base).render(quota, &format!("bench-{n}"), n, 1)
}

/// The review pre-serialised around its four variable parts, so the load
/// generator spends its time sending, not building JSON.
struct Template {
    parts: Vec<String>,
}

impl Template {
    fn new(base: &Value) -> Template {
        let mut r = base.clone();
        r["request"]["uid"] = "@@UID@@".into();
        r["request"]["name"] = "@@NAME@@".into();
        let o = &mut r["request"]["object"];
        o["metadata"]["name"] = "@@NAME@@".into();
        o["metadata"]["labels"]["biz.group.resource.quota"] = "@@QUOTA@@".into();
        o["spec"]["replicas"] = "@@REPLICAS@@".into();
        let text = serde_json::to_string(&r)
            .unwrap()
            .replace("\"@@REPLICAS@@\"", "@@REPLICAS@@");
        let mut parts = Vec::new();
        let mut rest = text.as_str();
        while let Some(i) = rest.find("@@") {
            parts.push(rest[..i].to_string());
            let j = rest[i + 2..].find("@@").unwrap() + i + 4;
            parts.push(rest[i..j].to_string());
            rest = &rest[j..];
        }
        parts.push(rest.to_string());
        Template { parts }
    }

    fn render(&self, quota: &str, name: &str, n: u64, replicas: u64) -> Vec<u8> {
        let mut out = String::with_capacity(8192);
        for p in &self.parts {
            match p.as_str() {
                "@@UID@@" => out.push_str(&format!("bench-uid-{n}")),
                "@@NAME@@" => out.push_str(name),
                "@@QUOTA@@" => out.push_str(quota),
                "@@REPLICAS@@" => out.push_str(&replicas.to_string()),
                other => out.push_str(other),
            }
        }
        out.into_bytes()
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// What one phase measured.
#[derive(Clone, Copy, Default)]
struct Figures {
    ops: usize,
    rate: f64,
    p50: Duration,
    p99: Duration,
}

fn report(label: &str, mut lat: Vec<Duration>, elapsed: Duration) -> Figures {
    lat.sort();
    let f = Figures {
        ops: lat.len(),
        rate: lat.len() as f64 / elapsed.as_secs_f64(),
        p50: percentile(&lat, 0.50),
        p99: percentile(&lat, 0.99),
    };
    println!(
        "{label:<44} {:>8} ops  {:>9.0} ops/s  p50 {:>8.3} ms  p99 {:>8.3} ms  max {:>8.3} ms",
        lat.len(),
        lat.len() as f64 / elapsed.as_secs_f64(),
        percentile(&lat, 0.50).as_secs_f64() * 1e3,
        percentile(&lat, 0.99).as_secs_f64() * 1e3,
        lat.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
    );
    f
}

/// Part 1: the pure decision, no I/O.
fn pure(o: &Opts) {
    let base = fixture();
    let cfg = KeyConfig::default();
    let n = if o.smoke { 2_000 } else { 100_000 };
    let bodies: Vec<Vec<u8>> = (0..64).map(|i| review_body(&base, "team", i)).collect();
    let mut q = Quota::new(
        "team",
        QuotaSpec {
            parent: "dept".into(),
            hard: [
                ("requests.nvidia.com/gpu", "1e6"),
                ("requests.nvidia.com/gpu.A100", "1e6"),
                ("limits.cpu", "1e7"),
                ("pods", "1e6"),
            ]
            .iter()
            .map(|(k, v)| (k.to_string(), v.parse().unwrap()))
            .collect(),
            max: Default::default(),
            budgets: Default::default(),
            queueing: Default::default(),
            fair_sharing: Default::default(),
            idle: None,
        },
    );
    #[derive(serde::Deserialize)]
    struct R<'a> {
        #[serde(borrow)]
        request: Req<'a>,
    }
    #[derive(serde::Deserialize)]
    struct Req<'a> {
        #[serde(borrow)]
        object: &'a serde_json::value::RawValue,
    }
    let mut lat = Vec::with_capacity(n);
    let started = Instant::now();
    for i in 0..n {
        let t = Instant::now();
        let body = &bodies[i % bodies.len()];
        let r: R = serde_json::from_slice(body).unwrap();
        let a = adapter_for_kind("apps", "Deployment").unwrap();
        let w = a.read(r.request.object.get(), &cfg).unwrap();
        for step in quota::admission::plan(None, Some(&w)) {
            if let quota::admission::Step::Charge { workload, .. } = step {
                let c = quota::object::Charge {
                    pod_sets: workload.pod_sets.clone(),
                    hpa: None,
                    since: "2026-11-21T00:00:00.000Z".into(),
                    uid: String::new(),
                    admitted: None,
                };
                // A quota holding ~64 workloads, as a busy team's would.
                quota::admission::charge(&mut q, &format!("apps/Deployment/nlp/w{}", i % 64), c)
                    .unwrap();
            }
        }
        lat.push(t.elapsed());
    }
    report(
        "pure decision (parse+adapt+plan+charge)",
        lat,
        started.elapsed(),
    );
}

/// CPU seconds (user + system) a process has used, from /proc.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start at ')'.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    let hz = std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .unwrap_or(100.0);
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 here.
    (ticks(11) + ticks(12)) / hz
}

async fn build_tree(url: &str, quotas: usize) -> Vec<String> {
    let store = SqlStore::connect(url).await.expect("database");
    let svc = Service::new(
        Arc::new(store.clone()),
        KeyConfig::default(),
        QosMultipliers::default(),
        Arc::new(Metrics::default()),
    );
    let t = Instant::now();
    let hard = |n: &str| -> quota::ResourceList {
        [
            ("requests.nvidia.com/gpu", n),
            ("requests.nvidia.com/gpu.A100", n),
            ("limits.cpu", n),
            ("pods", n),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.parse().unwrap()))
        .collect()
    };
    let spec = |parent: &str, n: &str| QuotaSpec {
        parent: parent.into(),
        hard: hard(n),
        max: Default::default(),
        budgets: Default::default(),
        queueing: Default::default(),
        fair_sharing: Default::default(),
        idle: None,
    };
    svc.create_quota("root", spec("", "1e12"), Persist::Here, "", false)
        .await
        .unwrap();
    // The target of `--hot`: room for every admission a run can make.
    svc.create_quota(HOT, spec("root", "1e11"), Persist::Here, "", false)
        .await
        .unwrap();
    let depts = ((quotas as f64).sqrt() as usize).max(1);
    let mut leaves = Vec::new();
    let mut made = 1;
    'outer: for d in 0..depts {
        let dept = format!("dept-{d}");
        svc.create_quota(&dept, spec("root", "1e6"), Persist::Here, "", false)
            .await
            .unwrap();
        made += 1;
        for tm in 0..depts {
            if made >= quotas {
                break 'outer;
            }
            let team = format!("team-{d}-{tm}");
            svc.create_quota(&team, spec(&dept, "1e4"), Persist::Here, "", false)
                .await
                .unwrap();
            leaves.push(team);
            made += 1;
        }
    }
    store.close().await;
    println!(
        "tree: {made} quotas ({} leaves) built in {:.1} s on {}",
        leaves.len(),
        t.elapsed().as_secs_f64(),
        if url.starts_with("sqlite") {
            "SQLite"
        } else {
            "PostgreSQL"
        }
    );
    leaves
}

/// The quota `--hot` aims every review at.
const HOT: &str = "hot";
/// Workloads a hot run keeps changing (a busy team's, each scaled often).
const HOT_WORKLOADS: u64 = 64;

/// A server under test: where its webhook is, and its processes.
struct Target {
    name: &'static str,
    endpoints: Vec<String>,
    metrics: Vec<String>,
    children: Vec<tokio::process::Child>,
    /// When it said it was ready: time 0 of its latency over time.
    ready: Instant,
    /// The server's background runs (alert sweep, usage sample) as its log
    /// tells them: when each began, after `ready`, and how long it took.
    background: Arc<std::sync::Mutex<Vec<Background>>>,
}

/// One run of a server's background task, from its log line
/// `background task done task=… ms=…` (target `bizrq::background`).
#[derive(Clone, Debug)]
struct Background {
    task: String,
    started: Duration,
    took: Duration,
}

impl Background {
    /// The run a log line tells of, if it is one; `at`: when the line came.
    fn parse(line: &str, at: Duration) -> Option<Background> {
        if !line.contains("background task done") {
            return None;
        }
        let field = |name: &str| {
            let i = line.find(&format!(" {name}="))? + name.len() + 2;
            let v = line[i..].split_whitespace().next()?;
            Some(v.trim_matches('"').to_string())
        };
        let took = Duration::from_secs_f64(field("ms")?.parse::<f64>().ok()? / 1e3);
        Some(Background {
            task: field("task")?,
            started: at.saturating_sub(took),
            took,
        })
    }
}

impl Target {
    fn pids(&self) -> Vec<u32> {
        self.children.iter().filter_map(|c| c.id()).collect()
    }

    async fn stop(mut self) {
        for c in &mut self.children {
            let _ = c.kill().await;
        }
    }
}

/// Reads the child's stdout until `ready` finds the line it waits for.
async fn await_line<T>(child: &mut tokio::process::Child, ready: impl Fn(&str) -> Option<T>) -> T {
    let mut lines =
        tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(child.stdout.take().unwrap()));
    loop {
        let line = lines
            .next_line()
            .await
            .unwrap()
            .expect("the server exited before it was ready");
        if let Some(v) = ready(&line) {
            // Drain the rest so the child never blocks on a full pipe.
            tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
            return v;
        }
    }
}

/// `mode`: `--standalone`, or the kubeconfig of cluster mode.
async fn start_bizrq(o: &Opts, url: &str, mode: &[String]) -> Target {
    let mut t = Target {
        name: "bizrq",
        endpoints: Vec::new(),
        metrics: Vec::new(),
        children: Vec::new(),
        ready: Instant::now(),
        background: Default::default(),
    };
    for _ in 0..o.replicas {
        // `BIZRQ_BENCH_BIN`: another build of the server (a before/after run).
        let bin = std::env::var("BIZRQ_BENCH_BIN")
            .unwrap_or_else(|_| env!("CARGO_BIN_EXE_bizrq").to_string());
        // `BIZRQ_BENCH_CALLGRIND=<dir>`: under callgrind, collecting only
        // while `callgrind` says (`profile-admission.sh`).
        let mut cmd = match callgrind_dir() {
            Some(dir) => {
                let mut c = tokio::process::Command::new("valgrind");
                c.args([
                    "--tool=callgrind".to_string(),
                    "--instr-atstart=no".to_string(),
                    format!("--callgrind-out-file={dir}/callgrind.out.%p"),
                    bin,
                ]);
                c
            }
            None => tokio::process::Command::new(bin),
        };
        let mut child = cmd
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--webhook-listen",
                "127.0.0.1:0",
                "--probe-listen",
                "127.0.0.1:0",
                // One process stands in for every API server: no per-address cap.
                "--webhook-max-connections-per-ip",
                "0",
                "--admin-token",
                "bench",
                "--resync-seconds",
                "3600",
            ])
            .args(mode)
            .args(
                o.sweep_seconds
                    .iter()
                    .flat_map(|s| {
                        ["--alert-sweep-seconds", "--sample-seconds"]
                            .map(|a| [a.to_string(), s.to_string()])
                    })
                    .flatten(),
            )
            .args(["--database-url", url])
            // The background runs' lines, read below for latency over time.
            .env("BIZRQ_LOG", "warn,bizrq::background=debug")
            .env("NO_COLOR", "1")
            .env("BIZRQ_ADMIN_PASSWORD", "bench-admin-password")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn bizrq");
        follow_log(&mut child, t.background.clone());
        // Lines before it (a generated password on a first start) are skipped.
        let (http_addr, webhook_addr) = await_line(&mut child, bizrq::parse_ready_line).await;
        if t.children.is_empty() {
            t.ready = Instant::now();
            *READY.lock().unwrap() = Some(t.ready);
        }
        t.endpoints
            .push(format!("https://{webhook_addr}/validate/workloads"));
        t.metrics.push(format!("http://{http_addr}/metrics"));
        t.children.push(child);
    }
    t
}

#[allow(dead_code)]
#[path = "../tests/it/fakeapi/mod.rs"]
mod fakeapi;

/// The fake API server over plain HTTP on loopback, as `kube::Client`
/// reaches a real one (the tests call the same tower service in process).
async fn serve_fake(fake: fakeapi::FakeApi) -> std::net::SocketAddr {
    let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
        let mut fake = fake.clone();
        async move {
            let (parts, body) = req.into_parts();
            let bytes = axum::body::to_bytes(body, usize::MAX)
                .await
                .unwrap_or_default();
            let req = http::Request::from_parts(parts, kube::client::Body::from(bytes));
            let resp = tower::Service::call(&mut fake, req).await.unwrap();
            resp.map(axum::body::Body::new)
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

/// The fake API server (writes delayed once the quota is made) and one
/// `bizrq` in cluster mode over it, holding the quota `HOT`.
async fn start_in_cluster(o: &Opts, dir: &std::path::Path) -> (Target, fakeapi::FakeApi) {
    let fake = fakeapi::FakeApi::new();
    let addr = serve_fake(fake.clone()).await;
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: fake\n\
             clusters: [{{name: fake, cluster: {{server: \"http://{addr}\"}}}}]\n\
             users: [{{name: bizrq, user: {{token: bench}}}}]\n\
             contexts: [{{name: fake, context: {{cluster: fake, user: bizrq, namespace: default}}}}]\n"
        ),
    )
    .unwrap();
    let url = format!("sqlite://{}", dir.join("cluster.db").display());
    let mode = [
        "--kubeconfig".to_string(),
        kubeconfig.display().to_string(),
        "--pod-name".to_string(),
        "bizrq-bench-0".to_string(),
    ];
    let t = start_bizrq(o, &url, &mode).await;
    let api = t.metrics[0].replace("/metrics", "/api/v1/quotas");
    let hard = serde_json::json!({
        "requests.nvidia.com/gpu": "1e11", "requests.nvidia.com/gpu.A100": "1e11",
        "limits.cpu": "1e11", "pods": "1e11",
    });
    let r = reqwest::Client::new()
        .post(&api)
        .bearer_auth("bench")
        .json(&serde_json::json!({"metadata": {"name": HOT}, "spec": {"parent": "", "hard": hard}}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    fake.set_write_delay(Duration::from_millis(o.write_delay_ms));
    (t, fake)
}

/// The status writes (merge patches) of `HOT` the API server was asked
/// for so far.
fn hot_status_writes(fake: &fakeapi::FakeApi) -> usize {
    let patch = format!("PATCH /apis/bizrq.io/v1/bizgroupresourcequotas/{HOT}/status");
    fake.requests()
        .iter()
        .filter(|r| r.starts_with(&patch))
        .count()
}

fn callgrind_dir() -> Option<String> {
    std::env::var("BIZRQ_BENCH_CALLGRIND").ok()
}

/// `callgrind_control <what>` for each of the server's processes.
fn callgrind(t: &Target, what: &str) {
    for pid in t.pids() {
        let ok = std::process::Command::new("callgrind_control")
            .args([what, &pid.to_string()])
            .stdout(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "callgrind_control {what} {pid} failed");
    }
}

/// The floor: this executable as a webhook with no state (`serve_floor`).
async fn start_floor() -> Target {
    let mut child = tokio::process::Command::new(std::env::current_exe().unwrap())
        .arg(FLOOR_ARG)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the floor server");
    let addr = await_line(&mut child, |l| {
        l.strip_prefix("floor listening on ").map(str::to_string)
    })
    .await;
    Target {
        name: "floor",
        endpoints: vec![format!("https://{addr}/validate/workloads")],
        metrics: Vec::new(),
        children: vec![child],
        ready: Instant::now(),
        background: Default::default(),
    }
}

/// When the first replica of the server under test said it was ready
/// (the log's lines are timed from it).
static READY: std::sync::Mutex<Option<Instant>> = std::sync::Mutex::new(None);

/// Reads the server's log (stderr): background runs are kept, every other
/// line passed on to the bench's stderr.
fn follow_log(child: &mut tokio::process::Child, into: Arc<std::sync::Mutex<Vec<Background>>>) {
    let Some(err) = child.stderr.take() else {
        return;
    };
    tokio::spawn(async move {
        let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(err));
        while let Ok(Some(line)) = lines.next_line().await {
            // Before the server is ready: at its time 0.
            let at = READY
                .lock()
                .unwrap()
                .map(|r| r.elapsed())
                .unwrap_or_default();
            match Background::parse(&line, at) {
                Some(b) => into.lock().unwrap().push(b),
                None if line.contains("background task done") => {}
                None => eprintln!("{line}"),
            }
        }
    });
}

const FLOOR_ARG: &str = "--serve-floor";

/// What any admission webhook must do and no more: TLS (rustls, HTTP/2 and
/// HTTP/1.1 as bizrq offers them), axum, parse the whole AdmissionReview,
/// answer allowed for its uid. No state, no store.
fn serve_floor() -> ! {
    bizrq::tls::install_crypto_provider();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        async fn review(body: axum::body::Bytes) -> axum::response::Response {
            use axum::response::IntoResponse;
            let Ok(r) = serde_json::from_slice::<Value>(&body) else {
                return axum::http::StatusCode::BAD_REQUEST.into_response();
            };
            let uid = r["request"]["uid"].as_str().unwrap_or_default();
            axum::Json(serde_json::json!({
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "response": {"uid": uid, "allowed": true},
            }))
            .into_response()
        }
        let app = axum::Router::new().route("/validate/workloads", axum::routing::post(review));
        let (tls, _) = bizrq::tls::self_signed(&None).await.unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        println!("floor listening on {}", listener.local_addr().unwrap());
        axum_server::from_tcp_rustls(listener, tls)
            .unwrap()
            .serve(app.into_make_service())
            .await
            .unwrap();
    });
    std::process::exit(0)
}

/// The next review's number, across phases: a phase goes on where the last
/// one stopped, so each review changes something (`--same-again`: each
/// phase starts again at 0, re-sending what the last one sent, so a phase
/// after the first measures reviews that change nothing).
static NEXT: AtomicU64 = AtomicU64::new(0);

/// One phase's load: `rate` reviews/s spread over the clients (paced), or
/// as fast as they go. Paced latency is measured from each request's
/// scheduled send time, so queueing delay is not hidden.
async fn drive(
    o: &Opts,
    client: &reqwest::Client,
    t: &Target,
    leaves: &Arc<Vec<String>>,
    paced: bool,
) -> Figures {
    drive_timed(o, client, t, leaves, paced).await.0
}

/// Each review's scheduled send time after the target was ready, and its
/// latency.
type Timeline = Vec<(Duration, Duration)>;

/// `drive`, and each review's place in time (`Timeline`).
async fn drive_timed(
    o: &Opts,
    client: &reqwest::Client,
    t: &Target,
    leaves: &Arc<Vec<String>>,
    paced: bool,
) -> (Figures, Timeline) {
    let label = if paced {
        format!(
            "{} HTTPS paced at {}/s, {} clients",
            t.name, o.rate, o.clients
        )
    } else {
        format!("{} HTTPS flat out, {} clients", t.name, o.clients)
    };
    let base = Arc::new(Template::new(&fixture()));
    if o.same_again {
        NEXT.store(0, Ordering::Relaxed);
    }
    let pids = t.pids();
    let deadline = Instant::now() + Duration::from_secs(o.seconds);
    let started = Instant::now();
    let cpu_before: f64 = pids.iter().map(|p| cpu_seconds(*p)).sum();
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..o.clients {
        let (client, base, leaves) = (client.clone(), base.clone(), leaves.clone());
        let endpoint = t.endpoints[c % t.endpoints.len()].clone();
        let hot = o.hot;
        let period = Duration::from_secs_f64(o.clients as f64 / o.rate as f64);
        let ready = t.ready;
        tasks.spawn(async move {
            let mut lat = Vec::new();
            let mut denied = 0u64;
            let mut tick = tokio::time::interval_at(
                tokio::time::Instant::now() + period.mul_f64(c as f64 / 64.0),
                period,
            );
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            while Instant::now() < deadline {
                let scheduled = if paced {
                    tick.tick().await.into_std()
                } else {
                    Instant::now()
                };
                let n = NEXT.fetch_add(1, Ordering::Relaxed);
                let body = if hot {
                    // One quota, a few workloads each changing size.
                    let w = n % HOT_WORKLOADS;
                    base.render(
                        HOT,
                        &format!("bench-hot-{w}"),
                        n,
                        1 + (n / HOT_WORKLOADS) % 4,
                    )
                } else {
                    let quota = &leaves[(n as usize * 7919) % leaves.len()];
                    base.render(quota, &format!("bench-{n}"), n, 1)
                };
                let resp = client
                    .post(&endpoint)
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await
                    .unwrap();
                let text = resp.text().await.unwrap();
                if !text.contains("\"allowed\":true") {
                    denied += 1;
                }
                lat.push((
                    scheduled.saturating_duration_since(ready),
                    scheduled.elapsed(),
                ));
            }
            (lat, denied)
        });
    }
    let mut timeline = Vec::new();
    let mut denied = 0;
    while let Some(r) = tasks.join_next().await {
        let (l, d) = r.unwrap();
        timeline.extend(l);
        denied += d;
    }
    let ops = timeline.len();
    let all = timeline.iter().map(|(_, l)| *l).collect();
    let f = report(&label, all, started.elapsed());
    let cpu = pids.iter().map(|p| cpu_seconds(*p)).sum::<f64>() - cpu_before;
    println!(
        "  server process CPU: {:.0} µs per admission ({:.0} % of one core)",
        cpu * 1e6 / ops.max(1) as f64,
        cpu * 100.0 / started.elapsed().as_secs_f64()
    );
    if denied > 0 {
        println!("  ({denied} denied)");
    }
    (f, timeline)
}

/// Latency in each window of `width` from the target's start.
#[derive(Clone, Debug)]
struct Window {
    from: Duration,
    count: usize,
    p50: Duration,
    p99: Duration,
    max: Duration,
}

fn windows(timeline: &Timeline, width: Duration) -> Vec<Window> {
    let mut by: std::collections::BTreeMap<u64, Vec<Duration>> = Default::default();
    for (at, lat) in timeline {
        let i = (at.as_secs_f64() / width.as_secs_f64()) as u64;
        by.entry(i).or_default().push(*lat);
    }
    by.into_iter()
        .map(|(i, mut l)| {
            l.sort();
            Window {
                from: width.mul_f64(i as f64),
                count: l.len(),
                p50: percentile(&l, 0.50),
                p99: percentile(&l, 0.99),
                max: *l.last().unwrap(),
            }
        })
        .collect()
}

/// The paced phases over time: p50/p99/max per 5 s (the CSV has every
/// `--window-seconds`), the server's background runs beside them, and the
/// worst window of each.
fn print_over_time(o: &Opts, floor: Option<&Timeline>, bizrq: &Timeline, bg: &[Background]) {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let coarse = Duration::from_secs(5).max(o.window);
    let fw = floor.map(|f| windows(f, coarse)).unwrap_or_default();
    let bw = windows(bizrq, coarse);
    println!();
    println!(
        "paced latency over time ({} s windows from each server's start; ms)",
        coarse.as_secs_f64()
    );
    println!(
        "{:>8}  {:>24}  {:>24}  background (bizrq)",
        "from", "floor p50 / p99 / max", "bizrq p50 / p99 / max"
    );
    for b in &bw {
        let f = fw
            .iter()
            .find(|f| f.from == b.from)
            .map(|f| format!("{:.1} / {:.1} / {:.1}", ms(f.p50), ms(f.p99), ms(f.max)))
            .unwrap_or_default();
        let end = b.from + coarse;
        let runs: Vec<String> = bg
            .iter()
            .filter(|r| r.started < end && r.started + r.took >= b.from)
            .map(|r| format!("{} {:.0} ms", r.task, ms(r.took)))
            .collect();
        println!(
            "{:>7.0}s  {:>24}  {:>24}  {}",
            b.from.as_secs_f64(),
            f,
            format!("{:.1} / {:.1} / {:.1}", ms(b.p50), ms(b.p99), ms(b.max)),
            runs.join(", ")
        );
    }
    let worst = |w: &[Window]| w.iter().map(|w| w.p99).max().unwrap_or_default();
    let fine_f = floor.map(|f| windows(f, o.window)).unwrap_or_default();
    let fine_b = windows(bizrq, o.window);
    println!(
        "worst {} s window's p99: floor {:.3} ms, bizrq {:.3} ms",
        o.window.as_secs_f64(),
        ms(worst(&fine_f)),
        ms(worst(&fine_b))
    );
    if let Some(path) = &o.csv {
        let mut out = String::from("kind,series,t_s,count,p50_ms,p99_ms,max_ms,task\n");
        for (series, w) in [("floor", &fine_f), ("bizrq", &fine_b)] {
            for w in w.iter() {
                out.push_str(&format!(
                    "window,{series},{:.3},{},{:.3},{:.3},{:.3},\n",
                    w.from.as_secs_f64(),
                    w.count,
                    ms(w.p50),
                    ms(w.p99),
                    ms(w.max)
                ));
            }
        }
        // The whole phase of each, as the summary prints it.
        for (series, t) in [("floor", floor), ("bizrq", Some(bizrq))] {
            let Some(t) = t else { continue };
            let whole = windows(t, Duration::from_secs(1 << 20));
            for w in whole {
                out.push_str(&format!(
                    "summary,{series},0,{},{:.3},{:.3},{:.3},\n",
                    w.count,
                    ms(w.p50),
                    ms(w.p99),
                    ms(w.max)
                ));
            }
        }
        for r in bg {
            out.push_str(&format!(
                "background,bizrq,{:.3},,,,{:.3},{}\n",
                r.started.as_secs_f64(),
                ms(r.took),
                r.task
            ));
        }
        std::fs::write(path, out).expect("writing --csv");
        println!("latency over time written to {path}");
    }
}

/// Part 2: over HTTPS, the floor and then `bizrq`, as the API server calls them.
async fn https(o: &Opts) {
    let dir = tempfile::tempdir().unwrap();
    let url = o
        .database_url
        .clone()
        .unwrap_or_else(|| format!("sqlite://{}", dir.path().join("bench.db").display()));
    let leaves = if o.cluster {
        // The quota lives on the API server (`start_in_cluster`).
        println!(
            "cluster mode: one quota on the fake API server, {} ms per write",
            o.write_delay_ms
        );
        Arc::new(vec![HOT.to_string()])
    } else {
        Arc::new(build_tree(&url, o.quotas).await)
    };
    if o.hot {
        println!("every review aimed at the quota {HOT:?}, {HOT_WORKLOADS} workloads");
    }

    // One client for every phase: connections (and their TLS handshakes)
    // carry over from one phase to the next.
    let client = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .pool_max_idle_per_host(o.clients)
        .build()
        .unwrap();
    let mut floor_timeline = None;
    let floor = if o.floor {
        let t = start_floor().await;
        let (paced, timeline) = drive_timed(o, &client, &t, &leaves, true).await;
        floor_timeline = Some(timeline);
        let flat = drive(o, &client, &t, &leaves, false).await;
        t.stop().await;
        Some((paced, flat))
    } else {
        None
    };

    let mut fake = None;
    let t = if o.cluster {
        let (t, f) = start_in_cluster(o, dir.path()).await;
        fake = Some(f);
        t
    } else {
        start_bizrq(o, &url, &["--standalone".to_string()]).await
    };
    let writes_before = fake.as_ref().map(hot_status_writes);
    if o.replicas > 1 {
        println!("{} bizrq replicas on one database", o.replicas);
    }
    let (paced, flat) = if callgrind_dir().is_some() {
        // The first phase warms up (start-up, every workload charged
        // once); the server's instructions are counted over the second.
        drive(o, &client, &t, &leaves, true).await;
        callgrind(&t, "-i=on");
        let counted = drive(o, &client, &t, &leaves, true).await;
        callgrind(&t, "-d");
        callgrind(&t, "-i=off");
        println!("callgrind: counted {} admissions", counted.ops);
        (counted, counted)
    } else {
        let (paced, timeline) = drive_timed(o, &client, &t, &leaves, true).await;
        let background = t.background.lock().unwrap().clone();
        print_over_time(o, floor_timeline.as_ref(), &timeline, &background);
        (paced, drive(o, &client, &t, &leaves, false).await)
    };
    for (i, m) in t.metrics.iter().enumerate() {
        let text = client.get(m).send().await.unwrap().text().await.unwrap();
        for l in text.lines().filter(|l| {
            l.starts_with("bizrq_cas_conflicts_total")
                || l.starts_with("bizrq_cas_exhausted_total")
                || l.starts_with("bizrq_admission_batch_size_sum")
                || l.starts_with("bizrq_admission_batch_size_count")
                || l.starts_with("bizrq_admission_batches_failed_total")
                || l.starts_with("bizrq_store_write_batch_size_sum")
                || l.starts_with("bizrq_store_write_batch_size_count")
        }) {
            println!("  replica {i}: {l}");
        }
    }
    if let (Some(fake), Some(before)) = (&fake, writes_before) {
        println!(
            "  API server: {} status writes of {HOT:?} for both phases ({} ms per write)",
            hot_status_writes(fake) - before,
            o.write_delay_ms
        );
    }
    t.stop().await;

    if let Some((fp, ff)) = floor {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        println!();
        println!(
            "{:<28} {:>12} {:>12} {:>14}",
            "", "floor", "bizrq", "bizrq / floor"
        );
        println!(
            "{:<28} {:>9.3} ms {:>9.3} ms {:>13.1}×",
            "paced p50",
            ms(fp.p50),
            ms(paced.p50),
            ms(paced.p50) / ms(fp.p50).max(1e-9)
        );
        println!(
            "{:<28} {:>9.3} ms {:>9.3} ms {:>13.1}×",
            "paced p99",
            ms(fp.p99),
            ms(paced.p99),
            ms(paced.p99) / ms(fp.p99).max(1e-9)
        );
        println!(
            "{:<28} {:>10.0}/s {:>10.0}/s {:>13.0} %",
            "flat out",
            ff.rate,
            flat.rate,
            flat.rate * 100.0 / ff.rate.max(1e-9)
        );
    }
}

fn main() {
    if std::env::args().any(|a| a == FLOOR_ARG) {
        serve_floor();
    }
    bizrq::tls::install_crypto_provider();
    let o = opts();
    println!(
        "bizrq admission benchmark ({} build{})",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        if o.smoke { ", smoke" } else { "" }
    );
    if o.pure {
        pure(&o);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(https(&o));
}
