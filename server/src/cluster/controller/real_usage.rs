//! The reader of real usage, on the controller's leader
//! (docs/real-usage.md): every `--prometheus-every-seconds`, the next
//! window on the step's grid is read with one range query per metric for
//! every pod at once, the answers are checked and measured against the
//! pods the view accounts (`quota::real_usage`), and the figures, the idle
//! streaks and where the readings stand are written in one transaction
//! (`store::real_usage`).
//!
//! Why nothing is counted twice or lost: the window starts where the last
//! written one ended (`known_to`, stored with it), a window is written at
//! most once (the store refuses one overlapping a written window), and a
//! reading whose queries did not answer writes nothing and is read again
//! next time — up to `--prometheus-catch-up-hours` back, beyond which the
//! gap stays unknown. Prometheus down or slow stops only this loop's
//! writes: admissions, reconciles and accrual never wait for it.

use super::history::History;
use super::Context;
use crate::real_usage::prometheus::{Prometheus, QueryError};
use crate::real_usage::RealUsageConfig;
use crate::store::real_usage::{Recorded, Row, HOUR_MS, KEEP_MS};
use quota::real_usage::answer::{self, Answer, Limits, PodName};
use quota::real_usage::figures::Figures;
use quota::real_usage::idle::{advance, policy_of, IdleNow, Streak};
use quota::real_usage::measure::{measure, Answers, Held, Reading, Window};
use quota::real_usage::template::Metric;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

/// What the reader carries from one reading to the next.
#[derive(Default)]
pub struct ReaderState {
    known_to: Option<i64>,
    /// Loaded from the store once (a new leader goes on where the last
    /// one stopped).
    loaded: bool,
    streaks: HashMap<String, Streak>,
    /// The names of the pods of the last reading, by uid: a pod deleted
    /// since is read by it for its last stretch.
    names: HashMap<String, PodName>,
    last_compaction: Option<i64>,
}

/// What one reading did.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Not one whole step is ready.
    Nothing,
    Written {
        from_ms: i64,
        to_ms: i64,
    },
    AlreadyRead,
    /// A query got no answer: nothing written, the window is read again.
    Down(String),
}

/// The figures of one window, as the store and the alerts take them.
pub struct Measured {
    pub rows: Vec<Row>,
    pub idle: Vec<IdleNow>,
    pub by_quota: BTreeMap<String, Figures>,
}

impl Context {
    /// Reads real usage every `cfg.every` until aborted with the
    /// controller.
    pub(super) async fn read_real_usage_forever(
        self: Arc<Self>,
        cfg: RealUsageConfig,
        h: Arc<dyn History>,
    ) {
        let prom = match Prometheus::new(&cfg) {
            Ok(p) => p,
            Err(e) => {
                tracing::error!(error = %e, "real usage is not read: the Prometheus client cannot be made");
                return;
            }
        };
        let mut state = ReaderState::default();
        let mut tick = tokio::time::interval(cfg.every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            match self.read_once(&prom, &cfg, h.as_ref(), &mut state).await {
                Ok(Outcome::Down(why)) => {
                    tracing::warn!(error = %why, "Prometheus did not answer; real usage is read again at the next reading")
                }
                Ok(o) => tracing::debug!(outcome = ?o, "real usage read"),
                Err(e) => tracing::warn!(error = %e, "reading real usage failed; trying again"),
            }
        }
    }

    /// One reading (`read_real_usage_forever`'s step, also the tests').
    pub async fn read_once(
        &self,
        prom: &Prometheus,
        cfg: &RealUsageConfig,
        h: &dyn History,
        state: &mut ReaderState,
    ) -> anyhow::Result<Outcome> {
        let started = Instant::now();
        let m = &self.service.metrics.real_usage;
        if !state.loaded {
            let s = h.real_usage_state().await?;
            state.known_to = s.known_to_ms;
            state.streaks = h
                .idle_now()
                .await?
                .into_iter()
                .map(|i| (i.workload, i.streak))
                .collect();
            state.loaded = true;
        }
        let now = self.now();
        if state.last_compaction.is_none_or(|t| now - t >= HOUR_MS) {
            state.last_compaction = Some(now);
            if let Err(e) = h.forget_real_usage_before(now - KEEP_MS).await {
                tracing::warn!(error = %e, "dropping old real usage failed");
            }
        }
        let Some(window) = Window::next(
            state.known_to,
            now,
            cfg.step_ms,
            cfg.delay_ms,
            cfg.max_steps,
            cfg.catch_up_ms,
        ) else {
            return Ok(Outcome::Nothing);
        };
        let held: Vec<(String, Held)> = self.view.lock().unwrap().held(&state.names);
        let mut answers: BTreeMap<Metric, Answer> = BTreeMap::new();
        if held.iter().any(|(_, p)| ran(p, &window)) {
            match self.query_all(prom, cfg, &window).await {
                Ok(a) => answers = a,
                Err(why) => {
                    m.count_reading("down");
                    m.up.set(0);
                    h.record_real_usage_down(now, &why).await?;
                    return Ok(Outcome::Down(why));
                }
            }
        } else {
            m.count_reading("no_pods");
        }
        m.up.set(1);
        let forest = self.service.forest().await?;
        let measured = {
            let forest = forest.clone();
            let streaks = std::mem::take(&mut state.streaks);
            let held = held.clone();
            tokio::task::spawn_blocking(move || {
                let quotas: HashMap<&str, &quota::Quota> =
                    forest.quotas.iter().map(|q| (q.name(), q)).collect();
                measure_window(&window, &held, &answers, &quotas, streaks)
            })
            .await?
        };
        let (measured, streaks) = measured;
        let written = h
            .record_reading(window.from_ms, window.to_ms, &measured.rows, &measured.idle)
            .await?;
        state.names = held.into_iter().map(|(uid, p)| (uid, p.name)).collect();
        m.reading_duration.observe(started.elapsed().as_secs_f64());
        match written {
            Recorded::Written => {
                state.known_to = Some(window.to_ms);
                state.streaks = streaks;
                m.count_reading("written");
                m.known_to.set(window.to_ms / 1000);
                for (q, f) in &measured.by_quota {
                    m.add_figures(q, &f.gpu);
                }
                let mut idle: BTreeMap<String, (f64, i64)> = BTreeMap::new();
                for i in &measured.idle {
                    let e = idle.entry(i.quota.clone()).or_default();
                    e.0 += i.streak.cards as f64 / 1e9;
                    e.1 += 1;
                }
                m.set_idle(&idle);
                Ok(Outcome::Written {
                    from_ms: window.from_ms,
                    to_ms: window.to_ms,
                })
            }
            Recorded::AlreadyRead => {
                // Another leader read it: go on from what is stored.
                m.count_reading("already_read");
                state.loaded = false;
                Ok(Outcome::AlreadyRead)
            }
        }
    }

    /// One range query per metric, at once: their answers read, or why
    /// Prometheus is down. A query refused (a template it cannot run, an
    /// answer past the limits) leaves its metric unmeasured for the
    /// window and is counted and logged; the others still count.
    async fn query_all(
        &self,
        prom: &Prometheus,
        cfg: &RealUsageConfig,
        window: &Window,
    ) -> Result<BTreeMap<Metric, Answer>, String> {
        let m = &self.service.metrics.real_usage;
        let grid = window.grid();
        let asked = cfg.queries.iter().map(|(metric, template)| {
            let query = template.render(cfg.rate_range_seconds);
            let limits = Limits {
                max_series: cfg.max_series,
                max_value: metric.absurd_above(),
            };
            async move {
                let started = Instant::now();
                let body = prom.range(&query, grid).await;
                let answer = match body {
                    Ok(body) => {
                        tokio::task::spawn_blocking(move || answer::read(&body, grid, &limits))
                            .await
                            .map_err(|e| QueryError::Down(e.to_string()))
                            .map(|r| r.map_err(|e| (e.to_string(), e)))
                    }
                    Err(e) => Err(e),
                };
                m.query_duration
                    .get_or_create(&crate::metrics::real_usage::MetricLabels {
                        metric: metric.name().into(),
                    })
                    .observe(started.elapsed().as_secs_f64());
                (*metric, answer)
            }
        });
        let mut out = BTreeMap::new();
        let mut down = Vec::new();
        for (metric, result) in futures::future::join_all(asked).await {
            match result {
                Ok(Ok(a)) => {
                    for (reason, n) in a.rejected.by_reason() {
                        m.count_rejected(metric.name(), reason, n);
                    }
                    m.series
                        .get_or_create(&crate::metrics::real_usage::MetricLabels {
                            metric: metric.name().into(),
                        })
                        .set(a.series as i64);
                    out.insert(metric, a);
                }
                Ok(Err((why, e))) => {
                    let reason = match e {
                        answer::AnswerError::TooManySeries(..) => "too_many_series",
                        _ => "refused",
                    };
                    m.count_failure(metric.name(), reason);
                    tracing::warn!(metric = %metric, error = %why, "real usage: this metric is not measured in this window");
                }
                Err(e) if e.is_down() => {
                    m.count_failure(metric.name(), e.reason());
                    down.push(format!("{metric}: {e}"));
                }
                Err(e) => {
                    m.count_failure(metric.name(), e.reason());
                    tracing::warn!(metric = %metric, error = %e, "real usage: this metric is not measured in this window");
                }
            }
        }
        if down.is_empty() {
            Ok(out)
        } else {
            Err(down.join("; "))
        }
    }
}

fn ran(p: &Held, w: &Window) -> bool {
    p.start_ms < w.to_ms && p.end_ms.is_none_or(|e| e > w.from_ms)
}

/// The window cut at each hour (on the step's grid), so each part adds to
/// one hourly row: a step that straddles an hour counts in the hour it
/// starts in.
pub fn hours_of(w: &Window) -> Vec<Window> {
    let mut out = Vec::new();
    let mut from = w.from_ms;
    while from < w.to_ms {
        let hour_end = (from.div_euclid(HOUR_MS) + 1) * HOUR_MS;
        // The first grid point at or after the hour's end.
        let steps = (hour_end - from + w.step_ms - 1)
            .div_euclid(w.step_ms)
            .max(1);
        let to = (from + steps * w.step_ms).min(w.to_ms);
        out.push(Window {
            from_ms: from,
            to_ms: to,
            step_ms: w.step_ms,
        });
        from = to;
    }
    out
}

/// The pure part of a reading: the window measured hour by hour, each
/// workload's row per hour (with its submitter), the streaks carried on,
/// and the idle workloads.
pub fn measure_window(
    window: &Window,
    held: &[(String, Held)],
    answers: &BTreeMap<Metric, Answer>,
    quotas: &HashMap<&str, &quota::Quota>,
    mut streaks: HashMap<String, Streak>,
) -> (Measured, HashMap<String, Streak>) {
    let pods: Vec<Held> = held.iter().map(|(_, p)| p.clone()).collect();
    let threshold = |q: &str| {
        quotas
            .get(q)
            .map(|quota| policy_of(quota, |n| quotas.get(n).copied()).threshold())
            .unwrap_or(quota::object::idle::DEFAULT_THRESHOLD)
    };
    let user_of = |q: &str, w: &str| {
        quotas
            .get(q)
            .and_then(|quota| quota.status.users.get(w))
            .cloned()
            .unwrap_or_default()
    };
    let ans = Answers {
        gpu_busy: answers.get(&Metric::GpuBusy),
        gpu_memory: answers.get(&Metric::GpuMemory),
        cpu: answers.get(&Metric::Cpu),
        memory: answers.get(&Metric::Memory),
    };
    let mut rows = Vec::new();
    let mut by_quota: BTreeMap<String, Figures> = BTreeMap::new();
    let mut last: BTreeMap<String, Reading> = BTreeMap::new();
    let mut alive: HashMap<String, Streak> = HashMap::new();
    for part in hours_of(window) {
        let readings = measure(&part, &pods, ans, threshold);
        let mut next: HashMap<String, Streak> = HashMap::new();
        for (wref, r) in &readings {
            let before = alive.get(wref).or(streaks.get(wref));
            if let Some(s) = advance(
                before,
                part.from_ms,
                part.step_ms,
                &r.steps,
                threshold(&r.quota),
            ) {
                next.insert(wref.clone(), s);
            }
            if r.figures != Figures::default() {
                rows.push(Row {
                    quota: r.quota.clone(),
                    hour_ms: part.from_ms.div_euclid(HOUR_MS) * HOUR_MS,
                    workload: wref.clone(),
                    namespace: r.namespace.clone(),
                    username: user_of(&r.quota, wref),
                    figures: r.figures,
                });
                by_quota.entry(r.quota.clone()).or_default().add(&r.figures);
            }
        }
        alive = next;
        streaks.clear();
        last.extend(readings);
    }
    let idle = alive
        .iter()
        .filter_map(|(wref, s)| {
            let r = last.get(wref)?;
            Some(IdleNow {
                workload: wref.clone(),
                quota: r.quota.clone(),
                namespace: r.namespace.clone(),
                user: user_of(&r.quota, wref),
                model: r.model.clone(),
                streak: s.clone(),
            })
        })
        .collect();
    (
        Measured {
            rows,
            idle,
            by_quota,
        },
        alive,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_is_cut_at_each_hour_on_its_grid() {
        let t = 1_795_255_200_000; // on the hour
        let w = Window {
            from_ms: t - 30 * 60_000,
            to_ms: t + 90 * 60_000,
            step_ms: 60_000,
        };
        let parts = hours_of(&w);
        assert_eq!(
            parts
                .iter()
                .map(|p| (p.from_ms, p.to_ms))
                .collect::<Vec<_>>(),
            [
                (t - 30 * 60_000, t),
                (t, t + HOUR_MS),
                (t + HOUR_MS, t + 90 * 60_000)
            ]
        );
        // A step that does not divide the hour: its part ends at the first
        // point past the hour.
        let w = Window {
            from_ms: t - 14 * 60_000,
            to_ms: t + 21 * 60_000,
            step_ms: 7 * 60_000,
        };
        let parts = hours_of(&w);
        assert_eq!(parts[0].to_ms, t);
        assert_eq!(parts.len(), 2);
        let odd = Window {
            from_ms: t - 10 * 60_000,
            to_ms: t + 11 * 60_000,
            step_ms: 7 * 60_000,
        };
        assert_eq!(hours_of(&odd)[0].to_ms, t + 4 * 60_000);
    }
}
