//! The queue entry a held workload carries on itself (docs/queueing.md
//! §12, "The entry on the object"): the mutating webhook queues a
//! workload that does not fit by holding it back **and** writing this
//! annotation in the same patch, without a write of the quota; the
//! controller's round folds such entries into `status.queue` in the write
//! it makes anyway. The object is then the durable record of the entry,
//! as Kueue keeps a workload's state on its `Workload` object.
//!
//! The annotation is writable by whoever may write the object, so it is
//! never trusted to order the queue: the mutating webhook replaces it on
//! every CREATE and puts it back on any UPDATE not made by bizrq, and the
//! controller reads it through `read`, which caps its size, checks every
//! field and keeps `since` within the object's own life (never before its
//! creation time), falling back to the creation time when it is bad.

use super::{submitter, Queued};
use crate::workload::PodSet;
use serde::{Deserialize, Serialize};

/// The annotation: compact JSON of `Mark`.
pub const QUEUED_ANNOTATION: &str = "bizrq.io/queued";

/// The longest value `read` accepts (a valid one is under 250 bytes).
pub const MAX_MARK: usize = 512;

/// How far before the object's creation time (another clock: the API
/// server's) a `since` may be: the webhook answers before the object is
/// stored. Earlier is taken for a forgery and replaced by the creation time.
pub const SKEW_MS: i64 = 10_000;

/// The longest declared run time kept (a year): beyond it, none.
const MAX_RUN_MS: i64 = 366 * 24 * 3_600_000;

/// What the annotation holds: the entry's own state. Pod sets are read
/// from the object by its adapter; the uid is the object's.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Mark {
    /// When it joined the queue, ms since the epoch.
    pub since: i64,
    /// The priority the webhook resolved (for people; rounds resolve the
    /// classes again).
    #[serde(default)]
    pub priority: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submitted_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_ms: Option<i64>,
}

impl Mark {
    /// The mark of an entry the webhook queues.
    pub fn of(work: &Queued) -> Mark {
        Mark {
            since: work.submitted_ms,
            priority: work.priority,
            submitted_by: work.submitted_by.clone(),
            run_ms: work.run_ms,
        }
    }

    /// The annotation's value.
    pub fn encode(&self) -> String {
        serde_json::to_string(self).expect("a mark serialises")
    }
}

/// The annotation's value read defensively: None when it is too long, not
/// this JSON, or a field is out of range (`since` not positive, a negative
/// or absurd run time, a submitter with control characters or longer than
/// `MAX_SUBMITTER`). `since` is then checked against the object's life by
/// `entry`.
pub fn parse(value: &str) -> Option<Mark> {
    if value.len() > MAX_MARK {
        return None;
    }
    let m: Mark = serde_json::from_str(value).ok()?;
    let user_ok = m.submitted_by.as_deref().is_none_or(|u| {
        !u.is_empty() && u.len() <= super::MAX_SUBMITTER && !u.chars().any(char::is_control)
    });
    let run_ok = m.run_ms.is_none_or(|r| r > 0 && r <= MAX_RUN_MS);
    (m.since > 0 && user_ok && run_ok).then_some(m)
}

/// The entry of a held workload that carries the annotation `value`:
/// `pod_sets` as its adapter reads it released, `uid` and `classes` the
/// object's, `created_ms` its creation time. `since` is the mark's when it
/// lies between `created_ms − SKEW_MS` and `now_ms`, else the creation time
/// (a forged or garbled mark takes no place ahead of what was created
/// before it); a mark that does not read falls back wholly: creation time,
/// no submitter, no run time. The priority is left to the round, which
/// resolves the classes.
pub fn entry(
    value: &str,
    wref: &str,
    uid: &str,
    classes: Vec<String>,
    pod_sets: Vec<PodSet>,
    created_ms: Option<i64>,
    now_ms: i64,
) -> Queued {
    let mark = parse(value);
    let fallback = created_ms.unwrap_or(now_ms).min(now_ms);
    let since = mark
        .as_ref()
        .map(|m| m.since)
        .filter(|s| *s <= now_ms && created_ms.is_none_or(|c| *s >= c.saturating_sub(SKEW_MS)))
        .unwrap_or(fallback);
    Queued {
        workload_ref: wref.to_string(),
        uid: uid.to_string(),
        priority: 0,
        priority_classes: classes,
        submitted_ms: since,
        pod_sets,
        run_ms: mark.as_ref().and_then(|m| m.run_ms),
        submitted_by: mark
            .and_then(|m| m.submitted_by)
            .and_then(|u| submitter(&u)),
        preempted: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const C: i64 = 1_800_000_000_000;

    fn work(since: i64) -> Queued {
        Queued {
            workload_ref: "batch/Job/ml/a".into(),
            uid: String::new(),
            priority: 7,
            priority_classes: vec![],
            submitted_ms: since,
            pod_sets: vec![],
            run_ms: Some(60_000),
            submitted_by: Some("alice".into()),
            preempted: false,
        }
    }

    #[test]
    fn a_mark_round_trips_and_is_small() {
        let m = Mark::of(&work(C));
        let v = m.encode();
        assert!(v.len() < 120, "{v}");
        assert_eq!(parse(&v), Some(m));
        let e = entry(&v, "batch/Job/ml/a", "u1", vec![], vec![], Some(C), C + 5);
        assert_eq!(e.submitted_ms, C);
        assert_eq!(e.submitted_by.as_deref(), Some("alice"));
        assert_eq!(e.run_ms, Some(60_000));
        assert_eq!(e.uid, "u1");
    }

    #[test]
    fn a_forged_or_garbled_mark_takes_no_place_ahead() {
        let now = C + 60_000;
        let at = |v: &str| entry(v, "batch/Job/ml/a", "u", vec![], vec![], Some(C), now);
        // Before its own creation (beyond the clocks' skew): creation time.
        let early = Mark::of(&work(C - SKEW_MS - 1)).encode();
        assert_eq!(at(&early).submitted_ms, C);
        // Within the skew: kept.
        let skewed = Mark::of(&work(C - SKEW_MS)).encode();
        assert_eq!(at(&skewed).submitted_ms, C - SKEW_MS);
        // In the future: creation time.
        assert_eq!(at(&Mark::of(&work(now + 1)).encode()).submitted_ms, C);
        // Not JSON, unknown fields, wrong types, too long, bad ranges.
        for bad in [
            "x".to_string(),
            r#"{"since":1,"extra":1}"#.to_string(),
            r#"{"since":"1"}"#.to_string(),
            r#"{"since":0}"#.to_string(),
            r#"{"since":-5}"#.to_string(),
            format!(r#"{{"since":{C},"runMs":-1}}"#),
            format!(r#"{{"since":{C},"runMs":99999999999999}}"#),
            format!(r#"{{"since":{C},"submittedBy":"a\u0000b"}}"#),
            format!(r#"{{"since":{C},"submittedBy":""}}"#),
            format!(r#"{{"since":{C},"submittedBy":"{}"}}"#, "u".repeat(129)),
            format!(r#"{{"since":{C},"priority":3000000000}}"#),
            format!(
                r#"{{"since":{C},"submittedBy":"{}"}}"#,
                "u".repeat(MAX_MARK)
            ),
        ] {
            assert_eq!(parse(&bad), None, "{bad}");
            let e = at(&bad);
            assert_eq!(e.submitted_ms, C, "{bad}");
            assert_eq!((e.submitted_by, e.run_ms), (None, None), "{bad}");
        }
        // No creation time known: at most now.
        let e = entry(&early, "batch/Job/ml/a", "u", vec![], vec![], None, now);
        assert_eq!(e.submitted_ms, C - SKEW_MS - 1);
        let e = entry("x", "batch/Job/ml/a", "u", vec![], vec![], None, now);
        assert_eq!(e.submitted_ms, now);
    }
}
