//! `spec.idle` as plain data: when a workload's GPUs count as idle, when
//! it is shown as "idle now", when its submitter and owners are told, and
//! whether it is then suspended (docs/real-usage.md). The rules that read
//! it are `crate::real_usage::idle`.
//!
//! ```yaml
//! idle:
//!   threshold: 5      # percent: busy below it is idle (1–100)
//!   showAfter: 30m    # idle this long: "idle now" on the overview
//!   after: 2h         # idle this long: told (alert "idle GPUs")
//!   action: Notify    # or Suspend: batch work is then reclaimed
//! ```
//!
//! A quota without `idle` takes its nearest ancestor's (so a department's
//! policy holds for its teams), and at a root the defaults below.

use crate::workload::runtime::{format_duration, parse_duration, RunTimeError};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub const DEFAULT_THRESHOLD: u8 = 5;
pub const DEFAULT_SHOW_AFTER_MS: i64 = 30 * 60_000;
pub const DEFAULT_AFTER_MS: i64 = 2 * 3_600_000;

/// What happens once a workload has been idle for `after`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum IdleAction {
    /// Its submitter and the quota's owners are told.
    #[default]
    Notify,
    /// Told, and batch work (a Job, a Kubeflow or Volcano job) is marked
    /// for reclaim and suspended after the reclaim grace unless it gets
    /// busy meanwhile; serving workloads are only told.
    Suspend,
}

/// A duration in milliseconds, written as `30m`, `2h`, `1h30m`, `90s`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Span(pub i64);

impl Serialize for Span {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_duration(self.0))
    }
}

impl<'de> Deserialize<'de> for Span {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        parse_span(&text)
            .map(Span)
            .map_err(serde::de::Error::custom)
    }
}

/// Why an idle duration is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("idle: '{value}' is not a duration: {why}; write e.g. \"30m\", \"2h\", \"1h30m\"")]
pub struct SpanError {
    pub value: String,
    pub why: &'static str,
}

fn parse_span(text: &str) -> Result<i64, SpanError> {
    parse_duration(text).map_err(|e| SpanError {
        value: text.chars().take(32).collect(),
        why: match e {
            RunTimeError::BadDuration { why, .. } => why,
            _ => "it is out of range",
        },
    })
}

/// `spec.idle`. Every field may be left out (its default, or the nearest
/// ancestor's whole policy when `idle` is absent).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IdlePolicy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<u8>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub show_after: Option<Span>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<Span>,
    #[serde(default)]
    pub action: IdleAction,
}

/// Why a policy is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IdleError {
    #[error("idle.threshold is {0}: a percentage from 1 to 100")]
    Threshold(u8),
    #[error("idle.showAfter ({show}) is longer than idle.after ({after}): a workload is shown idle before anyone is told")]
    ShownAfterTold { show: String, after: String },
}

impl IdlePolicy {
    pub fn threshold(&self) -> u8 {
        self.threshold.unwrap_or(DEFAULT_THRESHOLD)
    }

    pub fn show_after_ms(&self) -> i64 {
        self.show_after.map_or(DEFAULT_SHOW_AFTER_MS, |s| s.0)
    }

    pub fn after_ms(&self) -> i64 {
        self.after.map_or(DEFAULT_AFTER_MS, |s| s.0)
    }

    pub fn validate(&self) -> Result<(), IdleError> {
        let t = self.threshold();
        if !(1..=100).contains(&t) {
            return Err(IdleError::Threshold(t));
        }
        if self.show_after_ms() > self.after_ms() {
            return Err(IdleError::ShownAfterTold {
                show: format_duration(self.show_after_ms()),
                after: format_duration(self.after_ms()),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_reads_and_prints_as_written() {
        let p: IdlePolicy = serde_json::from_str(
            r#"{"threshold": 10, "showAfter": "20m", "after": "1h30m", "action": "Suspend"}"#,
        )
        .unwrap();
        assert_eq!(p.threshold(), 10);
        assert_eq!(p.show_after_ms(), 20 * 60_000);
        assert_eq!(p.after_ms(), 90 * 60_000);
        assert_eq!(p.action, IdleAction::Suspend);
        assert_eq!(
            serde_json::to_string(&p).unwrap(),
            r#"{"threshold":10,"showAfter":"20m","after":"1h30m","action":"Suspend"}"#
        );
        let d = IdlePolicy::default();
        assert_eq!(
            (d.threshold(), d.show_after_ms(), d.after_ms()),
            (5, 1_800_000, 7_200_000)
        );
        assert_eq!(d.action, IdleAction::Notify);
        assert!(d.validate().is_ok());
    }

    #[test]
    fn a_bad_policy_says_what_to_write() {
        for (json, says) in [
            (r#"{"after": "2 hours"}"#, "not a duration"),
            (r#"{"after": "-2h"}"#, "negative"),
            (r#"{"action": "Kill"}"#, "unknown variant"),
            (r#"{"threshold": 500}"#, "invalid value"),
            (r#"{"treshold": 5}"#, "unknown field"),
        ] {
            let e = serde_json::from_str::<IdlePolicy>(json)
                .unwrap_err()
                .to_string();
            assert!(e.contains(says), "{json}: {e}");
        }
        let p: IdlePolicy = serde_json::from_str(r#"{"threshold": 0}"#).unwrap();
        assert_eq!(p.validate(), Err(IdleError::Threshold(0)));
        let p: IdlePolicy = serde_json::from_str(r#"{"showAfter": "3h"}"#).unwrap();
        assert!(p
            .validate()
            .unwrap_err()
            .to_string()
            .contains("longer than idle.after"));
    }
}
