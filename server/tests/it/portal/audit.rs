//! The audit log: who changed what, before and after, read by those who may.

use super::*;

/// Through the API: alice creates nlp-b and deletes it, the admin token
/// changes cv's hard, alice dry-runs nlp-c.
async fn makes_audited_changes(s: &Server, o: &Org) {
    let (st, v) = s
        .api_with(
            Method::POST,
            "/api/v1/quotas",
            Some(serde_json::to_vec(&quota("nlp-b", "nlp", "1", "2")).unwrap()),
            Some(&o.alice_token),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let (st, _) = s
        .api(
            Method::PUT,
            "/api/v1/quotas/cv",
            Some(quota("cv", "ai", "3", "20")),
        )
        .await;
    assert_eq!(st, StatusCode::OK);
    let (st, _) = s
        .api_with(
            Method::DELETE,
            "/api/v1/quotas/nlp-b",
            None,
            Some(&o.alice_token),
        )
        .await;
    assert_eq!(st, StatusCode::OK);
    let (st, _) = s
        .api_with(
            Method::POST,
            "/api/v1/quotas?dryRun=All",
            Some(serde_json::to_vec(&quota("nlp-c", "nlp", "1", "2")).unwrap()),
            Some(&o.alice_token),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED);
}

/// Changes through the API and the portal are in the CSV export with
/// actor, before and after; a dry run is not, and no password hash is.
async fn changes_are_audited_with_actor_before_and_after(s: &Server) {
    let o = org(s).await;
    makes_audited_changes(s, &o).await;
    let csv = o.admin.get("/audit.csv").await;
    assert_eq!(csv.status, StatusCode::OK);
    assert!(csv.headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/csv"));
    let lines: Vec<&str> = csv.body.split("\r\n").filter(|l| !l.is_empty()).collect();
    assert_eq!(lines[0], "id,at,actor,action,target,before,after,detail");
    let find = |action: &str, target: &str| {
        lines
            .iter()
            .find(|l| l.contains(&format!(",{action},{target},")))
            .unwrap_or_else(|| panic!("no {action} of {target} in\n{}", csv.body))
            .to_string()
    };
    let created = find("quota.create", "nlp-b");
    assert!(created.contains(",alice,"), "{created}");
    assert!(
        created.contains(r#"""parent"":""nlp"""#),
        "after holds the spec, quoted: {created}"
    );
    let updated = find("quota.update", "cv");
    assert!(updated.contains(",admin-token,"), "{updated}");
    assert!(
        updated.contains(r#"""requests.nvidia.com/gpu"":""4"""#)
            && updated.contains(r#"""requests.nvidia.com/gpu"":""3"""#),
        "before and after: {updated}"
    );
    find("quota.delete", "nlp-b");
    find("role.add", "nlp");
    find("user.create", "user:alice");
    find("user.create", "user:admin");
    find("token.create", "user:bob");
    assert!(
        !csv.body.contains("nlp-c"),
        "a dry run changes nothing and is not audited"
    );
    assert!(!csv.body.contains("argon2"), "no password hash in the log");
}

/// The audit page and export filter by actor, action, target and time.
async fn the_audit_log_filters_by_actor_action_target_and_time(s: &Server) {
    let o = org(s).await;
    makes_audited_changes(s, &o).await;
    let csv = o.admin.get("/audit.csv").await;
    let by_alice = o
        .admin
        .get("/audit.csv?actor=alice&action=quota.create")
        .await
        .body;
    assert_eq!(
        by_alice.split("\r\n").filter(|l| !l.is_empty()).count(),
        2,
        "{by_alice}"
    );
    let page = o.admin.get("/audit?target=cv").await.body;
    assert!(
        page.contains("quota.update") && !page.contains("nlp-b"),
        "{page}"
    );
    let none = o.admin.get("/audit.csv?from=2999-01-01").await.body;
    assert_eq!(none, "id,at,actor,action,target,before,after,detail\r\n");
    let since = o
        .admin
        .get("/audit.csv?from=2000-01-01T00:00&to=2999-01-01")
        .await
        .body;
    assert_eq!(since, csv.body);
}

/// A non-admin reads entries on the quotas it sees and on its own account,
/// nothing else.
async fn non_admins_read_only_entries_on_what_they_see(s: &Server) {
    let o = org(s).await;
    makes_audited_changes(s, &o).await;
    let bob = o.bob.get("/audit.csv").await.body;
    assert!(
        bob.contains(",quota.update,cv,") && bob.contains(",token.create,user:bob,"),
        "{bob}"
    );
    assert!(!bob.contains("nlp") && !bob.contains("user:alice"), "{bob}");
    let alice = o.alice.get("/audit").await.body;
    assert!(
        alice.contains("role.add") && !alice.contains(">cv<"),
        "{alice}"
    );
}

/// The database itself refuses to change or delete audit entries.
async fn the_audit_log_is_append_only_in_the_database(s: &Server) {
    let o = org(s).await;
    makes_audited_changes(s, &o).await;
    sqlx::any::install_default_drivers();
    let db = sqlx::AnyPool::connect(&s.database_url).await.unwrap();
    let err = sqlx::query("UPDATE audit_log SET actor = 'nobody'")
        .execute(&db)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("append-only"), "{err}");
    let err = sqlx::query("DELETE FROM audit_log")
        .execute(&db)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("append-only"), "{err}");
    db.close().await;
}

on_both!(
    changes_are_audited_with_actor_before_and_after,
    the_audit_log_filters_by_actor_action_target_and_time,
    non_admins_read_only_entries_on_what_they_see,
    the_audit_log_is_append_only_in_the_database,
);
