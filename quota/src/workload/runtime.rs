//! A workload's declared maximum run time (docs/budgets.md §2), read from
//! the parsed object: a Job's `spec.activeDeadlineSeconds`, a Kubeflow
//! job's `spec.runPolicy.activeDeadlineSeconds`, or the annotation
//! `biz.group.resource.quota/max-runtime` on any kind. When several are
//! set the shortest binds. A declaration that is present but wrong is an
//! error, never silently ignored: a reservation must not rest on a guess.

use serde_json::Value;

pub const MAX_RUNTIME_ANNOTATION: &str = "biz.group.resource.quota/max-runtime";

/// The longest run time a reservation covers: 366 days. Longer is not a
/// run time but "forever", and would reserve a year of cards.
pub const MAX_RUN_MS: i64 = 366 * 86_400_000;

/// Where a run time was declared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Source {
    ActiveDeadlineSeconds,
    RunPolicy,
    Annotation,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunTime {
    pub ms: i64,
    pub source: Source,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RunTimeError {
    #[error("{field} is {value}: it must be a whole number of seconds")]
    NotAnInteger { field: &'static str, value: String },
    #[error("{field} is {value}: a run time must be more than zero")]
    NotPositive { field: &'static str, value: String },
    #[error("{field} is {value}: longer than the 366 days a reservation can cover")]
    TooLong { field: &'static str, value: String },
    #[error("annotation {MAX_RUNTIME_ANNOTATION} is '{value}': {why}; write e.g. \"90m\", \"4h\", \"2h30m\", \"3d\" or seconds (\"5400\")")]
    BadDuration { value: String, why: &'static str },
}

const DEADLINE: &str = "spec.activeDeadlineSeconds";
const RUN_POLICY: &str = "spec.runPolicy.activeDeadlineSeconds";

/// The declared run time of `object` (a workload as parsed JSON), if any.
pub fn max_runtime(object: &Value) -> Result<Option<RunTime>, RunTimeError> {
    let spec = object.get("spec");
    let mut found: Vec<RunTime> = Vec::new();
    if let Some(v) = spec.and_then(|s| s.get("activeDeadlineSeconds")) {
        if let Some(ms) = seconds(DEADLINE, v)? {
            found.push(RunTime {
                ms,
                source: Source::ActiveDeadlineSeconds,
            });
        }
    }
    if let Some(v) = spec
        .and_then(|s| s.get("runPolicy"))
        .and_then(|r| r.get("activeDeadlineSeconds"))
    {
        if let Some(ms) = seconds(RUN_POLICY, v)? {
            found.push(RunTime {
                ms,
                source: Source::RunPolicy,
            });
        }
    }
    let annotation = object
        .get("metadata")
        .and_then(|m| m.get("annotations"))
        .and_then(|a| a.get(MAX_RUNTIME_ANNOTATION));
    if let Some(v) = annotation {
        let text = match v {
            Value::String(s) => s.as_str(),
            Value::Null => "",
            _ => {
                return Err(RunTimeError::BadDuration {
                    value: v.to_string(),
                    why: "annotations are strings",
                })
            }
        };
        found.push(RunTime {
            ms: parse_duration(text)?,
            source: Source::Annotation,
        });
    }
    Ok(found.into_iter().min_by_key(|r| r.ms))
}

/// The declared run time from the parts an adapter has already parsed
/// (`max_runtime` without reading the object again): a Job's
/// `spec.activeDeadlineSeconds`, a Kubeflow job's
/// `spec.runPolicy.activeDeadlineSeconds`, and the object's annotations.
pub fn declared(
    deadline: Option<&Value>,
    run_policy: Option<&Value>,
    annotations: &std::collections::BTreeMap<String, String>,
) -> Result<Option<RunTime>, RunTimeError> {
    let mut found: Vec<RunTime> = Vec::new();
    if let Some(ms) = deadline
        .map(|v| seconds(DEADLINE, v))
        .transpose()?
        .flatten()
    {
        found.push(RunTime {
            ms,
            source: Source::ActiveDeadlineSeconds,
        });
    }
    if let Some(ms) = run_policy
        .map(|v| seconds(RUN_POLICY, v))
        .transpose()?
        .flatten()
    {
        found.push(RunTime {
            ms,
            source: Source::RunPolicy,
        });
    }
    if let Some(text) = annotations.get(MAX_RUNTIME_ANNOTATION) {
        found.push(RunTime {
            ms: parse_duration(text)?,
            source: Source::Annotation,
        });
    }
    Ok(found.into_iter().min_by_key(|r| r.ms))
}

/// A `…Seconds` field: null is absent; otherwise a positive integer up to
/// 366 days, in milliseconds.
fn seconds(field: &'static str, v: &Value) -> Result<Option<i64>, RunTimeError> {
    let value = || v.to_string();
    let n = match v {
        Value::Null => return Ok(None),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => i,
            (None, Some(_)) => {
                return Err(RunTimeError::TooLong {
                    field,
                    value: value(),
                });
            }
            _ => {
                return Err(RunTimeError::NotAnInteger {
                    field,
                    value: value(),
                });
            }
        },
        _ => {
            return Err(RunTimeError::NotAnInteger {
                field,
                value: value(),
            })
        }
    };
    if n <= 0 {
        return Err(RunTimeError::NotPositive {
            field,
            value: value(),
        });
    }
    if n > MAX_RUN_MS / 1000 {
        return Err(RunTimeError::TooLong {
            field,
            value: value(),
        });
    }
    Ok(Some(n * 1000))
}

/// `"90m"`, `"4h"`, `"2h30m"`, `"3d"`, `"1d12h"`, or whole seconds
/// (`"5400"`) → milliseconds. Units: `d` (24 h), `h`, `m`, `s`, each a
/// whole number, in any order (as Go's `time.ParseDuration`, without
/// fractions or sub-second units). Must be more than zero and at most 366
/// days.
pub fn parse_duration(text: &str) -> Result<i64, RunTimeError> {
    let bad = |why| RunTimeError::BadDuration {
        value: text.to_string(),
        why,
    };
    let s = text.trim();
    if s.is_empty() {
        return Err(bad("it is empty"));
    }
    let mut total: i64 = 0;
    if s.bytes().all(|b| b.is_ascii_digit()) {
        total = s
            .parse::<i64>()
            .ok()
            .and_then(|n| n.checked_mul(1000))
            .ok_or(bad("it is too long"))?;
    } else {
        let mut rest = s;
        while !rest.is_empty() {
            let n_end = rest
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(rest.len());
            if n_end == 0 {
                return Err(bad(if rest.starts_with('-') {
                    "a run time cannot be negative"
                } else {
                    "expected a number before each unit"
                }));
            }
            let n: i64 = rest[..n_end].parse().map_err(|_| bad("it is too long"))?;
            let unit_ms: i64 = match rest[n_end..].chars().next() {
                Some('d') => 86_400_000,
                Some('h') => 3_600_000,
                Some('m') if !rest[n_end..].starts_with("ms") => 60_000,
                Some('s') => 1000,
                Some('.') => return Err(bad("fractions are not accepted (write 1h30m, not 1.5h)")),
                None => return Err(bad("a number without a unit (d, h, m or s)")),
                Some(_) => return Err(bad("units are d, h, m and s")),
            };
            total = n
                .checked_mul(unit_ms)
                .and_then(|ms| total.checked_add(ms))
                .ok_or(bad("it is too long"))?;
            rest = &rest[n_end + 1..];
        }
    }
    if total == 0 {
        return Err(bad("a run time must be more than zero"));
    }
    if total > MAX_RUN_MS {
        return Err(bad(
            "it is longer than the 366 days a reservation can cover",
        ));
    }
    Ok(total)
}

/// `2h30m`, `3d`, `45s`: milliseconds as [`parse_duration`] reads them
/// (rounded up to the second).
pub fn format_duration(ms: i64) -> String {
    let mut s = ms.max(0).div_euclid(1000) + i64::from(ms.rem_euclid(1000) > 0 && ms > 0);
    if s == 0 {
        return "0s".into();
    }
    let mut out = String::new();
    for (unit, size) in [("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)] {
        if s >= size {
            out.push_str(&format!("{}{unit}", s / size));
            s %= size;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn durations_parse_like_go_in_whole_units() {
        assert_eq!(parse_duration("90m"), Ok(90 * 60_000));
        assert_eq!(parse_duration("4h"), Ok(4 * 3_600_000));
        assert_eq!(parse_duration("2h30m"), Ok(9_000_000));
        assert_eq!(parse_duration("30m2h"), Ok(9_000_000));
        assert_eq!(parse_duration("1d12h"), Ok(36 * 3_600_000));
        assert_eq!(parse_duration(" 5400 "), Ok(5_400_000));
        assert_eq!(parse_duration("366d"), Ok(MAX_RUN_MS));
        for (bad, says) in [
            ("", "empty"),
            ("0", "more than zero"),
            ("0h0m", "more than zero"),
            ("-4h", "negative"),
            ("1.5h", "fractions"),
            ("4", "more than zero"),
            ("4x", "units are"),
            ("100ms", "units are"),
            ("h", "number before"),
            ("367d", "366 days"),
            ("99999999999999999999h", "too long"),
            ("9223372036854775807d", "too long"),
            ("4h 30m", "number before"),
        ] {
            if bad == "4" {
                continue; // 4 seconds is a run time
            }
            let e = parse_duration(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad:?}: {e}");
        }
        assert_eq!(parse_duration("4"), Ok(4000));
    }

    #[test]
    fn durations_print_back() {
        for text in ["2h30m", "3d", "45s", "1d1h1m1s"] {
            assert_eq!(format_duration(parse_duration(text).unwrap()), text);
        }
        assert_eq!(format_duration(1), "1s");
        assert_eq!(format_duration(0), "0s");
    }

    #[test]
    fn a_job_deadline() {
        let job = json!({"kind":"Job","spec":{"activeDeadlineSeconds": 7200}});
        assert_eq!(
            max_runtime(&job),
            Ok(Some(RunTime {
                ms: 7_200_000,
                source: Source::ActiveDeadlineSeconds
            }))
        );
        let none = json!({"kind":"Job","spec":{"activeDeadlineSeconds": null}});
        assert_eq!(max_runtime(&none), Ok(None));
        assert_eq!(
            max_runtime(&json!({"kind":"Deployment","spec":{}})),
            Ok(None)
        );
    }

    #[test]
    fn a_kubeflow_run_policy_and_the_shortest_wins() {
        let tf = json!({
            "kind": "PyTorchJob",
            "metadata": {"annotations": {MAX_RUNTIME_ANNOTATION: "3h"}},
            "spec": {"runPolicy": {"activeDeadlineSeconds": 14400}}
        });
        assert_eq!(
            max_runtime(&tf),
            Ok(Some(RunTime {
                ms: 3 * 3_600_000,
                source: Source::Annotation
            }))
        );
        let tf = json!({"spec": {"runPolicy": {"activeDeadlineSeconds": 3600}},
                        "metadata": {"annotations": {MAX_RUNTIME_ANNOTATION: "3h"}}});
        assert_eq!(max_runtime(&tf).unwrap().unwrap().source, Source::RunPolicy);
    }

    #[test]
    fn wrong_declarations_are_errors() {
        for (spec, says) in [
            (json!({"activeDeadlineSeconds": -5}), "more than zero"),
            (json!({"activeDeadlineSeconds": 0}), "more than zero"),
            (json!({"activeDeadlineSeconds": 1.5}), "whole number"),
            (json!({"activeDeadlineSeconds": "3600"}), "whole number"),
            (
                json!({"activeDeadlineSeconds": 31_708_800_001u64}),
                "366 days",
            ),
            (json!({"activeDeadlineSeconds": u64::MAX}), "366 days"),
            (
                json!({"runPolicy": {"activeDeadlineSeconds": -1}}),
                "runPolicy",
            ),
        ] {
            let e = max_runtime(&json!({ "spec": spec }))
                .unwrap_err()
                .to_string();
            assert!(e.contains(says), "{spec}: {e}");
        }
        let bad = json!({"metadata": {"annotations": {MAX_RUNTIME_ANNOTATION: "soon"}}});
        assert!(max_runtime(&bad).unwrap_err().to_string().contains("2h30m"));
    }
}
