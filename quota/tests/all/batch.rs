//! Group commit (quota::batch): a batch of admissions to one quota, decided
//! in order on one copy and written once, decides exactly what the
//! one-at-a-time path decides for the same order — the path that copies the
//! quota, decides one change, and writes it only if it changed something.
//! And a batch whose write fails tells nobody "allowed".

use proptest::prelude::*;
use quota::admission::{self, Denial};
use quota::batch::{self, Verdict};
use quota::borrow;
use quota::object::{Charge, Quota, QuotaSpec};
use quota::quantity::Quantity;
use quota::resources::ResourceList;
use quota::time;
use quota::workload::PodSet;

const CPU: &str = "requests.cpu";
const GPU: &str = "requests.nvidia.com/gpu";
const T0: i64 = 1_800_000_000_000;

fn list(cpu: i64, gpu: i64) -> ResourceList {
    [
        (CPU.to_string(), Quantity::from_units(cpu)),
        (GPU.to_string(), Quantity::from_units(gpu)),
    ]
    .into()
}

/// What an admission asks of the quota, as the service's jobs do.
#[derive(Clone, Debug)]
enum Op {
    /// `charge_workload`: this workload at this size (the difference from
    /// what it holds), with the loan the parent granted, if any.
    Charge {
        w: usize,
        count: i64,
        cpu: i64,
        gpu: i64,
        loan: Option<(i64, i64)>,
    },
    /// `release_workload`: give back what it holds.
    Release { w: usize },
    /// A scale of a held workload (`change_held`): no charge when not held.
    Scale { w: usize, count: i64 },
}

#[derive(Debug, PartialEq, Eq)]
enum Answer {
    Applied(bool),
    Released(bool),
}

/// One decision, the same closure the batched and the one-at-a-time paths
/// run (the service's admission jobs call these rules in this way).
fn decide(op: &mut Op, q: &mut Quota, now: i64) -> Verdict<Answer, Denial> {
    let wref = |w: &usize| format!("apps/Deployment/ns/w{w}");
    match op {
        Op::Charge {
            w,
            count,
            cpu,
            gpu,
            loan,
        } => {
            let wref = wref(w);
            let old = q.status.workloads.get(&wref);
            let c = Charge {
                pod_sets: vec![PodSet {
                    name: "main".into(),
                    count: *count,
                    per_pod: list(*cpu, *gpu),
                    qos: None,
                }],
                hpa: old.and_then(|c| c.hpa.clone()),
                since: time::format_rfc3339(now),
                uid: format!("uid-{w}"),
                admitted: Some(time::format_rfc3339(now)),
            };
            let loan = loan.map(|(c, g)| borrow::Lent {
                amount: list(c, g),
                generation: 1,
            });
            match borrow::charge_or_request(q, &wref, c, loan.as_ref()) {
                Ok(changed) => Ok((changed, Answer::Applied(true))),
                Err((d, _request)) => Err(d),
            }
        }
        Op::Release { w } => {
            let released = admission::release(q, &wref(w));
            Ok((released, Answer::Released(released)))
        }
        Op::Scale { w, count } => {
            let wref = wref(w);
            let Some(old) = q.status.workloads.get(&wref) else {
                return Ok((false, Answer::Applied(false)));
            };
            let mut c = old.clone();
            c.pod_sets[0].count = *count;
            c.admitted = Some(time::format_rfc3339(now));
            match admission::charge(q, &wref, c) {
                Ok(changed) => Ok((changed, Answer::Applied(true))),
                Err(d) => Err(d),
            }
        }
    }
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0usize..6, 0i64..5, 0i64..4, 0i64..3, proptest::option::of((0i64..6, 0i64..4)))
            .prop_map(|(w, count, cpu, gpu, loan)| Op::Charge { w, count, cpu, gpu, loan }),
        2 => (0usize..6).prop_map(|w| Op::Release { w }),
        1 => (0usize..6, 0i64..6).prop_map(|(w, count)| Op::Scale { w, count }),
    ]
}

/// A quota with a ledger already in it; sometimes its hard lowered since
/// (derived status stale, usage over hard), sometimes with a max to borrow.
fn start() -> impl Strategy<Value = Quota> {
    (
        0i64..12,
        0i64..8,
        proptest::option::of((0i64..8, 0i64..4)),
        proptest::collection::vec(op(), 0..6),
        proptest::option::of((0i64..6, 0i64..4)),
    )
        .prop_map(|(cpu, gpu, max, seed, lowered)| {
            let mut q = Quota::new(
                "team",
                QuotaSpec {
                    parent: "dept".into(),
                    hard: list(cpu, gpu),
                    max: max.map(|(c, g)| list(cpu + c, gpu + g)).unwrap_or_default(),
                    budgets: Default::default(),
                    queueing: Default::default(),
                    fair_sharing: Default::default(),
                    idle: None,
                },
            );
            for mut o in seed {
                let _ = decide(&mut o, &mut q, T0 - 60_000);
            }
            if let Some((c, g)) = lowered {
                // Spec changed, status not refreshed yet (as read from a
                // store after a spec write by another path).
                q.spec.hard = list(c, g);
                q.spec.max = Default::default();
            }
            q
        })
}

/// The one-at-a-time path: for each change, a copy of the quota as last
/// written; the change decided on the copy; the copy written (kept) only
/// if the decision changed something.
fn one_at_a_time(mut q: Quota, ops: &mut [Op]) -> (Quota, Vec<Verdict<Answer, Denial>>) {
    let mut verdicts = Vec::new();
    for o in ops.iter_mut() {
        let mut copy = q.clone();
        let v = decide(o, &mut copy, T0);
        if matches!(v, Ok((true, _))) {
            q = copy;
        }
        verdicts.push(v);
    }
    (q, verdicts)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn batched_decisions_equal_one_at_a_time(q in start(), ops in proptest::collection::vec(op(), 0..24)) {
        let (seq_q, seq) = one_at_a_time(q.clone(), &mut ops.clone());
        let mut batched = q.clone();
        let mut jobs = ops.clone();
        let d = batch::decide_in_order(&mut batched, &mut jobs, |o, q| decide(o, q, T0));
        prop_assert_eq!(&d.verdicts, &seq);
        let seq_changed = seq.iter().any(|v| matches!(v, Ok((true, _))));
        prop_assert_eq!(d.changed(), seq_changed);
        if d.changed() {
            // What the batch writes once is what the last one-at-a-time
            // write left.
            prop_assert_eq!(&batched.status, &seq_q.status);
        }
    }

    #[test]
    fn a_failed_batch_write_tells_nobody_allowed(q in start(), ops in proptest::collection::vec(op(), 1..24)) {
        let mut batched = q;
        let mut jobs = ops;
        let d = batch::decide_in_order(&mut batched, &mut jobs, |o, q| decide(o, q, T0));
        let n = d.verdicts.len();
        let lost = Denial::Invalid("the write failed".into());
        let answers = d.answer(Err(lost.clone()), |e| e.clone());
        prop_assert_eq!(answers.len(), n);
        for a in answers {
            prop_assert_eq!(a, Err(lost.clone()));
        }
    }
}
