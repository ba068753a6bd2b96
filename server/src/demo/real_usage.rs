//! The demo's real usage (docs/real-usage.md, docs/demo.md): invented but
//! plausible series — training busy most of the time, services following
//! the day, a GPU canary that tests its card ten minutes in twenty, and a
//! notebook pool busy in working hours and left open since Friday evening
//! (60 hours before the demo was seeded, whatever the day: "idle now"
//! always shows one weekend's waste) — answered as Prometheus would and
//! read through the same pure reading as the controller's
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

/// How long before the seeding the notebook pool was left open.
pub const NOTEBOOK_IDLE_MS: i64 = 60 * HOUR_MS;

/// What the notebook pool's week is shifted by, for a demo seeded up to
/// `seeded_ms`: its Friday 19:00 UTC falls [`NOTEBOOK_IDLE_MS`] before,
/// so it has been idle all weekend, whatever day the demo starts.
fn notebook_shift(seeded_ms: i64) -> i64 {
    let left_open = seeded_ms - NOTEBOOK_IDLE_MS;
    // 1970-01-02 was a Friday: its 19:00, then the last one before.
    let friday = DAY_MS + 19 * HOUR_MS;
    let last = friday + (left_open - friday).div_euclid(7 * DAY_MS) * 7 * DAY_MS;
    last - left_open
}

/// How busy a demo workload's cards are at `at_ms`, in percent, for a
/// demo seeded up to `seeded_ms`.
fn busy_percent(name: &str, at_ms: i64, seeded_ms: i64) -> i64 {
    let (weekend, working) = week(at_ms);
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
        "policy-learner" => 62,
        // Holds a T4: a burn test ten minutes in twenty, a light probe
        // between (never idle, not efficient either).
        "gpu-canary" => {
            return if at_ms.div_euclid(600_000).rem_euclid(2) == 0 {
                85 + wobble
            } else {
                8
            };
        }
        // Busy in working hours of its own week, the last of which ended
        // on Friday evening (`notebook_shift`); nothing since.
        "notebook-pool" => {
            let (weekend, working) = week(at_ms + notebook_shift(seeded_ms));
            return if working && !weekend { 38 + wobble } else { 0 };
        }
        "tts-serving" | "chat-serving" | "ranker-serving" => {
            if working && !weekend {
                66
            } else {
                48
            }
        }
        "candidate-gen" | "safety-classifier" => 58,
        _ => 60,
    };
    (base + wobble).clamp(0, 100)
}

/// Whether `at_ms` (UTC) is in a weekend, and in working hours.
fn week(at_ms: i64) -> (bool, bool) {
    let day = at_ms.div_euclid(DAY_MS);
    let hour = at_ms.rem_euclid(DAY_MS) / HOUR_MS;
    // 1970-01-01 was a Thursday: Monday is 0.
    ((day + 3).rem_euclid(7) >= 5, (8..19).contains(&hour))
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
fn answers(
    pods: &[(String, Held)],
    window: &Window,
    bound: &[Bound],
    seeded_ms: i64,
) -> BTreeMap<Metric, Answer> {
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
                let pct = busy_percent(name, t, seeded_ms) as i128;
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

/// Reads `window` of the demo seeded up to `seeded_ms` and writes it,
/// streaks carried from `streaks`; the streaks at its end.
async fn read(
    service: &Service,
    sql: &SqlStore,
    bound: &[Bound],
    (window, seeded_ms): (Window, i64),
    streaks: HashMap<String, Streak>,
) -> anyhow::Result<HashMap<String, Streak>> {
    let now = service.now();
    let quotas = service.list().await?;
    let pods = held(bound, window.from_ms, window.to_ms, now);
    let answered = answers(&pods, &window, bound, seeded_ms);
    let by_name: HashMap<&str, &quota::Quota> = quotas.iter().map(|q| (q.name(), q)).collect();
    let (measured, streaks) = measure_window(&window, &pods, &answered, &by_name, streaks);
    let written = sql
        .record_reading(window.from_ms, window.to_ms, &measured.rows, &measured.idle)
        .await?;
    // bizrq's own metrics count it as the controller's reading would.
    if written == crate::store::real_usage::Recorded::Written {
        service.metrics.real_usage.written(&measured, window.to_ms);
    }
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
    read(service, sql, bound, (window, to), HashMap::new()).await?;
    Ok(())
}

/// A reading a minute while the demo serves (standalone has no
/// controller to read a Prometheus), on from where the readings stand,
/// and its alerts judged; `public_url` is what their emails link to.
pub async fn read_forever(
    service: std::sync::Arc<Service>,
    sql: std::sync::Arc<SqlStore>,
    public_url: String,
) {
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
    // Where the seeding's readings ended: the notebook's week hangs on it.
    let mut seeded: Option<i64> = None;
    // Alerts are judged after each reading, and once at the start.
    let mut judged = false;
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
        if seeded.is_none() {
            seeded = state.known_to_ms;
        }
        let Some(seeded_ms) = seeded else {
            continue;
        };
        if streaks.is_none() {
            match sql.idle_now(None).await {
                Ok(idle) => {
                    streaks = Some(idle.into_iter().map(|i| (i.workload, i.streak)).collect())
                }
                Err(_) => continue,
            }
        }
        if let Some(window) = Window::next(
            state.known_to_ms,
            service.now(),
            60_000,
            0,
            60 * 24,
            2 * DAY_MS,
        ) {
            match read(
                &service,
                &sql,
                &bound,
                (window, seeded_ms),
                streaks.take().unwrap_or_default(),
            )
            .await
            {
                Ok(s) => streaks = Some(s),
                Err(e) => {
                    tracing::warn!(error = %e, "demo real usage: a reading failed");
                    continue;
                }
            }
        } else if judged {
            continue;
        }
        match judge(&service, &sql, &public_url).await {
            Ok(()) => judged = true,
            Err(e) => tracing::warn!(error = %e, "demo real usage: alerts not judged"),
        }
    }
}

/// The reader's alerts, judged as the controller's leader judges them
/// after each reading (`alert_engine::real_usage`): the notebook left open
/// is told to its submitter and owners, as the pages say.
async fn judge(service: &Service, sql: &SqlStore, public_url: &str) -> anyhow::Result<()> {
    let quotas = service.list().await?;
    let idle = sql.idle_now(None).await?;
    let readings = sql.real_usage_state().await?;
    let judged = crate::alert_engine::real_usage::Judged {
        quotas: &quotas,
        idle: &idle,
        readings: &readings,
        now_ms: service.now(),
        alert_after_ms: 10 * 60_000,
        public_url,
        keys: &service.keys,
    };
    crate::alert_engine::real_usage::judge(
        sql,
        judged,
        crate::cluster::controller::idle::suspendable,
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_notebook_was_left_open_on_friday_evening_60_hours_before_seeding() {
        // A Tuesday 21:20 UTC and a Monday 07:00 UTC (2026-12-01, -07).
        for seeded in [1_796_161_200_000 - 20 * 60_000, 1_796_626_800_000] {
            let left_open = seeded - NOTEBOOK_IDLE_MS;
            // Idle from then on, in every step up to the seeding.
            let mut t = left_open;
            while t <= seeded {
                assert_eq!(busy_percent("notebook-pool", t, seeded), 0, "at {t}");
                t += 60_000;
            }
            // Busy in the working hour before: a Friday afternoon.
            let before = busy_percent("notebook-pool", left_open - 30 * 60_000, seeded);
            assert!(before >= 30, "busy before it was left open: {before}");
        }
    }

    #[test]
    fn only_the_notebook_is_idle_now() {
        // Of every demo workload with cards, only the notebook pool sits
        // below the default 5 % threshold in the day before seeding.
        let seeded = 1_796_161_200_000;
        let names = [
            "llm-pretrain",
            "recsys-train",
            "detector-train",
            "embedding-backfill",
            "asr-finetune",
            "reranker-distill",
            "tokenizer-eval",
            "segmentation-sweep",
            "policy-learner",
            "gpu-canary",
            "tts-serving",
            "chat-serving",
            "ranker-serving",
            "candidate-gen",
            "safety-classifier",
        ];
        for name in names {
            for m in 0..(24 * 60) {
                let p = busy_percent(name, seeded - m * 60_000, seeded);
                assert!(p >= 5, "{name} idle ({p} %) {m} minutes before seeding");
            }
        }
    }
}
