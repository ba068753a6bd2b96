//! Quantities as people read them: `4.06 card-hours` rather than
//! `4060278n`. For display only — rounded (exactly, in integers) to two
//! decimals, or three significant digits below one; the canonical exact
//! quantity stays where it is. Pure, so the portal can reuse it.

use crate::keys::{cash_target, cash_unit};
use crate::quantity::{Quantity, NANO};

/// `16`, `4.06`, `0.422`, `0.00406`, `-1.5`: two decimals from one up,
/// three significant digits below; halves round away from zero.
pub fn decimal(q: Quantity) -> String {
    let n = q.nanos();
    let sign = if n < 0 { "-" } else { "" };
    let abs = n.unsigned_abs();
    if abs == 0 {
        return "0".into();
    }
    // The step to round to, in nano-units.
    let step: u128 = if abs >= NANO as u128 {
        10_000_000
    } else {
        let mut scale = 1u128;
        while scale * 10 <= abs {
            scale *= 10;
        }
        (scale / 100).max(1)
    };
    let rounded = (abs + step / 2) / step * step;
    let whole = rounded / NANO as u128;
    let frac = rounded % NANO as u128;
    if frac == 0 {
        return format!("{sign}{whole}");
    }
    let digits = format!("{frac:09}");
    format!("{sign}{whole}.{}", digits.trim_end_matches('0'))
}

/// `1.5`, `16`, `0.000000001`: the exact amount, no grouping, no rounding.
/// For exports (CSV): what a spreadsheet sums must not be rounded.
pub fn exact(q: Quantity) -> String {
    let n = q.nanos();
    let sign = if n < 0 { "-" } else { "" };
    let abs = n.unsigned_abs();
    let (whole, frac) = (abs / 1_000_000_000, abs % 1_000_000_000);
    if frac == 0 {
        format!("{sign}{whole}")
    } else {
        let f = format!("{frac:09}");
        format!("{sign}{whole}.{}", f.trim_end_matches('0'))
    }
}

/// `143,500.25`: [`decimal`] with thousands separated.
pub fn grouped(q: Quantity) -> String {
    group_thousands(&decimal(q))
}

/// A plain decimal (`-143500.25`) with its whole part's thousands
/// separated (`-143,500.25`): the one grouping of every amount a person
/// reads, whatever rounded it.
pub fn group_thousands(d: &str) -> String {
    let (sign, rest) = d.strip_prefix('-').map_or(("", d), |r| ("-", r));
    let (whole, frac) = rest
        .split_once('.')
        .map_or((rest, None), |(w, f)| (w, Some(f)));
    let mut out = String::with_capacity(d.len() + whole.len() / 3);
    for (i, c) in whole.chars().enumerate() {
        if i > 0 && (whole.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    match frac {
        Some(f) => format!("{sign}{out}.{f}"),
        None => format!("{sign}{out}"),
    }
}

/// An amount of a key as messages and email show it, whatever form the
/// quantity was written in: a budget in its unit (`143,500 card-hours`),
/// memory and storage in GiB (`208 GiB`, not `223338299392`), the rest as
/// a number (`1,376`).
pub fn amount(key: &str, q: Quantity) -> String {
    if cash_target(key).is_some() {
        return format!("{} {}", grouped(q), cash_unit(key));
    }
    let resource = key
        .strip_prefix("requests.")
        .or_else(|| key.strip_prefix("limits."))
        .unwrap_or(key);
    let bytes = ["memory", "ephemeral-storage", "storage", "hugepages-"]
        .iter()
        .any(|r| resource.starts_with(r));
    if bytes {
        let gib = Quantity::from_nanos(q.nanos() / (1i128 << 30));
        return format!("{} GiB", grouped(gib));
    }
    grouped(q)
}

/// `4.06 card-hours`.
pub fn cash(cash_key: &str, q: Quantity) -> String {
    format!("{} {}", decimal(q), cash_unit(cash_key))
}

/// `0.422 of 1000 card-hours used, 999.58 left` (left is never below 0).
pub fn cash_balance(cash_key: &str, used: Quantity, hard: Quantity) -> String {
    let left = hard.saturating_sub(used).max(Quantity::ZERO);
    format!(
        "{} of {} {} used, {} left",
        decimal(used),
        decimal(hard),
        cash_unit(cash_key),
        decimal(left)
    )
}

#[cfg(test)]
mod amount_tests {
    use super::*;

    #[test]
    fn amounts_read_the_same_whatever_their_written_form() {
        let q = |s: &str| s.parse::<Quantity>().unwrap();
        assert_eq!(
            amount("cash/requests.nvidia.com/gpu", q("143500")),
            "143,500 card-hours"
        );
        assert_eq!(amount("requests.memory", q("208Gi")), "208 GiB");
        assert_eq!(amount("requests.memory", q("274877906944")), "256 GiB");
        assert_eq!(amount("limits.cpu", q("1376")), "1,376");
        assert_eq!(amount("requests.cpu", q("500m")), "0.5");
        assert_eq!(grouped(q("-1234567.5")), "-1,234,567.5");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::periods;
    use crate::keys::KeyConfig;
    use crate::object::{QuotaSpec, QuotaStatus, Summary};
    use crate::resources;
    use crate::summary::summarize;
    use std::collections::BTreeMap;

    fn q(s: &str) -> Quantity {
        s.parse().unwrap()
    }

    #[test]
    fn decimals_read_like_people_write_them() {
        for (text, shown) in [
            ("16", "16"),
            ("0", "0"),
            ("4060278n", "0.00406"),
            ("422200u", "0.422"),
            ("3m", "0.003"),
            ("1.005", "1.01"),
            ("1234.5678", "1234.57"),
            ("999995m", "1000"),
            ("1n", "0.000000001"),
            ("-1.5", "-1.5"),
            ("9223372036854775807", "9223372036854775807"),
        ] {
            assert_eq!(decimal(q(text)), shown, "{text}");
        }
    }

    #[test]
    fn cash_keys_name_their_unit() {
        assert_eq!(
            cash("cash/requests.nvidia.com/gpu", q("4060278n")),
            "0.00406 card-hours"
        );
        assert_eq!(cash_unit("cash/requests.nvidia.com/gpu.A100"), "card-hours");
        assert_eq!(cash_unit("cash/limits.cpu.A4"), "core-hours");
        assert_eq!(cash_unit("cash/requests.memory"), "byte-hours");
        assert_eq!(cash_unit("cash/pods"), "pod-hours");
        assert_eq!(
            cash_balance("cash/requests.nvidia.com/gpu", q("422200u"), q("1000")),
            "0.422 of 1000 card-hours used, 999.58 left"
        );
        assert_eq!(
            cash_balance("cash/requests.nvidia.com/gpu", q("5"), q("3")),
            "5 of 3 card-hours used, 0 left"
        );
    }

    /// Spent cash in `status`'s accumulators, in card-hours.
    fn spend(status: &mut QuotaStatus, key: &str, hours: &str) {
        let per_mille = crate::budget::PRICE_ONE / crate::cash::PER_MILLE;
        status.add_accrued(key, crate::budget::from_quantity(q(hours)) / per_mille);
    }

    fn list(pairs: &[(&str, &str)]) -> resources::ResourceList {
        pairs.iter().map(|(k, v)| (k.to_string(), q(v))).collect()
    }

    #[test]
    fn summary_shows_gpu_cards_card_hours_borrowing_and_reclaim() {
        let spec = QuotaSpec {
            parent: "ai".into(),
            hard: list(&[
                ("requests.nvidia.com/gpu", "16"),
                ("requests.nvidia.com/gpu.A100", "8"),
                ("cash/requests.nvidia.com/gpu", "1000"),
                ("requests.cpu", "64"),
            ]),
            max: list(&[("requests.nvidia.com/gpu", "24")]),
            budgets: Default::default(),
            queueing: Default::default(),
            fair_sharing: Default::default(),
            idle: None,
        };
        let mut status = QuotaStatus::default();
        spend(&mut status, "cash/requests.nvidia.com/gpu", "187.5");
        status.refresh(&spec);
        let in_use = list(&[
            ("requests.nvidia.com/gpu", "20"),
            ("requests.nvidia.com/gpu.A100", "8"),
            ("requests.cpu", "10"),
        ]);
        status.borrowed = spec.borrowed(&in_use);
        let (s, readable) = summarize(&spec, &status, &in_use, &KeyConfig::default());
        assert_eq!(
            s,
            Summary {
                gpu: Some("20/16".into()),
                card_hours_left: Some("812.5".into()),
                borrowing: Some("requests.nvidia.com/gpu=4".into()),
                reclaim_pending: 0,
                queued: 0,
            }
        );
        assert_eq!(
            readable,
            BTreeMap::from([(
                "cash/requests.nvidia.com/gpu".to_string(),
                "187.5 of 1000 card-hours used, 812.5 left".to_string()
            )])
        );
        let cpu_only = QuotaSpec {
            hard: list(&[("requests.cpu", "4")]),
            ..QuotaSpec::default()
        };
        let (s, readable) = summarize(
            &cpu_only,
            &QuotaStatus::default(),
            &Default::default(),
            &KeyConfig::default(),
        );
        assert_eq!(s, Summary::default());
        assert!(readable.is_empty());
    }

    /// At a parent `status.used` holds its children's carve-outs: the
    /// columns read the subtree's running use and what is left for its
    /// own work (`periods::left`: its top-ups in, carve-outs out), as
    /// the usage and budgets APIs do, never the carve-outs as use or
    /// spending.
    #[test]
    fn a_parents_summary_reads_its_subtree_not_its_carve_outs() {
        use crate::object::Carve;
        let gpu = "requests.nvidia.com/gpu";
        let cash = "cash/requests.nvidia.com/gpu";
        let spec = QuotaSpec {
            hard: list(&[(gpu, "104"), (cash, "51000")]),
            ..QuotaSpec::default()
        };
        let mut status = QuotaStatus::default();
        for (child, cards, hours) in [("nlp", "48", "30000"), ("cv", "40", "12000")] {
            status.children.insert(
                child.into(),
                Carve {
                    hard: list(&[(gpu, cards), (cash, hours)]),
                    since: "2026-11-01T00:00:00Z".into(),
                    uid: String::new(),
                },
            );
        }
        spend(&mut status, cash, "8100");
        status.budgets.insert(
            cash.into(),
            crate::object::budgets::PeriodStatus {
                top_ups: crate::budget::from_quantity(q("20")),
                ..serde_json::from_value(serde_json::json!({})).unwrap()
            },
        );
        status.refresh(&spec);
        assert_eq!(resources::get(&status.used, gpu), q("88"), "carved");
        // 46 cards run below it (its own work runs none).
        let in_use = list(&[(gpu, "46"), (cash, "18100")]);
        let (s, readable) = summarize(&spec, &status, &in_use, &KeyConfig::default());
        assert_eq!(s.gpu.as_deref(), Some("46/104"));
        // 51,000 + 20 − 8,100 − 42,000.
        assert_eq!(
            periods::left(&spec, &status, cash),
            q("920"),
            "the budgets API's left"
        );
        assert_eq!(s.card_hours_left.as_deref(), Some("920"));
        assert_eq!(
            readable[cash],
            "8100 of 51020 card-hours used by its own work, 42000 allocated to children, 920 left"
        );
    }
}
