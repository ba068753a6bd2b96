//! The standalone resync: carve-out repair and cash accrual, with a clock
//! the test controls.

use crate::common::*;
use bizrq::metrics::Metrics;
use bizrq::service::{Persist, Service};
use bizrq::store::sql::SqlStore;
use quota::object::{Carve, QuotaSpec};
use quota::tree::CARVE_TTL_MS;
use quota::workload::PodSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;

#[tokio::test]
async fn resync_repairs_carve_outs_and_accrues_cash() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqlStore::connect(&fresh_sqlite(&dir)).await.unwrap();
    let t0 = 1_800_000_000_000i64;
    let (clock, c) = test_clock(t0);
    let svc = Service::new(
        Arc::new(store),
        Default::default(),
        Default::default(),
        Arc::new(Metrics::default()),
    )
    .with_clock(c);
    let hard = resources(&[
        ("requests.nvidia.com/gpu", "16"),
        ("cash/requests.nvidia.com/gpu", "100"),
    ]);
    let spec = |parent: &str, gpu: &str, cash: &str| QuotaSpec {
        parent: parent.into(),
        hard: resources(&[
            ("requests.nvidia.com/gpu", gpu),
            ("cash/requests.nvidia.com/gpu", cash),
        ]),
        max: Default::default(),
        budgets: Default::default(),
        queueing: Default::default(),
        fair_sharing: Default::default(),
        idle: None,
    };
    svc.create_quota(
        "root",
        QuotaSpec {
            parent: String::new(),
            hard,
            max: Default::default(),
            budgets: Default::default(),
            queueing: Default::default(),
            fair_sharing: Default::default(),
            idle: None,
        },
        Persist::Here,
        "",
        false,
    )
    .await
    .unwrap();
    svc.create_quota("team", spec("root", "4", "10"), Persist::Here, "", false)
        .await
        .unwrap();

    // A create that crashed after carving (old), one still in flight
    // (fresh), and a child whose carve-out went missing.
    let ts = |ms| quota::time::format_rfc3339(ms);
    svc.update_status("root", false, |q| {
        q.status.children.insert(
            "ghost".into(),
            Carve {
                hard: resources(&[("requests.nvidia.com/gpu", "8")]),
                since: ts(t0 - CARVE_TTL_MS - 1),
                uid: "x".into(),
            },
        );
        q.status.children.insert(
            "pending".into(),
            Carve {
                hard: resources(&[("requests.nvidia.com/gpu", "2")]),
                since: ts(t0 + 5_400_000 - 1_000),
                uid: "y".into(),
            },
        );
        q.status.children.remove("team");
        q.status.refresh(&q.spec.clone());
        Ok((true, ()))
    })
    .await
    .unwrap();
    assert_eq!(
        svc.get("root").await.unwrap().quota.status.used["requests.nvidia.com/gpu"],
        "10".parse().unwrap()
    );

    // A workload holding 2 cards for an hour and a half.
    let per_pod = resources(&[("requests.nvidia.com/gpu", "1")]);
    let sets = vec![PodSet {
        name: "main".into(),
        count: 2,
        per_pod,
        qos: None,
    }];
    svc.charge(bizrq::service::ChargeRequest::new(
        "team",
        "apps/Deployment/ml/train",
        sets,
        "u1",
    ))
    .await
    .unwrap();
    clock.store(t0 + 5_400_000, Ordering::SeqCst);

    let written = svc.resync().await.unwrap();
    assert!(written >= 2, "root and team change: {written}");
    let root = svc.get("root").await.unwrap().quota;
    let kids: Vec<&str> = root.status.children.keys().map(String::as_str).collect();
    assert_eq!(
        kids,
        vec!["pending", "team"],
        "ghost returned, team restored, pending kept"
    );
    assert_eq!(
        root.status.used["requests.nvidia.com/gpu"],
        "6".parse().unwrap()
    );
    let team = svc.get("team").await.unwrap().quota;
    assert_eq!(
        team.status.used["cash/requests.nvidia.com/gpu"],
        "3".parse().unwrap(),
        "2 cards × 1.5 h"
    );

    // Nothing changed since: an idle resync writes nothing.
    assert_eq!(svc.resync().await.unwrap(), 0);

    // Once the pending create is past its time, its carve-out goes back too.
    clock.store(t0 + 5_400_000 + CARVE_TTL_MS, Ordering::SeqCst);
    svc.resync().await.unwrap();
    let root = svc.get("root").await.unwrap().quota;
    assert_eq!(
        root.status.children.keys().collect::<Vec<_>>(),
        vec!["team"]
    );
    assert_eq!(
        root.status.used["requests.nvidia.com/gpu"],
        "4".parse().unwrap()
    );
}
