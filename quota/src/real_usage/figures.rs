//! Allocated against used: the one definition of the figures every page,
//! the API, the CSV, the alerts and bizrq's own metrics show (docs/real-usage.md).
//!
//! - **allocated**: card-time held (cards × time its pods ran);
//! - **measured**: the part of it Prometheus reported on;
//! - **busy**: busy card-time (cards × utilisation × time);
//! - **idle**: card-time of measured steps in which the workload's cards
//!   sat below its quota's idle threshold (5 % by default): held, computing
//!   nothing — the waste;
//! - **efficiency**: busy ÷ measured (what was not measured is unknown,
//!   not idle).
//!
//! Amounts are card-milliseconds, whole (the store's unit; a reading's
//! nano-unit amounts are rounded down once per workload and window).

use crate::quantity::Quantity;
use serde::{Deserialize, Serialize};

pub const MS_PER_HOUR: i64 = 3_600_000;

/// GPU figures in card-milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GpuFigures {
    pub allocated: i64,
    pub measured: i64,
    pub busy: i64,
    pub idle: i64,
}

impl GpuFigures {
    pub fn add(&mut self, o: &GpuFigures) {
        self.allocated = self.allocated.saturating_add(o.allocated);
        self.measured = self.measured.saturating_add(o.measured);
        self.busy = self.busy.saturating_add(o.busy);
        self.idle = self.idle.saturating_add(o.idle);
    }

    pub fn is_empty(&self) -> bool {
        *self == GpuFigures::default()
    }

    /// busy ÷ measured in tenths of a percent (rounded down), None when
    /// nothing was measured.
    pub fn efficiency_permille(&self) -> Option<i64> {
        (self.measured > 0)
            .then(|| ((self.busy.max(0) as i128 * 1000) / self.measured as i128).min(1000) as i64)
    }

    /// The share of allocated card-time that was measured, per mille.
    pub fn coverage_permille(&self) -> Option<i64> {
        (self.allocated > 0).then(|| {
            ((self.measured.max(0) as i128 * 1000) / self.allocated as i128).min(1000) as i64
        })
    }

    /// "34 %", "34.5 %", or "unknown" when nothing was measured.
    pub fn efficiency_words(&self) -> String {
        match self.efficiency_permille() {
            Some(p) => percent(p),
            None => "unknown".into(),
        }
    }
}

/// Tenths of a percent as people read them: `34 %`, `4.5 %`.
pub fn percent(permille: i64) -> String {
    if permille % 10 == 0 {
        format!("{} %", permille / 10)
    } else {
        format!("{}.{} %", permille / 10, permille % 10)
    }
}

/// Card-milliseconds as card-hours, exactly (to the nano-unit).
pub fn card_hours(card_ms: i64) -> Quantity {
    // card·ms × 10^9 / 3.6·10^6 = card-hours in nano-units, rounded down.
    Quantity::from_nanos(card_ms as i128 * crate::quantity::NANO / MS_PER_HOUR as i128)
}

/// Card-milliseconds in words: "24 card-hours", "0.5 card-hours".
pub fn card_hours_words(card_ms: i64) -> String {
    let q = card_hours(card_ms);
    format!("{} card-hours", crate::readable::grouped(q))
}

/// A nano-unit amount × ms as whole unit-milliseconds (rounded down).
pub fn whole_ms(nano_ms: i128) -> i64 {
    (nano_ms / crate::quantity::NANO).clamp(0, i64::MAX as i128) as i64
}

/// What pods used against what they requested, of CPU (core-ms) or
/// memory (MiB-seconds in the store, `UseFigures::memory`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UseFigures {
    /// Requested, over the measured time.
    pub requested: i64,
    pub used: i64,
}

impl UseFigures {
    pub fn add(&mut self, o: &UseFigures) {
        self.requested = self.requested.saturating_add(o.requested);
        self.used = self.used.saturating_add(o.used);
    }
}

/// One row of figures: a workload's, or a sum of them (a quota's subtree,
/// a submitter's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Figures {
    pub gpu: GpuFigures,
    /// Core-milliseconds.
    pub cpu: UseFigures,
    /// MiB-seconds.
    pub memory: UseFigures,
}

impl Figures {
    pub fn add(&mut self, o: &Figures) {
        self.gpu.add(&o.gpu);
        self.cpu.add(&o.cpu);
        self.memory.add(&o.memory);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn efficiency_is_busy_over_measured_and_unknown_without_a_measurement() {
        let f = GpuFigures {
            allocated: 8 * MS_PER_HOUR,
            measured: 4 * MS_PER_HOUR,
            busy: MS_PER_HOUR,
            idle: 2 * MS_PER_HOUR,
        };
        assert_eq!(f.efficiency_permille(), Some(250));
        assert_eq!(f.efficiency_words(), "25 %");
        assert_eq!(f.coverage_permille(), Some(500));
        assert_eq!(GpuFigures::default().efficiency_words(), "unknown");
        assert_eq!(percent(45), "4.5 %");
    }

    #[test]
    fn card_hours_read_as_people_read_them() {
        assert_eq!(card_hours_words(24 * MS_PER_HOUR), "24 card-hours");
        assert_eq!(card_hours_words(MS_PER_HOUR / 2), "0.5 card-hours");
        assert_eq!(card_hours_words(1234 * MS_PER_HOUR), "1,234 card-hours");
        assert_eq!(card_hours(MS_PER_HOUR / 3).nanos(), 333_333_333);
    }
}
