//! What the portal's islands stand on, without a browser: the sort
//! parameters of /alerts, the tree's rows under a quota (`GET /tree/rows`)
//! and the overview's live parts (`GET /api/v1/live/overview`), with who
//! may see what. The browser's side is `e2e/islands.mjs`.

use super::*;

/// The `<tr id="…">` of an HTML page or fragment, in order.
fn row_ids(html: &str) -> Vec<String> {
    html.split("<tr id=\"")
        .skip(1)
        .map(|s| s.split('"').next().unwrap_or_default().to_string())
        .collect()
}

/// The open alerts' part of the alerts page.
fn open_part(page: &str) -> &str {
    let start = page.find("<h3>Open</h3>").expect("an Open section");
    let end = page.find("<h3>Resolved</h3>").expect("a Resolved section");
    &page[start..end]
}

/// Alerts on nlp (critical and warning, nlp's subtree at 8 of 8) and on
/// nlp-a (2 of 2), and alice's transfer request (info) on nlp.
async fn alerts_on_nlp_and_nlp_a(s: &Server, o: &Org) {
    for (uid, name, quota, cards) in [("i-1", "train", "nlp", 6), ("i-2", "small", "nlp-a", 2)] {
        let d = deployment(name, quota, cards, 1);
        let r = s
            .review(
                "/validate/workloads",
                &review("deployment-create.json", uid, Some(d), None),
            )
            .await;
        assert_eq!(r["allowed"], true, "{r}");
    }
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
    let five = || async {
        let (_, v) = s.api(Method::GET, "/api/v1/alerts?state=open", None).await;
        (v["items"].as_array().map_or(0, Vec::len) >= 5).then_some(())
    };
    poll_until(300, Duration::from_millis(100), five)
        .await
        .expect("five open alerts");
}

/// `?sort=&dir=` order the open alerts; the headers link to the other
/// direction; unknown values are refused with the choices (422), a page
/// number that is not one is a 400.
async fn alerts_sort_by_a_column_and_refuse_what_they_do_not_know(s: &Server) {
    let o = org(s).await;
    alerts_on_nlp_and_nlp_a(s, &o).await;
    let at = |page: &str, what: &str| page.find(what).unwrap_or_else(|| panic!("{what}: {page}"));
    let page = o.admin.get("/alerts?sort=quota&dir=asc").await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let open = open_part(&page.body);
    assert!(
        at(open, "href=\"/quotas/nlp\"") < at(open, "href=\"/quotas/nlp-a\""),
        "nlp before nlp-a: {open}"
    );
    assert!(open.contains(r#"aria-sort="ascending""#), "{open}");
    // The sorted column's header leads to the other direction.
    assert!(open.contains("/alerts?sort=quota&amp;dir=desc"), "{open}");
    let page = o.admin.get("/alerts?sort=quota&dir=desc").await.body;
    let open = open_part(&page);
    assert!(
        at(open, "href=\"/quotas/nlp-a\"") < at(open, "href=\"/quotas/nlp\""),
        "{open}"
    );
    // Level, mildest first: the transfer request (info) leads.
    let page = o.admin.get("/alerts?sort=level&dir=asc").await.body;
    let open = open_part(&page);
    assert!(
        at(open, "level info") < at(open, "level critical"),
        "{open}"
    );
    // Every open alert says when it opened, exactly, for the island.
    assert!(open.contains("data-sort-value=\"17"), "{open}");
    // The form says what is shown.
    assert!(page.contains(r#"value="level" selected"#), "{page}");
    for (query, status, says) in [
        (
            "sort=bogus",
            StatusCode::UNPROCESSABLE_ENTITY,
            "sort must be one of level, quota, kind, since or state",
        ),
        (
            "dir=up",
            StatusCode::UNPROCESSABLE_ENTITY,
            "dir must be asc or desc",
        ),
        ("open_from=x", StatusCode::BAD_REQUEST, ""),
        (
            "open_from=99999999&sort=state&dir=desc",
            StatusCode::OK,
            "No open alerts match",
        ),
    ] {
        let p = o.admin.get(&format!("/alerts?{query}")).await;
        assert_eq!(p.status, status, "{query}: {}", p.body);
        assert!(p.body.contains(says), "{query}: {}", p.body);
    }
}

/// ▸'s rows: what the page shows under a quota once it is opened, at the
/// page's fold depth, for those who may see it; nobody else's.
async fn tree_rows_are_the_rows_the_page_shows_under_a_quota(s: &Server) {
    let o = org(s).await;
    // Folded at depth 0: ai's children, each folded in turn.
    let rows = o.admin.get("/tree/rows?parent=ai&at=0&depth=0").await;
    assert_eq!(rows.status, StatusCode::OK, "{}", rows.body);
    assert_eq!(row_ids(&rows.body), ["cv", "nlp"], "{}", rows.body);
    assert!(rows.body.contains(r#"data-depth="1""#), "{}", rows.body);
    // The page with ai opened shows the same rows under it.
    let page = o.admin.get("/tree?depth=0&open=ai").await.body;
    assert_eq!(row_ids(&page), ["ai", "cv", "nlp"], "{page}");
    // Their ▸ links keep ai open.
    assert!(rows.body.contains("open=ai%2Cnlp#nlp"), "{}", rows.body);
    // Not folded: nlp's child at depth 2.
    let rows = o.admin.get("/tree/rows?parent=nlp&at=1").await.body;
    assert_eq!(row_ids(&rows), ["nlp-a"], "{rows}");
    assert!(rows.contains(r#"data-depth="2""#), "{rows}");
    // Bob (member of cv) may see cv's rows (none) but not nlp's.
    assert_eq!(
        o.bob.get("/tree/rows?parent=cv&at=0").await.status,
        StatusCode::OK
    );
    assert_eq!(
        o.bob.get("/tree/rows?parent=nlp&at=0").await.status,
        StatusCode::NOT_FOUND
    );
    for (query, status) in [
        ("parent=", StatusCode::UNPROCESSABLE_ENTITY),
        ("parent=ai&at=5000", StatusCode::UNPROCESSABLE_ENTITY),
        ("parent=ai&depth=x", StatusCode::BAD_REQUEST),
        ("parent=no-such", StatusCode::NOT_FOUND),
    ] {
        let p = o.admin.get(&format!("/tree/rows?{query}")).await;
        assert_eq!(p.status, status, "{query}: {}", p.body);
    }
    assert_eq!(
        Browser::new(s).get("/tree/rows?parent=ai").await.status,
        StatusCode::SEE_OTHER,
        "nobody signed in: to the login page"
    );
}

/// The overview's live parts: the caller's cards and "needs attention",
/// as the page draws them, and current.
async fn the_overview_live_parts_follow_what_changes(s: &Server) {
    let o = org(s).await;
    let live = |token: Option<String>| async move {
        s.api_with(Method::GET, "/api/v1/live/overview", None, token.as_deref())
            .await
    };
    let (st, v) = live(Some(o.alice_token.clone())).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let cards = v["cards"].as_array().unwrap();
    assert_eq!(cards.len(), 1, "{v}");
    assert_eq!(cards[0]["name"], "nlp");
    assert_eq!(cards[0]["counts"], "0 workloads · 1 children");
    assert!(cards[0]["keys"].as_str().unwrap().contains("of 8"), "{v}");
    assert!(
        v["attention"].as_str().unwrap().contains("Needs attention"),
        "{v}"
    );
    // The page the island redraws has the places it names.
    let home = o.alice.get("/").await.body;
    assert!(
        home.contains(r#"data-live="overview""#) && home.contains(r#"data-quota="nlp""#),
        "{home}"
    );
    let put = json!({"metadata": {"name": "nlp"}, "spec": {"parent": "ai", "hard": {GPU: "7", "pods": "40"}}});
    let (st, r) = s.api(Method::PUT, "/api/v1/quotas/nlp", Some(put)).await;
    assert_eq!(st, StatusCode::OK, "{r}");
    let (_, v) = live(Some(o.alice_token.clone())).await;
    assert!(
        v["cards"][0]["keys"].as_str().unwrap().contains("of 7"),
        "{v}"
    );
    let (_, v) = live(Some(o.bob_token.clone())).await;
    assert_eq!(v["cards"][0]["name"], "cv", "{v}");
    let (st, _) = live(None).await;
    assert_eq!(st, StatusCode::UNAUTHORIZED);
}

on_both!(
    alerts_sort_by_a_column_and_refuse_what_they_do_not_know,
    tree_rows_are_the_rows_the_page_shows_under_a_quota,
    the_overview_live_parts_follow_what_changes,
);
