//! Borrowing and reclaim (§5, docs/semantics.md): the seed 001 story end to end at the
//! engine's level, and invariants under arbitrary sequences.

use proptest::prelude::*;
use quota::admission::{self, Denial};
use quota::borrow::{self, Standing, LOAN_TTL_MS};
use quota::object::marks::Action;
use quota::object::{Charge, Quota, QuotaSpec};
use quota::quantity::Quantity;
use quota::reclaim::{self, Borrower, Candidate, Stop, Victim};
use quota::resources::{self, ResourceList};
use quota::time;
use quota::tree;
use quota::workload::PodSet;
use std::collections::BTreeMap;

const CPU: &str = "requests.cpu";
const T0: i64 = 1_800_000_000_000;
const GRACE: i64 = reclaim::DEFAULT_GRACE_MS;

fn cpu(n: i64) -> ResourceList {
    [(CPU.to_string(), Quantity::from_units(n))].into()
}

fn node(name: &str, parent: &str, hard: i64, max: Option<i64>) -> Quota {
    Quota::new(
        name,
        QuotaSpec {
            parent: parent.into(),
            hard: cpu(hard),
            max: max.map(cpu).unwrap_or_default(),
            budgets: Default::default(),
            queueing: Default::default(),
            fair_sharing: Default::default(),
            idle: None,
        },
    )
}

fn pods(count: i64, each: i64) -> Vec<PodSet> {
    vec![PodSet {
        name: "main".into(),
        count,
        per_pod: cpu(each),
        qos: None,
    }]
}

fn charge(count: i64, each: i64, at: i64) -> Charge {
    Charge {
        pod_sets: pods(count, each),
        hpa: None,
        since: time::format_rfc3339(at),
        uid: String::new(),
        admitted: Some(time::format_rfc3339(at)),
    }
}

/// A borrowing-aware admission, as the server will run it: the child alone
/// when within hard; else a loan from the parent first, then the charge
/// within hard + loan.
fn admit(
    parent: &mut Quota,
    kids: &mut [Quota],
    who: usize,
    wref: &str,
    c: Charge,
    now: i64,
) -> Result<Option<ResourceList>, Denial> {
    let held = kids[who]
        .status
        .workloads
        .get(wref)
        .map(Charge::usage)
        .unwrap_or_default();
    let delta = resources::diff(&c.usage(), &held);
    match borrow::needed(&kids[who], &delta)? {
        None => {
            admission::charge(&mut kids[who], wref, c)?;
            Ok(None)
        }
        Some(mut req) => {
            // A cut asks for the child's fence first, then its request
            // again.
            while let borrow::Lending::FenceFirst(g) =
                borrow::lend(parent, &req, &Standing::of_all(kids.iter()), now)?
            {
                borrow::fence(&mut kids[who], g);
                req = borrow::needed(&kids[who], &delta)?.expect("still beyond hard");
            }
            let loan = borrow::loan_of(parent, kids[who].name());
            let limits = borrow::limits(&kids[who], &loan);
            admission::charge_within(&mut kids[who], wref, c, &limits)?;
            Ok(Some(req.want))
        }
    }
}

struct Seed {
    p: Quota,
    kids: Vec<Quota>,
}

const JOB: &str = "batch/Job/ns-a/job";
const NOTEBOOK: &str = "apps/Deployment/ns-a/notebook";
const JOB1: &str = "batch/Job/ns-b/job-1";
const JOB2: &str = "batch/Job/ns-b/job-2";

/// Seed 001, steps 1–3: A {min 6, max 10}, B {min 12, max 14} under a
/// parent of 18. A runs Job (2 × 2) and B Job-1 (1 × 3), each within its
/// guarantee; A's NoteBook (2 × 2) needs 2 on loan, idle in B; then B's
/// Job-2 (1 × 5) is within B's guarantee and admitted without asking.
fn seed() -> Seed {
    let mut p = node("ai-platform", "", 18, None);
    tree::carve(&mut p, "team-a", &cpu(6), "2026-01-01T00:00:00Z").unwrap();
    tree::carve(&mut p, "team-b", &cpu(12), "2026-01-01T00:00:00Z").unwrap();
    let mut kids = vec![
        node("team-a", "ai-platform", 6, Some(10)),
        node("team-b", "ai-platform", 12, Some(14)),
    ];
    let (a, b) = (0, 1);

    assert_eq!(
        admit(&mut p, &mut kids, a, JOB, charge(2, 2, T0), T0),
        Ok(None)
    );
    assert_eq!(
        admit(&mut p, &mut kids, b, JOB1, charge(1, 3, T0), T0),
        Ok(None)
    );

    // 2×2 + 2×2 > 6: the notebook borrows 2 of B's idle guarantee.
    let t1 = T0 + 1000;
    assert_eq!(
        admit(&mut p, &mut kids, a, NOTEBOOK, charge(2, 2, t1), t1),
        Ok(Some(cpu(2)))
    );
    assert_eq!(borrow::loan_of(&p, "team-a"), cpu(2));
    assert_eq!(p.status.lent, cpu(2));
    assert_eq!(kids[a].status.used, cpu(8));
    assert_eq!(kids[a].status.borrowed, cpu(2));
    // The loan does not move the parent's used (its children's hard).
    assert_eq!(p.status.used, cpu(18));

    // Nor past max: 8 + 3 > 10.
    let err = admit(
        &mut p,
        &mut kids,
        a,
        "batch/Job/ns-a/more",
        charge(1, 3, t1),
        t1,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "bizrq team-a: requests.cpu asks 3, 0 left of 6 (max 10, 2 to borrow)"
    );

    // B's Job-2 is within B's guarantee (3 + 5 ≤ 12): honoured, whatever
    // was lent, without touching the parent.
    let before = p.clone();
    let t2 = T0 + 2000;
    assert_eq!(
        admit(&mut p, &mut kids, b, JOB2, charge(1, 5, t2), t2),
        Ok(None)
    );
    assert_eq!(p, before);
    assert_eq!(kids[b].status.used, cpu(8));
    Seed { p, kids }
}

/// A's workloads as reclaim sees them: the Job is batch at the default
/// priority; the NoteBook an online service with a high PriorityClass.
fn team_a_borrower(a: &Quota) -> Borrower {
    let standing = Standing::of(a);
    Borrower {
        quota: a.name().into(),
        borrowed: standing.borrowed,
        workloads: vec![
            Candidate {
                workload_ref: JOB.into(),
                stop: Stop::Suspend,
                priority: 0,
                online: false,
                created_ms: T0,
                pod_sets: pods(2, 2),
                min_replicas: None,
                marked: a.status.reclaim.contains_key(JOB),
                idle: false,
            },
            Candidate {
                workload_ref: NOTEBOOK.into(),
                stop: Stop::Scale,
                priority: 1_000_000, // priority-class-for-notebook
                online: true,
                created_ms: T0 + 1000,
                pod_sets: pods(2, 2),
                min_replicas: None,
                marked: a.status.reclaim.contains_key(NOTEBOOK),
                idle: false,
            },
        ],
    }
}

/// Seed 001, step 4: Job-2's pod cannot be scheduled (the 16-core cluster
/// is full); B is within its guarantee while A borrows, so A must give 2
/// back — and it is A's Job that goes, not the online NoteBook.
#[test]
fn seed_001_the_lender_gets_its_guarantee_back_from_the_borrowers_job() {
    let Seed { mut p, mut kids } = seed();
    let standings = Standing::of_all(kids.iter());

    // In quota terms nothing is wrong: 8 + 8 ≤ 18.
    assert!(reclaim::quota_pressure(&p, &standings).is_empty());
    // Physically, Job-2's 5 cores wait; A borrows 2 of them.
    let pending: BTreeMap<String, ResourceList> = [("team-b".to_string(), cpu(5))].into();
    let need = reclaim::need(&p, &standings, &pending);
    assert_eq!(need, cpu(2));

    let plan = reclaim::plan(&[team_a_borrower(&kids[0])], &need);
    assert_eq!(
        plan,
        vec![Victim {
            quota: "team-a".into(),
            workload_ref: JOB.into(),
            action: Action::Suspend,
            frees: cpu(4),
        }]
    );

    // Marked first; the owners are warned and the Job keeps running.
    let now = T0 + 10_000;
    let r = reclaim::reconcile_marks("team-a", &kids[0].status.reclaim, &plan, now, GRACE);
    assert_eq!(r.marked, plan);
    assert!(r.due.is_empty());
    kids[0].status.reclaim = r.marks;
    let json = serde_json::to_value(&kids[0].status).unwrap();
    assert_eq!(json["reclaim"][JOB]["action"], "suspend");
    assert_eq!(json["borrowed"][CPU], "2");

    // Still pending when the grace is over: the Job is due.
    let later = now + GRACE;
    let plan = reclaim::plan(&[team_a_borrower(&kids[0])], &need);
    let r = reclaim::reconcile_marks("team-a", &kids[0].status.reclaim, &plan, later, GRACE);
    assert_eq!(r.due, plan);
    assert!(r.marks.is_empty());
    kids[0].status.reclaim = r.marks;

    // Executed: a suspended Job counts zero. A is back within its guarantee,
    // the loan is repaid at the next repair, and the pressure is gone.
    admission::charge(&mut kids[0], JOB, charge(0, 2, later)).unwrap();
    assert_eq!(kids[0].status.used, cpu(4));
    assert!(kids[0].status.borrowed.is_empty());
    let standings = Standing::of_all(kids.iter());
    assert!(borrow::repair_loans(&mut p, &standings, later));
    assert!(p.status.loans.is_empty() && p.status.lent.is_empty());
    assert!(reclaim::need(&p, &standings, &pending).is_empty());
}

/// Seed 001, step 4, if the pressure goes away within the grace: the mark is
/// cleared and nothing is reclaimed.
#[test]
fn seed_001_a_mark_is_cleared_when_the_pending_pod_goes_away() {
    let Seed { p, mut kids } = seed();
    let standings = Standing::of_all(kids.iter());
    let pending: BTreeMap<String, ResourceList> = [("team-b".to_string(), cpu(5))].into();
    let need = reclaim::need(&p, &standings, &pending);
    let plan = reclaim::plan(&[team_a_borrower(&kids[0])], &need);
    let r = reclaim::reconcile_marks("team-a", &BTreeMap::new(), &plan, T0, GRACE);
    kids[0].status.reclaim = r.marks;

    // Job-2 was deleted (or scheduled elsewhere) before the grace ran out.
    let need = reclaim::need(&p, &standings, &BTreeMap::new());
    assert!(need.is_empty());
    let plan = reclaim::plan(&[team_a_borrower(&kids[0])], &need);
    let r = reclaim::reconcile_marks("team-a", &kids[0].status.reclaim, &plan, T0 + GRACE, GRACE);
    assert_eq!(r.cleared, vec![JOB.to_string()]);
    assert!(r.due.is_empty() && r.marks.is_empty() && r.changed);
}

/// §5 (a): B takes its whole guarantee back in quota terms (12 of 12 while
/// A borrows 2 of the 18): 2 over, all of it A's.
#[test]
fn quota_pressure_reclaims_exactly_the_loan() {
    let Seed { mut p, mut kids } = seed();
    let t = T0 + 5000;
    assert_eq!(
        admit(
            &mut p,
            &mut kids,
            1,
            "batch/Job/ns-b/job-3",
            charge(1, 4, t),
            t
        ),
        Ok(None)
    );
    let standings = Standing::of_all(kids.iter());
    assert_eq!(reclaim::quota_pressure(&p, &standings), cpu(2));
    // While the lender holds its guarantee, no one borrows more.
    let t = t + 1;
    assert!(admit(&mut p, &mut kids, 0, "batch/Job/ns-a/x", charge(1, 1, t), t).is_err());
}

// ---- invariants ---------------------------------------------------------

const KIDS: usize = 3;

#[derive(Clone, Debug)]
enum Op {
    /// Child, workload, pods of 1 cpu.
    Admit(usize, usize, i64),
    /// Two children admit at once: both ask the parent, then both charge.
    Both((usize, usize, i64), (usize, usize, i64)),
    Release(usize, usize),
    /// Time passes (ms), then the resync repairs the loans.
    Repair(i64),
}

fn op() -> impl Strategy<Value = Op> {
    let one = (0..KIDS, 0usize..4, 0i64..7);
    prop_oneof![
        4 => one.clone().prop_map(|(c, w, n)| Op::Admit(c, w, n)),
        2 => (one.clone(), one).prop_map(|(a, b)| Op::Both(a, b)),
        2 => (0..KIDS, 0usize..4).prop_map(|(c, w)| Op::Release(c, w)),
        1 => (0i64..2 * LOAN_TTL_MS).prop_map(Op::Repair),
    ]
}

fn q(list: &ResourceList) -> Quantity {
    resources::get(list, CPU)
}

fn wref(w: usize) -> String {
    format!("batch/Job/ns/w{w}")
}

/// What admitting `count` pods for (child, w) would add.
fn delta(kid: &Quota, w: usize, count: i64) -> ResourceList {
    let held = kid
        .status
        .workloads
        .get(&wref(w))
        .map(Charge::usage)
        .unwrap_or_default();
    resources::diff(&cpu(count), &held)
}

proptest! {
    /// Loans come only out of idle capacity, so borrowing never makes a
    /// parent's subtree use more than the parent has; two children asking at
    /// once never both get the last idle unit; a child's admission within
    /// its hard is always honoured; used stays ≤ max and every borrowed unit
    /// is covered by a loan.
    #[test]
    fn borrowing_never_over_commits_the_parent(
        spare in 0i64..6,
        hard in prop::collection::vec(0i64..8, KIDS),
        extra in prop::collection::vec(prop::option::of(0i64..8), KIDS),
        ops in prop::collection::vec(op(), 1..50),
    ) {
        let total: i64 = hard.iter().sum::<i64>() + spare;
        let mut p = node("p", "", total, None);
        let mut kids: Vec<Quota> = Vec::new();
        for i in 0..KIDS {
            let name = format!("c{i}");
            tree::carve(&mut p, &name, &cpu(hard[i]), "2026-01-01T00:00:00Z").unwrap();
            kids.push(node(&name, "p", hard[i], extra[i].map(|e| hard[i] + e)));
        }
        let mut now = T0;
        for op in ops {
            now += 1;
            let mut borrowed_now = false;
            match op {
                Op::Admit(c, w, n) => {
                    let d = delta(&kids[c], w, n);
                    let within = q(&kids[c].status.used).saturating_add(q(&d)) <= Quantity::from_units(hard[c]);
                    let r = admit(&mut p, &mut kids, c, &wref(w), charge(n, 1, now), now);
                    prop_assert!(!within || r.is_ok(), "within hard refused: {:?}", r);
                    borrowed_now = matches!(r, Ok(Some(_)));
                }
                Op::Both((c1, w1, n1), (c2, w2, n2)) => {
                    // Both read the same siblings; the parent's CAS orders
                    // their loans; then each charges.
                    let view = Standing::of_all(kids.iter());
                    let mut granted = Vec::new();
                    for (c, w, n) in [(c1, w1, n1), (c2, w2, n2)] {
                        if let Ok(Some(req)) = borrow::needed(&kids[c], &delta(&kids[c], w, n)) {
                            // A cut that asks for a fence first lends
                            // nothing now.
                            if matches!(borrow::lend(&mut p, &req, &view, now), Ok(borrow::Lending::Granted)) {
                                // Each charges with the loan its own lend saw.
                                let loan = borrow::loan_of(&p, kids[c].name());
                                granted.push((c, w, n, borrow::limits(&kids[c], &loan)));
                            }
                        }
                    }
                    for (c, w, n, limits) in granted {
                        if admission::charge_within(&mut kids[c], &wref(w), charge(n, 1, now), &limits)
                            .is_ok()
                        {
                            borrowed_now = true;
                        }
                    }
                }
                Op::Release(c, w) => {
                    admission::release(&mut kids[c], &wref(w));
                }
                Op::Repair(dt) => {
                    now += dt;
                    borrow::repair_loans(&mut p, &Standing::of_all(kids.iter()), now);
                }
            }
            let standings = Standing::of_all(kids.iter());
            if borrowed_now {
                prop_assert!(reclaim::quota_pressure(&p, &standings).is_empty(),
                    "a loan over-committed the parent: {:?} {:?}", p.status, standings);
            }
            prop_assert_eq!(&p.status.lent, &resources::sum(p.status.loans.values().map(|l| &l.amount)));
            for k in &kids {
                let (used, h) = (q(&k.status.used), q(&k.spec.hard));
                let ceiling = k.spec.max.get(CPU).copied().unwrap_or(h);
                prop_assert!(used <= ceiling, "{} uses {} over {}", k.name(), used, ceiling);
                let over = used.saturating_sub(h).max(Quantity::ZERO);
                prop_assert!(over <= q(&borrow::loan_of(&p, k.name())), "{} borrows {} without a loan", k.name(), over);
                if k.spec.max.is_empty() {
                    prop_assert!(k.status.borrowed.is_empty());
                } else {
                    prop_assert_eq!(q(&k.status.borrowed), over);
                }
            }
        }
    }
}

/// priority, online, age, stop kind, count, cpu per pod, min replicas, marked.
type RawCandidate = (i32, bool, i64, u8, i64, i64, Option<i64>, bool);

fn candidate() -> impl Strategy<Value = RawCandidate> {
    (
        0i32..3,
        any::<bool>(),
        0i64..4,
        0u8..3,
        0i64..6,
        1i64..4,
        prop::option::of(0i64..4),
        any::<bool>(),
    )
}

fn borrowers_from(raw: &[(i64, Vec<RawCandidate>)]) -> Vec<Borrower> {
    raw.iter()
        .enumerate()
        .map(|(bi, (borrowed, cands))| Borrower {
            quota: format!("b{bi}"),
            borrowed: cpu(*borrowed),
            workloads: cands
                .iter()
                .enumerate()
                .map(
                    |(ci, (prio, online, age, stop, count, each, min, marked))| Candidate {
                        workload_ref: format!("apps/Deployment/b{bi}/w{ci}"),
                        stop: [Stop::Suspend, Stop::Scale, Stop::Never][*stop as usize],
                        priority: *prio,
                        online: *online,
                        created_ms: T0 + age,
                        pod_sets: pods(*count, *each),
                        min_replicas: *min,
                        marked: *marked,
                        idle: false,
                    },
                )
                .collect(),
        })
        .collect()
}

proptest! {
    /// The plan is deterministic, takes each workload once and never below
    /// its minimum unless stopping it, takes only workloads that free what
    /// is needed, and leaves the need uncovered only when no borrower that
    /// still owes has anything left to give.
    #[test]
    fn reclaim_plans_are_sound(
        raw in prop::collection::vec((0i64..12, prop::collection::vec(candidate(), 0..5)), 1..4),
        need in 0i64..20,
    ) {
        let borrowers = borrowers_from(&raw);
        let need = cpu(need);
        let plan = reclaim::plan(&borrowers, &need);

        let mut shuffled = borrowers.clone();
        shuffled.reverse();
        for b in &mut shuffled {
            b.workloads.reverse();
        }
        prop_assert_eq!(&plan, &reclaim::plan(&shuffled, &need));

        let mut seen = std::collections::BTreeSet::new();
        let mut freed = Quantity::ZERO;
        let mut given: BTreeMap<&str, Quantity> = BTreeMap::new();
        for v in &plan {
            prop_assert!(seen.insert(&v.workload_ref), "{} twice", v.workload_ref);
            let b = borrowers.iter().find(|b| b.quota == v.quota).unwrap();
            let c = b.workloads.iter().find(|c| c.workload_ref == v.workload_ref).unwrap();
            prop_assert!(c.stop != Stop::Never);
            prop_assert!(q(&v.frees).nanos() > 0);
            match v.action {
                Action::ScaleTo(n) if n > 0 => {
                    prop_assert!(n >= c.min_replicas.unwrap() && n < c.pod_sets[0].count);
                }
                Action::Suspend => prop_assert_eq!(c.stop, Stop::Suspend),
                Action::ScaleTo(_) => prop_assert_eq!(c.stop, Stop::Scale),
            }
            freed = freed.saturating_add(q(&v.frees));
            let g = given.entry(v.quota.as_str()).or_insert(Quantity::ZERO);
            *g = g.saturating_add(q(&v.frees));
        }
        if freed < q(&need) {
            for b in &borrowers {
                let gave = given.get(b.quota.as_str()).copied().unwrap_or(Quantity::ZERO);
                if gave < q(&b.borrowed) {
                    // Everything it could give, it gave.
                    let could: Quantity = b.workloads.iter()
                        .filter(|c| c.stop != Stop::Never)
                        .fold(Quantity::ZERO, |acc, c| acc.saturating_add(q(&c.pod_sets[0].usage(c.pod_sets[0].count))));
                    prop_assert_eq!(gave, could, "{} owes and could give more", b.quota);
                }
            }
        }
    }
}

/// An admission in flight, one compare-and-swap a step, as the server
/// makes it: read the child (a loan request, or a charge within hard),
/// the parent's grant, then the charge riding that grant.
#[derive(Clone, Debug)]
struct Admission {
    c: usize,
    w: usize,
    n: i64,
    req: Option<borrow::LoanRequest>,
    lent: Option<borrow::Lent>,
    /// The parent asked for a fence at this generation before a cut: the
    /// next step writes it in the child, then the admission asks again.
    fence: Option<u64>,
}

/// A release in flight, as the server gives its loan back at once: read
/// the loan's generation, release and fence in the child's write, return
/// in the parent's; a grant since the fence means fence again and retry.
#[derive(Clone, Debug)]
struct Giving {
    c: usize,
    w: usize,
    seen: Option<Option<u64>>,
    give: Option<borrow::Giveback>,
    granted: Option<u64>,
}

#[derive(Clone, Debug)]
enum Flight {
    Admit(Admission),
    Release(Giving),
}

#[derive(Clone, Debug)]
enum Step {
    Admit(usize, usize, i64),
    Release(usize, usize),
    /// Advance the operation in flight at this index (modulo).
    Advance(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0..KIDS, 0usize..4, 1i64..5).prop_map(|(c, w, n)| Step::Admit(c, w, n)),
        2 => (0..KIDS, 0usize..4).prop_map(|(c, w)| Step::Release(c, w)),
        6 => (0usize..16).prop_map(Step::Advance),
    ]
}

/// One step of `f`; whether it is done.
fn advance(f: &mut Flight, p: &mut Quota, kids: &mut [Quota], now: i64) -> bool {
    match f {
        Flight::Admit(a) => {
            let c = charge(a.n, 1, now);
            if let Some(g) = a.fence.take() {
                borrow::fence(&mut kids[a.c], g);
                a.req = None;
                return false;
            }
            match (&a.req, &a.lent) {
                (None, _) => {
                    let d = delta(&kids[a.c], a.w, a.n);
                    match borrow::needed(&kids[a.c], &d) {
                        Ok(Some(req)) => {
                            a.req = Some(req);
                            false
                        }
                        Ok(None) => {
                            let _ = borrow::charge_or_request(&mut kids[a.c], &wref(a.w), c, None);
                            true
                        }
                        Err(_) => true,
                    }
                }
                (Some(req), None) => {
                    let view = Standing::of_all(kids.iter());
                    match borrow::lend(p, req, &view, now) {
                        Err(_) => return true,
                        Ok(borrow::Lending::FenceFirst(g)) => a.fence = Some(g),
                        Ok(borrow::Lending::Granted) => {
                            a.lent = Some(borrow::lent_to(p, kids[a.c].name()));
                        }
                    }
                    false
                }
                (Some(_), Some(lent)) => {
                    let _ = borrow::charge_or_request(&mut kids[a.c], &wref(a.w), c, Some(lent));
                    true
                }
            }
        }
        Flight::Release(r) => {
            let name = kids[r.c].name().to_string();
            if r.seen.is_none() {
                r.seen = Some(p.status.loans.get(&name).map(|l| l.generation));
                return false;
            }
            if let Some(g) = r.granted.take() {
                r.give = Some(borrow::fence(&mut kids[r.c], g));
                return false;
            }
            match &r.give {
                None => {
                    let before = kids[r.c].status.used.clone();
                    admission::release(&mut kids[r.c], &wref(r.w));
                    r.give = borrow::fence_release(&mut kids[r.c], &before, r.seen.flatten());
                    r.give.is_none()
                }
                Some(give) => match borrow::return_loan(p, &name, give) {
                    borrow::Returned::Granted(g) => {
                        r.granted = Some(g);
                        false
                    }
                    _ => true,
                },
            }
        }
    }
}

/// One step of a run: `s` starts an admission or a release (only while
/// `starting`: the run's own steps, not the drain after them) or advances
/// one in flight by one compare-and-swap, dropping it when it is done.
fn fly(
    s: Step,
    starting: bool,
    flying: &mut Vec<Flight>,
    p: &mut Quota,
    kids: &mut [Quota],
    now: i64,
) {
    match s {
        Step::Admit(c, w, n) if starting => flying.push(Flight::Admit(Admission {
            c,
            w,
            n,
            req: None,
            lent: None,
            fence: None,
        })),
        Step::Release(c, w) if starting => flying.push(Flight::Release(Giving {
            c,
            w,
            seen: None,
            give: None,
            granted: None,
        })),
        Step::Advance(k) if !flying.is_empty() => {
            let k = k % flying.len();
            if advance(&mut flying[k], p, kids, now) {
                flying.remove(k);
            }
        }
        _ => {}
    }
}

proptest! {
    /// Admissions and releases of borrowers, every step of each its own
    /// compare-and-swap, interleaved in any order: a release gives its
    /// loan back at once, yet no child ever borrows more than the loan
    /// its parent records, and the parent never lends (nor its children
    /// use) more than its hard. Every child has hard 0, so every unit
    /// used is borrowed. Without the fence (a charge riding a grant the
    /// release read before it) this fails: the release returns a loan an
    /// admission in flight then charges on.
    #[test]
    fn a_loan_returned_at_once_never_races_an_admission(
        cap in 2i64..12,
        steps in prop::collection::vec(step(), 1..80),
    ) {
        let mut p = node("p", "", cap, None);
        let mut kids: Vec<Quota> = (0..KIDS)
            .map(|i| {
                let name = format!("c{i}");
                tree::carve(&mut p, &name, &cpu(0), "2026-01-01T00:00:00Z").unwrap();
                node(&name, "p", 0, Some(8))
            })
            .collect();
        let mut flying: Vec<Flight> = Vec::new();
        let mut now = T0;
        let drain = steps.len();
        for (i, s) in steps.into_iter().chain((0..drain * 8).map(|_| Step::Advance(0))).enumerate() {
            now += 1;
            fly(s, i < drain, &mut flying, &mut p, &mut kids, now);
            let mut used = Quantity::ZERO;
            for k in &kids {
                let b = q(&k.spec.borrowed(&k.status.used));
                let l = q(&borrow::loan_of(&p, k.name()));
                prop_assert!(b <= l, "{} borrows {} on a loan of {}: {:?}", k.name(), b, l, p.status.loans);
                used = used.saturating_add(q(&k.status.used));
            }
            prop_assert!(q(&p.status.lent) <= Quantity::from_units(cap), "lent {:?} of {}", p.status.lent, cap);
            prop_assert!(used <= Quantity::from_units(cap), "children use {} of {}", used, cap);
        }
    }
}

proptest! {
    /// As above, but the children hold guarantees they lend out idle
    /// (hard above 0) and take back by admissions within hard, which need
    /// no one's consent: a loan is then no longer backed, and `lend` cuts
    /// it to what is when the borrower asks again. A charge already in
    /// flight on the larger grant must not land past the cut: the cut is a
    /// return (the borrower fenced at the loan's generation first). So no
    /// child ever borrows more than the loan its parent records, and the
    /// children together are above the parent's hard only by what the
    /// lenders took back: what they use within their hard plus the loans
    /// outstanding. Without the fence of a cut this fails: the charge in
    /// flight lands beyond the cut loan, and once the lender lets go, the
    /// room the cut freed is lent to a sibling too.
    #[test]
    fn a_loan_cut_to_what_is_backed_never_races_an_admission(
        hard in prop::collection::vec(0i64..4, KIDS),
        spare in 0i64..3,
        steps in prop::collection::vec(step(), 1..80),
    ) {
        let cap: i64 = hard.iter().sum::<i64>() + spare;
        let mut p = node("p", "", cap, None);
        let mut kids: Vec<Quota> = (0..KIDS)
            .map(|i| {
                let name = format!("c{i}");
                tree::carve(&mut p, &name, &cpu(hard[i]), "2026-01-01T00:00:00Z").unwrap();
                node(&name, "p", hard[i], Some(hard[i] + 4))
            })
            .collect();
        let mut flying: Vec<Flight> = Vec::new();
        let mut now = T0;
        let drain = steps.len();
        for (i, s) in steps.into_iter().chain((0..drain * 8).map(|_| Step::Advance(0))).enumerate() {
            now += 1;
            fly(s, i < drain, &mut flying, &mut p, &mut kids, now);
            let (mut used, mut allowed) = (Quantity::ZERO, Quantity::ZERO);
            for k in &kids {
                let u = q(&k.status.used);
                let l = q(&borrow::loan_of(&p, k.name()));
                used = used.saturating_add(u);
                allowed = allowed.saturating_add(u.min(q(&k.spec.hard))).saturating_add(l);
            }
            let allowed = allowed.max(Quantity::from_units(cap));
            prop_assert!(
                used <= allowed,
                "children use {} of {}: more than the lenders took back ({}): {:?} {:?}",
                used, cap, allowed, p.status.loans,
                kids.iter().map(|k| (k.name().to_string(), q(&k.status.used))).collect::<Vec<_>>()
            );
            for k in &kids {
                let b = q(&k.spec.borrowed(&k.status.used));
                let l = q(&borrow::loan_of(&p, k.name()));
                prop_assert!(b <= l, "{} borrows {} on a loan of {}: {:?}", k.name(), b, l, p.status.loans);
            }
        }
    }
}
