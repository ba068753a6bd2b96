//! One reading whole, pure: a window's answers measured hour by hour
//! (`measure`), each workload's figures as a row per hour with its
//! submitter, the idle streaks carried on (`idle::advance`), and the
//! workloads idle at its end. The controller's reader writes what this
//! returns (`store::real_usage`); the demo feeds it invented answers.

use super::answer::Answer;
use super::figures::Figures;
use super::idle::{advance, policy_of, IdleNow, Streak};
use super::measure::{measure, Answers, AsHeld, Reading, Window};
use super::template::Metric;
use crate::object::Quota;
use std::collections::{BTreeMap, HashMap};

pub const HOUR_MS: i64 = 3_600_000;

/// One workload's figures for one hour (or the part of it a reading read).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    pub quota: String,
    pub hour_ms: i64,
    pub workload: String,
    pub namespace: String,
    pub username: String,
    pub figures: Figures,
}

/// The figures of one window, as the store and the alerts take them.
#[derive(Clone, Debug, Default)]
pub struct Measured {
    pub rows: Vec<Row>,
    pub idle: Vec<IdleNow>,
    pub by_quota: BTreeMap<String, Figures>,
}

/// The window cut at each hour (on the step's grid), so each part adds to
/// one hourly row: a step that straddles an hour counts in the hour it
/// starts in.
pub fn hours_of(w: &Window) -> Vec<Window> {
    let mut out = Vec::new();
    let mut from = w.from_ms;
    while from < w.to_ms {
        let hour_end = (from.div_euclid(HOUR_MS) + 1) * HOUR_MS;
        // The first grid point at or after the hour's end.
        let steps = (hour_end - from + w.step_ms - 1)
            .div_euclid(w.step_ms)
            .max(1);
        let to = (from + steps * w.step_ms).min(w.to_ms);
        out.push(Window {
            from_ms: from,
            to_ms: to,
            step_ms: w.step_ms,
        });
        from = to;
    }
    out
}

/// The pure part of a reading: the window measured hour by hour, each
/// workload's row per hour (with its submitter), the streaks carried on,
/// and the idle workloads.
pub fn measure_window<H: AsHeld>(
    window: &Window,
    held: &[H],
    answers: &BTreeMap<Metric, Answer>,
    quotas: &HashMap<&str, &Quota>,
    mut streaks: HashMap<String, Streak>,
) -> (Measured, HashMap<String, Streak>) {
    let threshold = |q: &str| {
        quotas
            .get(q)
            .map(|quota| policy_of(quota, |n| quotas.get(n).copied()).threshold())
            .unwrap_or(crate::object::idle::DEFAULT_THRESHOLD)
    };
    let user_of = |q: &str, w: &str| {
        quotas
            .get(q)
            .and_then(|quota| quota.status.users.get(w))
            .cloned()
            .unwrap_or_default()
    };
    let ans = Answers {
        gpu_busy: answers.get(&Metric::GpuBusy),
        gpu_memory: answers.get(&Metric::GpuMemory),
        cpu: answers.get(&Metric::Cpu),
        memory: answers.get(&Metric::Memory),
    };
    let mut rows = Vec::new();
    let mut by_quota: BTreeMap<String, Figures> = BTreeMap::new();
    let mut last: BTreeMap<String, Reading> = BTreeMap::new();
    let mut alive: HashMap<String, Streak> = HashMap::new();
    for part in hours_of(window) {
        let readings = measure(&part, held, ans, threshold);
        let mut next: HashMap<String, Streak> = HashMap::new();
        for (wref, r) in &readings {
            let before = alive.get(wref).or(streaks.get(wref));
            if let Some(s) = advance(
                before,
                part.from_ms,
                part.step_ms,
                &r.steps,
                threshold(&r.quota),
            ) {
                next.insert(wref.clone(), s);
            }
            if r.figures != Figures::default() {
                rows.push(Row {
                    quota: r.quota.clone(),
                    hour_ms: part.from_ms.div_euclid(HOUR_MS) * HOUR_MS,
                    workload: wref.clone(),
                    namespace: r.namespace.clone(),
                    username: user_of(&r.quota, wref),
                    figures: r.figures,
                });
                by_quota.entry(r.quota.clone()).or_default().add(&r.figures);
            }
        }
        alive = next;
        streaks.clear();
        last.extend(readings);
    }
    let idle = alive
        .iter()
        .filter_map(|(wref, s)| {
            let r = last.get(wref)?;
            Some(IdleNow {
                workload: wref.clone(),
                quota: r.quota.clone(),
                namespace: r.namespace.clone(),
                user: user_of(&r.quota, wref),
                model: r.model.clone(),
                streak: s.clone(),
            })
        })
        .collect();
    (
        Measured {
            rows,
            idle,
            by_quota,
        },
        alive,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_is_cut_at_each_hour_on_its_grid() {
        let t = 1_795_255_200_000; // on the hour
        let w = Window {
            from_ms: t - 30 * 60_000,
            to_ms: t + 90 * 60_000,
            step_ms: 60_000,
        };
        let parts = hours_of(&w);
        assert_eq!(
            parts
                .iter()
                .map(|p| (p.from_ms, p.to_ms))
                .collect::<Vec<_>>(),
            [
                (t - 30 * 60_000, t),
                (t, t + HOUR_MS),
                (t + HOUR_MS, t + 90 * 60_000)
            ]
        );
        // A step that does not divide the hour: its part ends at the first
        // point past the hour.
        let w = Window {
            from_ms: t - 14 * 60_000,
            to_ms: t + 21 * 60_000,
            step_ms: 7 * 60_000,
        };
        let parts = hours_of(&w);
        assert_eq!(parts[0].to_ms, t);
        assert_eq!(parts.len(), 2);
        let odd = Window {
            from_ms: t - 10 * 60_000,
            to_ms: t + 11 * 60_000,
            step_ms: 7 * 60_000,
        };
        assert_eq!(hours_of(&odd)[0].to_ms, t + 4 * 60_000);
    }
}
