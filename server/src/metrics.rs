//! Prometheus metrics: admission latency and decisions, CAS conflicts,
//! resync duration.

use prometheus_client::encoding::{text::encode, EncodeLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EndpointLabels {
    pub endpoint: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    pub endpoint: String,
    pub decision: String,
}

type HistogramFamily = Family<EndpointLabels, Histogram, fn() -> Histogram>;

pub struct Metrics {
    registry: Registry,
    pub admission_duration: HistogramFamily,
    pub decisions: Family<DecisionLabels, Counter>,
    pub cas_conflicts: Counter,
    pub cas_exhausted: Counter,
    pub reconcile_duration: Histogram,
}

fn latency_histogram() -> Histogram {
    // 100 µs … ~1.6 s
    Histogram::new(exponential_buckets(0.0001, 2.0, 15))
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("bizrq");
        let admission_duration: HistogramFamily = Family::new_with_constructor(latency_histogram);
        let decisions = Family::<DecisionLabels, Counter>::default();
        let cas_conflicts = Counter::default();
        let cas_exhausted = Counter::default();
        let reconcile_duration = Histogram::new(exponential_buckets(0.001, 2.0, 16));
        registry.register(
            "admission_duration_seconds",
            "Time to answer an AdmissionReview, by endpoint",
            admission_duration.clone(),
        );
        registry.register(
            "admission_decisions",
            "AdmissionReview answers by endpoint and decision",
            decisions.clone(),
        );
        registry.register(
            "cas_conflicts",
            "Status writes that lost a compare-and-swap and were retried",
            cas_conflicts.clone(),
        );
        registry.register(
            "cas_retries_exhausted",
            "Changes refused after every compare-and-swap attempt conflicted",
            cas_exhausted.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Duration of a full resync",
            reconcile_duration.clone(),
        );
        Metrics {
            registry,
            admission_duration,
            decisions,
            cas_conflicts,
            cas_exhausted,
            reconcile_duration,
        }
    }
}

impl Metrics {
    pub fn observe_admission(&self, endpoint: &str, decision: &str, seconds: f64) {
        self.admission_duration
            .get_or_create(&EndpointLabels {
                endpoint: endpoint.into(),
            })
            .observe(seconds);
        self.decisions
            .get_or_create(&DecisionLabels {
                endpoint: endpoint.into(),
                decision: decision.into(),
            })
            .inc();
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }
}
