//! Real usage read every minute for 50,000 pods (issue 33; prints
//! figures, not a timed test):
//!
//!   cargo bench -p bizrq --bench real_usage                          # 50,000 pods
//!   cargo bench -p bizrq --bench real_usage -- --pods 20000
//!   BIZRQ_BENCH_SMOKE=1 cargo bench -p bizrq --bench real_usage      # 2,000 pods, for CI
//!   cargo test -p bizrq --bench real_usage -- --smoke                # the same
//!   ... -- --postgres postgres://postgres@127.0.0.1:5432             # the server (default this)
//!   ... -- --no-postgres                                             # SQLite only
//!
//! A real Prometheus (`/usr/bin/prometheus`, or `BIZRQ_BENCH_PROMETHEUS`)
//! serves DCGM- and cAdvisor-shaped series for every pod:
//! `DCGM_FI_DEV_GPU_UTIL` and `DCGM_FI_DEV_FB_USED` per card (labels
//! `gpu`, `UUID`, `modelName`, `Hostname`, `container`, `namespace`,
//! `pod`), `container_cpu_usage_seconds_total` (a counter) and
//! `container_memory_working_set_bytes` per container (`container`,
//! `namespace`, `pod`, `id`, `image`), one sample every 30 s (the DCGM
//! exporter's and the kubelet's usual interval). They are backfilled once
//! with `promtool tsdb create-blocks-from openmetrics` into a data
//! directory kept under /tmp/bizrq-bench-real-usage/ (reused by later
//! runs of the same size) which Prometheus then serves.
//!
//! The pods: Jobs of 1–4 pods (2.5 on average) in 100 namespaces, one
//! quota each, holding 0, 1, 2, 4 or 8 cards a pod (1.9 on average; one
//! Job in ten CPU-only); one Job in seven idle (0 %), the others busy at
//! 20–100 %. They enter the controller's view (`cluster::view::View`) as
//! its watches would put them.
//!
//! Each cycle is what the reader runs on the leader every minute
//! (`cluster::controller::real_usage`, `Context::read_once`): the next
//! window on the grid (`Window::next`), the view's pods (`View::held`),
//! the four default templates asked at once of Prometheus through bizrq's
//! client (`real_usage::prometheus::Prometheus`) and each answer read
//! (`quota::real_usage::answer::read`), the window measured
//! (`quota::real_usage::reading::measure_window`, off the runtime as the
//! reader does) and written in one transaction
//! (`SqlStore::record_reading`). Left out: judging the alerts of the
//! idle workloads and bizrq's own metrics. Four one-minute windows, then
//! a catch-up of five steps (Prometheus was down five minutes), on SQLite
//! and on PostgreSQL.
//!
//! First the floor: Prometheus alone answering the same four queries at
//! once through bizrq's client, the answers not read (what any reader
//! of these series waits for on this machine). Printed per cycle: the total, each metric's query (asked, answered and
//! read) and its reading alone, measuring, the store's write; and bizrq's
//! memory: heap bytes held before, at the peak of and after the cycle
//! (every allocation counted, jemalloc underneath as the shipped binary
//! has it) and the process's resident set (its high-water mark reset
//! before each cycle); at the end, bizrq's own part of a cycle (the
//! cycle less its wait for Prometheus) beside the floor. Prometheus's and PostgreSQL's own memory are
//! theirs, not bizrq's. docs/benchmarks.md "Real usage read every
//! minute" has the figures.

use bizrq::cluster::view::View;
use bizrq::real_usage::prometheus::Prometheus;
use bizrq::real_usage::RealUsageConfig;
use bizrq::store::real_usage::Recorded;
use bizrq::store::sql::SqlStore;
use quota::object::{Quota, QuotaSpec};
use quota::pods::{Owner, PodFacts};
use quota::real_usage::answer::{self, Answer, Limits, PodName};
use quota::real_usage::idle::Streak;
use quota::real_usage::measure::{Held, Window};
use quota::real_usage::reading::measure_window;
use quota::real_usage::template::Metric;
use quota::workload::adapter_for_kind;
use quota::{KeyConfig, ResourceList};
use std::alloc::{GlobalAlloc, Layout};
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Every allocation counted, on jemalloc as the shipped binary allocates.
struct Counting;

static HELD: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = unsafe { tikv_jemallocator::Jemalloc.alloc(l) };
        if !p.is_null() {
            let now = HELD.fetch_add(l.size(), Ordering::Relaxed) + l.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { tikv_jemallocator::Jemalloc.dealloc(p, l) };
        HELD.fetch_sub(l.size(), Ordering::Relaxed);
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        let p = unsafe { tikv_jemallocator::Jemalloc.alloc_zeroed(l) };
        if !p.is_null() {
            let now = HELD.fetch_add(l.size(), Ordering::Relaxed) + l.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let q = unsafe { tikv_jemallocator::Jemalloc.realloc(p, l, new) };
        if !q.is_null() {
            if new >= l.size() {
                let now = HELD.fetch_add(new - l.size(), Ordering::Relaxed) + new - l.size();
                PEAK.fetch_max(now, Ordering::Relaxed);
            } else {
                HELD.fetch_sub(l.size() - new, Ordering::Relaxed);
            }
        }
        q
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const MIB: f64 = 1024.0 * 1024.0;
/// 2026-01-01T00:30:00Z: the first window starts here (inside one
/// two-hour block of Prometheus's).
const T0: i64 = 1_767_227_400_000;
const MINUTE: i64 = 60_000;
/// Prometheus's samples: every 30 s from 3 minutes before T0 (the
/// `rate()` range of the first point) to the last window's end.
const SCRAPE_MS: i64 = 30_000;
const DATA_FROM: i64 = T0 - 3 * MINUTE;
/// Four one-minute windows, then five steps caught up at once.
const CYCLES: [i64; 5] = [1, 1, 1, 1, 5];
const DATA_TO: i64 = T0 + 9 * MINUTE;
const TEAMS: usize = 100;
const MODEL: &str = "NVIDIA A100-SXM4-80GB";

fn arg<T: std::str::FromStr>(name: &str) -> Option<T> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
}

fn flag(name: &str) -> bool {
    std::env::args().any(|a| a == name)
}

fn status_kib(field: &str) -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .unwrap_or(0.0)
}

fn rss_mib() -> f64 {
    status_kib("VmRSS:") / 1024.0
}

fn hwm_mib() -> f64 {
    status_kib("VmHWM:") / 1024.0
}

/// Resets the resident set's high-water mark (Linux: `5` to clear_refs).
fn reset_hwm() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// A small deterministic mix (splitmix64).
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// One pod of the fleet.
struct Pod {
    job: usize,
    ns: String,
    name: String,
    cards: u32,
    /// 0 for an idle Job's pods; else 20–100 (varying a little by sample).
    util: u32,
    cores_milli: u64,
    memory_bytes: u64,
}

fn job_pods(job: usize) -> usize {
    1 + job % 4
}

fn job_cards(job: usize) -> u32 {
    [1, 1, 2, 1, 4, 1, 2, 8, 1, 0][job % 10]
}

fn fleet(pods: usize) -> Vec<Pod> {
    let mut out = Vec::with_capacity(pods);
    let mut job = 0;
    while out.len() < pods {
        let ns = format!("team-{:03}", job % TEAMS);
        let idle = job % 7 == 3;
        for i in 0..job_pods(job) {
            if out.len() == pods {
                break;
            }
            let h = mix(job as u64 * 16 + i as u64);
            out.push(Pod {
                job,
                ns: ns.clone(),
                name: format!("train-{job:06}-{i}"),
                cards: job_cards(job),
                util: if idle { 0 } else { 20 + (h % 81) as u32 },
                cores_milli: 500 + h % 7_500,
                memory_bytes: (1 + h % 64) << 30,
            });
        }
        job += 1;
    }
    out
}

/// The OpenMetrics text of the fleet's series, every `SCRAPE_MS` from
/// `DATA_FROM` to `DATA_TO`, family by family, series by series.
fn write_openmetrics(path: &Path, pods: &[Pod]) -> std::io::Result<u64> {
    let f = std::fs::File::create(path)?;
    let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
    let times: Vec<i64> = (0..)
        .map(|k| DATA_FROM + k * SCRAPE_MS)
        .take_while(|t| *t <= DATA_TO)
        .collect();
    let mut samples = 0u64;
    writeln!(w, "# TYPE DCGM_FI_DEV_GPU_UTIL gauge")?;
    for p in pods {
        for g in 0..p.cards {
            let labels = dcgm_labels(p, g);
            for (k, t) in times.iter().enumerate() {
                // A busy card moves a few points from sample to sample.
                let v = if p.util == 0 {
                    0
                } else {
                    (p.util + (mix(k as u64 ^ (g as u64) << 20) % 7) as u32).min(100)
                };
                writeln!(w, "DCGM_FI_DEV_GPU_UTIL{{{labels}}} {v} {}", t / 1000)?;
                samples += 1;
            }
        }
    }
    writeln!(w, "# TYPE DCGM_FI_DEV_FB_USED gauge")?;
    for p in pods {
        for g in 0..p.cards {
            let labels = dcgm_labels(p, g);
            let fb = if p.util == 0 {
                1_024
            } else {
                30_000 + p.util * 400
            };
            for t in &times {
                writeln!(w, "DCGM_FI_DEV_FB_USED{{{labels}}} {fb} {}", t / 1000)?;
                samples += 1;
            }
        }
    }
    writeln!(w, "# TYPE container_cpu_usage_seconds counter")?;
    for p in pods {
        let labels = cadvisor_labels(p);
        for t in &times {
            // A counter since an hour before the data starts.
            let secs = (t - DATA_FROM + 3_600_000) as f64 / 1000.0;
            let v = secs * p.cores_milli as f64 / 1000.0;
            writeln!(
                w,
                "container_cpu_usage_seconds_total{{{labels}}} {v:.3} {}",
                t / 1000
            )?;
            samples += 1;
        }
    }
    writeln!(w, "# TYPE container_memory_working_set_bytes gauge")?;
    for p in pods {
        let labels = cadvisor_labels(p);
        for t in &times {
            writeln!(
                w,
                "container_memory_working_set_bytes{{{labels}}} {} {}",
                p.memory_bytes,
                t / 1000
            )?;
            samples += 1;
        }
    }
    writeln!(w, "# EOF")?;
    w.flush()?;
    Ok(samples)
}

fn dcgm_labels(p: &Pod, g: u32) -> String {
    let node = mix(p.job as u64) % 5_000;
    format!(
        r#"gpu="{g}",UUID="GPU-{:016x}",modelName="{MODEL}",Hostname="gpu-node-{node:04}",container="main",namespace="{}",pod="{}""#,
        mix((p.job as u64) << 8 | g as u64),
        p.ns,
        p.name
    )
}

fn cadvisor_labels(p: &Pod) -> String {
    format!(
        r#"container="main",namespace="{ns}",pod="{pod}",id="/kubepods/pod{:016x}/main",image="registry.example/trainer:v3""#,
        mix(p.job as u64 ^ 0xA5A5),
        ns = p.ns,
        pod = p.name
    )
}

/// The backfilled data directory for `n` pods: made once, then reused.
fn prometheus_data(pods: &[Pod]) -> PathBuf {
    let dir = PathBuf::from(format!("/tmp/bizrq-bench-real-usage/{}-v1", pods.len()));
    let data = dir.join("data");
    if dir.join("done").exists() {
        println!(
            "  Prometheus's data: {} (made by an earlier run)",
            data.display()
        );
        return data;
    }
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let text = dir.join("series.om");
    let started = Instant::now();
    let samples = write_openmetrics(&text, pods).unwrap();
    let size = std::fs::metadata(&text).unwrap().len();
    println!(
        "  OpenMetrics written: {samples} samples, {:.0} MiB, {:.1} s",
        size as f64 / MIB,
        started.elapsed().as_secs_f64()
    );
    let started = Instant::now();
    let promtool = std::env::var("BIZRQ_BENCH_PROMTOOL").unwrap_or_else(|_| "promtool".into());
    let out = std::process::Command::new(&promtool)
        .args(["tsdb", "create-blocks-from", "openmetrics"])
        .arg(&text)
        .arg(&data)
        .output()
        .unwrap_or_else(|e| panic!("{promtool}: {e} (apt-get install prometheus)"));
    assert!(
        out.status.success(),
        "promtool: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    println!(
        "  backfilled with promtool: {:.1} s",
        started.elapsed().as_secs_f64()
    );
    std::fs::remove_file(&text).unwrap();
    std::fs::write(dir.join("done"), "").unwrap();
    data
}

struct Served {
    child: std::process::Child,
    url: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn serve_prometheus(data: &Path) -> Served {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = data.parent().unwrap().join("prometheus.yml");
    std::fs::write(&config, "global:\n  scrape_interval: 1m\n").unwrap();
    let bin = std::env::var("BIZRQ_BENCH_PROMETHEUS").unwrap_or_else(|_| "prometheus".into());
    let child = std::process::Command::new(&bin)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.tsdb.path={}", data.display()))
        .arg("--storage.tsdb.retention.time=100y")
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .arg("--log.level=warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{bin}: {e} (apt-get install prometheus)"));
    let served = Served {
        child,
        url: format!("http://127.0.0.1:{port}"),
    };
    let client = reqwest::Client::new();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(120) {
        if let Ok(r) = client.get(format!("{}/-/ready", served.url)).send().await {
            if r.status().is_success() {
                return served;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("Prometheus never became ready");
}

/// The controller's view of the fleet, as its watches fill it; and the
/// quotas (one per namespace) with each Job's submitter.
fn view_of(pods: &[Pod], keys: &KeyConfig) -> (View, Vec<Quota>) {
    let mut view = View::new(keys.clone());
    let job = adapter_for_kind("batch", "Job").unwrap();
    let mut quotas: Vec<Quota> = (0..TEAMS)
        .map(|t| {
            Quota::new(
                &format!("team-{t:03}"),
                QuotaSpec {
                    parent: String::new(),
                    hard: ResourceList::new(),
                    max: ResourceList::new(),
                    budgets: Default::default(),
                    queueing: Default::default(),
                    fair_sharing: Default::default(),
                    idle: None,
                },
            )
        })
        .collect();
    let mut specs: HashMap<u32, Arc<quota::usage::PodSpec>> = HashMap::new();
    let mut last_job = usize::MAX;
    for p in pods {
        let cards = p.cards;
        let resources = if cards > 0 {
            format!(r#"{{"cpu":"8","memory":"64Gi","nvidia.com/gpu":"{cards}"}}"#)
        } else {
            r#"{"cpu":"8","memory":"64Gi"}"#.to_string()
        };
        let spec_json = format!(
            r#"{{"containers":[{{"name":"main","resources":{{"requests":{resources},"limits":{resources}}}}}]}}"#
        );
        let name = format!("train-{:06}", p.job);
        if p.job != last_job {
            last_job = p.job;
            let n = job_pods(p.job);
            let json = format!(
                r#"{{"metadata":{{"name":"{name}","namespace":"{ns}","labels":{{"biz.group.resource.quota":"{ns}","biz.group.resource.quota/gpu-type":"A100"}}}},
                   "spec":{{"parallelism":{n},"completions":{n},"template":{{"spec":{spec_json}}}}}}}"#,
                ns = p.ns
            );
            view.apply_workload(job, job.read(&json, keys).unwrap(), Some(T0), T0);
            let q = p.job % TEAMS;
            quotas[q].status.users.insert(
                format!("batch/Job/{}/{name}", p.ns),
                format!("oidc:user-{}@example.com", p.job % 997),
            );
        }
        let spec = specs
            .entry(cards)
            .or_insert_with(|| Arc::new(serde_json::from_str(&spec_json).unwrap()))
            .clone();
        let facts = PodFacts {
            uid: format!("uid-{}-{}", p.ns, p.name),
            namespace: p.ns.clone(),
            name: p.name.clone(),
            owner: Some(Owner {
                api_version: "batch/v1".into(),
                kind: "Job".into(),
                name,
            }),
            spec,
            scheduled_ms: Some(T0 - 3_600_000),
            finished_ms: None,
            priority: 0,
            unschedulable: false,
        };
        view.apply_pod(facts, BTreeMap::new(), 0, false, T0);
    }
    let _ = view.take_dirty_runs();
    (view, quotas)
}

/// What one cycle took.
#[derive(Default)]
struct Cycle {
    steps: i64,
    pods: usize,
    total: Duration,
    /// Per metric: asked, answered and read; the reading alone; bytes.
    queries: Vec<(Metric, Duration, Duration, usize, usize)>,
    measure: Duration,
    write: Duration,
    rows: usize,
    idle: usize,
    heap_before: usize,
    /// Held once the pods are listed, the answers read, the window
    /// measured (before its write).
    heap_stages: [usize; 3],
    /// The peak while the answers were asked and read.
    heap_peak_queries: usize,
    heap_peak: usize,
    heap_after: usize,
    rss_before: f64,
    rss_peak: f64,
}

/// What the reader carries from one reading to the next.
#[derive(Default)]
struct Carried {
    known_to: Option<i64>,
    streaks: HashMap<String, Streak>,
    names: HashMap<String, PodName>,
}

/// One reading, as `Context::read_once` makes it.
async fn cycle(
    prom: &Prometheus,
    cfg: &RealUsageConfig,
    view: &View,
    quotas: &Arc<Vec<Quota>>,
    store: &SqlStore,
    carried: &mut Carried,
    steps: i64,
) -> Cycle {
    let from = carried.known_to.unwrap_or(T0);
    reset_hwm();
    let mut c = Cycle {
        steps,
        heap_before: HELD.load(Ordering::Relaxed),
        rss_before: rss_mib(),
        ..Cycle::default()
    };
    PEAK.store(c.heap_before, Ordering::Relaxed);
    let started = Instant::now();
    let window = window_after(cfg, from, steps);
    assert_eq!(window.steps(), steps);
    let held: Vec<(String, Held)> = view.held(&carried.names);
    c.pods = held.len();
    c.heap_stages[0] = HELD.load(Ordering::Relaxed);
    let grid = window.grid();
    let asked = cfg.queries.iter().map(|(metric, template)| {
        let query = template.render(cfg.rate_range_seconds);
        let limits = Limits {
            max_series: cfg.max_series,
            max_value: metric.absurd_above(),
        };
        async move {
            let started = Instant::now();
            let body = prom.range(&query, grid).await.expect("Prometheus answers");
            let bytes = body.len();
            let (answer, read): (Answer, Duration) = tokio::task::spawn_blocking(move || {
                let started = Instant::now();
                let a = answer::read(&body, grid, &limits).expect("a matrix");
                (a, started.elapsed())
            })
            .await
            .unwrap();
            (*metric, answer, started.elapsed(), read, bytes)
        }
    });
    let mut answers: BTreeMap<Metric, Answer> = BTreeMap::new();
    for (metric, a, took, read, bytes) in futures::future::join_all(asked).await {
        assert_eq!(a.rejected.total(), 0, "{metric}: {:?}", a.rejected);
        c.queries.push((metric, took, read, bytes, a.series));
        answers.insert(metric, a);
    }
    c.heap_stages[1] = HELD.load(Ordering::Relaxed);
    c.heap_peak_queries = PEAK.load(Ordering::Relaxed);
    let started_measure = Instant::now();
    let (measured, streaks, held) = {
        let quotas = quotas.clone();
        let streaks = std::mem::take(&mut carried.streaks);
        tokio::task::spawn_blocking(move || {
            let by_name: HashMap<&str, &Quota> = quotas.iter().map(|q| (q.name(), q)).collect();
            let (measured, streaks) = measure_window(&window, &held, &answers, &by_name, streaks);
            drop(answers);
            (measured, streaks, held)
        })
        .await
        .unwrap()
    };
    c.measure = started_measure.elapsed();
    c.heap_stages[2] = HELD.load(Ordering::Relaxed);
    c.rows = measured.rows.len();
    c.idle = measured.idle.len();
    let started_write = Instant::now();
    let written = store
        .record_reading(window.from_ms, window.to_ms, &measured.rows, &measured.idle)
        .await
        .unwrap();
    assert_eq!(written, Recorded::Written);
    c.write = started_write.elapsed();
    carried.names = held.into_iter().map(|(uid, p)| (uid, p.name)).collect();
    carried.known_to = Some(window.to_ms);
    carried.streaks = streaks;
    drop(measured);
    c.total = started.elapsed();
    c.heap_peak = PEAK.load(Ordering::Relaxed);
    c.heap_after = HELD.load(Ordering::Relaxed);
    c.rss_peak = hwm_mib();
    c
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn print(c: &Cycle) {
    let queries: Vec<String> = c
        .queries
        .iter()
        .map(|(m, took, read, bytes, series)| {
            format!(
                "{m} {:.0} ms (read {:.0} ms; {series} series, {:.1} MiB)",
                ms(*took),
                ms(*read),
                *bytes as f64 / MIB
            )
        })
        .collect();
    println!(
        "    {} step{} of {} pods: total {:.0} ms = queries {:.0} ms + measuring {:.0} ms + write {:.0} ms ({} rows, {} idle); heap {:.1} MiB before, +{:.1} MiB at the peak, {:+.1} MiB after; RSS {:.0} MiB before, {:.0} MiB high-water (+{:.0})",
        c.steps,
        if c.steps == 1 { "" } else { "s" },
        c.pods,
        ms(c.total),
        c.queries.iter().map(|q| ms(q.1)).fold(0.0, f64::max),
        ms(c.measure),
        ms(c.write),
        c.rows,
        c.idle,
        c.heap_before as f64 / MIB,
        (c.heap_peak - c.heap_before) as f64 / MIB,
        (c.heap_after as f64 - c.heap_before as f64) / MIB,
        c.rss_before,
        c.rss_peak,
        c.rss_peak - c.rss_before,
    );
    println!("      {}", queries.join("; "));
    let [listed, answered, measured] = c
        .heap_stages
        .map(|h| (h as f64 - c.heap_before as f64) / MIB);
    println!(
        "      heap held above the start: pods listed +{listed:.1} MiB, answers read +{answered:.1} MiB (peak while asking +{:.1}), window measured +{measured:.1} MiB",
        (c.heap_peak_queries - c.heap_before) as f64 / MIB
    );
}

/// The reader's next window from `from` when `steps` steps are ready.
fn window_after(cfg: &RealUsageConfig, from: i64, steps: i64) -> Window {
    // `now`: the window's last step ready, as the reader's clock has it.
    let now = from + steps * cfg.step_ms + cfg.delay_ms;
    Window::next(
        Some(from),
        now,
        cfg.step_ms,
        cfg.delay_ms,
        cfg.max_steps,
        cfg.catch_up_ms,
    )
    .expect("a window is ready")
}

/// The floor: Prometheus alone answering the four queries of a window
/// of `steps` at once, through bizrq's client, the answers not read —
/// what any reader of these series waits for on this machine.
async fn floor(prom: &Prometheus, cfg: &RealUsageConfig, steps: i64) -> Duration {
    let grid = window_after(cfg, T0, steps).grid();
    let started = Instant::now();
    let asked = cfg.queries.iter().map(|(_, template)| {
        let query = template.render(cfg.rate_range_seconds);
        async move {
            prom.range(&query, grid)
                .await
                .expect("Prometheus answers")
                .len()
        }
    });
    futures::future::join_all(asked).await;
    started.elapsed()
}

async fn run_on(
    label: &str,
    url: &str,
    prom: &Prometheus,
    cfg: &RealUsageConfig,
    view: &View,
    quotas: &Arc<Vec<Quota>>,
) -> Vec<Cycle> {
    let store = SqlStore::connect(url).await.unwrap();
    println!("  {label}:");
    let mut carried = Carried::default();
    let mut out = Vec::new();
    for steps in CYCLES {
        let c = cycle(prom, cfg, view, quotas, &store, &mut carried, steps).await;
        print(&c);
        out.push(c);
    }
    store.close().await;
    out
}

fn main() {
    let smoke = flag("--smoke") || std::env::var_os("BIZRQ_BENCH_SMOKE").is_some();
    let pods: usize = arg("--pods").unwrap_or(if smoke { 2_000 } else { 50_000 });
    let pg_base: String =
        arg("--postgres").unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432".into());
    println!(
        "real usage read every minute: {pods} pods ({} build{})",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        if smoke { ", smoke" } else { "" }
    );
    bizrq::tls::install_crypto_provider();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let fleet = fleet(pods);
        let cards: u64 = fleet.iter().map(|p| p.cards as u64).sum();
        let jobs = fleet.last().map_or(0, |p| p.job + 1);
        println!("  {jobs} Jobs, {pods} pods, {cards} cards");
        let data = prometheus_data(&fleet);
        let served = serve_prometheus(&data).await;

        let keys = KeyConfig::default();
        let heap_empty = HELD.load(Ordering::Relaxed);
        let (view, quotas) = view_of(&fleet, &keys);
        drop(fleet);
        let quotas = Arc::new(quotas);
        println!(
            "  the controller's view of them: {:.1} MiB of heap",
            (HELD.load(Ordering::Relaxed) - heap_empty) as f64 / MIB
        );

        let mut args = bizrq::config::ServeArgs::for_tests("sqlite::memory:");
        args.prometheus_url = Some(served.url.clone());
        let cfg = args.real_usage().unwrap().unwrap();
        let prom = Prometheus::new(&cfg).unwrap();

        // Prometheus alone, the floor of every cycle below (its blocks
        // warmed by the first ask).
        let mut floors = Vec::new();
        for (i, steps) in CYCLES.into_iter().enumerate() {
            let f = floor(&prom, &cfg, steps).await;
            println!(
                "  the floor, Prometheus alone answering the four queries of {steps} step(s) at once: {:.0} ms{}",
                ms(f),
                if i == 0 { " (cold)" } else { "" }
            );
            if i > 0 {
                floors.push((steps, f));
            }
        }

        let dir = tempfile::tempdir().unwrap();
        let sqlite = format!("sqlite://{}", dir.path().join("bizrq.db").display());
        let mut all = run_on("SQLite", &sqlite, &prom, &cfg, &view, &quotas).await;
        if !flag("--no-postgres") {
            use sqlx::Connection;
            let db = format!("bizrq_bench_real_usage_{}", std::process::id());
            match sqlx::postgres::PgConnection::connect(&format!("{pg_base}/postgres")).await {
                Ok(mut conn) => {
                    sqlx::query(&format!("CREATE DATABASE {db}"))
                        .execute(&mut conn)
                        .await
                        .unwrap();
                    let url = format!("{pg_base}/{db}");
                    all.extend(run_on("PostgreSQL", &url, &prom, &cfg, &view, &quotas).await);
                    sqlx::query(&format!("DROP DATABASE {db} WITH (FORCE)"))
                        .execute(&mut conn)
                        .await
                        .unwrap();
                }
                Err(e) => println!("  PostgreSQL skipped ({pg_base}: {e})"),
            }
        }
        // The first cycle of each store meets Prometheus's blocks cold.
        let warm: Vec<&Cycle> = all
            .iter()
            .enumerate()
            .filter(|(i, _)| i % CYCLES.len() != 0)
            .map(|(_, c)| c)
            .collect();
        let worst = |f: &dyn Fn(&Cycle) -> f64| warm.iter().map(|c| f(c)).fold(0.0, f64::max);
        let slowest = worst(&|c| ms(c.total));
        let extra = worst(&|c| (c.heap_peak - c.heap_before) as f64 / MIB);
        println!(
            "  worst warm cycle: {slowest:.0} ms (goal 2,000 ms), +{extra:.1} MiB of heap at its peak (goal 100 MiB)"
        );
        // bizrq's own part: the cycle less its wait for Prometheus.
        let own = |steps: i64| {
            warm.iter()
                .filter(|c| c.steps == steps)
                .map(|c| {
                    let waited = c.queries.iter().map(|q| ms(q.1 - q.2)).fold(0.0, f64::max);
                    ms(c.total) - waited
                })
                .fold(0.0, f64::max)
        };
        let floor_of = |steps: i64| {
            floors
                .iter()
                .filter(|(s, _)| *s == steps)
                .map(|(_, f)| ms(*f))
                .fold(0.0, f64::max)
        };
        println!(
            "  bizrq's own part of a warm cycle (the cycle less its wait for Prometheus): at most {:.0} ms at 1 step, {:.0} ms at 5; the floor (Prometheus alone, warm): {:.0} ms at 1 step, {:.0} ms at 5",
            own(1),
            own(5),
            floor_of(1),
            floor_of(5)
        );
        drop(served);
    });
}
