//! Allocated against used on the pages: `crate::efficiency`'s figures in
//! the words and rows `app::efficiency` renders (the quota page's section,
//! the overview's "idle now").

use crate::efficiency::{Efficiency, ROWS_SHOWN};
use crate::store::real_usage::Group;
use app::efficiency::{FigureRow, IdleRow, Section};
use quota::budget::runway::span;
use quota::object::idle::{IdleAction, IdlePolicy};
use quota::real_usage::figures::{card_hours_words, Figures};
use quota::real_usage::idle::IdleNow;
use quota::real_usage::readings::Readings;

pub fn row(name: &str, detail: String, f: &Figures) -> FigureRow {
    let g = &f.gpu;
    FigureRow {
        name: name.to_string(),
        detail,
        allocated: card_hours_words(g.allocated),
        busy: card_hours_words(g.busy),
        efficiency: g.efficiency_words(),
        efficiency_permille: g.efficiency_permille(),
        idle: card_hours_words(g.idle),
        allocated_ms: g.allocated,
        idle_ms: g.idle,
    }
}

fn workload_row(g: &Group, in_quota: &str) -> FigureRow {
    let name = quota::workload::WorkloadRef::parse(&g.key)
        .map(|r| format!("{} {}/{}", r.kind, r.namespace, r.name))
        .unwrap_or_else(|| g.key.clone());
    let mut detail = Vec::new();
    if g.quota != in_quota {
        detail.push(format!("in {}", g.quota));
    }
    if !g.username.is_empty() {
        detail.push(format!("by {}", g.username));
    }
    row(&name, detail.join(", "), &g.figures)
}

/// "Real usage unknown since …", with why, when it is.
pub fn unknown_words(readings: &Readings, since: Option<i64>) -> Option<String> {
    let since = since?;
    let why = match (&readings.error, readings.down_since_ms) {
        (Some(e), Some(_)) => format!(": {e}"),
        (_, None) => ": no reading since (is the controller reading Prometheus?)".into(),
        _ => String::new(),
    };
    Some(format!(
        "Real usage unknown since {}{why}. Figures stop there; admission and billing (on requests) go on.",
        quota::time::format_when(since)
    ))
}

pub fn idle_row(i: &IdleNow, p: &IdlePolicy) -> IdleRow {
    let told = i.streak.idle_ms() >= p.after_ms();
    let then = match (told, p.action) {
        (true, IdleAction::Notify) => "its submitter and owners are told".to_string(),
        (true, IdleAction::Suspend) => {
            "told; batch work is suspended after the reclaim grace".into()
        }
        (false, IdleAction::Notify) => {
            format!("told once idle for {}", span(p.after_ms()))
        }
        (false, IdleAction::Suspend) => format!(
            "told, and batch work suspended, once idle for {}",
            span(p.after_ms())
        ),
    };
    IdleRow {
        name: i.name().to_string(),
        workload: i.workload.clone(),
        quota: i.quota.clone(),
        submitter: i.user.clone(),
        words: i.words(),
        since: format!("idle since {}", quota::time::format_when(i.streak.since_ms)),
        then,
    }
}

/// The quota page's section; None where real usage was never read.
pub fn section(e: &Efficiency) -> Option<Section> {
    if e.is_empty() {
        return None;
    }
    Some(Section {
        range: e.range.words().to_string(),
        unknown: unknown_words(&e.readings, e.unknown_since),
        total: row("All", String::new(), &e.total),
        workloads: e
            .workloads
            .iter()
            .take(ROWS_SHOWN)
            .map(|g| workload_row(g, &e.quota))
            .collect(),
        workloads_more: e.workloads.len().saturating_sub(ROWS_SHOWN),
        submitters: e
            .submitters
            .iter()
            .take(ROWS_SHOWN)
            .map(|g| {
                let who = if g.key.is_empty() {
                    "(unknown)"
                } else {
                    &g.key
                };
                row(who, String::new(), &g.figures)
            })
            .collect(),
        children: e
            .children
            .iter()
            .map(|(c, f)| row(c, String::new(), f))
            .collect(),
        idle_now: e.idle_now.iter().map(|(i, p)| idle_row(i, p)).collect(),
        api: format!(
            "/api/v1/quotas/{}/efficiency?range={}",
            app::layout::encode_component(&e.quota),
            e.range.as_str()
        ),
    })
}
