//! The quota page's Budgets panel and the budget rows of the edit form
//! (rendered by `app::budgets`): the numbers come from `crate::budgets`;
//! the form's fields `budget.<field>:<cash key>` are read back here into
//! each key's period, carry-over, admission without a run time and
//! reservation cap, keeping the rest of its policy. Every field is
//! checked: lengths, numbers, one of the offered choices; the policy is
//! then validated with the spec (`BudgetPolicy::validate`).

use super::PageError;
use crate::edge::AppState;
use app::budgets::{
    BudgetFormRow, BudgetLine, ClosedRow, CARRIES, PERIODS, WEEKDAYS, WITHOUT_RUN_TIME,
};
use quota::budget::to_quantity;
use quota::keys::cash_target;
use quota::object::budgets::{BudgetPolicy, WithoutRunTime};
use quota::object::period::{Carry, Period, Weekday};
use quota::readable::grouped;
use quota::time::{format_when, parse_rfc3339};
use quota::{Quantity, QuotaSpec};
use std::collections::BTreeMap;

/// Closed periods shown per key on the quota page.
const SHOWN_CLOSED: i64 = 6;
/// Longest value a budget field may hold.
const MAX_FIELD: usize = 64;

/// The panel's lines for `q`, a working copy of the request
/// (`service::working`), whose subtree spent `subtree` (summed from the
/// same copies): the figures the page's forecasts, queue and charts read.
pub async fn lines(
    app: &AppState,
    q: &quota::Quota,
    subtree: &quota::ResourceList,
    pricing: &quota::forecast::Pricing,
) -> Result<Vec<BudgetLine>, PageError> {
    let name = q.name();
    let currency = pricing.list.currency.as_ref();
    let views = crate::budgets::views(
        &app.portal.sql,
        q,
        pricing,
        Some(subtree),
        pricing.now_ms,
        SHOWN_CLOSED,
        currency,
    )
    .await?;
    let show = |acc: i128| grouped(to_quantity(acc));
    let when = |ms: i64, unbounded: i64| {
        if ms == unbounded {
            "…".to_string()
        } else {
            format_when(ms)
        }
    };
    Ok(views
        .into_iter()
        .map(|v| BudgetLine {
            // As the navigation's Reports opens (this month, by child;
            // by workload under a leaf), under this quota and budget.
            report_href: format!(
                "/reports?{}",
                serde_urlencoded::to_string([
                    ("subtree", name),
                    ("key", v.key.as_str()),
                    ("bucket", "day"),
                ])
                .unwrap_or_default()
            ),
            billing: billing_line(&pricing.list, pricing.now_ms, &v.key).map(|line| {
                let href = format!(
                    "/reports?{}",
                    serde_urlencoded::to_string([
                        ("subtree", name),
                        ("key", v.key.as_str()),
                        ("by", "quality"),
                    ])
                    .unwrap_or_default()
                );
                (line, href)
            }),
            line: v.line(),
            reservations: v.reservations_line(),
            closed: v
                .closed
                .iter()
                .map(|r| ClosedRow {
                    period: format!(
                        "{} – {}",
                        when(r.start_ms, i64::MIN),
                        when(r.end_ms, i64::MAX)
                    ),
                    budget: show(r.budget),
                    carry_in: show(r.carry_in),
                    spent: show(r.spent),
                    carried: show(r.carried),
                    expired: show(r.expired),
                })
                .collect(),
            ask: Some(format!("/transfers?topup={name}&key={}#top-up", v.key)),
            name: app::key_name(&v.key, &app.service.keys),
            key: v.key,
        })
        .collect())
}

/// How `key` is billed now, when the version in force bills by quality
/// (docs/real-usage.md, "Billing by quality"); None: by request.
fn billing_line(list: &quota::budget::PriceList, now_ms: i64, key: &str) -> Option<String> {
    let q = list.version_at(now_ms)?.quality?;
    let target = cash_target(key)?;
    let resource = quota::budget::price_list::strip_kind(target);
    Some(if matches!(resource, "cpu" | "memory") {
        format!(
            "Billed by quality of service: requests at Guaranteed {} · Burstable {} · BestEffort {}; use above a Burstable request at {}, a BestEffort pod's use at {} (real usage).",
            q.guaranteed, q.burstable_request, q.best_effort, q.above_request, q.best_effort
        )
    } else {
        format!(
            "Billed by quality of service: held whole, at the Guaranteed weight {}.",
            q.guaranteed
        )
    })
}

/// The form's rows for the cash keys of `spec`, filled from its policies.
pub fn form_rows(spec: &QuotaSpec) -> Vec<BudgetFormRow> {
    spec.hard
        .keys()
        .filter(|k| cash_target(k).is_some())
        .map(|k| row_of(k, spec.budgets.get(k).cloned().unwrap_or_default()))
        .collect()
}

/// In the order of `WEEKDAYS`.
const DAYS: [Weekday; 7] = [
    Weekday::Monday,
    Weekday::Tuesday,
    Weekday::Wednesday,
    Weekday::Thursday,
    Weekday::Friday,
    Weekday::Saturday,
    Weekday::Sunday,
];

fn weekday_name(d: Weekday) -> &'static str {
    WEEKDAYS[d as usize]
}

fn row_of(key: &str, p: BudgetPolicy) -> BudgetFormRow {
    let mut r = BudgetFormRow {
        key: key.to_string(),
        starts_on: "monday".into(),
        ..Default::default()
    };
    match p.period {
        Period::None => r.period = "none".into(),
        Period::Weekly {
            starts_on,
            utc_offset_minutes,
        } => {
            r.period = "weekly".into();
            r.starts_on = weekday_name(starts_on).into();
            r.utc_offset_minutes = utc_offset_minutes.to_string();
        }
        Period::Monthly {
            anchor_day,
            utc_offset_minutes,
        } => {
            r.period = "monthly".into();
            r.anchor_day = anchor_day.to_string();
            r.utc_offset_minutes = utc_offset_minutes.to_string();
        }
        Period::Term { start_ms, end_ms } => {
            r.period = "term".into();
            r.term_start = quota::time::format_rfc3339(start_ms);
            r.term_end = quota::time::format_rfc3339(end_ms);
        }
    }
    match p.without_run_time {
        WithoutRunTime::Admit => r.without_run_time = "admit".into(),
        WithoutRunTime::Refuse => r.without_run_time = "refuse".into(),
        WithoutRunTime::ReserveDefault { horizon_seconds } => {
            r.without_run_time = "reserveDefault".into();
            r.horizon = quota::workload::runtime::format_duration(horizon_seconds * 1000);
        }
    }
    r.reservation_cap = p.reservation_cap.map(|c| c.to_string()).unwrap_or_default();
    match p.carry {
        Carry::None => r.carry = "none".into(),
        Carry::All => r.carry = "all".into(),
        Carry::Percent { percent } => {
            r.carry = "percent".into();
            r.carry_value = percent.to_string();
        }
        Carry::Amount { amount } => {
            r.carry = "amount".into();
            r.carry_value = amount.to_string();
        }
    }
    r
}

/// Reads the budget rows of a submitted form: the rows to show again, and
/// the policies for the cash keys of `hard` (each starting from its
/// current policy in `current`, so fields the form does not show stay),
/// or what is wrong, naming the key. A key whose period and carry are
/// `none` with nothing else set has no policy (as before budgets).
pub fn read(
    fields: &[(String, String)],
    current: &QuotaSpec,
    hard: &quota::ResourceList,
) -> (
    Vec<BudgetFormRow>,
    Result<BTreeMap<String, BudgetPolicy>, String>,
) {
    let mut rows: BTreeMap<String, BudgetFormRow> = BTreeMap::new();
    let mut too_long = None;
    for (k, v) in fields {
        let Some(rest) = k.strip_prefix("budget.") else {
            continue;
        };
        let Some((field, key)) = rest.split_once(':') else {
            continue;
        };
        // Only the cash keys the spec keeps: a dropped key takes its row.
        if !hard.contains_key(key) || cash_target(key).is_none() {
            continue;
        }
        let v = v.trim();
        if v.len() > MAX_FIELD {
            too_long.get_or_insert_with(|| format!("budget {key}: {field} is too long"));
            continue;
        }
        let row = rows
            .entry(key.to_string())
            .or_insert_with(|| BudgetFormRow {
                key: key.to_string(),
                ..Default::default()
            });
        let v = v.to_string();
        match field {
            "period" => row.period = v,
            "anchor" => row.anchor_day = v,
            "startsOn" => row.starts_on = v,
            "offset" => row.utc_offset_minutes = v,
            "termStart" => row.term_start = v,
            "termEnd" => row.term_end = v,
            "carry" => row.carry = v,
            "carryValue" => row.carry_value = v,
            "withoutRunTime" => row.without_run_time = v,
            "horizon" => row.horizon = v,
            "reservationCap" => row.reservation_cap = v,
            _ => {}
        }
    }
    let shown: Vec<BudgetFormRow> = rows.values().cloned().collect();
    if let Some(m) = too_long {
        return (shown, Err(m));
    }
    let mut out = BTreeMap::new();
    for (key, row) in rows {
        let base = current.budgets.get(&key).cloned().unwrap_or_default();
        match policy_of(&row, base) {
            Ok(p) if p == BudgetPolicy::default() => {}
            Ok(p) => {
                out.insert(key, p);
            }
            Err(m) => return (shown, Err(format!("budget {key}: {m}"))),
        }
    }
    // Keys the form did not show keep what they had.
    for (k, p) in &current.budgets {
        if hard.contains_key(k) && !out.contains_key(k) && !shown.iter().any(|r| &r.key == k) {
            out.insert(k.clone(), p.clone());
        }
    }
    (shown, Ok(out))
}

fn number<T: std::str::FromStr>(v: &str, what: &str, default: T) -> Result<T, String> {
    if v.is_empty() {
        return Ok(default);
    }
    v.parse()
        .map_err(|_| format!("{what} '{v}' is not a whole number"))
}

fn policy_of(row: &BudgetFormRow, mut p: BudgetPolicy) -> Result<BudgetPolicy, String> {
    let kind = if row.period.is_empty() {
        "none"
    } else {
        row.period.as_str()
    };
    if !PERIODS.contains(&kind) {
        return Err(format!(
            "period '{kind}' is not one of {}",
            PERIODS.join(", ")
        ));
    }
    let offset = number::<i32>(&row.utc_offset_minutes, "UTC offset", 0)?;
    p.period = match kind {
        "weekly" => {
            let day = if row.starts_on.is_empty() {
                "monday"
            } else {
                row.starts_on.as_str()
            };
            let starts_on = WEEKDAYS
                .iter()
                .position(|d| *d == day)
                .map(|i| DAYS[i])
                .ok_or_else(|| format!("'{day}' is not a day of the week"))?;
            Period::Weekly {
                starts_on,
                utc_offset_minutes: offset,
            }
        }
        "monthly" => Period::Monthly {
            anchor_day: number::<u32>(&row.anchor_day, "anchor day", 1)?,
            utc_offset_minutes: offset,
        },
        "term" => {
            let at = |v: &str, what: &str| {
                parse_rfc3339(v).ok_or_else(|| {
                    format!(
                        "term {what} '{v}' is not an RFC 3339 time such as 2027-01-01T00:00:00Z"
                    )
                })
            };
            Period::Term {
                start_ms: at(&row.term_start, "start")?,
                end_ms: at(&row.term_end, "end")?,
            }
        }
        _ => Period::None,
    };
    let carry = if row.carry.is_empty() {
        "none"
    } else {
        row.carry.as_str()
    };
    p.carry = match carry {
        "none" => Carry::None,
        "all" => Carry::All,
        "percent" => Carry::Percent {
            percent: number::<u32>(&row.carry_value, "carry percent", u32::MAX).and_then(|n| {
                if n == u32::MAX {
                    Err("carry percent is missing".into())
                } else {
                    Ok(n)
                }
            })?,
        },
        "amount" => Carry::Amount {
            amount: row.carry_value.parse::<Quantity>().map_err(|_| {
                format!(
                    "carry amount '{}' is not a quantity (write e.g. 200 or 1.5k)",
                    row.carry_value
                )
            })?,
        },
        o => return Err(format!("carry '{o}' is not one of {}", CARRIES.join(", "))),
    };
    p.without_run_time = match row.without_run_time.as_str() {
        "" | "admit" => WithoutRunTime::Admit,
        "refuse" => WithoutRunTime::Refuse,
        "reserveDefault" => {
            let ms = quota::workload::runtime::parse_duration(&row.horizon)
                .map_err(|e| format!("horizon: {e}"))?;
            // Whole seconds: a horizon of "1500ms" cannot be written.
            WithoutRunTime::ReserveDefault {
                horizon_seconds: ms / 1000,
            }
        }
        o => {
            return Err(format!(
                "'{o}' is not one of {}",
                WITHOUT_RUN_TIME.join(", ")
            ))
        }
    };
    p.reservation_cap = match row.reservation_cap.as_str() {
        "" | "none" => None,
        v => Some(v.parse::<Quantity>().map_err(|_| {
            format!("reservation cap '{v}' is not a quantity (write e.g. 500 or 1.5k)")
        })?),
    };
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "cash/requests.nvidia.com/gpu";

    fn f(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_row_reads_back_as_the_policy_it_shows() {
        let hard: quota::ResourceList = [(KEY.to_string(), Quantity::from_units(10))].into();
        let spec = QuotaSpec {
            hard: hard.clone(),
            ..Default::default()
        };
        let (_, got) = read(
            &f(&[
                (&format!("budget.period:{KEY}"), "monthly"),
                (&format!("budget.anchor:{KEY}"), "31"),
                (&format!("budget.offset:{KEY}"), "480"),
                (&format!("budget.carry:{KEY}"), "amount"),
                (&format!("budget.carryValue:{KEY}"), "200"),
                ("budget.period:cash/requests.cpu", "weekly"),
            ]),
            &spec,
            &hard,
        );
        let got = got.unwrap();
        assert_eq!(got.len(), 1, "a key not in hard is not read");
        let row = row_of(KEY, got[KEY].clone());
        assert_eq!(
            (row.anchor_day.as_str(), row.carry_value.as_str()),
            ("31", "200")
        );
        let (_, none) = read(
            &f(&[
                (&format!("budget.period:{KEY}"), "none"),
                (&format!("budget.carry:{KEY}"), "none"),
            ]),
            &spec,
            &hard,
        );
        assert!(none.unwrap().is_empty());
        for (field, value, says) in [
            ("period", "daily", "period 'daily' is not one of"),
            ("anchor", "x", "anchor day 'x' is not a whole number"),
            ("carry", "half", "carry 'half' is not one of"),
        ] {
            let (_, e) = read(
                &f(&[
                    (&format!("budget.{field}:{KEY}"), value),
                    (
                        &format!("budget.period:{KEY}"),
                        if field == "period" { value } else { "monthly" },
                    ),
                ]),
                &spec,
                &hard,
            );
            let e = e.unwrap_err();
            assert!(e.contains(KEY) && e.contains(says), "{e}");
        }
        // Admission without a run time and the cap read back as shown.
        let (_, got) = read(
            &f(&[
                (&format!("budget.withoutRunTime:{KEY}"), "reserveDefault"),
                (&format!("budget.horizon:{KEY}"), "1d12h"),
                (&format!("budget.reservationCap:{KEY}"), "500"),
            ]),
            &spec,
            &hard,
        );
        let p = got.unwrap()[KEY].clone();
        assert_eq!(
            p.without_run_time,
            WithoutRunTime::ReserveDefault {
                horizon_seconds: 129_600
            }
        );
        assert_eq!(p.reservation_cap, Some(Quantity::from_units(500)));
        let row = row_of(KEY, p);
        assert_eq!(
            (row.horizon.as_str(), row.reservation_cap.as_str()),
            ("1d12h", "500")
        );
        for (field, value, says) in [
            (
                "withoutRunTime",
                "maybe",
                "'maybe' is not one of admit, refuse",
            ),
            (
                "reservationCap",
                "lots",
                "reservation cap 'lots' is not a quantity",
            ),
        ] {
            let (_, e) = read(
                &f(&[(&format!("budget.{field}:{KEY}"), value)]),
                &spec,
                &hard,
            );
            let e = e.unwrap_err();
            assert!(e.contains(KEY) && e.contains(says), "{e}");
        }
        let (_, e) = read(
            &f(&[
                (&format!("budget.withoutRunTime:{KEY}"), "reserveDefault"),
                (&format!("budget.horizon:{KEY}"), "1.5h"),
            ]),
            &spec,
            &hard,
        );
        assert!(e.unwrap_err().contains("fractions"));
        let long = "9".repeat(100);
        let (_, e) = read(
            &f(&[(&format!("budget.anchor:{KEY}"), &long)]),
            &spec,
            &hard,
        );
        assert!(e.unwrap_err().contains("too long"));
    }
}
