//! A quota in one line, what a tenant reads first: each GPU model it limits
//! (free now of hard, and what it could borrow now), then each budget's
//! left and run-out. Which figures the line names is decided here; the
//! figures themselves are read, never recomputed: free and borrowable now
//! from the rows `rollup::with_borrowing` made for the keys table, left and
//! run-out from the budget's one forecast (`forecast::outlook`).

use crate::forecast::Outlook;
use crate::keys::{cash_target, Class, Key, KeyConfig};
use crate::rollup::KeyRollup;
use crate::Quota;

/// One part of the line, in the order shown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Part<'a> {
    /// A GPU key (a model, or the generic GPU key where the quota limits
    /// no model); `borrows`: the quota has a max on it.
    Gpu { row: &'a KeyRollup, borrows: bool },
    /// A budget with a non-zero hard.
    Budget(&'a Outlook),
    /// Neither a GPU key nor a budget: the fullest key, so the line still
    /// says what is short.
    Fullest(&'a KeyRollup),
}

/// The parts of `q`'s line from `rows` (`rollup::with_borrowing(q, …)`, as
/// its keys table reads them) and `outlooks` (its budgets' forecasts): the
/// GPU models it limits (else its generic GPU keys), GPUs before budgets,
/// each in `keys::display_order`; a limits key only where its requests key
/// is not limited too (they say the same twice). With neither a GPU key nor
/// a budget, the fullest key alone; nothing for a quota that limits
/// nothing.
pub fn parts<'a>(
    q: &Quota,
    rows: &'a [KeyRollup],
    outlooks: &'a [Outlook],
    cfg: &KeyConfig,
) -> Vec<Part<'a>> {
    let parsed = |k: &str| Key::parse(k, cfg).ok();
    let gpu_rows: Vec<(&KeyRollup, Key)> = rows
        .iter()
        .filter_map(|r| parsed(&r.key).map(|k| (r, k)))
        .filter(|(_, k)| !k.cash && cfg.is_gpu(&k.resource))
        .filter(|(r, k)| {
            // `requests.` beside `limits.`: the requests key speaks for both.
            k.class != Class::Limits
                || !q
                    .spec
                    .hard
                    .contains_key(&r.key.replacen("limits.", "requests.", 1))
        })
        .collect();
    let models = gpu_rows.iter().any(|(_, k)| k.model.is_some());
    let mut gpus: Vec<&KeyRollup> = gpu_rows
        .into_iter()
        .filter(|(_, k)| k.model.is_some() == models)
        .map(|(r, _)| r)
        .collect();
    gpus.sort_by_cached_key(|r| crate::keys::display_order(&r.key, cfg));
    let mut budgets: Vec<&Outlook> = outlooks
        .iter()
        .filter(|o| cash_target(&o.key).is_some())
        .filter(|o| q.spec.hard.get(&o.key).is_some_and(|h| !h.is_zero()))
        .collect();
    budgets.sort_by_cached_key(|o| crate::keys::display_order(&o.key, cfg));
    let mut out: Vec<Part<'a>> = gpus
        .into_iter()
        .map(|row| Part::Gpu {
            row,
            borrows: q.spec.max.contains_key(&row.key),
        })
        .collect();
    out.extend(budgets.into_iter().map(Part::Budget));
    if out.is_empty() {
        // The fullest; of equals, the first in display order.
        let fullest = rows.iter().filter(|r| !r.hard.is_zero()).min_by_key(|r| {
            (
                std::cmp::Reverse(r.in_use_percent()),
                crate::keys::display_order(&r.key, cfg),
            )
        });
        out.extend(fullest.map(Part::Fullest));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollup::{rollup, with_borrowing};
    use crate::{Quantity, QuotaSpec, ResourceList};

    const A100: &str = "requests.nvidia.com/gpu.A100";
    const GPU: &str = "requests.nvidia.com/gpu";
    const CASH: &str = "cash/requests.nvidia.com/gpu";

    fn quota(hard: &[(&str, i64)], max: &[(&str, i64)]) -> Quota {
        let list = |l: &[(&str, i64)]| -> ResourceList {
            l.iter()
                .map(|(k, v)| (k.to_string(), Quantity::from_units(*v)))
                .collect()
        };
        Quota::new(
            "team",
            QuotaSpec {
                hard: list(hard),
                max: list(max),
                ..QuotaSpec::default()
            },
        )
    }

    fn outlooks(q: &Quota) -> Vec<Outlook> {
        q.spec
            .hard
            .keys()
            .filter(|k| cash_target(k).is_some())
            .map(|k| crate::forecast::outlook(q, k, 0, &Default::default(), &Default::default()))
            .collect()
    }

    fn keys(parts: &[Part]) -> Vec<String> {
        parts
            .iter()
            .map(|p| match p {
                Part::Gpu { row, borrows } => {
                    format!("{}{}", row.key, if *borrows { "+" } else { "" })
                }
                Part::Budget(o) => o.key.clone(),
                Part::Fullest(r) => format!("fullest {}", r.key),
            })
            .collect()
    }

    #[test]
    fn gpu_models_come_first_then_budgets_and_nothing_else() {
        let q = quota(
            &[
                ("requests.cpu", 64),
                (GPU, 40),
                (A100, 32),
                ("requests.nvidia.com/gpu.H100", 8),
                (CASH, 5_000),
                ("pods", 100),
            ],
            &[(A100, 48)],
        );
        let rows = with_borrowing(&q, rollup(&q, &ResourceList::new()), None, &[], 0);
        let o = outlooks(&q);
        assert_eq!(
            keys(&parts(&q, &rows, &o, &KeyConfig::default())),
            [
                format!("{A100}+"),
                "requests.nvidia.com/gpu.H100".into(),
                CASH.to_string()
            ]
        );
    }

    #[test]
    fn the_generic_gpu_key_speaks_where_no_model_is_limited() {
        let q = quota(
            &[(GPU, 8), ("limits.nvidia.com/gpu", 8), ("requests.cpu", 4)],
            &[],
        );
        let rows = rollup(&q, &ResourceList::new());
        assert_eq!(
            keys(&parts(&q, &rows, &[], &KeyConfig::default())),
            [GPU.to_string()]
        );
    }

    #[test]
    fn without_gpus_the_budget_alone_or_the_fullest_key() {
        let q = quota(&[("requests.cpu", 10), ("pods", 10), (CASH, 100)], &[]);
        let rows = rollup(&q, &ResourceList::new());
        let o = outlooks(&q);
        assert_eq!(
            keys(&parts(&q, &rows, &o, &KeyConfig::default())),
            [CASH.to_string()]
        );
        let q = quota(&[("requests.cpu", 10), ("pods", 10)], &[]);
        let used: ResourceList = [
            ("requests.cpu".to_string(), Quantity::from_units(5)),
            ("pods".to_string(), Quantity::from_units(9)),
        ]
        .into();
        let rows = rollup(&q, &used);
        assert_eq!(
            keys(&parts(&q, &rows, &[], &KeyConfig::default())),
            ["fullest pods".to_string()]
        );
        let q = quota(&[], &[]);
        assert!(parts(&q, &[], &[], &KeyConfig::default()).is_empty());
    }
}
