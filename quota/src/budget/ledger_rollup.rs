//! The ledger's roll-up (docs/budgets.md §6 "Roll-up"): entries older
//! than an age are summed into one row per dimension tuple (quota, key,
//! reason, workload, namespace, model, QoS class, user) and cell of a
//! grid — hours, then, older still, days — so storage and report time
//! stay bounded however long the ledger runs.
//!
//! Exact: an entry that spans cells is shared out by `report::share`,
//! whose pieces add up to the entry to the acc, so a roll-up never
//! changes a sum. A report whose every cut (its start, its end and its
//! bucket boundaries) lies on the stored grid gives the same rows as
//! before the roll-up; one that cuts inside a rolled cell is refused
//! (`check`), never mis-bucketed.

use super::report::{share, ReportSpec};
use crate::object::budgets::Entry;
use std::collections::BTreeMap;

pub const MS_PER_HOUR: i64 = 3_600_000;
pub const MS_PER_DAY: i64 = 24 * MS_PER_HOUR;

/// Cells `[k × step − offset, (k + 1) × step − offset)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grid {
    pub step_ms: i64,
    pub offset_ms: i64,
}

impl Grid {
    pub fn hours() -> Grid {
        Grid {
            step_ms: MS_PER_HOUR,
            offset_ms: 0,
        }
    }

    /// Local days at `utc_offset_minutes`.
    pub fn days(utc_offset_minutes: i32) -> Grid {
        Grid {
            step_ms: MS_PER_DAY,
            offset_ms: utc_offset_minutes as i64 * 60_000,
        }
    }

    pub fn cell_start(&self, t: i64) -> i64 {
        t.saturating_add(self.offset_ms).div_euclid(self.step_ms) * self.step_ms - self.offset_ms
    }

    pub fn aligned(&self, t: i64) -> bool {
        t.saturating_add(self.offset_ms).rem_euclid(self.step_ms) == 0
    }
}

/// Whether an entry is ever rolled up: spans are; instants (top-ups,
/// carries) and entries with a note (a refund's why) are kept as written.
pub fn rollable(e: &Entry) -> bool {
    e.end_ms > e.start_ms && e.note.is_empty()
}

type Tuple = (
    String,
    String,
    crate::object::budgets::Reason,
    String,
    String,
    Option<String>,
    Option<u8>,
    Option<String>,
);

fn tuple(e: &Entry) -> Tuple {
    (
        e.quota.clone(),
        e.key.clone(),
        e.reason,
        e.workload.clone(),
        e.namespace.clone(),
        e.model.clone(),
        e.qos.map(|q| q as u8),
        e.user.clone(),
    )
}

/// One entry per dimension tuple and cell of `grid`, spanning the cell,
/// holding the shares of `entries` within it. Entries already rolled to
/// `grid` (spanning exactly one cell) come out as they are, so rolling
/// old rows together with new ones merges them. Entries that are not
/// `rollable` are left out (the caller keeps them). Cells whose shares
/// add up to zero are left out.
pub fn roll_up(entries: &[Entry], grid: Grid) -> Vec<Entry> {
    // The QoS class rides beside its sum (it has no order of its own).
    let mut cells: BTreeMap<(Tuple, i64), (Option<crate::usage::QosClass>, i128)> = BTreeMap::new();
    for e in entries.iter().filter(|e| rollable(e)) {
        let mut a = grid.cell_start(e.start_ms);
        while a < e.end_ms {
            let b = a + grid.step_ms;
            let part = share(e, a, b);
            let sum = cells.entry((tuple(e), a)).or_insert((e.qos, 0));
            sum.1 = sum.1.saturating_add(part);
            a = b;
        }
    }
    cells
        .into_iter()
        .filter(|(_, (_, amount))| *amount != 0)
        .map(|((t, start), (qos, amount))| Entry {
            quota: t.0,
            key: t.1,
            reason: t.2,
            workload: t.3,
            namespace: t.4,
            model: t.5,
            qos,
            user: t.7,
            start_ms: start,
            end_ms: start + grid.step_ms,
            amount,
            note: String::new(),
        })
        .collect()
}

/// The roll-up policy: spans older than `hourly_after_ms` are rolled into
/// hours, older than `daily_after_ms` into local days at
/// `daily_utc_offset_minutes` (a whole number of hours, so days are made
/// of hours).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    pub hourly_after_ms: i64,
    pub daily_after_ms: i64,
    pub daily_utc_offset_minutes: i32,
}

/// The youngest an entry may be rolled: a retried append (a controller
/// restarted, an outbox replayed) is refused by the window records for a
/// day, so an entry rolled later can never be written again beside its
/// roll-up.
pub const MIN_AGE_MS: i64 = MS_PER_DAY;

impl Default for Policy {
    fn default() -> Self {
        Policy {
            hourly_after_ms: 7 * MS_PER_DAY,
            daily_after_ms: 90 * MS_PER_DAY,
            daily_utc_offset_minutes: 0,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("ledger roll-up: entries may be rolled into hours no sooner than a day after they are written (asked: {0} h)")]
    TooYoung(i64),
    #[error("ledger roll-up: daily rows ({daily} h) must come after hourly rows ({hourly} h)")]
    DailyBeforeHourly { hourly: i64, daily: i64 },
    #[error("ledger roll-up: the days' UTC offset must be a whole number of hours between -12 and +14 (asked: {0} minutes)")]
    Offset(i32),
}

impl Policy {
    pub fn validate(&self) -> Result<(), PolicyError> {
        if self.hourly_after_ms < MIN_AGE_MS {
            return Err(PolicyError::TooYoung(self.hourly_after_ms / MS_PER_HOUR));
        }
        if self.daily_after_ms < self.hourly_after_ms {
            return Err(PolicyError::DailyBeforeHourly {
                hourly: self.hourly_after_ms / MS_PER_HOUR,
                daily: self.daily_after_ms / MS_PER_HOUR,
            });
        }
        let o = self.daily_utc_offset_minutes;
        if o % 60 != 0 || !(-12 * 60..=14 * 60).contains(&o) {
            return Err(PolicyError::Offset(o));
        }
        Ok(())
    }

    /// Where each level is rolled to at `now_ms`: (hourly until, daily
    /// until), both on their grids.
    pub fn cutoffs(&self, now_ms: i64) -> (i64, i64) {
        let hourly = Grid::hours().cell_start(now_ms - self.hourly_after_ms);
        let daily =
            Grid::days(self.daily_utc_offset_minutes).cell_start(now_ms - self.daily_after_ms);
        (hourly, daily.min(hourly))
    }
}

/// What the ledger holds at which resolution: rolled hours end at or
/// before `hourly_until_ms`, rolled days at or before `daily_until_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stored {
    pub hourly_until_ms: i64,
    pub daily_until_ms: i64,
    pub daily_utc_offset_minutes: i32,
}

/// A report that would cut inside a rolled cell. Its words are a
/// person's: minutes, not milliseconds, and no parameter names.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("spending before {until} is kept per {unit}{zone}, and this report would split one at {at}: choose whole dates{zone} for that part of the range")]
pub struct TooFine {
    pub at: String,
    pub until: String,
    pub unit: &'static str,
    pub zone: String,
    pub offset: i32,
}

/// Whether `spec` can be answered exactly from a ledger rolled as
/// `stored` says: every cut before `daily_until_ms` on the day grid,
/// every cut before `hourly_until_ms` on the hour grid.
pub fn check(spec: &ReportSpec, stored: &Stored) -> Result<(), TooFine> {
    let days = Grid::days(stored.daily_utc_offset_minutes);
    let hours = Grid::hours();
    let mut cuts = vec![spec.from_ms, spec.to_ms];
    cuts.extend(super::report::cuts(spec));
    for c in cuts {
        let (grid, until, unit) = if c < stored.daily_until_ms {
            (days, stored.daily_until_ms, "day")
        } else if c < stored.hourly_until_ms {
            (hours, stored.hourly_until_ms, "hour")
        } else {
            continue;
        };
        if !grid.aligned(c) {
            let o = stored.daily_utc_offset_minutes;
            return Err(TooFine {
                at: crate::time::format_when(c),
                until: crate::time::format_when(until),
                unit,
                zone: if unit == "day" {
                    format!(" (midnight at UTC{:+03}:00)", o / 60)
                } else {
                    String::new()
                },
                offset: o,
            });
        }
    }
    Ok(())
}

/// `spec` widened to what a ledger rolled as `stored` can answer: its
/// start moved back and its end forward to the edges of the rolled cells
/// they fall in, and, where its day, week or month buckets would split
/// rolled days, its buckets counted at the days' UTC offset. `None` when
/// `spec` is answerable as it is; the result always passes `check`
/// (buckets of an hour's offset on hourly rows excepted, which a rolled
/// ledger cannot split either way).
pub fn snap(spec: &ReportSpec, stored: &Stored) -> Option<ReportSpec> {
    if check(spec, stored).is_ok() {
        return None;
    }
    let days = Grid::days(stored.daily_utc_offset_minutes);
    let hours = Grid::hours();
    let grid_at = |t: i64| {
        if t < stored.daily_until_ms {
            Some(days)
        } else if t < stored.hourly_until_ms {
            Some(hours)
        } else {
            None
        }
    };
    let mut out = spec.clone();
    if let Some(g) = grid_at(out.from_ms) {
        out.from_ms = g.cell_start(out.from_ms);
    }
    // The end is exclusive: the cell holding its last instant ends it.
    if let Some(g) = grid_at(out.to_ms.saturating_sub(1)) {
        let start = g.cell_start(out.to_ms.saturating_sub(1));
        out.to_ms = start.saturating_add(g.step_ms);
    }
    if check(&out, stored).is_err() && out.bucket != super::report::Bucket::None {
        out.utc_offset_minutes = stored.daily_utc_offset_minutes;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::super::report::{report, Bucket, Dimension};
    use super::*;
    use crate::object::budgets::Reason;
    use crate::usage::QosClass;
    use proptest::prelude::*;

    const T0: i64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z

    fn entry(quota: &str, workload: &str, start: i64, end: i64, amount: i128) -> Entry {
        Entry {
            quota: quota.into(),
            key: "cash/requests.nvidia.com/gpu".into(),
            workload: workload.into(),
            namespace: "ml".into(),
            model: Some("A100".into()),
            qos: Some(QosClass::Guaranteed),
            user: Some("alice".into()),
            start_ms: start,
            end_ms: end,
            amount,
            reason: Reason::Accrual,
            note: String::new(),
        }
    }

    fn total(es: &[Entry]) -> i128 {
        es.iter().map(|e| e.amount).sum()
    }

    #[test]
    fn a_minute_across_the_hour_is_shared() {
        let e = entry(
            "a",
            "w",
            T0 + MS_PER_HOUR - 30_000,
            T0 + MS_PER_HOUR + 30_000,
            7,
        );
        let r = roll_up(&[e], Grid::hours());
        assert_eq!(r.len(), 2);
        assert_eq!((r[0].amount, r[1].amount), (3, 4));
        assert_eq!((r[0].start_ms, r[0].end_ms), (T0, T0 + MS_PER_HOUR));
        // Rolling again (and hours into days) changes nothing but the grid.
        assert_eq!(roll_up(&r, Grid::hours()), r);
        let d = roll_up(&r, Grid::days(0));
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].amount, 7);
    }

    #[test]
    fn instants_and_notes_are_kept() {
        let mut top = entry("a", "", T0, T0, 9);
        top.reason = Reason::TopUp;
        let mut refund = entry("a", "w", T0, T0 + 1000, -5);
        refund.note = "reclaimed".into();
        assert!(roll_up(&[top, refund], Grid::hours()).is_empty());
    }

    #[test]
    fn policies_are_checked() {
        assert!(Policy::default().validate().is_ok());
        let young = Policy {
            hourly_after_ms: MS_PER_HOUR,
            ..Policy::default()
        };
        assert!(matches!(young.validate(), Err(PolicyError::TooYoung(1))));
        let half = Policy {
            daily_utc_offset_minutes: 330,
            ..Policy::default()
        };
        assert_eq!(half.validate(), Err(PolicyError::Offset(330)));
        let (h, d) = Policy::default().cutoffs(T0 + 100 * MS_PER_DAY + 5);
        assert_eq!((h, d), (T0 + 93 * MS_PER_DAY, T0 + 10 * MS_PER_DAY));
    }

    fn spec(from: i64, to: i64, bucket: Bucket, off: i32) -> ReportSpec {
        ReportSpec {
            from_ms: from,
            to_ms: to,
            by: Dimension::Workload,
            bucket,
            utc_offset_minutes: off,
            subtree: None,
            key: None,
            reasons: vec![Reason::Accrual, Reason::Refund],
        }
    }

    #[test]
    fn reports_finer_than_the_stored_grid_are_refused() {
        let stored = Stored {
            hourly_until_ms: T0 + 60 * MS_PER_DAY,
            daily_until_ms: T0 + 30 * MS_PER_DAY,
            daily_utc_offset_minutes: 0,
        };
        let year = spec(T0, T0 + 365 * MS_PER_DAY, Bucket::Month, 0);
        assert!(check(&year, &stored).is_ok());
        // Days at UTC+05:30 cut inside stored days and hours.
        let india = spec(T0, T0 + 365 * MS_PER_DAY, Bucket::Day, 330);
        let e = check(&india, &stored).unwrap_err();
        assert_eq!(e.unit, "day");
        let words = e.to_string();
        assert!(words.contains("whole dates (midnight at UTC+00:00)"), "{e}");
        assert!(
            !words.contains(".000Z") && !words.contains("utcOffset"),
            "{e}"
        );
        // A range starting at half past, after the daily rows: in hours.
        let half = spec(
            T0 + 40 * MS_PER_DAY + 1_800_000,
            T0 + 70 * MS_PER_DAY,
            Bucket::None,
            0,
        );
        assert_eq!(check(&half, &stored).unwrap_err().unit, "hour");
        // After the hourly rows, anything goes.
        let late = spec(
            T0 + 61 * MS_PER_DAY + 7,
            T0 + 62 * MS_PER_DAY,
            Bucket::Day,
            330,
        );
        assert!(check(&late, &stored).is_ok());
    }

    #[test]
    fn reports_are_snapped_to_the_stored_grid() {
        let stored = Stored {
            hourly_until_ms: T0 + 60 * MS_PER_DAY,
            daily_until_ms: T0 + 30 * MS_PER_DAY,
            daily_utc_offset_minutes: 0,
        };
        // Answerable as asked: left alone.
        let year = spec(T0, T0 + 365 * MS_PER_DAY, Bucket::Month, 0);
        assert_eq!(snap(&year, &stored), None);
        // "The last 30 days" at a millisecond: out to whole days, then hours.
        let ragged = spec(
            T0 + 20 * MS_PER_DAY + 1_234_567,
            T0 + 40 * MS_PER_DAY + 1_234_567,
            Bucket::None,
            0,
        );
        let s = snap(&ragged, &stored).unwrap();
        assert_eq!(
            (s.from_ms, s.to_ms),
            (T0 + 20 * MS_PER_DAY, T0 + 40 * MS_PER_DAY + MS_PER_HOUR)
        );
        assert!(check(&s, &stored).is_ok());
        // Day buckets at UTC+05:30 over stored days: counted at the
        // stored days' offset instead.
        let india = spec(T0, T0 + 365 * MS_PER_DAY, Bucket::Day, 330);
        let s = snap(&india, &stored).unwrap();
        assert_eq!(s.utc_offset_minutes, 0);
        assert!(check(&s, &stored).is_ok());
    }

    proptest! {
        #[test]
        fn a_snapped_report_is_answerable_and_covers_what_was_asked(
            from in 0i64..90 * MS_PER_DAY,
            len in 1i64..90 * MS_PER_DAY,
            bucket in prop_oneof![Just(Bucket::None), Just(Bucket::Day), Just(Bucket::Month)],
            off in prop_oneof![Just(0i32), Just(330), Just(-480), Just(60)],
            stored_off in prop_oneof![Just(0i32), Just(480), Just(-300)],
        ) {
            let stored = Stored {
                hourly_until_ms: T0 + 60 * MS_PER_DAY,
                daily_until_ms: T0 + 30 * MS_PER_DAY,
                daily_utc_offset_minutes: stored_off,
            };
            let asked = spec(T0 + from, T0 + from + len, bucket, off);
            let got = snap(&asked, &stored).unwrap_or_else(|| asked.clone());
            prop_assert!(check(&got, &stored).is_ok(), "{:?} -> {:?}", asked, got);
            prop_assert!(got.from_ms <= asked.from_ms && got.to_ms >= asked.to_ms);
        }
    }

    fn arb_entry() -> impl Strategy<Value = Entry> {
        (
            0usize..3,
            0usize..3,
            0i64..(3 * MS_PER_DAY),
            0i64..(5 * MS_PER_HOUR),
            -1_000_000_000_000_000_000_000i128..36_000_000_000_000_000_000_000i128,
            prop::bool::weighted(0.1),
        )
            .prop_map(|(q, w, start, len, amount, instant)| {
                let s = T0 + start;
                entry(
                    ["a", "b", "c"][q],
                    ["w1", "w2", "w3"][w],
                    s,
                    if instant { s } else { s + len + 1 },
                    amount,
                )
            })
    }

    proptest! {
        /// Rolling up keeps every sum: the whole, and each report whose
        /// cuts lie on the grid, whatever the split point between rolled
        /// and unrolled entries.
        #[test]
        fn roll_up_preserves_sums(
            entries in prop::collection::vec(arb_entry(), 0..40),
            split in 0usize..40,
            to_days in any::<bool>(),
            from_h in 0i64..24,
            len_h in 1i64..96,
        ) {
            let split = split.min(entries.len());
            let (old, young) = entries.split_at(split);
            let mut hours = roll_up(old, Grid::hours());
            hours.extend(old.iter().filter(|e| !rollable(e)).cloned());
            let mut rolled = if to_days {
                let mut d = roll_up(&hours, Grid::days(0));
                d.extend(hours.iter().filter(|e| !rollable(e)).cloned());
                d
            } else {
                hours
            };
            prop_assert_eq!(total(&rolled), total(old));
            rolled.extend(young.iter().cloned());
            let step = if to_days { MS_PER_DAY } else { MS_PER_HOUR };
            let from = T0 + from_h * step;
            let spec = spec(from, from + len_h * step, if to_days { Bucket::Day } else { Bucket::None }, 0);
            let before = report(&entries, &spec, &BTreeMap::new()).unwrap();
            let after = report(&rolled, &spec, &BTreeMap::new()).unwrap();
            prop_assert_eq!(before, after);
        }
    }
}
