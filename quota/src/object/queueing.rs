//! A quota's queueing policy (`spec.queueing`, docs/queueing.md §1) as
//! plain serde data with one validation that says what is wrong.
//!
//! Values are spelled as Kubernetes enums are (`Refuse`, `Queue`,
//! `StrictFifo`), as the issue and Kueue spell them. `queueing: Queue` is
//! accepted as shorthand for `queueing: {mode: Queue}`.

use super::fair_sharing::Strategy;
use serde::{Deserialize, Deserializer, Serialize};

/// The most entries one quota's queue holds. Past it a workload that does
/// not fit is refused as without queueing: a queue is a promise to admit,
/// and one nobody can work through is a denial of service on the status
/// object (every entry is written with it).
pub const MAX_QUEUE: usize = 1_000;

/// The longest wait a policy may name (aging, alert): 366 days. Longer is
/// "never", which is what leaving the field out says.
pub const MAX_WAIT_SECONDS: u64 = 366 * 86_400;

/// How many entries of one quota's queue one submitter (a person, or a
/// namespace's service accounts and controllers: `super::share`) may hold
/// when the policy does not say: one user's
/// burst of Jobs, or of creates that never complete, cannot take the whole
/// queue (`MAX_QUEUE`) from everyone else.
pub const DEFAULT_PER_SUBMITTER: u32 = 100;

/// What admission does with suspendable batch work that does not fit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Mode {
    /// Refuse it at once, as for every other kind (the default).
    #[default]
    Refuse,
    /// Create it suspended and admit it from the quota's queue once it fits.
    Queue,
}

/// How the queue may be passed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind")]
pub enum Order {
    /// Nothing passes a head that does not fit (Kueue's StrictFIFO).
    #[default]
    StrictFifo,
    /// Work behind a head that does not fit may pass it if it fits itself,
    /// until the head has waited `agingSeconds`; from then on it blocks.
    #[serde(rename_all = "camelCase")]
    BestEffortFifo { aging_seconds: u64 },
}

/// Whether queued work may take capacity back from running work.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Preemption {
    #[default]
    Never,
    /// The head may reclaim running batch work of lower priority in the
    /// same quota, through the reclaim path (marks, grace, suspend).
    LowerPriority,
}

/// `spec.queueing` of a quota.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueuePolicy {
    pub mode: Mode,
    pub order: Order,
    pub preemption: Preemption,
    /// How long a victim of the queue's preemption is warned before it is
    /// suspended (`preemption: {policy: LowerPriority, graceSeconds: N}`);
    /// none: the reclaim grace of loans (`--reclaim-grace-seconds`). Work
    /// that runs for seconds cannot wait the minutes a service needs.
    pub preemption_grace_seconds: Option<u64>,
    /// Whether the head, waiting for idle room its parent cannot lend, may
    /// reclaim from siblings that borrow more, and by which rule
    /// (`preemption: {fairShare: LessThanOrEqualToFinalShare}`, docs/
    /// queueing.md §11); none: never.
    pub fair_share: Option<Strategy>,
    /// Alert when an entry has waited this long (none: never).
    pub alert_after_seconds: Option<u64>,
    /// At most this many entries per submitter (none:
    /// `DEFAULT_PER_SUBMITTER`); 1 to `MAX_QUEUE`.
    pub max_per_submitter: Option<u32>,
    /// Fairness between the submitters of this quota
    /// (`submitterFairness: {halfLifeDays: N}`, docs/queueing.md §11):
    /// entries of equal priority go by their submitter's usage decayed
    /// with this half-life, in days (1 to `MAX_HALF_LIFE_DAYS`); none: off.
    pub submitter_half_life_days: Option<u32>,
}

/// The longest half-life `submitterFairness` may name: a year.
pub const MAX_HALF_LIFE_DAYS: u32 = 365;
/// The half-life when `submitterFairness` names none (SLURM's
/// `PriorityDecayHalfLife` default).
pub const DEFAULT_HALF_LIFE_DAYS: u32 = 7;

/// `submitterFairness` as written.
#[derive(Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SubmitterFairness {
    #[serde(default = "default_half_life")]
    half_life_days: u32,
}

fn default_half_life() -> u32 {
    DEFAULT_HALF_LIFE_DAYS
}

/// `preemption` as written: `LowerPriority`, or the long form with its
/// own grace.
#[derive(Deserialize, Serialize)]
#[serde(untagged)]
enum PreemptionForm {
    Short(Preemption),
    Full(PreemptionFull),
}

#[derive(Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PreemptionFull {
    policy: Preemption,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    grace_seconds: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    fair_share: Option<Strategy>,
}

impl Default for PreemptionForm {
    fn default() -> Self {
        PreemptionForm::Short(Preemption::Never)
    }
}

/// The stored form: the short spelling of `preemption` unless it has a
/// grace of its own, so policies written before the long form read and
/// write as they did.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Out {
    mode: Mode,
    order: Order,
    preemption: PreemptionForm,
    #[serde(skip_serializing_if = "Option::is_none")]
    alert_after_seconds: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_per_submitter: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    submitter_fairness: Option<SubmitterFairness>,
}

impl Serialize for QueuePolicy {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let preemption = match (self.preemption_grace_seconds, self.fair_share) {
            (None, None) => PreemptionForm::Short(self.preemption),
            (grace_seconds, fair_share) => PreemptionForm::Full(PreemptionFull {
                policy: self.preemption,
                grace_seconds,
                fair_share,
            }),
        };
        Out {
            mode: self.mode,
            order: self.order,
            preemption,
            alert_after_seconds: self.alert_after_seconds,
            max_per_submitter: self.max_per_submitter,
            submitter_fairness: self
                .submitter_half_life_days
                .map(|half_life_days| SubmitterFairness { half_life_days }),
        }
        .serialize(s)
    }
}

/// The long form, with every field optional.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Full {
    #[serde(default)]
    mode: Mode,
    #[serde(default)]
    order: Order,
    #[serde(default)]
    preemption: PreemptionForm,
    #[serde(default)]
    alert_after_seconds: Option<u64>,
    #[serde(default)]
    max_per_submitter: Option<u32>,
    #[serde(default)]
    submitter_fairness: Option<SubmitterFairness>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Form {
    Short(Mode),
    Full(Full),
}

impl<'de> Deserialize<'de> for QueuePolicy {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(
            match Form::deserialize(d).map_err(|_| {
                serde::de::Error::custom(
                    "queueing is Refuse, Queue, or {mode, order, preemption, alertAfterSeconds, \
                 maxPerSubmitter, submitterFairness} with mode Refuse|Queue, order {kind: StrictFifo} or \
                 {kind: BestEffortFifo, agingSeconds: N}, preemption Never|LowerPriority or \
                 {policy: LowerPriority, graceSeconds: N, fairShare: LessThanOrEqualToFinalShare|LessThanInitialShare}, \
                 submitterFairness {halfLifeDays: N}",
                )
            })? {
                Form::Short(mode) => QueuePolicy {
                    mode,
                    ..Default::default()
                },
                Form::Full(f) => {
                    let (preemption, preemption_grace_seconds, fair_share) = match f.preemption {
                        PreemptionForm::Short(p) => (p, None, None),
                        PreemptionForm::Full(p) => (p.policy, p.grace_seconds, p.fair_share),
                    };
                    QueuePolicy {
                        mode: f.mode,
                        order: f.order,
                        preemption,
                        preemption_grace_seconds,
                        fair_share,
                        alert_after_seconds: f.alert_after_seconds,
                        max_per_submitter: f.max_per_submitter,
                        submitter_half_life_days: f.submitter_fairness.map(|s| s.half_life_days),
                    }
                }
            },
        )
    }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("queueing: {field} only applies with mode Queue; set mode: Queue or remove {field}")]
    NeedsQueue { field: &'static str },
    #[error("queueing: order.agingSeconds is {0}: it must be 1 to 31622400 (366 days); for no passing at all use order StrictFifo")]
    Aging(u64),
    #[error("queueing: alertAfterSeconds is {0}: it must be 1 to 31622400 (366 days); leave it out for no alert")]
    AlertAfter(u64),
    #[error("queueing: preemption.graceSeconds is {0}: it must be 0 to 31622400 (366 days); leave it out for the reclaim grace")]
    PreemptionGrace(u64),
    #[error("queueing: preemption.graceSeconds only applies with policy LowerPriority; remove it or set policy: LowerPriority")]
    GraceWithoutPreemption,
    #[error("queueing: maxPerSubmitter is {0}: it must be 1 to {max} (the most a queue holds); leave it out for {DEFAULT_PER_SUBMITTER}", max = MAX_QUEUE)]
    PerSubmitter(u32),
    #[error("queueing: submitterFairness needs order {{kind: BestEffortFifo, agingSeconds: N}}: under StrictFifo nothing ages, so a stream of lighter or new submitters could pass an entry forever; agingSeconds bounds how long fairness may pass it")]
    FairnessNeedsAging,
    #[error("queueing: submitterFairness.halfLifeDays is {0}: it must be 1 to {MAX_HALF_LIFE_DAYS} (days); leave it out for {DEFAULT_HALF_LIFE_DAYS}")]
    HalfLife(u32),
}

impl QueuePolicy {
    /// A policy that queues in strict FIFO order, nothing more.
    pub fn queue() -> QueuePolicy {
        QueuePolicy {
            mode: Mode::Queue,
            ..Default::default()
        }
    }

    /// Whether the spec may leave the field out (`Refuse` with nothing else).
    pub fn is_default(&self) -> bool {
        *self == QueuePolicy::default()
    }

    pub fn queues(&self) -> bool {
        self.mode == Mode::Queue
    }

    /// Whether the queue orders equals by their submitters' usage:
    /// `submitterFairness` with best-effort FIFO (strict FIFO is refused
    /// with it, `validate`).
    pub fn orders_by_submitters(&self) -> bool {
        self.queues()
            && self.submitter_half_life_days.is_some()
            && matches!(self.order, Order::BestEffortFifo { .. })
    }

    /// Checks ranges, and that a refusing quota sets nothing that only a
    /// queue uses (it would silently do nothing).
    pub fn validate(&self) -> Result<(), PolicyError> {
        if let Order::BestEffortFifo { aging_seconds } = self.order {
            if !(1..=MAX_WAIT_SECONDS).contains(&aging_seconds) {
                return Err(PolicyError::Aging(aging_seconds));
            }
        }
        if let Some(s) = self.alert_after_seconds {
            if !(1..=MAX_WAIT_SECONDS).contains(&s) {
                return Err(PolicyError::AlertAfter(s));
            }
        }
        if let Some(g) = self.preemption_grace_seconds {
            if g > MAX_WAIT_SECONDS {
                return Err(PolicyError::PreemptionGrace(g));
            }
            if self.preemption == Preemption::Never && self.mode == Mode::Queue {
                return Err(PolicyError::GraceWithoutPreemption);
            }
        }
        if let Some(n) = self.max_per_submitter {
            if n == 0 || n as usize > MAX_QUEUE {
                return Err(PolicyError::PerSubmitter(n));
            }
        }
        if let Some(d) = self.submitter_half_life_days {
            if !(1..=MAX_HALF_LIFE_DAYS).contains(&d) {
                return Err(PolicyError::HalfLife(d));
            }
        }
        if self.mode == Mode::Refuse {
            let field = if self.order != Order::default() {
                Some("order")
            } else if self.preemption != Preemption::default()
                || self.preemption_grace_seconds.is_some()
                || self.fair_share.is_some()
            {
                Some("preemption")
            } else if self.alert_after_seconds.is_some() {
                Some("alertAfterSeconds")
            } else if self.max_per_submitter.is_some() {
                Some("maxPerSubmitter")
            } else if self.submitter_half_life_days.is_some() {
                Some("submitterFairness")
            } else {
                None
            };
            if let Some(field) = field {
                return Err(PolicyError::NeedsQueue { field });
            }
        }
        if self.submitter_half_life_days.is_some() && self.order == Order::StrictFifo {
            return Err(PolicyError::FairnessNeedsAging);
        }
        Ok(())
    }

    /// How long a victim of the queue's preemption is warned (ms), given
    /// the reclaim grace used when the policy names none.
    pub fn preemption_grace_ms(&self, reclaim_grace_ms: i64) -> i64 {
        match self.preemption_grace_seconds {
            Some(s) => (s.min(MAX_WAIT_SECONDS) as i64).saturating_mul(1000),
            None => reclaim_grace_ms,
        }
    }

    /// The half-life of submitters' usage in ms, when the queue orders by
    /// it (`submitterFairness`); None: it does not.
    pub fn submitter_half_life_ms(&self) -> Option<i64> {
        self.submitter_half_life_days
            .map(|d| i64::from(d.clamp(1, MAX_HALF_LIFE_DAYS)) * 86_400_000)
    }

    /// How many entries one submitter may hold in the queue.
    pub fn per_submitter(&self) -> usize {
        self.max_per_submitter
            .unwrap_or(DEFAULT_PER_SUBMITTER)
            .clamp(1, MAX_QUEUE as u32) as usize
    }

    /// How long an entry may wait before it blocks everything behind it
    /// (ms): 0 under strict FIFO (a head always blocks).
    pub fn aging_ms(&self) -> i64 {
        match self.order {
            Order::StrictFifo => 0,
            Order::BestEffortFifo { aging_seconds } => {
                (aging_seconds.min(MAX_WAIT_SECONDS) as i64).saturating_mul(1000)
            }
        }
    }

    /// Whether an entry queued at `since_ms` has waited past the alert
    /// threshold at `now_ms`.
    pub fn alerts(&self, since_ms: i64, now_ms: i64) -> bool {
        self.queues()
            && self.alert_after_seconds.is_some_and(|s| {
                now_ms.saturating_sub(since_ms)
                    >= (s.min(MAX_WAIT_SECONDS) as i64).saturating_mul(1000)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<QueuePolicy, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn short_and_long_forms() {
        assert_eq!(parse(r#""Queue""#).unwrap(), QueuePolicy::queue());
        assert_eq!(parse(r#""Refuse""#).unwrap(), QueuePolicy::default());
        assert_eq!(parse("{}").unwrap(), QueuePolicy::default());
        let p = parse(
            r#"{"mode":"Queue","order":{"kind":"BestEffortFifo","agingSeconds":600},
                "preemption":"LowerPriority","alertAfterSeconds":3600}"#,
        )
        .unwrap();
        assert_eq!(p.order, Order::BestEffortFifo { aging_seconds: 600 });
        assert_eq!(p.preemption, Preemption::LowerPriority);
        assert_eq!(p.aging_ms(), 600_000);
        p.validate().unwrap();
        // Round trip.
        let json = serde_json::to_string(&p).unwrap();
        assert_eq!(parse(&json).unwrap(), p);
        assert_eq!(
            serde_json::to_string(&QueuePolicy::queue()).unwrap(),
            r#"{"mode":"Queue","order":{"kind":"StrictFifo"},"preemption":"Never"}"#
        );
    }

    #[test]
    fn preemption_has_a_grace_of_its_own_apart_from_reclaim() {
        let p =
            parse(r#"{"mode":"Queue","preemption":{"policy":"LowerPriority","graceSeconds":0}}"#)
                .unwrap();
        assert_eq!(p.preemption, Preemption::LowerPriority);
        assert_eq!(p.preemption_grace_seconds, Some(0));
        p.validate().unwrap();
        assert_eq!(p.preemption_grace_ms(300_000), 0, "0 is allowed: at once");
        // Written in the long form, read back the same.
        let json = serde_json::to_string(&p).unwrap();
        assert_eq!(
            json,
            r#"{"mode":"Queue","order":{"kind":"StrictFifo"},"preemption":{"policy":"LowerPriority","graceSeconds":0}}"#
        );
        assert_eq!(parse(&json).unwrap(), p);
        // Without one, the reclaim grace, and the short form as before.
        let p = parse(r#"{"mode":"Queue","preemption":"LowerPriority"}"#).unwrap();
        assert_eq!(p.preemption_grace_ms(300_000), 300_000);
        assert!(serde_json::to_string(&p)
            .unwrap()
            .contains(r#""preemption":"LowerPriority""#));
        let p = parse(r#"{"mode":"Queue","preemption":{"policy":"LowerPriority"}}"#).unwrap();
        assert_eq!(p.preemption_grace_seconds, None);
        // Out of range, with no preemption, or without a queue: refused.
        let p = parse(
            r#"{"mode":"Queue","preemption":{"policy":"LowerPriority","graceSeconds":31622401}}"#,
        )
        .unwrap();
        assert_eq!(p.validate(), Err(PolicyError::PreemptionGrace(31_622_401)));
        let p =
            parse(r#"{"mode":"Queue","preemption":{"policy":"Never","graceSeconds":5}}"#).unwrap();
        assert_eq!(p.validate(), Err(PolicyError::GraceWithoutPreemption));
        let p = parse(r#"{"preemption":{"policy":"Never","graceSeconds":5}}"#).unwrap();
        assert_eq!(
            p.validate(),
            Err(PolicyError::NeedsQueue {
                field: "preemption"
            })
        );
        for bad in [
            r#"{"mode":"Queue","preemption":{"policy":"LowerPriority","grace":5}}"#,
            r#"{"mode":"Queue","preemption":{"policy":"LowerPriority","graceSeconds":-1}}"#,
            r#"{"mode":"Queue","preemption":{"graceSeconds":5}}"#,
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn fair_share_reclaim_is_chosen_beside_the_preemption_policy() {
        use crate::object::fair_sharing::Strategy;
        let p = parse(r#"{"mode":"Queue","preemption":{"policy":"Never","fairShare":"LessThanInitialShare"}}"#)
            .unwrap();
        assert_eq!(p.fair_share, Some(Strategy::LessThanInitialShare));
        p.validate().unwrap();
        // Written back in the long form, and read back the same.
        let v = serde_json::to_value(p).unwrap();
        assert_eq!(v["preemption"]["fairShare"], "LessThanInitialShare");
        assert_eq!(parse(&v.to_string()).unwrap(), p);
        let p = parse(r#"{"mode":"Queue","preemption":{"policy":"LowerPriority","graceSeconds":0,"fairShare":"LessThanOrEqualToFinalShare"}}"#)
            .unwrap();
        assert_eq!(p.fair_share, Some(Strategy::LessThanOrEqualToFinalShare));
        assert_eq!(p.preemption_grace_seconds, Some(0));
        // A refusing quota has no queue head to take for.
        let p = parse(r#"{"preemption":{"policy":"Never","fairShare":"LessThanInitialShare"}}"#)
            .unwrap();
        assert_eq!(
            p.validate(),
            Err(PolicyError::NeedsQueue {
                field: "preemption"
            })
        );
        assert!(
            parse(r#"{"mode":"Queue","preemption":{"policy":"Never","fairShare":"Always"}}"#)
                .is_err()
        );
    }

    #[test]
    fn submitter_fairness_is_a_half_life_in_days_checked_and_written_back() {
        const AGING: &str = r#""order":{"kind":"BestEffortFifo","agingSeconds":3600}"#;
        let p = parse(&format!(
            r#"{{"mode":"Queue",{AGING},"submitterFairness":{{}}}}"#
        ))
        .unwrap();
        assert_eq!(p.submitter_half_life_days, Some(DEFAULT_HALF_LIFE_DAYS));
        assert_eq!(p.submitter_half_life_ms(), Some(7 * 86_400_000));
        p.validate().unwrap();
        // Under strict FIFO nothing ages: fairness could pass an entry forever.
        let strict = parse(r#"{"mode":"Queue","submitterFairness":{}}"#).unwrap();
        assert_eq!(strict.validate(), Err(PolicyError::FairnessNeedsAging));
        assert!(PolicyError::FairnessNeedsAging
            .to_string()
            .contains("BestEffortFifo"));
        let p = parse(&format!(
            r#"{{"mode":"Queue",{AGING},"submitterFairness":{{"halfLifeDays":30}}}}"#
        ))
        .unwrap();
        let v = serde_json::to_value(p).unwrap();
        assert_eq!(v["submitterFairness"]["halfLifeDays"], 30);
        assert_eq!(parse(&v.to_string()).unwrap(), p);
        assert_eq!(QueuePolicy::queue().submitter_half_life_ms(), None);
        assert!(serde_json::to_value(QueuePolicy::queue()).unwrap()["submitterFairness"].is_null());
        for d in [0, MAX_HALF_LIFE_DAYS + 1, u32::MAX] {
            let p = QueuePolicy {
                submitter_half_life_days: Some(d),
                ..QueuePolicy::queue()
            };
            assert_eq!(p.validate(), Err(PolicyError::HalfLife(d)));
        }
        // Signs, fractions, strings and unknown fields are not days.
        for bad in [
            r#"{"mode":"Queue","submitterFairness":{"halfLifeDays":-1}}"#,
            r#"{"mode":"Queue","submitterFairness":{"halfLifeDays":1.5}}"#,
            r#"{"mode":"Queue","submitterFairness":{"halfLifeDays":"7"}}"#,
            r#"{"mode":"Queue","submitterFairness":{"halfLife":7}}"#,
            r#"{"mode":"Queue","submitterFairness":true}"#,
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        let p = parse(r#"{"submitterFairness":{"halfLifeDays":7}}"#).unwrap();
        assert_eq!(
            p.validate(),
            Err(PolicyError::NeedsQueue {
                field: "submitterFairness"
            })
        );
    }

    #[test]
    fn unknown_spellings_say_what_is_allowed() {
        for bad in [r#""queue""#, r#"{"mode":"Queue","agingSeconds":5}"#, "3"] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains("queueing is Refuse, Queue, or"), "{bad}: {e}");
        }
    }

    #[test]
    fn validation_names_the_field() {
        let mut p = QueuePolicy::queue();
        p.order = Order::BestEffortFifo { aging_seconds: 0 };
        assert!(p.validate().unwrap_err().to_string().contains("StrictFifo"));
        p.order = Order::BestEffortFifo {
            aging_seconds: MAX_WAIT_SECONDS + 1,
        };
        assert_eq!(p.validate(), Err(PolicyError::Aging(MAX_WAIT_SECONDS + 1)));
        let p = QueuePolicy {
            alert_after_seconds: Some(0),
            ..QueuePolicy::queue()
        };
        assert_eq!(p.validate(), Err(PolicyError::AlertAfter(0)));
        for n in [0, MAX_QUEUE as u32 + 1] {
            let p = QueuePolicy {
                max_per_submitter: Some(n),
                ..QueuePolicy::queue()
            };
            assert_eq!(p.validate(), Err(PolicyError::PerSubmitter(n)));
            assert!(p
                .validate()
                .unwrap_err()
                .to_string()
                .starts_with("queueing: maxPerSubmitter is"));
        }
        let p = QueuePolicy {
            max_per_submitter: Some(3),
            ..QueuePolicy::queue()
        };
        p.validate().unwrap();
        assert_eq!(p.per_submitter(), 3);
        assert_eq!(
            parse(r#"{"mode":"Queue","maxPerSubmitter":3}"#).unwrap(),
            p,
            "the long form names it"
        );
        assert_eq!(
            QueuePolicy::queue().per_submitter(),
            DEFAULT_PER_SUBMITTER as usize
        );
        let p = QueuePolicy {
            max_per_submitter: Some(3),
            ..Default::default()
        };
        assert_eq!(
            p.validate(),
            Err(PolicyError::NeedsQueue {
                field: "maxPerSubmitter"
            })
        );
        let p = QueuePolicy {
            preemption: Preemption::LowerPriority,
            ..Default::default()
        };
        assert_eq!(
            p.validate().unwrap_err().to_string(),
            "queueing: preemption only applies with mode Queue; set mode: Queue or remove preemption"
        );
    }

    #[test]
    fn alerts_after_the_threshold_only_when_queueing() {
        let p = QueuePolicy {
            alert_after_seconds: Some(60),
            ..QueuePolicy::queue()
        };
        assert!(!p.alerts(0, 59_999));
        assert!(p.alerts(0, 60_000));
        assert!(!QueuePolicy::queue().alerts(0, i64::MAX));
    }
}
