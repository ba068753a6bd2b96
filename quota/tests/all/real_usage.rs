//! Real usage's invariants (`quota::real_usage`): a reading split anywhere
//! on its grid adds up to the reading of the whole window, figure by
//! figure, and an idle streak carried from window to window is the streak
//! of the whole; busy never exceeds measured, measured never allocated.

use proptest::prelude::*;
use quota::real_usage::answer::{Answer, PodName, Point, Rejected};
use quota::real_usage::figures::Figures;
use quota::real_usage::idle::{advance, Streak};
use quota::real_usage::measure::{measure, Answers, Held, Window};
use quota::usage::QosClass;
use std::collections::BTreeMap;

const STEP: i64 = 60_000;
const T: i64 = 1_795_255_200_000;
const NANO: i128 = 1_000_000_000;

fn pods() -> impl Strategy<Value = Vec<(i64, i64, Option<i64>, i64)>> {
    // (cards, start step offset in ms, end, workload index)
    prop::collection::vec(
        (
            0i64..9,
            -5 * STEP..40 * STEP,
            prop::option::of(0i64..45 * STEP),
            0i64..3,
        ),
        1..6,
    )
}

fn held(spec: &[(i64, i64, Option<i64>, i64)]) -> Vec<Held> {
    spec.iter()
        .enumerate()
        .map(|(i, &(cards, start, end, w))| Held {
            name: PodName {
                namespace: "ml".into(),
                pod: format!("p{i}"),
            },
            workload: format!("batch/Job/ml/w{w}"),
            quota: "team".into(),
            cards: cards as i128 * NANO,
            model: None,
            cpu_request: NANO,
            memory_request: NANO << 20,
            qos: QosClass::Burstable,
            start_ms: T + start,
            end_ms: end.map(|e| T + e.max(start)),
        })
        .collect()
}

/// Each pod's busy cards at each step: a value per (pod, step), some steps
/// missing (not measured).
fn answer(held: &[Held], values: &[Option<u16>], steps: i64) -> Answer {
    let mut pods = BTreeMap::new();
    for (i, h) in held.iter().enumerate() {
        let pts: Vec<Point> = (1..=steps)
            .filter_map(|k| {
                let v = values[(i * 41 + k as usize) % values.len()]?;
                // Up to the cards held (and a little above, rounding).
                let nanos = h.cards * v as i128 / 1000;
                Some(Point {
                    at_ms: T + k * STEP,
                    nanos,
                })
            })
            .collect();
        pods.insert(h.name.clone(), pts);
    }
    Answer {
        pods,
        rejected: Rejected::default(),
        series: held.len(),
    }
}

fn read(
    held: &[Held],
    a: &Answer,
    from: i64,
    to: i64,
) -> BTreeMap<String, quota::real_usage::measure::Reading> {
    measure(
        &Window {
            from_ms: T + from * STEP,
            to_ms: T + to * STEP,
            step_ms: STEP,
        },
        held,
        Answers {
            gpu_busy: Some(a),
            cpu: Some(a),
            ..Answers::default()
        },
        |_| 5,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn a_reading_split_on_its_grid_adds_up_to_the_whole(
        spec in pods(),
        values in prop::collection::vec(prop::option::of(0u16..1005), 1..60),
        cut in 1i64..40,
    ) {
        let held = held(&spec);
        let a = answer(&held, &values, 40);
        let whole = read(&held, &a, 0, 40);
        let (left, right) = (read(&held, &a, 0, cut), read(&held, &a, cut, 40));
        for (w, r) in &whole {
            let mut sum = Figures::default();
            for part in [&left, &right] {
                if let Some(p) = part.get(w) {
                    sum.add(&p.figures);
                }
            }
            // Each part rounds down to the card-ms once: within one per part.
            let g = (&r.figures.gpu, &sum.gpu);
            prop_assert!((g.0.allocated - g.1.allocated).abs() <= 2, "{w}: {g:?}");
            prop_assert!((g.0.measured - g.1.measured).abs() <= 2, "{w}: {g:?}");
            prop_assert!((g.0.busy - g.1.busy).abs() <= 2, "{w}: {g:?}");
            prop_assert!((g.0.idle - g.1.idle).abs() <= 2, "{w}: {g:?}");
            prop_assert!(g.0.busy <= g.0.measured && g.0.measured <= g.0.allocated);
            prop_assert!(g.0.idle <= g.0.measured);
            // The streak carried across the cut is the streak of the whole.
            let once = advance(None, T, STEP, &r.steps, 5);
            let first = left.get(w).and_then(|l| advance(None, T, STEP, &l.steps, 5));
            let carried: Option<Streak> = match right.get(w) {
                Some(rr) => advance(first.as_ref(), T + cut * STEP, STEP, &rr.steps, 5),
                None => None,
            };
            let once_at_end = once.filter(|s| s.until_ms == T + 40 * STEP
                || r.steps.last().is_some_and(|l| l.at_ms == s.until_ms));
            if right.get(w).is_some_and(|rr| !rr.steps.is_empty()) {
                prop_assert_eq!(carried.map(|s| (s.since_ms, s.until_ms)), once_at_end.map(|s| (s.since_ms, s.until_ms)));
            }
        }
    }
}
