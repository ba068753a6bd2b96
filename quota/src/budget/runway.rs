//! Runway: how long a budget lasts at its burn ("runs out in 8.8 days"),
//! and whether the period ends first; a forecast's runway is
//! `forecast::runway`.

use crate::quantity::Quantity;
use serde::{Deserialize, Serialize};

const MS_PER_MINUTE: i64 = 60_000;
const MS_PER_HOUR: i64 = 3_600_000;
const MS_PER_DAY: i64 = 86_400_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Runway {
    /// Nothing is left.
    Spent,
    /// Something is left and the burn was measured as zero.
    NotBurning,
    /// Too few samples to measure a burn.
    Unknown,
    /// Runs out at `atMs` at the current burn.
    #[serde(rename_all = "camelCase")]
    Until { at_ms: i64 },
    /// Would run out after the period ends (`endsMs`), when it starts again.
    #[serde(rename_all = "camelCase")]
    OutlastsPeriod { ends_ms: i64 },
}

/// How many milliseconds `left` lasts at `burn_per_hour` — what runs now,
/// at face price: 0 when nothing is left, None when nothing burns. The
/// runway the tree and the overview show for every quota without reading
/// its samples.
pub fn lasts_ms(left: Quantity, burn_per_hour: Quantity) -> Option<i64> {
    if left.nanos() <= 0 {
        Some(0)
    } else if burn_per_hour.nanos() <= 0 {
        None
    } else {
        let ms = left.nanos().saturating_mul(MS_PER_HOUR as i128) / burn_per_hour.nanos();
        Some(ms.min(i64::MAX as i128) as i64)
    }
}

/// What `workloads` spend of a budget on `target` (a cash key's usage
/// key) in the hour from `now_ms`: each charged pod set at its model's
/// weight in `list` and its QoS multiplier in `qos`, cut at any price
/// change within the hour — what accrual would charge for that hour if
/// nothing changed. The burn the tree and the overview divide a budget's
/// left by: the quota's own workloads (children spend their carve-outs,
/// not their parent's budget), at the price they pay.
pub fn burn_per_hour<'a>(
    workloads: impl IntoIterator<Item = &'a crate::object::Charge>,
    target: &str,
    now_ms: i64,
    qos: &crate::cash::QosMultipliers,
    list: &super::PriceList,
) -> Quantity {
    let acc = workloads.into_iter().fold(0i128, |sum, c| {
        sum.saturating_add(super::price_list::charge_cost_weighted(
            c,
            target,
            now_ms,
            now_ms.saturating_add(MS_PER_HOUR),
            qos,
            list,
        ))
    });
    super::to_quantity(acc)
}

/// [`lasts_ms`] from `now_ms`, as a [`Runway`].
pub fn at_current_use(left: Quantity, burn_per_hour: Quantity, now_ms: i64) -> Runway {
    match lasts_ms(left, burn_per_hour) {
        Some(0) => Runway::Spent,
        Some(ms) => Runway::Until {
            at_ms: now_ms.saturating_add(ms),
        },
        None => Runway::NotBurning,
    }
}

impl Runway {
    /// For people: `runs out in 8.8 days`, `in 5.5 hours`, `in 20 minutes`;
    /// amounts rounded down (a runway is never overstated).
    pub fn words(&self, now_ms: i64) -> String {
        match *self {
            Runway::Spent => "spent".into(),
            Runway::NotBurning => "not burning".into(),
            Runway::Unknown => "no burn measured yet".into(),
            Runway::OutlastsPeriod { ends_ms } => format!(
                "lasts until the period ends ({})",
                crate::time::format_when(ends_ms)
            ),
            Runway::Until { at_ms } => {
                format!("runs out in {}", span(at_ms.saturating_sub(now_ms).max(0)))
            }
        }
    }
}

/// `8.8 days`, `1 day`, `5.5 hours`, `20 minutes`, `less than a minute`.
pub fn span(ms: i64) -> String {
    let tenths = |unit: i64| {
        let t = (ms as i128 * 10 / unit as i128) as i64;
        let n = if t % 10 == 0 {
            (t / 10).to_string()
        } else {
            format!("{}.{}", t / 10, t % 10)
        };
        (n.clone(), n == "1")
    };
    if ms >= MS_PER_DAY {
        let (n, one) = tenths(MS_PER_DAY);
        format!("{n} day{}", if one { "" } else { "s" })
    } else if ms >= MS_PER_HOUR {
        let (n, one) = tenths(MS_PER_HOUR);
        format!("{n} hour{}", if one { "" } else { "s" })
    } else if ms >= MS_PER_MINUTE {
        let m = ms / MS_PER_MINUTE;
        format!("{m} minute{}", if m == 1 { "" } else { "s" })
    } else {
        "less than a minute".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forecast::{runway, Forecast};

    fn forecast(remaining: i64, exhausted_at: Option<i64>, measured: bool) -> Forecast {
        Forecast {
            key: "cash/requests.nvidia.com/gpu".into(),
            now_ms: 0,
            remaining: Quantity::from_units(remaining),
            as_of_ms: Some(0),
            burned: Quantity::ZERO,
            burn_from_ms: measured.then_some(-1),
            burn_per_hour: Quantity::ZERO,
            exhausted_at_ms: exhausted_at,
            days_left: None,
        }
    }

    #[test]
    fn runs_out_in_words() {
        let at = 8 * MS_PER_DAY + 8 * MS_PER_DAY / 10 + 1000;
        let r = runway(&forecast(10, Some(at), true), None);
        assert_eq!(r.words(0), "runs out in 8.8 days");
        assert_eq!(
            Runway::Until { at_ms: MS_PER_DAY }.words(0),
            "runs out in 1 day"
        );
        assert_eq!(
            Runway::Until {
                at_ms: 11 * MS_PER_HOUR / 2
            }
            .words(0),
            "runs out in 5.5 hours"
        );
        assert_eq!(
            Runway::Until {
                at_ms: 20 * MS_PER_MINUTE + 5
            }
            .words(0),
            "runs out in 20 minutes"
        );
        assert_eq!(
            Runway::Until { at_ms: 5 }.words(0),
            "runs out in less than a minute"
        );
    }

    #[test]
    fn the_period_may_end_first() {
        let f = forecast(10, Some(10 * MS_PER_DAY), true);
        assert_eq!(
            runway(&f, Some(3 * MS_PER_DAY)),
            Runway::OutlastsPeriod {
                ends_ms: 3 * MS_PER_DAY
            }
        );
        assert_eq!(
            runway(&f, Some(20 * MS_PER_DAY)),
            Runway::Until {
                at_ms: 10 * MS_PER_DAY
            }
        );
        assert_eq!(runway(&forecast(0, Some(0), true), None), Runway::Spent);
        assert_eq!(runway(&forecast(5, None, true), None), Runway::NotBurning);
        assert_eq!(runway(&forecast(5, None, false), None), Runway::Unknown);
    }
}
