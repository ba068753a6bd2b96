//! Roles on quotas: co-owners, and quotas deleted and made again.

use super::*;

/// An owner of nlp may add members and owners below nlp, but not turn a
/// co-owner of nlp into a member (that takes an admin or an owner above).
async fn an_owner_cannot_demote_a_co_owner(s: &Server) {
    tree(s).await;
    let admin = Browser::admin(s).await;
    create_user(&admin, "alice", ALICE_PW).await;
    create_user(&admin, "carol", CAROL_PW).await;
    create_user(&admin, "dave", "dave-password-1234").await;
    bind(&admin, "alice", "nlp", "owner").await;
    bind(&admin, "carol", "nlp", "owner").await;
    let alice = Browser::logged_in(s, "alice", ALICE_PW).await;
    alice.get("/quotas/nlp").await;
    let member = |user: &'static str, quota: &'static str, role: &'static str| {
        let alice = &alice;
        async move {
            alice
                .post(
                    &format!("/quotas/{quota}/members"),
                    &[("username", user), ("role", role)],
                )
                .await
                .status
        }
    };
    assert_eq!(
        member("carol", "nlp", "member").await,
        StatusCode::FORBIDDEN
    );
    let roles = admin.get("/users").await.body;
    let carol = &roles[roles.find(">carol<").unwrap()..];
    assert!(
        carol[..carol.find("</tr>").unwrap()].contains("role owner"),
        "carol is still owner of nlp"
    );
    assert_eq!(member("dave", "nlp", "member").await, StatusCode::SEE_OTHER);
    assert_eq!(
        member("dave", "nlp-a", "owner").await,
        StatusCode::SEE_OTHER
    );
    assert_eq!(
        member("dave", "nlp-a", "member").await,
        StatusCode::SEE_OTHER
    );
    assert_eq!(member("dave", "nlp", "owner").await, StatusCode::FORBIDDEN);
    // An admin may.
    admin.get("/quotas/nlp").await;
    let p = admin
        .post(
            "/quotas/nlp/members",
            &[("username", "carol"), ("role", "member")],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER);
}

/// A quota deleted and made again under the same name starts with no
/// roles and no alert rules; the removals are audited.
async fn a_deleted_quota_takes_its_roles_and_rules_along(s: &Server) {
    tree(s).await;
    let admin = Browser::admin(s).await;
    create_user(&admin, "carol", CAROL_PW).await;
    bind(&admin, "carol", "cv", "owner").await;
    admin.get("/quotas/cv/alerts").await;
    let p = admin
        .post(
            "/quotas/cv/alerts",
            &[("key", "*"), ("warn_percent", "50"), ("crit_percent", "90")],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    let (st, v) = s.api(Method::DELETE, "/api/v1/quotas/cv", None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    s.create_quota("cv", "ai", json!({ GPU: "4" })).await;
    let carol = Browser::logged_in(s, "carol", CAROL_PW).await;
    assert_eq!(
        carol.get("/quotas/cv").await.status,
        StatusCode::NOT_FOUND,
        "the new cv is not carol's"
    );
    let rules = admin.get("/quotas/cv/alerts").await.body;
    assert!(
        !rules.contains(">50<") && !rules.contains("\"50\""),
        "{rules}"
    );
    let audit = admin.get("/audit?actor=bizrq&target=cv").await.body;
    assert!(
        audit.contains("carol is no longer owner of cv: the quota was deleted"),
        "{audit}"
    );
    assert!(audit.contains("alert rule for * on cv removed"), "{audit}");
}

on_both!(
    an_owner_cannot_demote_a_co_owner,
    a_deleted_quota_takes_its_roles_and_rules_along,
);

/// Cluster mode: a quota deleted in the cluster (as `kubectl delete` does)
/// is seen by the controller's watch, which removes its roles and alert
/// rules (audited), so a later quota of the same name starts with none.
#[tokio::test]
async fn a_quota_deleted_in_the_cluster_takes_its_roles_and_rules_along() {
    use crate::cluster::{Cluster, T0};
    let dir = tempfile::tempdir().unwrap();
    let url = fresh_sqlite(&dir);
    let c = Cluster::start_on(crate::fakeapi::FakeApi::new(), dir, T0).await;
    c.server.create_quota("ai", "", json!({ GPU: "16" })).await;
    c.server.create_quota("cv", "ai", json!({ GPU: "4" })).await;
    let sql = bizrq::store::sql::SqlStore::connect(&url).await.unwrap();
    let carol = sql.create_user("carol", "h", false, 1).await.unwrap();
    sql.set_binding(carol.id, "cv", bizrq::authz::Role::Owner, 1)
        .await
        .unwrap();
    sql.set_alert_rule(
        "cv",
        &bizrq::alerts::Rule {
            key: "*".into(),
            warn_percent: 50,
            crit_percent: 90,
            forecast_horizon_hours: None,
            allocation_percent: None,
        },
    )
    .await
    .unwrap();
    c.fake
        .remove("bizrq.io", "bizgroupresourcequotas", "", "cv");
    let removed = || async {
        (sql.bindings_on("cv").await.unwrap().is_empty()
            && sql.alert_rules("cv").await.unwrap().is_empty())
        .then_some(())
    };
    let gone = poll_until(200, Duration::from_millis(50), removed).await;
    assert!(
        gone.is_some(),
        "the controller removed cv's roles and rules"
    );
    let audit = sql
        .audit(
            &bizrq::store::audit::AuditFilter {
                actor: Some("bizrq".into()),
                target: Some("cv".into()),
                ..Default::default()
            },
            10,
        )
        .await
        .unwrap();
    assert_eq!(audit.len(), 2, "{audit:?}");
}

/// Cluster mode: a quota deleted while no controller ran (its watch never
/// sees the deletion) loses its roles and alert rules when the controller's
/// first complete list does not find it, audited; a listed quota keeps its.
#[tokio::test]
async fn a_quota_deleted_while_no_controller_ran_loses_its_roles_and_rules_at_start() {
    use crate::cluster::{Cluster, T0};
    use bizrq::authz::Role;
    let dir = tempfile::tempdir().unwrap();
    let url = fresh_sqlite(&dir);
    let sql = bizrq::store::sql::SqlStore::connect(&url).await.unwrap();
    let carol = sql.create_user("carol", "h", false, 1).await.unwrap();
    sql.set_binding(carol.id, "ai", Role::Member, 1)
        .await
        .unwrap();
    sql.set_binding(carol.id, "cv", Role::Owner, 1)
        .await
        .unwrap();
    sql.set_alert_rule(
        "cv",
        &bizrq::alerts::Rule {
            key: "*".into(),
            warn_percent: 50,
            crit_percent: 90,
            forecast_horizon_hours: None,
            allocation_percent: None,
        },
    )
    .await
    .unwrap();
    // The cluster has ai; cv was deleted while no controller watched.
    let fake = crate::fakeapi::FakeApi::new();
    fake.put(
        json!({"apiVersion": "bizrq.io/v1", "kind": "BizGroupResourceQuota",
        "metadata": {"name": "ai"}, "spec": {"parent": "", "hard": {GPU: "16"}}}),
    );
    let _c = Cluster::start_on(fake, dir, T0).await;
    let removed = || async {
        (sql.bindings_on("cv").await.unwrap().is_empty()
            && sql.alert_rules("cv").await.unwrap().is_empty())
        .then_some(())
    };
    let gone = poll_until(200, Duration::from_millis(50), removed).await;
    assert!(gone.is_some(), "cv's roles and rules are gone at start");
    assert_eq!(
        sql.bindings_of(carol.id).await.unwrap().len(),
        1,
        "ai is listed: carol keeps her role there"
    );
    let audit = sql
        .audit(
            &bizrq::store::audit::AuditFilter {
                actor: Some("bizrq".into()),
                target: Some("cv".into()),
                ..Default::default()
            },
            10,
        )
        .await
        .unwrap();
    assert_eq!(audit.len(), 2, "{audit:?}");
}
