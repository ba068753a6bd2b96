//! Transfers through the portal's forms, decided and expired.

use super::*;

fn gpus(q: &Value) -> &str {
    q["spec"]["hard"][GPU].as_str().unwrap_or("?")
}

/// Polls a page until it contains `text` (the sweep runs every second).
async fn eventually(b: &Browser, path: &str, text: &str) -> String {
    let shown = || async {
        let body = b.get(path).await.body;
        body.contains(text).then_some(body)
    };
    poll_until(100, Duration::from_millis(100), shown)
        .await
        .unwrap_or_else(|| panic!("{path} never showed {text:?}"))
}

/// Through the portal's forms: an owner asks to move 2 GPUs from nlp to
/// its sibling cv; neither it nor a member of cv may approve; the owner of
/// the common parent does, and both quotas change, audited. An owner
/// decides moves inside its own subtree. Refusals name key and amount;
/// requests nobody decides expire. (Run with a sweep every second.)
async fn transfers_are_asked_decided_and_expired_on_the_forms(s: &Server) {
    // ai-platform (16) ─┬─ nlp (8) ── nlp-a (2)
    //                   └─ cv (4)
    for (name, parent, gpu) in [
        ("ai-platform", "", "16"),
        ("nlp", "ai-platform", "8"),
        ("cv", "ai-platform", "4"),
        ("nlp-a", "nlp", "2"),
    ] {
        s.create_quota(name, parent, json!({ GPU: gpu })).await;
    }
    let admin = Browser::admin(s).await;
    create_user(&admin, "alice", ALICE_PW).await;
    create_user(&admin, "bob", BOB_PW).await;
    create_user(&admin, "carol", "carol-password-123").await;
    bind(&admin, "alice", "nlp", "owner").await;
    // A transfer names both ends, so alice must see cv to give to it.
    bind(&admin, "alice", "cv", "member").await;
    bind(&admin, "bob", "cv", "member").await;
    bind(&admin, "carol", "ai-platform", "owner").await;
    let alice = Browser::logged_in(s, "alice", ALICE_PW).await;
    let bob = Browser::logged_in(s, "bob", BOB_PW).await;
    let carol = Browser::logged_in(s, "carol", "carol-password-123").await;

    // The form offers what alice owns; bob owns nothing and gets no form.
    let page = alice.get("/transfers").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(
        page.body.contains(r#"<option value="nlp""#),
        "{}",
        page.body
    );
    let from = &page.body[page.body.find(r#"<select name="from">"#).unwrap()..];
    assert!(
        !from[..from.find("</select>").unwrap()].contains(r#"<option value="cv""#),
        "alice gives only what she owns: {}",
        page.body
    );
    assert!(!bob
        .get("/transfers")
        .await
        .body
        .contains("Request a transfer"));

    // A refusal names the key (by name) and the amount, says what to do,
    // and keeps what was typed.
    let p = alice
        .post(
            "/transfers",
            &[
                ("from", "nlp"),
                ("to", "cv"),
                ("key", GPU),
                ("amount", "100"),
                ("reason", "big run"),
            ],
        )
        .await;
    assert_eq!(p.status, StatusCode::BAD_REQUEST, "{}", p.body);
    assert!(
        p.body
            .contains("bizrq nlp: GPUs gives 100, its hard is only 8: give 8 at most"),
        "{}",
        p.body
    );
    assert!(p.body.contains("big run"), "the form comes back as typed");
    let p = alice
        .post(
            "/transfers",
            &[
                ("from", ""),
                ("to", "nlp"),
                ("key", GPU),
                ("amount", "10"),
                ("reason", "more"),
            ],
        )
        .await;
    assert_eq!(p.status, StatusCode::FORBIDDEN, "{}", p.body);
    assert!(
        p.body.contains(
            "GPUs: 10 asked, 4 left of 16 in ai-platform: ask an admin for more, or lower it to 4"
        ),
        "{}",
        p.body
    );

    // The request.
    let p = alice
        .post(
            "/transfers",
            &[
                ("from", "nlp"),
                ("to", "cv"),
                ("key", GPU),
                ("amount", "2"),
                ("key", ""),
                ("amount", ""),
                ("reason", "cv's detection sprint"),
            ],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    let at = p.location().unwrap().to_string();
    assert_eq!(at, "/transfers/1");
    let page = alice.get(&at).await.body;
    assert!(
        page.contains("transfer #1 requested") && page.contains("requested"),
        "{page}"
    );
    assert!(page.contains("owners of ai-platform"), "{page}");
    assert!(
        !page.contains("/transfers/1/approve"),
        "alice may not approve her own: {page}"
    );

    // Neither the requester nor a member of the receiver may approve.
    let p = alice.post("/transfers/1/approve", &[]).await;
    assert_eq!(p.status, StatusCode::FORBIDDEN, "{}", p.body);
    let page = bob.get(&at).await;
    assert_eq!(page.status, StatusCode::OK, "bob sees what touches cv");
    assert!(!page.body.contains("/transfers/1/approve"));
    let p = bob.post("/transfers/1/approve", &[]).await;
    assert_eq!(p.status, StatusCode::FORBIDDEN, "{}", p.body);
    assert_eq!(gpus(&s.quota("nlp").await), "8", "nothing moved yet");

    // The owner of the common parent sees it waiting for her, and before
    // approving what it would do: both ends as they are, each quota's hard
    // before and after; the ends are links.
    let list = carol.get("/transfers").await.body;
    assert!(list.contains("1 request awaits your decision"), "{list}");
    assert!(
        list.contains(r#"<a href="/quotas/cv" class="name">cv</a>"#),
        "{list}"
    );
    let home = carol.get("/").await.body;
    assert!(
        home.contains("Needs attention")
            && home.contains("1 transfer request awaits your decision"),
        "the overview leads with it: {home}"
    );
    let mine = carol.get("/transfers?awaiting=me").await.body;
    assert!(mine.contains(r#"href="/transfers/1""#), "{mine}");
    assert!(
        !alice.get("/transfers").await.body.contains("your decision"),
        "alice decides nothing here"
    );
    let page = carol.get(&at).await.body;
    assert!(
        page.contains("/transfers/1/approve") && page.contains("/transfers/1/reject"),
        "{page}"
    );
    assert!(page.contains("What approving now would do"), "{page}");
    assert!(
        page.contains("GPUs 8") && page.contains("GPUs 6"),
        "nlp's hard before and after, keys by name: {page}"
    );
    assert!(page.contains("Both ends now"), "{page}");
    assert!(
        page.contains("GPUs 0 in use of 8, 6 unallocated"),
        "nlp as it is, keys by name: {page}"
    );
    assert!(
        !bob.get(&at)
            .await
            .body
            .contains("What approving now would do"),
        "only those who decide see the plan before it is made"
    );
    let unticked = carol.post("/transfers/1/approve", &[]).await;
    assert_eq!(
        unticked.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        unticked.body
    );
    assert!(unticked.body.contains("tick the box next to Approve"));
    assert_eq!(
        gpus(&s.quota("nlp").await),
        "8",
        "nothing moved unconfirmed"
    );
    let p = carol
        .post("/transfers/1/approve", &[("confirm", "yes")])
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    let page = carol.get(&at).await.body;
    assert!(page.contains("transfer #1 approved and done"), "{page}");
    assert!(
        page.contains("receives") && page.contains("gives"),
        "the plan: {page}"
    );
    assert!(!page.contains("/transfers/1/approve"), "decided: {page}");
    assert_eq!(gpus(&s.quota("nlp").await), "6");
    assert_eq!(gpus(&s.quota("cv").await), "6");

    // An owner decides moves that meet inside its own subtree: more from
    // nlp for nlp-a.
    let p = alice
        .post(
            "/transfers",
            &[
                ("from", ""),
                ("to", "nlp-a"),
                ("key", GPU),
                ("amount", "1"),
                ("reason", "eval"),
            ],
        )
        .await;
    assert_eq!(p.location(), Some("/transfers/2"), "{}", p.body);
    assert!(alice
        .get("/transfers/2")
        .await
        .body
        .contains("/transfers/2/approve"));
    let p = alice
        .post("/transfers/2/approve", &[("confirm", "yes")])
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    assert_eq!(gpus(&s.quota("nlp-a").await), "3");
    assert_eq!(gpus(&s.quota("nlp").await), "6", "nlp's remainder paid");

    // Rejected with a note, by an admin.
    let p = alice
        .post(
            "/transfers",
            &[
                ("from", "nlp"),
                ("to", "cv"),
                ("key", GPU),
                ("amount", "1"),
                ("reason", "again"),
            ],
        )
        .await;
    assert_eq!(p.location(), Some("/transfers/3"));
    admin.get("/transfers/3").await;
    let p = admin
        .post("/transfers/3/reject", &[("note", "cv has enough")])
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    let page = alice.get("/transfers/3").await.body;
    assert!(
        page.contains("rejected") && page.contains("cv has enough"),
        "{page}"
    );
    assert_eq!(gpus(&s.quota("cv").await), "6");

    // Nobody decides: it expires (the request's deadline moved into the
    // past, as a week would).
    let p = alice
        .post(
            "/transfers",
            &[
                ("from", "nlp"),
                ("to", "cv"),
                ("key", GPU),
                ("amount", "1"),
                ("reason", "late"),
            ],
        )
        .await;
    assert_eq!(p.location(), Some("/transfers/4"));
    sqlx::any::install_default_drivers();
    let db = sqlx::AnyPool::connect(&s.database_url).await.unwrap();
    sqlx::query("UPDATE transfers SET expires_at = 1 WHERE id = 4")
        .execute(&db)
        .await
        .unwrap();
    db.close().await;
    let page = eventually(&alice, "/transfers/4", "status expired").await;
    assert!(!page.contains("/transfers/4/approve"), "{page}");
    let list = alice.get("/transfers?status=expired").await.body;
    assert!(
        list.contains("/transfers/4") && !list.contains(r#"href="/transfers/1""#),
        "{list}"
    );
    let p = carol
        .post("/transfers/4/approve", &[("confirm", "yes")])
        .await;
    assert_eq!(p.status, StatusCode::CONFLICT, "{}", p.body);
    assert!(p.body.contains("transfer 4 is expired"), "{}", p.body);

    // The audit log: request, approval, rejection and expiry, each once.
    let csv = admin.get("/audit.csv").await.body;
    let entries = |action: &str| -> Vec<&str> {
        csv.split("\r\n")
            .filter(|l| l.contains(&format!(",{action},")))
            .collect()
    };
    assert_eq!(entries("transfer.request").len(), 4, "{csv}");
    let approvals = entries("transfer.approve");
    assert_eq!(approvals.len(), 2, "{csv}");
    assert!(
        approvals
            .iter()
            .any(|l| l.contains(",carol,transfer.approve,nlp,") && l.contains("#1 nlp → cv")),
        "{csv}"
    );
    assert!(
        approvals
            .iter()
            .any(|l| l.contains(",alice,transfer.approve,nlp-a,")),
        "{csv}"
    );
    assert!(entries("transfer.request")
        .iter()
        .any(|l| l.contains(",alice,transfer.request,nlp,")));
    assert_eq!(entries("transfer.reject").len(), 1, "{csv}");
    let expired = entries("transfer.expire");
    assert_eq!(expired.len(), 1, "{csv}");
    assert!(expired[0].contains(",bizrq,transfer.expire,nlp,"), "{csv}");
    // Alice reads the entries of her requests (they are on nlp).
    let mine = alice.get("/audit?action=transfer.approve").await.body;
    assert!(mine.contains("carol"), "{mine}");
}

mod transfers_are_asked_decided_and_expired_on_the_forms {
    use crate::common::*;
    const SWEEP_EVERY_SECOND: &[&str] = &["--resync-seconds", "1"];

    #[tokio::test]
    async fn sqlite() {
        let dir = tempfile::tempdir().unwrap();
        let (s, _) = Server::start_with(
            &fresh_sqlite(&dir),
            SWEEP_EVERY_SECOND,
            Some(ADMIN_PASSWORD),
        )
        .await;
        super::transfers_are_asked_decided_and_expired_on_the_forms(&s).await;
    }

    #[tokio::test]
    async fn postgres() {
        let (s, _) = Server::start_with(
            &fresh_postgres().await,
            SWEEP_EVERY_SECOND,
            Some(ADMIN_PASSWORD),
        )
        .await;
        super::transfers_are_asked_decided_and_expired_on_the_forms(&s).await;
    }
}
