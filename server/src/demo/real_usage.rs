//! The demo's real usage (docs/real-usage.md, docs/demo.md): invented but
//! plausible series — training busy most of the time, services following
//! the day, a GPU canary that holds a card and computes nothing, and a
//! notebook pool left open over the weekend — answered as Prometheus
//! would and read through the same pure reading as the controller's
//! (`quota::real_usage::reading`), so the pages, the API and "idle now"
//! show what a cluster shows. Four weeks at seeding (10-minute steps),
//! then, standalone having no controller, a reading a minute while the
//! demo serves.

use super::{replicas_at, Bound, DAY_MS, HISTORY_MS, HOUR_MS};
use crate::service::Service;
use crate::store::sql::SqlStore;
use quota::real_usage::answer::{Answer, PodName, Point, Rejected};
use quota::real_usage::idle::Streak;
use quota::real_usage::measure::{Held, Window};
use quota::real_usage::reading::measure_window;
use quota::real_usage::template::Metric;
use quota::usage::QosClass;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

const NANO: i128 = quota::quantity::NANO;

/// How busy a demo workload's cards are at `at_ms`, in percent.
fn busy_percent(name: &str, at_ms: i64) -> i64 {
    let day = at_ms.div_euclid(DAY_MS);
    let hour = at_ms.rem_euclid(DAY_MS) / HOUR_MS;
    let weekend = (day + 3).rem_euclid(7) >= 5;
    let working = (8..19).contains(&hour);
    // A small wobble, the same for the same workload and 10 minutes.
    let h = name.bytes().fold(at_ms.div_euclid(600_000), |a, b| {
        a.wrapping_mul(31).wrapping_add(b as i64)
    });
    let wobble = h.rem_euclid(9) - 4;
    let base = match name {
        "llm-pretrain" => 88,
        "recsys-train" => 84,
        "detector-train" => 81,
        "embedding-backfill" => 78,
        "asr-finetune" => 72,
        "reranker-distill" => 70,
        "tokenizer-eval" => 64,
        "segmentation-sweep" => 52,
        "policy-learner" => 41,
        // Holds a T4 to check the nodes once an hour: idle all along.
        "gpu-canary" => return 1,
        // Left open: busy on weekday working hours only.
        "notebook-pool" => return if working && !weekend { 38 + wobble } else { 0 },
        "tts-serving" | "chat-serving" | "ranker-serving" => {
            if working && !weekend {
                55
            } else {
                18
            }
        }
        "candidate-gen" | "safety-classifier" => 22,
        _ => 60,
    };
    (base + wobble).clamp(0, 100)
}

/// The demo's pods with cards, one per replica and run of whole hours
/// (`replicas_at`), named `{workload}-{replica}-{hour}`; the runs that
/// touch `[from, to)`.
fn held(bound: &[Bound], from: i64, to: i64, now: i64) -> Vec<(String, Held)> {
    let mut out = Vec::new();
    for b in bound {
        let Some((model, cards)) = b.work.gpu else {
            continue;
        };
        let start = (now - HISTORY_MS).div_euclid(HOUR_MS) * HOUR_MS;
        for r in 0..b.work.replicas {
            let mut run: Option<i64> = None;
            let mut at = start;
            while at <= now {
                let on = r < replicas_at(&b.work, at, now);
                match (on, run) {
                    (true, None) => run = Some(at),
                    (false, Some(s)) => {
                        push(&mut out, b, model, cards, r, s, Some(at), from, to);
                        run = None;
                    }
                    _ => {}
                }
                at += HOUR_MS;
            }
            if let Some(s) = run {
                push(&mut out, b, model, cards, r, s, None, from, to);
            }
        }
    }
    out
}

#[allow(clippy::too_many_arguments)]
fn push(
    out: &mut Vec<(String, Held)>,
    b: &Bound,
    model: &str,
    cards: i64,
    replica: i64,
    start: i64,
    end: Option<i64>,
    from: i64,
    to: i64,
) {
    if start >= to || end.is_some_and(|e| e <= from) {
        return;
    }
    let pod = format!("{}-{replica}-{}", b.work.name, start / HOUR_MS);
    out.push((
        format!("demo-{}-{pod}", b.quota),
        Held {
            name: PodName {
                namespace: b.quota.clone(),
                pod,
            },
            workload: b.wref.clone(),
            quota: b.quota.clone(),
            cards: cards as i128 * NANO,
            model: Some(model.to_string()),
            cpu_request: b.work.cpu as i128 * NANO,
            memory_request: ((b.work.mem_gi as i128) << 30) * NANO,
            qos: QosClass::Guaranteed,
            start_ms: start,
            end_ms: end,
        },
    ));
}

/// What Prometheus would answer for `pods` over `window`: busy cards by
/// `busy_percent`, CPU and memory at steady shares of their requests.
fn answers(pods: &[(String, Held)], window: &Window, bound: &[Bound]) -> BTreeMap<Metric, Answer> {
    let name_of: HashMap<&str, &str> = bound
        .iter()
        .map(|b| (b.wref.as_str(), b.work.name))
        .collect();
    let mut out: BTreeMap<Metric, Answer> = BTreeMap::new();
    for (_, p) in pods {
        let name = name_of.get(p.workload.as_str()).copied().unwrap_or("");
        let grid = window.grid();
        let mut t = grid.first_ms;
        let (mut gpu, mut cpu, mut mem) = (Vec::new(), Vec::new(), Vec::new());
        while t <= grid.last_ms {
            if p.start_ms < t && p.end_ms.is_none_or(|e| e > t - window.step_ms) {
                let pct = busy_percent(name, t) as i128;
                gpu.push(Point {
                    at_ms: t,
                    nanos: p.cards * pct / 100,
                });
                cpu.push(Point {
                    at_ms: t,
                    nanos: p.cpu_request * (30 + pct / 2) / 100,
                });
                mem.push(Point {
                    at_ms: t,
                    nanos: p.memory_request * 70 / 100,
                });
            }
            t += window.step_ms;
        }
        for (metric, points) in [
            (Metric::GpuBusy, gpu),
            (Metric::Cpu, cpu),
            (Metric::Memory, mem),
        ] {
            let a = out.entry(metric).or_insert_with(|| Answer {
                pods: BTreeMap::new(),
                rejected: Rejected::default(),
                series: 0,
            });
            a.series += 1;
            a.pods.insert(p.name.clone(), points);
        }
    }
    out
}

/// Reads `window` of the demo and writes it, streaks carried from
/// `streaks`; the streaks at its end.
async fn read(
    service: &Service,
    sql: &SqlStore,
    bound: &[Bound],
    window: Window,
    streaks: HashMap<String, Streak>,
) -> anyhow::Result<HashMap<String, Streak>> {
    let now = service.now();
    let quotas = service.list().await?;
    let pods = held(bound, window.from_ms, window.to_ms, now);
    let answered = answers(&pods, &window, bound);
    let by_name: HashMap<&str, &quota::Quota> = quotas.iter().map(|q| (q.name(), q)).collect();
    let (measured, streaks) = measure_window(&window, &pods, &answered, &by_name, streaks);
    sql.record_reading(window.from_ms, window.to_ms, &measured.rows, &measured.idle)
        .await?;
    Ok(streaks)
}

/// Four weeks of real usage, at seeding.
pub(super) async fn seed(service: &Service, sql: &SqlStore, bound: &[Bound]) -> anyhow::Result<()> {
    let now = service.now();
    let step = 600_000;
    let to = now.div_euclid(step) * step;
    let window = Window {
        from_ms: (now - HISTORY_MS).div_euclid(HOUR_MS) * HOUR_MS,
        to_ms: to,
        step_ms: step,
    };
    read(service, sql, bound, window, HashMap::new()).await?;
    Ok(())
}

/// A reading a minute while the demo serves (standalone has no
/// controller to read a Prometheus), on from where the readings stand.
pub async fn read_forever(service: std::sync::Arc<Service>, sql: std::sync::Arc<SqlStore>) {
    // Only a demo's database: invented usage of anyone else's quotas
    // would be a lie.
    if service.get(super::ROOT).await.is_err() {
        return;
    }
    let bound = match super::bound_all(&service) {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!(error = %e, "the demo's real usage is not read");
            return;
        }
    };
    let mut streaks: Option<HashMap<String, Streak>> = None;
    let mut tick = tokio::time::interval(Duration::from_secs(60));
    loop {
        tick.tick().await;
        let state = match sql.real_usage_state().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "demo real usage: cannot read where the readings stand");
                continue;
            }
        };
        if streaks.is_none() {
            match sql.idle_now(None).await {
                Ok(idle) => {
                    streaks = Some(idle.into_iter().map(|i| (i.workload, i.streak)).collect())
                }
                Err(_) => continue,
            }
        }
        let Some(window) = Window::next(
            state.known_to_ms,
            service.now(),
            60_000,
            0,
            60 * 24,
            2 * DAY_MS,
        ) else {
            continue;
        };
        match read(
            &service,
            &sql,
            &bound,
            window,
            streaks.take().unwrap_or_default(),
        )
        .await
        {
            Ok(s) => streaks = Some(s),
            Err(e) => tracing::warn!(error = %e, "demo real usage: a reading failed"),
        }
    }
}
