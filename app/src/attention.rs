//! What needs someone, for the overview's first section: quotas over
//! quota, budgets spent or running out (with the date), workloads marked
//! for reclaim — on every quota the viewer may see, so an owner sees the
//! children at risk under it. Pure: the quotas the viewer may see and
//! their subtree usage in, the items out, worst first.

use crate::tree::cash_cells;
use quota::forecast::Pricing;
use quota::{KeyConfig, Quota, ResourceList};

/// A budget that lasts less than this at what runs now is worth a line.
pub const RUNWAY_WARN_HOURS: i128 = 14 * 24;
/// Items the overview lists; the rest are counted.
pub const MAX_ITEMS: usize = 8;

/// One line of "needs attention".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    /// "critical" or "warning".
    pub level: &'static str,
    pub quota: String,
    pub text: String,
    pub href: String,
}

/// Items for `quotas` (what the viewer may see), worst first: over quota
/// and spent budgets (critical), then budgets by how soon they run out,
/// then reclaims by how soon they are due.
pub fn items<Q, U>(quotas: &[Q], in_use: &U, cfg: &KeyConfig, pricing: &Pricing) -> Vec<Item>
where
    Q: std::borrow::Borrow<Quota>,
    U: quota::rollup::SubtreeUse + ?Sized,
{
    let empty = ResourceList::new();
    // (rank, then a time or amount for order within the rank, item)
    let mut found: Vec<(u8, i128, Item)> = Vec::new();
    for q in quotas {
        let q = q.borrow();
        let name = q.name();
        let in_use = in_use.of(name).unwrap_or(&empty);
        let link = format!("/quotas/{name}");
        // Only what is said is formatted: this runs over every quota the
        // viewer may see (`most_over`, not the row's every key).
        if let Some(k) = crate::most_over(q, in_use, cfg) {
            // Beyond its max too where it may borrow (`most_over`).
            let max = q
                .spec
                .max
                .get(&k.key)
                .map(|m| format!(", max {}", crate::display_quantity(&k.key, *m, cfg)))
                .unwrap_or_default();
            found.push((
                0,
                -(k.percent as i128),
                Item {
                    level: "critical",
                    quota: name.into(),
                    text: format!(
                        "{name} is over quota: {} {} in use of {}{max}",
                        k.name, k.used, k.hard
                    ),
                    href: link.clone(),
                },
            ));
        }
        let budgets = cash_cells(q, in_use, cfg, pricing);
        for c in &budgets {
            // "budget" alone when the quota has one; its name when more.
            let which = if budgets.len() > 1 {
                format!("{} budget", c.label)
            } else {
                "budget".to_string()
            };
            if c.left_nanos <= 0 {
                // "GPU card-hours" → new GPU work; "A100 card-hours" → A100.
                let work = c.label.split(' ').next().unwrap_or("its");
                found.push((
                    0,
                    0,
                    Item {
                        level: "critical",
                        quota: name.into(),
                        text: format!(
                            "{name}'s budget {} is spent: new {work} work is refused",
                            c.label
                        ),
                        href: link.clone(),
                    },
                ));
            } else if let Some(h) = c.runway_hours.filter(|h| *h < RUNWAY_WARN_HOURS) {
                found.push((
                    1,
                    h,
                    Item {
                        level: "warning",
                        quota: name.into(),
                        text: format!(
                            "{name}'s {which} {} at what runs now: {} left",
                            c.outlook.words(),
                            c.left
                        ),
                        href: link.clone(),
                    },
                ));
            }
        }
        let marks = &q.status.reclaim;
        if !marks.is_empty() {
            let first_due = marks
                .values()
                .filter_map(|m| quota::time::parse_rfc3339(&m.due))
                .min();
            let due = first_due
                .map(|d| format!("; the first is due {}", quota::time::format_when(d)))
                .unwrap_or_default();
            let n = marks.len();
            let what = if n == 1 {
                "workload is"
            } else {
                "workloads are"
            };
            found.push((
                2,
                first_due.unwrap_or(i64::MAX) as i128,
                Item {
                    level: "warning",
                    quota: name.into(),
                    text: format!("{n} {what} marked for reclaim in {name}{due}"),
                    href: link,
                },
            ));
        }
    }
    found.sort_by(|a, b| (a.0, a.1, &a.2.quota).cmp(&(b.0, b.1, &b.2.quota)));
    found.into_iter().map(|(_, _, i)| i).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use quota::{Quantity, QuotaSpec};

    fn q(name: &str, parent: &str, gpus: i64, budget: i64, used: i64, spent: i64) -> Quota {
        let g = "requests.nvidia.com/gpu".to_string();
        let c = "cash/requests.nvidia.com/gpu".to_string();
        let mut q = Quota::new(
            name,
            QuotaSpec {
                budgets: Default::default(),
                parent: parent.into(),
                hard: [
                    (g.clone(), Quantity::from_units(gpus)),
                    (c.clone(), Quantity::from_units(budget)),
                ]
                .into(),
                max: Default::default(),
                queueing: Default::default(),
                fair_sharing: Default::default(),
                idle: None,
            },
        );
        q.status.self_used = [(g.clone(), Quantity::from_units(used))].into();
        // What it runs itself, as charged: the burn its budget pays.
        q.status.workloads.insert(
            "apps/Deployment/ns/w".into(),
            quota::object::Charge {
                pod_sets: vec![quota::workload::PodSet {
                    name: "main".into(),
                    count: 1,
                    per_pod: [(g.clone(), Quantity::from_units(used))].into(),
                    qos: None,
                }],
                hpa: None,
                since: String::new(),
                uid: String::new(),
                admitted: None,
            },
        );
        // Spent as accrual records it (`cashAccrued`, per mille of acc).
        q.status.add_accrued(
            &c,
            quota::budget::from_quantity(Quantity::from_units(spent))
                / (quota::budget::PRICE_ONE / quota::cash::PER_MILLE),
        );
        q.status.used = [
            (g, Quantity::from_units(used)),
            (c, Quantity::from_units(spent)),
        ]
        .into();
        q
    }

    #[test]
    fn the_worst_comes_first_with_dates() {
        let quotas = vec![
            q("ai", "", 100, 100_000, 0, 0),
            // 240 card-hours left at 10 cards: 24 h.
            q("nlp", "ai", 10, 1000, 10, 760),
            // Over quota: 12 of 8.
            q("cv", "ai", 8, 100_000, 12, 0),
            // Spent.
            q("rl", "ai", 4, 100, 0, 100),
            // Lasts 100 days: nothing to say.
            q("speech", "ai", 4, 10_000, 4, 400),
        ];
        let in_use = quota::rollup::subtree_in_use(&quotas);
        let got = items(&quotas, &in_use, &KeyConfig::default(), &Pricing::default());
        let texts: Vec<&str> = got.iter().map(|i| i.text.as_str()).collect();
        assert_eq!(
            texts,
            [
                "cv is over quota: GPUs 12 in use of 8",
                "rl's budget GPU card-hours is spent: new GPU work is refused",
                "nlp's budget runs out in 1 day (1970-01-02) at what runs now: 240 card-hours left",
            ]
        );
        assert_eq!(got[0].level, "critical");
        assert_eq!(got[2].href, "/quotas/nlp");
    }

    /// On a forest where many teams borrow within their max, "needs
    /// attention" lists none of them as over quota (they may borrow), so
    /// the budgets that run out still show; a team beyond its max is
    /// listed.
    #[test]
    fn borrowing_within_max_is_not_over_quota() {
        let gpu = "requests.nvidia.com/gpu";
        let mut quotas = vec![q("ai", "", 1_000, 1_000_000, 0, 0)];
        for i in 0..40 {
            // 12 of 8 running, max 16: borrowing, allowed.
            let mut t = q(&format!("team-{i:02}"), "ai", 8, 1_000_000, 12, 0);
            t.spec.max.insert(gpu.into(), Quantity::from_units(16));
            quotas.push(t);
        }
        // 240 card-hours left at 10 cards: 24 h.
        quotas.push(q("nlp", "ai", 10, 1000, 10, 760));
        // 20 of 8 with a max of 16: beyond what it may borrow.
        let mut cv = q("cv", "ai", 8, 1_000_000, 20, 0);
        cv.spec.max.insert(gpu.into(), Quantity::from_units(16));
        quotas.push(cv);
        let in_use = quota::rollup::subtree_in_use(&quotas);
        let got = items(&quotas, &in_use, &KeyConfig::default(), &Pricing::default());
        let texts: Vec<&str> = got.iter().map(|i| i.text.as_str()).collect();
        assert_eq!(
            texts,
            [
                "cv is over quota: GPUs 20 in use of 8, max 16",
                "nlp's budget runs out in 1 day (1970-01-02) at what runs now: 240 card-hours left",
            ]
        );
    }

    #[test]
    fn the_quick_readings_equal_the_full_rows() {
        let mut wide = q("wide", "", 8, 100, 12, 0);
        // Two keys over by as much, and one over by more.
        for (k, hard, used) in [
            ("requests.cpu", 10, 15),
            ("limits.cpu", 10, 15),
            ("requests.memory", 4, 9),
        ] {
            wide.spec.hard.insert(k.into(), Quantity::from_units(hard));
            wide.status
                .self_used
                .insert(k.into(), Quantity::from_units(used));
            wide.status
                .used
                .insert(k.into(), Quantity::from_units(used));
        }
        let quotas = vec![
            q("ai", "", 100, 100_000, 0, 0),
            q("cv", "ai", 8, 100_000, 12, 0),
            q("rl", "ai", 4, 100, 0, 100),
            wide,
        ];
        let in_use = quota::rollup::subtree_in_use(&quotas);
        let cfg = KeyConfig::default();
        for q in &quotas {
            let u = in_use.get(q.name()).cloned().unwrap_or_default();
            let full = crate::key_usages(q, &u, &cfg)
                .into_iter()
                .filter(|k| !k.cash && k.percent > 100)
                .filter(|k| crate::beyond_max(q, &k.key, quota::Quantity::from_nanos(k.used_nanos)))
                .max_by_key(|k| k.percent)
                .map(|k| (k.key, k.used, k.hard, k.percent));
            let fast = crate::most_over(q, &u, &cfg).map(|k| (k.key, k.used, k.hard, k.percent));
            assert_eq!(fast, full, "{}", q.name());
            let max = crate::key_usages(q, &u, &cfg)
                .iter()
                .map(|k| k.percent)
                .max()
                .unwrap_or(0);
            let rolled = quota::rollup::rollup(q, &u);
            assert_eq!(crate::max_percent(q, &rolled, &u), max, "{}", q.name());
        }
    }
}
