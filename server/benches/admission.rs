//! Admission benchmark (prints figures; not a timed test).
//!
//!   cargo bench -p bizrq --bench admission                 # full run
//!   cargo bench -p bizrq --bench admission -- --quotas 10000 --seconds 20 --rate 1000 --clients 64
//!   cargo test  -p bizrq --bench admission -- --smoke      # seconds-long smoke run (CI)
//!   ... -- --database-url postgres://postgres@127.0.0.1:5432/bench   # on PostgreSQL
//!
//! Part 1 measures the pure decision (parse the review, adapter → pod sets,
//! plan, charge) with no I/O; part 2 the whole path: HTTPS, AdmissionReview
//! JSON, the service layer and the SQL store's compare-and-swap, against a
//! tree of `--quotas` quotas, first paced at `--rate` reviews/s (latency),
//! then as fast as `--clients` clients go (throughput). The server is the
//! real `bizrq` binary in its own process; the load generator shares the
//! machine's two cores with it, so the server's own CPU per admission is
//! reported too.

use bizrq::metrics::Metrics;
use bizrq::service::{Persist, Service};
use bizrq::store::sql::SqlStore;
use quota::cash::Prices;
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
    Template::new(base).render(quota, n)
}

/// The review pre-serialised around its three variable parts, so the load
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
        o["spec"]["replicas"] = 1.into();
        let text = serde_json::to_string(&r).unwrap();
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

    fn render(&self, quota: &str, n: u64) -> Vec<u8> {
        let mut out = String::with_capacity(8192);
        for p in &self.parts {
            match p.as_str() {
                "@@UID@@" => out.push_str(&format!("bench-uid-{n}")),
                "@@NAME@@" => out.push_str(&format!("bench-{n}")),
                "@@QUOTA@@" => out.push_str(quota),
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

fn report(label: &str, mut lat: Vec<Duration>, elapsed: Duration) {
    lat.sort();
    println!(
        "{label:<44} {:>8} ops  {:>9.0} ops/s  p50 {:>8.3} ms  p99 {:>8.3} ms  max {:>8.3} ms",
        lat.len(),
        lat.len() as f64 / elapsed.as_secs_f64(),
        percentile(&lat, 0.50).as_secs_f64() * 1e3,
        percentile(&lat, 0.99).as_secs_f64() * 1e3,
        lat.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
    );
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
        Prices::default(),
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
    };
    svc.create_quota("root", spec("", "1e9"), Persist::Here, "", false)
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

/// Part 2: over HTTPS against a `bizrq` process, as the API server calls it.
async fn https(o: &Opts) {
    let dir = tempfile::tempdir().unwrap();
    let url = o
        .database_url
        .clone()
        .unwrap_or_else(|| format!("sqlite://{}", dir.path().join("bench.db").display()));
    let leaves = Arc::new(build_tree(&url, o.quotas).await);

    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_bizrq"))
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
            "--standalone",
        ])
        .args(["--database-url", &url])
        .env("BIZRQ_LOG", "warn")
        .env("BIZRQ_ADMIN_PASSWORD", "bench-admin-password")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn bizrq");
    let pid = child.id().unwrap();
    let mut lines =
        tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(child.stdout.take().unwrap()));
    // Lines before it (a generated password on a first start) are skipped.
    let (http_addr, webhook_addr) = loop {
        let line = lines
            .next_line()
            .await
            .unwrap()
            .expect("bizrq exited before it was ready");
        if let Some(addrs) = bizrq::parse_ready_line(&line) {
            break addrs;
        }
    };

    let base = Arc::new(Template::new(&fixture()));
    let endpoint = format!("https://{webhook_addr}/validate/workloads");
    let client = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .pool_max_idle_per_host(o.clients)
        .build()
        .unwrap();
    let counter = Arc::new(AtomicU64::new(0));

    // Paced: `rate` reviews/s spread over the clients; latency is measured
    // from the scheduled send time, so queueing delay is not hidden.
    for (label, paced) in [
        (
            format!("HTTPS paced at {}/s, {} clients", o.rate, o.clients),
            true,
        ),
        (format!("HTTPS flat out, {} clients", o.clients), false),
    ] {
        let deadline = Instant::now() + Duration::from_secs(o.seconds);
        let started = Instant::now();
        let cpu_before = cpu_seconds(pid);
        let mut tasks = tokio::task::JoinSet::new();
        for c in 0..o.clients {
            let (client, endpoint, base, leaves, counter) = (
                client.clone(),
                endpoint.clone(),
                base.clone(),
                leaves.clone(),
                counter.clone(),
            );
            let period = Duration::from_secs_f64(o.clients as f64 / o.rate as f64);
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
                    let n = counter.fetch_add(1, Ordering::Relaxed);
                    let quota = &leaves[(n as usize * 7919) % leaves.len()];
                    let body = base.render(quota, n);
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
                    lat.push(scheduled.elapsed());
                }
                (lat, denied)
            });
        }
        let mut all = Vec::new();
        let mut denied = 0;
        while let Some(r) = tasks.join_next().await {
            let (l, d) = r.unwrap();
            all.extend(l);
            denied += d;
        }
        let ops = all.len();
        report(&label, all, started.elapsed());
        let cpu = cpu_seconds(pid) - cpu_before;
        println!(
            "  server process CPU: {:.0} µs per admission ({:.0} % of one core)",
            cpu * 1e6 / ops.max(1) as f64,
            cpu * 100.0 / started.elapsed().as_secs_f64()
        );
        if denied > 0 {
            println!("  ({denied} denied)");
        }
    }
    let metrics = client
        .get(format!("http://{http_addr}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for l in metrics
        .lines()
        .filter(|l| l.starts_with("bizrq_cas_conflicts_total"))
    {
        println!("  {l}");
    }
    let _ = child.kill().await;
}

fn main() {
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
    pure(&o);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(https(&o));
}
