//! Budget periods and carry-over as a quota's budgets hold them
//! (docs/budgets.md §1). A period is a half-open window `[start, end)` of
//! UTC milliseconds; boundaries fall at local midnight of a fixed UTC
//! offset (no time-zone rules: a budget's boundary must not move with
//! daylight saving). A closed period is kept as a `PeriodRecord`; closing
//! one is `crate::budget::period::close`.

use crate::quantity::serde_acc;
use crate::quantity::Quantity;
use crate::time::{civil_from_days, days_from_civil, days_in_month};
use serde::{Deserialize, Serialize};

pub const MS_PER_DAY: i64 = 86_400_000;
const MS_PER_MINUTE: i64 = 60_000;
/// The widest UTC offset in use (+14:00, Kiribati; −12:00 the other way).
pub const MAX_OFFSET_MINUTES: i32 = 14 * 60;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Weekday {
    Monday,
    Tuesday,
    Wednesday,
    Thursday,
    Friday,
    Saturday,
    Sunday,
}

impl Weekday {
    /// Monday = 0.
    fn index(self) -> i64 {
        self as i64
    }

    /// The weekday of `days` since 1970-01-01 (a Thursday).
    pub fn of_day(days: i64) -> Weekday {
        const ALL: [Weekday; 7] = [
            Weekday::Monday,
            Weekday::Tuesday,
            Weekday::Wednesday,
            Weekday::Thursday,
            Weekday::Friday,
            Weekday::Saturday,
            Weekday::Sunday,
        ];
        ALL[(days + 3).rem_euclid(7) as usize]
    }
}

/// When a cash key's budget starts again.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Period {
    /// One budget forever (what a cash key was before periods).
    #[default]
    None,
    /// Every week, at local midnight starting `startsOn`.
    #[serde(rename_all = "camelCase")]
    Weekly {
        starts_on: Weekday,
        #[serde(default)]
        utc_offset_minutes: i32,
    },
    /// Every month, at local midnight of `anchorDay` (1–31). A month
    /// shorter than the anchor starts its period on its last day: anchor
    /// 31 gives Jan 31, Feb 28 (29), Mar 31, Apr 30, …
    #[serde(rename_all = "camelCase")]
    Monthly {
        anchor_day: u32,
        #[serde(default)]
        utc_offset_minutes: i32,
    },
    /// One funded window `[start, end)`; outside it the budget is zero.
    #[serde(rename_all = "camelCase")]
    Term {
        #[serde(rename = "start", with = "crate::time::serde_stamp")]
        start_ms: i64,
        #[serde(rename = "end", with = "crate::time::serde_stamp")]
        end_ms: i64,
    },
}

/// The period an instant falls in. `funded` is false only outside a
/// term: spending there meets a budget of zero. Unbounded sides are
/// `i64::MIN` / `i64::MAX`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Window {
    pub start_ms: i64,
    pub end_ms: i64,
    pub funded: bool,
}

impl Window {
    pub fn contains(&self, ms: i64) -> bool {
        self.start_ms <= ms && ms < self.end_ms
    }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PeriodError {
    #[error("monthly anchorDay {0} is not a day of the month: use 1 to 31 (31 means the last day of every month)")]
    AnchorDay(u32),
    #[error("utcOffsetMinutes {0} is out of range: use −720 to +840")]
    Offset(i32),
    #[error("the term ends ({end}) at or before it starts ({start})")]
    EmptyTerm { start: String, end: String },
    #[error("carry percent {0} is out of range: use 0 to 100")]
    Percent(u32),
    #[error("carry amount {0} is negative")]
    NegativeAmount(Quantity),
}

impl Period {
    pub fn validate(&self) -> Result<(), PeriodError> {
        let offset = |o: i32| {
            if (-12 * 60..=MAX_OFFSET_MINUTES).contains(&o) {
                Ok(())
            } else {
                Err(PeriodError::Offset(o))
            }
        };
        match *self {
            Period::None => Ok(()),
            Period::Weekly {
                utc_offset_minutes, ..
            } => offset(utc_offset_minutes),
            Period::Monthly {
                anchor_day,
                utc_offset_minutes,
            } => {
                if !(1..=31).contains(&anchor_day) {
                    return Err(PeriodError::AnchorDay(anchor_day));
                }
                offset(utc_offset_minutes)
            }
            Period::Term { start_ms, end_ms } if end_ms <= start_ms => {
                Err(PeriodError::EmptyTerm {
                    start: crate::time::format_rfc3339(start_ms),
                    end: crate::time::format_rfc3339(end_ms),
                })
            }
            Period::Term { .. } => Ok(()),
        }
    }

    /// The period `ms` falls in. Expects a validated period (an anchor out
    /// of range is clamped rather than trusted).
    pub fn at(&self, ms: i64) -> Window {
        let unbounded = Window {
            start_ms: i64::MIN,
            end_ms: i64::MAX,
            funded: true,
        };
        match *self {
            Period::None => unbounded,
            Period::Term { start_ms, end_ms } => {
                if ms < start_ms {
                    Window {
                        start_ms: i64::MIN,
                        end_ms: start_ms,
                        funded: false,
                    }
                } else if ms >= end_ms {
                    Window {
                        start_ms: end_ms,
                        end_ms: i64::MAX,
                        funded: false,
                    }
                } else {
                    Window {
                        start_ms,
                        end_ms,
                        funded: true,
                    }
                }
            }
            Period::Weekly {
                starts_on,
                utc_offset_minutes,
            } => {
                let off = utc_offset_minutes as i64 * MS_PER_MINUTE;
                let day = ms.saturating_add(off).div_euclid(MS_PER_DAY);
                let start = day - (day + 3 - starts_on.index()).rem_euclid(7);
                days_window(start, start + 7, off)
            }
            Period::Monthly {
                anchor_day,
                utc_offset_minutes,
            } => {
                let off = utc_offset_minutes as i64 * MS_PER_MINUTE;
                let anchor = anchor_day.clamp(1, 31) as i64;
                let day = ms.saturating_add(off).div_euclid(MS_PER_DAY);
                let (y, m, _) = civil_from_days(day);
                let this = anchor_in(y, m, anchor);
                let (start, end) = if day >= this {
                    let (ny, nm) = next_month(y, m);
                    (this, anchor_in(ny, nm, anchor))
                } else {
                    let (py, pm) = prev_month(y, m);
                    (anchor_in(py, pm, anchor), this)
                };
                days_window(start, end, off)
            }
        }
    }

    /// The boundaries strictly inside `(from, to)`, in order: where an
    /// accrual over `[from, to)` must be cut.
    pub fn boundaries(&self, from_ms: i64, to_ms: i64) -> Boundaries<'_> {
        Boundaries {
            period: self,
            at: from_ms,
            to: to_ms,
        }
    }
}

/// Iterator of [`Period::boundaries`]: lazy, so a wide window costs only
/// what is read of it.
pub struct Boundaries<'a> {
    period: &'a Period,
    at: i64,
    to: i64,
}

impl Iterator for Boundaries<'_> {
    type Item = i64;
    fn next(&mut self) -> Option<i64> {
        let end = self.period.at(self.at).end_ms;
        if end >= self.to || end <= self.at {
            self.at = self.to;
            return None;
        }
        self.at = end;
        Some(end)
    }
}

/// The day (since the epoch) of `anchor` in month `m` of `y`, clamped to
/// the month's last day.
fn anchor_in(y: i64, m: i64, anchor: i64) -> i64 {
    days_from_civil(y, m, anchor.min(days_in_month(y, m)))
}

fn next_month(y: i64, m: i64) -> (i64, i64) {
    if m == 12 {
        (y + 1, 1)
    } else {
        (y, m + 1)
    }
}

fn prev_month(y: i64, m: i64) -> (i64, i64) {
    if m == 1 {
        (y - 1, 12)
    } else {
        (y, m - 1)
    }
}

/// Local days `[start, end)` → a UTC window.
fn days_window(start: i64, end: i64, off_ms: i64) -> Window {
    let utc = |d: i64| d.saturating_mul(MS_PER_DAY).saturating_sub(off_ms);
    Window {
        start_ms: utc(start),
        end_ms: utc(end),
        funded: true,
    }
}

/// `[from, to)` cut at `cuts` (any order, duplicates and points outside
/// ignored): consecutive non-empty pieces covering it exactly.
pub fn split(from_ms: i64, to_ms: i64, cuts: impl IntoIterator<Item = i64>) -> Vec<(i64, i64)> {
    if to_ms <= from_ms {
        return Vec::new();
    }
    let mut points: Vec<i64> = cuts
        .into_iter()
        .filter(|c| from_ms < *c && *c < to_ms)
        .collect();
    points.sort_unstable();
    points.dedup();
    let mut out = Vec::with_capacity(points.len() + 1);
    let mut at = from_ms;
    for c in points {
        out.push((at, c));
        at = c;
    }
    out.push((at, to_ms));
    out
}

/// What of an unspent budget the next period inherits.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Carry {
    /// Nothing: what is left expires.
    #[default]
    None,
    /// Everything that is left.
    All,
    /// What is left, up to this percentage of the period's budget.
    Percent { percent: u32 },
    /// What is left, up to this amount (in the key's resource-hours).
    Amount { amount: Quantity },
}

impl Carry {
    pub fn validate(&self) -> Result<(), PeriodError> {
        match self {
            Carry::Percent { percent } if *percent > 100 => Err(PeriodError::Percent(*percent)),
            Carry::Amount { amount } if amount.is_negative() => {
                Err(PeriodError::NegativeAmount(*amount))
            }
            _ => Ok(()),
        }
    }
}

/// What happens to spending beyond what a period had (running work is not
/// killed, so a period can end overspent).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Overspend {
    /// The next period starts in debt by the overspend: a budget cannot
    /// be stretched by overrunning just before a boundary.
    #[default]
    Carry,
    /// The overspend is written off.
    Forgive,
}

/// A closed period, kept for reports. All amounts in acc. Conserves:
/// `spent + carried + expired = budget + carry_in + top_ups + forgiven`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PeriodRecord {
    pub start_ms: i64,
    pub end_ms: i64,
    /// The period's own budget (the cash key's hard; zero outside a term).
    #[serde(with = "serde_acc")]
    pub budget: i128,
    /// Carried in from the period before; negative for a debt.
    #[serde(with = "serde_acc")]
    pub carry_in: i128,
    #[serde(with = "serde_acc")]
    pub top_ups: i128,
    /// Accrual minus refunds.
    #[serde(with = "serde_acc")]
    pub spent: i128,
    /// The next period's carry-in: left within the carry rule, or a debt.
    #[serde(with = "serde_acc")]
    pub carried: i128,
    /// Left over and not carried.
    #[serde(with = "serde_acc")]
    pub expired: i128,
    /// An overspend written off (`Overspend::Forgive`).
    #[serde(with = "serde_acc")]
    pub forgiven: i128,
}
