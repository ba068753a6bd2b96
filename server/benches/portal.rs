//! Portal page benchmark (prints figures; not a timed test):
//!
//!   cargo bench -p bizrq --bench portal                  # a tree of 10,000 quotas
//!   cargo bench -p bizrq --bench portal -- --quotas 2035
//!   cargo test  -p bizrq --bench portal -- --smoke       # small, for CI
//!
//! Builds a forest on SQLite (root → departments → teams, every team with
//! 1 to 8 of its 8 GPUs in use), starts the real `bizrq` binary on it,
//! logs in as the admin and as a member of one team, and fetches the pages
//! each of them opens first: `/`, `/tree`, a team's page, a department's
//! page and `/alerts`. For each it prints the median and worst time of the
//! response (the whole body read, over loopback) and its size. The goal
//! (README, "Portal pages"): under 50 ms and 200 KB for every page a member
//! opens, with time that follows what the viewer can see, not the forest.
//!
//! Before the numbers it fetches `/healthz` the same way: the floor of a
//! request through the same server, client and machine in this run.

use bizrq::metrics::Metrics;
use bizrq::service::{Persist, Service};
use bizrq::store::sql::SqlStore;
use quota::cash::Prices;
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
        Prices::default(),
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
        let cookie = session_cookie(&page).expect("a session cookie on /login");
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
        let cookie = session_cookie(&res).unwrap_or(cookie);
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

fn session_cookie(res: &reqwest::Response) -> Option<String> {
    res.headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|v| v.split(';').next())
        .next()
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
        .block_on(run(quotas, runs));
}

async fn run(quotas: usize, runs: usize) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("portal.db").display()
    );
    let (dept, team) = build_forest(&url, quotas).await;
    let bin = std::env::var("BIZRQ_BENCH_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_bizrq").to_string());
    let mut child = tokio::process::Command::new(bin)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--webhook-listen",
            "127.0.0.1:0",
            "--probe-listen",
            "127.0.0.1:0",
            "--standalone",
            "--database-url",
            &url,
        ])
        .env("BIZRQ_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn bizrq");
    let mut lines =
        tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(child.stdout.take().unwrap()));
    let http_addr = loop {
        let line = lines
            .next_line()
            .await
            .unwrap()
            .expect("the server exited before it was ready");
        if let Some((http, _)) = bizrq::parse_ready_line(&line) {
            break http;
        }
    };
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
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
    let _ = child.kill().await;
}
