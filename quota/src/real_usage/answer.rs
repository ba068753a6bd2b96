//! Prometheus's answer to a range query (`/api/v1/query_range`), read as
//! hostile input: the body is bounded by the caller, the series and their
//! points here, and every value is checked before it counts. Values are
//! read exactly, as decimals, into nano-units: no float ever reaches a
//! figure (`parse_value`).
//!
//! What a series must carry: the labels `namespace` and `pod` (the
//! templates aggregate `by (namespace, pod)`; a cluster that labels
//! otherwise rewrites them in its template). Series of one pod are added
//! up point by point, so a template that keeps one series per card or per
//! container still counts the pod whole.

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;

/// One nano-unit: values are held as integers of 10^-9.
const NANO: i128 = crate::quantity::NANO;

/// What one answer may hold at most.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Series (before adding up a pod's): beyond it the whole answer is
    /// refused, since any part of it would be a wrong total.
    pub max_series: usize,
    /// The largest value a series may report (nano-units); above it a
    /// point is absurd and dropped.
    pub max_value: i128,
}

/// One point of a pod's series: at `at_ms`, `nanos` (already checked).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Point {
    pub at_ms: i64,
    pub nanos: i128,
}

/// A pod, as Prometheus labels it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PodName {
    pub namespace: String,
    pub pod: String,
}

/// Points dropped, by why: each is counted, none is silently taken.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rejected {
    /// `NaN`, `±Inf`, or not a number at all.
    pub not_a_number: u64,
    pub negative: u64,
    /// Above `Limits::max_value`.
    pub absurd: u64,
    /// A timestamp outside the window asked for, or not on its grid.
    pub off_grid: u64,
    /// Series without a usable `namespace` or `pod` label.
    pub unlabelled: u64,
}

impl Rejected {
    pub fn total(&self) -> u64 {
        self.not_a_number + self.negative + self.absurd + self.off_grid + self.unlabelled
    }

    pub fn add(&mut self, o: &Rejected) {
        self.not_a_number += o.not_a_number;
        self.negative += o.negative;
        self.absurd += o.absurd;
        self.off_grid += o.off_grid;
        self.unlabelled += o.unlabelled;
    }

    /// Each reason with its count, for metrics and logs.
    pub fn by_reason(&self) -> [(&'static str, u64); 5] {
        [
            ("not_a_number", self.not_a_number),
            ("negative", self.negative),
            ("absurd", self.absurd),
            ("off_grid", self.off_grid),
            ("unlabelled", self.unlabelled),
        ]
    }
}

/// An answer read: each pod's points in time order (added up over its
/// series), and what was dropped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Answer {
    pub pods: BTreeMap<PodName, Vec<Point>>,
    pub rejected: Rejected,
    /// How many series the answer held.
    pub series: usize,
}

/// Why a whole answer is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    #[error("Prometheus's answer is not the JSON of a query: {0}")]
    NotJson(String),
    #[error("Prometheus refused the query ({kind}): {message}")]
    Refused { kind: String, message: String },
    #[error(
        "Prometheus answered a {0}, not a matrix: the template must be a range vector expression"
    )]
    NotAMatrix(String),
    #[error("Prometheus answered {0} series or more, above the limit of {1}: narrow the template or raise --prometheus-max-series")]
    TooManySeries(usize, usize),
    #[error("a series holds {0} points, more than the {1} steps asked for")]
    TooManyPoints(usize, usize),
}

/// The grid a range query asked for: points at `first_ms`, `first_ms +
/// step_ms`, … up to `last_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grid {
    pub first_ms: i64,
    pub last_ms: i64,
    pub step_ms: i64,
}

impl Grid {
    pub fn holds(&self, at_ms: i64) -> bool {
        self.step_ms > 0
            && at_ms >= self.first_ms
            && at_ms <= self.last_ms
            && (at_ms - self.first_ms) % self.step_ms == 0
    }

    pub fn points(&self) -> usize {
        if self.step_ms <= 0 || self.last_ms < self.first_ms {
            return 0;
        }
        ((self.last_ms - self.first_ms) / self.step_ms + 1) as usize
    }
}

/// Reads a range query's answer: every point checked against `limits`
/// and on `grid`, each pod's series added up.
pub fn read(body: &[u8], grid: Grid, limits: &Limits) -> Result<Answer, AnswerError> {
    let raw: Raw<'_> =
        serde_json::from_slice(body).map_err(|e| AnswerError::NotJson(clip(&e.to_string())))?;
    if raw.status != "success" {
        return Err(AnswerError::Refused {
            kind: clip(raw.error_type.as_deref().unwrap_or("unknown")),
            message: clip(raw.error.as_deref().unwrap_or("(no message)")),
        });
    }
    let data = raw
        .data
        .ok_or_else(|| AnswerError::NotJson("no data".into()))?;
    if data.result_type != "matrix" {
        return Err(AnswerError::NotAMatrix(clip(&data.result_type)));
    }
    let series = data.result.0;
    if series.len() > limits.max_series {
        return Err(AnswerError::TooManySeries(series.len(), limits.max_series));
    }
    let mut out = Answer {
        series: series.len(),
        ..Answer::default()
    };
    // One point per step asked for: more is not this query's answer.
    let max_points = grid.points();
    // Each series' points, then by pod (a stable sort: one pod's series in
    // the answer's order), added up and put in the map at once: built
    // from sorted pods its nodes are full, a third of the memory of
    // inserting them one by one (docs/benchmarks.md, "Real usage read
    // every minute").
    let mut read: Vec<(PodName, Vec<Point>)> = Vec::with_capacity(series.len());
    for s in series {
        if s.values.len() > max_points {
            return Err(AnswerError::TooManyPoints(s.values.len(), max_points));
        }
        let Some(name) = s.metric.pod_name() else {
            out.rejected.unlabelled += 1;
            continue;
        };
        let mut points = Vec::with_capacity(s.values.len());
        for (Millis(at_ms), text) in s.values {
            if !grid.holds(at_ms) {
                out.rejected.off_grid += 1;
                continue;
            }
            match check(&text, limits.max_value) {
                Ok(nanos) => points.push(Point { at_ms, nanos }),
                Err(Bad::NotANumber) => out.rejected.not_a_number += 1,
                Err(Bad::Negative) => out.rejected.negative += 1,
                Err(Bad::Absurd) => out.rejected.absurd += 1,
            }
        }
        if !points.is_empty() {
            read.push((name, points));
        }
    }
    read.sort_by(|a, b| a.0.cmp(&b.0));
    let mut pods: Vec<(PodName, Vec<Point>)> = Vec::with_capacity(read.len());
    for (name, points) in read {
        match pods.last_mut() {
            Some((last, into)) if *last == name => merge(into, points),
            _ => {
                let mut into = Vec::new();
                merge(&mut into, points);
                pods.push((name, into));
            }
        }
    }
    out.pods = pods.into_iter().collect();
    Ok(out)
}

/// Adds `more` into `into` point by point (both on one grid), keeping
/// time order.
fn merge(into: &mut Vec<Point>, mut more: Vec<Point>) {
    if into.is_empty() {
        more.sort_by_key(|p| p.at_ms);
        more.dedup_by_key(|p| p.at_ms);
        *into = more;
        return;
    }
    let mut by_time: BTreeMap<i64, i128> = into.iter().map(|p| (p.at_ms, p.nanos)).collect();
    let mut seen = std::collections::BTreeSet::new();
    for p in more {
        // One series holds one value per time; a repeat is not added twice.
        if seen.insert(p.at_ms) {
            let v = by_time.entry(p.at_ms).or_insert(0);
            *v = v.saturating_add(p.nanos);
        }
    }
    *into = by_time
        .into_iter()
        .map(|(at_ms, nanos)| Point { at_ms, nanos })
        .collect();
}

/// Why a value is dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bad {
    NotANumber,
    Negative,
    Absurd,
}

fn check(text: &str, max: i128) -> Result<i128, Bad> {
    let v = parse_value(text)?;
    if v > max {
        return Err(Bad::Absurd);
    }
    Ok(v)
}

/// A sample value as Prometheus writes it (`"0.5"`, `"12"`, `"1e-05"`,
/// `"NaN"`, `"+Inf"`), exactly, in nano-units: digits beyond the
/// nano-unit are dropped (rounded towards zero). A negative value is
/// refused (`-0` is 0), as is anything not a finite decimal, and a value
/// of more than 10^18 units is absurd whatever the metric.
pub fn parse_value(text: &str) -> Result<i128, Bad> {
    let s = text.trim();
    let (negative, s) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let (mantissa, exponent) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let exp: i32 = match exponent {
        None => 0,
        Some(e) => {
            let digits = e.strip_prefix(['+', '-']).unwrap_or(e);
            if digits.is_empty() || digits.len() > 4 || !digits.bytes().all(|b| b.is_ascii_digit())
            {
                return Err(Bad::NotANumber);
            }
            e.parse().map_err(|_| Bad::NotANumber)?
        }
    };
    let (whole, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if whole.is_empty() && frac.is_empty()
        || !whole.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(Bad::NotANumber);
    }
    // value = digits × 10^(exp − frac.len()); in nano-units × 10^9.
    let digits = format!("{whole}{frac}");
    let digits = digits.trim_start_matches('0');
    let scale = exp as i64 - frac.len() as i64 + 9;
    let nanos = if digits.is_empty() {
        0
    } else if scale >= 0 {
        // Beyond 10^18 units (10^27 nano-units) nothing is a usage.
        if digits.len() as i64 + scale > 27 {
            return Err(if negative { Bad::Negative } else { Bad::Absurd });
        }
        digits.parse::<i128>().map_err(|_| Bad::NotANumber)? * 10i128.pow(scale as u32)
    } else {
        let keep = digits.len() as i64 + scale;
        if keep <= 0 {
            0
        } else {
            if keep > 27 {
                return Err(if negative { Bad::Negative } else { Bad::Absurd });
            }
            digits[..keep as usize]
                .parse::<i128>()
                .map_err(|_| Bad::NotANumber)?
        }
    };
    if negative && nanos != 0 {
        return Err(Bad::Negative);
    }
    Ok(nanos)
}

/// At most 200 characters of something Prometheus said, without controls.
fn clip(s: &str) -> String {
    s.chars()
        .filter(|c| !crate::text::is_hostile(*c))
        .take(200)
        .collect()
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Raw<'a> {
    #[serde(borrow)]
    status: std::borrow::Cow<'a, str>,
    #[serde(default)]
    data: Option<Data<'a>>,
    #[serde(default)]
    error_type: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Data<'a> {
    #[serde(borrow)]
    result_type: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    result: Results<'a>,
}

/// The result array, read as it streams: a scalar or string result is
/// refused by `resultType` above, so anything but an array of series is
/// not JSON of a matrix.
struct Results<'a>(Vec<RawSeries<'a>>);

impl<'de: 'a, 'a> Deserialize<'de> for Results<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Results<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array of series")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(s) = seq.next_element::<RawSeries<'a>>()? {
                    out.push(s);
                }
                Ok(Results(out))
            }
            // `resultType: scalar` answers `[t, "v"]`; refused by its type.
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
                Ok(Results(Vec::new()))
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

#[derive(Deserialize)]
struct RawSeries<'a> {
    #[serde(default, borrow)]
    metric: Labels<'a>,
    #[serde(default, borrow)]
    values: Vec<(Millis, std::borrow::Cow<'a, str>)>,
}

#[derive(Default, Deserialize)]
struct Labels<'a> {
    #[serde(default, borrow)]
    namespace: Option<std::borrow::Cow<'a, str>>,
    #[serde(default, borrow)]
    pod: Option<std::borrow::Cow<'a, str>>,
}

impl Labels<'_> {
    /// Both labels, each a name a Kubernetes object could have (at most
    /// 253 characters, none hostile); None otherwise.
    fn pod_name(&self) -> Option<PodName> {
        let ok =
            |s: &str| !s.is_empty() && s.len() <= 253 && crate::text::hostile_char(s).is_none();
        let (ns, pod) = (self.namespace.as_deref()?, self.pod.as_deref()?);
        (ok(ns) && ok(pod)).then(|| PodName {
            namespace: ns.to_string(),
            pod: pod.to_string(),
        })
    }
}

/// A timestamp in seconds (`1795255200.5`) as milliseconds, rounded to
/// the nearest: Prometheus's own precision.
struct Millis(i64);

impl<'de> Deserialize<'de> for Millis {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Millis;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a timestamp in seconds")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Millis, E> {
                i64::try_from(v)
                    .ok()
                    .and_then(|v| v.checked_mul(1000))
                    .map(Millis)
                    .ok_or_else(|| E::custom("timestamp out of range"))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Millis, E> {
                v.checked_mul(1000)
                    .map(Millis)
                    .ok_or_else(|| E::custom("timestamp out of range"))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Millis, E> {
                // Prometheus's timestamps have millisecond precision, well
                // inside an f64's 15 digits for any date of this era.
                if !v.is_finite() || v.abs() > 9.0e12 {
                    return Err(E::custom("timestamp out of range"));
                }
                Ok(Millis((v * 1000.0).round() as i64))
            }
        }
        d.deserialize_any(V)
    }
}

/// 1 unit, in nano-units.
pub const ONE: i128 = NANO;

#[cfg(test)]
mod tests {
    use super::*;

    const GRID: Grid = Grid {
        first_ms: 1_795_255_260_000,
        last_ms: 1_795_255_380_000,
        step_ms: 60_000,
    };

    fn limits() -> Limits {
        Limits {
            max_series: 10,
            max_value: 1024 * ONE,
        }
    }

    fn pod(ns: &str, name: &str) -> PodName {
        PodName {
            namespace: ns.into(),
            pod: name.into(),
        }
    }

    #[test]
    fn values_are_read_exactly_as_decimals() {
        for (text, nanos) in [
            ("0", 0),
            ("-0", 0),
            ("0.5", 500_000_000),
            ("12", 12 * ONE),
            ("+3.25", 3_250_000_000),
            ("1e-05", 10_000),
            ("1.5E3", 1500 * ONE),
            ("0.0000000019", 1),
            ("0.0000000001", 0),
            ("7.", 7 * ONE),
            (".25", 250_000_000),
            ("00042", 42 * ONE),
        ] {
            assert_eq!(parse_value(text), Ok(nanos), "{text}");
        }
        for (text, bad) in [
            ("NaN", Bad::NotANumber),
            ("+Inf", Bad::NotANumber),
            ("-Inf", Bad::NotANumber),
            ("", Bad::NotANumber),
            (".", Bad::NotANumber),
            ("1e", Bad::NotANumber),
            ("1e99999", Bad::NotANumber),
            ("0x10", Bad::NotANumber),
            ("1,5", Bad::NotANumber),
            ("-0.5", Bad::Negative),
            ("-1e300", Bad::Negative),
            ("1e300", Bad::Absurd),
            ("1e19", Bad::Absurd),
        ] {
            assert_eq!(parse_value(text), Err(bad), "{text}");
        }
    }

    #[test]
    fn an_answer_is_read_pod_by_pod_and_bad_points_are_counted() {
        let body = br#"{"status":"success","data":{"resultType":"matrix","result":[
            {"metric":{"namespace":"ml","pod":"a-0","gpu":"0"},"values":[[1795255260,"0.5"],[1795255320,"NaN"],[1795255380,"1"]]},
            {"metric":{"namespace":"ml","pod":"a-0","gpu":"1"},"values":[[1795255260,"0.25"],[1795255320,"0.5"]]},
            {"metric":{"namespace":"ml","pod":"b-0"},"values":[[1795255260,"-1"],[1795255290,"1"],[1795255320,"5000"]]},
            {"metric":{"namespace":"ml","pod":"d-0"},"values":[[1795255380.000,"2"]]},
            {"metric":{"pod":"c-0"},"values":[[1795255260,"1"]]}
        ]}}"#;
        let a = read(body, GRID, &limits()).unwrap();
        assert_eq!(a.series, 5);
        let t = |s: i64| s * 1000;
        assert_eq!(
            a.pods[&pod("ml", "a-0")],
            [
                Point {
                    at_ms: t(1795255260),
                    nanos: 750_000_000
                },
                Point {
                    at_ms: t(1795255320),
                    nanos: 500_000_000
                },
                Point {
                    at_ms: t(1795255380),
                    nanos: ONE
                },
            ],
            "the series of one pod add up; a NaN point counts nothing"
        );
        assert_eq!(
            a.pods[&pod("ml", "d-0")],
            [Point {
                at_ms: t(1795255380),
                nanos: 2 * ONE
            }]
        );
        assert!(!a.pods.contains_key(&pod("ml", "b-0")), "no point left");
        assert_eq!(
            a.rejected,
            Rejected {
                not_a_number: 1,
                negative: 1,
                absurd: 1,
                off_grid: 1,
                unlabelled: 1,
            }
        );
    }

    #[test]
    fn a_refusal_or_an_answer_beyond_the_limits_is_refused_whole() {
        let err = read(
            br#"{"status":"error","errorType":"bad_data","error":"parse error at char 3"}"#,
            GRID,
            &limits(),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Prometheus refused the query (bad_data): parse error at char 3"
        );
        let vector = br#"{"status":"success","data":{"resultType":"vector","result":[]}}"#;
        assert!(matches!(
            read(vector, GRID, &limits()),
            Err(AnswerError::NotAMatrix(_))
        ));
        let many: Vec<String> = (0..11)
            .map(|i| format!(r#"{{"metric":{{"namespace":"n","pod":"p{i}"}},"values":[]}}"#))
            .collect();
        let body = format!(
            r#"{{"status":"success","data":{{"resultType":"matrix","result":[{}]}}}}"#,
            many.join(",")
        );
        assert_eq!(
            read(body.as_bytes(), GRID, &limits()),
            Err(AnswerError::TooManySeries(11, 10))
        );
        let long = br#"{"status":"success","data":{"resultType":"matrix","result":[
            {"metric":{"namespace":"n","pod":"p"},"values":[[1,"1"],[2,"1"],[3,"1"],[4,"1"]]}]}}"#;
        assert_eq!(
            read(long, GRID, &limits()),
            Err(AnswerError::TooManyPoints(4, 3))
        );
        for junk in [&b"<html>"[..], b"", b"[]", b"{\"status\":\"success\"}"] {
            assert!(
                matches!(read(junk, GRID, &limits()), Err(AnswerError::NotJson(_))),
                "{junk:?}"
            );
        }
    }

    #[test]
    fn hostile_labels_are_not_pods() {
        let body = "{\"status\":\"success\",\"data\":{\"resultType\":\"matrix\",\"result\":[\
            {\"metric\":{\"namespace\":\"ml\",\"pod\":\"a\\u0000b\"},\"values\":[[1795255260,\"1\"]]},\
            {\"metric\":{\"namespace\":\"ml\",\"pod\":\"\"},\"values\":[[1795255260,\"1\"]]}]}}";
        let a = read(body.as_bytes(), GRID, &limits()).unwrap();
        assert!(a.pods.is_empty());
        assert_eq!(a.rejected.unlabelled, 2);
    }
}
