//! Alerts in the portal and through the JSON API.

use super::*;

/// Alice (owner of nlp) asks for a GPU from nlp-a, which raises a
/// `transfer_requested` alert on nlp at once.
async fn asks_for_a_gpu_from_nlp_a(o: &Org) {
    let p = o
        .alice
        .post(
            "/transfers",
            &[
                ("from", "nlp-a"),
                ("to", "nlp"),
                ("key", GPU),
                ("amount", "1"),
                ("reason", "a test"),
            ],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
}

/// Alice sets warning at 55 % and critical at 95 % of nlp's GPUs.
async fn sets_nlp_alert_rules(o: &Org) {
    o.alice.get("/quotas/nlp/alerts").await;
    let p = o
        .alice
        .post(
            "/quotas/nlp/alerts",
            &[("key", GPU), ("warn_percent", "55"), ("crit_percent", "95")],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
}

/// A transfer request raises an alert at once: shown on the overview,
/// counted in the nav, listed on /alerts (filtered by kind) for those who
/// may see the quota, and for no one else.
async fn a_transfer_request_shows_an_alert_to_those_who_may_see_it(s: &Server) {
    let o = org(s).await;
    asks_for_a_gpu_from_nlp_a(&o).await;
    let home = o.alice.get("/").await.body;
    assert!(
        home.contains("of 1 GPUs from nlp-a to nlp requested by alice"),
        "the overview shows the open alert: {home}"
    );
    assert!(
        home.contains(r#"title="open alerts" class="badge">1</span>"#),
        "the nav counts it: {home}"
    );
    let page = o.alice.get("/alerts?kind=transfer_requested").await.body;
    assert!(page.contains("requested by alice"), "{page}");
    let page = o.alice.get("/alerts?kind=threshold").await.body;
    assert!(
        !page.contains("requested by alice"),
        "filtered by kind: {page}"
    );
    let bobs = o.bob.get("/alerts").await.body;
    assert!(
        !bobs.contains("requested by alice"),
        "bob may not see nlp: {bobs}"
    );
}

/// An owner's alert rules are saved and shown again on the rules page.
async fn alert_rules_are_saved_and_shown_again(s: &Server) {
    let o = org(s).await;
    sets_nlp_alert_rules(&o).await;
    let rules = o.alice.get("/quotas/nlp/alerts").await.body;
    assert!(rules.contains("55 %") && rules.contains("95 %"), "{rules}");
}

/// A user's email and alert preferences are saved, shown again and audited
/// with before and after; saving the same again audits nothing.
async fn alert_preferences_are_saved_and_audited_once(s: &Server) {
    let o = org(s).await;
    o.alice.get("/account").await;
    let p = o
        .alice
        .post(
            "/account",
            &[("email", "alice@example.com"), ("mute.cash_forecast", "1")],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    let account = o.alice.get("/account").await.body;
    assert!(
        account.contains(r#"value="alice@example.com""#),
        "{account}"
    );
    let tag = |name: &str| {
        let at = account.find(&format!("name=\"{name}\"")).unwrap();
        let start = account[..at].rfind('<').unwrap();
        let end = at + account[at..].find('>').unwrap();
        account[start..end].to_string()
    };
    assert!(tag("mute.cash_forecast").contains("checked"), "{account}");
    assert!(!tag("mute.threshold").contains("checked"), "{account}");
    // Both changes are in the audit log, with before and after.
    let audit = o.admin.get("/audit.csv?target=user:alice").await.body;
    assert!(audit.contains("user.email"), "{audit}");
    assert!(audit.contains("alice@example.com"), "{audit}");
    assert!(
        audit.contains("alert.prefs") && audit.contains("cash_forecast"),
        "{audit}"
    );
    // Saving the same settings again changes and audits nothing.
    o.alice
        .post(
            "/account",
            &[("email", "alice@example.com"), ("mute.cash_forecast", "1")],
        )
        .await;
    let again = o.admin.get("/audit.csv?target=user:alice").await.body;
    assert_eq!(again.lines().count(), audit.lines().count(), "{again}");
}

/// GET /api/v1/alerts: what the caller may see, filters and paging, clear
/// errors; a write is evaluated at once (no sweep runs in the test's time).
async fn the_alerts_api_lists_what_the_caller_may_see(s: &Server) {
    let o = org(s).await;
    asks_for_a_gpu_from_nlp_a(&o).await;
    sets_nlp_alert_rules(&o).await;
    let alice = |path: String| {
        let t = o.alice_token.clone();
        async move { s.api_with(Method::GET, &path, None, Some(&t)).await }
    };
    let (st, v) = alice("/api/v1/alerts".into()).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let items = v["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{v}");
    let requested = &items[0];
    assert_eq!(requested["kind"], "transfer_requested");
    assert_eq!(requested["quota"], "nlp");
    assert_eq!(requested["state"], "open");
    assert!(requested["openedAt"].as_str().unwrap().ends_with('Z'));
    let id = requested["id"].as_i64().unwrap();
    let (st, one) = alice(format!("/api/v1/alerts/{id}")).await;
    assert_eq!((st, &one), (StatusCode::OK, requested));
    // Bob (member of cv) sees none of nlp's, not even by id.
    let bob = |path: String| {
        let t = o.bob_token.clone();
        async move { s.api_with(Method::GET, &path, None, Some(&t)).await }
    };
    let (_, v) = bob("/api/v1/alerts".into()).await;
    assert_eq!(v["items"], json!([]), "{v}");
    let (st, v) = bob(format!("/api/v1/alerts/{id}")).await;
    assert_eq!(st, StatusCode::NOT_FOUND, "{v}");
    let (st, _) = s.api_with(Method::GET, "/api/v1/alerts", None, None).await;
    assert_eq!(st, StatusCode::UNAUTHORIZED);
    // Clear errors.
    for (query, says) in [
        ("state=bogus", "unknown state 'bogus'"),
        ("kind=bogus", "unknown alert kind 'bogus'"),
        ("limit=0", "limit 0 is out of range"),
        ("limit=1000000", "out of range"),
        ("colour=red", "unknown field"),
        ("before=x", "before"),
    ] {
        let (st, v) = s
            .api(Method::GET, &format!("/api/v1/alerts?{query}"), None)
            .await;
        assert_eq!(st, StatusCode::BAD_REQUEST, "{query}: {v}");
        let m = v["error"]["message"].as_str().unwrap_or_default();
        assert!(m.contains(says), "{query}: {m}");
    }
    let (st, _) = s.api(Method::GET, "/api/v1/alerts/x", None).await;
    assert_eq!(st, StatusCode::NOT_FOUND);

    // 6 cards on nlp, which carves 2 out for nlp-a: 6 of 8 in use, no
    // alert (what nlp allocated is not what runs). Then 2 on nlp-a: 8 of 8
    // run below nlp. Warning and critical open on nlp (and on nlp-a, 2 of
    // 2) within moments of the admission: a write is evaluated with its
    // ancestors, not by the next sweep.
    for (uid, name, quota, cards) in [("api-1", "train", "nlp", 6), ("api-2", "small", "nlp-a", 2)]
    {
        let d = deployment(name, quota, cards, 1);
        let r = s
            .review(
                "/validate/workloads",
                &review("deployment-create.json", uid, Some(d), None),
            )
            .await;
        assert_eq!(r["allowed"], true, "{r}");
    }
    let both_open = || async {
        let (_, v) = alice("/api/v1/alerts?kind=threshold&state=open&quota=nlp".into()).await;
        let items = v["items"].as_array().unwrap().clone();
        (items.len() == 2).then_some(items)
    };
    // Moments, on an idle machine; CI's parallel suite on 2 cores has taken
    // over 10 s once (see the closing note of 2026-11-25).
    let threshold = poll_until(300, Duration::from_millis(100), both_open)
        .await
        .unwrap_or_default();
    assert_eq!(threshold.len(), 2, "{threshold:?}");
    assert_eq!(threshold[0]["numbers"]["used"], "8", "{threshold:?}");
    // By level, on the API and the page (open alerts worst first).
    let (_, crit) = alice("/api/v1/alerts?level=critical&state=open&quota=nlp".into()).await;
    let crit = crit["items"].as_array().unwrap().clone();
    assert_eq!(crit.len(), 1, "{crit:?}");
    assert_eq!(crit[0]["level"], "critical");
    let (st, _) = alice("/api/v1/alerts?level=bogus".into()).await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    let page = o.alice.get("/alerts?level=warning").await.body;
    assert!(
        page.contains("reached 80 %") && !page.contains("reached 100 %"),
        "{page}"
    );
    let page = o.alice.get("/alerts").await.body;
    let (c, w) = (
        page.find("reached 100 %").unwrap(),
        page.find("reached 80 %").unwrap(),
    );
    assert!(c < w, "critical before warning: {page}");
    // Paging: one at a time, newest first, then the rest.
    let (_, p1) = alice("/api/v1/alerts?limit=1".into()).await;
    let next = p1["next"].as_i64().expect("a next page");
    let (_, p2) = alice(format!("/api/v1/alerts?limit=10&before={next}")).await;
    assert_eq!(p2["items"].as_array().unwrap().len(), 4, "{p2}");
    assert_eq!(p2["next"], Value::Null);
    assert!(p2["items"][0]["id"].as_i64().unwrap() < next);
}

/// An owner acknowledges an open alert: it leaves the badge and the
/// overview but stays listed, with who did it, and the audit log says so.
/// A member who may see it is refused (403), someone who may not gets 404;
/// a snooze takes only the offered lengths; the API does the same.
async fn an_owner_acknowledges_or_snoozes_an_alert(s: &Server) {
    let o = org(s).await;
    asks_for_a_gpu_from_nlp_a(&o).await;
    let (st, v) = o
        .alice
        .api(Method::GET, "/api/v1/alerts?state=open", None)
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let id = v["items"][0]["id"].as_i64().expect("an open alert");
    let ack = format!("/alerts/{id}/ack");
    // Bob may not see nlp: as if there were no such alert.
    assert_eq!(o.bob.post(&ack, &[]).await.status, StatusCode::NOT_FOUND);
    bind(&o.admin, "bob", "nlp", "member").await;
    let p = o.bob.post(&ack, &[]).await;
    assert_eq!(p.status, StatusCode::FORBIDDEN, "{}", p.body);
    assert!(p.body.contains("only an owner of nlp"), "{}", p.body);
    // Without the CSRF token nothing happens.
    assert_eq!(
        o.alice.post_raw(&ack, &[]).await.status,
        StatusCode::FORBIDDEN
    );
    let p = o.alice.post(&ack, &[]).await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    let home = o.alice.get("/").await.body;
    let badge = regex::Regex::new(r#"<span[^>]*title="open alerts"[^>]*>(\d+)<"#)
        .unwrap()
        .captures(&home)
        .map(|c| c[1].to_string());
    assert_eq!(
        badge.as_deref(),
        Some("0"),
        "acknowledged: the badge counts nothing (and is hidden): {home}"
    );
    let page = o.alice.get("/alerts").await.body;
    assert!(page.contains("acknowledged by alice"), "{page}");
    assert!(page.contains("requested by alice"), "still listed: {page}");
    let audit = o.admin.get("/audit?action=alert.ack").await.body;
    assert!(
        audit.contains(&format!("alert {id} on nlp acknowledged")),
        "{audit}"
    );
    // Snoozes: only the offered lengths, through the page and the API.
    let snooze = format!("/alerts/{id}/snooze");
    let p = o.alice.post(&snooze, &[("hours", "5")]).await;
    assert_eq!(p.status, StatusCode::SEE_OTHER);
    assert!(
        o.alice
            .get("/alerts")
            .await
            .body
            .contains("snooze for 5 hours is not offered"),
        "the refusal is the flash"
    );
    let api = format!("/api/v1/alerts/{id}/snooze");
    let (st, v) = o
        .admin
        .api(Method::POST, &api, Some(json!({"hours": -4})))
        .await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{v}");
    let (st, v) = o
        .admin
        .api(Method::POST, &api, Some(json!({"hours": 24})))
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["snoozedBy"], "admin", "{v}");
    assert_eq!(v["acknowledgedBy"], "alice", "{v}");
    let (st, _) = o
        .admin
        .api(Method::POST, "/api/v1/alerts/999999/ack", None)
        .await;
    assert_eq!(st, StatusCode::NOT_FOUND);
}

/// The CSV exports hold what the viewer may see, exactly: the quotas' keys
/// as the bars read them, and the alerts the filters select.
async fn csv_exports_hold_what_the_viewer_may_see(s: &Server) {
    let o = org(s).await;
    asks_for_a_gpu_from_nlp_a(&o).await;
    let tree = o.bob.get("/tree.csv").await;
    assert_eq!(tree.status, StatusCode::OK);
    assert!(
        tree.body.starts_with("quota,parent,key,unit,hard,"),
        "{}",
        tree.body
    );
    assert!(
        tree.body
            .contains("\r\ncv,ai,requests.nvidia.com/gpu,cards,4,0,0,0,0,4,0,0,\r\n"),
        "{}",
        tree.body
    );
    assert!(
        !tree.body.contains("\r\nnlp,"),
        "bob may not see nlp: {}",
        tree.body
    );
    let all = o.admin.get("/tree.csv").await.body;
    assert!(
        all.contains("\r\nnlp,ai,") && all.contains("\r\nai,,"),
        "{all}"
    );
    let alerts = o.alice.get("/alerts.csv?kind=transfer_requested").await;
    assert_eq!(alerts.status, StatusCode::OK);
    assert!(alerts.body.contains(",nlp,"), "{}", alerts.body);
    assert!(
        alerts.body.contains("requested by alice"),
        "{}",
        alerts.body
    );
    assert!(!o
        .bob
        .get("/alerts.csv")
        .await
        .body
        .contains("requested by alice"));
    assert_eq!(
        o.alice.get("/alerts.csv?level=loud").await.status,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!(
        Browser::new(s).get("/tree.csv").await.status,
        StatusCode::SEE_OTHER
    );
}

/// One job over two keys is one row per level on the alerts page (its
/// keys listed, by name), and an owner ticks several alerts and
/// acknowledges them at once: each authorised and audited as one by one,
/// refused without the CSRF token, someone who may not see them learns
/// nothing, and a hostile id is refused in words.
async fn alerts_read_one_per_condition_and_quiet_in_bulk(s: &Server) {
    let o = org(s).await;
    s.create_quota(
        "solo",
        "nlp",
        json!({"requests.nvidia.com/gpu": "2", "pods": "2"}),
    )
    .await;
    let d = deployment("pair", "solo", 2, 1);
    let r = s
        .review(
            "/validate/workloads",
            &review("deployment-create.json", "bulk-1", Some(d), None),
        )
        .await;
    assert_eq!(r["allowed"], true, "{r}");
    // GPUs and pods at 100 %: a warning and a critical on each key.
    let four_open = || async {
        let (_, v) = o
            .alice
            .api(
                Method::GET,
                "/api/v1/alerts?kind=threshold&state=open&quota=solo",
                None,
            )
            .await;
        let items = v["items"].as_array().cloned().unwrap_or_default();
        (items.len() == 4).then_some(items)
    };
    let items = poll_until(300, Duration::from_millis(100), four_open)
        .await
        .unwrap_or_default();
    assert_eq!(items.len(), 4, "{items:?}");
    let page = o.alice.get("/alerts?quota=solo").await.body;
    assert!(
        page.contains("2 keys: GPUs of solo reached 100 %")
            && page.contains("pods of solo reached 100 %"),
        "one row per level, its keys by name: {page}"
    );
    assert!(page.contains(r#"form="bulk-quiet""#), "{page}");
    assert!(page.contains("Acknowledge selected"), "{page}");
    let ids: Vec<String> = items
        .iter()
        .map(|a| a["id"].as_i64().unwrap().to_string())
        .collect();
    let warning_ids: Vec<String> = items
        .iter()
        .filter(|a| a["level"] == "warning")
        .map(|a| a["id"].as_i64().unwrap().to_string())
        .collect();
    let grouped = warning_ids.join(",");
    assert!(
        page.contains(&format!(r#"value="{grouped}""#)),
        "a row's box ticks its group: {page}"
    );
    // Without the CSRF token nothing happens.
    let fields = [("id", grouped.as_str()), ("action", "ack")];
    assert_eq!(
        o.alice.post_raw("/alerts/quiet", &fields).await.status,
        StatusCode::FORBIDDEN
    );
    // Bob may not see solo: as if there were no such alerts.
    let p = o.bob.post("/alerts/quiet", &fields).await;
    assert_eq!(p.status, StatusCode::SEE_OTHER);
    let bobs = o.bob.get("/alerts").await.body;
    assert!(
        bobs.contains("0 alerts acknowledged") && bobs.contains("not found"),
        "{bobs}"
    );
    // Hostile input is refused in words, and changes nothing.
    for (id, says) in [
        ("1; DROP", "is not an alert id"),
        ("-3", "is not an alert id"),
        ("", "tick at least one alert"),
    ] {
        let p = o
            .alice
            .post("/alerts/quiet", &[("id", id), ("action", "ack")])
            .await;
        assert_eq!(p.status, StatusCode::SEE_OTHER);
        let back = o.alice.get("/alerts").await.body;
        assert!(back.contains(says), "{id}: {back}");
    }
    let p = o
        .alice
        .post(
            "/alerts/quiet",
            &[
                ("id", ids[0].as_str()),
                ("action", "snooze"),
                ("hours", "5"),
            ],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER);
    assert!(o
        .alice
        .get("/alerts")
        .await
        .body
        .contains("snooze for '5' hours is not offered"));
    // The warnings' group and one critical, ticked together.
    let critical = items
        .iter()
        .find(|a| a["level"] == "critical")
        .map(|a| a["id"].as_i64().unwrap().to_string())
        .unwrap();
    let p = o
        .alice
        .post(
            "/alerts/quiet",
            &[
                ("id", grouped.as_str()),
                ("id", critical.as_str()),
                ("action", "ack"),
            ],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    let back = o.alice.get("/alerts?quota=solo").await.body;
    assert!(back.contains("3 alerts acknowledged"), "{back}");
    for id in warning_ids.iter().chain([&critical]) {
        let (st, v) = o
            .alice
            .api(Method::GET, &format!("/api/v1/alerts/{id}"), None)
            .await;
        assert_eq!(st, StatusCode::OK, "{v}");
        assert_eq!(v["acknowledgedBy"], "alice", "{v}");
    }
    let audit = o.admin.get("/audit?action=alert.ack").await.body;
    for id in warning_ids.iter().chain([&critical]) {
        assert!(
            audit.contains(&format!("alert {id} on solo acknowledged")),
            "{audit}"
        );
    }
}

on_both!(
    a_transfer_request_shows_an_alert_to_those_who_may_see_it,
    alert_rules_are_saved_and_shown_again,
    alert_preferences_are_saved_and_audited_once,
    the_alerts_api_lists_what_the_caller_may_see,
    an_owner_acknowledges_or_snoozes_an_alert,
    alerts_read_one_per_condition_and_quiet_in_bulk,
    csv_exports_hold_what_the_viewer_may_see,
);
