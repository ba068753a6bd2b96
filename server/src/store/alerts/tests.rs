use super::*;
use crate::alerts::{conditions, engine, evaluate};
use crate::portal::authz::Role;
use crate::store::testdb::on_both_databases;
use quota::{Quota, QuotaSpec};

const GPU: &str = "requests.nvidia.com/gpu";
const T: i64 = 1_800_000_000_000;
const URL: &str = "http://bizrq.test";

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
    q
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
    let all = [quota("org", "", 0), quota("nlp-team", "org", 9)];
    let swept = engine::evaluate_all(s, &all, T, URL).await.unwrap();
    assert_eq!(swept.opened, 1);
    let open = s.open_alerts().await.unwrap();
    assert_eq!(open.len(), 1);
    assert_eq!(
        open[0].fingerprint,
        "threshold|nlp-team|requests.nvidia.com/gpu|warning"
    );
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
        engine::evaluate_all(s, &all, T + 1, URL).await.unwrap(),
        Default::default()
    );
    assert_eq!(s.outbox().await.unwrap().len(), 1);
    // Clears, recurs: a second alert and a second email.
    let low = [quota("org", "", 0), quota("nlp-team", "org", 1)];
    assert_eq!(
        engine::evaluate_all(s, &low, T + 2, URL)
            .await
            .unwrap()
            .resolved,
        1
    );
    assert_eq!(
        engine::evaluate_all(s, &all, T + 3, URL)
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
        engine::evaluate_all(s, &all, T, URL).await.unwrap().opened,
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
    let e = evaluate(conditions(&q, &[], &Default::default(), T), &[]);
    let recipients: BTreeMap<String, Vec<String>> = e
        .open
        .iter()
        .map(|c| (c.fingerprint(), vec!["alice@example.com".to_string()]))
        .collect();
    let runs = (0..4).map(|i| {
        let (s, e, r) = (s.clone(), e.clone(), recipients.clone());
        tokio::spawn(async move { s.apply_evaluation(&e, &r, URL, T + i).await.unwrap() })
    });
    let opened: usize = futures::future::join_all(runs)
        .await
        .into_iter()
        .map(|r| r.unwrap().len())
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
        engine::evaluate_all(s, &[quota("org", "", 9)], T, URL)
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
    };
    let requested = crate::alerts::transfer_condition(Kind::TransferRequested, &t);
    let to = |c: &crate::alerts::Condition| -> BTreeMap<String, Vec<String>> {
        [(
            c.fingerprint(),
            vec!["alice@example.com".into(), "carol@example.com".into()],
        )]
        .into()
    };
    let e = Evaluation {
        open: vec![requested.clone()],
        resolve: vec![],
    };
    s.apply_evaluation(&e, &to(&requested), URL, T)
        .await
        .unwrap();
    assert_eq!(s.open_alerts().await.unwrap().len(), 1);
    assert_eq!(
        s.alert_recipients(&["org"], Kind::TransferApproved)
            .await
            .unwrap(),
        ["alice@example.com", "carol@example.com"]
    );
    assert_eq!(
        s.alert_recipients(&["org"], Kind::Threshold).await.unwrap(),
        ["alice@example.com"]
    );
    assert_eq!(s.outbox().await.unwrap().len(), 2);
    // A sweep does not resolve it: it is not a status condition.
    engine::evaluate_all(s, &[quota("org", "", 0)], T + 1, URL)
        .await
        .unwrap();
    assert_eq!(s.open_alerts().await.unwrap().len(), 1);
}

on_both_databases!(
    a_crossing_writes_the_alert_and_its_email_in_one_go,
    a_muted_kind_sends_no_email,
    two_evaluators_at_once_open_the_alert_once,
    rules_are_stored_per_quota_and_key,
    a_transfer_alert_reaches_the_admins_and_outlives_a_sweep,
    ten_thousand_quotas_sweep_quickly,
);

/// 10 000 quotas, 1 in 10 past 80 %: the first sweep opens their alerts
/// and queues their emails; a sweep with nothing new is a few reads.
async fn ten_thousand_quotas_sweep_quickly(s: &SqlStore) {
    people(s).await;
    let all: Vec<Quota> = std::iter::once(quota("org", "", 0))
        .chain(
            (0..10_000)
                .map(|i| quota(&format!("team-{i}"), "org", if i % 10 == 0 { 9 } else { 1 })),
        )
        .collect();
    let started = std::time::Instant::now();
    let first = engine::evaluate_all(s, &all, T, URL).await.unwrap();
    let opening = started.elapsed();
    assert_eq!(first.opened, 1_000);
    let started = std::time::Instant::now();
    let again = engine::evaluate_all(s, &all, T + 30_000, URL)
        .await
        .unwrap();
    let steady = started.elapsed();
    assert_eq!(again, Default::default());
    println!(
        "{:?}: 10000 quotas, opening 1000 alerts with their emails {opening:?}; a sweep with nothing new {steady:?}",
        s.backend
    );
    assert!(steady < std::time::Duration::from_secs(1), "{steady:?}");
    assert_eq!(s.outbox().await.unwrap().len(), 1_000);
}
