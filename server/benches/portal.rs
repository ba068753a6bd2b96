//! Portal page benchmark (prints figures; not a timed test):
//!
//!   cargo bench -p bizrq --bench portal                  # a tree of 10,000 quotas
//!   cargo bench -p bizrq --bench portal -- --quotas 2035
//!   cargo test  -p bizrq --bench portal -- --smoke       # small, for CI
//!   cargo bench -p bizrq --bench portal -- --quotas 2035 --soak 600
//!
//! `--soak SECS` then mixes admissions with the heaviest portal requests
//! (docs/limits.md): admissions to their own quotas paced
//! at `--soak-rate` a second (50) for SECS of load, in windows of
//! `--soak-window` seconds (30) each after a quarter of that alone, while
//! `--tenants` owners (4), each owner of one
//! department with `--loops` requests in flight (8), fetch that
//! department's page over a year, its children chart, its budget report
//! as CSV, the tree and the tree's CSV in a loop. It prints admission
//! p50/p99 quiet and loaded, how many admissions were refused and why,
//! the portal's answers (200, 429), and the server's peak RSS. The smoke
//! run does a 4 s soak. The tenants' clients run niced, on threads apart
//! from the admissions' client, as browsers on other machines would
//! (`--load-at-normal-priority`: at the admissions' client's priority).
//!
//! Before the soak it measures the server's memory around each of the
//! heaviest requests alone (a 256-key quota page over a year with 24
//! children, children charts, reports, the tree's CSV): its resident
//! high-water mark over its resident size before (`--no-memory` skips
//! it and the wide quota's year of samples it needs). After the soak it
//! prints the refusals the server counted (`/metrics`).
//!
//! Builds a forest on SQLite (root → departments → teams, every team with
//! 1 to 8 of its 8 GPUs in use), starts the real `bizrq` binary on it,
//! logs in as the admin and as a member of one team, and fetches the pages
//! each of them opens first: `/`, `/tree`, a team's page, a department's
//! page and `/alerts`. For each it prints the median and worst time of the
//! response (the whole body read, over loopback) and its size. The goal
//! (docs/benchmarks.md "Portal pages"): under 50 ms and 200 KB for every page a member
//! opens, with time that follows what the viewer can see, not the forest.
//!
//! Then it starts a second server with the demo's data (`--demo`) and
//! measures its quota pages of acme, the department research and the team
//! nlp the same way (`--no-demo` skips them).
//!
//! Before the numbers it fetches `/healthz` the same way: the floor of a
//! request through the same server, client and machine in this run.

use bizrq::metrics::Metrics;
use bizrq::service::{Persist, Service};
use bizrq::store::sql::SqlStore;
use quota::cash::QosMultipliers;
use quota::object::QuotaSpec;
use quota::KeyConfig;
use std::sync::Arc;
use std::time::{Duration, Instant};

const ADMIN_PASSWORD: &str = "bench-admin-password";
const MEMBER_PASSWORD: &str = "bench-member-password";

fn arg<T: std::str::FromStr>(name: &str) -> Option<T> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
}

fn list(pairs: &[(&str, String)]) -> quota::ResourceList {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.parse().unwrap()))
        .collect()
}

/// root → √n departments → teams; returns (a department, one of its teams).
async fn build_forest(url: &str, quotas: usize) -> (String, String) {
    let store = SqlStore::connect(url).await.expect("database");
    let svc = Service::new(
        Arc::new(store.clone()),
        KeyConfig::default(),
        QosMultipliers::default(),
        Arc::new(Metrics::default()),
    );
    let t = Instant::now();
    let hard = |n: i64| {
        list(&[
            ("requests.nvidia.com/gpu", n.to_string()),
            ("requests.nvidia.com/gpu.A100", n.to_string()),
            ("requests.cpu", (n * 8).to_string()),
            ("requests.memory", format!("{}Gi", n * 64)),
            ("cash/requests.nvidia.com/gpu", (n * 720).to_string()),
            ("pods", (n * 4).to_string()),
        ])
    };
    let spec = |parent: &str, n: i64| QuotaSpec {
        parent: parent.into(),
        hard: hard(n),
        max: Default::default(),
        budgets: Default::default(),
        queueing: Default::default(),
        fair_sharing: Default::default(),
        idle: None,
    };
    let depts = ((quotas as f64).sqrt() as usize).max(1);
    let per_team = 8;
    let root = (depts * depts * per_team) as i64;
    svc.create_quota("root", spec("", root), Persist::Here, "", false)
        .await
        .unwrap();
    let mut made = 1;
    let mut teams = Vec::new();
    'outer: for d in 0..depts {
        let dept = format!("dept-{d:03}");
        svc.create_quota(
            &dept,
            spec("root", (depts * per_team) as i64),
            Persist::Here,
            "",
            false,
        )
        .await
        .unwrap();
        made += 1;
        for tm in 0..depts {
            if made >= quotas {
                break 'outer;
            }
            let team = format!("team-{d:03}-{tm:03}");
            svc.create_quota(
                &team,
                spec(&dept, per_team as i64),
                Persist::Here,
                "",
                false,
            )
            .await
            .unwrap();
            teams.push(team);
            made += 1;
        }
    }
    // Every team runs something: 1 to 8 of its 8 cards.
    for (i, team) in teams.iter().enumerate() {
        let n = (i % per_team) as i64 + 1;
        let used = list(&[
            ("requests.nvidia.com/gpu", n.to_string()),
            ("requests.nvidia.com/gpu.A100", n.to_string()),
            ("requests.cpu", (n * 6).to_string()),
            ("requests.memory", format!("{}Gi", n * 40)),
            ("pods", n.to_string()),
        ]);
        svc.update_status(team, false, move |q| {
            q.status.used = used.clone();
            q.status.self_used = used.clone();
            Ok((true, ()))
        })
        .await
        .unwrap();
    }
    let now = bizrq::util::now_ms();
    // Users exist, so the server bootstraps no admin of its own.
    let hash = password_auth::generate_hash(ADMIN_PASSWORD);
    store.create_user("admin", &hash, true, now).await.unwrap();
    let hash = password_auth::generate_hash(MEMBER_PASSWORD);
    let member = store
        .create_user("member", &hash, false, now)
        .await
        .unwrap();
    let team = teams[teams.len() / 2].clone();
    store
        .set_binding(member.id, &team, bizrq::authz::Role::Member, now)
        .await
        .unwrap();
    store.close().await;
    println!(
        "forest: {made} quotas ({} teams, each with 1–8 cards in use) built in {:.1} s",
        teams.len(),
        t.elapsed().as_secs_f64()
    );
    let dept = team.rsplit_once('-').unwrap().0.replacen("team", "dept", 1);
    (dept, team)
}

/// A browser of one: the session cookie, picked up at login.
struct Client {
    http: reqwest::Client,
    base: String,
    cookie: String,
}

impl Client {
    async fn login(base: &str, user: &str, password: &str) -> Client {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let page = http.get(format!("{base}/login")).send().await.unwrap();
        let cookie = named_cookie(&page, bizrq::portal::auth::LOGIN_COOKIE)
            .expect("the login form's cookie on /login");
        let body = page.text().await.unwrap();
        let csrf = body
            .split("name=\"csrf\" value=\"")
            .nth(1)
            .and_then(|s| s.split('"').next())
            .expect("a CSRF field on /login")
            .to_string();
        let res = http
            .post(format!("{base}/login"))
            .header("cookie", &cookie)
            .form(&[("username", user), ("password", password), ("csrf", &csrf)])
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 303, "login as {user}");
        let cookie = session_cookie(&res).expect("a session cookie at login");
        Client {
            http,
            base: base.to_string(),
            cookie,
        }
    }

    /// Time to the whole body, and its size.
    async fn fetch(&self, path: &str) -> (Duration, usize) {
        let t = Instant::now();
        let res = self
            .http
            .get(format!("{}{path}", self.base))
            .header("cookie", &self.cookie)
            .send()
            .await
            .unwrap();
        let status = res.status();
        let body = res.bytes().await.unwrap();
        assert!(status.is_success(), "{path}: {status}");
        (t.elapsed(), body.len())
    }
}

/// The session's own cookie: a sign-in also sets the device cookie
/// (`bizrq_device`), which names no session.
fn session_cookie(res: &reqwest::Response) -> Option<String> {
    named_cookie(res, bizrq::portal::auth::SESSION_COOKIE)
}

fn named_cookie(res: &reqwest::Response, name: &str) -> Option<String> {
    let name = format!("{name}=");
    res.headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|v| v.split(';').next())
        .find(|c| c.starts_with(&name))
        .map(str::to_string)
}

struct Row {
    who: &'static str,
    path: String,
    median: Duration,
    worst: Duration,
    bytes: usize,
}

async fn measure(c: &Client, who: &'static str, path: &str, runs: usize) -> Row {
    c.fetch(path).await; // warm: the first read of a page fills caches
    let mut times = Vec::with_capacity(runs);
    let mut bytes = 0;
    for _ in 0..runs {
        let (t, n) = c.fetch(path).await;
        times.push(t);
        bytes = n;
    }
    times.sort();
    Row {
        who,
        path: path.to_string(),
        median: times[times.len() / 2],
        worst: *times.last().unwrap(),
        bytes,
    }
}

/// The real `bizrq` on the database at `url` (`BIZRQ_BENCH_BIN`, else this
/// build's), with `env` set: the child and its HTTP and webhook addresses.
async fn start_server(
    url: &str,
    extra: &[(&str, &str)],
) -> (
    tokio::process::Child,
    std::net::SocketAddr,
    std::net::SocketAddr,
) {
    let bin = std::env::var("BIZRQ_BENCH_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_bizrq").to_string());
    let mut cmd = tokio::process::Command::new(bin);
    cmd.args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--webhook-listen",
        "127.0.0.1:0",
        "--probe-listen",
        "127.0.0.1:0",
        "--standalone",
        "--database-url",
        url,
    ])
    .env("BIZRQ_LOG", "warn")
    .stdout(std::process::Stdio::piped())
    .kill_on_drop(true);
    for (k, v) in extra {
        if k.starts_with("--") {
            cmd.arg(k);
        } else {
            cmd.env(k, v);
        }
    }
    let mut child = cmd.spawn().expect("spawn bizrq");
    let mut lines =
        tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(child.stdout.take().unwrap()));
    let (http_addr, webhook_addr) = loop {
        let line = lines
            .next_line()
            .await
            .unwrap()
            .expect("the server exited before it was ready");
        if let Some(addrs) = bizrq::parse_ready_line(&line) {
            break addrs;
        }
    };
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, http_addr, webhook_addr)
}

/// The demo's quota pages as its admin opens them (`--demo`: acme, its
/// department research and research's team nlp, with 30 days of hourly
/// samples): the pages the 200 KB goal is about for a department
/// (docs/benchmarks.md "Portal pages"). `--no-demo` skips them.
async fn demo_pages(runs: usize) -> Vec<Row> {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("demo.db").display());
    let (mut child, http_addr, _) = start_server(
        &url,
        &[
            ("--demo", ""),
            ("BIZRQ_ADMIN_PASSWORD", ADMIN_PASSWORD),
            ("BIZRQ_DEMO_PASSWORD", ADMIN_PASSWORD),
        ],
    )
    .await;
    let admin = Client::login(&format!("http://{http_addr}"), "admin", ADMIN_PASSWORD).await;
    let mut rows = Vec::new();
    for path in ["/quotas/acme", "/quotas/research", "/quotas/nlp"] {
        let mut r = measure(&admin, "admin", path, runs).await;
        r.path = format!("{path} (demo)");
        rows.push(r);
    }
    let _ = child.kill().await;
    rows
}

/// Rewrites one team's status after another, `per_s` a second (each a
/// new version, as a charge makes), from its own connection.
async fn write_steadily(url: String, per_s: u64) {
    use bizrq::store::QuotaStore;
    let store = SqlStore::connect(&url).await.expect("database");
    let teams: Vec<String> = store
        .stamps()
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .filter(|n| n.starts_with("team-"))
        .collect();
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / per_s.max(1)));
    for name in teams.iter().cycle() {
        tick.tick().await;
        if let Ok(Some(current)) = store.get(name).await {
            let _ = store.replace_status(&current, &current.quota.status).await;
        }
    }
}

fn main() {
    let smoke = std::env::args().any(|a| a == "--smoke");
    let quotas: usize = arg("--quotas").unwrap_or(if smoke { 120 } else { 10_000 });
    let runs: usize = arg("--runs").unwrap_or(if smoke { 3 } else { 20 });
    println!(
        "portal page benchmark ({} build{})",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        if smoke { ", smoke run" } else { "" }
    );
    bizrq::tls::install_crypto_provider();
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(run(quotas, runs, smoke.then_some(4)));
}

async fn run(quotas: usize, runs: usize, smoke_soak: Option<u64>) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("portal.db").display()
    );
    let (dept, team) = build_forest(&url, quotas).await;
    let soak_secs: Option<u64> = arg("--soak").or(smoke_soak);
    let tenants: usize = arg("--tenants").unwrap_or(4);
    if soak_secs.is_some() {
        soak::prepare(&url, tenants).await;
    }
    let (mut child, http_addr, webhook_addr) = start_server(&url, &[]).await;
    let base = format!("http://{http_addr}");
    let admin = Client::login(&base, "admin", ADMIN_PASSWORD).await;
    let member = Client::login(&base, "member", MEMBER_PASSWORD).await;

    let floor = {
        let http = reqwest::Client::new();
        let mut t = Vec::new();
        for _ in 0..runs.max(5) {
            let s = Instant::now();
            http.get(format!("{base}/healthz"))
                .send()
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap();
            t.push(s.elapsed());
        }
        t.sort();
        t[t.len() / 2]
    };
    let mut rows = Vec::new();
    for (who, c) in [("admin", &admin), ("member", &member)] {
        for path in [
            "/".to_string(),
            "/tree".to_string(),
            format!("/quotas/{team}"),
            "/alerts".to_string(),
        ] {
            rows.push(measure(c, who, &path, runs).await);
        }
    }
    rows.push(measure(&admin, "admin", &format!("/quotas/{dept}"), runs).await);
    rows.push(measure(&admin, "admin", "/tree?q=team-00", runs).await);
    if !std::env::args().any(|a| a == "--no-demo") {
        rows.extend(demo_pages(runs).await);
    }

    // The same while another replica writes `writes` quotas a second (as
    // admissions do): the admin's forest is kept between requests, so each
    // request reads again what was written since the last.
    let writes: u64 = arg("--writes").unwrap_or(50);
    let writer = tokio::spawn(write_steadily(url.clone(), writes));
    for path in ["/", "/tree"] {
        let mut r = measure(&admin, "admin", path, runs).await;
        r.path = format!("{path} ({writes} writes/s)");
        rows.push(r);
    }
    writer.abort();

    println!(
        "\n{quotas} quotas; {runs} fetches each; floor (GET /healthz) median {:.2} ms\n",
        floor.as_secs_f64() * 1e3
    );
    println!(
        "{:<7} {:<28} {:>10} {:>10} {:>10}",
        "viewer", "page", "median", "worst", "size"
    );
    for r in &rows {
        println!(
            "{:<7} {:<28} {:>7.1} ms {:>7.1} ms {:>7.1} KB",
            r.who,
            r.path,
            r.median.as_secs_f64() * 1e3,
            r.worst.as_secs_f64() * 1e3,
            r.bytes as f64 / 1024.0
        );
    }
    if let Some(secs) = soak_secs {
        let setup = soak::Setup {
            base: base.clone(),
            probe: format!("http://{http_addr}"),
            webhook: format!("https://{webhook_addr}"),
            pid: child.id().expect("the server's pid"),
            secs,
            tenants,
            loops: arg("--loops").unwrap_or(8),
            rate: arg("--soak-rate").unwrap_or(50),
            window: arg("--soak-window").unwrap_or(30),
        };
        if soak::measure_memory() {
            soak::memory(&setup).await;
        }
        soak::run(setup).await;
    }
    let _ = child.kill().await;
}

/// `--soak`: admissions beside the heaviest portal requests.
mod soak {
    use super::*;
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Mutex;

    pub const PASSWORD: &str = "bench-tenant-password";
    /// Quotas the admissions charge, apart from the forest.
    const ADMIT_QUOTAS: usize = 16;

    /// Before the server starts: the admissions' quotas, one owner per
    /// department (`tenant-N` owns `dept-00N`), and two days of samples of
    /// each such department and its teams every 10 minutes (what a year's
    /// charts read of them).
    pub async fn prepare(url: &str, tenants: usize) {
        use bizrq::store::QuotaStore;
        let store = SqlStore::connect(url).await.expect("database");
        let svc = Service::new(
            Arc::new(store.clone()),
            KeyConfig::default(),
            QosMultipliers::default(),
            Arc::new(Metrics::default()),
        );
        for i in 0..ADMIT_QUOTAS {
            let spec = QuotaSpec {
                hard: list(&[
                    ("requests.nvidia.com/gpu", "10000000".into()),
                    ("pods", "10000000".into()),
                ]),
                ..Default::default()
            };
            svc.create_quota(&format!("admit-{i:02}"), spec, Persist::Here, "", false)
                .await
                .unwrap();
        }
        let now = bizrq::util::now_ms();
        let names: Vec<String> = store
            .stamps()
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.name)
            .collect();
        for t in 0..tenants {
            let hash = password_auth::generate_hash(PASSWORD);
            let user = store
                .create_user(&format!("tenant-{t}"), &hash, false, now)
                .await
                .unwrap();
            let dept = format!("dept-{t:03}");
            store
                .set_binding(user.id, &dept, bizrq::authz::Role::Owner, now)
                .await
                .unwrap();
            let mine: Vec<&String> = names
                .iter()
                .filter(|n| **n == dept || n.starts_with(&format!("team-{t:03}-")))
                .collect();
            let got = store
                .get_many(&mine.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .await
                .unwrap();
            for step in 0..288i64 {
                let at = now - (288 - step) * 600_000;
                let quotas: Vec<quota::Quota> = got
                    .iter()
                    .map(|v| {
                        let mut q = v.quota.clone();
                        let gpus = q
                            .spec
                            .hard
                            .get("requests.nvidia.com/gpu")
                            .copied()
                            .unwrap_or_default();
                        let n = gpus.nanos() / quota::quantity::NANO;
                        let used =
                            quota::Quantity::from_units(((step as i128 * 7) % n.max(1)) as i64);
                        q.status.used.insert("requests.nvidia.com/gpu".into(), used);
                        // What runs: a sample's use (`quota::rollup::sampled_used`).
                        q.status
                            .self_used
                            .insert("requests.nvidia.com/gpu".into(), used);
                        q.status.used.insert(
                            "cash/requests.nvidia.com/gpu".into(),
                            quota::Quantity::from_units(step),
                        );
                        q
                    })
                    .collect();
                store.record_samples(at, &quotas).await.unwrap();
            }
        }
        if measure_memory() {
            wide(&store, &svc, now).await;
        }
        ledger(&store, &names, tenants, now).await;
        store.close().await;
    }

    /// Whether to measure the memory of the heaviest requests before the
    /// soak (not with `--no-memory`, which also skips building their data).
    pub fn measure_memory() -> bool {
        !std::env::args().any(|a| a == "--no-memory")
    }

    /// Keys of the wide quota: the most a quota may hold.
    const WIDE_KEYS: usize = quota::tree::MAX_KEYS;
    /// Children of the wide quota: as many as one chart reads.
    const WIDE_CHILDREN: usize = quota::series::MAX_CHART_CHILDREN;
    /// Samples of the wide quota over the year, and of each of its
    /// children (the smoke run: a few, so that CI only checks it works).
    fn wide_samples() -> (i64, i64) {
        if std::env::args().any(|a| a == "--smoke") {
            (60, 12)
        } else {
            (1_500, 365)
        }
    }

    /// `wide`: a quota of `WIDE_KEYS` keys owned by `wide-owner`, with
    /// `WIDE_CHILDREN` children of as many keys, and a year of samples of
    /// every key (`wide_samples`) (the heaviest page and children chart a tenant can ask
    /// for; a quota keeps at most about 5,700 samples, so this is about a
    /// quarter of the worst case for the quota and 1/16 for each child).
    async fn wide(store: &SqlStore, svc: &Service, now: i64) {
        let keys = |v: i64| -> quota::ResourceList {
            (0..WIDE_KEYS)
                .map(|i| {
                    (
                        format!("limits.cpu.m{i:05}"),
                        quota::Quantity::from_units(v),
                    )
                })
                .collect()
        };
        let spec = |parent: &str, v: i64| QuotaSpec {
            parent: parent.into(),
            hard: keys(v),
            ..Default::default()
        };
        svc.create_quota("wide", spec("", 10_000), Persist::Here, "", false)
            .await
            .unwrap();
        let kids: Vec<String> = (0..WIDE_CHILDREN).map(|i| format!("wide-{i:02}")).collect();
        for k in &kids {
            svc.create_quota(k, spec("wide", 100), Persist::Here, "", false)
                .await
                .unwrap();
        }
        let hash = password_auth::generate_hash(PASSWORD);
        let user = store
            .create_user("wide-owner", &hash, false, now)
            .await
            .unwrap();
        store
            .set_binding(user.id, "wide", bizrq::authz::Role::Owner, now)
            .await
            .unwrap();
        let year = 365 * 86_400_000i64;
        let sampled = |name: &str, step: i64, hard: i64| {
            let mut q = quota::Quota::new(name, spec("", hard));
            q.status.hard = q.spec.hard.clone();
            q.status.used = keys(step % hard);
            q.status.self_used = keys(step % hard);
            q
        };
        let (samples, child_samples) = wide_samples();
        for step in 0..samples {
            let at = now - year + step * (year / samples);
            let mut quotas = vec![sampled("wide", step, 10_000)];
            // The children's samples, spread over the same year.
            if step % (samples / child_samples) == 0 {
                quotas.extend(kids.iter().map(|k| sampled(k, step, 100)));
            }
            store.record_samples(at, &quotas).await.unwrap();
        }
        // The last day a sample a minute (the most the sampler keeps), so
        // that the 24 h page draws the 1,441 points a series it can hold;
        // the children one every quarter hour.
        let minute = 60_000i64;
        for step in 0..day_samples() {
            let at = now - 86_400_000 + step * minute;
            let mut quotas = vec![sampled("wide", step, 10_000)];
            if step % 15 == 0 {
                quotas.extend(kids.iter().map(|k| sampled(k, step, 100)));
            }
            store.record_samples(at, &quotas).await.unwrap();
        }
    }

    /// Samples of the wide quota's last day (a minute apart; the smoke run
    /// a few).
    fn day_samples() -> i64 {
        if std::env::args().any(|a| a == "--smoke") {
            30
        } else {
            1_440
        }
    }

    /// Ledger entries for every tenant's department: each team spends
    /// every hour for the last 30 days (what a report of a month reads).
    async fn ledger(store: &SqlStore, names: &[String], tenants: usize, now: i64) {
        use quota::object::budgets::{Entry, Reason};
        let hour = 3_600_000i64;
        let until = now / hour * hour;
        for t in 0..tenants {
            let teams: Vec<&String> = names
                .iter()
                .filter(|n| n.starts_with(&format!("team-{t:03}-")))
                .collect();
            let mut batch = Vec::new();
            for h in 0..(30 * 24) {
                let start = until - (30 * 24 - h) * hour;
                for team in &teams {
                    batch.push(Entry {
                        quota: team.to_string(),
                        key: "cash/requests.nvidia.com/gpu".into(),
                        workload: format!("batch/Job/{team}/train"),
                        namespace: team.to_string(),
                        model: None,
                        qos: None,
                        user: Some("bench".into()),
                        start_ms: start,
                        end_ms: start + hour,
                        amount: 1_000_000_000_000,
                        reason: Reason::Accrual,
                        note: String::new(),
                    });
                }
                if batch.len() >= 2_000 {
                    store.append_ledger(&batch).await.unwrap();
                    batch.clear();
                }
            }
            store.append_ledger(&batch).await.unwrap();
        }
    }

    /// The server's resident memory around one request alone: its peak
    /// (`VmHWM`, reset before by `clear_refs`) over its resident size
    /// before, the most of `runs` requests. What the allocator had already
    /// kept from earlier requests is not counted again, so the first
    /// request of a kind shows the most.
    async fn memory_of(pid: u32, c: &Client, path: &str, runs: usize) -> (u64, u64, u16) {
        let mut most = 0;
        let mut before = 0;
        let mut status = 0;
        for _ in 0..runs {
            let _ = std::fs::write(format!("/proc/{pid}/clear_refs"), "5");
            let base = kib(pid, "VmRSS:");
            let r = c
                .http
                .get(format!("{}{path}", c.base))
                .header("cookie", &c.cookie)
                .send()
                .await
                .unwrap();
            status = r.status().as_u16();
            let _ = r.bytes().await;
            let peak = kib(pid, "VmHWM:");
            if peak.saturating_sub(base) >= most {
                most = peak.saturating_sub(base);
                before = base;
            }
        }
        (most, before, status)
    }

    /// Memory of the heaviest requests, one at a time on an idle server.
    pub async fn memory(s: &Setup) {
        let day = 86_400_000;
        let today = bizrq::util::now_ms() / day * day;
        let date = |ms: i64| quota::time::format_rfc3339(ms)[..10].to_string();
        let (from, to) = (date(today - 30 * day), date(today - day));
        let wide = Client::login(&s.base, "wide-owner", PASSWORD).await;
        let tenant = Client::login(&s.base, "tenant-0", PASSWORD).await;
        println!(
            "\nmemory per request (server RSS high-water over RSS before, KiB; alone, the most of 3):"
        );
        let asks = [
            (&wide, format!("/quotas/wide?range=1y ({WIDE_KEYS} keys, {WIDE_CHILDREN} children)"), "/quotas/wide?range=1y".to_string()),
            (&wide, format!("/quotas/wide?range=24h ({WIDE_KEYS} keys, {WIDE_CHILDREN} children)"), "/quotas/wide?range=24h".to_string()),
            (&wide, "children chart 1y of wide".to_string(), "/api/v1/quotas/wide/samples?key=limits.cpu.m00000&range=1y&chart=children".to_string()),
            (&tenant, "children chart 1y of dept-000".to_string(), "/api/v1/quotas/dept-000/samples?key=requests.nvidia.com/gpu&range=1y&chart=children".to_string()),
            (&tenant, "report of dept-000, 30 days by child".to_string(), format!("/reports.csv?subtree=dept-000&by=child&bucket=day&from={from}&to={to}")),
            (&tenant, "report of dept-000, 30 days by quota (JSON)".to_string(), format!("/api/v1/reports?subtree=dept-000&by=quota&bucket=day&from={from}&to={to}")),
            (&tenant, "/tree.csv (a department)".to_string(), "/tree.csv".to_string()),
            (&wide, "/tree.csv (wide)".to_string(), "/tree.csv".to_string()),
        ];
        for (c, what, path) in asks {
            let (kib_most, before, status) = memory_of(s.pid, c, &path, 3).await;
            println!(
                "  {what:<52} {status}  +{:>8.1} MiB over {:>6.1} MiB",
                kib_most as f64 / 1024.0,
                before as f64 / 1024.0
            );
        }
    }

    pub struct Setup {
        pub base: String,
        /// Where `/metrics` answers.
        pub probe: String,
        pub webhook: String,
        pub pid: u32,
        pub secs: u64,
        pub tenants: usize,
        pub loops: usize,
        pub rate: u64,
        /// Seconds of load per window (`--soak-window`).
        pub window: u64,
    }

    /// What the admissions got.
    #[derive(Default)]
    struct Admitted {
        latencies: Vec<Duration>,
        allowed: usize,
        /// Denied for quota (the only refusal the soak expects).
        quota: usize,
        /// Denied or failed for anything else, by reason.
        other: BTreeMap<String, usize>,
        /// Admissions over `SLOW`: (phase, seconds since the soak began
        /// when it was sent, how long it took), to be laid beside the
        /// server's log and a `perf sched` record of the same instant.
        slow: Vec<(String, f64, Duration)>,
    }

    /// An admission this slow is named with its instant (`Admitted::slow`).
    const SLOW: Duration = Duration::from_millis(250);

    /// When the soak began: the instants `Admitted::slow` gives.
    static SOAK_START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

    impl Admitted {
        fn absorb(&mut self, o: Admitted) {
            self.latencies.extend(o.latencies);
            self.allowed += o.allowed;
            self.quota += o.quota;
            self.slow.extend(o.slow);
            for (why, n) in o.other {
                *self.other.entry(why).or_insert(0) += n;
            }
        }
    }

    fn kib(pid: u32, field: &str) -> u64 {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix(field))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            })
            .unwrap_or(0)
    }

    fn review_template() -> serde_json::Value {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        let read = |f: &str| -> serde_json::Value {
            serde_json::from_str(&std::fs::read_to_string(dir.join(f)).unwrap()).unwrap()
        };
        let mut r = read("deployment-create.json");
        r["request"]["object"] = read("deployment.json");
        r
    }

    /// Admissions paced at `rate` a second for `secs`, each a CREATE of a
    /// one-card Deployment in one of the admission quotas.
    async fn admit(s: &Setup, client: &reqwest::Client, secs: f64, phase: &str) -> Admitted {
        let base = review_template();
        let out = Arc::new(Mutex::new(Admitted::default()));
        let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / s.rate.max(1)));
        let until = Instant::now() + Duration::from_secs_f64(secs);
        let mut n = 0u64;
        let mut sent = Vec::new();
        while Instant::now() < until {
            tick.tick().await;
            n += 1;
            let mut r = base.clone();
            let name = format!("soak-{phase}-{n}");
            r["request"]["uid"] = format!("uid-{phase}-{n}").into();
            r["request"]["name"] = name.clone().into();
            r["request"]["object"]["metadata"]["name"] = name.into();
            r["request"]["object"]["metadata"]["labels"]["biz.group.resource.quota"] =
                format!("admit-{:02}", n as usize % ADMIT_QUOTAS).into();
            r["request"]["object"]["spec"]["replicas"] = 1.into();
            let (client, url, out) = (
                client.clone(),
                format!("{}/validate/workloads", s.webhook),
                out.clone(),
            );
            let phase = phase.to_string();
            sent.push(tokio::spawn(async move {
                let t = Instant::now();
                let res = client.post(url).json(&r).send().await;
                let verdict = match res {
                    Ok(res) if res.status().is_success() => {
                        match res.json::<serde_json::Value>().await {
                            Ok(v) => Ok(v["response"].clone()),
                            Err(e) => Err(format!("body: {e}")),
                        }
                    }
                    Ok(res) => Err(format!("HTTP {}", res.status())),
                    Err(e) if e.is_timeout() => Err("timeout".into()),
                    Err(e) => Err(format!("error: {e}")),
                };
                let took = t.elapsed();
                let mut o = out.lock().unwrap();
                o.latencies.push(took);
                if took > SLOW {
                    let at = t.duration_since(*SOAK_START.get_or_init(Instant::now));
                    o.slow.push((phase, at.as_secs_f64(), took));
                }
                match verdict {
                    Ok(v) if v["allowed"] == true => o.allowed += 1,
                    Ok(v) => {
                        let m = v["status"]["message"].as_str().unwrap_or("").to_string();
                        if v["status"]["reason"] == "Forbidden" && m.contains(" left of ") {
                            o.quota += 1;
                        } else {
                            *o.other.entry(m.chars().take(80).collect()).or_insert(0) += 1;
                        }
                    }
                    Err(e) => *o.other.entry(e).or_insert(0) += 1,
                }
            }));
        }
        for t in sent {
            let _ = t.await;
        }
        Arc::try_unwrap(out).ok().unwrap().into_inner().unwrap()
    }

    /// The wall clock when the soak began (seconds since 1970), so that a
    /// slow admission's instant can be found in a `perf sched` record
    /// (whose times are the kernel's monotonic clock: `sched-delays.py`
    /// prints the offset) and in the server's log.
    static SOAK_UNIX: std::sync::OnceLock<f64> = std::sync::OnceLock::new();

    fn unix_at(since_start: f64) -> f64 {
        SOAK_UNIX.get().copied().unwrap_or(0.0) + since_start
    }

    fn pct(sorted: &[Duration], p: f64) -> f64 {
        if sorted.is_empty() {
            return 0.0;
        }
        sorted[((sorted.len() as f64 - 1.0) * p).round() as usize].as_secs_f64() * 1e3
    }

    fn line(label: &str, a: &mut Admitted) -> f64 {
        a.latencies.sort();
        let p99 = pct(&a.latencies, 0.99);
        println!(
            "{label:<8} {:>7} admissions  p50 {:>8.2} ms  p99 {:>8.2} ms  max {:>8.2} ms  allowed {}  denied for quota {}  refused otherwise {}",
            a.latencies.len(),
            pct(&a.latencies, 0.5),
            p99,
            a.latencies.last().map_or(0.0, |d| d.as_secs_f64() * 1e3),
            a.allowed,
            a.quota,
            a.other.values().sum::<usize>()
        );
        for (why, n) in &a.other {
            println!("         refused {n}×: {why}");
        }
        a.slow.sort_by_key(|x| std::cmp::Reverse(x.2));
        for (phase, at, took) in a.slow.iter().take(10) {
            println!(
                "         slow: {:>8.1} ms, sent {at:.3} s into the soak ({phase}; unix {:.3})",
                took.as_secs_f64() * 1e3,
                unix_at(*at)
            );
        }
        if a.slow.len() > 10 {
            println!(
                "         slow: {} more over {} ms",
                a.slow.len() - 10,
                SLOW.as_millis()
            );
        }
        p99
    }

    pub async fn run(s: Setup) {
        let client = reqwest::Client::builder()
            .danger_accept_invalid_certs(true)
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap();
        // Quiet and loaded windows alternate (`--soak-window`, 30 s of load
        // then a quarter of that alone), so that whatever else the machine
        // runs meanwhile weighs on both alike: the comparison is of the
        // portal's load, not of the hour's.
        let window = (s.window as f64).min(s.secs as f64).max(1.0);
        let quiet_window = (window / 4.0).max(1.0);
        println!(
            "\nsoak: admissions paced at {}/s for {} s beside {} tenants × {} heavy requests in flight, in windows of {window:.0} s, each after {quiet_window:.0} s alone",
            s.rate, s.secs, s.tenants, s.loops
        );
        let rss_before = kib(s.pid, "VmRSS:");
        SOAK_START.get_or_init(Instant::now);
        SOAK_UNIX.get_or_init(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs_f64()
        });

        let stop = Arc::new(AtomicBool::new(false));
        // The load waits while `paused`; `busy` counts its requests in flight.
        let paused = Arc::new(AtomicBool::new(true));
        let busy = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let answers: Arc<Mutex<BTreeMap<(String, u16), usize>>> = Default::default();
        let peak_rss = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let watch = {
            let (stop, peak, pid) = (stop.clone(), peak_rss.clone(), s.pid);
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    peak.fetch_max(kib(pid, "VmRSS:"), Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            })
        };
        // The tenants' clients run on a runtime of their own, niced as the
        // server's portal is (`--load-at-normal-priority`: beside the
        // admissions' client, at its priority): in a cluster they are
        // browsers on other machines, and here their reading and decoding
        // of pages would otherwise take the CPU the admissions' client
        // needs to send and time its reviews.
        let niced = !std::env::args().any(|a| a == "--load-at-normal-priority");
        let load_rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("soak-load")
            .on_thread_start(move || {
                if niced {
                    bizrq::heavy::lower_priority();
                }
            })
            .enable_all()
            .build()
            .unwrap();
        let mut load = Vec::new();
        let day = 86_400_000;
        let today = bizrq::util::now_ms() / day * day;
        let date = |ms: i64| quota::time::format_rfc3339(ms)[..10].to_string();
        let (from, to) = (date(today - 30 * day), date(today - day));
        for t in 0..s.tenants {
            let (base, user) = (s.base.clone(), format!("tenant-{t}"));
            let c = Arc::new(
                load_rt
                    .spawn(async move { Client::login(&base, &user, PASSWORD).await })
                    .await
                    .unwrap(),
            );
            let dept = format!("dept-{t:03}");
            let paths = [
                ("page", format!("/quotas/{dept}?range=1y")),
                (
                    "chart",
                    format!("/api/v1/quotas/{dept}/samples?key=requests.nvidia.com/gpu&range=1y&chart=children"),
                ),
                (
                    "report",
                    // Whole days: the ledger keeps older entries per hour or day.
                    format!("/reports.csv?subtree={dept}&by=child&bucket=day&from={from}&to={to}"),
                ),
                ("tree", "/tree".to_string()),
                ("tree.csv", "/tree.csv".to_string()),
            ];
            for l in 0..s.loops {
                let (c, stop, answers) = (c.clone(), stop.clone(), answers.clone());
                let (paused, busy) = (paused.clone(), busy.clone());
                let paths = paths.clone();
                load.push(load_rt.spawn(async move {
                    let mut i = l;
                    while !stop.load(Ordering::Relaxed) {
                        if paused.load(Ordering::Relaxed) {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            continue;
                        }
                        busy.fetch_add(1, Ordering::Relaxed);
                        let (what, path) = &paths[i % paths.len()];
                        i += 1;
                        let status = match c
                            .http
                            .get(format!("{}{path}", c.base))
                            .header("cookie", &c.cookie)
                            .send()
                            .await
                        {
                            Ok(r) => {
                                let st = r.status().as_u16();
                                let _ = r.bytes().await;
                                st
                            }
                            Err(_) => 0,
                        };
                        busy.fetch_sub(1, Ordering::Relaxed);
                        *answers
                            .lock()
                            .unwrap()
                            .entry((what.to_string(), status))
                            .or_insert(0) += 1;
                        if status == 429 {
                            // As a client that honours Retry-After would,
                            // but sooner: the load stays at the caps.
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                    }
                }));
            }
        }
        let (mut quiet, mut loaded) = (Admitted::default(), Admitted::default());
        let (mut round, mut loaded_secs) = (0, 0.0);
        while loaded_secs < s.secs as f64 - 0.5 {
            round += 1;
            // Alone: once the load's last request has been answered (the
            // server may still be drawing an abandoned one; that counts
            // against the quiet figure, never for it).
            paused.store(true, Ordering::Relaxed);
            let drained = Instant::now();
            while busy.load(Ordering::Relaxed) > 0 && drained.elapsed() < Duration::from_secs(30) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            quiet.absorb(admit(&s, &client, quiet_window, &format!("quiet{round}")).await);
            paused.store(false, Ordering::Relaxed);
            let secs = window.min(s.secs as f64 - loaded_secs);
            loaded.absorb(admit(&s, &client, secs, &format!("loaded{round}")).await);
            loaded_secs += secs;
        }
        stop.store(true, Ordering::Relaxed);
        for t in load {
            let _ = t.await;
        }
        load_rt.shutdown_background();
        let _ = watch.await;

        println!();
        let q99 = line("quiet", &mut quiet);
        let l99 = line("loaded", &mut loaded);
        println!(
            "p99 loaded / quiet: {:.2}× (goal: under 2×)",
            l99 / q99.max(1e-9)
        );
        println!("portal answers during the soak (what, status: count; 0 = no answer):");
        for ((what, status), n) in answers.lock().unwrap().iter() {
            println!("  {what:<9} {status:>3}: {n}");
        }
        let metrics = reqwest::get(format!("{}/metrics", s.probe))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        println!(
            "refusals the server counted (bizrq_*_refused_total, body budget, connections closed):"
        );
        // Where the slow admissions' time went, as the server measured it:
        // the whole review (`admission_duration_seconds`, from the
        // handler's start) and the service's decision and durable write
        // (`admission_commit_duration_seconds`, by path). A slow
        // admission the server did not see was slow outside it: the
        // connection, TLS, the client.
        println!(
            "admissions the server timed (count within 0.2048 s, within 1.6384 s, and in all):"
        );
        for l in metrics.lines().filter(|l| {
            (l.starts_with("bizrq_admission_duration_seconds_bucket")
                || l.starts_with("bizrq_admission_commit_duration_seconds_bucket"))
                && (l.contains("le=\"0.2048\"")
                    || l.contains("le=\"1.6384\"")
                    || l.contains("le=\"+Inf\""))
        }) {
            println!("  {l}");
        }
        for l in metrics.lines().filter(|l| {
            !l.starts_with('#')
                && (l.contains("_refused_total")
                    || l.starts_with("bizrq_body_budget_exhausted_total")
                    || l.starts_with("bizrq_connections_closed_total"))
        }) {
            println!("  {l}");
        }
        let hwm = kib(s.pid, "VmHWM:");
        println!(
            "server RSS: {} MiB before, {} MiB peak while loaded (sampled), {} MiB high-water mark (goal: under 1,024 MiB)",
            rss_before / 1024,
            peak_rss.load(Ordering::Relaxed) / 1024,
            hwm / 1024
        );
    }
}
