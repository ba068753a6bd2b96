use super::*;
use crate::alert_engine as engine;
use crate::alerts::{conditions, evaluate, grouped};
use crate::authz::Role;
use crate::store::testdb::on_both_databases;
use quota::{Quota, QuotaSpec};

const GPU: &str = "requests.nvidia.com/gpu";
const T: i64 = 1_800_000_000_000;
const URL: &str = "http://bizrq.test";

fn keys() -> quota::KeyConfig {
    quota::KeyConfig::default()
}

fn quota(name: &str, parent: &str, used: i64) -> Quota {
    let spec = QuotaSpec {
        parent: parent.into(),
        hard: [(GPU.to_string(), quota::Quantity::from_units(10))].into(),
        ..QuotaSpec::default()
    };
    let mut q = Quota::new(name, spec);
    q.status
        .used
        .insert(GPU.into(), quota::Quantity::from_units(used));
    q.status
        .self_used
        .insert(GPU.into(), quota::Quantity::from_units(used));
    q
}

/// org with room for all its teams: what runs below it stays under 80 %.
fn roomy_org() -> Quota {
    let mut org = quota("org", "", 0);
    org.spec
        .hard
        .insert(GPU.into(), quota::Quantity::from_units(1_000_000));
    org
}

fn mailed(user_id: i64, email: &str) -> Recipient {
    Recipient {
        user_id,
        email: email.into(),
        digest: false,
    }
}

fn emails(r: Vec<Recipient>) -> Vec<String> {
    r.into_iter().map(|r| r.email).collect()
}

/// Alice owns org (with an email), Bob owns nothing, Carol is an admin.
async fn people(s: &SqlStore) {
    let alice = s.create_user("alice", "x", false, T).await.unwrap();
    s.set_user_email(alice.id, Some("alice@example.com"))
        .await
        .unwrap();
    s.set_binding(alice.id, "org", Role::Owner, T)
        .await
        .unwrap();
    let carol = s.create_user("carol", "x", true, T).await.unwrap();
    s.set_user_email(carol.id, Some("carol@example.com"))
        .await
        .unwrap();
}

async fn a_crossing_writes_the_alert_and_its_email_in_one_go(s: &SqlStore) {
    people(s).await;
    let all = [roomy_org(), quota("nlp-team", "org", 9)];
    let swept = engine::evaluate_all(s, &all, T, T, URL).await.unwrap();
    assert_eq!(swept.opened, 1);
    let open = s.open_alerts().await.unwrap();
    assert_eq!(open.len(), 1);
    assert_eq!(open[0].fingerprint, "threshold|nlp-team||warning");
    assert_eq!(open[0].numbers["used"], "9");
    // The nearest owners are org's: alice; carol (admin) only hears of transfers.
    let out = s.outbox().await.unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].recipient, "alice@example.com");
    assert_eq!(
        out[0].idempotency_key,
        format!("alert-{}-alice@example.com", open[0].id)
    );
    assert!(out[0]
        .text_body
        .contains("http://bizrq.test/quotas/nlp-team"));
    assert_eq!((out[0].next_attempt_at, out[0].sent_at), (T, None));

    // Again: nothing new.
    assert_eq!(
        engine::evaluate_all(s, &all, T + 1, T + 1, URL)
            .await
            .unwrap(),
        Default::default()
    );
    assert_eq!(s.outbox().await.unwrap().len(), 1);
    // Clears, recurs: a second alert and a second email.
    let low = [roomy_org(), quota("nlp-team", "org", 1)];
    assert_eq!(
        engine::evaluate_all(s, &low, T + 2, T + 2, URL)
            .await
            .unwrap()
            .resolved,
        1
    );
    assert_eq!(
        engine::evaluate_all(s, &all, T + 3, T + 3, URL)
            .await
            .unwrap()
            .opened,
        1
    );
    assert_eq!(s.outbox().await.unwrap().len(), 2);
    let history = s.alerts(&AlertFilter::default(), 10).await.unwrap();
    assert_eq!(history.len(), 2);
    assert_eq!(history[1].resolved_at, Some(T + 2));
}

async fn a_muted_kind_sends_no_email(s: &SqlStore) {
    people(s).await;
    let alice = s.user_by_name("alice").await.unwrap().unwrap();
    s.set_alert_pref(
        alice.id,
        Kind::Threshold,
        Pref {
            muted: true,
            digest: false,
        },
    )
    .await
    .unwrap();
    let all = [quota("org", "", 9)];
    assert_eq!(
        engine::evaluate_all(s, &all, T, T, URL)
            .await
            .unwrap()
            .opened,
        1
    );
    assert!(s.outbox().await.unwrap().is_empty());
    assert_eq!(
        s.alert_prefs(alice.id).await.unwrap()[&Kind::Threshold],
        Pref {
            muted: true,
            digest: false
        }
    );
}

async fn two_evaluators_at_once_open_the_alert_once(s: &SqlStore) {
    people(s).await;
    let q = quota("org", "", 9);
    let found = conditions(&q, None, &[], &Default::default(), T, &keys());
    let e = evaluate(grouped(found, &keys()), &[]);
    let recipients: BTreeMap<String, Vec<Recipient>> = e
        .open
        .iter()
        .map(|c| (c.fingerprint(), vec![mailed(1, "alice@example.com")]))
        .collect();
    let runs = (0..4).map(|i| {
        let (s, e, r) = (s.clone(), e.clone(), recipients.clone());
        tokio::spawn(async move {
            s.apply_evaluation(&e, &r, URL, &keys(), &Observed::at(T + i), T + i)
                .await
                .unwrap()
        })
    });
    let opened: usize = futures::future::join_all(runs)
        .await
        .into_iter()
        .map(|r| r.unwrap().opened.len())
        .sum();
    assert_eq!(opened, 1);
    assert_eq!(s.open_alerts().await.unwrap().len(), 1);
    assert_eq!(s.outbox().await.unwrap().len(), 1);
}

async fn rules_are_stored_per_quota_and_key(s: &SqlStore) {
    let rule = Rule {
        key: "*".into(),
        warn_percent: 50,
        crit_percent: 90,
        forecast_horizon_hours: Some(72),
        allocation_percent: None,
    };
    s.set_alert_rule("org", &rule).await.unwrap();
    s.set_alert_rule(
        "org",
        &Rule {
            warn_percent: 60,
            ..rule.clone()
        },
    )
    .await
    .unwrap();
    assert_eq!(
        s.alert_rules("org").await.unwrap(),
        [Rule {
            warn_percent: 60,
            ..rule.clone()
        }]
    );
    // 9 of 10 with warn at 60 % and crit at 90 %: both fire.
    assert_eq!(
        engine::evaluate_all(s, &[quota("org", "", 9)], T, T, URL)
            .await
            .unwrap()
            .opened,
        2
    );
    assert!(s.delete_alert_rule("org", "*").await.unwrap());
    assert!(s.all_alert_rules().await.unwrap().is_empty());
}

async fn a_transfer_alert_reaches_the_admins_and_outlives_a_sweep(s: &SqlStore) {
    people(s).await;
    let t = crate::store::transfers::Transfer {
        id: 42,
        from_quota: None,
        to_quota: "org".into(),
        amounts: [(GPU.to_string(), quota::Quantity::from_units(2))].into(),
        reason: "deadline".into(),
        requested_by: "alice".into(),
        requested_at: T,
        expires_at: T + 1,
        status: crate::store::transfers::TransferStatus::Requested,
        decided_by: None,
        decided_at: None,
        decision_note: None,
        plan: None,
        outcome: None,
        result: None,
        finished_at: None,
        lease_until: None,
        revert_at: None,
        reverts: None,
        reverted_by: None,
        kind: Default::default(),
        top_up: None,
    };
    let requested = crate::alert_engine::transfer_condition(Kind::TransferRequested, &t);
    let to = |c: &crate::alerts::Condition| -> BTreeMap<String, Vec<Recipient>> {
        [(
            c.fingerprint(),
            vec![
                mailed(1, "alice@example.com"),
                mailed(3, "carol@example.com"),
            ],
        )]
        .into()
    };
    let e = Evaluation {
        open: vec![requested.clone()],
        ..Evaluation::default()
    };
    s.apply_evaluation(&e, &to(&requested), URL, &keys(), &Observed::at(T), T)
        .await
        .unwrap();
    assert_eq!(s.open_alerts().await.unwrap().len(), 1);
    assert_eq!(
        emails(
            s.alert_recipients(&["org"], Kind::TransferApproved, true)
                .await
                .unwrap()
        ),
        ["alice@example.com", "carol@example.com"]
    );
    assert_eq!(
        emails(
            s.alert_recipients(&["org"], Kind::Threshold, false)
                .await
                .unwrap()
        ),
        ["alice@example.com"]
    );
    assert_eq!(s.outbox().await.unwrap().len(), 2);
    // A sweep does not resolve it: it is not a status condition.
    engine::evaluate_all(s, &[quota("org", "", 0)], T + 1, T + 1, URL)
        .await
        .unwrap();
    assert_eq!(s.open_alerts().await.unwrap().len(), 1);
}

/// Replica B (fresh) resolves an alert; replica A's evaluation, from a
/// view older than that, arrives late: it must not reopen (a second email
/// for one crossing). Likewise a view older than an opening never resolves it.
async fn a_stale_evaluation_neither_reopens_nor_resolves(s: &SqlStore) {
    people(s).await;
    let held = [quota("org", "", 9)];
    let clear = [quota("org", "", 1)];
    async fn sweep(s: &SqlStore, q: &[Quota], observed: i64, now: i64) -> engine::Swept {
        engine::evaluate_all(s, q, observed, now, URL)
            .await
            .unwrap()
    }
    assert_eq!(sweep(s, &held, T, T).await.opened, 1);
    assert_eq!(sweep(s, &clear, T + 10, T + 10).await.resolved, 1);
    // Seen at T + 5 (still crossed then), applied at T + 20: stale.
    assert_eq!(sweep(s, &held, T + 5, T + 20).await, Default::default());
    assert_eq!(s.outbox().await.unwrap().len(), 1, "no second email");
    // Seen after the resolution: a real recurrence, a real second email.
    assert_eq!(sweep(s, &held, T + 30, T + 30).await.opened, 1);
    assert_eq!(s.outbox().await.unwrap().len(), 2);
    // Seen at T + 25, before that opening: does not resolve it.
    assert_eq!(sweep(s, &clear, T + 25, T + 40).await, Default::default());
    assert_eq!(s.open_alerts().await.unwrap().len(), 1);
    assert_eq!(sweep(s, &clear, T + 41, T + 41).await.resolved, 1);
}

/// A batch of writes is judged per quota, each as of its own write: an
/// older write of another quota in the batch does not make org's fresh
/// view stale.
async fn each_quota_is_judged_as_of_its_own_write(s: &SqlStore) {
    people(s).await;
    let sweep = |q: Quota, at: i64| async move {
        engine::evaluate_all(s, &[q], at, at, URL).await.unwrap()
    };
    assert_eq!(sweep(quota("org", "", 9), T).await.opened, 1);
    assert_eq!(sweep(quota("org", "", 1), T + 10).await.resolved, 1);
    let held = quota("org", "", 9);
    let found = conditions(&held, None, &[], &Default::default(), T + 30, &keys());
    let e = evaluate(grouped(found, &keys()), &[]);
    let observed = Observed {
        default: T + 5,
        by_quota: [("org".to_string(), T + 20)].into(),
        ..Observed::default()
    };
    let applied = s
        .apply_evaluation(&e, &BTreeMap::new(), URL, &keys(), &observed, T + 30)
        .await
        .unwrap();
    assert_eq!(applied.opened.len(), 1, "org's view (T + 20) is newer");
    let stale = Observed {
        default: T + 5,
        ..Observed::default()
    };
    let open = s.open_alerts().await.unwrap();
    let e = Evaluation {
        resolve: open.iter().map(|a| a.id).collect(),
        ..Evaluation::default()
    };
    let applied = s
        .apply_evaluation(&e, &BTreeMap::new(), URL, &keys(), &stale, T + 40)
        .await
        .unwrap();
    assert_eq!(applied.resolved, 0, "a view older than the opening");
}

/// A write's ancestor is evaluated from this process's cache, of no known
/// moment: a key joining its alert there keeps the alert's moment, so a
/// sweep that saw every key clear after the alert opened (but before the
/// write batch) still resolves it.
async fn an_update_from_the_cache_keeps_the_alerts_moment(s: &SqlStore) {
    people(s).await;
    let org = |gpu: i64, cpu: i64| {
        let mut q = quota("org", "", gpu);
        let used = quota::Quantity::from_units(cpu);
        q.spec
            .hard
            .insert("requests.cpu".into(), quota::Quantity::from_units(10));
        q.status.used.insert("requests.cpu".into(), used);
        q.status.self_used.insert("requests.cpu".into(), used);
        q
    };
    // CPU cores are watched by a rule (by default only GPUs are, here).
    let every_key = crate::alerts::Rule::default_for("*");
    s.set_alert_rule("org", &every_key).await.unwrap();
    let swept = engine::evaluate_all(s, &[org(9, 1)], T, T, URL)
        .await
        .unwrap();
    assert_eq!(swept.opened, 1);
    let open: Vec<_> = s
        .open_alerts()
        .await
        .unwrap()
        .iter()
        .map(Alert::as_open)
        .collect();
    // A child written at T + 50; org, its ancestor, from the cache: CPU joins.
    let found = conditions(
        &org(9, 9),
        None,
        &[every_key],
        &Default::default(),
        T + 50,
        &keys(),
    );
    let e = evaluate(grouped(found, &keys()), &open);
    assert_eq!(e.update.len(), 1);
    let observed = Observed {
        default: T + 50,
        by_quota: [("team".to_string(), T + 50)].into(),
        cached: ["org".to_string()].into(),
    };
    let applied = s
        .apply_evaluation(&e, &BTreeMap::new(), URL, &keys(), &observed, T + 60)
        .await
        .unwrap();
    assert_eq!(applied.updated, 1);
    // A sweep that listed at T + 20 (org clear by then) resolves it.
    let swept = engine::evaluate_all(s, &[org(1, 1)], T + 20, T + 70, URL)
        .await
        .unwrap();
    assert_eq!(
        swept.resolved, 1,
        "the cache's view is not newer than the sweep's"
    );
}

/// Alice takes thresholds as a digest: a quota over hard mails her the
/// over-quota alert at once; its two threshold alerts wait for the digest
/// hour, then go out together in one email, once, whoever queues it.
async fn a_digest_kind_waits_for_one_daily_email(s: &SqlStore) {
    people(s).await;
    let alice = s.user_by_name("alice").await.unwrap().unwrap();
    let digest = Pref {
        muted: false,
        digest: true,
    };
    s.set_alert_pref(alice.id, Kind::Threshold, digest)
        .await
        .unwrap();
    const HOUR: i64 = 3_600_000;
    // T is 08:00 UTC: the digest hour below.
    assert_eq!(crate::alerts::digest_cutoff(T, 8), T);
    let swept = engine::evaluate_all(s, &[quota("org", "", 11)], T, T, URL)
        .await
        .unwrap();
    assert_eq!(swept.opened, 3, "warning, critical, over quota");
    let out = s.outbox().await.unwrap();
    assert_eq!(out.len(), 1);
    assert!(out[0].subject.contains("over quota"), "{}", out[0].subject);
    // Not before the next digest hour.
    assert_eq!(
        engine::queue_digests(s, T, 8, URL, &keys()).await.unwrap(),
        0
    );
    assert_eq!(
        engine::queue_digests(s, T + 23 * HOUR, 8, URL, &keys())
            .await
            .unwrap(),
        0
    );
    // Then from several replicas at once: one digest.
    let runs = (0..4).map(|_| {
        let s = s.clone();
        tokio::spawn(async move {
            engine::queue_digests(&s, T + 24 * HOUR + 1, 8, URL, &keys())
                .await
                .unwrap()
        })
    });
    let queued: usize = futures::future::join_all(runs)
        .await
        .into_iter()
        .map(|r| r.unwrap())
        .sum();
    assert_eq!(queued, 1);
    let out = s.outbox().await.unwrap();
    assert_eq!(out.len(), 2);
    let d = out
        .iter()
        .find(|m| m.idempotency_key.starts_with("digest-"))
        .unwrap();
    assert_eq!(d.recipient, "alice@example.com");
    assert!(d.subject.contains("2 alerts"), "{}", d.subject);
    assert_eq!(
        d.text_body.matches("http://bizrq.test/quotas/org").count(),
        2
    );
    assert!(
        d.text_body.contains("at 80 %") || d.text_body.contains("80"),
        "{}",
        d.text_body
    );
    // Done: nothing more, a day later either.
    assert_eq!(
        engine::queue_digests(s, T + 48 * HOUR, 8, URL, &keys())
            .await
            .unwrap(),
        0
    );
    // A new crossing (a child without owners: org's owner hears) goes into
    // the next day's digest, its own email.
    let two = [quota("org", "", 11), quota("team", "org", 9)];
    engine::evaluate_all(s, &two, T + 49 * HOUR, T + 49 * HOUR, URL)
        .await
        .unwrap();
    assert_eq!(s.outbox().await.unwrap().len(), 2);
    assert_eq!(
        engine::queue_digests(s, T + 72 * HOUR, 8, URL, &keys())
            .await
            .unwrap(),
        1
    );
    let out = s.outbox().await.unwrap();
    assert_eq!(out.len(), 3);
    assert!(out[2].subject.contains("1 alert "), "{}", out[2].subject);
    assert!(out[2].text_body.contains("/quotas/team"));
}

/// nlp-team's job over GPUs and CPU cores: one alert with both keys and
/// one email; acknowledged, A100 crossing later updates it (no second
/// alert) and asks again: acknowledgement gone, one email for the keys it
/// covers now, however often evaluated; a key leaving keeps a new
/// acknowledgement quiet; it resolves when none is over.
async fn a_condition_on_several_keys_is_one_alert_that_follows_its_keys(s: &SqlStore) {
    people(s).await;
    let a100 = "requests.nvidia.com/gpu.A100";
    let cpu = "requests.cpu";
    let team = |gpu: i64, a: i64, c: i64| {
        let mut q = quota("nlp-team", "org", gpu);
        for (k, used) in [(a100, a), (cpu, c)] {
            let used = quota::Quantity::from_units(used);
            q.spec
                .hard
                .insert(k.into(), quota::Quantity::from_units(10));
            q.status.used.insert(k.into(), used);
            q.status.self_used.insert(k.into(), used);
        }
        [roomy_org(), q]
    };
    // CPU cores are watched by a rule (by default only GPUs are, here).
    s.set_alert_rule("nlp-team", &crate::alerts::Rule::default_for("*"))
        .await
        .unwrap();
    let swept = engine::evaluate_all(s, &team(9, 1, 8), T, T, URL)
        .await
        .unwrap();
    assert_eq!((swept.opened, swept.updated), (1, 0));
    let open = s.open_alerts().await.unwrap();
    assert_eq!(open.len(), 1);
    assert_eq!(open[0].fingerprint, "threshold|nlp-team||warning");
    assert_eq!(open[0].keys, [GPU, cpu]);
    assert_eq!(open[0].key, GPU, "the worst: 90 %");
    let id = open[0].id;
    let out = s.outbox().await.unwrap();
    assert_eq!(out.len(), 1);
    assert!(
        out[0].subject.contains("(and 1 more keys)"),
        "{}",
        out[0].subject
    );
    assert!(
        out[0].text_body.contains("- CPU cores: 8 of 10 (80 %)"),
        "{}",
        out[0].text_body
    );
    assert!(s.ack_alert(id, "alice", T + 1).await.unwrap());
    // A100 crosses too, the worst now: the same alert, asking again.
    let swept = engine::evaluate_all(s, &team(9, 10, 8), T + 2, T + 2, URL)
        .await
        .unwrap();
    assert_eq!((swept.opened, swept.updated), (1, 1), "critical is its own");
    let warning = s.alert(id).await.unwrap().unwrap();
    assert_eq!(warning.keys, [GPU, a100, cpu]);
    assert_eq!(warning.key, a100);
    assert!(
        warning.message.contains("; 3 keys: "),
        "{}",
        warning.message
    );
    assert_eq!(warning.acked, None, "a key joined: asks again");
    assert_eq!(warning.resolved_at, None);
    let out = s.outbox().await.unwrap();
    assert_eq!(out.len(), 3, "the critical's email and the warning's again");
    let again: Vec<_> = out
        .iter()
        .filter(|m| m.idempotency_key.starts_with(&format!("alert-{id}-")))
        .collect();
    assert_eq!(again.len(), 2, "{out:?}");
    assert_ne!(again[0].idempotency_key, again[1].idempotency_key);
    assert!(
        again
            .iter()
            .any(|m| m.text_body.contains("- A100 GPUs: 10 of 10 (100 %)")),
        "{again:?}"
    );
    // Again: nothing to write.
    let again = engine::evaluate_all(s, &team(9, 10, 8), T + 3, T + 3, URL).await;
    assert_eq!(again.unwrap(), Default::default());
    // Acknowledged again, CPU cores clear: updated, still quiet, no email.
    assert!(s.ack_alert(id, "alice", T + 3).await.unwrap());
    let swept = engine::evaluate_all(s, &team(9, 10, 1), T + 3, T + 3, URL)
        .await
        .unwrap();
    assert_eq!(swept.updated, 1);
    let warning = s.alert(id).await.unwrap().unwrap();
    assert_eq!(warning.keys, [GPU, a100]);
    assert!(warning.acked.is_some(), "a key leaving asks nothing");
    assert_eq!(s.outbox().await.unwrap().len(), 3);
    // None over: resolved.
    let swept = engine::evaluate_all(s, &team(1, 1, 1), T + 4, T + 4, URL)
        .await
        .unwrap();
    assert_eq!(swept.resolved, 2);
    assert!(s.open_alerts().await.unwrap().is_empty());
}

/// An alert as stored before migration 0020: (quota, kind, key, level,
/// resolved_at, acked_by, snoozed_until).
type OldAlert<'a> = (
    &'a str,
    &'a str,
    &'a str,
    &'a str,
    Option<i64>,
    Option<&'a str>,
    Option<i64>,
);

mod merge_per_key;

on_both_databases!(
    a_condition_on_several_keys_is_one_alert_that_follows_its_keys,
    an_update_from_the_cache_keeps_the_alerts_moment,
    a_stale_evaluation_neither_reopens_nor_resolves,
    each_quota_is_judged_as_of_its_own_write,
    a_digest_kind_waits_for_one_daily_email,
    a_crossing_writes_the_alert_and_its_email_in_one_go,
    a_muted_kind_sends_no_email,
    two_evaluators_at_once_open_the_alert_once,
    rules_are_stored_per_quota_and_key,
    a_transfer_alert_reaches_the_admins_and_outlives_a_sweep,
    ten_thousand_quotas_sweep_once,
);

/// 10 000 quotas, 1 in 10 past 80 %: the first sweep opens their alerts
/// and queues their emails; a sweep with nothing new opens and queues
/// nothing. How long either takes is printed, not asserted (a timed unit
/// test fails on a busy machine; the figures belong to the benchmarks).
async fn ten_thousand_quotas_sweep_once(s: &SqlStore) {
    people(s).await;
    let all: Vec<Quota> = std::iter::once(roomy_org())
        .chain(
            (0..10_000)
                .map(|i| quota(&format!("team-{i}"), "org", if i % 10 == 0 { 9 } else { 1 })),
        )
        .collect();
    let started = std::time::Instant::now();
    let first = engine::evaluate_all(s, &all, T, T, URL).await.unwrap();
    let opening = started.elapsed();
    assert_eq!(first.opened, 1_000);
    let started = std::time::Instant::now();
    let again = engine::evaluate_all(s, &all, T + 30_000, T + 30_000, URL)
        .await
        .unwrap();
    let steady = started.elapsed();
    assert_eq!(again, Default::default());
    println!(
        "{:?}: 10000 quotas, opening 1000 alerts with their emails {opening:?}; a sweep with nothing new {steady:?}",
        s.backend
    );
    assert_eq!(s.outbox().await.unwrap().len(), 1_000);
}
