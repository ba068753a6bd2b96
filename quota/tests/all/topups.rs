//! Invariants of top-ups (docs/budgets.md §5): top-ups then spending never
//! exceed budget + carry + top-ups; a top-up from the parent conserves the
//! total; an expiry never withdraws what was spent; a scheduled top-up is
//! added once per period whatever the interleaving of syncs.

use proptest::prelude::*;
use quota::budget::from_quantity;
use quota::budget::periods::{accrue_in_periods, own_used};
use quota::budget::reservations::state_of;
use quota::budget::topup::{self, check_amount, unspent_part, TopUpError, MAX_TOP_UP_HOURS};
use quota::object::budgets::BudgetPolicy;
use quota::object::budgets::{ScheduledTopUp, Source};
use quota::object::period::{Carry, Period, Weekday};
use quota::object::{Quota, QuotaSpec};
use quota::resources;
use quota::time::parse_rfc3339;
use quota::Quantity;
use std::collections::BTreeMap;

const CASH: &str = "cash/requests.nvidia.com/gpu";
const H: i64 = 3_600_000;

fn t(s: &str) -> i64 {
    parse_rfc3339(s).unwrap()
}

fn hours(h: i64) -> Quantity {
    Quantity::from_units(h)
}

fn quota(name: &str, hard: i64, period: Period, scheduled: Option<ScheduledTopUp>) -> Quota {
    let mut spec = QuotaSpec {
        hard: [(CASH.to_string(), hours(hard))].into(),
        ..Default::default()
    };
    if period != Period::None || scheduled.is_some() {
        spec.budgets.insert(
            CASH.to_string(),
            BudgetPolicy {
                period,
                carry: Carry::None,
                scheduled_top_up: scheduled,
                ..Default::default()
            },
        );
    }
    let mut q = Quota::new(name, spec);
    q.status.refresh(&q.spec);
    q
}

fn monthly() -> Period {
    Period::Monthly {
        anchor_day: 1,
        utc_offset_minutes: 0,
    }
}

/// Spends `acc` (a multiple of 1000) on the key, as accrual does.
fn spend(q: &mut Quota, acc: i128) {
    q.status.add_accrued(CASH, acc / 1000);
    q.status.refresh(&q.spec);
}

/// `hard − used` of the key, in acc: what every existing check reads.
fn left_by_used(q: &Quota) -> i128 {
    from_quantity(resources::get(&q.spec.hard, CASH))
        - from_quantity(own_used(&q.status, &q.spec, CASH))
}

#[test]
fn a_top_up_raises_what_is_left_by_its_amount_and_a_retry_changes_nothing() {
    let now = t("2026-11-10T00:00:00Z");
    let mut q = quota("nlp", 100, monthly(), None);
    spend(&mut q, from_quantity(hours(100)));
    assert!(q.status.exhausted_cash_keys(&q.spec).next().is_some());
    assert!(topup::receive(&mut q, CASH, "t1", hours(40), now).unwrap());
    assert_eq!(left_by_used(&q), from_quantity(hours(40)));
    assert!(q.status.exhausted_cash_keys(&q.spec).next().is_none());
    assert!(!topup::receive(&mut q, CASH, "t1", hours(40), now).unwrap());
    assert_eq!(left_by_used(&q), from_quantity(hours(40)));
    // The period closes with it: the record holds it, the next has none.
    accrue_in_periods(
        &q.spec.clone(),
        &mut q.status,
        now,
        t("2026-12-01T00:00:00Z"),
        |_, _| BTreeMap::new(),
    );
    let p = q.status.budgets[CASH].clone();
    assert_eq!(p.closed[0].top_ups, from_quantity(hours(40)));
    assert_eq!(p.closed[0].expired, from_quantity(hours(40)));
    assert_eq!(p.top_ups, 0);
    // Its expiry after the boundary withdraws nothing: it closed with it.
    assert_eq!(
        topup::expire(&mut q, CASH, "t1", t("2026-12-02T00:00:00Z")).0,
        0
    );
    assert_eq!(p.top_ups, q.status.budgets[CASH].top_ups);
}

#[test]
fn without_a_period_a_top_up_counts_for_all_time() {
    let now = t("2026-11-10T00:00:00Z");
    let mut q = quota("nlp", 10, Period::None, None);
    assert!(q.status.budgets.is_empty());
    topup::receive(&mut q, CASH, "t7", hours(5), now).unwrap();
    let p = &q.status.budgets[CASH];
    assert_eq!((p.start.as_deref(), p.end.as_deref()), (None, None));
    assert_eq!(left_by_used(&q), from_quantity(hours(15)));
    // Syncs and accrual years later keep it.
    let spec = q.spec.clone();
    accrue_in_periods(&spec, &mut q.status, now, now + 800 * 24 * H, |_, _| {
        BTreeMap::new()
    });
    q.status.refresh(&q.spec);
    assert_eq!(left_by_used(&q), from_quantity(hours(15)));
    // Spend 12: the expiry withdraws the 3 left, never more.
    spend(&mut q, from_quantity(hours(12)));
    assert_eq!(
        topup::expire(&mut q, CASH, "t7", now + H),
        (from_quantity(hours(3)), true)
    );
    assert_eq!(left_by_used(&q), 0);
    assert_eq!(
        topup::expire(&mut q, CASH, "t7", now + 2 * H),
        (from_quantity(hours(3)), false)
    );
    assert_eq!(left_by_used(&q), 0);
}

#[test]
fn hostile_amounts_and_keys_are_refused_and_change_nothing() {
    let now = t("2026-11-10T00:00:00Z");
    let mut q = quota("nlp", 10, monthly(), None);
    let before = q.clone();
    assert!(matches!(
        topup::receive(&mut q, CASH, "a", Quantity::ZERO, now),
        Err(TopUpError::NotPositive(_))
    ));
    assert!(matches!(
        topup::receive(&mut q, CASH, "a", "-1".parse().unwrap(), now),
        Err(TopUpError::NotPositive(_))
    ));
    assert!(matches!(
        topup::receive(&mut q, CASH, "a", hours(MAX_TOP_UP_HOURS + 1), now),
        Err(TopUpError::TooLarge(_))
    ));
    assert!(matches!(
        topup::receive(&mut q, "requests.cpu", "a", hours(1), now),
        Err(TopUpError::NotABudget { .. })
    ));
    assert!(matches!(
        topup::receive(&mut q, "cash/requests.cpu", "a", hours(1), now),
        Err(TopUpError::NotABudget { .. })
    ));
    assert_eq!(q, before);
    check_amount(hours(MAX_TOP_UP_HOURS)).unwrap();
    // A period takes at most MAX_PER_PERIOD top-ups.
    for i in 0..topup::MAX_PER_PERIOD {
        topup::receive(&mut q, CASH, &format!("t{i}"), hours(1), now).unwrap();
    }
    let e = topup::receive(&mut q, CASH, "one-more", hours(1), now).unwrap_err();
    assert!(e.to_string().contains("already has 32 top-ups"), "{e}");
}

#[test]
fn a_parent_gives_only_what_it_has_left_after_its_reservations() {
    let now = t("2026-11-10T00:00:00Z");
    let mut p = quota("org", 100, monthly(), None);
    spend(&mut p, from_quantity(hours(70)));
    let before = p.clone();
    let e = topup::give(&mut p, CASH, "t1-from", hours(31), now).unwrap_err();
    assert_eq!(
        e.to_string(),
        "bizrq org: cash/requests.nvidia.com/gpu gives 31, only 30 is left of its budget this period"
    );
    assert_eq!(p, before);
    assert!(topup::give(&mut p, CASH, "t1-from", hours(30), now).unwrap());
    assert_eq!(left_by_used(&p), 0);
    assert!(!topup::give(&mut p, CASH, "t1-from", hours(30), now).unwrap());
    assert!(p.status.exhausted_cash_keys(&p.spec).next().is_some());
}

#[test]
fn scheduled_top_ups_are_validated() {
    let s = ScheduledTopUp {
        amount: hours(10),
        source: Source::Grant,
    };
    let mut policy = BudgetPolicy {
        scheduled_top_up: Some(s.clone()),
        ..Default::default()
    };
    let e = policy.validate(CASH).unwrap_err().to_string();
    assert!(e.contains("needs a period"), "{e}");
    policy.period = monthly();
    policy.validate(CASH).unwrap();
    policy.scheduled_top_up = Some(ScheduledTopUp {
        amount: Quantity::ZERO,
        ..s
    });
    let e = policy.validate(CASH).unwrap_err().to_string();
    assert_eq!(
        e,
        "budget cash/requests.nvidia.com/gpu: scheduledTopUp amount: a top-up of 0 is not positive: ask for more than zero"
    );
    let json: BudgetPolicy = serde_json::from_str(
        r#"{"period": {"kind": "weekly", "startsOn": "monday"},
            "scheduledTopUp": {"amount": "25", "source": "parent"}}"#,
    )
    .unwrap();
    assert_eq!(json.scheduled_top_up.unwrap().source, Source::Parent);
    assert!(serde_json::from_str::<BudgetPolicy>(
        r#"{"scheduledTopUp": {"amount": "25", "source": "bank"}}"#
    )
    .is_err());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The unspent part is never more than was added, nor than is left;
    /// what stays available always covers what was spent.
    #[test]
    fn expiry_never_withdraws_spent_budget(
        added in -(1i128 << 80)..(1i128 << 80),
        available in -(1i128 << 80)..(1i128 << 80),
        spent in -(1i128 << 80)..(1i128 << 80),
    ) {
        let w = unspent_part(added, available, spent);
        prop_assert!(w >= 0);
        prop_assert!(w <= added.max(0));
        prop_assert!(w <= (available - spent).max(0));
        if available >= spent {
            prop_assert!(available - w >= spent);
        }
    }

    /// Top-ups, retries, spending (admitted only within what is left) and
    /// expiries in any order: spent never exceeds budget + top-ups, and
    /// the available budget is the budget plus each top-up once less what
    /// expiries withdrew.
    #[test]
    fn top_ups_then_spending_never_exceed_the_budget(
        hard in 0i64..50,
        periodic in any::<bool>(),
        ops in prop::collection::vec((0u8..4, 0usize..6, 1i64..40), 1..40),
    ) {
        let now = t("2026-11-10T00:00:00Z");
        let period = if periodic { monthly() } else { Period::None };
        let mut q = quota("nlp", hard, period, None);
        let mut added: BTreeMap<String, i128> = BTreeMap::new();
        let mut withdrawn: BTreeMap<String, i128> = BTreeMap::new();
        for (op, id, amount) in ops {
            let id = format!("t{id}");
            match op {
                0 | 1 => {
                    let applied = topup::receive(&mut q, CASH, &id, hours(amount), now).unwrap();
                    prop_assert_eq!(applied, !added.contains_key(&id));
                    added.entry(id).or_insert(from_quantity(hours(amount)));
                }
                2 => {
                    // Admitted only if it fits what is left, as a
                    // reservation would be.
                    let want = from_quantity(hours(amount)) / 3 / 1000 * 1000;
                    if want <= state_of(&q, CASH).left() {
                        spend(&mut q, want);
                    }
                }
                _ => {
                    let before = state_of(&q, CASH);
                    let (w, _) = topup::expire(&mut q, CASH, &id, now);
                    if let Some(prev) = withdrawn.get(&id) {
                        prop_assert_eq!(w, *prev);
                        prop_assert_eq!(state_of(&q, CASH).available(), before.available());
                    } else if added.contains_key(&id) {
                        prop_assert!(w <= added[&id]);
                        withdrawn.insert(id, w);
                    } else {
                        prop_assert_eq!(w, 0);
                    }
                }
            }
            let s = state_of(&q, CASH);
            let expect = from_quantity(hours(hard)) + added.values().sum::<i128>()
                - withdrawn.values().sum::<i128>();
            prop_assert_eq!(s.available(), expect);
            prop_assert!(s.spent <= s.available());
            // What every check reads (rounded to the nano-unit).
            prop_assert!((left_by_used(&q) - (s.available() - s.spent)).abs() <= 3_600_000_000_000);
        }
    }

    /// A top-up from the parent, its steps retried in any number: the
    /// parent gives it once and the child gets it once, so the two
    /// budgets together hold what they held; a refused one changes
    /// nothing, and the parent never gives what it has spent.
    #[test]
    fn a_top_up_from_the_parent_conserves_the_total(
        parent_hard in 0i64..100,
        parent_spent in 0i64..100,
        amount in 1i64..120,
        gives in 1usize..4,
        receives in 1usize..4,
    ) {
        let now = t("2026-11-10T00:00:00Z");
        let mut p = quota("org", parent_hard, monthly(), None);
        spend(&mut p, from_quantity(hours(parent_spent)));
        let mut c = quota("nlp", 10, monthly(), None);
        let total = state_of(&p, CASH).available() + state_of(&c, CASH).available();
        let before = p.clone();
        let mut given = false;
        for _ in 0..gives {
            match topup::give(&mut p, CASH, "t1-from", hours(amount), now) {
                Ok(_) => given = true,
                Err(TopUpError::NotCovered { .. }) => {
                    prop_assert!(amount > parent_hard - parent_spent);
                    prop_assert_eq!(&p, &before);
                }
                Err(e) => prop_assert!(false, "{e}"),
            }
        }
        if given {
            for _ in 0..receives {
                topup::receive(&mut c, CASH, "t1", hours(amount), now).unwrap();
            }
        }
        let after = state_of(&p, CASH).available() + state_of(&c, CASH).available();
        prop_assert_eq!(after, total);
        prop_assert_eq!(given, amount <= parent_hard - parent_spent);
        let ps = state_of(&p, CASH);
        prop_assert!(!given || ps.spent <= ps.available());
    }

    /// Syncs at any times, some from a stale copy (a lost compare-and-swap
    /// retried): every period gets the scheduled top-up exactly once.
    #[test]
    fn a_scheduled_top_up_is_added_once_per_period(
        weekly in any::<bool>(),
        amount in 1i64..100,
        steps in prop::collection::vec((0i64..(20 * 24 * H), any::<bool>()), 1..30),
    ) {
        let period = if weekly {
            Period::Weekly { starts_on: Weekday::Monday, utc_offset_minutes: 0 }
        } else {
            monthly()
        };
        let q = quota("nlp", 10, period, Some(ScheduledTopUp {
            amount: hours(amount),
            source: Source::Grant,
        }));
        let spec = q.spec.clone();
        let mut st = q.status.clone();
        let mut at = t("2026-11-10T00:00:00Z");
        let mut stored = (st.clone(), at);
        for (step, stale) in steps {
            if stale {
                // Another writer's copy from the last stored state.
                let (mut other, from) = stored.clone();
                accrue_in_periods(&spec, &mut other, from, at + step / 2, |_, _| BTreeMap::new());
            }
            let to = at + step;
            accrue_in_periods(&spec, &mut st, at, to, |_, _| BTreeMap::new());
            let again = st.clone();
            // The same sync retried changes nothing.
            accrue_in_periods(&spec, &mut st, to, to, |_, _| BTreeMap::new());
            prop_assert_eq!(&st, &again);
            at = to;
            stored = (st.clone(), at);
            let p = &st.budgets[CASH];
            prop_assert_eq!(p.top_ups, from_quantity(hours(amount)));
            for r in &p.closed {
                prop_assert_eq!(r.top_ups, from_quantity(hours(amount)));
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// "What is left" has one rule (`periods::left`): whatever the period,
    /// spending, top-ups and carve-outs, it equals what admission reads
    /// (`hard − used` after refresh, `admission::left`), and it is the
    /// balance's budget + carry-in + top-ups − spent − carved.
    #[test]
    fn what_is_left_is_one_rule(
        hard in 0i64..500,
        periodic in any::<bool>(),
        spent in 0i64..700,
        top_up in 0i64..200,
        carves in prop::collection::vec(0i64..150, 0..4),
        hours_in in 0i64..2000,
    ) {
        let now = t("2026-11-10T00:00:00Z");
        let period = if periodic { monthly() } else { Period::None };
        let mut q = quota("nlp", hard, period, None);
        if top_up > 0 {
            topup::receive(&mut q, CASH, "t1", hours(top_up), now).unwrap();
        }
        spend(&mut q, from_quantity(hours(spent)));
        for (i, c) in carves.iter().enumerate() {
            q.status.children.insert(
                format!("child{i}"),
                quota::object::Carve {
                    hard: [(CASH.to_string(), hours(*c))].into(),
                    since: String::new(),
                    uid: String::new(),
                },
            );
        }
        // Time passes (a boundary may close the period) before the refresh.
        let spec = q.spec.clone();
        accrue_in_periods(&spec, &mut q.status, now, now + hours_in * H, |_, _| {
            BTreeMap::new()
        });
        q.status.refresh(&q.spec);
        let left = quota::budget::periods::left(&q.spec, &q.status, CASH);
        prop_assert_eq!(Some(left), quota::admission::left(&q, CASH));
        let carved = hours(carves.iter().sum());
        prop_assert_eq!(quota::budget::periods::carved(&q.status, CASH), carved);
        if let Some(b) = quota::budget::periods::balance(&q.spec, &q.status, CASH) {
            prop_assert_eq!(b.left, left);
            prop_assert_eq!(b.carved, carved);
            prop_assert_eq!(
                b.budget
                    .saturating_add(b.carry_in)
                    .saturating_add(b.top_ups)
                    .saturating_sub(b.spent)
                    .saturating_sub(b.carved),
                left
            );
        }
    }
}
