//! Fair sharing of a parent's idle capacity between its children
//! (docs/queueing.md, "Fair sharing"): dominant resource fairness with
//! weights, as kube-batch orders jobs and Kueue's Fair Sharing orders
//! ClusterQueues.
//!
//! A child's **share** is, over the keys it borrows, the largest of
//! (its use beyond `hard`) ÷ (what its parent can lend on that key),
//! divided by its weight. A child within its hard has share 0; a child of
//! weight 0 that borrows anything has an infinite share (it goes last).
//! Shares are exact ratios of integers, compared by cross-multiplication
//! in 256 bits: no float takes part in a decision (`Share::display` is for
//! people only).
//!
//! Three decisions read them:
//! - `pick`: of the siblings whose queue heads wait, whose goes first —
//!   the smallest share *after* admission, then the highest priority,
//!   then the oldest;
//! - `defers`: whether a borrower should leave the idle room to a
//!   sibling that `pick` puts first and that the room cannot hold beside
//!   it;
//! - `may_take`: whether a taker may reclaim from a victim that borrows
//!   (`Strategy`), and `by_largest_share`, the order victims are taken in.

use crate::object::fair_sharing::{FairStatus, Strategy, Weight};
use crate::object::Quota;
use crate::quantity::Quantity;
use crate::resources::{self, ResourceList};
use std::cmp::Ordering;

/// A dominant share: `num / den` (both ≥ 0), or infinite.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Share {
    /// `num / den`; `den` > 0. Zero when `num` is 0.
    Ratio {
        num: u128,
        den: u128,
    },
    Infinite,
}

impl Share {
    pub const ZERO: Share = Share::Ratio { num: 0, den: 1 };

    pub fn is_zero(&self) -> bool {
        matches!(self, Share::Ratio { num: 0, .. })
    }

    /// For people: two decimals (`0.42`), `∞` when infinite. Never for a
    /// decision.
    pub fn display(&self) -> String {
        match *self {
            Share::Infinite => "∞".into(),
            Share::Ratio { num, den } => {
                let hundredths = num.saturating_mul(100).checked_div(den).unwrap_or(0);
                let r = num.saturating_mul(100) % den.max(1);
                // Round half up.
                let hundredths = if r.saturating_mul(2) >= den && den > 0 {
                    hundredths + 1
                } else {
                    hundredths
                };
                format!("{}.{:02}", hundredths / 100, hundredths % 100)
            }
        }
    }

    /// How many times `other` this share is, in tenths, rounded down
    /// (`16` for 1.6×); None when `other` is zero or either is infinite.
    pub fn tenths_of(&self, other: &Share) -> Option<u128> {
        match (*self, *other) {
            (Share::Ratio { num: a, den: b }, Share::Ratio { num: c, den: d }) if c > 0 => {
                // (a/b) / (c/d) = a·d / (b·c), in tenths.
                let top = wide_mul(a, d);
                let bottom = wide_mul(b, c);
                Some(wide_div_small(top, bottom, 10))
            }
            _ => None,
        }
    }
}

impl PartialOrd for Share {
    fn partial_cmp(&self, other: &Share) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Share {
    fn cmp(&self, other: &Share) -> Ordering {
        match (*self, *other) {
            (Share::Infinite, Share::Infinite) => Ordering::Equal,
            (Share::Infinite, _) => Ordering::Greater,
            (_, Share::Infinite) => Ordering::Less,
            (Share::Ratio { num: a, den: b }, Share::Ratio { num: c, den: d }) => {
                wide_mul(a, d).cmp(&wide_mul(c, b))
            }
        }
    }
}

/// a × b in 256 bits, as (high, low) halves.
fn wide_mul(a: u128, b: u128) -> (u128, u128) {
    const M: u128 = u64::MAX as u128;
    let (a1, a0) = (a >> 64, a & M);
    let (b1, b0) = (b >> 64, b & M);
    let p00 = a0 * b0;
    let p01 = a0 * b1;
    let p10 = a1 * b0;
    let p11 = a1 * b1;
    let mid = (p00 >> 64) + (p01 & M) + (p10 & M);
    let low = (p00 & M) | (mid << 64);
    let high = p11 + (p01 >> 64) + (p10 >> 64) + (mid >> 64);
    (high, low)
}

/// ⌊top × k / bottom⌋ for a small k, capped at `u128::MAX`; by repeated
/// doubling so no product leaves 256 bits. Only for display.
fn wide_div_small(top: (u128, u128), bottom: (u128, u128), k: u128) -> u128 {
    if bottom == (0, 0) {
        return u128::MAX;
    }
    // top × k as a sum, then long division by shifting the divisor.
    let mut t = (0u128, 0u128);
    for _ in 0..k {
        t = add(t, top);
    }
    let mut q: u128 = 0;
    let mut rem = t;
    for bit in (0..128).rev() {
        if let Some(shifted) = shl(bottom, bit) {
            if rem >= shifted {
                rem = sub(rem, shifted);
                q |= 1 << bit;
            }
        }
    }
    if rem >= bottom {
        u128::MAX
    } else {
        q
    }
}

fn add(a: (u128, u128), b: (u128, u128)) -> (u128, u128) {
    let (low, c) = a.1.overflowing_add(b.1);
    (a.0.saturating_add(b.0).saturating_add(c as u128), low)
}

fn sub(a: (u128, u128), b: (u128, u128)) -> (u128, u128) {
    let (low, borrow) = a.1.overflowing_sub(b.1);
    (a.0 - b.0 - borrow as u128, low)
}

/// `v << bits` if it stays within 256 bits.
fn shl(v: (u128, u128), bits: u32) -> Option<(u128, u128)> {
    if bits == 0 {
        return Some(v);
    }
    if v.0 >> (128 - bits) != 0 {
        return None;
    }
    Some(((v.0 << bits) | (v.1 >> (128 - bits)), v.1 << bits))
}

/// A dominant share and the key it comes from (none when zero).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dominant {
    pub share: Share,
    pub key: Option<String>,
}

impl Dominant {
    pub const ZERO: Dominant = Dominant {
        share: Share::ZERO,
        key: None,
    };
}

/// What a parent can lend its children, per key of its hard that is not
/// cash: its hard less what its own workloads use. Every child's guarantee
/// is in it (idle guarantee is lent), so the sum of the children's fair
/// lines is the whole of it. The same for every sibling: shares compare.
pub fn lendable(parent: &Quota) -> ResourceList {
    parent
        .spec
        .hard
        .iter()
        .filter(|(k, _)| crate::keys::cash_target(k).is_none())
        .map(|(k, h)| {
            let own = resources::get(&parent.status.self_used, k);
            (k.clone(), h.saturating_sub(own).max(Quantity::ZERO))
        })
        .collect()
}

/// The dominant share of a child that borrows `borrowed` (per key, its
/// use beyond hard; zero and negative amounts borrow nothing) of
/// `lendable`, with `weight`. A key the parent cannot lend at all (0
/// lendable) that is borrowed anyway gives an infinite share; keys the
/// parent does not limit are not shared and do not count.
pub fn share(borrowed: &ResourceList, lendable: &ResourceList, weight: Weight) -> Dominant {
    let mut best = Dominant::ZERO;
    for (k, b) in borrowed {
        if b.nanos() <= 0 {
            continue;
        }
        let Some(l) = lendable.get(k) else { continue };
        let s = if weight.is_zero() || l.nanos() <= 0 {
            Share::Infinite
        } else {
            // b / (l × w/1000) = 1000·b / (l·w); b, l < 2^94, w ≤ 2^20.
            Share::Ratio {
                num: (b.nanos() as u128).saturating_mul(1000),
                den: (l.nanos() as u128).saturating_mul(weight.milli() as u128),
            }
        };
        if best.key.is_none() || s > best.share {
            best = Dominant {
                share: s,
                key: Some(k.clone()),
            };
        }
    }
    best
}

/// `status.fairSharing` of `q` given what its parent can lend: its
/// weight, its dominant share (for people) and on which key. None for a
/// quota that cannot borrow (no `max`).
pub fn status(q: &Quota, lendable: &ResourceList) -> Option<FairStatus> {
    if q.spec.max.is_empty() || q.spec.parent.is_empty() {
        return None;
    }
    let d = Sibling::of(q).share(lendable);
    Some(FairStatus {
        weight: q.spec.fair_sharing.weight,
        share: d.share.display(),
        dominant: d.key.unwrap_or_default(),
    })
}

/// A child's share against its fair line, for a parent's page: `share
/// 0.53, 1.6× its fair line (weight 1)`. `total_weight_milli` is the sum
/// of the weights of the children that may borrow, in thousandths; at its
/// fair line (lendable × weight ÷ that sum) a child's share is 1 ÷ the
/// sum. None for a child that cannot borrow.
pub fn against_line(
    child: &Quota,
    lendable: &ResourceList,
    total_weight_milli: u64,
) -> Option<String> {
    if child.spec.max.is_empty() {
        return None;
    }
    let s = Sibling::of(child).share(lendable).share;
    let line = Share::Ratio {
        num: 1000,
        den: u128::from(total_weight_milli.max(1)),
    };
    let times = match s.tenths_of(&line) {
        Some(t) => format!("{}.{}× its fair line", t / 10, t % 10),
        None => "above any fair line".to_string(),
    };
    Some(format!(
        "share {}, {times} (weight {})",
        s.display(),
        child.spec.fair_sharing.weight
    ))
}

/// A child as fair sharing sees it: its guarantee, what it uses, its weight.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sibling {
    pub name: String,
    pub hard: ResourceList,
    /// Keys it may borrow on (its `max`); use beyond hard elsewhere is not
    /// borrowing.
    pub max: ResourceList,
    pub used: ResourceList,
    pub weight: Weight,
}

impl Sibling {
    pub fn of(q: &Quota) -> Sibling {
        Sibling {
            name: q.name().to_string(),
            hard: q.spec.hard.clone(),
            max: q.spec.max.clone(),
            used: q.status.used.clone(),
            weight: q.spec.fair_sharing.weight,
        }
    }

    /// What it borrows while using `used`: use beyond hard on keys of max.
    pub fn borrowed_at(&self, used: &ResourceList) -> ResourceList {
        self.max
            .keys()
            .filter_map(|k| {
                let over = resources::get(used, k).saturating_sub(resources::get(&self.hard, k));
                (over.nanos() > 0).then(|| (k.clone(), over))
            })
            .collect()
    }

    pub fn borrowed(&self) -> ResourceList {
        self.borrowed_at(&self.used)
    }

    /// Its share now.
    pub fn share(&self, lendable: &ResourceList) -> Dominant {
        share(&self.borrowed(), lendable, self.weight)
    }

    /// Its share once `delta` more is used (negative amounts release).
    pub fn share_after(&self, delta: &ResourceList, lendable: &ResourceList) -> Dominant {
        let mut used = self.used.clone();
        resources::add_into(&mut used, delta);
        share(&self.borrowed_at(&used), lendable, self.weight)
    }

    /// What admitting `ask` would borrow beyond what it borrows now.
    pub fn more_borrowed(&self, ask: &ResourceList) -> ResourceList {
        let mut used = self.used.clone();
        resources::add_into(&mut used, ask);
        let after = self.borrowed_at(&used);
        let now = self.borrowed();
        after
            .iter()
            .filter_map(|(k, a)| {
                let more = a.saturating_sub(resources::get(&now, k));
                (more.nanos() > 0).then(|| (k.clone(), more))
            })
            .collect()
    }
}

/// A sibling's queue head as `pick` weighs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Head {
    /// What it uses once admitted.
    pub usage: ResourceList,
    pub priority: i32,
    /// When it queued (ms); earlier goes first.
    pub since_ms: i64,
}

/// `pick_key` with the name owned.
type OwnedKey = (Share, std::cmp::Reverse<i32>, i64, String);

/// The order `pick` puts contenders in: share after admission ascending,
/// then priority descending, then age (older first), then name.
fn pick_key<'a>(
    s: &'a Sibling,
    h: &Head,
    lendable: &ResourceList,
) -> (Share, std::cmp::Reverse<i32>, i64, &'a str) {
    (
        s.share_after(&h.usage, lendable).share,
        std::cmp::Reverse(h.priority),
        h.since_ms,
        s.name.as_str(),
    )
}

/// Which of the contenders' heads to admit first: the index of the one
/// whose share after admission is smallest (ties: higher priority, then
/// older, then name). None when there are none.
pub fn pick(contenders: &[(Sibling, Head)], lendable: &ResourceList) -> Option<usize> {
    (0..contenders.len()).min_by(|&a, &b| {
        let (sa, ha) = &contenders[a];
        let (sb, hb) = &contenders[b];
        pick_key(sa, ha, lendable).cmp(&pick_key(sb, hb, lendable))
    })
}

/// A sibling whose queue waits for room: its entries in its queue's
/// order (`heads[0]` is its head).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rival {
    pub sibling: Sibling,
    pub heads: Vec<Head>,
}

/// How `allot` shares the idle room between `own`'s asks and its rivals'.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allotment {
    /// How many of `own`'s asks, in order, get room.
    pub granted: usize,
    /// The rival that took room `own` would have wanted, if any: the last
    /// picked before `own` could go no further.
    pub rival: Option<usize>,
}

/// The idle room (`room`, what the parent could still lend `own`),
/// shared out one entry at a time by the pick rule between `own`'s asks
/// (in order) and each rival's queue (in its order): at each step the
/// entry whose quota's share after admission is smallest goes (ties:
/// priority, then age, then name), if it fits what is left; a queue whose
/// next entry does not fit stops there. An ask of `own` that borrows
/// nothing takes no room and is always granted; a rival's entry takes its
/// whole usage from the room (its idle guarantee is part of the room).
/// `granted` < `asks.len()` with a `rival`: leave the rest to the rivals.
/// With equal weights and enough demand this is water-filling: the room
/// ends divided so that no quota could take one more entry at a smaller
/// share than another's last.
pub fn allot(
    own: &Sibling,
    asks: &[Head],
    rivals: &[Rival],
    lendable: &ResourceList,
    room: &ResourceList,
) -> Allotment {
    let fits = |more: &ResourceList, room: &ResourceList| {
        more.iter().all(|(k, m)| room.get(k).is_none_or(|r| m <= r))
    };
    let mut own = own.clone();
    let mut room = room.clone();
    let mut others: Vec<(Sibling, usize)> = rivals.iter().map(|r| (r.sibling.clone(), 0)).collect();
    let mut granted = 0;
    let mut rival = None;
    while granted < asks.len() {
        let ask = &asks[granted];
        let mine = own.more_borrowed(&ask.usage);
        if mine.is_empty() {
            resources::add_into(&mut own.used, &ask.usage);
            granted += 1;
            continue;
        }
        // None: own's ask; Some(i): rival i's next entry.
        let mut best: Option<(OwnedKey, Option<usize>)> = None;
        if fits(&mine, &room) {
            let k = pick_key(&own, ask, lendable);
            best = Some(((k.0, k.1, k.2, k.3.to_string()), None));
        }
        for (i, (s, next)) in others.iter_mut().enumerate() {
            let Some(h) = rivals[i].heads.get(*next) else {
                continue;
            };
            if !fits(&h.usage, &room) {
                *next = usize::MAX; // its queue stops here
                continue;
            }
            let k = pick_key(s, h, lendable);
            let k = (k.0, k.1, k.2, k.3.to_string());
            if best.as_ref().is_none_or(|(b, _)| k < *b) {
                best = Some((k, Some(i)));
            }
        }
        match best {
            None => break,
            Some((_, None)) => {
                for (k, m) in &mine {
                    if let Some(r) = room.get_mut(k) {
                        *r = r.saturating_sub(*m);
                    }
                }
                resources::add_into(&mut own.used, &ask.usage);
                granted += 1;
            }
            Some((_, Some(i))) => {
                let (s, next) = &mut others[i];
                let h = &rivals[i].heads[*next];
                for (k, r) in room.iter_mut() {
                    *r = r.saturating_sub(resources::get(&h.usage, k));
                }
                resources::add_into(&mut s.used, &h.usage);
                *next += 1;
                rival = Some(i);
            }
        }
    }
    Allotment { granted, rival }
}

/// Whether a taker may reclaim `frees` from a victim: the taker, after
/// admitting `taker_ask`, against the victim after losing `frees`
/// (`LessThanOrEqualToFinalShare`: taker after ≤ victim after) or before
/// (`LessThanInitialShare`: taker after < victim before). A victim that
/// does not borrow is never taken from by fair sharing: its guarantee is
/// its own.
pub fn may_take(
    strategy: Strategy,
    taker: &Sibling,
    taker_ask: &ResourceList,
    victim: &Sibling,
    frees: &ResourceList,
    lendable: &ResourceList,
) -> bool {
    let before = victim.share(lendable).share;
    if before.is_zero() {
        return false;
    }
    let taker_after = taker.share_after(taker_ask, lendable).share;
    match strategy {
        Strategy::LessThanOrEqualToFinalShare => {
            let neg = resources::scale(frees, -1);
            taker_after <= victim.share_after(&neg, lendable).share
        }
        Strategy::LessThanInitialShare => taker_after < before,
    }
}

/// Indices of `siblings` in the order reclaim takes from them: the largest
/// share first (ties by name), those borrowing nothing left out.
pub fn by_largest_share(siblings: &[Sibling], lendable: &ResourceList) -> Vec<usize> {
    let mut out: Vec<(Share, &str, usize)> = siblings
        .iter()
        .enumerate()
        .map(|(i, s)| (s.share(lendable).share, s.name.as_str(), i))
        .filter(|(s, _, _)| !s.is_zero())
        .collect();
    out.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    out.into_iter().map(|(_, _, i)| i).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const CPU: &str = "requests.cpu";
    const GPU: &str = "requests.nvidia.com/gpu";

    fn list(pairs: &[(&str, i64)]) -> ResourceList {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), Quantity::from_units(*v)))
            .collect()
    }

    fn sib(name: &str, hard: i64, used: i64, weight: u32) -> Sibling {
        Sibling {
            name: name.into(),
            hard: list(&[(CPU, hard)]),
            max: list(&[(CPU, 1000)]),
            used: list(&[(CPU, used)]),
            weight: Weight::from_milli(weight * 1000).unwrap(),
        }
    }

    #[test]
    fn the_dominant_key_is_the_largest_fraction_of_what_can_be_lent() {
        let lend = list(&[(CPU, 100), (GPU, 8)]);
        let d = share(&list(&[(CPU, 20), (GPU, 4)]), &lend, Weight::ONE);
        assert_eq!(d.key.as_deref(), Some(GPU));
        assert_eq!(d.share.display(), "0.50");
        let d = share(&list(&[(CPU, 60), (GPU, 4)]), &lend, Weight::ONE);
        assert_eq!(d.key.as_deref(), Some(CPU));
        assert_eq!(d.share.display(), "0.60");
        assert_eq!(
            share(&ResourceList::new(), &lend, Weight::ONE),
            Dominant::ZERO
        );
        assert_eq!(
            share(&list(&[(CPU, 1)]), &lend, Weight::ZERO).share,
            Share::Infinite
        );
        assert_eq!(
            share(&list(&[(CPU, 1)]), &lend, Weight::ZERO)
                .share
                .display(),
            "∞"
        );
        // Nothing borrowed: zero, whatever the weight.
        assert!(share(&list(&[(CPU, 0)]), &lend, Weight::ZERO)
            .share
            .is_zero());
    }

    #[test]
    fn shares_compare_exactly_at_the_largest_amounts() {
        let big = Quantity::from_nanos(crate::quantity::MAX_NANOS);
        let lend: ResourceList = [(CPU.to_string(), big)].into();
        let a = share(&lend, &lend, Weight::ONE).share;
        let almost: ResourceList =
            [(CPU.to_string(), Quantity::from_nanos(big.nanos() - 1))].into();
        let b = share(&almost, &lend, Weight::ONE).share;
        assert!(b < a);
        assert_eq!(a.display(), "1.00");
        let w = Weight::from_milli(crate::object::fair_sharing::MAX_WEIGHT_MILLI).unwrap();
        assert!(share(&lend, &lend, w).share < b);
        assert_eq!(
            a.tenths_of(&share(&lend, &lend, Weight::from_milli(2000).unwrap()).share),
            Some(20)
        );
    }

    #[test]
    fn pick_takes_the_smallest_share_after_admission_then_priority_then_age() {
        let lend = list(&[(CPU, 100)]);
        let head = |n: i64, p: i32, t: i64| Head {
            usage: list(&[(CPU, n)]),
            priority: p,
            since_ms: t,
        };
        // a borrows 10 already; b none: b first, even asking more.
        let c = vec![
            (sib("a", 10, 20, 1), head(1, 0, 0)),
            (sib("b", 10, 10, 1), head(5, 0, 1)),
        ];
        assert_eq!(pick(&c, &lend), Some(1));
        // Equal after: priority, then age.
        let c = vec![
            (sib("a", 10, 10, 1), head(5, 0, 5)),
            (sib("b", 10, 10, 1), head(5, 9, 9)),
        ];
        assert_eq!(pick(&c, &lend), Some(1));
        let c = vec![
            (sib("a", 10, 10, 1), head(5, 0, 5)),
            (sib("b", 10, 10, 1), head(5, 0, 9)),
        ];
        assert_eq!(pick(&c, &lend), Some(0));
        // Weight 2 halves: a at 20 borrowed with weight 2 ties b at 10.
        let c = vec![
            (sib("a", 0, 18, 2), head(2, 0, 9)),
            (sib("b", 0, 8, 1), head(2, 0, 1)),
        ];
        assert_eq!(pick(&c, &lend), Some(1), "a tie goes to the older");
        assert_eq!(pick(&[], &lend), None);
    }

    #[test]
    fn allot_shares_the_room_by_the_pick_rule() {
        let lend = list(&[(CPU, 100)]);
        let head = |n: i64, t: i64| Head {
            usage: list(&[(CPU, n)]),
            priority: 0,
            since_ms: t,
        };
        let rival = |s: Sibling, asks: &[i64]| Rival {
            sibling: s,
            heads: asks.iter().map(|n| head(*n, 9)).collect(),
        };
        let a = sib("a", 10, 10, 1); // at its hard
        let asks: Vec<Head> = (0..10).map(|i| head(2, i)).collect();
        // Alone, a gets what fits the room.
        let got = allot(&a, &asks, &[], &lend, &list(&[(CPU, 12)]));
        assert_eq!(
            got,
            Allotment {
                granted: 6,
                rival: None
            }
        );
        // b at its hard too, as much demand: the 12 split 6 and 6 (a's
        // asks are older, so a goes first at each tie).
        let b = rival(sib("b", 10, 10, 1), &[2; 10]);
        let got = allot(
            &a,
            &asks,
            std::slice::from_ref(&b),
            &lend,
            &list(&[(CPU, 12)]),
        );
        assert_eq!(
            got,
            Allotment {
                granted: 3,
                rival: Some(0)
            }
        );
        // b already borrows 6: a gets all 12 up to b's level, and b none.
        let ahead = rival(sib("b", 10, 16, 1), &[2; 10]);
        let got = allot(&a, &asks, &[ahead], &lend, &list(&[(CPU, 12)]));
        assert_eq!(
            got,
            Allotment {
                granted: 5,
                rival: Some(0)
            }
        );
        // Asks within a's hard take no room and always pass.
        let idle = sib("a", 10, 0, 1);
        let got = allot(
            &idle,
            &asks[..5],
            std::slice::from_ref(&b),
            &lend,
            &list(&[(CPU, 0)]),
        );
        assert_eq!(
            got,
            Allotment {
                granted: 5,
                rival: None
            }
        );
        // A rival whose next entry cannot fit stops there.
        let big = rival(sib("b", 10, 10, 1), &[20, 2]);
        let got = allot(&a, &asks, &[big], &lend, &list(&[(CPU, 12)]));
        assert_eq!(got.granted, 6);
        // Weight 2 against 1: 8 and 4.
        let heavy = Sibling {
            weight: Weight::from_milli(2000).unwrap(),
            ..a.clone()
        };
        let got = allot(
            &heavy,
            &asks,
            std::slice::from_ref(&b),
            &lend,
            &list(&[(CPU, 12)]),
        );
        assert_eq!(got.granted, 4);
    }

    #[test]
    fn the_two_strategies() {
        let lend = list(&[(CPU, 100)]);
        let taker = sib("t", 10, 10, 1); // borrows 0
        let victim = sib("v", 10, 40, 1); // borrows 30
        let s = Strategy::LessThanOrEqualToFinalShare;
        // Taking 10 for 10: taker 0.10 ≤ victim 0.20 after.
        assert!(may_take(
            s,
            &taker,
            &list(&[(CPU, 10)]),
            &victim,
            &list(&[(CPU, 10)]),
            &lend
        ));
        // Taking 20 for 20: 0.20 > 0.10: no.
        assert!(!may_take(
            s,
            &taker,
            &list(&[(CPU, 20)]),
            &victim,
            &list(&[(CPU, 20)]),
            &lend
        ));
        // The initial strategy allows it: 0.20 < 0.30.
        let i = Strategy::LessThanInitialShare;
        assert!(may_take(
            i,
            &taker,
            &list(&[(CPU, 20)]),
            &victim,
            &list(&[(CPU, 20)]),
            &lend
        ));
        assert!(!may_take(
            i,
            &taker,
            &list(&[(CPU, 40)]),
            &victim,
            &list(&[(CPU, 30)]),
            &lend
        ));
        // A victim within its hard is never taken from.
        let within = sib("w", 10, 10, 1);
        assert!(!may_take(
            i,
            &taker,
            &list(&[(CPU, 1)]),
            &within,
            &list(&[(CPU, 1)]),
            &lend
        ));
    }

    #[test]
    fn a_parent_reads_each_childs_share_against_its_fair_line() {
        let child = |used: i64, w: u32| {
            let mut q = Quota::new(
                "c",
                crate::object::QuotaSpec {
                    parent: "p".into(),
                    hard: list(&[(CPU, 10)]),
                    max: list(&[(CPU, 100)]),
                    fair_sharing: crate::object::fair_sharing::FairSharing {
                        weight: Weight::from_milli(w).unwrap(),
                    },
                    ..Default::default()
                },
            );
            q.status.used = list(&[(CPU, used)]);
            q
        };
        let lend = list(&[(CPU, 100)]);
        // Two children of weight 1: the line is 50 borrowed (0.50).
        assert_eq!(
            against_line(&child(90, 1000), &lend, 2000).unwrap(),
            "share 0.80, 1.6× its fair line (weight 1)"
        );
        assert_eq!(
            against_line(&child(5, 1000), &lend, 2000).unwrap(),
            "share 0.00, 0.0× its fair line (weight 1)"
        );
        assert_eq!(
            against_line(&child(20, 0), &lend, 1000).unwrap(),
            "share ∞, above any fair line (weight 0)"
        );
        let mut fixed = child(0, 1000);
        fixed.spec.max.clear();
        assert_eq!(against_line(&fixed, &lend, 2000), None);
    }

    #[test]
    fn reclaim_takes_from_the_largest_share_first() {
        let lend = list(&[(CPU, 100)]);
        let s = vec![
            sib("a", 10, 20, 1),
            sib("b", 10, 40, 1),
            sib("c", 10, 5, 1),
            sib("d", 10, 40, 2),
        ];
        assert_eq!(by_largest_share(&s, &lend), vec![1, 3, 0]);
    }
}
