use super::*;
use crate::object::{Charge, QuotaSpec};
use crate::tree;
use crate::workload::PodSet;

const T: &str = "2026-01-01T00:00:00.000Z";
const GPU: &str = "requests.nvidia.com/gpu";

fn list(pairs: &[(&str, &str)]) -> ResourceList {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.parse().unwrap()))
        .collect()
}

fn q(s: &str) -> Quantity {
    s.parse().unwrap()
}

/// A tree built through the tree rules, so carve-outs are as the service
/// would have written them.
#[derive(Default)]
struct Tree(BTreeMap<String, Quota>);

impl Tree {
    fn add(mut self, name: &str, parent: &str, hard: &[(&str, &str)]) -> Tree {
        let spec = QuotaSpec {
            parent: parent.into(),
            hard: list(hard),
            max: Default::default(),
            budgets: Default::default(),
            queueing: Default::default(),
            fair_sharing: Default::default(),
            idle: None,
        };
        if !parent.is_empty() {
            tree::carve(self.0.get_mut(parent).unwrap(), name, &spec.hard, T).unwrap();
        }
        self.0.insert(name.into(), Quota::new(name, spec));
        self
    }

    fn charge(mut self, name: &str, gpus: i64) -> Tree {
        let q = self.0.get_mut(name).unwrap();
        q.status.workloads.insert(
            "apps/Deployment/ns/w".into(),
            Charge {
                pod_sets: vec![PodSet {
                    name: "main".into(),
                    count: gpus,
                    per_pod: list(&[(GPU, "1")]),
                    qos: None,
                }],
                hpa: None,
                since: T.into(),
                uid: String::new(),
                admitted: None,
            },
        );
        q.status.refresh(&q.spec.clone());
        self
    }

    fn hard(&self, name: &str, key: &str) -> Quantity {
        resources::get(&self.0[name].spec.hard, key)
    }

    fn carved(&self, parent: &str, child: &str, key: &str) -> Quantity {
        resources::get(&self.0[parent].status.children[child].hard, key)
    }

    fn write(&mut self, step: &Step, id: &str) -> bool {
        apply(self.0.get_mut(step.quota()).unwrap(), step, id).unwrap()
    }

    fn hold_all(&mut self, plan: &Plan, id: &str) {
        for (parent, children) in plan.holds() {
            hold(self.0.get_mut(&parent).unwrap(), id, &children, 0).unwrap();
        }
    }

    /// Runs a plan as the executor does; returns the decision.
    fn run(&mut self, plan: &Plan, id: &str) -> Decision {
        self.hold_all(plan, id);
        for s in plan.giving() {
            self.write(&s, id);
        }
        let (_, d) = commit(self.0.get_mut(&plan.lca).unwrap(), id, plan).unwrap();
        let rest = match d {
            Decision::Committed => plan.receiving(),
            Decision::Aborted { .. } => plan.undo_giving(),
        };
        for s in rest {
            self.write(&s, id);
        }
        for parent in plan.holds().keys() {
            release(self.0.get_mut(parent).unwrap(), id);
        }
        d
    }

    /// used = selfUsed + Σ children's hard, and every carve-out is its
    /// child's hard, everywhere.
    fn assert_consistent(&self) {
        for (name, p) in &self.0 {
            let mut fresh = p.clone();
            fresh.status.refresh(&p.spec);
            assert_eq!(fresh.status.used, p.status.used, "{name}: used is stale");
            let kids: Vec<&Quota> = self.0.values().filter(|c| c.spec.parent == *name).collect();
            for k in p.spec.hard.keys() {
                let sum = kids.iter().fold(Quantity::ZERO, |a, c| {
                    a.saturating_add(resources::get(&c.spec.hard, k))
                });
                assert_eq!(
                    resources::get(&p.status.used, k),
                    resources::get(&p.status.self_used, k).saturating_add(sum),
                    "{name}: used {k} is not selfUsed + Σ children's hard"
                );
            }
            for c in kids {
                assert_eq!(
                    p.status.children[c.name()].hard,
                    c.spec.hard,
                    "{name}'s carve-out of {}",
                    c.name()
                );
            }
            assert!(p.status.transfers.is_empty(), "{name} still holds");
        }
    }
}

fn plan_of(
    t: &Tree,
    from: Option<&str>,
    to: &str,
    amounts: &[(&str, &str)],
) -> Result<Plan, TransferError> {
    plan(&t.0, from, to, &list(amounts), &KeyConfig::default())
}

fn org() -> Tree {
    Tree::default()
        .add("ai", "", &[(GPU, "64"), ("pods", "1000")])
        .add("cv", "ai", &[(GPU, "16"), ("pods", "100")])
        .add("nlp", "ai", &[(GPU, "24"), ("pods", "100")])
        .add("det", "cv", &[(GPU, "10"), ("pods", "50")])
        .add("seg", "cv", &[(GPU, "4"), ("pods", "50")])
        .add("llm", "nlp", &[(GPU, "20"), ("pods", "50")])
}

#[test]
fn siblings_move_hard_and_both_carve_outs() {
    let mut t = org();
    let p = plan_of(&t, Some("det"), "seg", &[(GPU, "3")]).unwrap();
    assert_eq!((p.source.as_str(), p.lca.as_str()), ("det", "cv"));
    assert_eq!(t.run(&p, "1"), Decision::Committed);
    assert_eq!(t.hard("det", GPU), q("7"));
    assert_eq!(t.hard("seg", GPU), q("7"));
    assert_eq!(t.hard("cv", GPU), q("16"));
    assert_eq!(t.carved("cv", "det", GPU), q("7"));
    assert_eq!(t.carved("cv", "seg", GPU), q("7"));
    assert_eq!(t.hard("det", "pods"), q("50"), "other keys stay");
    t.assert_consistent();
}

#[test]
fn more_from_the_parent_takes_its_remainder() {
    let mut t = org();
    let p = plan_of(&t, None, "seg", &[(GPU, "2")]).unwrap();
    assert_eq!((p.source.as_str(), p.lca.as_str()), ("cv", "cv"));
    assert!(p.up.is_empty());
    assert_eq!(t.run(&p, "1"), Decision::Committed);
    assert_eq!(t.hard("seg", GPU), q("6"));
    assert_eq!(t.hard("cv", GPU), q("16"), "the parent's hard stays");
    assert_eq!(t.0["cv"].status.used[GPU], q("16"));
    t.assert_consistent();
}

#[test]
fn refusal_names_the_quota_key_asked_and_left() {
    let t = Tree::default()
        .add("ai", "", &[(GPU, "64")])
        .add("cv", "ai", &[(GPU, "16")])
        .add("det", "cv", &[(GPU, "14")]);
    let err = plan_of(&t, None, "det", &[(GPU, "4")]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "bizrq cv: requests.nvidia.com/gpu asks 4, 2 left of 16"
    );
    assert!(plan_of(&t, None, "det", &[(GPU, "2")]).is_ok());
}

#[test]
fn across_subtrees_through_the_common_ancestor() {
    let mut t = org();
    let p = plan_of(&t, Some("det"), "llm", &[(GPU, "4"), ("pods", "5")]).unwrap();
    assert_eq!(p.lca, "ai");
    let names = |v: &[Change]| v.iter().map(|c| c.quota.clone()).collect::<Vec<_>>();
    assert_eq!(names(&p.up), ["det", "cv"]);
    assert_eq!(names(&p.down), ["nlp", "llm"]);
    assert_eq!(t.run(&p, "7"), Decision::Committed);
    assert_eq!(
        [
            t.hard("det", GPU),
            t.hard("cv", GPU),
            t.hard("nlp", GPU),
            t.hard("llm", GPU),
            t.hard("ai", GPU)
        ],
        [q("6"), q("12"), q("28"), q("24"), q("64")]
    );
    assert_eq!(t.hard("llm", "pods"), q("55"));
    assert_eq!(t.hard("cv", "pods"), q("95"));
    // cv keeps its remainder: 16 − 14 = 2 before, 12 − 10 = 2 after.
    assert_eq!(t.0["cv"].status.used[GPU], q("10"));
    t.assert_consistent();
}

#[test]
fn giving_back_to_an_ancestor() {
    let mut t = org();
    let p = plan_of(&t, Some("det"), "ai", &[(GPU, "4")]).unwrap();
    assert_eq!(p.lca, "ai");
    assert!(p.down.is_empty());
    assert_eq!(t.run(&p, "1"), Decision::Committed);
    assert_eq!((t.hard("det", GPU), t.hard("cv", GPU)), (q("6"), q("12")));
    assert_eq!(t.0["ai"].status.used[GPU], q("36"));
    t.assert_consistent();
}

#[test]
fn a_quota_gives_at_most_its_hard_and_only_keys_both_ends_have() {
    let t = org();
    assert_eq!(
        plan_of(&t, Some("seg"), "det", &[(GPU, "5")])
            .unwrap_err()
            .to_string(),
        "bizrq seg: requests.nvidia.com/gpu gives 5, its hard is only 4: give 4 at most"
    );
    assert_eq!(
        plan_of(&t, Some("seg"), "det", &[("limits.cpu", "1")])
            .unwrap_err()
            .to_string(),
        "bizrq seg: limits.cpu is not in its hard, so it cannot give it: choose a key both ends have"
    );
    for bad in [&[(GPU, "0")][..], &[(GPU, "-1")], &[], &[("gpus", "1")]] {
        assert!(matches!(
            plan_of(&t, Some("seg"), "det", bad),
            Err(TransferError::Invalid(_))
        ));
    }
    assert!(matches!(
        plan_of(&t, Some("seg"), "seg", &[(GPU, "1")]),
        Err(TransferError::Invalid(_))
    ));
    assert!(matches!(
        plan_of(&t, None, "ai", &[(GPU, "1")]),
        Err(TransferError::Invalid(_))
    ));
    assert_eq!(
        plan_of(&t, Some("nope"), "det", &[(GPU, "1")]),
        Err(TransferError::NotFound("nope".into()))
    );
}

#[test]
fn giving_below_used_is_allowed_with_a_warning() {
    let mut t = org().charge("seg", 3);
    let p = plan_of(&t, Some("seg"), "det", &[(GPU, "2")]).unwrap();
    assert_eq!(
        p.warnings,
        ["bizrq seg: requests.nvidia.com/gpu becomes 2, below the 3 in use: it is over quota and new workloads asking for requests.nvidia.com/gpu are denied"]
    );
    assert_eq!(t.run(&p, "1"), Decision::Committed);
    t.assert_consistent();
}

#[test]
fn an_over_committed_parent_on_the_way_down_refuses() {
    let mut t = org();
    // nlp lowered below what it carved (allowed by §2): 20 carved of 18.
    let nlp = t.0.get_mut("nlp").unwrap();
    nlp.spec.hard.insert(GPU.into(), q("18"));
    nlp.status.refresh(&nlp.spec.clone());
    tree::carve(
        t.0.get_mut("ai").unwrap(),
        "nlp",
        &list(&[(GPU, "18"), ("pods", "100")]),
        T,
    )
    .unwrap();
    let err = plan_of(&t, Some("det"), "llm", &[(GPU, "1")]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "bizrq nlp: requests.nvidia.com/gpu asks 1, 0 left of 19"
    );
}

#[test]
fn model_keys_move_where_they_are_carried() {
    let a100 = "requests.nvidia.com/gpu.A100";
    let mut t = Tree::default()
        .add("ai", "", &[(GPU, "64")])
        .add("cv", "ai", &[(GPU, "16"), (a100, "8")])
        .add("nlp", "ai", &[(GPU, "16"), (a100, "8")]);
    let p = plan_of(&t, Some("cv"), "nlp", &[(a100, "3")]).unwrap();
    assert_eq!(t.run(&p, "1"), Decision::Committed);
    assert_eq!((t.hard("cv", a100), t.hard("nlp", a100)), (q("5"), q("11")));
    assert_eq!(
        t.hard("ai", a100),
        Quantity::ZERO,
        "ai does not govern A100"
    );
    t.assert_consistent();
}

#[test]
fn cash_budgets_move_like_any_key_but_not_on_loan() {
    let cash = "cash/requests.nvidia.com/gpu";
    let mut t = Tree::default()
        .add("ai", "", &[(GPU, "64"), (cash, "1000")])
        .add("cv", "ai", &[(GPU, "16"), (cash, "300")])
        .add("nlp", "ai", &[(GPU, "16"), (cash, "300")]);
    let amounts = list(&[(GPU, "2"), (cash, "100")]);
    let p = plan(&t.0, Some("cv"), "nlp", &amounts, &KeyConfig::default()).unwrap();
    assert_eq!(t.run(&p, "1"), Decision::Committed);
    assert_eq!(
        (t.hard("cv", cash), t.hard("nlp", cash)),
        (q("200"), q("400"))
    );
    t.assert_consistent();
    assert!(check_loan(&amounts)
        .unwrap_err()
        .to_string()
        .contains("a loan cannot carry cash/requests.nvidia.com/gpu"));
    assert!(check_loan(&list(&[(GPU, "2")])).is_ok());
}

#[test]
fn max_rises_with_a_hard_that_would_pass_it() {
    let mut t = org();
    let seg = t.0.get_mut("seg").unwrap();
    seg.spec.max = list(&[(GPU, "6")]);
    let p = plan_of(&t, Some("det"), "seg", &[(GPU, "3")]).unwrap();
    t.run(&p, "1");
    assert_eq!(t.0["seg"].spec.max[GPU], q("7"));
}

#[test]
fn two_plans_for_the_same_room_commit_once() {
    let mut t = org();
    // cv has 2 left; det and seg each ask for 2, planned from the same state.
    let a = plan_of(&t, None, "det", &[(GPU, "2")]).unwrap();
    let b = plan_of(&t, None, "seg", &[(GPU, "2")]).unwrap();
    t.hold_all(&a, "a");
    t.hold_all(&b, "b");
    let cv = t.0.get_mut("cv").unwrap();
    assert_eq!(commit(cv, "a", &a).unwrap(), (true, Decision::Committed));
    let (changed, d) = commit(cv, "b", &b).unwrap();
    assert!(changed, "the refusal is recorded");
    assert_eq!(
        d,
        Decision::Aborted {
            reason: "bizrq cv: requests.nvidia.com/gpu asks 2, 0 left of 16".into()
        }
    );
    // Deciding again returns what was decided.
    assert_eq!(commit(cv, "a", &a).unwrap(), (false, Decision::Committed));
    assert_eq!(commit(cv, "b", &b).unwrap(), (false, d));
    assert_eq!(
        abort(cv, "a", "late").unwrap(),
        (false, Decision::Committed)
    );
}

#[test]
fn an_aborted_transfer_undoes_its_giving_side() {
    let mut t = org();
    let p = plan_of(&t, Some("det"), "llm", &[(GPU, "4")]).unwrap();
    // ai lowered meanwhile: the receiving raise no longer fits there.
    let ai = t.0.get_mut("ai").unwrap();
    ai.spec.hard.insert(GPU.into(), q("30"));
    ai.status.refresh(&ai.spec.clone());
    let before = t.0.clone();
    let d = t.run(&p, "1");
    assert!(
        matches!(d, Decision::Aborted { reason } if reason == "bizrq ai: requests.nvidia.com/gpu asks 4, 0 left of 30")
    );
    for (name, q) in &before {
        assert_eq!(t.0[name].spec, q.spec, "{name}");
        assert_eq!(t.0[name].status.children, q.status.children, "{name}");
    }
}

#[test]
fn steps_are_guarded_and_idempotent() {
    let mut t = org();
    let p = plan_of(&t, Some("det"), "llm", &[(GPU, "4")]).unwrap();
    t.hold_all(&p, "1");
    for s in p.giving() {
        assert!(t.write(&s, "1"), "{s:?}");
        assert!(!t.write(&s, "1"), "a retry changes nothing: {s:?}");
    }
    let lca = t.0.get_mut("ai").unwrap();
    assert_eq!(commit(lca, "1", &p).unwrap(), (true, Decision::Committed));
    for s in p.receiving() {
        assert!(t.write(&s, "1"));
        assert!(!t.write(&s, "1"));
    }
    // Someone else's value is refused, naming it.
    let s = &p.receiving()[0];
    let undone = s.clone().undo();
    let llm = t.0.get_mut("nlp").unwrap();
    llm.status
        .children
        .get_mut("llm")
        .unwrap()
        .hard
        .insert(GPU.into(), q("99"));
    let err = apply(t.0.get_mut(undone.quota()).unwrap(), &undone, "1").unwrap_err();
    assert_eq!(
        err.to_string(),
        "bizrq nlp: carve-out of llm requests.nvidia.com/gpu is 99, transfer 1 expected 24; it was changed meanwhile"
    );
}

#[test]
fn the_order_never_leaves_a_child_above_its_carve_out() {
    // After every single step, each carve-out is at least its child's hard
    // on the moved keys: capacity is held, never promised twice.
    let mut t = org();
    let p = plan_of(&t, Some("det"), "llm", &[(GPU, "4")]).unwrap();
    t.hold_all(&p, "1");
    let left = |q: &Quota| {
        resources::get(&q.spec.hard, GPU).nanos() - resources::get(&q.status.used, GPU).nanos()
    };
    let before: BTreeMap<String, i128> = t.0.iter().map(|(n, q)| (n.clone(), left(q))).collect();
    let check = |t: &Tree| {
        // No room appears anywhere a concurrent create could take it, but
        // at the destination (its gain) and the LCA (giving back).
        for (n, q) in &t.0 {
            if n != "llm" && n != "ai" {
                assert!(left(q) <= before[n], "{n} shows room that is not there");
            }
        }
        for c in t.0.values().filter(|c| !c.spec.parent.is_empty()) {
            let carve = &t.0[&c.spec.parent].status.children[c.name()].hard;
            assert!(
                resources::get(carve, GPU) >= resources::get(&c.spec.hard, GPU),
                "{} holds more than its parent carved for it",
                c.name()
            );
        }
        // A node never hands its children more than was reserved for it:
        // its carve-out in its parent (its hard, for a root).
        for p in t.0.values() {
            let carved = p.status.children.values().fold(Quantity::ZERO, |a, c| {
                a.saturating_add(resources::get(&c.hard, GPU))
            });
            let reserved = match t.0.get(&p.spec.parent) {
                Some(pp) => resources::get(&pp.status.children[p.name()].hard, GPU),
                None => resources::get(&p.spec.hard, GPU),
            };
            assert!(
                carved <= reserved,
                "{} hands out {carved} of {reserved}",
                p.name()
            );
        }
    };
    for s in p.giving() {
        t.write(&s, "1");
        check(&t);
    }
    commit(t.0.get_mut("ai").unwrap(), "1", &p).unwrap();
    check(&t);
    for s in p.receiving() {
        t.write(&s, "1");
        check(&t);
    }
}

#[test]
fn holds_exclude_others_and_edits_and_repair() {
    let mut t = org();
    let p = plan_of(&t, Some("det"), "seg", &[(GPU, "3")]).unwrap();
    t.hold_all(&p, "1");
    let q2 = plan_of(&t, Some("seg"), "det", &[(GPU, "1")]).unwrap();
    let err = hold(t.0.get_mut("cv").unwrap(), "2", &q2.holds()["cv"], 0).unwrap_err();
    assert_eq!(
        err.to_string(),
        "bizrq cv: its carve-out of det is held by transfer 1; try again when that one is done"
    );
    let cv = t.0.get_mut("cv").unwrap();
    // An edit of a held child is refused; the transfer's own value passes.
    let err = tree::carve(cv, "det", &list(&[(GPU, "9"), ("pods", "50")]), T).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("bizrq det: transfer 1 is moving quota through it"),
        "{err}"
    );
    assert!(tree::carve(cv, "det", &list(&[(GPU, "7"), ("pods", "50")]), T).unwrap());
    // Repair leaves a held carve-out as it is, even when it differs.
    let mut kids = BTreeMap::new();
    kids.insert("det".to_string(), list(&[(GPU, "10"), ("pods", "50")]));
    kids.insert("seg".to_string(), list(&[(GPU, "4"), ("pods", "50")]));
    // (Long after the carve-outs were set: young ones are left anyway.)
    let later = crate::time::parse_rfc3339(T).unwrap() + tree::CARVE_TTL_MS;
    tree::repair_carves(cv, &kids, later);
    assert_eq!(cv.status.children["det"].hard[GPU], q("7"));
    release(cv, "1");
    tree::repair_carves(cv, &kids, later);
    assert_eq!(cv.status.children["det"].hard[GPU], q("10"));
}

#[test]
fn holding_again_keeps_a_decision_and_refreshes_targets() {
    let mut t = org();
    let p = plan_of(&t, Some("det"), "seg", &[(GPU, "3")]).unwrap();
    let cv = t.0.get_mut("cv").unwrap();
    let holds = p.holds();
    assert!(hold(cv, "1", &holds["cv"], 0).unwrap());
    assert!(!hold(cv, "1", &holds["cv"], 0).unwrap(), "the same again");
    let mut other = holds["cv"].clone();
    other.insert("det".into(), list(&[(GPU, "8")]));
    assert!(
        hold(cv, "1", &other, 0).unwrap(),
        "an undecided hold takes new targets"
    );
    assert_eq!(cv.status.transfers["1"].children, other);
    abort(cv, "1", "no").unwrap();
    assert!(
        !hold(cv, "1", &holds["cv"], 0).unwrap(),
        "a decided hold stays"
    );
    assert_eq!(cv.status.transfers["1"].children, other);
}

#[test]
fn approvers_are_owners_of_the_common_ancestor() {
    let t = org();
    assert_eq!(approvers_scope(&t.0, Some("det"), "seg").unwrap(), "cv");
    assert_eq!(approvers_scope(&t.0, Some("det"), "llm").unwrap(), "ai");
    assert_eq!(approvers_scope(&t.0, None, "llm").unwrap(), "nlp");
    assert_eq!(approvers_scope(&t.0, Some("cv"), "det").unwrap(), "cv");
}

#[test]
fn plans_round_trip_as_json() {
    let t = org();
    let p = plan_of(&t, Some("det"), "llm", &[(GPU, "4")]).unwrap();
    let back: Plan = serde_json::from_str(&serde_json::to_string(&p).unwrap()).unwrap();
    assert_eq!(back, p);
}
