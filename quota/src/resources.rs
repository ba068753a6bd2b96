//! Resource lists: key → quantity, with the few operations accounting needs.

use crate::quantity::Quantity;
use std::collections::BTreeMap;

pub type ResourceList = BTreeMap<String, Quantity>;

pub fn get(list: &ResourceList, key: &str) -> Quantity {
    list.get(key).copied().unwrap_or(Quantity::ZERO)
}

/// `into += add`, keeping keys that become zero out.
pub fn add_into(into: &mut ResourceList, add: &ResourceList) {
    for (k, v) in add {
        let e = into.entry(k.clone()).or_insert(Quantity::ZERO);
        *e = e.saturating_add(*v);
    }
    into.retain(|_, v| !v.is_zero());
}

/// `into -= sub`, keeping keys that become zero out.
pub fn sub_into(into: &mut ResourceList, sub: &ResourceList) {
    for (k, v) in sub {
        let e = into.entry(k.clone()).or_insert(Quantity::ZERO);
        *e = e.saturating_sub(*v);
    }
    into.retain(|_, v| !v.is_zero());
}

pub fn sum<'a>(lists: impl IntoIterator<Item = &'a ResourceList>) -> ResourceList {
    let mut out = ResourceList::new();
    for l in lists {
        add_into(&mut out, l);
    }
    out
}

/// `a - b` over the union of keys; zero entries dropped.
pub fn diff(a: &ResourceList, b: &ResourceList) -> ResourceList {
    let mut out = a.clone();
    sub_into(&mut out, b);
    out
}

pub fn scale(list: &ResourceList, n: i128) -> ResourceList {
    list.iter()
        .map(|(k, v)| (k.clone(), v.saturating_mul(n)))
        .filter(|(_, v)| !v.is_zero())
        .collect()
}

/// Restrict a list to the keys of `keys`, writing zeros for missing ones, as
/// `status.used` lists exactly the keys of `hard`.
pub fn project(list: &ResourceList, keys: &ResourceList) -> ResourceList {
    keys.keys().map(|k| (k.clone(), get(list, k))).collect()
}
