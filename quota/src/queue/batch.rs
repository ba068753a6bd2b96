//! A queue round's admissions written together (docs/queueing.md §4, "The
//! scheduler"): every admission of one quota charged, with its budget
//! reservation, and removed from `status.queue` **in one change**, so one
//! compare-and-swap of the quota carries a whole round, and the parent is
//! asked once for the loan the whole round rides on.
//!
//! Nothing is lost or charged twice, as with one admission at a time: an
//! entry leaves the queue only in the change that writes its charge, and
//! an entry no longer queued under its uid (admitted or deleted meanwhile)
//! is skipped.

use super::entries;
use crate::admission::Denial;
use crate::borrow::{self, Lent, LoanRequest};
use crate::budget::price_list::PriceList;
use crate::budget::reservations;
use crate::cash::QosMultipliers;
use crate::object::{Charge, Quota};
use crate::resources::{self, ResourceList};

/// One admission of a round: the entry `(workload_ref, uid)` and the
/// charge it is admitted with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Admit {
    pub workload_ref: String,
    pub uid: String,
    pub charge: Charge,
}

/// What one change of the quota did with a round's admissions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Batch {
    /// Written in this change: the admitted references (charged, entry
    /// removed, reservations made), those no longer queued (skipped), and
    /// those left queued with why (they did not fit what the change saw).
    Done {
        admitted: Vec<String>,
        gone: Vec<String>,
        left: Vec<(String, Denial)>,
    },
    /// Some admissions need a loan beyond what `loan` gives: ask the parent
    /// this (for all of them that fit under `max` together, in order) and
    /// write nothing yet.
    Borrow(Box<LoanRequest>),
}

/// Carry out `items`, in their order, in `q` (call inside its
/// compare-and-swap). `loan`: the parent's answer to the round's request
/// (`None` before asking). A quota that may borrow and needs a loan for
/// any of them, asked nothing yet, gets `Batch::Borrow` with one request
/// for the longest prefix of them whose total fits under its `max`; with a
/// loan, each admission is charged within hard + loan in order
/// (`borrow::charge_or_request`), and what no longer fits stays queued.
pub fn admit(
    q: &mut Quota,
    items: &[Admit],
    loan: Option<&Lent>,
    now_ms: i64,
    qos: &QosMultipliers,
    prices: &PriceList,
) -> Batch {
    let may_borrow = !q.spec.max.is_empty() && !q.spec.parent.is_empty();
    if loan.is_none() && may_borrow {
        // Try it on a copy: if anything needs a loan, ask for the round's.
        // The copy's queue holds only the round's own entries: the rest
        // decides nothing here, and a queue of hundreds was most of the
        // copy.
        let queue = std::mem::take(&mut q.status.queue);
        let mut trial = q.clone();
        let named: std::collections::HashSet<&str> =
            items.iter().map(|a| a.workload_ref.as_str()).collect();
        trial.status.queue = queue
            .iter()
            .filter(|e| named.contains(e.work.workload_ref.as_str()))
            .cloned()
            .collect();
        q.status.queue = queue;
        if let Batch::Done { left, .. } = charge_all(&mut trial, items, None, now_ms, qos, prices) {
            if !left.is_empty() {
                // What the budget refuses is never charged: no loan for it.
                let refused: Vec<&str> = left
                    .iter()
                    .filter(|(_, d)| matches!(d, Denial::Budget(_)))
                    .map(|(w, _)| w.as_str())
                    .collect();
                if let Some(req) = round_request(q, items, &refused) {
                    return Batch::Borrow(Box::new(req));
                }
            }
        }
    }
    charge_all(q, items, loan, now_ms, qos, prices)
}

/// The loan request for the longest prefix of `items` (still queued, not
/// in `refused` by the budget) whose
/// total delta fits under `q`'s max; None when none needs a loan.
fn round_request(q: &Quota, items: &[Admit], refused: &[&str]) -> Option<LoanRequest> {
    let mut total = ResourceList::new();
    let mut best = None;
    for a in items {
        if refused.contains(&a.workload_ref.as_str())
            || entries::find(q, &a.workload_ref, &a.uid).is_none()
        {
            continue;
        }
        let old = q
            .status
            .workloads
            .get(&a.workload_ref)
            .map(Charge::usage)
            .unwrap_or_default();
        let delta = resources::diff(&a.charge.usage(), &old);
        let mut next = total.clone();
        resources::add_into(&mut next, &delta);
        match borrow::needed(q, &next) {
            Ok(req) => {
                total = next;
                if req.is_some() {
                    best = req;
                }
            }
            // Past max together: the rest of the round waits for the next.
            Err(_) => break,
        }
    }
    best
}

fn charge_all(
    q: &mut Quota,
    items: &[Admit],
    loan: Option<&Lent>,
    now_ms: i64,
    qos: &QosMultipliers,
    prices: &PriceList,
) -> Batch {
    let mut admitted = Vec::new();
    let mut gone = Vec::new();
    let mut left = Vec::new();
    for a in items {
        let wref = a.workload_ref.as_str();
        let Some(entry) = entries::find(q, wref, &a.uid) else {
            gone.push(a.workload_ref.clone());
            continue;
        };
        // The budget first: a refusal changes nothing.
        let run = reservations::RunDecl::Object(Ok(entry.work.run_ms));
        let by = entry
            .work
            .submitted_by
            .as_deref()
            .and_then(crate::submitters::submitter);
        let old = q.status.workloads.get(wref).cloned();
        let reserved =
            match reservations::decide(q, wref, old.as_ref(), &a.charge, &run, now_ms, qos, prices)
            {
                Ok(r) => r,
                Err(r) => {
                    left.push((a.workload_ref.clone(), Denial::Budget(Box::new(r))));
                    continue;
                }
            };
        match borrow::charge_or_request(q, wref, a.charge.clone(), loan) {
            Ok(_) => {
                entries::dequeue(q, wref);
                reservations::apply(&mut q.status, wref, reserved);
                // Who submitted it asked for this charge: the ledger's
                // entries carry it (docs/budgets.md §6).
                match by {
                    Some(u) => {
                        q.status.users.insert(wref.to_string(), u);
                    }
                    None => {
                        q.status.users.remove(wref);
                    }
                }
                admitted.push(a.workload_ref.clone());
            }
            Err((d, _)) => left.push((a.workload_ref.clone(), d)),
        }
    }
    Batch::Done {
        admitted,
        gone,
        left,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::queue::{Queued, Waiting};
    use crate::object::QuotaSpec;
    use crate::quantity::Quantity;
    use crate::workload::PodSet;

    const CPU: &str = "requests.cpu";

    fn child(hard: i64, max: Option<i64>) -> Quota {
        Quota::new(
            "kid",
            QuotaSpec {
                parent: if max.is_some() {
                    "org".into()
                } else {
                    String::new()
                },
                hard: [(CPU.to_string(), Quantity::from_units(hard))].into(),
                max: max
                    .map(|m| [(CPU.to_string(), Quantity::from_units(m))].into())
                    .unwrap_or_default(),
                ..Default::default()
            },
        )
    }

    fn work(name: &str, cpu: i64) -> Queued {
        Queued {
            workload_ref: format!("batch/Job/ml/{name}"),
            uid: format!("u-{name}"),
            priority: 0,
            priority_classes: Vec::new(),
            submitted_ms: 1_000,
            pod_sets: vec![PodSet {
                name: "main".into(),
                count: 1,
                per_pod: [(CPU.to_string(), Quantity::from_units(cpu))].into(),
                qos: None,
            }]
            .into(),
            run_ms: None,
            submitted_by: Some("alice".into()),
            preempted: false,
        }
    }

    fn queued(q: &mut Quota, w: &Queued) {
        entries::enqueue(q, w.clone(), 0, Waiting::Quota, String::new()).unwrap();
    }

    fn item(w: &Queued) -> Admit {
        Admit {
            workload_ref: w.workload_ref.clone(),
            uid: w.uid.clone(),
            charge: Charge {
                uid: crate::queue::request_uid(w),
                pod_sets: w.pod_sets.to_vec(),
                hpa: None,
                since: "2027-01-01T00:00:00.000Z".into(),
                admitted: Some("2027-01-01T00:00:01.000Z".into()),
            },
        }
    }

    fn used(q: &Quota) -> Quantity {
        resources::get(&q.status.used, CPU)
    }

    fn run(q: &mut Quota, items: &[Admit], loan: Option<&ResourceList>) -> Batch {
        // A grant the child has not fenced, as every fresh answer is.
        let loan = loan.map(|amount| Lent {
            amount: amount.clone(),
            generation: q.status.loan_fence + 1,
        });
        admit(
            q,
            items,
            loan.as_ref(),
            2_000,
            &QosMultipliers::default(),
            &PriceList::default(),
        )
    }

    #[test]
    fn a_round_within_hard_is_one_change_charge_and_dequeue_together() {
        let mut q = child(10, None);
        let ws: Vec<Queued> = (0..4).map(|i| work(&format!("j{i}"), 3)).collect();
        for w in &ws {
            queued(&mut q, w);
        }
        let items: Vec<Admit> = ws.iter().map(item).collect();
        let Batch::Done {
            admitted,
            gone,
            left,
        } = run(&mut q, &items, None)
        else {
            panic!("no loan needed within hard")
        };
        // Three of 3 fit in 10; the fourth stays queued, never over-admitted.
        assert_eq!(admitted.len(), 3);
        assert!(gone.is_empty());
        assert_eq!(left.len(), 1);
        assert_eq!(used(&q), Quantity::from_units(9));
        assert_eq!(q.status.queue.len(), 1);
        assert_eq!(q.status.queue[0].work.workload_ref, ws[3].workload_ref);
        // Nothing both charged and queued, nothing in neither place.
        for w in &ws {
            let charged = q.status.workloads.contains_key(&w.workload_ref);
            let waits = entries::holds(&q, &w.workload_ref);
            assert!(
                charged ^ waits,
                "{} charged {charged} queued {waits}",
                w.workload_ref
            );
        }
        assert_eq!(
            q.status.users.get(&ws[0].workload_ref).map(String::as_str),
            Some("alice")
        );
    }

    #[test]
    fn a_retried_round_changes_nothing_and_a_gone_entry_is_skipped() {
        let mut q = child(10, None);
        let (a, b) = (work("a", 2), work("b", 2));
        queued(&mut q, &a);
        queued(&mut q, &b);
        let items = vec![item(&a), item(&b)];
        assert!(
            matches!(run(&mut q, &items, None), Batch::Done { ref admitted, .. } if admitted.len() == 2)
        );
        let after = q.clone();
        // The same round again (a lost answer, a retried compare-and-swap):
        // nothing is charged twice.
        let Batch::Done { admitted, gone, .. } = run(&mut q, &items, None) else {
            panic!()
        };
        assert!(admitted.is_empty());
        assert_eq!(gone.len(), 2);
        assert_eq!(q.status.workloads, after.status.workloads);
        assert_eq!(used(&q), Quantity::from_units(4));
    }

    #[test]
    fn a_borrowing_round_asks_the_parent_once_for_all_of_it() {
        let mut q = child(4, Some(12));
        let ws: Vec<Queued> = (0..5).map(|i| work(&format!("j{i}"), 3)).collect();
        for w in &ws {
            queued(&mut q, w);
        }
        let items: Vec<Admit> = ws.iter().map(item).collect();
        let before = q.clone();
        // 15 asked, 12 at most: the request covers the first four (12),
        // and nothing is written before the parent answers.
        let Batch::Borrow(req) = run(&mut q, &items, None) else {
            panic!("a loan is needed")
        };
        assert_eq!(q, before);
        assert_eq!(resources::get(&req.want, CPU), Quantity::from_units(8));
        // The parent lends 8: four admitted in one change, the fifth waits.
        let loan: ResourceList = [(CPU.to_string(), Quantity::from_units(8))].into();
        let Batch::Done { admitted, left, .. } = run(&mut q, &items, Some(&loan)) else {
            panic!()
        };
        assert_eq!(admitted.len(), 4);
        assert_eq!(left.len(), 1);
        assert_eq!(used(&q), Quantity::from_units(12));
        // The parent lends less (a sibling took the room): what fits within
        // hard + that loan, in order, and no more.
        let mut q = before.clone();
        let loan: ResourceList = [(CPU.to_string(), Quantity::from_units(2))].into();
        let Batch::Done { admitted, .. } = run(&mut q, &items, Some(&loan)) else {
            panic!()
        };
        assert_eq!(admitted.len(), 2);
        assert_eq!(used(&q), Quantity::from_units(6));
    }

    /// The short-loan path of the scheduler's round (`Service::admit_round`):
    /// the parent refuses the round's loan, so the round asks for nothing
    /// more, which cuts the loan the child holds to what the parent still
    /// backs (a sibling took its guarantee back) and renews it; the round
    /// then admits, in order, only what fits within hard + that cut loan —
    /// never against the stale stored loan.
    #[test]
    fn a_short_loan_admits_within_hard_and_the_loan_still_backed_only() {
        use crate::admission;
        let cpu = |n: i64| -> ResourceList { [(CPU.to_string(), Quantity::from_units(n))].into() };
        let mut parent = Quota::new(
            "org",
            QuotaSpec {
                hard: cpu(10),
                ..Default::default()
            },
        );
        crate::tree::carve(&mut parent, "kid", &cpu(4), "2026-01-01T00:00:00Z").unwrap();
        crate::tree::carve(&mut parent, "sib", &cpu(6), "2026-01-01T00:00:00Z").unwrap();
        let mut kid = child(4, Some(12));
        let mut sib = Quota::new(
            "sib",
            QuotaSpec {
                parent: "org".into(),
                hard: cpu(6),
                ..Default::default()
            },
        );
        // While sib was idle the kid was lent 6 (fully backed then).
        let idle_sib = borrow::Standing::of_all([&kid, &sib]);
        let first = LoanRequest {
            child: "kid".into(),
            want: cpu(6),
            asked: cpu(6),
            hard: cpu(4),
            used: ResourceList::new(),
            max: cpu(12),
            fence: 0,
        };
        borrow::lend(&mut parent, &first, &idle_sib, 1_000).unwrap();
        assert_eq!(borrow::loan_of(&parent, "kid"), cpu(6));
        // sib takes 4 of its guarantee back: only 2 of the loan is backed.
        admission::charge(
            &mut sib,
            "batch/Job/web/s",
            Charge {
                pod_sets: work("s", 4).pod_sets.to_vec(),
                hpa: None,
                since: "2027-01-01T00:00:00.000Z".into(),
                uid: String::new(),
                admitted: None,
            },
        )
        .unwrap();
        let now = borrow::Standing::of_all([&kid, &sib]);
        // The round: three Jobs of 3 (9 = hard 4 + 5 borrowed).
        let ws: Vec<Queued> = (0..3).map(|i| work(&format!("j{i}"), 3)).collect();
        for w in &ws {
            queued(&mut kid, w);
        }
        let items: Vec<Admit> = ws.iter().map(item).collect();
        let Batch::Borrow(req) = run(&mut kid, &items, None) else {
            panic!("a loan is needed")
        };
        assert!(
            borrow::lend(&mut parent, &req, &now, 2_000).is_err(),
            "short"
        );
        let mut keep = (*req).clone();
        for want in keep.want.values_mut() {
            *want = Quantity::ZERO;
        }
        // Cutting the loan is a return: the kid is fenced at its grant
        // first (a charge may still ride it), then asks again.
        let granted = parent.status.loans["kid"].generation;
        assert_eq!(
            borrow::lend(&mut parent, &keep, &now, 2_000).unwrap(),
            borrow::Lending::FenceFirst(granted)
        );
        borrow::fence(&mut kid, granted);
        keep.fence = kid.status.loan_fence;
        assert_eq!(
            borrow::lend(&mut parent, &keep, &now, 2_000).unwrap(),
            borrow::Lending::Granted
        );
        let loan = borrow::loan_of(&parent, "kid");
        assert_eq!(loan, cpu(2), "cut to what is backed, not the stored 6");
        let Batch::Done { admitted, left, .. } = run(&mut kid, &items, Some(&loan)) else {
            panic!()
        };
        // hard 4 + loan 2 = 6: two Jobs of 3, the third waits.
        assert_eq!(admitted.len(), 2);
        assert_eq!(left.len(), 1);
        assert_eq!(used(&kid), Quantity::from_units(6));
        // The parent is never past its hard: sib 4 + kid's hard 4 + loan 2.
        parent.status.refresh(&parent.spec);
        let claimed = resources::get(&sib.status.used, CPU)
            .saturating_add(Quantity::from_units(4))
            .saturating_add(resources::get(&loan, CPU));
        assert!(claimed <= Quantity::from_units(10));
    }

    proptest::proptest! {
        /// The trial of a borrowing round decides as a trial on the whole
        /// quota: the entries it leaves out of its copy decide nothing.
        #[test]
        fn the_trial_on_the_rounds_entries_decides_as_on_the_whole_queue(
            queue in proptest::collection::vec(1i64..30, 0..16),
            picked in proptest::collection::vec(0usize..20, 0..10),
            gone in proptest::collection::vec(0usize..20, 0..3),
            hard in 0i64..40,
        ) {
            let mut q = child(hard, Some(100));
            let ws: Vec<Queued> =
                queue.iter().enumerate().map(|(i, c)| work(&format!("j{i}"), *c)).collect();
            for w in &ws {
                queued(&mut q, w);
            }
            let mut items: Vec<Admit> =
                picked.iter().filter_map(|i| ws.get(*i)).map(item).collect();
            // Items no longer queued (gone), too.
            items.extend(gone.iter().map(|i| item(&work(&format!("gone{i}"), 1))));
            let mut whole = q.clone();
            let want = charge_all(
                &mut whole,
                &items,
                None,
                2_000,
                &QosMultipliers::default(),
                &PriceList::default(),
            );
            let mut real = q.clone();
            let got = run(&mut real, &items, None);
            let left_whole = match &want {
                Batch::Done { left, .. } => left,
                Batch::Borrow(_) => unreachable!("no loan asked on a trial"),
            };
            let needs_loan = left_whole.iter().any(|(_, d)| !matches!(d, Denial::Budget(_)));
            let expect = if needs_loan { round_request(&q, &items, &[]) } else { None };
            match got {
                Batch::Borrow(req) => {
                    proptest::prop_assert_eq!(Some(*req), expect);
                    proptest::prop_assert_eq!(&real, &q, "a request changes nothing");
                }
                Batch::Done { .. } => {
                    proptest::prop_assert!(expect.is_none());
                    proptest::prop_assert_eq!(&real, &whole, "charged as without a trial");
                }
            }
        }
    }
}
