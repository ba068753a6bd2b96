//! Tree rules (§2, docs/semantics.md): a child's hard covers its parent's keys and is carved
//! out of the parent's remainder; lowering is always allowed; only leaves go.

use crate::admission::Shortfall;
use crate::keys::{cash_target, Key, KeyConfig};
use crate::lineage::{End, Forest};
use crate::object::{Carve, Quota, QuotaSpec};
use crate::resources::{self, ResourceList};
use std::collections::{BTreeMap, BTreeSet};

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TreeError {
    #[error("{0}")]
    Invalid(String),
    #[error("bizrq {child}: parent '{parent}' does not exist")]
    ParentMissing { child: String, parent: String },
    #[error("bizrq {name}: spec.parent cannot change after creation (was '{from}', asked '{to}')")]
    ParentImmutable {
        name: String,
        from: String,
        to: String,
    },
    #[error("bizrq {name}: parent chain {chain} forms a cycle")]
    Cycle { name: String, chain: String },
    #[error("bizrq {child}: hard must contain every key of parent {parent}'s hard; missing {}", .keys.join(", "))]
    MissingKeys {
        child: String,
        parent: String,
        keys: Vec<String>,
    },
    #[error("bizrq {name}: cannot add {} to hard while children {} lack it; add it to them first", .keys.join(", "), .children.join(", "))]
    ChildrenLackKeys {
        name: String,
        keys: Vec<String>,
        children: Vec<String>,
    },
    #[error("bizrq {child} does not fit in its parent: {}", crate::admission::join(.0), child = .1)]
    DoesNotFit(Vec<Shortfall>, String),
    #[error("bizrq {name}: only leaves can be deleted; children: {}", .children.join(", "))]
    NotALeaf { name: String, children: Vec<String> },
    #[error("bizrq {child}: transfer {transfer} is moving quota through it (its carve-out in {parent} is held); try again when the transfer is done")]
    Held {
        child: String,
        parent: String,
        transfer: String,
    },
    /// More keys in `spec.hard` or `spec.max` than [`MAX_KEYS`]: a bad
    /// request, not a broken tree rule.
    #[error("bizrq {name}: spec.{field} has {count} keys; a quota may hold at most {MAX_KEYS} keys (the limit on keys per quota, docs/limits.md)")]
    TooManyKeys {
        name: String,
        field: &'static str,
        count: usize,
    },
    /// A carve-out that would make the parent's record of its children's
    /// carve-outs hold more than [`MAX_CARVED_KEYS`] keys in all.
    #[error("bizrq {child}: {parent} would hold {entries} carved-out keys over its children; a parent may hold at most {MAX_CARVED_KEYS} (the limit on a parent's carve-outs, docs/limits.md: fewer children, or fewer keys each)")]
    TooWide {
        child: String,
        parent: String,
        entries: usize,
    },
    /// A new quota whose line (itself and its ancestors) would be longer
    /// than [`MAX_DEPTH`].
    #[error("bizrq {name}: it would sit at level {depth} or below of its tree; a tree may have at most {MAX_DEPTH} levels (the limit on a tree's depth, docs/limits.md)")]
    TooDeep { name: String, depth: usize },
}

/// Levels a tree may have, its root the first: every reader that sums a
/// quota's use or spending along its line (the working copies, the alert
/// engine, a create's walk up its ancestors) costs the depth of the line
/// it walks, so a chain of N quotas cost N² per sweep. Organisations are
/// a handful of levels deep (company, division, department, team,
/// project); 16 leaves room.
pub const MAX_DEPTH: usize = 16;

/// Keys a parent's `status.children` may hold in all (Σ over its children
/// of the keys each carves out). Every write of the parent carries them —
/// a sibling's borrowing admission, a carve-out, a transfer — so 225
/// children of 256 keys (2.7 MB of status) made every admission under the
/// parent take seconds. 16,384 is, say, 1,000 children of 16 keys; in a
/// cluster the object must also stay under etcd's 1.5 MB.
pub const MAX_CARVED_KEYS: usize = 16_384;

/// Keys one quota may hold in `spec.hard` (and in `spec.max`). Every page,
/// chart, status write and admission of a quota walks its keys, and a
/// child carries all its parent's: the bound keeps each of them small
/// whatever an owner sends. The CRD's schema says the same
/// (`maxProperties`), so both modes refuse the same specs.
pub const MAX_KEYS: usize = 256;

/// DNS-1123 subdomain, as Kubernetes requires of object names.
pub fn validate_name(name: &str) -> Result<(), TreeError> {
    let ok = !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.as_bytes()[name.len() - 1].is_ascii_alphanumeric();
    if ok {
        Ok(())
    } else {
        Err(TreeError::Invalid(format!(
            "'{name}' is not a valid quota name: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253"
        )))
    }
}

/// Checks a spec on its own: names, keys, non-negative amounts, max ≥ hard.
pub fn validate_spec(name: &str, spec: &QuotaSpec, cfg: &KeyConfig) -> Result<(), TreeError> {
    validate_name(name)?;
    if !spec.parent.is_empty() {
        validate_name(&spec.parent)?;
        if spec.parent == name {
            return Err(TreeError::Cycle {
                name: name.into(),
                chain: format!("{name} → {name}"),
            });
        }
    }
    let invalid = |m: String| TreeError::Invalid(format!("bizrq {name}: {m}"));
    for (field, list) in [("hard", &spec.hard), ("max", &spec.max)] {
        // Before anything walks them.
        if list.len() > MAX_KEYS {
            return Err(TreeError::TooManyKeys {
                name: name.into(),
                field,
                count: list.len(),
            });
        }
    }
    for (field, list) in [("hard", &spec.hard), ("max", &spec.max)] {
        for (k, v) in list {
            Key::parse(k, cfg).map_err(|e| invalid(format!("spec.{field}: {e}")))?;
            if v.is_negative() {
                return Err(invalid(format!("spec.{field}.{k} is negative ({v})")));
            }
        }
    }
    spec.queueing
        .validate()
        .map_err(|e| invalid(format!("spec.{e}")))?;
    if let Some(idle) = &spec.idle {
        idle.validate().map_err(|e| invalid(format!("spec.{e}")))?;
    }
    for (k, m) in &spec.max {
        if cash_target(k).is_some() {
            return Err(invalid(format!("spec.max.{k}: cash cannot be borrowed")));
        }
        match spec.hard.get(k) {
            Some(h) if m < h => {
                return Err(invalid(format!(
                    "spec.max.{k} ({m}) is below spec.hard.{k} ({h})"
                )));
            }
            None => {
                return Err(invalid(format!(
                    "spec.max.{k} has no spec.hard.{k} to extend"
                )))
            }
            _ => {}
        }
    }
    for (k, policy) in &spec.budgets {
        if cash_target(k).is_none() || !spec.hard.contains_key(k) {
            return Err(invalid(format!(
                "spec.budgets.{k}: a budget policy needs a cash key of spec.hard (cash/<resource key>, e.g. cash/requests.nvidia.com/gpu)"
            )));
        }
        policy
            .validate(k)
            .map_err(|e| invalid(format!("spec.budgets: {e}")))?;
    }
    Ok(())
}

/// `name`'s line of parents, as far as `forest` holds it, must reach a
/// root: every parent exists and none repeats. Parents are immutable and
/// must exist, so a failure needs bad data; the check is defensive.
/// `forest` holds `name` with its (new) parent.
pub fn check_ancestry(name: &str, forest: &Forest) -> Result<(), TreeError> {
    let line = forest.line(name);
    match line.end {
        End::Root if line.names.len() > MAX_DEPTH => Err(TreeError::TooDeep {
            name: name.into(),
            depth: line.names.len(),
        }),
        End::Root => Ok(()),
        End::Cycle(_) => Err(TreeError::Cycle {
            name: name.into(),
            chain: line.describe(),
        }),
        End::Unknown => match line.names[..] {
            [.., child, parent] => Err(TreeError::ParentMissing {
                child: child.into(),
                parent: parent.into(),
            }),
            _ => Err(TreeError::Invalid(format!(
                "bizrq {name}: its parent is not known"
            ))),
        },
    }
}

/// Only leaves can be deleted: `quota` has no child quota (`children`, as
/// stored) and no carve-out in its status (a child being created, or one
/// whose delete has not returned its carve-out yet).
pub fn check_leaf<'a>(
    quota: &Quota,
    children: impl IntoIterator<Item = &'a str>,
) -> Result<(), TreeError> {
    let all: BTreeSet<String> = children
        .into_iter()
        .map(str::to_string)
        .chain(quota.status.children.keys().cloned())
        .collect();
    if all.is_empty() {
        Ok(())
    } else {
        Err(TreeError::NotALeaf {
            name: quota.name().into(),
            children: all.into_iter().collect(),
        })
    }
}

/// A child's hard must contain every key of its parent's hard.
pub fn check_covers(
    child: &str,
    child_hard: &ResourceList,
    parent: &Quota,
) -> Result<(), TreeError> {
    let missing: Vec<String> = parent
        .spec
        .hard
        .keys()
        .filter(|k| !child_hard.contains_key(*k))
        .cloned()
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(TreeError::MissingKeys {
            child: child.into(),
            parent: parent.name().into(),
            keys: missing,
        })
    }
}

/// A node that gains keys must not leave its children without them.
pub fn check_children_cover(
    name: &str,
    new_hard: &ResourceList,
    children: &[(&str, &ResourceList)],
) -> Result<(), TreeError> {
    let mut keys = BTreeSet::new();
    let mut lacking = BTreeSet::new();
    for (child, hard) in children {
        for k in new_hard.keys().filter(|k| !hard.contains_key(*k)) {
            keys.insert(k.clone());
            lacking.insert(child.to_string());
        }
    }
    if keys.is_empty() {
        Ok(())
    } else {
        Err(TreeError::ChildrenLackKeys {
            name: name.into(),
            keys: keys.into_iter().collect(),
            children: lacking.into_iter().collect(),
        })
    }
}

/// Carve `new_hard` for `child` out of `parent`: checks that the child covers
/// the parent's keys and that every raise fits the parent's remainder
/// (hard − used), then records the carve-out in the parent's status.
/// Lowering never fails. Returns whether the parent changed.
pub fn carve(
    parent: &mut Quota,
    child: &str,
    new_hard: &ResourceList,
    since: &str,
) -> Result<bool, TreeError> {
    // A negative carve-out would lower the parent's used (and free room
    // that its other children hold); `validate_spec` refuses it first.
    if let Some((k, v)) = new_hard.iter().find(|(_, v)| v.is_negative()) {
        return Err(TreeError::Invalid(format!(
            "bizrq {child}: spec.hard.{k} is negative ({v})"
        )));
    }
    check_covers(child, new_hard, parent)?;
    parent.status.refresh(&parent.spec);
    let old = parent.status.carved(child);
    if old == *new_hard && parent.status.children.contains_key(child) {
        return Ok(false);
    }
    check_not_held(parent, child, new_hard)?;
    let before: usize = parent.status.children.values().map(|c| c.hard.len()).sum();
    let entries = before
        - parent
            .status
            .children
            .get(child)
            .map_or(0, |c| c.hard.len())
        + new_hard.len();
    // Only a carve-out that widens the record is refused: lowering, or
    // replacing keys one for one, always goes through.
    if entries > MAX_CARVED_KEYS && entries > before {
        return Err(TreeError::TooWide {
            child: child.into(),
            parent: parent.name().into(),
            entries,
        });
    }
    let delta = resources::diff(new_hard, &old);
    let short = crate::admission::shortfalls(parent, &delta);
    if !short.is_empty() {
        return Err(TreeError::DoesNotFit(short, child.into()));
    }
    let uid = parent
        .status
        .children
        .get(child)
        .map(|c| c.uid.clone())
        .unwrap_or_default();
    // `since` is when the carve-out took this amount: `repair_carves`
    // leaves it alone for a while, as the child's own write may follow.
    parent.status.children.insert(
        child.to_string(),
        Carve {
            hard: new_hard.clone(),
            since: since.to_string(),
            uid,
        },
    );
    parent.status.refresh(&parent.spec);
    Ok(true)
}

/// Raise first: a child's spec change carves, key by key, the larger of
/// its carve-out and `new_hard`, and never lowers it. The write it is made
/// for may yet be refused or lost (another webhook, a stale
/// resourceVersion), and a carve-out below what the child holds would be
/// room a sibling can take; a lowering follows the stored child instead
/// (`settle_carve`, `repair_carves`). `renew` (the change raises the child:
/// `raises`) dates the carve-out `since` even when it already covered
/// `new_hard`, so repairs keep it while that write may be in flight.
/// Returns whether the parent changed.
pub fn carve_raise(
    parent: &mut Quota,
    child: &str,
    new_hard: &ResourceList,
    renew: bool,
    since: &str,
) -> Result<bool, TreeError> {
    if let Some((k, v)) = new_hard.iter().find(|(_, v)| v.is_negative()) {
        return Err(TreeError::Invalid(format!(
            "bizrq {child}: spec.hard.{k} is negative ({v})"
        )));
    }
    check_covers(child, new_hard, parent)?;
    let target = at_least(&parent.status.carved(child), new_hard);
    let changed = carve(parent, child, &target, since)?;
    if changed || !renew {
        return Ok(changed);
    }
    let Some(c) = parent.status.children.get_mut(child) else {
        return Ok(false);
    };
    // Always a new date, a millisecond on if need be: a writer settling
    // after its own write tells by it that a raise was carved since.
    let prev = crate::time::parse_rfc3339(&c.since);
    c.since = match (crate::time::parse_rfc3339(since), prev) {
        (Some(now), Some(p)) if now <= p => crate::time::format_rfc3339(p + 1),
        _ => since.to_string(),
    };
    Ok(true)
}

/// Whether `new` asks more than `old` of some key.
pub fn raises(old: &ResourceList, new: &ResourceList) -> bool {
    new.iter().any(|(k, v)| *v > resources::get(old, k))
}

/// Key by key, the larger of `a` and `b` (over both lists' keys).
fn at_least(a: &ResourceList, b: &ResourceList) -> ResourceList {
    let mut out = a.clone();
    for (k, v) in b {
        let e = out.entry(k.clone()).or_insert(*v);
        if *v > *e {
            *e = *v;
        }
    }
    out
}

/// A carve-out held by a transfer in flight (`object::transfers::Hold`) changes only
/// as that transfer plans: key by key, to its current value or to the
/// transfer's target. So the transfer's own spec writes pass (in cluster
/// mode they come back through the webhook), and nobody else's do.
pub fn check_not_held(
    parent: &Quota,
    child: &str,
    new_hard: &ResourceList,
) -> Result<(), TreeError> {
    let current = parent.status.carved(child);
    for (id, hold) in &parent.status.transfers {
        let Some(target) = hold.children.get(child) else {
            continue;
        };
        let planned = new_hard.keys().chain(current.keys()).all(|k| {
            let asked = new_hard.get(k);
            asked == current.get(k) || (asked.is_some() && asked == target.get(k))
        });
        if !planned {
            return Err(TreeError::Held {
                child: child.into(),
                parent: parent.name().into(),
                transfer: id.clone(),
            });
        }
    }
    Ok(())
}

/// The transfer holding `child`'s carve-out in `parent`, if any.
pub fn holder<'a>(parent: &'a Quota, child: &str) -> Option<&'a str> {
    parent
        .status
        .transfers
        .iter()
        .find(|(_, h)| h.children.contains_key(child))
        .map(|(id, _)| id.as_str())
}

/// How long a carve-out may wait for its child to appear before a resync
/// returns it to the parent (a create that crashed half-way).
pub const CARVE_TTL_MS: i64 = 120_000;

/// Make a parent's carve-outs match its existing children (name → hard):
/// each child's carve-out is its hard. A carve-out set less than
/// `CARVE_TTL_MS` ago ("young") is only ever raised, to what its child
/// holds (key by key the larger of the two): its child's create or spec
/// change comes after it (carve first, then write the child) and may be in
/// flight, or not yet in the caller's view of the children; shrinking a
/// raise in flight would hand the raised amount to a sibling. The window
/// may delay a lowering, never keep a carve-out below what its child holds.
/// A child that holds more than was carved (written past the webhook) is
/// recorded as it is, fit or not: the parent then shows used above hard
/// (over quota, alerted) rather than a ledger that hides it. Older, a
/// carve-out without a child (a create that crashed half-way, or a child
/// deleted) is returned. A
/// carve-out held by a transfer in flight is left as it is: it differs from
/// its child's hard by design until the transfer's next step (see
/// `transfer`). Refreshes the parent's usage.
pub fn repair_carves(parent: &mut Quota, children: &BTreeMap<String, ResourceList>, now_ms: i64) {
    let held: BTreeSet<String> = parent
        .status
        .transfers
        .values()
        .flat_map(|h| h.children.keys().cloned())
        .collect();
    let young =
        |c: &Carve| crate::time::parse_rfc3339(&c.since).is_some_and(|t| now_ms - t < CARVE_TTL_MS);
    parent.status.children.retain(|child, carve| {
        children.contains_key(child) || held.contains(child) || young(carve)
    });
    for (child, hard) in children {
        if held.contains(child) {
            continue;
        }
        // A child written past validation (a cluster object created while
        // the webhook was away) counts a negative amount as none: it never
        // lowers its parent's used.
        let hard: ResourceList = hard
            .iter()
            .filter(|(_, v)| !v.is_negative())
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        match parent.status.children.get_mut(child) {
            Some(c) if young(c) => c.hard = at_least(&c.hard, &hard),
            Some(c) => c.hard = hard,
            // A child without a carve-out (created before bizrq admitted
            // quotas, or a lost write) gets one; dated as settled, not in
            // flight, so a repair that finds the child gone takes it back
            // at once (it may be a delete this view has not seen yet).
            None => {
                parent.status.children.insert(
                    child.clone(),
                    Carve {
                        hard,
                        since: crate::time::format_rfc3339(now_ms - CARVE_TTL_MS),
                        uid: String::new(),
                    },
                );
            }
        }
    }
    parent.status.refresh(&parent.spec);
}

/// After bizrq's own spec write of `child` succeeded, its carve-out follows
/// the child as a fresh read shows it stored (`stored_hard`). `before` is
/// the carve-out as the writer's raise-first step left it: if it is still
/// exactly that, no other change of the child was carved since (every
/// raise changes the amount or renews `since`), so no raise is in flight
/// and the carve-out becomes the stored hard. Otherwise it is repaired as
/// `repair_carves` would: lowered only if not young. A carve-out held by a
/// transfer, or missing, is left to the transfer or the repair. Returns
/// whether the parent changed.
pub fn settle_carve(
    parent: &mut Quota,
    child: &str,
    before: Option<&Carve>,
    stored_hard: &ResourceList,
    now_ms: i64,
) -> bool {
    if holder(parent, child).is_some() {
        return false;
    }
    let Some(c) = parent.status.children.get_mut(child) else {
        return false;
    };
    let untouched = before == Some(&*c);
    let young = !untouched
        && crate::time::parse_rfc3339(&c.since).is_some_and(|t| now_ms - t < CARVE_TTL_MS);
    let hard: ResourceList = stored_hard
        .iter()
        .filter(|(_, v)| !v.is_negative())
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    let next = if young {
        at_least(&c.hard, &hard)
    } else {
        hard
    };
    if c.hard == next {
        return false;
    }
    c.hard = next;
    parent.status.refresh(&parent.spec);
    true
}

/// Return a deleted child's carve-out to its parent.
pub fn uncarve(parent: &mut Quota, child: &str) -> bool {
    let changed = parent.status.children.remove(child).is_some();
    if changed {
        parent.status.refresh(&parent.spec);
    }
    changed
}

#[cfg(test)]
mod tests {

    /// A tree has at most `MAX_DEPTH` levels: a line of 16 (the root at
    /// level 1) is taken, one of 17 refused naming the limit.
    #[test]
    fn a_tree_has_at_most_max_depth_levels() {
        let chain = |n: usize| {
            Forest::new(
                (1..n)
                    .map(|i| (format!("q{i}"), format!("q{}", i - 1)))
                    .chain([("q0".to_string(), String::new())]),
            )
        };
        assert_eq!(
            check_ancestry(&format!("q{}", MAX_DEPTH - 1), &chain(MAX_DEPTH)),
            Ok(())
        );
        let e = check_ancestry(&format!("q{MAX_DEPTH}"), &chain(MAX_DEPTH + 1)).unwrap_err();
        assert!(
            matches!(e, TreeError::TooDeep { depth, .. } if depth == MAX_DEPTH + 1),
            "{e}"
        );
        assert!(
            e.to_string().contains("a tree may have at most 16 levels"),
            "{e}"
        );
    }

    use super::*;

    fn list(pairs: &[(&str, &str)]) -> ResourceList {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.parse().unwrap()))
            .collect()
    }
    fn spec(parent: &str, hard: &[(&str, &str)]) -> QuotaSpec {
        QuotaSpec {
            parent: parent.into(),
            hard: list(hard),
            max: Default::default(),
            budgets: Default::default(),
            queueing: Default::default(),
            fair_sharing: Default::default(),
            idle: None,
        }
    }

    #[test]
    fn carve_checks_remainder_and_lowering_always_passes() {
        let mut root = Quota::new(
            "ai",
            spec("", &[("requests.nvidia.com/gpu", "16"), ("pods", "100")]),
        );
        let t = "2026-01-01T00:00:00.000Z";
        carve(
            &mut root,
            "cv",
            &list(&[("requests.nvidia.com/gpu", "10"), ("pods", "10")]),
            t,
        )
        .unwrap();
        let err = carve(
            &mut root,
            "nlp",
            &list(&[("requests.nvidia.com/gpu", "8"), ("pods", "10")]),
            t,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "bizrq nlp does not fit in its parent: bizrq ai: requests.nvidia.com/gpu asks 8, 6 left of 16"
        );
        carve(
            &mut root,
            "nlp",
            &list(&[("requests.nvidia.com/gpu", "6"), ("pods", "10")]),
            t,
        )
        .unwrap();
        carve(
            &mut root,
            "cv",
            &list(&[("requests.nvidia.com/gpu", "1"), ("pods", "10")]),
            t,
        )
        .unwrap();
        assert_eq!(
            root.status.used["requests.nvidia.com/gpu"],
            "7".parse().unwrap()
        );
        uncarve(&mut root, "cv");
        assert_eq!(root.status.used["pods"], "10".parse().unwrap());
    }

    /// A parent's record of carve-outs holds at most `MAX_CARVED_KEYS`
    /// keys: the child that would widen it past that is refused naming the
    /// limit, and nothing changes; a carve-out that does not widen it is
    /// still taken.
    #[test]
    fn a_carve_out_past_the_parents_limit_on_carved_keys_is_refused() {
        let mut root = Quota::new("org", spec("", &[("pods", "100000")]));
        let wide = |n: usize| -> ResourceList {
            std::iter::once(("pods".to_string(), "1".parse().unwrap()))
                .chain((1..n).map(|i| (format!("limits.cpu.m{i:05}"), "0".parse().unwrap())))
                .collect()
        };
        let fits = MAX_CARVED_KEYS / MAX_KEYS;
        for i in 0..fits {
            carve(
                &mut root,
                &format!("t{i}"),
                &wide(MAX_KEYS),
                "2026-01-01T00:00:00.000Z",
            )
            .unwrap();
        }
        let before = root.status.clone();
        let e = carve(
            &mut root,
            "one-more",
            &wide(MAX_KEYS),
            "2026-01-01T00:00:00.000Z",
        )
        .unwrap_err();
        assert!(
            matches!(e, TreeError::TooWide { entries, .. } if entries == MAX_CARVED_KEYS + MAX_KEYS)
        );
        assert!(
            e.to_string().contains("a parent may hold at most 16384"),
            "{e}"
        );
        assert_eq!(root.status, before, "nothing changed");
        // Raising an amount of a child already there widens nothing.
        let mut more = wide(MAX_KEYS);
        more.insert("pods".into(), "2".parse().unwrap());
        assert!(carve(&mut root, "t0", &more, "2026-01-01T00:00:00.000Z").unwrap());
        // A narrower child makes room for one of the right size.
        carve(&mut root, "t1", &wide(1), "2026-01-01T00:00:00.000Z").unwrap();
        carve(
            &mut root,
            "small",
            &wide(MAX_KEYS - 1),
            "2026-01-01T00:00:00.000Z",
        )
        .unwrap();
    }

    /// A raise is carved before the child's spec is written: a repair in
    /// between (or one reading a stale child) must not take it back.
    #[test]
    fn repair_leaves_a_carve_out_set_moments_ago_and_fixes_an_old_one() {
        let gpu = "requests.nvidia.com/gpu";
        let mut root = Quota::new("ai", spec("", &[(gpu, "16")]));
        let t0 = crate::time::parse_rfc3339("2026-01-01T00:00:00.000Z").unwrap();
        let at = |ms: i64| crate::time::format_rfc3339(ms);
        carve(&mut root, "nlp", &list(&[(gpu, "6")]), &at(t0)).unwrap();
        carve(&mut root, "nlp", &list(&[(gpu, "10")]), &at(t0 + 600_000)).unwrap();
        assert_eq!(root.status.children["nlp"].since, at(t0 + 600_000));
        let kids = BTreeMap::from([("nlp".to_string(), list(&[(gpu, "6")]))]);
        repair_carves(&mut root, &kids, t0 + 601_000);
        assert_eq!(root.status.used[gpu], "10".parse().unwrap());
        // Never written after all: returned once the carve-out is old.
        repair_carves(&mut root, &kids, t0 + 600_000 + CARVE_TTL_MS);
        assert_eq!(root.status.used[gpu], "6".parse().unwrap());
        // A carve-out the repair made for a child it saw is not in flight:
        // when the child turns out to be gone, it is returned at once.
        // (Later than the repair above, so nlp's carve-out is old and goes.)
        let now = t0 + 600_000 + CARVE_TTL_MS + 1;
        let kids = BTreeMap::from([("cv".to_string(), list(&[(gpu, "3")]))]);
        repair_carves(&mut root, &kids, now);
        assert_eq!(root.status.used[gpu], "3".parse().unwrap());
        repair_carves(&mut root, &BTreeMap::new(), now + 1);
        assert_eq!(root.status.used[gpu], "0".parse().unwrap());
    }

    /// Two writes of nlp reviewed in turn (4 → 10, then 10 → 2 on the same
    /// resourceVersion): whichever the API server stores, the carve-out
    /// covers it; the lowering waits for the stored child.
    #[test]
    fn a_review_raises_first_and_never_lowers() {
        let gpu = "requests.nvidia.com/gpu";
        let mut root = Quota::new("ai", spec("", &[(gpu, "16")]));
        let t0 = crate::time::parse_rfc3339("2026-01-01T00:00:00.000Z").unwrap();
        let at = |ms: i64| crate::time::format_rfc3339(ms);
        carve(&mut root, "nlp", &list(&[(gpu, "4")]), &at(t0)).unwrap();
        let raise = list(&[(gpu, "10")]);
        let lower = list(&[(gpu, "2")]);
        let later = t0 + 10 * CARVE_TTL_MS;
        assert!(carve_raise(&mut root, "nlp", &raise, true, &at(later)).unwrap());
        assert!(!carve_raise(&mut root, "nlp", &lower, false, &at(later)).unwrap());
        assert_eq!(root.status.carved("nlp"), raise);
        // The raise was stored (the lowering lost on its resourceVersion).
        let kids = BTreeMap::from([("nlp".to_string(), raise.clone())]);
        repair_carves(&mut root, &kids, later + CARVE_TTL_MS + 1);
        assert_eq!(root.status.used[gpu], "10".parse().unwrap());
        // The other order: the lowering stored; returned once not young.
        carve_raise(
            &mut root,
            "nlp",
            &raise,
            true,
            &at(later + CARVE_TTL_MS + 2),
        )
        .unwrap();
        let kids = BTreeMap::from([("nlp".to_string(), lower.clone())]);
        repair_carves(&mut root, &kids, later + CARVE_TTL_MS + 3);
        assert_eq!(root.status.carved("nlp"), raise, "young: kept");
        repair_carves(&mut root, &kids, later + 2 * CARVE_TTL_MS + 2);
        assert_eq!(root.status.carved("nlp"), lower);
    }

    /// A raise of the child dates its carve-out even when it already
    /// covered it, so a repair does not lower it under a write in flight.
    #[test]
    fn a_raise_already_covered_renews_its_carve_outs_window() {
        let gpu = "requests.nvidia.com/gpu";
        let mut root = Quota::new("ai", spec("", &[(gpu, "16")]));
        let t0 = crate::time::parse_rfc3339("2026-01-01T00:00:00.000Z").unwrap();
        let at = |ms: i64| crate::time::format_rfc3339(ms);
        carve(&mut root, "nlp", &list(&[(gpu, "10")]), &at(t0)).unwrap();
        let now = t0 + 10 * CARVE_TTL_MS;
        assert!(raises(&list(&[(gpu, "2")]), &list(&[(gpu, "10")])));
        assert!(carve_raise(&mut root, "nlp", &list(&[(gpu, "10")]), true, &at(now)).unwrap());
        // Renewed again in the same millisecond: still a new date.
        let before = root.status.children["nlp"].clone();
        assert!(carve_raise(&mut root, "nlp", &list(&[(gpu, "10")]), true, &at(now)).unwrap());
        assert_ne!(root.status.children["nlp"], before);
        let kids = BTreeMap::from([("nlp".to_string(), list(&[(gpu, "2")]))]);
        repair_carves(&mut root, &kids, now + 1);
        assert_eq!(root.status.used[gpu], "10".parse().unwrap());
    }

    /// A carve-out lowered by a review whose write was never stored, while
    /// the child still holds more: the window never protects the lower
    /// value, the repair raises it at once to what the child holds.
    #[test]
    fn a_young_carve_out_below_its_child_is_raised_to_it() {
        let gpu = "requests.nvidia.com/gpu";
        let mut root = Quota::new("ai", spec("", &[(gpu, "16")]));
        let t0 = crate::time::parse_rfc3339("2026-01-01T00:00:00.000Z").unwrap();
        let at = |ms: i64| crate::time::format_rfc3339(ms);
        carve(&mut root, "nlp", &list(&[(gpu, "2")]), &at(t0)).unwrap();
        let kids = BTreeMap::from([("nlp".to_string(), list(&[(gpu, "10")]))]);
        repair_carves(&mut root, &kids, t0 + 1);
        assert_eq!(root.status.carved("nlp"), list(&[(gpu, "10")]));
        assert_eq!(root.status.used[gpu], "10".parse().unwrap());
    }

    /// A child holding more than fits (written past the webhook) is
    /// recorded as it is: the parent shows used above hard (over quota).
    #[test]
    fn a_repair_records_a_child_beyond_its_parent_as_over_quota() {
        let gpu = "requests.nvidia.com/gpu";
        let mut root = Quota::new("ai", spec("", &[(gpu, "16")]));
        let t = "2026-01-01T00:00:00.000Z";
        carve(&mut root, "cv", &list(&[(gpu, "10")]), t).unwrap();
        carve(&mut root, "nlp", &list(&[(gpu, "4")]), t).unwrap();
        let kids = BTreeMap::from([
            ("cv".to_string(), list(&[(gpu, "10")])),
            ("nlp".to_string(), list(&[(gpu, "12")])),
        ]);
        let t0 = crate::time::parse_rfc3339(t).unwrap();
        // Young or old, the truth is recorded.
        for now in [t0 + 1, t0 + 10 * CARVE_TTL_MS] {
            let mut r = root.clone();
            repair_carves(&mut r, &kids, now);
            assert_eq!(r.status.used[gpu], "22".parse().unwrap());
            assert!(r.status.used[gpu] > r.spec.hard[gpu], "over quota, shown");
        }
    }

    #[test]
    fn settling_after_a_write_lowers_unless_another_raise_may_be_in_flight() {
        let gpu = "requests.nvidia.com/gpu";
        let mut root = Quota::new("ai", spec("", &[(gpu, "16")]));
        let t0 = crate::time::parse_rfc3339("2026-01-01T00:00:00.000Z").unwrap();
        let at = |ms: i64| crate::time::format_rfc3339(ms);
        carve(&mut root, "nlp", &list(&[(gpu, "10")]), &at(t0)).unwrap();
        // Another raise was carved since the writer's own step: young, the
        // carve-out is only raised.
        let other = Carve {
            hard: list(&[(gpu, "6")]),
            since: at(t0 - 1),
            uid: String::new(),
        };
        let other = Some(&other);
        assert!(!settle_carve(
            &mut root,
            "nlp",
            other,
            &list(&[(gpu, "4")]),
            t0 + 1
        ));
        assert!(settle_carve(
            &mut root,
            "nlp",
            other,
            &list(&[(gpu, "12")]),
            t0 + 1
        ));
        assert_eq!(root.status.carved("nlp"), list(&[(gpu, "12")]));
        assert!(settle_carve(
            &mut root,
            "nlp",
            other,
            &list(&[(gpu, "4")]),
            t0 + CARVE_TTL_MS
        ));
        assert_eq!(root.status.used[gpu], "4".parse().unwrap());
        assert!(!settle_carve(
            &mut root,
            "cv",
            other,
            &list(&[(gpu, "4")]),
            t0
        ));
        // Untouched since the writer's own step: lowered at once, young or not.
        let mine = root.status.children["nlp"].clone();
        assert!(settle_carve(
            &mut root,
            "nlp",
            Some(&mine),
            &list(&[(gpu, "1")]),
            t0 + 1
        ));
        assert_eq!(root.status.used[gpu], "1".parse().unwrap());
    }

    #[test]
    fn child_must_cover_parent_keys() {
        let mut root = Quota::new("ai", spec("", &[("limits.cpu", "10"), ("pods", "5")]));
        let err = carve(&mut root, "cv", &list(&[("limits.cpu", "1")]), "t").unwrap_err();
        assert_eq!(
            err.to_string(),
            "bizrq cv: hard must contain every key of parent ai's hard; missing pods"
        );
    }

    #[test]
    fn spec_validation() {
        let cfg = KeyConfig::default();
        assert!(validate_spec("ok", &spec("", &[("limits.cpu.A4", "4")]), &cfg).is_ok());
        let mut budgeted = spec("", &[("cash/requests.nvidia.com/gpu", "100")]);
        let policy: crate::object::budgets::BudgetPolicy =
            serde_json::from_str(r#"{"period": {"kind": "monthly", "anchorDay": 0}}"#).unwrap();
        budgeted
            .budgets
            .insert("cash/requests.nvidia.com/gpu".into(), policy.clone());
        let e = validate_spec("b", &budgeted, &cfg).unwrap_err().to_string();
        assert!(
            e.contains("cash/requests.nvidia.com/gpu: monthly anchorDay 0"),
            "{e}"
        );
        budgeted.budgets.clear();
        budgeted
            .budgets
            .insert("cash/requests.cpu".into(), Default::default());
        let e = validate_spec("b", &budgeted, &cfg).unwrap_err().to_string();
        assert!(
            e.contains(
                "spec.budgets.cash/requests.cpu: a budget policy needs a cash key of spec.hard"
            ),
            "{e}"
        );
        for (name, s) in [
            ("Bad_Name", spec("", &[])),
            ("self", spec("self", &[])),
            ("neg", spec("", &[("pods", "-1")])),
            ("key", spec("", &[("gpus", "1")])),
        ] {
            assert!(validate_spec(name, &s, &cfg).is_err(), "{name}");
        }
        let mut s = spec("", &[("pods", "5")]);
        s.max = list(&[("pods", "4")]);
        assert!(validate_spec("m", &s, &cfg)
            .unwrap_err()
            .to_string()
            .contains("below"));
        let mut s = spec("", &[("pods", "5")]);
        s.queueing.order = crate::object::queueing::Order::BestEffortFifo { aging_seconds: 0 };
        s.queueing.mode = crate::object::queueing::Mode::Queue;
        assert_eq!(
            validate_spec("q", &s, &cfg).unwrap_err().to_string(),
            "bizrq q: spec.queueing: order.agingSeconds is 0: it must be 1 to 31622400 (366 days); \
             for no passing at all use order StrictFifo"
        );
    }

    #[test]
    fn a_spec_with_more_keys_than_the_limit_is_refused_naming_it() {
        let cfg = KeyConfig::default();
        let keys = |n: usize| -> ResourceList {
            (0..n)
                .map(|i| (format!("limits.cpu.m{i:05}"), "1".parse().unwrap()))
                .collect()
        };
        let at_limit = QuotaSpec {
            hard: keys(MAX_KEYS),
            ..spec("", &[])
        };
        assert!(validate_spec("wide", &at_limit, &cfg).is_ok());
        let over = QuotaSpec {
            hard: keys(10_000),
            ..spec("", &[])
        };
        let e = validate_spec("wide", &over, &cfg).unwrap_err();
        assert!(matches!(
            e,
            TreeError::TooManyKeys {
                count: 10_000,
                field: "hard",
                ..
            }
        ));
        assert_eq!(
            e.to_string(),
            "bizrq wide: spec.hard has 10000 keys; a quota may hold at most 256 keys \
             (the limit on keys per quota, docs/limits.md)"
        );
        let max_over = QuotaSpec {
            max: keys(MAX_KEYS + 1),
            ..at_limit
        };
        assert!(matches!(
            validate_spec("wide", &max_over, &cfg),
            Err(TreeError::TooManyKeys { field: "max", .. })
        ));
    }

    #[test]
    fn a_negative_carve_out_never_lowers_its_parents_used() {
        let gpu = "requests.nvidia.com/gpu";
        let mut root = Quota::new("ai", spec("", &[(gpu, "16")]));
        let t = "2026-01-01T00:00:00.000Z";
        carve(&mut root, "cv", &list(&[(gpu, "10")]), t).unwrap();
        let err = carve(&mut root, "evil", &list(&[(gpu, "-100")]), t).unwrap_err();
        assert_eq!(
            err.to_string(),
            "bizrq evil: spec.hard.requests.nvidia.com/gpu is negative (-100)"
        );
        // A child that skipped validation: repaired as holding nothing.
        let kids = [
            ("cv".to_string(), list(&[(gpu, "10")])),
            ("evil".to_string(), list(&[(gpu, "-100")])),
        ]
        .into();
        repair_carves(&mut root, &kids, 0);
        assert_eq!(root.status.used[gpu], "10".parse().unwrap());
    }

    #[test]
    fn ancestry_reaches_a_root_or_names_the_fault() {
        let f = Forest::new([("a", "b"), ("b", "c"), ("c", "a")]);
        assert_eq!(
            check_ancestry("a", &f).unwrap_err().to_string(),
            "bizrq a: parent chain a → b → c → a forms a cycle"
        );
        let f = Forest::new([("x", "ai"), ("ai", "")]);
        assert!(check_ancestry("x", &f).is_ok());
        let f = Forest::new([("x", "nlp"), ("nlp", "ai")]);
        assert_eq!(
            check_ancestry("x", &f).unwrap_err(),
            TreeError::ParentMissing {
                child: "nlp".into(),
                parent: "ai".into()
            }
        );
        assert!(check_ancestry("root", &Forest::new([("root", "")])).is_ok());
    }

    #[test]
    fn only_a_leaf_without_carve_outs_can_be_deleted() {
        let gpu = "requests.nvidia.com/gpu";
        let mut ai = Quota::new("ai", spec("", &[(gpu, "16")]));
        assert!(check_leaf(&ai, []).is_ok());
        assert_eq!(
            check_leaf(&ai, ["nlp", "cv"]).unwrap_err().to_string(),
            "bizrq ai: only leaves can be deleted; children: cv, nlp"
        );
        // A carve-out without its child yet (a create in flight) counts.
        carve(&mut ai, "llm", &list(&[(gpu, "2")]), "t").unwrap();
        assert_eq!(
            check_leaf(&ai, ["cv"]).unwrap_err(),
            TreeError::NotALeaf {
                name: "ai".into(),
                children: vec!["cv".into(), "llm".into()]
            }
        );
    }
}
