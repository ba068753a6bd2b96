//! A cash key's budget policy (docs/budgets.md): period, carry-over,
//! overspend, admission without a run time, reservation cap, refunds and
//! exhaustion, as plain serde data (camelCase) with one validation that
//! says which key and what is wrong.

use super::refund::PolicyError;
use super::topup::TopUpError;
use crate::keys::cash_target;
use crate::object::budgets::BudgetPolicy;
use crate::object::budgets::WithoutRunTime;
use crate::object::period::{Carry, Period, PeriodError};
use crate::quantity::Quantity;
use crate::workload::runtime::MAX_RUN_MS;
use std::collections::BTreeMap;

/// The largest reservation cap, in resource-hours: a trillion card-hours,
/// far beyond any budget, and small enough that every sum of reservations
/// stays exact.
pub const MAX_CAP_HOURS: i64 = 1_000_000_000_000;

/// A cash key's forecast alert looks this many days ahead unless its
/// policy says otherwise (`forecastDays`; 0 turns it off).
pub const DEFAULT_FORECAST_DAYS: i64 = 14;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BudgetError {
    #[error("budget '{0}' is not a cash key (cash/<resource key>)")]
    NotCash(String),
    #[error("budget {key}: {err}")]
    Period { key: String, err: PeriodError },
    #[error("budget {key}: {err}")]
    Policy { key: String, err: PolicyError },
    #[error("budget {key}: carry needs a weekly or monthly period (a term has no next period, and no period never ends)")]
    CarryWithoutPeriod { key: String },
    #[error("budget {key}: horizonSeconds {seconds} must be between 1 and 31622400 (366 days)")]
    Horizon { key: String, seconds: i64 },
    #[error("budget {key}: forecastDays {days} must be between 0 (no forecast alert) and 366")]
    ForecastDays { key: String, days: i64 },
    #[error("budget {key}: reservationCap {cap} is negative")]
    Cap { key: String, cap: Quantity },
    #[error("budget {key}: reservationCap {cap} is more than the {MAX_CAP_HOURS} resource-hours a cap may be")]
    CapTooLarge { key: String, cap: Quantity },
    #[error("{0}")]
    TopUp(TopUpError),
}

impl BudgetPolicy {
    /// The forecast alert's horizon in hours; None: turned off.
    pub fn forecast_horizon_hours(&self) -> Option<i64> {
        match self.forecast_days.unwrap_or(DEFAULT_FORECAST_DAYS) {
            0 => None,
            d => Some(d.saturating_mul(24)),
        }
    }

    pub fn validate(&self, key: &str) -> Result<(), BudgetError> {
        if cash_target(key).is_none_or(str::is_empty) {
            return Err(BudgetError::NotCash(key.to_string()));
        }
        let period = |err| BudgetError::Period {
            key: key.to_string(),
            err,
        };
        let policy = |err| BudgetError::Policy {
            key: key.to_string(),
            err,
        };
        self.period.validate().map_err(period)?;
        self.carry.validate().map_err(period)?;
        let recurring = matches!(self.period, Period::Weekly { .. } | Period::Monthly { .. });
        if !recurring && self.carry != Carry::None {
            return Err(BudgetError::CarryWithoutPeriod {
                key: key.to_string(),
            });
        }
        if let WithoutRunTime::ReserveDefault { horizon_seconds } = self.without_run_time {
            if !(1..=MAX_RUN_MS / 1000).contains(&horizon_seconds) {
                return Err(BudgetError::Horizon {
                    key: key.to_string(),
                    seconds: horizon_seconds,
                });
            }
        }
        if let Some(cap) = self.reservation_cap.filter(|c| c.is_negative()) {
            return Err(BudgetError::Cap {
                key: key.to_string(),
                cap,
            });
        }
        if let Some(cap) = self
            .reservation_cap
            .filter(|c| *c > Quantity::from_units(MAX_CAP_HOURS))
        {
            return Err(BudgetError::CapTooLarge {
                key: key.to_string(),
                cap,
            });
        }
        if let Some(days) = self.forecast_days.filter(|d| !(0..=366).contains(d)) {
            return Err(BudgetError::ForecastDays {
                key: key.to_string(),
                days,
            });
        }
        self.refund.validate().map_err(policy)?;
        self.on_exhausted.validate().map_err(policy)?;
        if let Some(s) = &self.scheduled_top_up {
            s.validate(key, &self.period).map_err(BudgetError::TopUp)?;
        }
        Ok(())
    }
}

/// Validates every budget of a quota, keyed by cash key.
pub fn validate_all(budgets: &BTreeMap<String, BudgetPolicy>) -> Result<(), BudgetError> {
    budgets.iter().try_for_each(|(k, p)| p.validate(k))
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "cash/requests.nvidia.com/gpu";

    #[test]
    fn a_full_policy_reads_from_camel_case_json() {
        let p: BudgetPolicy = serde_json::from_str(
            r#"{
              "period": {"kind": "monthly", "anchorDay": 1, "utcOffsetMinutes": 480},
              "carry": {"kind": "percent", "percent": 20},
              "overspend": "forgive",
              "withoutRunTime": {"kind": "reserveDefault", "horizonSeconds": 86400},
              "reservationCap": "500",
              "refund": {"kind": "lastStretch", "checkpointEverySeconds": 1800},
              "onExhausted": {"kind": "suspendBatch", "graceSeconds": 3600}
            }"#,
        )
        .unwrap();
        p.validate(KEY).unwrap();
        let back: BudgetPolicy = serde_json::from_value(serde_json::to_value(&p).unwrap()).unwrap();
        assert_eq!(back, p);
        let d: BudgetPolicy = serde_json::from_str("{}").unwrap();
        assert_eq!(d, BudgetPolicy::default());
        assert!(serde_json::from_str::<BudgetPolicy>(r#"{"perod":{}}"#).is_err());
    }

    #[test]
    fn hostile_refund_exhaustion_and_forecast_settings_are_refused() {
        for (json, want) in [
            (
                r#"{"refund":{"kind":"lastStretch","checkpointEverySeconds":0}}"#,
                "checkpointEverySeconds 0 must be between 1 and 31622400",
            ),
            (
                r#"{"refund":{"kind":"lastStretch","checkpointEverySeconds":-60}}"#,
                "checkpointEverySeconds -60",
            ),
            (
                r#"{"refund":{"kind":"lastStretch","checkpointEverySeconds":31622401}}"#,
                "31622401",
            ),
            (
                r#"{"onExhausted":{"kind":"suspendBatch","graceSeconds":-1}}"#,
                "graceSeconds -1",
            ),
            (
                r#"{"onExhausted":{"kind":"suspendBatch","graceSeconds":9223372036854775807}}"#,
                "graceSeconds 9223372036854775807",
            ),
            (r#"{"forecastDays":-1}"#, "forecastDays -1"),
            (r#"{"forecastDays":367}"#, "forecastDays 367"),
        ] {
            let p: BudgetPolicy = serde_json::from_str(json).unwrap();
            let e = p.validate(KEY).unwrap_err().to_string();
            assert!(e.contains(want) && e.contains(KEY), "{json}: {e}");
        }
        // Not even parsed: fractions, strings, unknown kinds and fields.
        for json in [
            r#"{"refund":{"kind":"lastStretch","checkpointEverySeconds":1.5}}"#,
            r#"{"refund":{"kind":"lastStretch","checkpointEverySeconds":"30m"}}"#,
            r#"{"refund":{"kind":"sometimes"}}"#,
            r#"{"onExhausted":{"kind":"killAll"}}"#,
            r#"{"forecastDays":1e400}"#,
            r#"{"forecast":14}"#,
        ] {
            assert!(
                serde_json::from_str::<BudgetPolicy>(json).is_err(),
                "{json}"
            );
        }
        let ok: BudgetPolicy = serde_json::from_str(
            r#"{"refund":{"kind":"wholeRun"},"onExhausted":{"kind":"suspendBatch","graceSeconds":0},"forecastDays":0}"#,
        )
        .unwrap();
        assert_eq!(ok.validate(KEY), Ok(()));
        assert_eq!(ok.forecast_horizon_hours(), None);
        assert_eq!(
            BudgetPolicy::default().forecast_horizon_hours(),
            Some(14 * 24)
        );
    }

    #[test]
    fn errors_name_the_key() {
        let mut p = BudgetPolicy {
            carry: Carry::All,
            ..Default::default()
        };
        assert_eq!(
            p.validate(KEY),
            Err(BudgetError::CarryWithoutPeriod { key: KEY.into() })
        );
        p.carry = Carry::None;
        p.without_run_time = WithoutRunTime::ReserveDefault { horizon_seconds: 0 };
        assert!(p.validate(KEY).unwrap_err().to_string().contains(KEY));
        assert!(BudgetPolicy::default().validate("requests.cpu").is_err());
        p.without_run_time = WithoutRunTime::Admit;
        p.reservation_cap = Some(Quantity::from_units(MAX_CAP_HOURS + 1));
        assert!(matches!(
            p.validate(KEY),
            Err(BudgetError::CapTooLarge { .. })
        ));
        p.reservation_cap = Some("-1".parse().unwrap());
        assert!(matches!(p.validate(KEY), Err(BudgetError::Cap { .. })));
        p.reservation_cap = Some(Quantity::from_units(MAX_CAP_HOURS));
        p.validate(KEY).unwrap();
        p.period = Period::Monthly {
            anchor_day: 0,
            utc_offset_minutes: 0,
        };
        let e = validate_all(&[(KEY.to_string(), p)].into()).unwrap_err();
        assert!(e.to_string().contains("anchorDay 0"), "{e}");
    }
}
