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
    // The default, in words, above the rules; keys by name.
    assert!(
        rules.contains("By default: GPU models and budgets at 80 % and 100 %"),
        "{rules}"
    );
    assert!(
        rules.contains(&format!(r#"<td title="{GPU}" class="name">GPUs</td>"#)),
        "{rules}"
    );
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
        // Each write its own evaluation (more than the engine's 250 ms
        // apart), as on a busy machine: nlp-a's must leave nlp's warning
        // open.
        tokio::time::sleep(Duration::from_millis(600)).await;
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

/// A training job over six keys of its quota (GPUs, A100 GPUs, CPU
/// cores, CPU A4 cores, their limit, memory; every key watched by a '*'
/// rule, the page having said the default) at 80 % each: one alert that
/// names the six, GPUs first, in the API, on the page and on the
/// overview. An owner acknowledges it (in bulk: authorised and audited,
/// refused without the CSRF token, nothing learnt by someone who may not
/// see it, a hostile id refused in words) and it asks nobody any more; a
/// second job that takes pods over 80 % later updates that alert rather
/// than open a second, and (a key joined) it asks again.
async fn alerts_read_one_per_condition_and_quiet_in_bulk(s: &Server) {
    let o = org(s).await;
    s.create_quota(
        "job6",
        "",
        json!({
            "requests.nvidia.com/gpu": "5",
            "requests.nvidia.com/gpu.A100": "5",
            "requests.cpu": "10",
            "limits.cpu": "10",
            "requests.cpu.A4": "10",
            "requests.memory": "80Gi",
            "pods": "10",
        }),
    )
    .await;
    bind(&o.admin, "alice", "job6", "owner").await;
    // By default job6 would warn on its GPUs only; alice watches every key.
    let rules = o.alice.get("/quotas/job6/alerts").await.body;
    assert!(
        rules.contains("By default: GPU models and budgets at 80 % and 100 %"),
        "{rules}"
    );
    let p = o
        .alice
        .post(
            "/quotas/job6/alerts",
            &[
                ("key", "*"),
                ("warn_percent", "80"),
                ("crit_percent", "100"),
            ],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    // One pod: 4 A100 cards, 8 A4 cores (limit 8), 64 GiB.
    let d = deployment("train", "job6", 1, 4);
    let r = s
        .review(
            "/validate/workloads",
            &review("deployment-create.json", "six-1", Some(d), None),
        )
        .await;
    assert_eq!(r["allowed"], true, "{r}");
    let api = |path: String| {
        let t = o.alice_token.clone();
        async move { s.api_with(Method::GET, &path, None, Some(&t)).await.1 }
    };
    let open_with = |n: usize| {
        let api = &api;
        move || async move {
            let v = api("/api/v1/alerts?state=open&quota=job6".into()).await;
            let items = v["items"].as_array().cloned().unwrap_or_default();
            items
                .first()
                .is_some_and(|a| a["keys"].as_array().is_some_and(|k| k.len() == n))
                .then_some(items)
        }
    };
    let items = poll_until(300, Duration::from_millis(100), open_with(6))
        .await
        .unwrap_or_default();
    assert_eq!(items.len(), 1, "one alert for six keys: {items:?}");
    let a = &items[0];
    assert_eq!(
        (&a["kind"], &a["level"]),
        (&json!("threshold"), &json!("warning"))
    );
    assert_eq!(
        a["keys"],
        json!([
            "requests.nvidia.com/gpu",
            "requests.nvidia.com/gpu.A100",
            "requests.cpu",
            "requests.cpu.A4",
            "limits.cpu",
            "requests.memory"
        ])
    );
    assert_eq!(
        a["names"],
        json!([
            "GPUs",
            "A100 GPUs",
            "CPU cores",
            "CPU A4 cores",
            "CPU cores (limit)",
            "memory"
        ])
    );
    let said = "GPUs of job6 reached 80 %: 4 in use of 5; 6 keys: GPUs 4 of 5 (80 %), \
                A100 GPUs 4 of 5 (80 %), CPU cores 8 of 10 (80 %), CPU A4 cores 8 of 10 (80 %), \
                CPU cores (limit) 8 of 10 (80 %), memory 64 GiB of 80 GiB (80 %)";
    assert_eq!(a["said"], said, "{a}");
    let id = a["id"].as_i64().unwrap().to_string();
    let page = o.alice.get("/alerts?quota=job6").await.body;
    assert!(page.contains(said), "one row, its keys by name: {page}");
    assert!(page.contains(r#"form="bulk-quiet""#), "{page}");
    assert!(page.contains("Acknowledge selected"), "{page}");
    let home = o.alice.get("/").await.body;
    assert!(
        home.contains("/alerts?quota=job6") && home.contains("1 warning"),
        "{home}"
    );
    // Without the CSRF token nothing happens.
    let fields = [("id", id.as_str()), ("action", "ack")];
    assert_eq!(
        o.alice.post_raw("/alerts/quiet", &fields).await.status,
        StatusCode::FORBIDDEN
    );
    // Bob may not see job6: as if there were no such alert.
    let p = o.bob.post("/alerts/quiet", &fields).await;
    assert_eq!(p.status, StatusCode::SEE_OTHER);
    let bobs = o.bob.get("/alerts").await.body;
    assert!(
        bobs.contains("0 alerts acknowledged") && bobs.contains("not found"),
        "{bobs}"
    );
    // Hostile input is refused in words, and changes nothing.
    for (bad, says) in [
        ("1; DROP", "is not an alert id"),
        ("-3", "is not an alert id"),
        ("", "tick at least one alert"),
    ] {
        let p = o
            .alice
            .post("/alerts/quiet", &[("id", bad), ("action", "ack")])
            .await;
        assert_eq!(p.status, StatusCode::SEE_OTHER);
        let back = o.alice.get("/alerts").await.body;
        assert!(back.contains(says), "{bad}: {back}");
    }
    let p = o
        .alice
        .post(
            "/alerts/quiet",
            &[("id", id.as_str()), ("action", "snooze"), ("hours", "5")],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER);
    assert!(o
        .alice
        .get("/alerts")
        .await
        .body
        .contains("snooze for '5' hours is not offered"));
    // Acknowledged: one alert, quiet on the overview.
    let p = o.alice.post("/alerts/quiet", &fields).await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    let back = o.alice.get("/alerts?quota=job6").await.body;
    assert!(back.contains("1 alert acknowledged"), "{back}");
    assert!(back.contains("acknowledged by alice"), "{back}");
    let home = o.alice.get("/").await.body;
    assert!(!home.contains("/alerts?quota=job6"), "quiet: {home}");
    let audit = o.admin.get("/audit?action=alert.ack").await.body;
    assert!(
        audit.contains(&format!("alert {id} on job6 acknowledged")),
        "{audit}"
    );
    // Seven more pods, small ones: pods cross 80 % too. The same alert
    // names seven keys now, no second one; a key joined, so it asks again:
    // the acknowledgement is gone and the overview lists it.
    let mut more = deployment("small", "job6", 7, 0);
    let spec = &mut more["spec"]["template"]["spec"];
    spec.as_object_mut().unwrap().remove("initContainers");
    let res = &mut spec["containers"][0]["resources"];
    for side in ["requests", "limits"] {
        res[side]["cpu"] = "100m".into();
        res[side]["memory"] = "100Mi".into();
    }
    let r = s
        .review(
            "/validate/workloads",
            &review("deployment-create.json", "six-2", Some(more), None),
        )
        .await;
    assert_eq!(r["allowed"], true, "{r}");
    let items = poll_until(300, Duration::from_millis(100), open_with(7))
        .await
        .unwrap_or_default();
    assert_eq!(items.len(), 1, "updated, not a second alert: {items:?}");
    let a = &items[0];
    assert_eq!(a["id"].as_i64().unwrap().to_string(), id, "{a}");
    assert_eq!(a["keys"][6], "pods", "{a}");
    assert!(a["acknowledgedBy"].is_null(), "{a}");
    let home = o.alice.get("/").await.body;
    assert!(home.contains("/alerts?quota=job6"), "asks again: {home}");
}

/// The rules page says what the engine does, read from the same alerts:
/// a budget that runs out within its horizon shows its forecast alert open
/// there, as /alerts lists it; a rule that shortens the horizon resolves
/// it at once (the quota is evaluated again as after a write), and the
/// page then shows none open beside "no warning".
async fn the_rules_page_reads_the_forecast_alert_open_now(s: &Server) {
    let o = org(s).await;
    const CASH: &str = "cash/requests.nvidia.com/gpu";
    s.create_quota(
        "fc",
        "",
        json!({"requests.nvidia.com/gpu": "8", CASH: "100"}),
    )
    .await;
    bind(&o.admin, "alice", "fc", "owner").await;
    // 4 cards burn 100 card-hours in 25 hours: inside the default 14 days.
    let d = deployment("burn", "fc", 1, 4);
    let r = s
        .review(
            "/validate/workloads",
            &review("deployment-create.json", "fc-1", Some(d), None),
        )
        .await;
    assert_eq!(r["allowed"], true, "{r}");
    let forecasts = || async {
        let (_, v) = o
            .alice
            .api(
                Method::GET,
                "/api/v1/alerts?kind=cash_forecast&state=open&quota=fc",
                None,
            )
            .await;
        v["items"].as_array().cloned().unwrap_or_default()
    };
    let open = poll_until(300, Duration::from_millis(100), || async {
        let items = forecasts().await;
        (!items.is_empty()).then_some(items)
    })
    .await
    .unwrap_or_default();
    assert_eq!(open.len(), 1, "{open:?}");
    let said = open[0]["said"].as_str().unwrap().to_string();
    assert!(
        said.starts_with("GPU card-hours of fc runs out in"),
        "{said}"
    );
    let page = o.alice.get("/quotas/fc/alerts").await.body;
    assert!(
        page.contains("within 14 days") && page.contains("open now: ") && page.contains(&said),
        "{page}"
    );
    // One hour ahead only: the alert resolves now, not at the next sweep.
    let p = o
        .alice
        .post(
            "/quotas/fc/alerts",
            &[("key", CASH), ("forecast_horizon_hours", "1")],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    let gone = poll_until(100, Duration::from_millis(100), || async {
        forecasts().await.is_empty().then_some(())
    })
    .await;
    assert!(gone.is_some(), "resolved within moments of the rule");
    let page = o.alice.get("/quotas/fc/alerts").await.body;
    assert!(
        page.contains("within 1 hour") && !page.contains("open now"),
        "{page}"
    );
}

on_both!(
    a_transfer_request_shows_an_alert_to_those_who_may_see_it,
    alert_rules_are_saved_and_shown_again,
    alert_preferences_are_saved_and_audited_once,
    the_alerts_api_lists_what_the_caller_may_see,
    an_owner_acknowledges_or_snoozes_an_alert,
    alerts_read_one_per_condition_and_quiet_in_bulk,
    the_rules_page_reads_the_forecast_alert_open_now,
    csv_exports_hold_what_the_viewer_may_see,
);
