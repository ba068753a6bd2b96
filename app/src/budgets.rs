//! Budgets on the quota page (a panel: per cash key what is left of this
//! period, its carry-in, when it renews and its runway, with the last
//! closed periods, and its open reservations) and on the edit form (each
//! cash key's period, carry-over, what admission does without a declared
//! run time and the reservation cap). The server computes the numbers and
//! reads the form back; these only render.

#[cfg(feature = "ssr")]
use leptos::prelude::*;

/// One closed period, rounded for reading.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClosedRow {
    /// `2026-11-01 00:00 UTC – 2026-12-01 00:00 UTC`.
    pub period: String,
    pub budget: String,
    pub carry_in: String,
    pub spent: String,
    pub carried: String,
    pub expired: String,
}

/// One cash key's budget on the quota page.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BudgetLine {
    pub key: String,
    /// The key as people read it ("GPU card-hours"); empty: the key.
    pub name: String,
    /// `1,234 card-hours left of 5,000 this month (carry-in 200) · renews
    /// 2026-12-01 00:00 UTC · runs out in 8.8 days`.
    pub line: String,
    /// `2 open reservations hold 24 card-hours (cap 50)`; None without any
    /// open reservation or cap.
    pub reservations: Option<String>,
    /// Newest first.
    pub closed: Vec<ClosedRow>,
    /// Where to ask for more budget (the transfer form, as a top-up).
    pub ask: Option<String>,
    /// This key's report (`/reports?subtree=…&key=…`): spending by model
    /// per day.
    pub report_href: String,
    /// While the price list bills by quality of service: how, in words,
    /// and the report by quality class.
    pub billing: Option<(String, String)>,
}

/// One cash key's period and carry-over on the edit form, as shown or as
/// submitted. Field names: `budget.<field>:<cash key>`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BudgetFormRow {
    pub key: String,
    /// `none`, `weekly`, `monthly` or `term`.
    pub period: String,
    pub anchor_day: String,
    pub starts_on: String,
    pub utc_offset_minutes: String,
    pub term_start: String,
    pub term_end: String,
    /// `none`, `all`, `percent` or `amount`.
    pub carry: String,
    /// The percent or the amount.
    pub carry_value: String,
    /// `admit`, `refuse` or `reserveDefault` (`WITHOUT_RUN_TIME`).
    pub without_run_time: String,
    /// reserveDefault's horizon: `4h`, `1d12h` or seconds.
    pub horizon: String,
    /// The reservation cap in resource-hours (empty: none).
    pub reservation_cap: String,
}

pub const PERIODS: [&str; 4] = ["none", "weekly", "monthly", "term"];
pub const CARRIES: [&str; 4] = ["none", "all", "percent", "amount"];
pub const WITHOUT_RUN_TIME: [&str; 3] = ["admit", "refuse", "reserveDefault"];
pub const WEEKDAYS: [&str; 7] = [
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
];

/// The Budgets panel (nothing when the quota has no cash key).
#[cfg(feature = "ssr")]
pub fn panel(lines: Vec<BudgetLine>) -> impl IntoView {
    (!lines.is_empty()).then(|| {
        let rows = lines
            .into_iter()
            .map(|b| {
                let closed = (!b.closed.is_empty()).then(|| {
                    view! {
                        <table class="budget-periods">
                            <thead><tr><th>"Closed period"</th><th>"Budget"</th><th>"Carry-in"</th><th>"Spent"</th><th>"Carried"</th><th>"Expired"</th></tr></thead>
                            <tbody>{b.closed.into_iter().map(|c| view! {
                                <tr>
                                    <td>{c.period}</td>
                                    <td class="num">{c.budget}</td>
                                    <td class="num">{c.carry_in}</td>
                                    <td class="num">{c.spent}</td>
                                    <td class="num">{c.carried}</td>
                                    <td class="num">{c.expired}</td>
                                </tr>
                            }).collect_view()}</tbody>
                        </table>
                    }
                });
                let name = if b.name.is_empty() { b.key.clone() } else { b.name };
                view! {
                    <div class="card budget">
                        <h4 class="key" title=b.key>{name}</h4>
                        <p class="budget-line">{b.line}</p>
                        {b.reservations.map(|r| view! { <p class="budget-reservations">{r}</p> })}
                        {b.ask.map(|href| view! { <p class="budget-ask"><a href=href>"Ask for more budget"</a></p> })}
                        <p class="hint"><a href=b.report_href>"Report"</a>" — spending by day, model, user and child, from the ledger."</p>
                        {b.billing.map(|(line, href)| view! { <p class="budget-billing">{line}" "<a href=href>"By quality class"</a></p> })}
                        {closed}
                    </div>
                }
            })
            .collect_view();
        view! {
            <h3 id="budgets">"Budgets"</h3>
            <div class="budgets">{rows}</div>
            <p class="hint"><a href="/prices">"Prices per model"</a>" — what a card-hour of each model costs, and when prices change."</p>
        }
    })
}

#[cfg(feature = "ssr")]
fn select(
    name: String,
    options: &'static [&'static str],
    chosen: String,
    label: &'static str,
) -> impl IntoView {
    view! {
        <select name=name aria-label=label>
            {options.iter().map(|o| {
                let selected = *o == chosen;
                view! { <option value=*o selected=selected>{*o}</option> }
            }).collect_view()}
        </select>
    }
}

/// The budget rows of the edit form (nothing without cash keys).
#[cfg(feature = "ssr")]
pub fn form_rows(rows: Vec<BudgetFormRow>) -> impl IntoView {
    (!rows.is_empty()).then(|| {
        let body = rows
            .into_iter()
            .map(|r| {
                let n = |f: &str| format!("budget.{f}:{}", r.key);
                view! {
                    <tr>
                        <td class="key">{r.key.clone()}</td>
                        <td>{select(n("period"), &PERIODS, r.period.clone(), "period")}</td>
                        <td>
                            <input name=n("anchor") value=r.anchor_day.clone() inputmode="numeric" size="3" maxlength="2" placeholder="1" aria-label="monthly: anchor day"/>
                            {select(n("startsOn"), &WEEKDAYS, r.starts_on.clone(), "weekly: starts on")}
                            <input name=n("offset") value=r.utc_offset_minutes.clone() inputmode="numeric" size="4" maxlength="5" placeholder="0" aria-label="UTC offset, minutes"/>
                        </td>
                        <td>
                            <input name=n("termStart") value=r.term_start.clone() size="20" maxlength="40" placeholder="2027-01-01T00:00:00Z" aria-label="term start"/>
                            <input name=n("termEnd") value=r.term_end.clone() size="20" maxlength="40" placeholder="2027-07-01T00:00:00Z" aria-label="term end"/>
                        </td>
                        <td>
                            {select(n("carry"), &CARRIES, r.carry.clone(), "carry-over")}
                            <input name=n("carryValue") value=r.carry_value.clone() size="6" maxlength="32" placeholder="% or amount" aria-label="carry percent or amount"/>
                        </td>
                        <td>
                            {select(n("withoutRunTime"), &WITHOUT_RUN_TIME, r.without_run_time.clone(), "without a declared run time")}
                            <input name=n("horizon") value=r.horizon.clone() size="6" maxlength="16" placeholder="4h" aria-label="reserveDefault: horizon"/>
                        </td>
                        <td>
                            <input name=n("reservationCap") value=r.reservation_cap.clone() size="8" maxlength="32" placeholder="none" aria-label="reservation cap, resource-hours"/>
                        </td>
                    </tr>
                }
            })
            .collect_view();
        view! {
            <h4>"Budget periods"</h4>
            <table class="budget-form">
                <thead><tr><th>"Cash key"</th><th>"Period"</th><th>"Monthly anchor day · weekly start · UTC offset (min)"</th><th>"Term start · end"</th><th>"Carry-over"</th><th>"Without a run time · horizon"</th><th>"Reservation cap"</th></tr></thead>
                <tbody>{body}</tbody>
            </table>
            <p class="hint">"A period starts the budget again at each boundary (monthly on the anchor day, 31 = the last day; weekly on the day chosen; a term from its start to its end); carry-over keeps what was left, all of it, up to a percent of the budget, or up to an amount. A workload that declares its run time (a Job's activeDeadlineSeconds, a Kubeflow job's runPolicy.activeDeadlineSeconds, or the annotation biz.group.resource.quota/max-runtime) reserves cards × run time at admission; one that declares none is admitted while anything is left (admit), refused (refuse), or reserved for the horizon (reserveDefault, e.g. 4h). The cap bounds what all open reservations hold at once, in resource-hours. Changes are audited."</p>
        }
    })
}
