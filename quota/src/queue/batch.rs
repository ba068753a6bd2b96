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

use super::ledger;
use crate::admission::Denial;
use crate::borrow::{self, LoanRequest};
use crate::budget::hold;
use crate::budget::price::PriceList;
use crate::cash::Prices;
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
    loan: Option<&ResourceList>,
    now_ms: i64,
    qos: &Prices,
    prices: &PriceList,
) -> Batch {
    let may_borrow = !q.spec.max.is_empty() && !q.spec.parent.is_empty();
    if loan.is_none() && may_borrow {
        // Try it on a copy: if anything needs a loan, ask for the round's.
        let mut trial = q.clone();
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
            || ledger::find(q, &a.workload_ref, &a.uid).is_none()
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
    loan: Option<&ResourceList>,
    now_ms: i64,
    qos: &Prices,
    prices: &PriceList,
) -> Batch {
    let mut admitted = Vec::new();
    let mut gone = Vec::new();
    let mut left = Vec::new();
    for a in items {
        let wref = a.workload_ref.as_str();
        let Some(entry) = ledger::find(q, wref, &a.uid) else {
            gone.push(a.workload_ref.clone());
            continue;
        };
        // The budget first: a refusal changes nothing.
        let run = hold::RunDecl::Object(Ok(entry.work.run_ms));
        let by = entry.work.submitted_by.clone();
        let old = q.status.workloads.get(wref).cloned();
        let reserved =
            match hold::decide(q, wref, old.as_ref(), &a.charge, &run, now_ms, qos, prices) {
                Ok(r) => r,
                Err(r) => {
                    left.push((a.workload_ref.clone(), Denial::Budget(Box::new(r))));
                    continue;
                }
            };
        match borrow::charge_or_request(q, wref, a.charge.clone(), loan) {
            Ok(_) => {
                ledger::dequeue(q, wref);
                hold::apply(&mut q.status, wref, reserved);
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
    use crate::object::QuotaSpec;
    use crate::quantity::Quantity;
    use crate::queue::{Queued, Waiting};
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
            }],
            run_ms: None,
            submitted_by: Some("alice".into()),
            preempted: false,
        }
    }

    fn queued(q: &mut Quota, w: &Queued) {
        ledger::enqueue(q, w.clone(), 0, Waiting::Quota, String::new()).unwrap();
    }

    fn item(w: &Queued) -> Admit {
        Admit {
            workload_ref: w.workload_ref.clone(),
            uid: w.uid.clone(),
            charge: Charge {
                uid: crate::queue::request_uid(w),
                pod_sets: w.pod_sets.clone(),
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
        admit(
            q,
            items,
            loan,
            2_000,
            &Prices::default(),
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
            let waits = ledger::holds(&q, &w.workload_ref);
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
}
