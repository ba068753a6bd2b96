//! The alerts of real usage (docs/real-usage.md), pure: a workload idle
//! past its quota's `idle.after` is one `idle_gpus` alert, keyed by the
//! workload, saying what it costs; Prometheus silent past
//! `--prometheus-alert-after-seconds` is one `real_usage_unknown` alert,
//! on no quota, to the admins. The reader judges them after each reading
//! (`cluster::controller::real_usage`); the alert engine leaves them
//! alone (`Kind::judged_by_reader`).

use super::{evaluate_where, Condition, Evaluation, Kind, Level, OpenAlert};
use quota::object::idle::{IdleAction, IdlePolicy};
use quota::real_usage::figures::card_hours_words;
use quota::real_usage::idle::{standing, IdleNow, Standing};
use quota::real_usage::readings::Readings;
use serde_json::json;

/// The key of the `real_usage_unknown` alert.
pub const PROMETHEUS_KEY: &str = "prometheus";

/// One `idle_gpus` condition per workload idle for its policy's `after`.
/// `policy_of` gives a quota's policy in force; `suspends` whether a
/// workload would be suspended under `Suspend` (batch work).
pub fn idle_conditions(
    idle: &[IdleNow],
    policy_of: impl Fn(&str) -> IdlePolicy,
    suspends: impl Fn(&str) -> bool,
) -> Vec<Condition> {
    idle.iter()
        .filter_map(|i| {
            let policy = policy_of(&i.quota);
            let Standing::Told(action) = standing(&i.streak, &policy) else {
                return None;
            };
            let by = if i.user.is_empty() {
                String::new()
            } else {
                format!(", submitted by {}", i.user)
            };
            let then = match action {
                IdleAction::Suspend if suspends(&i.workload) => {
                    "; it is suspended after the reclaim grace unless it gets busy (idle.action Suspend)"
                }
                IdleAction::Suspend => "; it is not batch work, so it is only told (idle.action Suspend)",
                IdleAction::Notify => "",
            };
            Some(Condition {
                kind: Kind::IdleGpus,
                quota: i.quota.clone(),
                key: i.workload.clone(),
                keys: Vec::new(),
                level: Level::Warning,
                message: format!(
                    "{} in {}{by}: {}{then}",
                    i.name(),
                    i.quota,
                    i.words()
                ),
                numbers: json!({
                    "workload": i.workload,
                    "submitter": i.user,
                    "cards": i.streak.cards().to_string(),
                    "model": i.model,
                    "idleSince": quota::time::format_rfc3339(i.streak.since_ms),
                    "idleCardHours": card_hours_words(i.streak.idle),
                    "busiestPercent": quota::real_usage::figures::percent(i.streak.peak_permille),
                    "action": match action { IdleAction::Notify => "Notify", IdleAction::Suspend => "Suspend" },
                }),
            })
        })
        .collect()
}

/// The `real_usage_unknown` condition, when readings have failed for at
/// least `after_ms` by `now_ms`.
pub fn unknown_condition(state: &Readings, now_ms: i64, after_ms: i64) -> Option<Condition> {
    let down = state.down_since_ms?;
    if now_ms - down < after_ms {
        return None;
    }
    let since = state.unknown_since(now_ms, i64::MAX).unwrap_or(down);
    let why = state.error.as_deref().unwrap_or("no answer");
    Some(Condition {
        kind: Kind::RealUsageUnknown,
        quota: String::new(),
        key: PROMETHEUS_KEY.into(),
        keys: Vec::new(),
        level: Level::Warning,
        message: format!(
            "Real usage unknown since {}: readings of Prometheus fail since {} ({why}). Efficiency \
             and idle GPUs wait for it; admission and billing (on requests) go on \
             (docs/real-usage.md)",
            quota::time::format_when(since),
            quota::time::format_when(down)
        ),
        numbers: json!({
            "unknownSince": quota::time::format_rfc3339(since),
            "failingSince": quota::time::format_rfc3339(down),
            "error": why,
        }),
    })
}

/// What the reader's judgement changes: its kinds opened, kept or
/// resolved, nothing else touched.
pub fn evaluate(conditions: Vec<Condition>, open: &[OpenAlert]) -> Evaluation {
    evaluate_where(conditions, open, Kind::judged_by_reader)
}

#[cfg(test)]
mod tests {
    use super::*;
    use quota::object::idle::Span;
    use quota::real_usage::idle::Streak;

    const H: i64 = 3_600_000;

    fn idle(workload: &str, hours: i64) -> IdleNow {
        IdleNow {
            workload: workload.into(),
            quota: "nlp".into(),
            namespace: "ml".into(),
            user: "alice".into(),
            model: Some("A100".into()),
            streak: Streak {
                since_ms: 0,
                until_ms: hours * H,
                cards: 8_000_000_000,
                idle: 8 * hours * H,
                peak_permille: 20,
            },
        }
    }

    #[test]
    fn a_workload_idle_past_its_policy_is_told_with_what_it_costs() {
        let policy = IdlePolicy {
            after: Some(Span(2 * H)),
            action: IdleAction::Suspend,
            ..IdlePolicy::default()
        };
        let all = [
            idle("batch/Job/ml/train", 3),
            idle("apps/Deployment/ml/serve", 3),
            idle("batch/Job/ml/young", 1),
        ];
        let c = idle_conditions(&all, |_| policy, |w| w.starts_with("batch/"));
        assert_eq!(c.len(), 2, "the young one is not told yet");
        assert_eq!(
            c[0].message,
            "train in nlp, submitted by alice: 8 A100 GPUs idle for 3 hours: 24 card-hours; it is \
             suspended after the reclaim grace unless it gets busy (idle.action Suspend)"
        );
        assert_eq!(
            c[0].fingerprint(),
            "idle_gpus|nlp|batch/Job/ml/train|warning"
        );
        assert!(c[1]
            .message
            .contains("it is not batch work, so it is only told"));
        // Open alerts of the engine's kinds are not the reader's to resolve.
        let open = [
            OpenAlert {
                id: 1,
                kind: Kind::IdleGpus,
                fingerprint: "idle_gpus|nlp|batch/Job/ml/gone|warning".into(),
                key: "batch/Job/ml/gone".into(),
                keys: vec![],
            },
            OpenAlert {
                id: 2,
                kind: Kind::Threshold,
                fingerprint: "threshold|nlp||warning".into(),
                key: String::new(),
                keys: vec![],
            },
        ];
        let e = evaluate(c.clone(), &open);
        assert_eq!(e.resolve, [1]);
        assert_eq!(e.open.len(), 2);
        // And the engine leaves the reader's alone.
        let e = crate::alerts::evaluate(Vec::new(), &open);
        assert_eq!(e.resolve, [2]);
    }

    #[test]
    fn prometheus_silent_past_the_threshold_is_one_alert_to_the_admins() {
        let state = Readings {
            known_to_ms: Some(1_000_000),
            down_since_ms: Some(1_060_000),
            error: Some("timed out".into()),
        };
        assert_eq!(unknown_condition(&state, 1_100_000, 600_000), None);
        let c = unknown_condition(&state, 1_700_000, 600_000).unwrap();
        assert!(
            c.message
                .starts_with("Real usage unknown since 1970-01-01 00:16 UTC"),
            "{}",
            c.message
        );
        assert!(crate::alerts::tells_admins(c.kind, &c.key));
        assert_eq!(unknown_condition(&Readings::default(), 1_700_000, 0), None);
    }
}
