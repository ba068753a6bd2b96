//! A borrowing quota's round under fair sharing (docs/queueing.md, "Fair
//! sharing"): of the round's admissions, those that borrow are weighed
//! against the siblings whose queue heads also wait for the parent's idle
//! room (`fair::allot`). An admission the room, shared out by the pick
//! rule, does not give the quota is turned into a wait (`Reason::Fair`),
//! and so is every later one: the room is left for the sibling, whose round the caller
//! triggers. Admissions within the quota's own hard are never held back.

use super::admit::{Decision, Wait};
use super::reason::{FairTurn, Reason};
use crate::borrow::{self, Standing};
use crate::fair::{self, Head, Rival, Share, Sibling};
use crate::object::queue::Queued;
use crate::object::queue::Waiting;
use crate::object::Quota;
use crate::resources::{self, ResourceList};

/// What fair sharing weighs for one borrowing quota: its parent's
/// lendable capacity, the idle room it could borrow, the siblings whose
/// heads wait for room, and the siblings' weights.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    pub me: Sibling,
    pub lendable: ResourceList,
    pub room: ResourceList,
    pub rivals: Vec<Rival>,
    /// Σ weights of the siblings that may borrow (`me` included), in
    /// thousandths.
    pub total_weight_milli: u64,
}

/// At most this many waiting entries of each sibling are weighed (in its
/// queue's order): the room a round shares out is spent long before, and
/// the cost of a round stays bounded whatever the queues hold.
pub const MAX_RIVAL_ENTRIES: usize = 256;

/// A borrowing quota's parent and the parent's children as stored: what
/// `field` reads, kept so that it is worked out only when an admission
/// would borrow.
/// The children are shared with the copies they were read from: a
/// create's review plans on them, and copying six statuses for each was a
/// tenth of a queued create's cost.
#[derive(Clone, Debug)]
pub struct Family {
    pub parent: Quota,
    pub kids: Vec<std::sync::Arc<Quota>>,
}

impl Family {
    /// `field(parent, me, kids)`.
    pub fn field(&self, me: &Quota) -> Field {
        let kids: Vec<&Quota> = self.kids.iter().map(|k| &**k).collect();
        field(&self.parent, me, &kids)
    }
}

/// Whether admitting `usage` in `me` would borrow (use beyond its hard on
/// a key of its max): only then does fair sharing weigh it.
pub fn borrows(me: &Quota, usage: &ResourceList) -> bool {
    !Sibling::of(me).more_borrowed(usage).is_empty()
}

/// The field of `me` under `parent`, from the parent's children as stored
/// (`kids`, `me` among them or not). A rival is a sibling that may borrow
/// with entries waiting for quota or for their turn (in its queue's
/// order; entries waiting for a budget, or that never fit, are left out).
pub fn field(parent: &Quota, me: &Quota, kids: &[&Quota]) -> Field {
    let standings = Standing::of_all(kids.iter().copied());
    let borrowers = kids
        .iter()
        .filter(|k| !k.spec.max.is_empty() && k.name() != me.name());
    let mut total = u64::from(me.spec.fair_sharing.weight.milli());
    let mut rivals = Vec::new();
    for k in borrowers {
        total += u64::from(k.spec.fair_sharing.weight.milli());
        let heads: Vec<Head> = waiting_heads(k).take(MAX_RIVAL_ENTRIES).collect();
        if !heads.is_empty() {
            rivals.push(Rival {
                sibling: Sibling::of(k),
                heads,
            });
        }
    }
    Field {
        me: Sibling::of(me),
        lendable: fair::lendable(parent),
        room: borrow::idle_room(parent, me, &standings),
        rivals,
        total_weight_milli: total,
    }
}

/// `k`'s entries that wait for quota or for their turn, as its stored
/// status lists them, in its queue's order (entries waiting for a budget,
/// or that never fit, are left out): what fair sharing weighs of it.
fn waiting_heads(k: &Quota) -> impl Iterator<Item = Head> + '_ {
    k.status
        .queue
        .iter()
        .filter(|e| matches!(e.waiting, Waiting::Quota | Waiting::Turn))
        .map(|e| Head {
            usage: e.work.usage().clone(),
            priority: e.work.priority,
            since_ms: e.work.submitted_ms,
        })
}

/// Of `borrowers` (children of `parent` that may borrow, as stored), the
/// one whose waiting head fair sharing gives idle room to first: the
/// smallest share after admitting it (`fair::pick`: ties by priority,
/// age, name). Room freed under the parent is asked of its round first;
/// the others follow it (docs/queueing.md §12). None where none waits.
pub fn first_to_borrow(parent: &Quota, borrowers: &[&Quota]) -> Option<String> {
    let contenders: Vec<(Sibling, Head)> = borrowers
        .iter()
        .filter(|k| !k.spec.max.is_empty())
        .filter_map(|k| Some((Sibling::of(k), waiting_heads(k).next()?)))
        .collect();
    let i = fair::pick(&contenders, &fair::lendable(parent))?;
    Some(contenders[i].0.name.clone())
}

/// The words of a fair turn: `me` would use `usage` more with an entry
/// that rival `rival` of `field` goes before.
pub fn turn(me: &Sibling, field: &Field, usage: &ResourceList, rival: usize) -> FairTurn {
    let after = me.share_after(usage, &field.lendable);
    let line = Share::Ratio {
        num: 1000,
        den: u128::from(field.total_weight_milli.max(1)),
    };
    FairTurn {
        quota: me.name.clone(),
        key: after.key.unwrap_or_default(),
        times_tenths: after.share.tenths_of(&line),
        rival: field.rivals[rival].sibling.name.clone(),
    }
}

/// What `yield_to_fairer` decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Yielded {
    /// The round's decisions, with the deferred admissions turned into
    /// waits and positions counted again.
    pub decisions: Vec<Decision>,
    /// The sibling the quota left room to (trigger its round).
    pub to: Option<String>,
}

/// Hold back the admissions of a round (`decisions`, in admission order,
/// over `queue`) that the idle room, shared out by the pick rule with the
/// rivals of `field` (`fair::allot`), does not give this quota. Those
/// within its hard always pass.
pub fn yield_to_fairer(decisions: Vec<Decision>, queue: &[Queued], field: &Field) -> Yielded {
    let asks: Vec<Head> = decisions
        .iter()
        .filter_map(|d| match d {
            Decision::Admit(a) => Some(a),
            Decision::Wait(_) => None,
        })
        .map(|a| {
            let entry = queue.iter().find(|e| e.workload_ref == a.workload_ref);
            Head {
                usage: a.usage.clone(),
                priority: entry.map_or(0, |e| e.priority),
                since_ms: entry.map_or(0, |e| e.submitted_ms),
            }
        })
        .collect();
    let got = fair::allot(
        &field.me,
        &asks,
        &field.rivals,
        &field.lendable,
        &field.room,
    );
    let Some(rival) = got.rival.filter(|_| got.granted < asks.len()) else {
        return Yielded {
            decisions,
            to: None,
        };
    };
    // The words: the share it would hold with the first ask held back.
    let mut me = field.me.clone();
    for a in &asks[..got.granted] {
        resources::add_into(&mut me.used, &a.usage);
    }
    let why = Reason::Fair(turn(&me, field, &asks[got.granted].usage, rival));
    let mut admitted = 0;
    let mut out: Vec<Decision> = decisions
        .into_iter()
        .map(|d| match d {
            Decision::Admit(a) if admitted < got.granted => {
                admitted += 1;
                Decision::Admit(a)
            }
            Decision::Admit(a) => Decision::Wait(Wait {
                workload_ref: a.workload_ref,
                position: 0,
                reason: why.clone(),
            }),
            w => w,
        })
        .collect();
    let mut position = 0u32;
    for d in out.iter_mut() {
        if let Decision::Wait(w) = d {
            position += 1;
            w.position = position;
        }
    }
    Yielded {
        decisions: out,
        to: Some(field.rivals[rival].sibling.name.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::fair_sharing::Weight;
    use crate::object::queueing::QueuePolicy;
    use crate::quantity::Quantity;
    use crate::queue::{next_admissions, Pool};
    use crate::workload::PodSet;

    const CPU: &str = "requests.cpu";

    fn cpu(n: i64) -> ResourceList {
        [(CPU.to_string(), Quantity::from_units(n))].into()
    }

    fn sib(name: &str, hard: i64, used: i64) -> Sibling {
        Sibling {
            name: name.into(),
            hard: cpu(hard),
            max: cpu(100),
            used: cpu(used),
            weight: Weight::ONE,
        }
    }

    fn job(name: &str, n: i64, t: i64) -> Queued {
        Queued {
            workload_ref: format!("batch/Job/ns/{name}"),
            uid: name.into(),
            priority: 0,
            priority_classes: Vec::new(),
            submitted_ms: t,
            pod_sets: vec![PodSet {
                name: "main".into(),
                count: n,
                per_pod: cpu(1),
                qos: None,
            }]
            .into(),
            run_ms: None,
            submitted_by: None,
            preempted: false,
        }
    }

    #[test]
    fn a_borrower_ahead_leaves_the_room_to_a_sibling_with_a_smaller_share() {
        // a: hard 10, uses 20 (borrows 10); room 5 left; b borrows nothing
        // and its head asks 5 beyond its hard.
        let mut q = crate::object::Quota::new(
            "a",
            crate::object::QuotaSpec {
                parent: "p".into(),
                hard: cpu(10),
                max: cpu(100),
                ..Default::default()
            },
        );
        let queue = vec![job("x", 2, 1), job("y", 3, 2)];
        let mut c = job("run", 20, 0).charge(0);
        c.since = "2026-01-01T00:00:00Z".into();
        crate::admission::charge_within(&mut q, "batch/Job/ns/run", c, &cpu(25)).unwrap();
        let pool = Pool::new(&q, &cpu(25));
        let d = next_admissions(&queue, &pool, &[], &QueuePolicy::queue(), 10);
        assert!(d.iter().all(|d| matches!(d, Decision::Admit(_))));
        let rival = Rival {
            sibling: sib("b", 10, 10),
            heads: vec![Head {
                usage: cpu(5),
                priority: 0,
                since_ms: 5,
            }],
        };
        let field = |rivals: Vec<Rival>, room: i64| Field {
            me: sib("a", 10, 20),
            lendable: cpu(20),
            room: cpu(room),
            rivals,
            total_weight_milli: 2000,
        };
        let y = yield_to_fairer(d.clone(), &queue, &field(vec![rival.clone()], 5));
        assert_eq!(y.to.as_deref(), Some("b"));
        let Decision::Wait(w) = &y.decisions[0] else {
            panic!("{:?}", y.decisions)
        };
        assert_eq!(w.position, 1);
        assert_eq!(
            w.reason.to_string(),
            "waits for its fair turn: a would hold 1.2× its fair share of requests.cpu \
             with it; b goes first (smaller share)"
        );
        let Decision::Wait(w) = &y.decisions[1] else {
            panic!()
        };
        assert_eq!(w.position, 2);
        // With room for both, nothing is held back.
        let y = yield_to_fairer(d.clone(), &queue, &field(vec![rival], 10));
        assert_eq!(y.decisions, d);
        assert!(y.to.is_none());
        // Without rivals, nothing either.
        let y = yield_to_fairer(d.clone(), &queue, &field(vec![], 5));
        assert_eq!(y.decisions, d);
    }

    /// Freed room is first asked of the borrower whose head would leave it
    /// the smallest share; a borrower with nothing waiting for quota or
    /// its turn, or that cannot borrow, is no contender.
    #[test]
    fn freed_room_goes_first_to_the_head_with_the_smallest_share_after() {
        let parent = crate::object::Quota::new(
            "p",
            crate::object::QuotaSpec {
                hard: cpu(40),
                ..Default::default()
            },
        );
        let kid = |name: &str, used: i64, head: Option<(i64, Waiting)>, max: i64| {
            let mut q = crate::object::Quota::new(
                name,
                crate::object::QuotaSpec {
                    parent: "p".into(),
                    hard: cpu(0),
                    max: if max > 0 {
                        cpu(max)
                    } else {
                        ResourceList::new()
                    },
                    ..Default::default()
                },
            );
            q.status.used = cpu(used);
            if let Some((n, waiting)) = head {
                q.status.queue.push(crate::object::queue::QueueEntry {
                    work: job(&format!("{name}-head"), n, 1),
                    position: 1,
                    waiting,
                    reason: String::new(),
                    estimated_start: None,
                });
            }
            q
        };
        // a borrows 10 and asks 2 (12 after); b borrows 4 and asks 6 (10).
        let a = kid("a", 10, Some((2, Waiting::Quota)), 40);
        let b = kid("b", 4, Some((6, Waiting::Quota)), 40);
        assert_eq!(first_to_borrow(&parent, &[&a, &b]).as_deref(), Some("b"));
        // b's head waits for a budget: not a contender.
        let b_budget = kid("b", 4, Some((6, Waiting::Budget)), 40);
        assert_eq!(
            first_to_borrow(&parent, &[&a, &b_budget]).as_deref(),
            Some("a")
        );
        // One that cannot borrow, or waits for nothing, is none either.
        let c = kid("c", 0, Some((1, Waiting::Quota)), 0);
        let d = kid("d", 0, None, 40);
        assert_eq!(first_to_borrow(&parent, &[&c, &d]), None);
        assert_eq!(
            first_to_borrow(&parent, &[&a, &c, &d]).as_deref(),
            Some("a")
        );
    }
}
