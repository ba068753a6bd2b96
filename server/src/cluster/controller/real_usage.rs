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
//!
//! Billing by quality (`quota::real_usage::billing`): while a price list
//! version bills `ByQuality`, each window's use above requests is billed
//! to its quotas before the window is written, one status write per quota
//! with something to bill, refused below the quota's `qualityBilledTo`:
//! a window read again (the figures' write failed, a second replica) is
//! billed once. A gap before the window and a bill that failed are marked
//! billed on request in the quota's next bill.

use super::history::History;
use super::Context;
use crate::real_usage::prometheus::Prometheus;
use crate::real_usage::RealUsageConfig;
use crate::store::real_usage::{Recorded, KEEP_MS};
use quota::budget::PriceList;
use quota::object::budgets::Outbox;
use quota::real_usage::answer::{self, Answer, Limits, PodName};
use quota::real_usage::billing;
use quota::real_usage::idle::{policy_of, standing, IdleNow, Standing, Streak};
use quota::real_usage::measure::{Held, Window};
use quota::real_usage::reading::measure_window;
use quota::real_usage::reading::HOUR_MS;
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
    /// The idle workloads of the last reading written.
    idle: Vec<IdleNow>,
    last_compaction: Option<i64>,
    /// Per quota, stretches whose bill by quality could not be written:
    /// marked billed on request in its next bill (`billing::bills`).
    unbilled: BTreeMap<String, Vec<(i64, i64)>>,
}

/// Stretches kept per quota whose bill failed (the oldest go first).
const KEEP_UNBILLED: usize = 64;

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
            state.idle = h.idle_now().await?;
            state.streaks = state
                .idle
                .iter()
                .map(|i| (i.workload.clone(), i.streak.clone()))
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
                    // Told, once it has lasted; idle alerts stay as they
                    // were (what is not known is not news), and nothing
                    // is reclaimed on what is not known.
                    let forest = self.service.forest().await?;
                    self.judge(h, cfg, &forest.quotas, &state.idle, now).await;
                    return Ok(Outcome::Down(why));
                }
            }
        } else {
            m.count_reading("no_pods");
        }
        m.up.set(1);
        let forest = self.service.forest().await?;
        let list = self.service.price_list();
        // The pods' list goes to the measuring and comes back: 50,000
        // pods are 20 MiB, not copied (docs/benchmarks.md); only a
        // window a ByQuality version prices copies them for its bill.
        let (measured, streaks, held, bills) = {
            let forest = forest.clone();
            let streaks = std::mem::take(&mut state.streaks);
            let list = list.clone();
            // A stretch before the window no reading covered (beyond the
            // catch-up): billed on request, marked in each quota's bill.
            let gap = state
                .known_to
                .filter(|k| *k < window.from_ms)
                .map(|k| (k, window.from_ms));
            let unbilled = state.unbilled.clone();
            tokio::task::spawn_blocking(move || {
                let quotas: HashMap<&str, &quota::Quota> =
                    forest.quotas.iter().map(|q| (q.name(), q)).collect();
                let pods: Vec<Held> =
                    if billing::by_quality_within(&list, window.from_ms, window.to_ms) {
                        held.iter().map(|(_, p)| p.clone()).collect()
                    } else {
                        Vec::new()
                    };
                let parts = billing::measure_pieces(&window, &pods, &answers, &list);
                drop(pods);
                let bills = billing::bills(
                    &window,
                    &parts,
                    &list,
                    forest
                        .quotas
                        .iter()
                        .map(|q| (q.name(), &q.spec, &q.status.users)),
                    gap,
                    &unbilled,
                );
                let (measured, streaks) =
                    measure_window(&window, &held, &answers, &quotas, streaks);
                drop(answers);
                (measured, streaks, held, bills)
            })
            .await?
        };
        // Billed before the figures are written: a window billed and not
        // written is read again and refused by each quota's mark, so it
        // is billed once whichever write fails.
        for bill in &bills {
            let kept = state.unbilled.remove(&bill.quota);
            if !self.bill_quality(bill, &list).await {
                let mut stretches = kept.unwrap_or_default();
                stretches.extend(bill.on_request.iter().copied());
                stretches.push((bill.from_ms, bill.to_ms));
                stretches.sort_unstable();
                stretches.dedup();
                let over = stretches.len().saturating_sub(KEEP_UNBILLED);
                stretches.drain(..over);
                state.unbilled.insert(bill.quota.clone(), stretches);
            }
        }
        let written = h
            .record_reading(window.from_ms, window.to_ms, &measured.rows, &measured.idle)
            .await?;
        state.names = held.into_iter().map(|(uid, p)| (uid, p.name)).collect();
        m.reading_duration.observe(started.elapsed().as_secs_f64());
        match written {
            Recorded::Written => {
                state.known_to = Some(window.to_ms);
                state.streaks = streaks;
                m.written(&measured, window.to_ms);
                let by_name: HashMap<&str, &quota::Quota> =
                    forest.quotas.iter().map(|q| (q.name(), q)).collect();
                *self.idle.lock().unwrap() = measured
                    .idle
                    .iter()
                    .filter(|i| {
                        let p = by_name
                            .get(i.quota.as_str())
                            .map(|q| policy_of(q, |n| by_name.get(n).copied()))
                            .unwrap_or_default();
                        standing(&i.streak, &p) != Standing::Quiet
                    })
                    .map(|i| i.workload.clone())
                    .collect();
                state.idle = measured.idle;
                self.judge(h, cfg, &forest.quotas, &state.idle, now).await;
                self.reclaim_idle(&forest.quotas, &state.idle, now).await;
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

    /// Bills one quota's use of a window by quality (`billing::apply`):
    /// one compare-and-swap of its status adds the amounts to its
    /// spending, advances its mark and carries the entries in its ledger
    /// outbox; they are appended after the write (idempotent). Refused by
    /// the mark when already billed. False when it could not be written:
    /// the stretch stays billed on request, and the next bill marks it so.
    async fn bill_quality(&self, bill: &billing::Bill, list: &PriceList) -> bool {
        let has_ledger = self.history.is_some();
        let now = self.now();
        let written = self
            .service
            .update_status(&bill.quota, false, |q| {
                Ok(match billing::apply(&mut q.status, &q.spec, bill, list) {
                    None => (false, None),
                    Some(entries) => {
                        if has_ledger {
                            Outbox::carry_extra(&mut q.status.ledger_outbox, now, entries.clone());
                        }
                        (true, Some(entries))
                    }
                })
            })
            .await;
        match written {
            Ok(Some(entries)) => {
                if !entries.is_empty() {
                    self.append_ledger_soon(entries);
                }
                true
            }
            Ok(None) => {
                tracing::debug!(quota = %bill.quota, from_ms = bill.from_ms, "real usage already billed by quality");
                true
            }
            Err(crate::service::ServiceError::NotFound(_)) => true,
            Err(e) => {
                tracing::warn!(quota = %bill.quota, from_ms = bill.from_ms, to_ms = bill.to_ms, error = %e, "use above requests not billed for this window: it stays billed on request");
                false
            }
        }
    }

    /// The reader's alerts (idle GPUs, real usage unknown), judged on
    /// what is known now; a failure is logged and judged again next time.
    async fn judge(
        &self,
        h: &dyn History,
        cfg: &RealUsageConfig,
        quotas: &[quota::Quota],
        idle: &[IdleNow],
        now: i64,
    ) {
        let readings = match h.real_usage_state().await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "real usage alerts not judged");
                return;
            }
        };
        let judged = crate::alert_engine::real_usage::Judged {
            quotas,
            idle,
            readings: &readings,
            now_ms: now,
            alert_after_ms: cfg.alert_after_ms,
            public_url: &cfg.public_url,
            keys: &self.service.keys,
        };
        if let Err(e) = h.judge_real_usage(judged, super::idle::suspendable).await {
            tracing::warn!(error = %e, "real usage alerts not stored; judged again at the next reading");
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
                let answer = prom
                    .read(&query, grid, limits)
                    .await
                    .map(|r| r.map_err(|e| (e.to_string(), e)));
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
