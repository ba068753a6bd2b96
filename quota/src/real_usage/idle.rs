//! Idle cards: how long a workload's GPUs have sat below its quota's
//! threshold (a streak, carried from reading to reading), which workloads
//! are "idle now", which are told, and the words that tell them.
//!
//! A streak is measured idle steps one after another: a busy step ends it,
//! and so does a step nobody measured (Prometheus down, a pod without an
//! exporter) — what is not known to be idle is never told nor suspended
//! as idle.

use super::figures::{card_hours_words, whole_ms};
use super::measure::Step;
use crate::object::idle::{IdleAction, IdlePolicy};
use crate::object::Quota;
use crate::quantity::{Quantity, NANO};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A workload idle since `since_ms` up to `until_ms` (the end of its
/// latest idle step), holding `cards` then; `idle` card-milliseconds
/// wasted over the streak.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Streak {
    pub since_ms: i64,
    pub until_ms: i64,
    /// Cards held in the latest step, in nano-units.
    #[serde(with = "crate::quantity::serde_acc")]
    pub cards: i128,
    /// Card-milliseconds idle over the streak.
    pub idle: i64,
    /// Its busiest measured step within the streak, per mille of what was
    /// measured.
    pub peak_permille: i64,
}

impl Streak {
    pub fn idle_ms(&self) -> i64 {
        self.until_ms - self.since_ms
    }

    pub fn cards(&self) -> Quantity {
        Quantity::from_nanos(self.cards)
    }
}

/// The streak after `steps` (one window's, in time order), from `before`
/// (the streak as the previous window left it, if it reached this
/// window's start `from_ms`).
pub fn advance(
    before: Option<&Streak>,
    from_ms: i64,
    step_ms: i64,
    steps: &[Step],
    threshold_percent: u8,
) -> Option<Streak> {
    let mut s = before.filter(|s| s.until_ms == from_ms).cloned();
    // Steps of the window the workload held no cards in are not in
    // `steps`: a gap is not measured, and ends a streak.
    let mut expect = from_ms + step_ms;
    let mut acc: i128 = s.as_ref().map_or(0, |s| s.idle as i128 * NANO);
    for step in steps {
        if step.at_ms != expect {
            s = None;
            acc = 0;
        }
        expect = step.at_ms + step_ms;
        if step.is_idle(threshold_percent) {
            let permille = (step.busy * 1000 / step.measured) as i64;
            let cur = s.get_or_insert_with(|| Streak {
                since_ms: step.at_ms - step_ms,
                until_ms: step.at_ms,
                cards: step.cards,
                idle: 0,
                peak_permille: 0,
            });
            acc += step.measured;
            cur.until_ms = step.at_ms;
            cur.cards = step.cards;
            cur.idle = whole_ms(acc);
            cur.peak_permille = cur.peak_permille.max(permille);
        } else {
            s = None;
            acc = 0;
        }
    }
    let last = steps.last().map_or(from_ms, |s| s.at_ms);
    // A window that ends after the last step it held cards in: no longer
    // holding them, no longer idle.
    s.filter(|s| s.until_ms == last)
}

/// The policy in force for `quota`: its own `spec.idle`, else its
/// nearest ancestor's, else the defaults. `parent_of` answers a quota's
/// spec by name (a forest's lookup); a cycle or a missing parent stops
/// the walk.
pub fn policy_of<'a>(quota: &'a Quota, find: impl Fn(&str) -> Option<&'a Quota>) -> IdlePolicy {
    let mut q = quota;
    for _ in 0..64 {
        if let Some(p) = q.spec.idle {
            return p;
        }
        match find(&q.spec.parent) {
            Some(parent) if !q.spec.parent.is_empty() => q = parent,
            _ => break,
        }
    }
    IdlePolicy::default()
}

/// What is known of a workload idle now, for the overview, the API and
/// the alert: who, where, how much, since when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IdleNow {
    pub workload: String,
    pub quota: String,
    pub namespace: String,
    /// Who submitted it (the AdmissionReview's user), "" when unknown.
    pub user: String,
    /// The GPU model of its cards, if its quota names one.
    pub model: Option<String>,
    pub streak: Streak,
}

/// Where an idle streak stands against its policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Standing {
    /// Idle, not yet for `showAfter`.
    Quiet,
    /// Idle for `showAfter`: shown as "idle now".
    Shown,
    /// Idle for `after`: told, and under `Suspend`, taken back.
    Told(IdleAction),
}

pub fn standing(streak: &Streak, policy: &IdlePolicy) -> Standing {
    let ms = streak.idle_ms();
    if ms >= policy.after_ms() {
        Standing::Told(policy.action)
    } else if ms >= policy.show_after_ms() {
        Standing::Shown
    } else {
        Standing::Quiet
    }
}

/// The idle workloads shown as "idle now" (idle for their quota's
/// `showAfter` or longer), with their policies: what the overview, the
/// quota page, the API and reclaim's idle-first order read. `find`
/// answers a quota by name (a forest's lookup).
pub fn shown<'a>(
    idle: Vec<IdleNow>,
    find: impl Fn(&str) -> Option<&'a Quota> + Copy,
) -> Vec<(IdleNow, IdlePolicy)> {
    idle.into_iter()
        .filter_map(|i| {
            let policy = policy_of(find(&i.quota)?, find);
            (standing(&i.streak, &policy) != Standing::Quiet).then_some((i, policy))
        })
        .collect()
}

impl IdleNow {
    /// "8 A100 GPUs idle for 3 hours: 24 card-hours" (what the alert and the
    /// overview say of it).
    pub fn words(&self) -> String {
        let cards = crate::readable::grouped(self.streak.cards());
        let plural = if self.streak.cards == crate::quantity::NANO {
            "GPU"
        } else {
            "GPUs"
        };
        let what = match &self.model {
            Some(m) => format!("{m} {plural}"),
            None => plural.to_string(),
        };
        format!(
            "{cards} {what} idle for {}: {}",
            crate::budget::runway::span(self.streak.idle_ms()),
            card_hours_words(self.streak.idle)
        )
    }

    /// Its workload's name (`train` of `batch/Job/ml/train`).
    pub fn name(&self) -> &str {
        self.workload.rsplit('/').next().unwrap_or(&self.workload)
    }
}

/// The idle workloads of a reading, by workload: the streaks that run to
/// the reading's end.
pub type Streaks = BTreeMap<String, Streak>;

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: i64 = 60_000;
    const T: i64 = 1_795_255_200_000;

    fn step(k: i64, cards: i128, busy_permille: i128) -> Step {
        let m = cards * NANO * MIN as i128;
        Step {
            at_ms: T + k * MIN,
            allocated: m,
            measured: m,
            busy: m * busy_permille / 1000,
            cards: cards * NANO,
        }
    }

    #[test]
    fn a_streak_runs_over_idle_steps_and_across_windows() {
        let w1: Vec<Step> = (1..=10)
            .map(|k| step(k, 8, if k <= 4 { 900 } else { 20 }))
            .collect();
        let s = advance(None, T, MIN, &w1, 5).unwrap();
        assert_eq!((s.since_ms, s.until_ms), (T + 4 * MIN, T + 10 * MIN));
        assert_eq!(s.idle, 8 * 6 * MIN);
        assert_eq!(s.peak_permille, 20);
        // The next window goes on from it.
        let w2: Vec<Step> = (11..=20).map(|k| step(k, 8, 0)).collect();
        let s2 = advance(Some(&s), T + 10 * MIN, MIN, &w2, 5).unwrap();
        assert_eq!((s2.since_ms, s2.until_ms), (T + 4 * MIN, T + 20 * MIN));
        assert_eq!(s2.idle, 8 * 16 * MIN);
        // Split anywhere, the same streak.
        let all: Vec<Step> = w1.iter().chain(&w2).copied().collect();
        assert_eq!(advance(None, T, MIN, &all, 5), Some(s2.clone()));
        // A busy step ends it; so does a step not measured.
        let mut busy = w2.clone();
        busy[9] = step(20, 8, 500);
        assert_eq!(advance(Some(&s), T + 10 * MIN, MIN, &busy, 5), None);
        let mut gap = w2.clone();
        gap.remove(3);
        let after_gap = advance(Some(&s), T + 10 * MIN, MIN, &gap, 5).unwrap();
        assert_eq!(
            after_gap.since_ms,
            T + 14 * MIN,
            "starts again after the gap"
        );
        let mut unmeasured = w2;
        unmeasured[5].measured = 0;
        unmeasured[5].busy = 0;
        assert_eq!(
            advance(Some(&s), T + 10 * MIN, MIN, &unmeasured, 5)
                .unwrap()
                .since_ms,
            T + 16 * MIN
        );
        // A streak that did not reach this window's start is not continued.
        assert_eq!(advance(Some(&s), T + 11 * MIN, MIN, &[], 5), None);
    }

    #[test]
    fn the_policy_is_the_nearest_ancestors_and_says_where_a_streak_stands() {
        use crate::object::idle::Span;
        let mk = |name: &str, parent: &str, idle: Option<IdlePolicy>| {
            let mut q = Quota::new(name, Default::default());
            q.spec.parent = parent.into();
            q.spec.idle = idle;
            q
        };
        let dept = IdlePolicy {
            after: Some(Span(3_600_000)),
            action: IdleAction::Suspend,
            ..IdlePolicy::default()
        };
        let all = [
            mk("acme", "", None),
            mk("research", "acme", Some(dept)),
            mk("nlp", "research", None),
        ];
        let find = |n: &str| all.iter().find(|q| q.name() == n);
        assert_eq!(policy_of(&all[2], find), dept);
        assert_eq!(policy_of(&all[0], find), IdlePolicy::default());
        let streak = |ms: i64| Streak {
            since_ms: 0,
            until_ms: ms,
            cards: 8 * NANO,
            idle: 8 * ms,
            peak_permille: 0,
        };
        assert_eq!(standing(&streak(10 * MIN), &dept), Standing::Quiet);
        assert_eq!(standing(&streak(30 * MIN), &dept), Standing::Shown);
        assert_eq!(
            standing(&streak(60 * MIN), &dept),
            Standing::Told(IdleAction::Suspend)
        );
    }

    #[test]
    fn an_idle_workload_says_what_it_costs() {
        let now = IdleNow {
            workload: "batch/Job/ml/train".into(),
            quota: "nlp".into(),
            namespace: "ml".into(),
            user: "alice".into(),
            model: Some("A100".into()),
            streak: Streak {
                since_ms: 0,
                until_ms: 3 * 3_600_000,
                cards: 8 * NANO,
                idle: 24 * 3_600_000,
                peak_permille: 10,
            },
        };
        assert_eq!(now.words(), "8 A100 GPUs idle for 3 hours: 24 card-hours");
        // Long streaks read in the portal's words, not `27d23h15m`.
        let weekend = IdleNow {
            streak: Streak {
                until_ms: 60 * 3_600_000 + 15 * 60_000,
                ..now.streak.clone()
            },
            ..now.clone()
        };
        assert!(
            weekend
                .words()
                .starts_with("8 A100 GPUs idle for 2.5 days: "),
            "{}",
            weekend.words()
        );
        assert_eq!(now.name(), "train");
    }
}
