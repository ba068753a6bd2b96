//! The migration that merges alerts stored one per key into one per
//! condition, on a database made by the migrations before it.

use super::*;

/// A database whose alerts were one per key (up to migration 0019): the
/// open alerts of one quota, kind and level become one, quiet only if all
/// were (acknowledged if every one was, else snoozed until the first wakes);
/// the old ones are kept, acknowledgements included, resolved as merged;
/// a condition with one alert keeps it; history and other kinds stay. An
/// open alert without a key beside others of its condition is merged too
/// (it would collide with the merged one). The open ones name no key until
/// the engine's first evaluation, which rewrites each of them.
async fn alerts_per_key_are_merged_into_one_per_condition(url: &str, migrations: &str) {
    use sqlx::Row;
    sqlx::any::install_default_drivers();
    let old = tempfile::tempdir().unwrap();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../migrations")
        .join(migrations);
    for f in std::fs::read_dir(&dir).unwrap() {
        let f = f.unwrap();
        if f.file_name().to_string_lossy().as_ref() < "0020" {
            std::fs::copy(f.path(), old.path().join(f.file_name())).unwrap();
        }
    }
    let pool = sqlx::any::AnyPoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await
        .unwrap();
    let before = sqlx::migrate::Migrator::new(old.path()).await.unwrap();
    assert_eq!(before.iter().count(), 19);
    before.run(&pool).await.unwrap();
    let rows: [OldAlert; 11] = [
        // nlp's warning on three keys: two acknowledged, one snoozed.
        (
            "nlp",
            "threshold",
            GPU,
            "warning",
            None,
            Some("alice"),
            None,
        ),
        (
            "nlp",
            "threshold",
            "requests.cpu",
            "warning",
            None,
            Some("bob"),
            None,
        ),
        (
            "nlp",
            "threshold",
            "requests.memory",
            "warning",
            None,
            None,
            Some(T + 50),
        ),
        // cv's warning on two keys, one of them loud: the merged one is loud.
        ("cv", "threshold", GPU, "warning", None, Some("alice"), None),
        ("cv", "threshold", "pods", "warning", None, None, None),
        // nlp's critical on one key: kept as it is.
        (
            "nlp",
            "threshold",
            GPU,
            "critical",
            None,
            Some("alice"),
            None,
        ),
        // History, and a reclaim (not on keys).
        (
            "nlp",
            "threshold",
            "pods",
            "warning",
            Some(T - 10),
            None,
            None,
        ),
        ("nlp", "reclaim_pending", "", "warning", None, None, None),
        (
            "ai",
            "over_quota",
            GPU,
            "critical",
            None,
            None,
            Some(T + 70),
        ),
        // cv's over quota: one alert without a key, one on GPUs.
        ("cv", "over_quota", "", "critical", None, Some("bob"), None),
        ("cv", "over_quota", GPU, "critical", None, None, None),
    ];
    for (i, (quota, kind, key, level, resolved, acked, snoozed)) in rows.iter().enumerate() {
        sqlx::query(
            "INSERT INTO alerts (fingerprint, kind, quota, key, level, message, numbers, \
             opened_at, resolved_at, opened_seen_at, acked_by, acked_at, snoozed_until, snoozed_by) \
             VALUES ($1, $2, $3, $4, $5, $6, '{}', $7, $8, $7, $9, $10, $11, $12)",
        )
        .bind(format!("{kind}|{quota}|{key}|{level}"))
        .bind(*kind)
        .bind(*quota)
        .bind(*key)
        .bind(*level)
        .bind(format!("{key} of {quota} at {i}"))
        .bind(T + i as i64)
        .bind(*resolved)
        .bind(acked.map(str::to_string))
        .bind(acked.map(|_| T + 100 + i as i64))
        .bind(*snoozed)
        .bind(snoozed.map(|_| "carol".to_string()))
        .execute(&pool)
        .await
        .unwrap();
    }
    let open_before = sqlx::query("SELECT COUNT(*) FROM alerts WHERE resolved_at IS NULL")
        .fetch_one(&pool)
        .await
        .unwrap()
        .get::<i64, _>(0);
    assert_eq!(open_before, 10);
    pool.close().await;

    let store = SqlStore::connect(url).await.unwrap();
    let open = store.open_alerts().await.unwrap();
    let by_fp = |fp: &str| open.iter().find(|a| a.fingerprint == fp).cloned();
    assert_eq!(open.len(), 6, "{open:#?}");
    let nlp = by_fp("threshold|nlp||warning").unwrap();
    assert!(nlp.id > 11, "a new alert for the condition");
    assert_eq!(nlp.key, "", "no worst named until evaluated");
    let mut keys = nlp.keys.clone();
    keys.sort();
    assert_eq!(keys, ["requests.cpu", "requests.memory", GPU]);
    assert_eq!(nlp.opened_at, T, "when the first opened");
    assert_eq!(nlp.acked, None, "one of them was snoozed, not acknowledged");
    assert_eq!(nlp.snoozed, Some(("carol".to_string(), T + 50)));
    assert!(nlp.message.starts_with("3 keys: "), "{}", nlp.message);
    let cv = by_fp("threshold|cv||warning").unwrap();
    assert_eq!(
        (cv.acked.clone(), cv.snoozed.clone()),
        (None, None),
        "pods was loud"
    );
    let crit = by_fp("threshold|nlp||critical").unwrap();
    assert_eq!(
        (crit.id, crit.keys.clone()),
        (6, vec![GPU.to_string()]),
        "kept"
    );
    assert_eq!(crit.key, "", "no worst named until evaluated");
    let cv_over = by_fp("over_quota|cv||critical").unwrap();
    assert!(cv_over.id > 11, "{cv_over:?}");
    assert_eq!(cv_over.keys, [GPU], "the empty key left out");
    assert_eq!(cv_over.acked, None, "GPUs' was loud");
    for id in [10, 11] {
        let a = store.alert(id).await.unwrap().unwrap();
        assert_eq!(a.merged_into, Some(cv_over.id), "{a:?}");
    }
    assert_eq!(crit.acked, Some(("alice".to_string(), T + 105)));
    let over = by_fp("over_quota|ai||critical").unwrap();
    assert_eq!(
        (over.id, over.snoozed.clone()),
        (9, Some(("carol".into(), T + 70)))
    );
    assert!(by_fp("reclaim_pending|nlp||warning").is_some());
    // The old ones: resolved as merged, each as it was.
    for id in [1, 2, 3] {
        let a = store.alert(id).await.unwrap().unwrap();
        assert_eq!(a.merged_into, Some(nlp.id), "{a:?}");
        assert!(a.resolved_at.is_some());
    }
    let first = store.alert(1).await.unwrap().unwrap();
    assert_eq!(first.acked, Some(("alice".to_string(), T + 100)));
    assert_eq!(
        store.alert(4).await.unwrap().unwrap().merged_into,
        Some(cv.id)
    );
    let history = store.alert(7).await.unwrap().unwrap();
    assert_eq!(
        (
            history.fingerprint.as_str(),
            history.resolved_at,
            history.merged_into
        ),
        ("threshold|nlp||warning", Some(T - 10), None)
    );
    assert_eq!(history.keys, ["pods"]);
    assert_eq!(history.key, "pods", "history keeps its key");
    // The engine carries on with the merged alert: it updates it, opens
    // no second one.
    let mut q = Quota::new("nlp", QuotaSpec::default());
    for k in [GPU, "requests.cpu"] {
        q.spec
            .hard
            .insert(k.into(), quota::Quantity::from_units(10));
        q.status
            .used
            .insert(k.into(), quota::Quantity::from_units(9));
        q.status
            .self_used
            .insert(k.into(), quota::Quantity::from_units(9));
    }
    let mut ai = Quota::new("ai", QuotaSpec::default());
    ai.spec
        .hard
        .insert(GPU.into(), quota::Quantity::from_units(10));
    for used in [&mut ai.status.used, &mut ai.status.self_used] {
        used.insert(GPU.into(), quota::Quantity::from_units(11));
    }
    // Its CPU cores are watched by a rule (by default only GPUs are).
    store
        .set_alert_rule("nlp", &crate::alerts::Rule::default_for("*"))
        .await
        .unwrap();
    let swept = engine::evaluate_all(&store, &[q, ai], T + 200, T + 200, URL)
        .await
        .unwrap();
    assert_eq!(
        swept.updated, 2,
        "nlp's warning and ai's over quota: {swept:?}"
    );
    let open = store.open_alerts().await.unwrap();
    assert!(
        open.iter().all(|a| a.quota == "ai" || a.id <= nlp.id),
        "none opened beside nlp's merged alert: {open:#?}"
    );
    let nlp = store.alert(nlp.id).await.unwrap().unwrap();
    assert_eq!(nlp.keys, [GPU, "requests.cpu"]);
    assert_eq!((nlp.key.as_str(), nlp.resolved_at), (GPU, None));
    assert_eq!(nlp.numbers["worst"], GPU, "rewritten");
    assert_eq!(
        store.alert(nlp.id).await.unwrap().unwrap().snoozed,
        Some(("carol".to_string(), T + 50)),
        "no key joined: the rewrite asks nobody again"
    );
    // ai's over quota on GPUs alone, kept, its keys as the engine would
    // write them: rewritten all the same, still snoozed.
    let over = store.alert(over.id).await.unwrap().unwrap();
    assert_eq!((over.key.as_str(), over.resolved_at), (GPU, None));
    assert_eq!(over.numbers["worst"], GPU, "{over:?}");
    assert_eq!(over.snoozed, Some(("carol".to_string(), T + 70)));
    store.close().await;
}

#[tokio::test]
async fn alerts_per_key_are_merged_into_one_per_condition_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("old.db").display());
    alerts_per_key_are_merged_into_one_per_condition(&url, "sqlite").await;
}

#[tokio::test]
async fn alerts_per_key_are_merged_into_one_per_condition_on_postgres() {
    let (base, db) = crate::store::testdb::new_postgres_database().await;
    alerts_per_key_are_merged_into_one_per_condition(&format!("{base}/{db}"), "postgres").await;
    crate::store::testdb::drop_postgres_database(&base, &db).await;
}
