//! One reading: Prometheus's answers for a window, turned into each
//! workload's figures (`figures`) and, step by step, whether its cards sat
//! idle. Pure: the pods bizrq accounts and the answers come in, figures
//! go out.
//!
//! A window `[from, to)` is read on a grid of `step`: the point at `t`
//! stands for `[t − step, t)` (a range query from `from + step` to `to`),
//! so consecutive windows cut time without a gap or an overlap, and a
//! reading split anywhere on the grid adds up to the reading of the whole.
//! A pod counts for the part of each step it ran (`[start, end)`); a step
//! without a point of its is not measured (unknown, never idle).

use super::answer::{Answer, Grid, PodName, Point};
use super::figures::{whole_ms, Figures, GpuFigures, UseFigures};
use crate::quantity::NANO;
use crate::usage::QosClass;
use std::collections::BTreeMap;

/// A window of time read on a grid of `step_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub from_ms: i64,
    pub to_ms: i64,
    pub step_ms: i64,
}

impl Window {
    /// The points a range query for this window asks for.
    pub fn grid(&self) -> Grid {
        Grid {
            first_ms: self.from_ms + self.step_ms,
            last_ms: self.to_ms,
            step_ms: self.step_ms,
        }
    }

    pub fn steps(&self) -> i64 {
        (self.to_ms - self.from_ms) / self.step_ms
    }

    /// The next window to read at `now_ms`: from where the readings are
    /// known up to (`known_to`; `now − max_span` when unknown or older,
    /// so what was missed beyond it stays unknown) to the last step that
    /// ended `delay_ms` ago (Prometheus has scraped it by then), at most
    /// `max_steps` steps. None when not one whole step is ready.
    pub fn next(
        known_to: Option<i64>,
        now_ms: i64,
        step_ms: i64,
        delay_ms: i64,
        max_steps: i64,
        max_span_ms: i64,
    ) -> Option<Window> {
        if step_ms <= 0 || max_steps <= 0 {
            return None;
        }
        let ready = (now_ms - delay_ms).div_euclid(step_ms) * step_ms;
        let oldest = (now_ms - max_span_ms).div_euclid(step_ms) * step_ms;
        let from = match known_to {
            // A known end off the grid (the step changed) starts at the
            // next point of the new grid.
            Some(k) => (k + step_ms - 1).div_euclid(step_ms) * step_ms,
            None => ready - step_ms,
        }
        .max(oldest);
        let to = ready.min(from + max_steps * step_ms);
        (to > from).then_some(Window {
            from_ms: from,
            to_ms: to,
            step_ms,
        })
    }
}

/// A pod bizrq accounts, as the controller holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    pub name: PodName,
    /// The workload it belongs to (its reference) and the quota it is charged to.
    pub workload: String,
    pub quota: String,
    /// GPU cards it holds, in nano-units (0 for none), and their model
    /// when its workload names one.
    pub cards: i128,
    pub model: Option<String>,
    /// Its requests, in nano-units (cores, bytes).
    pub cpu_request: i128,
    pub memory_request: i128,
    pub qos: QosClass,
    pub start_ms: i64,
    pub end_ms: Option<i64>,
}

/// A pod held, as its caller keeps it: alone, or with its uid (the
/// controller's list, `(uid, Held)`), so that the list is measured as it
/// is, never copied (50,000 pods are 20 MiB: docs/benchmarks.md, "Real
/// usage read every minute").
pub trait AsHeld {
    fn held(&self) -> &Held;
}

impl AsHeld for Held {
    fn held(&self) -> &Held {
        self
    }
}

impl<K> AsHeld for (K, Held) {
    fn held(&self) -> &Held {
        &self.1
    }
}

impl Held {
    /// The part of `[a, b)` it ran.
    fn ran(&self, a: i64, b: i64) -> i64 {
        let s = self.start_ms.max(a);
        let e = self.end_ms.unwrap_or(b).min(b);
        (e - s).max(0)
    }
}

/// The answers of one reading, by metric; None for a metric whose query
/// failed (its figures are then unmeasured).
#[derive(Clone, Copy, Debug, Default)]
pub struct Answers<'a> {
    pub gpu_busy: Option<&'a Answer>,
    pub gpu_memory: Option<&'a Answer>,
    pub cpu: Option<&'a Answer>,
    pub memory: Option<&'a Answer>,
}

/// One step of a workload's GPUs: what was held and measured, and what
/// was busy, in nano-card-milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Step {
    /// The step's end (`t`): it stands for `[t − step, t)`.
    pub at_ms: i64,
    pub allocated: i128,
    pub measured: i128,
    pub busy: i128,
    /// The cards held in the step (nano-units), measured or not.
    pub cards: i128,
}

impl Step {
    /// Measured, and busy below `threshold_percent` of what was measured.
    pub fn is_idle(&self, threshold_percent: u8) -> bool {
        self.measured > 0 && self.busy * 100 < self.measured * threshold_percent as i128
    }
}

/// A workload's reading of one window.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reading {
    pub quota: String,
    pub namespace: String,
    /// The model of its cards, if its pods name one.
    pub model: Option<String>,
    pub figures: Figures,
    /// Its GPU steps in time order (empty for a workload without cards).
    pub steps: Vec<Step>,
    /// The part of each Burstable pod's use above its request, and each
    /// BestEffort pod's use, in nano-unit-milliseconds.
    pub above_request: Quality,
    /// Points above the cards the pod holds, dropped.
    pub absurd: u64,
}

/// Use beyond what was requested, by QoS class and resource, in
/// nano-unit-milliseconds (cores, bytes), for billing by quality of
/// service (`real_usage::billing`); and the run of Burstable and
/// BestEffort pods no point measured, in pod-milliseconds (billed on
/// request, and marked so).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Quality {
    pub burstable_cpu: i128,
    pub burstable_memory: i128,
    pub best_effort_cpu: i128,
    pub best_effort_memory: i128,
    pub burstable_cpu_unmeasured_ms: i64,
    pub burstable_memory_unmeasured_ms: i64,
    pub best_effort_cpu_unmeasured_ms: i64,
    pub best_effort_memory_unmeasured_ms: i64,
}

/// Each pod's points by time, for a lookup per step.
fn points_of<'a>(answer: Option<&'a Answer>, pod: &PodName) -> Option<&'a [Point]> {
    answer?.pods.get(pod).map(Vec::as_slice)
}

fn at(points: Option<&[Point]>, t: i64) -> Option<i128> {
    let p = points?;
    p.binary_search_by_key(&t, |p| p.at_ms)
        .ok()
        .map(|i| p[i].nanos)
}

/// How far above its cards a pod's busy cards may read before the point
/// is absurd (rounding in the template's division): 1 %.
fn busy_ceiling(cards: i128) -> i128 {
    cards + cards / 100
}

/// The reading of `window` for the pods `held`, workload by workload,
/// with each quota's idle threshold (`threshold_of`, in percent).
pub fn measure<H: AsHeld>(
    window: &Window,
    held: &[H],
    answers: Answers<'_>,
    threshold_of: impl Fn(&str) -> u8,
) -> BTreeMap<String, Reading> {
    // Per workload: its reading, and its nano-unit-ms sums, rounded once
    // at the end.
    let mut out: BTreeMap<String, (Reading, [i128; 8])> = BTreeMap::new();
    let step = window.step_ms;
    for pod in held {
        let pod = pod.held();
        let ran = pod.ran(window.from_ms, window.to_ms);
        if ran == 0 {
            continue;
        }
        // Looked up before it is made: a workload's name is copied once,
        // not once per pod.
        if !out.contains_key(&pod.workload) {
            let r = Reading {
                quota: pod.quota.clone(),
                namespace: pod.name.namespace.clone(),
                ..Reading::default()
            };
            out.insert(pod.workload.clone(), (r, [0; 8]));
        }
        let Some((r, sums)) = out.get_mut(&pod.workload) else {
            continue;
        };
        if r.model.is_none() && pod.cards > 0 {
            r.model = pod.model.clone();
        }
        let (busy, cpu, mem) = (
            points_of(answers.gpu_busy, &pod.name),
            points_of(answers.cpu, &pod.name),
            points_of(answers.memory, &pod.name),
        );
        let mut t = window.from_ms + step;
        let mut i = 0;
        while t <= window.to_ms {
            let covered = pod.ran(t - step, t) as i128;
            if covered > 0 {
                if pod.cards > 0 {
                    if r.steps.len() <= i {
                        r.steps.resize(i + 1, Step::default());
                    }
                    let s = &mut r.steps[i];
                    s.at_ms = t;
                    s.cards += pod.cards;
                    s.allocated += pod.cards * covered;
                    sums[0] += pod.cards * covered;
                    match at(busy, t) {
                        Some(v) if v > busy_ceiling(pod.cards) => r.absurd += 1,
                        Some(v) => {
                            let v = v.min(pod.cards);
                            s.measured += pod.cards * covered;
                            s.busy += v * covered;
                            sums[1] += pod.cards * covered;
                            sums[2] += v * covered;
                        }
                        None => {}
                    }
                }
                if let Some(v) = at(cpu, t) {
                    sums[4] += pod.cpu_request * covered;
                    sums[5] += v * covered;
                    let above = match pod.qos {
                        QosClass::Burstable => (v - pod.cpu_request).max(0),
                        QosClass::BestEffort => v,
                        QosClass::Guaranteed => 0,
                    };
                    match pod.qos {
                        QosClass::Burstable => r.above_request.burstable_cpu += above * covered,
                        QosClass::BestEffort => r.above_request.best_effort_cpu += above * covered,
                        QosClass::Guaranteed => {}
                    }
                } else {
                    let q = &mut r.above_request;
                    match pod.qos {
                        QosClass::Burstable => q.burstable_cpu_unmeasured_ms += covered as i64,
                        QosClass::BestEffort => q.best_effort_cpu_unmeasured_ms += covered as i64,
                        QosClass::Guaranteed => {}
                    }
                }
                if let Some(v) = at(mem, t) {
                    sums[6] += pod.memory_request * covered;
                    sums[7] += v * covered;
                    match pod.qos {
                        QosClass::Burstable => {
                            r.above_request.burstable_memory +=
                                (v - pod.memory_request).max(0) * covered
                        }
                        QosClass::BestEffort => r.above_request.best_effort_memory += v * covered,
                        QosClass::Guaranteed => {}
                    }
                } else {
                    let q = &mut r.above_request;
                    match pod.qos {
                        QosClass::Burstable => q.burstable_memory_unmeasured_ms += covered as i64,
                        QosClass::BestEffort => {
                            q.best_effort_memory_unmeasured_ms += covered as i64
                        }
                        QosClass::Guaranteed => {}
                    }
                }
            }
            t += step;
            i += 1;
        }
    }
    // In order already: collected without a search per workload.
    out.into_iter()
        .map(|(wref, (mut r, s))| {
            r.steps.retain(|s| s.allocated > 0);
            let threshold = threshold_of(&r.quota);
            let idle: i128 = r
                .steps
                .iter()
                .filter(|s| s.is_idle(threshold))
                .map(|s| s.measured)
                .sum();
            r.figures = Figures {
                gpu: GpuFigures {
                    allocated: whole_ms(s[0]),
                    measured: whole_ms(s[1]),
                    busy: whole_ms(s[2]),
                    idle: whole_ms(idle),
                },
                cpu: UseFigures {
                    requested: whole_ms(s[4]),
                    used: whole_ms(s[5]),
                },
                // Bytes × ms → MiB × s.
                memory: UseFigures {
                    requested: mib_seconds(s[6]),
                    used: mib_seconds(s[7]),
                },
            };
            (wref, r)
        })
        .collect()
}

/// Nano-byte-milliseconds as MiB-seconds, rounded down.
fn mib_seconds(nano_byte_ms: i128) -> i64 {
    (nano_byte_ms / (NANO * 1000 * (1 << 20))).clamp(0, i64::MAX as i128) as i64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::real_usage::answer::Rejected;

    const MIN: i64 = 60_000;
    const T: i64 = 1_795_255_200_000;
    const ONE: i128 = NANO;

    fn held(pod: &str, workload: &str, cards: i64, start: i64, end: Option<i64>) -> Held {
        Held {
            name: PodName {
                namespace: "ml".into(),
                pod: pod.into(),
            },
            workload: workload.into(),
            quota: "team".into(),
            cards: cards as i128 * ONE,
            model: None,
            cpu_request: 2 * ONE,
            memory_request: (1 << 30) * ONE,
            qos: QosClass::Burstable,
            start_ms: start,
            end_ms: end,
        }
    }

    fn answer(series: &[(&str, &[(i64, i128)])]) -> Answer {
        Answer {
            pods: series
                .iter()
                .map(|(pod, pts)| {
                    (
                        PodName {
                            namespace: "ml".into(),
                            pod: pod.to_string(),
                        },
                        pts.iter()
                            .map(|&(at_ms, nanos)| Point { at_ms, nanos })
                            .collect(),
                    )
                })
                .collect(),
            rejected: Rejected::default(),
            series: series.len(),
        }
    }

    #[test]
    fn the_next_window_follows_the_grid_and_its_bounds() {
        // First reading: the last whole step that ended `delay` ago.
        let w = Window::next(None, T + 90_000, MIN, 30_000, 60, 3_600_000).unwrap();
        assert_eq!((w.from_ms, w.to_ms), (T, T + MIN));
        // Then on from where it is known, up to what is ready.
        let w = Window::next(
            Some(T + MIN),
            T + 5 * MIN + 31_000,
            MIN,
            30_000,
            60,
            3_600_000,
        )
        .unwrap();
        assert_eq!((w.from_ms, w.to_ms), (T + MIN, T + 5 * MIN));
        // Nothing ready yet.
        assert_eq!(
            Window::next(Some(T + MIN), T + MIN + 80_000, MIN, 30_000, 60, 3_600_000),
            None
        );
        // Long behind: at most max_steps at a time, from no further back
        // than the span kept.
        let w = Window::next(Some(T), T + 48 * 60 * MIN, MIN, 0, 60, 24 * 60 * MIN).unwrap();
        assert_eq!(w.from_ms, T + 24 * 60 * MIN);
        assert_eq!(w.steps(), 60);
        assert_eq!(w.grid().points(), 60);
    }

    #[test]
    fn a_workload_is_measured_step_by_step_for_the_part_its_pods_ran() {
        // 10 minutes; pod a (2 cards) runs throughout, b (2 cards) from
        // minute 5; a busy at 100 % then idle, b at 50 %, no point for b's
        // last minute.
        let w = Window {
            from_ms: T,
            to_ms: T + 10 * MIN,
            step_ms: MIN,
        };
        let pods = [
            held("a", "batch/Job/ml/train", 2, T - MIN, None),
            held("b", "batch/Job/ml/train", 2, T + 5 * MIN, None),
        ];
        let a_pts: Vec<(i64, i128)> = (1..=10)
            .map(|k| (T + k * MIN, if k <= 4 { 2 * ONE } else { 0 }))
            .collect();
        let b_pts: Vec<(i64, i128)> = (6..=9).map(|k| (T + k * MIN, ONE)).collect();
        let gpu = answer(&[("a", &a_pts), ("b", &b_pts)]);
        let readings = measure(
            &w,
            &pods,
            Answers {
                gpu_busy: Some(&gpu),
                ..Answers::default()
            },
            |_| 5,
        );
        let r = &readings["batch/Job/ml/train"];
        let min = MIN;
        assert_eq!(r.figures.gpu.allocated, (2 * 10 + 2 * 5) * min);
        assert_eq!(r.figures.gpu.measured, (2 * 10 + 2 * 4) * min);
        assert_eq!(r.figures.gpu.busy, (2 * 4 + 4) * min);
        // Minutes 5 (a idle, b not yet), and none after: b at 50 % keeps
        // the workload above 5 %; minute 10 (a idle, b unmeasured) is idle
        // on what was measured.
        assert_eq!(r.figures.gpu.idle, (2 + 2) * min);
        assert_eq!(r.steps.len(), 10);
        assert!(r.steps[4].is_idle(5) && !r.steps[5].is_idle(5) && r.steps[9].is_idle(5));
    }

    #[test]
    fn a_point_above_the_cards_held_is_absurd_and_a_little_above_is_rounding() {
        let w = Window {
            from_ms: T,
            to_ms: T + 2 * MIN,
            step_ms: MIN,
        };
        let pods = [held("a", "w", 2, T, None)];
        let gpu = answer(&[("a", &[(T + MIN, 2 * ONE + 1), (T + 2 * MIN, 3 * ONE)])]);
        let r = &measure(
            &w,
            &pods,
            Answers {
                gpu_busy: Some(&gpu),
                ..Answers::default()
            },
            |_| 5,
        )["w"];
        assert_eq!(r.absurd, 1);
        assert_eq!(r.figures.gpu.busy, 2 * MIN, "clamped to the cards held");
        assert_eq!(r.figures.gpu.measured, 2 * MIN);
    }

    #[test]
    fn cpu_and_memory_count_use_above_the_request_by_class() {
        let w = Window {
            from_ms: T,
            to_ms: T + MIN,
            step_ms: MIN,
        };
        let mut be = held("be", "w", 0, T, None);
        be.qos = QosClass::BestEffort;
        be.cpu_request = 0;
        let pods = [held("a", "w", 0, T, None), be];
        let cpu = answer(&[("a", &[(T + MIN, 3 * ONE)]), ("be", &[(T + MIN, ONE / 2)])]);
        let r = &measure(
            &w,
            &pods,
            Answers {
                cpu: Some(&cpu),
                ..Answers::default()
            },
            |_| 5,
        )["w"];
        assert_eq!(r.figures.cpu.used, 3 * MIN + MIN / 2);
        assert_eq!(r.figures.cpu.requested, 2 * MIN);
        assert_eq!(r.above_request.burstable_cpu, ONE * MIN as i128);
        assert_eq!(r.above_request.best_effort_cpu, ONE / 2 * MIN as i128);
        assert!(r.steps.is_empty(), "no cards, no GPU steps");
    }
}
