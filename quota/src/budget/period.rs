//! Closing a budget period (docs/budgets.md §1): what was spent becomes a
//! record, and what the next period starts with is decided, conserving
//! every nano-unit. The periods themselves are `crate::object::period`.

use crate::object::period::{Carry, Overspend, PeriodRecord, Window};

impl Carry {
    /// The most that may carry from a period whose budget was `budget` (acc).
    fn cap(&self, budget: i128) -> i128 {
        match self {
            Carry::None => 0,
            Carry::All => i128::MAX,
            Carry::Percent { percent } => {
                (budget.max(0).saturating_mul(*percent as i128)).div_euclid(100)
            }
            Carry::Amount { amount } => super::from_quantity(*amount).max(0),
        }
    }
}

/// What closing a period needs to know (acc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Closing {
    pub window: Window,
    pub budget: i128,
    pub carry_in: i128,
    pub top_ups: i128,
    pub spent: i128,
}

/// Closes a period: what is left carries under `carry` (capped by the
/// period's own budget for a percentage) and the rest expires; an
/// overspend becomes the next period's debt or is forgiven.
pub fn close(c: Closing, carry: &Carry, overspend: Overspend) -> PeriodRecord {
    let budget = if c.window.funded { c.budget } else { 0 };
    let available = budget.saturating_add(c.carry_in).saturating_add(c.top_ups);
    let left = available.saturating_sub(c.spent);
    let (carried, expired, forgiven) = if left >= 0 {
        let carried = left.min(carry.cap(budget));
        (carried, left - carried, 0)
    } else {
        match overspend {
            Overspend::Carry => (left, 0, 0),
            Overspend::Forgive => (0, 0, -left),
        }
    };
    PeriodRecord {
        start_ms: c.window.start_ms,
        end_ms: c.window.end_ms,
        budget,
        carry_in: c.carry_in,
        top_ups: c.top_ups,
        spent: c.spent,
        carried,
        expired,
        forgiven,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::period::*;
    use crate::quantity::Quantity;
    use crate::time::parse_rfc3339;

    fn t(s: &str) -> i64 {
        parse_rfc3339(s).unwrap()
    }
    fn monthly(anchor: u32) -> Period {
        Period::Monthly {
            anchor_day: anchor,
            utc_offset_minutes: 0,
        }
    }
    fn window(p: &Period, at: &str) -> (String, String) {
        let w = p.at(t(at));
        (
            crate::time::format_rfc3339(w.start_ms),
            crate::time::format_rfc3339(w.end_ms),
        )
    }
    fn pair(a: &str, b: &str) -> (String, String) {
        (a.to_string(), b.to_string())
    }

    #[test]
    fn monthly_on_the_first() {
        let p = monthly(1);
        assert_eq!(
            window(&p, "2026-03-15T12:00:00Z"),
            pair("2026-03-01T00:00:00.000Z", "2026-04-01T00:00:00.000Z")
        );
        // The boundary instant belongs to the period it starts.
        assert_eq!(
            window(&p, "2026-04-01T00:00:00Z"),
            pair("2026-04-01T00:00:00.000Z", "2026-05-01T00:00:00.000Z")
        );
        assert_eq!(
            window(&p, "2026-03-31T23:59:59.999Z"),
            pair("2026-03-01T00:00:00.000Z", "2026-04-01T00:00:00.000Z")
        );
        assert_eq!(
            window(&p, "2026-12-31T23:00:00Z"),
            pair("2026-12-01T00:00:00.000Z", "2027-01-01T00:00:00.000Z")
        );
    }

    #[test]
    fn anchor_31_falls_on_the_last_day_of_short_months() {
        let p = monthly(31);
        assert_eq!(
            window(&p, "2026-02-10T00:00:00Z"),
            pair("2026-01-31T00:00:00.000Z", "2026-02-28T00:00:00.000Z")
        );
        assert_eq!(
            window(&p, "2026-03-01T00:00:00Z"),
            pair("2026-02-28T00:00:00.000Z", "2026-03-31T00:00:00.000Z")
        );
        assert_eq!(
            window(&p, "2026-04-30T00:00:00Z"),
            pair("2026-04-30T00:00:00.000Z", "2026-05-31T00:00:00.000Z")
        );
        // Leap year: February's period starts on the 29th.
        assert_eq!(
            window(&p, "2028-02-29T10:00:00Z"),
            pair("2028-02-29T00:00:00.000Z", "2028-03-31T00:00:00.000Z")
        );
        assert_eq!(
            window(&p, "2028-02-28T10:00:00Z"),
            pair("2028-01-31T00:00:00.000Z", "2028-02-29T00:00:00.000Z")
        );
        // Across the year.
        assert_eq!(
            window(&p, "2027-01-05T00:00:00Z"),
            pair("2026-12-31T00:00:00.000Z", "2027-01-31T00:00:00.000Z")
        );
    }

    #[test]
    fn anchor_29_and_30_in_february() {
        assert_eq!(
            window(&monthly(29), "2026-02-28T12:00:00Z"),
            pair("2026-02-28T00:00:00.000Z", "2026-03-29T00:00:00.000Z")
        );
        assert_eq!(
            window(&monthly(29), "2100-02-28T12:00:00Z"),
            pair("2100-02-28T00:00:00.000Z", "2100-03-29T00:00:00.000Z"),
            "2100 is no leap year"
        );
        assert_eq!(
            window(&monthly(30), "2000-02-29T12:00:00Z"),
            pair("2000-02-29T00:00:00.000Z", "2000-03-30T00:00:00.000Z"),
            "2000 is"
        );
    }

    #[test]
    fn weekly_across_the_new_year() {
        let p = Period::Weekly {
            starts_on: Weekday::Monday,
            utc_offset_minutes: 0,
        };
        // 2026-12-31 is a Thursday; its week starts Monday 2026-12-28.
        assert_eq!(
            window(&p, "2026-12-31T08:00:00Z"),
            pair("2026-12-28T00:00:00.000Z", "2027-01-04T00:00:00.000Z")
        );
        let sunday = Period::Weekly {
            starts_on: Weekday::Sunday,
            utc_offset_minutes: 0,
        };
        assert_eq!(
            window(&sunday, "2027-01-02T23:59:59.999Z"),
            pair("2026-12-27T00:00:00.000Z", "2027-01-03T00:00:00.000Z")
        );
        assert_eq!(
            window(&sunday, "1970-01-01T00:00:00Z"),
            pair("1969-12-28T00:00:00.000Z", "1970-01-04T00:00:00.000Z"),
            "before and after the epoch alike"
        );
        assert_eq!(Weekday::of_day(0), Weekday::Thursday);
    }

    #[test]
    fn offsets_move_boundaries_to_local_midnight() {
        // Beijing (+08:00): a month starts at 16:00 UTC the day before.
        let p = Period::Monthly {
            anchor_day: 1,
            utc_offset_minutes: 480,
        };
        assert_eq!(
            window(&p, "2026-03-31T16:00:00Z"),
            pair("2026-03-31T16:00:00.000Z", "2026-04-30T16:00:00.000Z")
        );
        assert_eq!(
            window(&p, "2026-03-31T15:59:59.999Z"),
            pair("2026-02-28T16:00:00.000Z", "2026-03-31T16:00:00.000Z")
        );
    }

    #[test]
    fn a_term_is_funded_only_inside() {
        let (s, e) = (t("2026-01-01T00:00:00Z"), t("2026-07-01T00:00:00Z"));
        let p = Period::Term {
            start_ms: s,
            end_ms: e,
        };
        assert!(p.at(s).funded && p.at(e - 1).funded);
        assert_eq!(p.at(s - 1).end_ms, s);
        assert!(!p.at(s - 1).funded && !p.at(e).funded);
        assert_eq!(p.boundaries(s - 10, e + 10).collect::<Vec<_>>(), vec![s, e]);
        assert!(Period::Term {
            start_ms: e,
            end_ms: s
        }
        .validate()
        .is_err());
    }

    #[test]
    fn boundaries_and_splits() {
        let p = monthly(31);
        let cuts: Vec<i64> = p
            .boundaries(t("2026-01-15T00:00:00Z"), t("2026-05-01T00:00:00Z"))
            .collect();
        assert_eq!(
            cuts,
            vec![
                t("2026-01-31T00:00:00Z"),
                t("2026-02-28T00:00:00Z"),
                t("2026-03-31T00:00:00Z"),
                t("2026-04-30T00:00:00Z"),
            ]
        );
        // A boundary at `from` is not a cut.
        let b = t("2026-01-31T00:00:00Z");
        assert_eq!(p.boundaries(b, b + 1000).count(), 0);
        assert_eq!(Period::None.boundaries(i64::MIN, i64::MAX).count(), 0);
        assert_eq!(
            split(0, 10, [5, 0, 10, 5, 3]),
            vec![(0, 3), (3, 5), (5, 10)]
        );
        assert!(split(5, 5, [5]).is_empty());
    }

    #[test]
    fn validation_says_what_is_wrong() {
        assert!(monthly(0).validate().is_err());
        assert!(monthly(32).validate().is_err());
        assert!(monthly(31).validate().is_ok());
        let far = Period::Weekly {
            starts_on: Weekday::Friday,
            utc_offset_minutes: 15 * 60,
        };
        assert!(far.validate().unwrap_err().to_string().contains("840"));
        assert!(Carry::Percent { percent: 101 }.validate().is_err());
        assert!(Carry::Amount {
            amount: Quantity::from_units(-1)
        }
        .validate()
        .is_err());
    }

    #[test]
    fn serde_is_camel_case_and_tagged() {
        let p: Period =
            serde_json::from_str(r#"{"kind":"monthly","anchorDay":31,"utcOffsetMinutes":60}"#)
                .unwrap();
        assert_eq!(
            p,
            Period::Monthly {
                anchor_day: 31,
                utc_offset_minutes: 60
            }
        );
        let term: Period = serde_json::from_str(
            r#"{"kind":"term","start":"2026-01-01T00:00:00Z","end":"2026-07-01T00:00:00Z"}"#,
        )
        .unwrap();
        let back = serde_json::to_value(&term).unwrap();
        assert_eq!(back["start"], "2026-01-01T00:00:00.000Z");
        assert!(
            serde_json::from_str::<Period>(r#"{"kind":"term","start":"soon","end":"x"}"#)
                .unwrap_err()
                .to_string()
                .contains("RFC 3339")
        );
        let c: Carry = serde_json::from_str(r#"{"kind":"amount","amount":"100"}"#).unwrap();
        assert_eq!(
            c,
            Carry::Amount {
                amount: Quantity::from_units(100)
            }
        );
    }

    #[test]
    fn closing_carries_within_the_rule() {
        let w = monthly(1).at(0);
        let c = Closing {
            window: w,
            budget: 1000,
            carry_in: 0,
            top_ups: 0,
            spent: 600,
        };
        let r = close(c, &Carry::Percent { percent: 25 }, Overspend::Carry);
        assert_eq!((r.carried, r.expired), (250, 150));
        let r = close(c, &Carry::All, Overspend::Carry);
        assert_eq!((r.carried, r.expired), (400, 0));
        let r = close(c, &Carry::None, Overspend::Carry);
        assert_eq!((r.carried, r.expired), (0, 400));
        let over = Closing { spent: 1300, ..c };
        let r = close(over, &Carry::All, Overspend::Carry);
        assert_eq!((r.carried, r.expired, r.forgiven), (-300, 0, 0));
        let r = close(over, &Carry::All, Overspend::Forgive);
        assert_eq!((r.carried, r.expired, r.forgiven), (0, 0, 300));
    }
}
