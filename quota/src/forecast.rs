//! The cash forecast: when a cash budget runs out at its recent burn rate,
//! from the stored usage samples of a quota. Exact: nano-units and integer
//! milliseconds throughout (`days_left` is for display only).

use crate::budget::runway::Runway;
use crate::resources::{self, ResourceList};
use crate::Quantity;

const MS_PER_HOUR: i64 = 3_600_000;
const MS_PER_DAY: i64 = 86_400_000;

/// How far back the burn-down looks to measure the burn rate.
pub const FORECAST_WINDOW_MS: i64 = 24 * MS_PER_HOUR;

/// One stored usage sample of a quota (the server converts its own rows).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sample {
    pub at_ms: i64,
    pub hard: ResourceList,
    pub used: ResourceList,
    pub self_used: ResourceList,
}

/// When a cash budget runs out at the recent burn rate.
#[derive(Clone, Debug, PartialEq)]
pub struct Forecast {
    pub key: String,
    pub now_ms: i64,
    /// hard − spent at the latest sample (`as_of_ms`); negative when overspent.
    pub remaining: Quantity,
    pub as_of_ms: Option<i64>,
    /// Spent from `burn_from_ms` to `as_of_ms`: the rate is exactly
    /// `burned / (as_of_ms − burn_from_ms)`.
    pub burned: Quantity,
    pub burn_from_ms: Option<i64>,
    /// `burned` per hour, rounded down to the nano-unit (for display).
    pub burn_per_hour: Quantity,
    /// None when nothing is burning (or the burn cannot be measured).
    pub exhausted_at_ms: Option<i64>,
    pub days_left: Option<f64>,
}

/// Forecasts when `cash_key` runs out, from the burn over the last
/// `window_ms` before `now_ms`.
///
/// The rate is the first/last difference of the spent counter, not a
/// least-squares fit: cash spent is an exact cumulative counter (accrued to
/// the nano-unit), so the difference over the window *is* the window's
/// average burn, with no noise to fit away; a fit would only re-weight the
/// middle of the window and need sums of squares that risk overflowing. If
/// the window holds one sample, the sample just before it is the start; a
/// drop in spent (a budget period reset) starts the window after the drop.
pub fn forecast(samples: &[Sample], cash_key: &str, now_ms: i64, window_ms: i64) -> Forecast {
    let mut f = Forecast {
        key: cash_key.to_string(),
        now_ms,
        remaining: Quantity::ZERO,
        as_of_ms: None,
        burned: Quantity::ZERO,
        burn_from_ms: None,
        burn_per_hour: Quantity::ZERO,
        exhausted_at_ms: None,
        days_left: None,
    };
    // (at, hard, spent) up to now, in time order.
    let pts: Vec<(i64, i128, i128)> = sorted(samples)
        .into_iter()
        .filter(|s| s.at_ms <= now_ms)
        .map(|s| {
            (
                s.at_ms,
                resources::get(&s.hard, cash_key).nanos(),
                resources::get(&s.used, cash_key).nanos(),
            )
        })
        .collect();
    let Some(&(t_last, hard, spent)) = pts.last() else {
        return f;
    };
    let remaining = hard.saturating_sub(spent);
    f.as_of_ms = Some(t_last);
    f.remaining = Quantity::from_nanos(remaining);
    if remaining <= 0 {
        f.exhausted_at_ms = Some(now_ms);
        f.days_left = Some(0.0);
        return f;
    }
    let Some(i0) = burn_start(&pts, now_ms.saturating_sub(window_ms)) else {
        return f;
    };
    let (t0, _, s0) = pts[i0];
    let (burned, span) = (spent - s0, (t_last - t0) as i128);
    f.burned = Quantity::from_nanos(burned);
    f.burn_from_ms = Some(t0);
    f.burn_per_hour = Quantity::from_nanos(mul_div_floor(burned, MS_PER_HOUR as i128, span));
    if burned > 0 {
        // remaining / (burned / span), in whole milliseconds after the sample.
        let ms = mul_div_floor(remaining, span, burned);
        let at = (t_last as i128).saturating_add(ms).min(i64::MAX as i128) as i64;
        f.exhausted_at_ms = Some(at);
        f.days_left = Some(at.saturating_sub(now_ms).max(0) as f64 / MS_PER_DAY as f64);
    }
    f
}

/// The runway of `f`; `period_end_ms` is when the budget's period ends
/// (None without periods).
pub fn runway(f: &Forecast, period_end_ms: Option<i64>) -> Runway {
    if f.as_of_ms.is_some() && f.remaining.nanos() <= 0 {
        return Runway::Spent;
    }
    match f.exhausted_at_ms {
        Some(at) => match period_end_ms {
            Some(end) if end <= at => Runway::OutlastsPeriod { ends_ms: end },
            _ => Runway::Until { at_ms: at },
        },
        None if f.burn_from_ms.is_some() => Runway::NotBurning,
        None => Runway::Unknown,
    }
}

/// A budget's one forecast, which every page, the API, the charts and the
/// alerts read (none computes its own): what is left of it as admission
/// reads it (`budget::periods::left`), what the quota's own workloads burn
/// of it per hour now at the prices they pay (`budget::runway::burn_per_hour`:
/// children spend their carve-outs, not this budget), and so when it runs
/// out, or that its period ends first.
///
/// "At what runs now" rather than a burn measured from samples: it needs no
/// history (the tree and the alert sweep ask it of every quota), it moves
/// the moment work starts or stops, and its date stays put while the same
/// work runs: it counts from the end of the copy's last accrual
/// (`lastReconcileTime`), which `left` is as of, so copies accrued at
/// different times, and pages drawn a minute apart, name the same instant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outlook {
    pub key: String,
    pub now_ms: i64,
    /// Left for the quota's own new work (negative: overspent).
    pub left: Quantity,
    /// What the quota allocated to its children out of the budget (their
    /// budgets: not its own to spend). Non-zero at a parent, whose `left`
    /// and burn are its own work's, not its subtree's: the words say so.
    pub carved: Quantity,
    pub burn_per_hour: Quantity,
    pub runway: crate::budget::runway::Runway,
}

/// The [`Outlook`] of the cash key `key` of `q` at `now_ms`.
pub fn outlook(
    q: &crate::Quota,
    key: &str,
    now_ms: i64,
    qos: &crate::cash::QosMultipliers,
    list: &crate::budget::PriceList,
) -> Outlook {
    use crate::budget::runway::{self, Runway};
    let left = crate::budget::periods::left(&q.spec, &q.status, key);
    let target = crate::keys::cash_target(key).unwrap_or_default();
    let burn = runway::burn_per_hour(q.status.workloads.values(), target, now_ms, qos, list);
    let period_end = crate::budget::periods::balance(&q.spec, &q.status, key)
        .map(|b| b.window.end_ms)
        .filter(|e| *e != i64::MAX);
    // From the end of the copy's last accrual, which `left` is as of: two
    // copies of one quota accrued a minute apart name the same instant.
    let as_of = q
        .status
        .last_reconcile_time
        .as_deref()
        .and_then(crate::time::parse_rfc3339)
        .filter(|t| *t <= now_ms)
        .unwrap_or(now_ms);
    let runway = match runway::at_current_use(left, burn, as_of) {
        Runway::Until { at_ms } => match period_end {
            _ if at_ms <= now_ms => Runway::Spent,
            Some(end) if end <= at_ms => Runway::OutlastsPeriod { ends_ms: end },
            _ => Runway::Until { at_ms },
        },
        other => other,
    };
    Outlook {
        key: key.to_string(),
        now_ms,
        left,
        carved: crate::budget::periods::carved(&q.status, key),
        burn_per_hour: burn,
        runway,
    }
}

impl Outlook {
    /// When it runs out at what runs now (None: not burning, or its period
    /// ends first); `now` when it is spent.
    pub fn runs_out_ms(&self) -> Option<i64> {
        use crate::budget::runway::Runway;
        match self.runway {
            Runway::Until { at_ms } => Some(at_ms),
            Runway::Spent => Some(self.now_ms),
            _ => None,
        }
    }

    /// How long it lasts from now, in milliseconds, while it has something
    /// left and burns.
    pub fn lasts_ms(&self) -> Option<i64> {
        match self.runway {
            crate::budget::runway::Runway::Until { at_ms } => {
                Some(at_ms.saturating_sub(self.now_ms).max(0))
            }
            _ => None,
        }
    }

    /// The outlook as a [`Forecast`] (what the burn-down chart draws its
    /// dashed line from): left now, falling at the burn, to zero when it
    /// runs out — past the period's end too, where the chart shows it.
    pub fn as_forecast(&self) -> Forecast {
        let at = crate::budget::runway::lasts_ms(self.left, self.burn_per_hour)
            .map(|ms| self.now_ms.saturating_add(ms));
        Forecast {
            key: self.key.clone(),
            now_ms: self.now_ms,
            remaining: self.left,
            as_of_ms: Some(self.now_ms),
            burned: self.burn_per_hour,
            burn_from_ms: Some(self.now_ms.saturating_sub(MS_PER_HOUR)),
            burn_per_hour: self.burn_per_hour,
            exhausted_at_ms: at,
            days_left: at.map(|a| a.saturating_sub(self.now_ms).max(0) as f64 / MS_PER_DAY as f64),
        }
    }

    /// The run-out day, `2026-12-07` (UTC).
    pub fn date(&self) -> Option<String> {
        self.runs_out_ms()
            .map(|at| crate::time::format_rfc3339(at)[..10].to_string())
    }

    /// The one sentence every place shows: `runs out in 8.3 days
    /// (2026-12-07)`, `spent`, `not burning`, `lasts until the period ends
    /// (2026-12-01 00:00 UTC)`.
    pub fn words(&self) -> String {
        let w = self.runway.words(self.now_ms);
        match (&self.runway, self.date()) {
            (crate::budget::runway::Runway::Until { .. }, Some(d)) => format!("{w} ({d})"),
            _ => w,
        }
    }
}

/// Index of the sample the burn is measured from, or None when fewer than
/// two usable samples lie in the window.
fn burn_start(pts: &[(i64, i128, i128)], from_ms: i64) -> Option<usize> {
    let last = pts.len().checked_sub(1)?;
    let mut i0 = pts.partition_point(|p| p.0 < from_ms);
    if i0 > last {
        return None; // nothing recorded in the window: the burn is unknown
    }
    if i0 == last {
        i0 = last.checked_sub(1)?;
    }
    if let Some(j) = (i0 + 1..=last).rev().find(|&j| pts[j].2 < pts[j - 1].2) {
        i0 = j;
    }
    (i0 < last && pts[i0].0 < pts[last].0).then_some(i0)
}

/// ⌊a·b/c⌋ for c > 0, exact while a·b fits in i128 and close beyond.
fn mul_div_floor(a: i128, b: i128, c: i128) -> i128 {
    match a.checked_mul(b) {
        Some(p) => p.div_euclid(c),
        None => a
            .div_euclid(c)
            .saturating_mul(b)
            .saturating_add(a.rem_euclid(c).saturating_mul(b) / c),
    }
}

fn sorted(samples: &[Sample]) -> Vec<&Sample> {
    let mut v: Vec<&Sample> = samples.iter().collect();
    v.sort_by_key(|s| s.at_ms);
    v
}

/// What a budget's burn is priced at: the QoS multipliers, the price list
/// and the instant the burn is taken at (`now_ms`). The default prices
/// everything at face value.
#[derive(Clone, Debug, Default)]
pub struct Pricing {
    pub qos: crate::cash::QosMultipliers,
    pub list: std::sync::Arc<crate::budget::PriceList>,
    pub now_ms: i64,
}

/// The one forecast (`outlook`) of every cash key of
/// `q`'s hard, in key order: what the quota page, its charts, the budgets
/// API and the alerts read.
pub fn outlooks(q: &crate::object::Quota, pricing: &Pricing) -> Vec<Outlook> {
    q.spec
        .hard
        .keys()
        .filter(|k| crate::keys::cash_target(k).is_some())
        .map(|k| outlook(q, k, pricing.now_ms, &pricing.qos, &pricing.list))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quantity::NANO;
    use proptest::prelude::*;

    const CASH: &str = "cash/requests.nvidia.com/gpu";
    const MS_PER_MIN: i64 = 60_000;
    /// 2026-11-21T00:00:00Z
    const T0: i64 = 1_795_219_200_000;

    fn list(items: &[(&str, Quantity)]) -> ResourceList {
        items.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    /// A cash sample: `budget` card-hours, `spent_nanos` spent.
    fn cash(at_ms: i64, budget: i64, spent_nanos: i128) -> Sample {
        Sample {
            at_ms,
            hard: list(&[(CASH, Quantity::from_units(budget))]),
            used: list(&[(CASH, Quantity::from_nanos(spent_nanos))]),
            self_used: ResourceList::new(),
        }
    }

    /// A quota with a `budget` card-hour budget, `spent` of it accrued, and
    /// one workload of `cards` GPUs running.
    fn budgeted(budget: i64, cards: i64) -> crate::Quota {
        let mut q = crate::Quota::new(
            "nlp",
            crate::QuotaSpec {
                parent: String::new(),
                hard: list(&[(CASH, Quantity::from_units(budget))]),
                max: Default::default(),
                budgets: Default::default(),
                queueing: Default::default(),
                fair_sharing: Default::default(),
                idle: None,
            },
        );
        if cards > 0 {
            q.status.workloads.insert(
                "batch/Job/ml/train".into(),
                crate::Charge {
                    pod_sets: vec![crate::workload::PodSet {
                        name: "main".into(),
                        count: cards,
                        per_pod: list(&[("requests.nvidia.com/gpu", Quantity::from_units(1))]),
                        qos: None,
                    }],
                    hpa: None,
                    since: "2026-11-21T00:00:00.000Z".into(),
                    uid: "u".into(),
                    admitted: None,
                },
            );
        }
        q
    }

    #[test]
    fn one_outlook_names_one_day_and_one_sentence() {
        let q = budgeted(200, 10);
        let o = outlook(&q, CASH, T0, &Default::default(), &Default::default());
        // 200 card-hours at 10 cards: 20 hours.
        assert_eq!(o.left, Quantity::from_units(200));
        assert_eq!(o.burn_per_hour, Quantity::from_units(10));
        assert_eq!(o.runs_out_ms(), Some(T0 + 20 * MS_PER_HOUR));
        assert_eq!(o.lasts_ms(), Some(20 * MS_PER_HOUR));
        assert_eq!(o.words(), "runs out in 20 hours (2026-11-21)");
        // Ten days of budget: the day is named with it.
        let q = budgeted(2400, 10);
        let o = outlook(&q, CASH, T0, &Default::default(), &Default::default());
        assert_eq!(o.words(), "runs out in 10 days (2026-12-01)");
    }

    #[test]
    fn an_idle_or_spent_budget_says_so() {
        let idle = outlook(
            &budgeted(200, 0),
            CASH,
            T0,
            &Default::default(),
            &Default::default(),
        );
        assert_eq!(
            (idle.words(), idle.runs_out_ms()),
            ("not burning".to_string(), None)
        );
        let spent = outlook(
            &budgeted(0, 4),
            CASH,
            T0,
            &Default::default(),
            &Default::default(),
        );
        assert_eq!(
            (spent.words(), spent.runs_out_ms()),
            ("spent".to_string(), Some(T0))
        );
    }

    /// Minute samples over `hours` of a steady burn of `rate` card-hours/h,
    /// ending with `left` card-hours of the budget remaining.
    fn steady_burn(hours: i64, rate: i64, left: i64) -> Vec<Sample> {
        let budget = rate * hours + left;
        (0..=hours * 60)
            .map(|m| {
                // Per-minute spend is not a whole nano-unit: floor it, as a
                // meter would, and let first/last difference stay exact.
                let spent = m as i128 * rate as i128 * NANO / 60;
                cash(T0 + m * MS_PER_MIN, budget, spent)
            })
            .collect()
    }

    #[test]
    fn steady_burn_of_ten_per_hour_with_a_hundred_left_lasts_ten_hours() {
        let now = T0 + 24 * MS_PER_HOUR;
        let f = forecast(&steady_burn(24, 10, 100), CASH, now, FORECAST_WINDOW_MS);
        assert_eq!(f.remaining, Quantity::from_units(100));
        assert_eq!(f.burn_per_hour, Quantity::from_units(10));
        assert_eq!(f.burned, Quantity::from_units(240));
        assert_eq!(f.burn_from_ms, Some(T0));
        assert_eq!(f.exhausted_at_ms, Some(now + 10 * MS_PER_HOUR));
        assert_eq!(f.days_left, Some(10.0 / 24.0));
    }

    #[test]
    fn the_rate_comes_from_the_window_only() {
        // 5/h for the first two days, then 10/h for the last day.
        let mut s: Vec<Sample> = Vec::new();
        let mut spent = 0i128;
        for h in 0..=72 {
            s.push(cash(T0 + h * MS_PER_HOUR, 1000, spent));
            spent += if h < 48 { 5 } else { 10 } * NANO;
        }
        let now = T0 + 72 * MS_PER_HOUR;
        let f = forecast(&s, CASH, now, FORECAST_WINDOW_MS);
        assert_eq!(f.burn_per_hour, Quantity::from_units(10));
        // 1000 − (48·5 + 24·10) = 520 left at 10/h: 52 h.
        assert_eq!(f.exhausted_at_ms, Some(now + 52 * MS_PER_HOUR));
    }

    #[test]
    fn fractional_rates_stay_exact() {
        // 1 card-hour over 3 h: 0.333… per hour; 2 left → exactly 6 h.
        let s = vec![
            cash(T0, 10, 7 * NANO),
            cash(T0 + 3 * MS_PER_HOUR, 10, 8 * NANO),
        ];
        let f = forecast(&s, CASH, T0 + 3 * MS_PER_HOUR, FORECAST_WINDOW_MS);
        assert_eq!(f.burn_per_hour, Quantity::from_nanos(333_333_333));
        assert_eq!(f.exhausted_at_ms, Some(T0 + 9 * MS_PER_HOUR));
    }

    #[test]
    fn no_burn_means_no_exhaustion_date() {
        let s: Vec<Sample> = (0..=24)
            .map(|h| cash(T0 + h * MS_PER_HOUR, 100, 40 * NANO))
            .collect();
        let f = forecast(&s, CASH, T0 + 24 * MS_PER_HOUR, FORECAST_WINDOW_MS);
        assert_eq!(f.remaining, Quantity::from_units(60));
        assert_eq!(f.burn_per_hour, Quantity::ZERO);
        assert_eq!((f.exhausted_at_ms, f.days_left), (None, None));
    }

    #[test]
    fn a_spent_budget_is_exhausted_now() {
        let now = T0 + 2 * MS_PER_HOUR;
        let s = vec![
            cash(T0, 100, 90 * NANO),
            cash(T0 + MS_PER_HOUR, 100, 120 * NANO),
        ];
        let f = forecast(&s, CASH, now, FORECAST_WINDOW_MS);
        assert_eq!(f.remaining, Quantity::from_units(-20));
        assert_eq!((f.exhausted_at_ms, f.days_left), (Some(now), Some(0.0)));
        let exact = forecast(&[cash(T0, 100, 100 * NANO)], CASH, now, FORECAST_WINDOW_MS);
        assert_eq!(exact.exhausted_at_ms, Some(now));
    }

    #[test]
    fn unmeasurable_burns_give_no_date() {
        let now = T0 + MS_PER_HOUR;
        assert_eq!(forecast(&[], CASH, now, FORECAST_WINDOW_MS).as_of_ms, None);
        // One sample: a level, not a rate.
        let one = forecast(&[cash(T0, 100, 5 * NANO)], CASH, now, FORECAST_WINDOW_MS);
        assert_eq!(one.exhausted_at_ms, None);
        // Nothing in the last day: the burn is unknown, not zero-or-old.
        let stale = vec![cash(T0, 100, 0), cash(T0 + MS_PER_HOUR, 100, 10 * NANO)];
        let f = forecast(&stale, CASH, T0 + 3 * MS_PER_DAY, FORECAST_WINDOW_MS);
        assert_eq!(
            (f.exhausted_at_ms, f.remaining),
            (None, Quantity::from_units(90))
        );
        // Samples after `now` are ignored.
        let f = forecast(&stale, CASH, T0 + MS_PER_MIN, FORECAST_WINDOW_MS);
        assert_eq!(f.remaining, Quantity::from_units(100));
    }

    #[test]
    fn a_sparse_window_reaches_back_one_sample() {
        // Daily samples: the 24 h window holds only the last one.
        let s = vec![cash(T0, 100, 0), cash(T0 + MS_PER_DAY, 100, 48 * NANO)];
        let f = forecast(&s, CASH, T0 + MS_PER_DAY + MS_PER_HOUR, FORECAST_WINDOW_MS);
        assert_eq!(f.burn_per_hour, Quantity::from_units(2));
        assert_eq!(f.exhausted_at_ms, Some(T0 + MS_PER_DAY + 26 * MS_PER_HOUR));
    }

    #[test]
    fn a_reset_counter_measures_from_the_reset() {
        let s = vec![
            cash(T0, 100, 80 * NANO),
            cash(T0 + MS_PER_HOUR, 100, 0),
            cash(T0 + 3 * MS_PER_HOUR, 100, 10 * NANO),
        ];
        let f = forecast(&s, CASH, T0 + 3 * MS_PER_HOUR, FORECAST_WINDOW_MS);
        assert_eq!(f.burn_per_hour, Quantity::from_units(5));
        assert_eq!(f.exhausted_at_ms, Some(T0 + 21 * MS_PER_HOUR));
    }

    proptest! {
        /// A constant burn of `rate` nano-units per sample interval, sampled
        /// in any order: the forecast is exact, to the millisecond.
        #[test]
        fn the_forecast_of_a_constant_burn_is_exact(
            rate in 1i128..1_000_000_000_000,
            step_ms in 1i64..3_600_000,
            n in 2i64..200,
            periods_left in 1i128..10_000,
            shuffle in any::<u64>(),
        ) {
            let budget = rate * (n as i128 - 1 + periods_left);
            let mut s: Vec<Sample> = (0..n)
                .map(|i| Sample {
                    at_ms: T0 + i * step_ms,
                    hard: list(&[(CASH, Quantity::from_nanos(budget))]),
                    used: list(&[(CASH, Quantity::from_nanos(rate * i as i128))]),
                    self_used: ResourceList::new(),
                })
                .collect();
            s.rotate_left((shuffle % n as u64) as usize);
            let last = T0 + (n - 1) * step_ms;
            // The whole history lies in the window.
            let f = forecast(&s, CASH, last, (n - 1) * step_ms);
            prop_assert_eq!(f.remaining.nanos(), rate * periods_left);
            prop_assert_eq!(f.burn_from_ms, Some(T0));
            prop_assert_eq!(f.burned.nanos(), rate * (n as i128 - 1));
            let exhausted = last as i128 + periods_left * step_ms as i128;
            prop_assert_eq!(f.exhausted_at_ms.map(i128::from), Some(exhausted));
        }
    }
}
