//! Allocated against used, as people read it (docs/real-usage.md): a
//! quota's whole subtree over a range — its figures in all, by workload,
//! by submitter and by child, hour by hour for its chart — the workloads
//! idle now, and whether real usage is known. The definitions are
//! `quota::real_usage::figures` and `::idle`; the sums are the store's
//! (`store::real_usage`). The quota page, the overview, the JSON API and
//! the CSV read it from here, so they show one figure.

use crate::store::real_usage::{By, Group};
use crate::store::sql::SqlStore;
use crate::store::StoreError;
use app::efficiency::Bucket;
use quota::object::idle::IdlePolicy;
use quota::real_usage::figures::{card_hours, percent, Figures, GpuFigures};
use quota::real_usage::idle::{shown, IdleNow};
use quota::real_usage::reading::HOUR_MS;
use quota::real_usage::readings::Readings;
use quota::series::Range;
use quota::Quota;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};

/// Real usage read longer ago than this is unknown, whatever the last
/// reading said (a leader that stopped reading, a Prometheus URL removed).
pub const STALE_MS: i64 = 15 * 60_000;

/// Rows of workloads and submitters a page lists at most (the API and
/// the CSV give them all).
pub const ROWS_SHOWN: usize = 20;

/// One quota subtree's figures over a range.
#[derive(Clone, Debug, Default)]
pub struct Efficiency {
    pub quota: String,
    pub range: Range,
    pub from_ms: i64,
    pub to_ms: i64,
    pub readings: Readings,
    /// Since when real usage is unknown, when it is.
    pub unknown_since: Option<i64>,
    pub total: Figures,
    /// Most idle card-time first, then most allocated.
    pub workloads: Vec<Group>,
    pub submitters: Vec<Group>,
    /// Each child's subtree (its own workloads as `(self)`).
    pub children: Vec<(String, Figures)>,
    /// The chart's buckets (`Range::bucket_ms`, at least an hour) and its
    /// values table's (`Range::table_bucket_ms`).
    pub chart: Vec<Bucket>,
    pub table: Vec<Bucket>,
    /// Idle for their quota's `showAfter` or longer, longest first.
    pub idle_now: Vec<(IdleNow, IdlePolicy)>,
}

impl Efficiency {
    /// The chart of cards allocated against busy, as a panel of the
    /// quota page's chart grid (and the samples API's `chart=efficiency`),
    /// under the first GPU resource bizrq counts; None where real usage
    /// was never read.
    pub fn panel(&self, cfg: &quota::KeyConfig) -> Option<app::chart_section::Panel> {
        if self.is_empty() {
            return None;
        }
        let resource = cfg
            .gpu_resources
            .first()
            .map_or("nvidia.com/gpu", String::as_str);
        Some(app::efficiency::panel(
            &format!("requests.{resource}"),
            self.range,
            &self.chart,
            &self.table,
            &self.total.gpu,
            cfg,
        ))
    }

    /// Whether there is anything to show: figures, or readings at all.
    pub fn is_empty(&self) -> bool {
        self.total.gpu.is_empty()
            && self.idle_now.is_empty()
            && self.readings.known_to_ms.is_none()
            && self.readings.down_since_ms.is_none()
    }
}

/// The quotas of `name`'s subtree among `quotas` (it included).
pub fn subtree<'a>(quotas: &'a [Quota], name: &str) -> Vec<&'a Quota> {
    let forest = quota::lineage::Forest::from_quotas(quotas.iter());
    quotas
        .iter()
        .filter(|q| q.name() == name || forest.line(q.name()).names.contains(&name))
        .collect()
}

/// Sorts a grouping as pages list it: most idle, then most allocated.
fn by_waste(groups: &mut [Group]) {
    groups.sort_by(|a, b| {
        (b.figures.gpu.idle, b.figures.gpu.allocated, &a.key).cmp(&(
            a.figures.gpu.idle,
            a.figures.gpu.allocated,
            &b.key,
        ))
    });
}

/// `name`'s subtree (its quotas among `quotas`, which must hold the
/// subtree whole and any ancestors whose idle policy it inherits) over
/// `range` up to `now_ms`.
pub async fn gather(
    sql: &SqlStore,
    quotas: &[Quota],
    name: &str,
    range: Range,
    now_ms: i64,
) -> Result<Efficiency, StoreError> {
    let tree = subtree(quotas, name);
    let names: Vec<String> = tree.iter().map(|q| q.name().to_string()).collect();
    let from_ms = (now_ms - range.span_ms()).div_euclid(HOUR_MS) * HOUR_MS;
    let to_ms = now_ms;
    let readings = sql.real_usage_state().await?;
    let mut workloads = sql
        .real_usage_by(By::Workload, &names, from_ms, to_ms)
        .await?;
    by_waste(&mut workloads);
    let mut submitters = sql.real_usage_by(By::User, &names, from_ms, to_ms).await?;
    by_waste(&mut submitters);
    let per_quota = sql.real_usage_by(By::Quota, &names, from_ms, to_ms).await?;
    let mut total = Figures::default();
    for g in &per_quota {
        total.add(&g.figures);
    }
    // Each quota's figures to the child of `name` it lies under.
    let forest = quota::lineage::Forest::from_quotas(quotas.iter());
    let mut children: BTreeMap<String, Figures> = BTreeMap::new();
    for g in &per_quota {
        let line = forest.line(&g.key).names;
        let child = match line.iter().position(|n| *n == name) {
            Some(0) | None => "(self)".to_string(),
            Some(i) => line[i - 1].to_string(),
        };
        children.entry(child).or_default().add(&g.figures);
    }
    let hourly = sql.real_usage_by(By::Hour, &names, from_ms, to_ms).await?;
    let chart = buckets(&hourly, range.bucket_ms(), readings.known_to_ms);
    let table = buckets(&hourly, range.table_bucket_ms(), readings.known_to_ms);
    let by_name: HashMap<&str, &Quota> = quotas.iter().map(|q| (q.name(), q)).collect();
    let mut idle_now = shown(sql.idle_now(Some(&names)).await?, |n| {
        by_name.get(n).copied()
    });
    idle_now.sort_by_key(|(i, _)| (i.streak.since_ms, i.workload.clone()));
    Ok(Efficiency {
        quota: name.to_string(),
        range,
        from_ms,
        to_ms,
        unknown_since: readings.unknown_since(now_ms, STALE_MS),
        readings,
        total,
        workloads,
        submitters,
        children: children.into_iter().collect(),
        chart,
        table,
        idle_now,
    })
}

/// The workloads idle now on `quotas` (what a viewer may see), longest
/// idle first, with their policies: the overview's "idle now" and the
/// API's. Ancestors the viewer does not see are read for the policies
/// they pass down (`with_ancestors`), so everyone reads one policy.
pub async fn idle_now(
    sql: &SqlStore,
    service: &crate::service::Service,
    quotas: &[&Quota],
) -> Result<Vec<(IdleNow, IdlePolicy)>, crate::service::ServiceError> {
    let names: Vec<String> = quotas.iter().map(|q| q.name().to_string()).collect();
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let idle = sql.idle_now(Some(&names)).await?;
    if idle.is_empty() {
        return Ok(Vec::new());
    }
    let above = ancestors_missing(service, quotas.iter().copied()).await?;
    let by_name: HashMap<&str, &Quota> = quotas
        .iter()
        .copied()
        .chain(above.iter())
        .map(|q| (q.name(), q))
        .collect();
    let mut out = shown(idle, |n| by_name.get(n).copied());
    out.sort_by_key(|(i, _)| (i.streak.since_ms, i.workload.clone()));
    Ok(out)
}

/// The ancestors of `quotas` that are not among them, read through the
/// service (a member's pages hold only their subtrees): what an idle
/// policy is inherited from.
pub async fn ancestors_missing<'a>(
    service: &crate::service::Service,
    quotas: impl Iterator<Item = &'a Quota> + Clone,
) -> Result<Vec<Quota>, crate::service::ServiceError> {
    let known: std::collections::BTreeSet<&str> = quotas.clone().map(|q| q.name()).collect();
    let mut wanted: Vec<String> = quotas
        .map(|q| q.spec.parent.clone())
        .filter(|p| !p.is_empty() && !known.contains(p.as_str()))
        .collect();
    wanted.sort();
    wanted.dedup();
    let mut out: Vec<Quota> = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    while let Some(name) = wanted.pop() {
        if !seen.insert(name.clone()) || seen.len() > 256 {
            continue;
        }
        match service.get_for_view(&name).await {
            Ok(s) => {
                let parent = s.quota.spec.parent.clone();
                if !parent.is_empty() && !known.contains(parent.as_str()) {
                    wanted.push(parent);
                }
                out.push(s.quota);
            }
            Err(crate::service::ServiceError::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// Hourly sums folded into buckets of `width` (at least an hour), each
/// covering its width, the last one only up to what was read: the
/// chart's cards on average, the values table's card-hours.
pub fn buckets(hourly: &[Group], width: i64, known_to: Option<i64>) -> Vec<Bucket> {
    let width = width.max(HOUR_MS);
    let mut sums: BTreeMap<i64, GpuFigures> = BTreeMap::new();
    for g in hourly {
        let Ok(hour) = g.key.parse::<i64>() else {
            continue;
        };
        sums.entry(hour.div_euclid(width) * width)
            .or_default()
            .add(&g.figures.gpu);
    }
    sums.into_iter()
        .filter(|(_, f)| f.allocated > 0)
        .map(|(at, gpu)| Bucket {
            at_ms: at,
            span_ms: match known_to {
                Some(k) if k > at && k < at + width => k - at,
                _ => width,
            },
            gpu,
        })
        .collect()
}

/// One grouping's figures as JSON: card-hours exactly, efficiency per
/// mille (null when nothing was measured).
pub fn figures_json(f: &Figures) -> Value {
    let g = &f.gpu;
    json!({
        "gpuHoursAllocated": quota::readable::exact(card_hours(g.allocated)),
        "gpuHoursMeasured": quota::readable::exact(card_hours(g.measured)),
        "gpuHoursBusy": quota::readable::exact(card_hours(g.busy)),
        "idleCardHours": quota::readable::exact(card_hours(g.idle)),
        "efficiencyPermille": g.efficiency_permille(),
        "efficiency": g.efficiency_permille().map(percent),
        "cpuCoreHoursRequested": quota::readable::exact(card_hours(f.cpu.requested)),
        "cpuCoreHoursUsed": quota::readable::exact(card_hours(f.cpu.used)),
        "memoryGibHoursRequested": gib_hours(f.memory.requested),
        "memoryGibHoursUsed": gib_hours(f.memory.used),
    })
}

/// MiB-seconds as GiB-hours, exactly to the nano-unit (rounded down).
fn gib_hours(mib_s: i64) -> String {
    quota::readable::exact(quota::Quantity::from_nanos(
        mib_s as i128 * quota::quantity::NANO / (1024 * 3600),
    ))
}

/// An idle workload as JSON.
pub fn idle_json(i: &IdleNow, p: &IdlePolicy) -> Value {
    json!({
        "workload": i.workload,
        "quota": i.quota,
        "namespace": i.namespace,
        "submitter": i.user,
        "model": i.model,
        "cards": quota::readable::exact(i.streak.cards()),
        "idleSince": quota::time::format_rfc3339(i.streak.since_ms),
        "idleSeconds": i.streak.idle_ms() / 1000,
        "idleCardHours": quota::readable::exact(card_hours(i.streak.idle)),
        "busiestPercent": percent(i.streak.peak_permille),
        "words": i.words(),
        "told": i.streak.idle_ms() >= p.after_ms(),
        "action": match p.action {
            quota::object::idle::IdleAction::Notify => "Notify",
            quota::object::idle::IdleAction::Suspend => "Suspend",
        },
    })
}

impl Efficiency {
    /// The JSON API's answer (`GET /api/v1/quotas/{name}/efficiency`).
    pub fn to_json(&self) -> Value {
        let group = |g: &Group| {
            let mut v = figures_json(&g.figures);
            v["name"] = json!(g.key);
            if !g.quota.is_empty() && g.quota != g.key {
                v["quota"] = json!(g.quota);
            }
            if !g.username.is_empty() && g.username != g.key {
                v["submitter"] = json!(g.username);
            }
            v
        };
        json!({
            "quota": self.quota,
            "range": self.range.as_str(),
            "from": quota::time::format_rfc3339(self.from_ms),
            "to": quota::time::format_rfc3339(self.to_ms),
            "knownTo": self.readings.known_to_ms.map(quota::time::format_rfc3339),
            "unknownSince": self.unknown_since.map(quota::time::format_rfc3339),
            "error": self.readings.error,
            "total": figures_json(&self.total),
            "byWorkload": self.workloads.iter().map(group).collect::<Vec<_>>(),
            "bySubmitter": self.submitters.iter().map(group).collect::<Vec<_>>(),
            "byChild": self.children.iter().map(|(c, f)| {
                let mut v = figures_json(f);
                v["name"] = json!(c);
                v
            }).collect::<Vec<_>>(),
            "idleNow": self.idle_now.iter().map(|(i, p)| idle_json(i, p)).collect::<Vec<_>>(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hour(at: i64, allocated: i64, busy: i64) -> Group {
        Group {
            key: at.to_string(),
            figures: Figures {
                gpu: GpuFigures {
                    allocated,
                    measured: allocated,
                    busy,
                    idle: 0,
                },
                ..Figures::default()
            },
            ..Group::default()
        }
    }

    #[test]
    fn the_chart_reads_cards_on_average_and_the_last_hour_over_what_was_read() {
        let t = 1_795_255_200_000;
        let rows = [
            hour(t, 8 * HOUR_MS, 2 * HOUR_MS),
            hour(t + HOUR_MS, 4 * HOUR_MS / 2, HOUR_MS / 2),
        ];
        let known = Some(t + HOUR_MS + HOUR_MS / 2);
        let p = buckets(&rows, Range::Week.bucket_ms(), known);
        let spans: Vec<(i64, i64)> = p.iter().map(|b| (b.at_ms, b.span_ms)).collect();
        assert_eq!(spans, [(t, HOUR_MS), (t + HOUR_MS, HOUR_MS / 2)]);
        let avg = |b: &Bucket| {
            let s = b.span_ms as f64;
            (b.gpu.allocated as f64 / s, b.gpu.busy as f64 / s)
        };
        assert_eq!(avg(&p[0]), (8.0, 2.0));
        assert_eq!(avg(&p[1]), (4.0, 1.0));
        // A quarter folds three hours into one point; a week's table six.
        assert_eq!(buckets(&rows, Range::Quarter.bucket_ms(), None).len(), 1);
        let six = buckets(&rows, Range::Week.table_bucket_ms(), known);
        assert_eq!(six.len(), 1);
        assert_eq!(six[0].gpu.allocated, 10 * HOUR_MS);
    }

    #[test]
    fn a_subtree_is_the_quota_and_everything_under_it() {
        let mk = |n: &str, p: &str| {
            let mut q = Quota::new(n, Default::default());
            q.spec.parent = p.into();
            q
        };
        let all = [
            mk("acme", ""),
            mk("research", "acme"),
            mk("nlp", "research"),
            mk("ops", "acme"),
        ];
        let names: Vec<&str> = subtree(&all, "research").iter().map(|q| q.name()).collect();
        assert_eq!(names, ["research", "nlp"]);
    }
}
