//! bizrq's own metrics of real usage (docs/real-usage.md): how its
//! readings of Prometheus go, and the figures they found — per quota,
//! card-seconds allocated, measured, busy and idle (the same definitions
//! as the pages, `quota::real_usage::figures`), and the cards idle now.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use quota::real_usage::figures::GpuFigures;
use std::collections::HashSet;
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;

/// Quotas exported under their own name; the rest under `_other`, so a
/// forest of 10,000 quotas keeps these to a few thousand series.
pub const QUOTAS_NAMED: usize = 1000;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MetricLabels {
    pub metric: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub metric: String,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FigureLabels {
    pub quota: String,
    pub figure: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QuotaLabels {
    pub quota: String,
}

pub struct RealUsageMetrics {
    /// Readings by result: written, already_read, no_pods, down.
    pub readings: Family<ResultLabels, Counter>,
    pub reading_duration: Histogram,
    pub query_duration: Family<MetricLabels, Histogram, fn() -> Histogram>,
    pub query_failures: Family<ReasonLabels, Counter>,
    pub rejected_points: Family<ReasonLabels, Counter>,
    pub series: Family<MetricLabels, Gauge>,
    /// 1 while readings succeed, 0 while Prometheus is down.
    pub up: Gauge,
    /// The end of the last window read, Unix seconds.
    pub known_to: Gauge,
    pub gpu_card_seconds: Family<FigureLabels, Counter<f64, AtomicU64>>,
    pub idle_cards: Family<QuotaLabels, Gauge<f64, AtomicU64>>,
    pub idle_workloads: Family<QuotaLabels, Gauge>,
    named: Mutex<HashSet<String>>,
    idle_set: Mutex<HashSet<String>>,
}

fn query_histogram() -> Histogram {
    // 10 ms … ~80 s
    Histogram::new(exponential_buckets(0.01, 2.0, 14))
}

impl RealUsageMetrics {
    pub fn register(registry: &mut Registry) -> RealUsageMetrics {
        let m = RealUsageMetrics {
            readings: Family::default(),
            reading_duration: Histogram::new(exponential_buckets(0.01, 2.0, 14)),
            query_duration: Family::new_with_constructor(query_histogram),
            query_failures: Family::default(),
            rejected_points: Family::default(),
            series: Family::default(),
            up: Gauge::default(),
            known_to: Gauge::default(),
            gpu_card_seconds: Family::default(),
            idle_cards: Family::default(),
            idle_workloads: Family::default(),
            named: Mutex::default(),
            idle_set: Mutex::default(),
        };
        let r = registry;
        r.register("real_usage_readings", "Readings of real usage from Prometheus, by result: written, already_read (another leader wrote that window), no_pods, down (a query failed to answer; the window is read again)", m.readings.clone());
        r.register(
            "real_usage_reading_duration_seconds",
            "One reading of real usage: its queries, reading their answers, measuring and writing",
            m.reading_duration.clone(),
        );
        r.register(
            "real_usage_query_duration_seconds",
            "One range query of a metric (gpu_busy, gpu_memory, cpu, memory), answer read included",
            m.query_duration.clone(),
        );
        r.register("real_usage_query_failures", "Queries of real usage that failed, by metric and reason: down (unreachable, timed out, 5xx), refused (4xx or an answer that is no matrix), too_large, too_many_series", m.query_failures.clone());
        r.register("real_usage_rejected_points", "Points of Prometheus's answers dropped, by metric and reason: not_a_number, negative, absurd, off_grid, unlabelled", m.rejected_points.clone());
        r.register(
            "real_usage_series",
            "Series the last answer of each metric held",
            m.series.clone(),
        );
        r.register(
            "real_usage_up",
            "1 while readings of Prometheus succeed, 0 while it does not answer",
            m.up.clone(),
        );
        r.register(
            "real_usage_known_to_seconds",
            "The end of the last window of real usage read (Unix time): figures are known up to it",
            m.known_to.clone(),
        );
        r.register("gpu_card_seconds", "GPU card-seconds of each quota's own workloads as read from Prometheus, by figure: allocated (held), measured, busy, idle (held below the idle threshold); efficiency is busy / measured", m.gpu_card_seconds.clone());
        r.register(
            "gpu_idle_cards",
            "GPU cards of each quota's own workloads idle at the last reading (any streak)",
            m.idle_cards.clone(),
        );
        r.register(
            "gpu_idle_workloads",
            "Workloads of each quota whose GPUs were idle at the last reading",
            m.idle_workloads.clone(),
        );
        m
    }

    fn label(&self, quota: &str) -> String {
        let mut named = self.named.lock().unwrap();
        if named.contains(quota) || named.len() < QUOTAS_NAMED && named.insert(quota.to_string()) {
            quota.to_string()
        } else {
            "_other".to_string()
        }
    }

    /// A reading of a window up to `to_ms`, written: where readings stand,
    /// each quota's figures added, the workloads idle at its end.
    pub fn written(&self, measured: &quota::real_usage::reading::Measured, to_ms: i64) {
        self.count_reading("written");
        self.known_to.set(to_ms / 1000);
        for (q, f) in &measured.by_quota {
            self.add_figures(q, &f.gpu);
        }
        let mut idle: std::collections::BTreeMap<String, (f64, i64)> = Default::default();
        for i in &measured.idle {
            let e = idle.entry(i.quota.clone()).or_default();
            e.0 += i.streak.cards as f64 / 1e9;
            e.1 += 1;
        }
        self.set_idle(&idle);
    }

    /// A reading's figures of one quota's own workloads, added.
    pub fn add_figures(&self, quota: &str, f: &GpuFigures) {
        let quota = self.label(quota);
        for (figure, ms) in [
            ("allocated", f.allocated),
            ("measured", f.measured),
            ("busy", f.busy),
            ("idle", f.idle),
        ] {
            self.gpu_card_seconds
                .get_or_create(&FigureLabels {
                    quota: quota.clone(),
                    figure: figure.into(),
                })
                .inc_by(ms as f64 / 1000.0);
        }
    }

    /// The idle workloads of the last reading: cards and count per quota;
    /// quotas idle before and not now read 0.
    pub fn set_idle(&self, by_quota: &std::collections::BTreeMap<String, (f64, i64)>) {
        let mut set = self.idle_set.lock().unwrap();
        let mut now = HashSet::new();
        let mut sums: std::collections::BTreeMap<String, (f64, i64)> = Default::default();
        for (q, (cards, n)) in by_quota {
            let e = sums.entry(self.label(q)).or_default();
            e.0 += cards;
            e.1 += n;
        }
        for (q, (cards, n)) in &sums {
            let l = QuotaLabels { quota: q.clone() };
            self.idle_cards.get_or_create(&l).set(*cards);
            self.idle_workloads.get_or_create(&l).set(*n);
            now.insert(q.clone());
        }
        for q in set.difference(&now) {
            let l = QuotaLabels { quota: q.clone() };
            self.idle_cards.get_or_create(&l).set(0.0);
            self.idle_workloads.get_or_create(&l).set(0);
        }
        *set = now;
    }

    pub fn count_reading(&self, result: &str) {
        self.readings
            .get_or_create(&ResultLabels {
                result: result.into(),
            })
            .inc();
    }

    pub fn count_failure(&self, metric: &str, reason: &str) {
        self.query_failures
            .get_or_create(&ReasonLabels {
                metric: metric.into(),
                reason: reason.into(),
            })
            .inc();
    }

    pub fn count_rejected(&self, metric: &str, reason: &str, n: u64) {
        if n > 0 {
            self.rejected_points
                .get_or_create(&ReasonLabels {
                    metric: metric.into(),
                    reason: reason.into(),
                })
                .inc_by(n);
        }
    }
}
