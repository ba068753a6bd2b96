//! Fair sharing's invariants (`quota::fair`): a weight scales the share,
//! a child within its guarantee has none, and admitting by the pick rule
//! divides idle capacity equally — in proportion to the weights with
//! weights.

use proptest::prelude::*;
use quota::fair::{self, Head, Share, Sibling};
use quota::object::fair_sharing::Weight;
use quota::quantity::Quantity;
use quota::resources::{self, ResourceList};

const CPU: &str = "requests.cpu";
const GPU: &str = "requests.nvidia.com/gpu";

fn list(pairs: &[(&str, i64)]) -> ResourceList {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), Quantity::from_units(*v)))
        .collect()
}

fn sibling(name: &str, hard: i64, used: i64, weight_milli: u32) -> Sibling {
    Sibling {
        name: name.into(),
        hard: list(&[(CPU, hard)]),
        max: list(&[(CPU, i64::MAX / 2)]),
        used: list(&[(CPU, used)]),
        weight: Weight::from_milli(weight_milli).unwrap(),
    }
}

/// Admit one unit at a time to whichever sibling `pick` puts first, until
/// `room` units of the parent's lendable capacity are gone. Every sibling
/// always has a unit waiting (enough demand).
fn simulate(sibs: &mut [Sibling], lendable: &ResourceList, room: i64) {
    let one = list(&[(CPU, 1)]);
    for _ in 0..room {
        let contenders: Vec<(Sibling, Head)> = sibs
            .iter()
            .map(|s| {
                (
                    s.clone(),
                    Head {
                        usage: one.clone(),
                        priority: 0,
                        since_ms: 0,
                    },
                )
            })
            .collect();
        let i = fair::pick(&contenders, lendable).unwrap();
        resources::add_into(&mut sibs[i].used, &one);
    }
}

fn borrowed_units(s: &Sibling) -> i64 {
    (resources::get(&s.borrowed(), CPU).nanos() / 1_000_000_000) as i64
}

proptest! {
    #[test]
    fn doubling_a_weight_halves_the_share(
        cpu in 1i64..1_000_000, gpu in 0i64..64,
        lend_cpu in 1i64..10_000_000, lend_gpu in 1i64..128,
        w in 1u32..=500_000,
    ) {
        let borrowed = list(&[(CPU, cpu), (GPU, gpu)]);
        let lend = list(&[(CPU, lend_cpu), (GPU, lend_gpu)]);
        let one = fair::share(&borrowed, &lend, Weight::from_milli(w).unwrap());
        let two = fair::share(&borrowed, &lend, Weight::from_milli(2 * w).unwrap());
        prop_assert_eq!(&one.key, &two.key);
        let Share::Ratio { num, den } = two.share else {
            panic!("finite weights give finite shares");
        };
        // one = 2 × two, exactly.
        prop_assert_eq!(one.share.cmp(&Share::Ratio { num: 2 * num, den }), std::cmp::Ordering::Equal);
        prop_assert!(two.share < one.share);
    }

    #[test]
    fn a_child_within_its_hard_has_share_zero(
        hard in 0i64..1_000_000, below in 0i64..1_000_000, w in 0u32..=1_000_000,
        lend in 0i64..1_000_000,
    ) {
        let s = sibling("a", hard, hard - below.min(hard), w);
        let lend = list(&[(CPU, lend)]);
        prop_assert!(s.share(&lend).share.is_zero());
        prop_assert_eq!(s.share(&lend).key, None);
    }

    #[test]
    fn equal_weights_converge_to_equal_borrowing(
        n in 2usize..=5, room in 1i64..200,
        hards in proptest::collection::vec(0i64..50, 5),
        start in proptest::collection::vec(0i64..3, 5),
    ) {
        let lend = list(&[(CPU, 1000)]);
        // Each starts at its hard plus at most 2 borrowed already.
        let mut sibs: Vec<Sibling> = (0..n)
            .map(|i| sibling(&format!("c{i}"), hards[i], hards[i] + start[i], 1000))
            .collect();
        let total: i64 = start[..n].iter().sum::<i64>() + room;
        simulate(&mut sibs, &lend, room);
        let b: Vec<i64> = sibs.iter().map(borrowed_units).collect();
        prop_assert_eq!(b.iter().sum::<i64>(), total);
        let (lo, hi) = (*b.iter().min().unwrap(), *b.iter().max().unwrap());
        // Within one unit, once the room covers where they started.
        if room >= 3 * n as i64 {
            prop_assert!(hi - lo <= 1, "{:?}", b);
        }
        // Never does the pick rule widen a gap: the largest is at most
        // where the largest started, or within one of the smallest.
        prop_assert!(hi <= (*start[..n].iter().max().unwrap()).max(lo + 1), "{:?}", b);
    }

    #[test]
    fn weights_divide_borrowing_in_proportion(
        weights in proptest::collection::vec(1u32..=4, 2..=4), room in 1i64..300,
    ) {
        let lend = list(&[(CPU, 1000)]);
        let mut sibs: Vec<Sibling> = weights
            .iter()
            .enumerate()
            .map(|(i, w)| sibling(&format!("c{i}"), 10, 10, w * 1000))
            .collect();
        simulate(&mut sibs, &lend, room);
        let b: Vec<i64> = sibs.iter().map(borrowed_units).collect();
        let wsum: i64 = weights.iter().map(|w| *w as i64).sum();
        prop_assert_eq!(b.iter().sum::<i64>(), room);
        for (i, bi) in b.iter().enumerate() {
            let wi = weights[i] as i64;
            // The greedy invariant: no one's last unit came at a larger
            // share than another's next would: b_i/w_i ≤ (b_j + 1)/w_j.
            // Hence each is within w_i units of its line room·w_i/Σw.
            for (j, bj) in b.iter().enumerate() {
                let wj = weights[j] as i64;
                prop_assert!(bi * wj <= (bj + 1) * wi, "{:?} {:?}", b, weights);
            }
            let line = room * wi; // × 1/Σw
            prop_assert!((bi * wsum - line).abs() <= wsum * wi, "{:?} {:?}", b, weights);
        }
    }

    #[test]
    fn a_weight_of_zero_borrows_only_what_no_one_else_wants(room in 1i64..50) {
        let lend = list(&[(CPU, 100)]);
        let mut sibs = vec![sibling("a", 5, 5, 0), sibling("b", 5, 5, 1000)];
        simulate(&mut sibs, &lend, room);
        prop_assert_eq!(borrowed_units(&sibs[0]), 0);
        prop_assert_eq!(borrowed_units(&sibs[1]), room);
    }
}

#[test]
fn two_to_one_with_weights_two_and_one() {
    let lend = list(&[(CPU, 120)]);
    let mut sibs = vec![sibling("a", 20, 20, 2000), sibling("b", 20, 20, 1000)];
    simulate(&mut sibs, &lend, 30);
    assert_eq!(
        sibs.iter().map(borrowed_units).collect::<Vec<_>>(),
        vec![20, 10]
    );
}
