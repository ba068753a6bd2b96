//! The quota forms: a child that does not fit is refused on the form, one
//! that fits is created and audited; a stale edit form says someone else
//! changed the quota; an edit keeps the fair-sharing weight; a cut below
//! what runs is confirmed first; the short child form folds the other keys;
//! a member asks for more budget on a form; error pages keep the navigation.
use super::*;

/// Alice (owner of nlp) creates nlp-small (2 GPUs, at most 4) on the
/// child form.
async fn creates_nlp_small(o: &Org) -> Page {
    let ok = o
        .alice
        .post(
            "/quotas/nlp/children/new",
            &[
                ("name", "nlp-small"),
                ("hard:requests.nvidia.com/gpu", "2"),
                ("hard:pods", "5"),
                ("max:requests.nvidia.com/gpu", "4"),
            ],
        )
        .await;
    assert_eq!(ok.status, StatusCode::SEE_OTHER, "{}", ok.body);
    ok
}

/// The child form offers the parent's keys; a child that does not fit is
/// refused on the form, naming the key (by name) and the amounts and what
/// to do (ask the parent's parent's owners, or lower it), keeping what was
/// typed, and nothing is created.
async fn a_child_that_does_not_fit_is_refused_on_the_form(s: &Server) {
    let o = org(s).await;
    let form = o.alice.get("/quotas/nlp/children/new").await;
    assert_eq!(form.status, StatusCode::OK);
    assert!(
        form.body.contains(r#"name="hard:requests.nvidia.com/gpu""#)
            && form.body.contains(r#"name="hard:pods""#),
        "the parent's keys are on the form: {}",
        form.body
    );
    let big = o
        .alice
        .post(
            "/quotas/nlp/children/new",
            &[
                ("name", "nlp-big"),
                ("hard:requests.nvidia.com/gpu", "7"),
                ("hard:pods", "5"),
            ],
        )
        .await;
    assert_eq!(big.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        big.body.contains(
            "nlp-big does not fit: GPUs: 7 asked, 6 left of 8 in nlp: ask ai's owners for more, \
             or lower it to 6"
        ),
        "the refusal names the key and the amounts, and says what to do: {}",
        big.body
    );
    assert!(
        !big.body.contains("requests.nvidia.com/gpu asks"),
        "no raw key in the words: {}",
        big.body
    );
    assert!(
        big.body.contains(r#"value="nlp-big""#),
        "the form keeps what was typed"
    );
    let (st, _) = s.api(Method::GET, "/api/v1/quotas/nlp-big", None).await;
    assert_eq!(st, StatusCode::NOT_FOUND);
}

/// A child that fits is created, flashed on its page and audited like the
/// API.
async fn a_child_that_fits_is_created_and_audited(s: &Server) {
    let o = org(s).await;
    let ok = creates_nlp_small(&o).await;
    assert_eq!(ok.location(), Some("/quotas/nlp-small"));
    let q = s.quota("nlp-small").await;
    assert_eq!(q["spec"]["hard"]["requests.nvidia.com/gpu"], "2");
    assert_eq!(q["spec"]["max"]["requests.nvidia.com/gpu"], "4");
    let page = o.alice.get("/quotas/nlp-small").await.body;
    assert!(
        page.contains("created nlp-small under nlp"),
        "flash: {page}"
    );
    let csv = o.admin.get("/audit.csv").await.body;
    assert!(
        csv.lines()
            .any(|l| l.contains(",alice,quota.create,nlp-small,")),
        "audited like the API: {csv}"
    );
}

/// An edit form whose quota someone else changed meanwhile says so, shows
/// the current values and changes nothing.
async fn a_stale_edit_form_says_someone_else_changed_the_quota(s: &Server) {
    let o = org(s).await;
    creates_nlp_small(&o).await;
    let edit = o.alice.get("/quotas/nlp-small/edit").await.body;
    let version = hidden_field(&edit, "resourceVersion").expect("a version on the form");
    let (st, _) = s
        .api(
            Method::PUT,
            "/api/v1/quotas/nlp-small",
            Some(quota("nlp-small", "nlp", "3", "5")),
        )
        .await;
    assert_eq!(st, StatusCode::OK);
    let stale = o
        .alice
        .post(
            "/quotas/nlp-small/edit",
            &[
                ("resourceVersion", version.as_str()),
                ("hard:requests.nvidia.com/gpu", "1"),
                ("hard:pods", "5"),
            ],
        )
        .await;
    assert_eq!(stale.status, StatusCode::CONFLICT, "{}", stale.body);
    assert!(stale.body.contains("Someone else changed nlp-small"));
    assert!(
        stale.body.contains(r#"value="3""#),
        "the form shows the current hard"
    );
    assert_eq!(
        s.quota("nlp-small").await["spec"]["hard"]["requests.nvidia.com/gpu"],
        "3"
    );
}

/// The edit form does not show the fair-sharing weight: saving it keeps
/// the weight set through the API, and the page shows it.
async fn an_edit_keeps_the_fair_sharing_weight(s: &Server) {
    let o = org(s).await;
    creates_nlp_small(&o).await;
    let mut q = s.quota("nlp-small").await;
    q["spec"]["fairSharing"] = json!({"weight": "2.5"});
    let (st, v) = s
        .api(Method::PUT, "/api/v1/quotas/nlp-small", Some(q))
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let edit = o.alice.get("/quotas/nlp-small/edit").await.body;
    let version = hidden_field(&edit, "resourceVersion").expect("a version on the form");
    let saved = o
        .alice
        .post(
            "/quotas/nlp-small/edit",
            &[
                ("resourceVersion", version.as_str()),
                ("hard:requests.nvidia.com/gpu", "1"),
                ("hard:pods", "5"),
                ("max:requests.nvidia.com/gpu", "4"),
            ],
        )
        .await;
    assert_eq!(saved.status, StatusCode::SEE_OTHER, "{}", saved.body);
    let q = s.quota("nlp-small").await;
    assert_eq!(q["spec"]["hard"]["requests.nvidia.com/gpu"], "1");
    assert_eq!(q["spec"]["fairSharing"]["weight"], "2.5", "{q}");
    let page = o.alice.get("/quotas/nlp-small").await.body;
    assert!(
        page.contains("Fair sharing") && page.contains("2.5"),
        "{page}"
    );
    // A weight out of range is refused with what is allowed.
    let mut q = s.quota("nlp-small").await;
    q["spec"]["fairSharing"] = json!({"weight": 1001});
    let (st, v) = s
        .api(Method::PUT, "/api/v1/quotas/nlp-small", Some(q))
        .await;
    assert!(st.is_client_error(), "{st} {v}");
    assert!(v.to_string().contains("from 0 to 1000"), "{v}");
}

/// Error pages keep the navigation for someone logged in: a quota bob may
/// not see, and a URL that is no page at all (a page that says so, not an
/// empty 404). Anonymous callers get the page without it; an unknown API
/// path answers in JSON.
async fn error_pages_keep_the_navigation(s: &Server) {
    let o = org(s).await;
    let nav = r#"<nav><a href="/""#;
    let hidden = o.bob.get("/quotas/nlp").await;
    assert_eq!(hidden.status, StatusCode::NOT_FOUND);
    assert!(hidden.body.contains(nav), "{}", hidden.body);
    assert!(
        hidden.body.contains("bizrq nlp not found"),
        "{}",
        hidden.body
    );
    let nowhere = o.alice.get("/no/such/page").await;
    assert_eq!(nowhere.status, StatusCode::NOT_FOUND);
    assert!(nowhere.body.contains(nav), "{}", nowhere.body);
    assert!(
        nowhere.body.contains("there is no page at /no/such/page"),
        "{}",
        nowhere.body
    );
    let anonymous = Browser::new(s).get("/no/such/page").await;
    assert_eq!(anonymous.status, StatusCode::NOT_FOUND);
    assert!(anonymous.body.contains("there is no page at"));
    assert!(!anonymous.body.contains("<nav>"), "{}", anonymous.body);
    let (st, v) = o.admin.api(Method::GET, "/api/v1/nothing", None).await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    assert_eq!(v["error"]["reason"], "NotFound", "{v}");
}

/// Cutting a quota's hard below what runs in it asks first: the form comes
/// back with what saving would do and a box to tick, nothing saved; ticked,
/// it saves. A cut that leaves room saves at once.
async fn a_cut_below_what_runs_is_confirmed_first(s: &Server) {
    let o = org(s).await;
    let d = deployment("train", "nlp-a", 2, 1);
    let r = s
        .review(
            "/validate/workloads",
            &review("deployment-create.json", "u-cut", Some(d), None),
        )
        .await;
    assert_eq!(r["allowed"], true, "{r}");
    let cut = |who: &'static str,
               quota: &'static str,
               gpus: &'static str,
               pods: &'static str,
               confirm: bool| {
        let b = if who == "admin" { &o.admin } else { &o.alice };
        async move {
            let edit = b.get(&format!("/quotas/{quota}/edit")).await.body;
            let version = hidden_field(&edit, "resourceVersion").unwrap();
            let mut f = vec![
                ("resourceVersion", version.as_str()),
                ("hard:requests.nvidia.com/gpu", gpus),
                ("hard:pods", pods),
            ];
            if confirm {
                f.push(("confirm_lower", "yes"));
            }
            b.post(&format!("/quotas/{quota}/edit"), &f).await
        }
    };
    let gpus = |q: Value| q["spec"]["hard"]["requests.nvidia.com/gpu"].clone();
    let asked = cut("alice", "nlp-a", "1", "10", false).await;
    assert_eq!(asked.status, StatusCode::CONFLICT, "{}", asked.body);
    assert!(
        asked.body.contains(
            "set GPUs to 1, below the 2 in use in nlp-a and below: nothing \
             running is stopped, but nlp-a is over quota by 1"
        ),
        "{}",
        asked.body
    );
    assert!(
        asked.body.contains(r#"name="confirm_lower""#),
        "{}",
        asked.body
    );
    assert_eq!(gpus(s.quota("nlp-a").await), "2", "nothing saved yet");
    let confirmed = cut("alice", "nlp-a", "1", "10", true).await;
    assert_eq!(
        confirmed.status,
        StatusCode::SEE_OTHER,
        "{}",
        confirmed.body
    );
    assert_eq!(gpus(s.quota("nlp-a").await), "1");
    // nlp: 2 run below it, 8 → 3 leaves room: saved at once (by an admin:
    // an owner does not set its own hard).
    let roomy = cut("admin", "nlp", "3", "40", false).await;
    assert_eq!(roomy.status, StatusCode::SEE_OTHER, "{}", roomy.body);
    assert_eq!(gpus(s.quota("nlp").await), "3");
}

/// Issue 31: the short new-child form. GPU keys and budgets first at 0;
/// every other key of the parent folded under "More keys", each taking the
/// parent's idle room unless chosen: a child with 2 GPUs is the name, one
/// number and Create; `zero` and `set` are honoured; a bad choice is
/// refused in words and creates nothing.
async fn the_short_child_form_folds_the_other_keys(s: &Server) {
    let o = org(s).await;
    let form = o.alice.get("/quotas/nlp/children/new").await;
    assert_eq!(form.status, StatusCode::OK);
    let body = &form.body;
    let more = body.find("<details class=\"more-keys\"").expect("a fold");
    let gpu = body
        .find(r#"name="hard:requests.nvidia.com/gpu""#)
        .expect("the GPU field");
    assert!(gpu < more, "GPUs before the fold: {body}");
    assert!(
        body[more..].contains(r#"name="mode:pods""#)
            && body[more..].contains("More keys (1): pods"),
        "pods folded with a choice: {body}"
    );
    assert!(
        body.contains(r#"name="hard:requests.nvidia.com/gpu" value="0""#),
        "the GPU field starts at 0: {body}"
    );
    // Name and GPUs only: pods take nlp's idle room (hard 0, max 40).
    let ok = o
        .alice
        .post(
            "/quotas/nlp/children/new",
            &[
                ("name", "nlp-short"),
                ("hard:requests.nvidia.com/gpu", "2"),
                ("hard:pods", ""),
                ("max:pods", ""),
                ("mode:pods", "inherit"),
            ],
        )
        .await;
    assert_eq!(ok.status, StatusCode::SEE_OTHER, "{}", ok.body);
    let q = s.quota("nlp-short").await;
    assert_eq!(q["spec"]["hard"]["requests.nvidia.com/gpu"], "2", "{q}");
    assert_eq!(q["spec"]["hard"]["pods"], "0", "{q}");
    assert_eq!(q["spec"]["max"]["pods"], "40", "{q}");
    // None, and amounts of its own.
    let ok = o
        .alice
        .post(
            "/quotas/nlp/children/new",
            &[
                ("name", "nlp-none"),
                ("hard:requests.nvidia.com/gpu", "1"),
                ("mode:pods", "zero"),
            ],
        )
        .await;
    assert_eq!(ok.status, StatusCode::SEE_OTHER, "{}", ok.body);
    let q = s.quota("nlp-none").await;
    assert_eq!(q["spec"]["hard"]["pods"], "0", "{q}");
    assert!(q["spec"]["max"].get("pods").is_none(), "{q}");
    let ok = o
        .alice
        .post(
            "/quotas/nlp/children/new",
            &[
                ("name", "nlp-set"),
                ("hard:requests.nvidia.com/gpu", "1"),
                ("hard:pods", "3"),
                ("mode:pods", "set"),
            ],
        )
        .await;
    assert_eq!(ok.status, StatusCode::SEE_OTHER, "{}", ok.body);
    assert_eq!(s.quota("nlp-set").await["spec"]["hard"]["pods"], "3");
    let bad = o
        .alice
        .post(
            "/quotas/nlp/children/new",
            &[
                ("name", "nlp-bad"),
                ("hard:requests.nvidia.com/gpu", "1"),
                ("mode:pods", "lots"),
            ],
        )
        .await;
    assert_eq!(bad.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        bad.body
            .contains("pods: &#39;lots&#39; is not a choice: inherit, zero or set")
            || bad
                .body
                .contains("pods: 'lots' is not a choice: inherit, zero or set"),
        "{}",
        bad.body
    );
    let (st, _) = s.api(Method::GET, "/api/v1/quotas/nlp-bad", None).await;
    assert_eq!(st, StatusCode::NOT_FOUND);
}

/// Issue 31: a member's "Ask for more budget" leads to a form of its own
/// (a top-up from the parent's budget), which a member may send; moving
/// quota stays an owner's ask.
async fn a_member_asks_for_more_budget_on_a_form(s: &Server) {
    let o = org(s).await;
    const CASH: &str = "cash/requests.nvidia.com/gpu";
    s.create_quota(
        "lab",
        "",
        json!({"requests.nvidia.com/gpu": "8", CASH: "1000"}),
    )
    .await;
    s.create_quota(
        "lab-a",
        "lab",
        json!({"requests.nvidia.com/gpu": "4", CASH: "100"}),
    )
    .await;
    bind(&o.admin, "bob", "lab-a", "member").await;
    let page = o.bob.get("/quotas/lab-a").await.body;
    let link = page
        .split("<p class=\"budget-ask\"><a href=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap_or_else(|| panic!("an Ask for more budget link: {page}"))
        .replace("&amp;", "&");
    let form = o.bob.get(&link).await;
    assert_eq!(form.status, StatusCode::OK);
    assert!(
        form.body.contains("<h3>Ask for more budget</h3>")
            && form.body.contains(r#"<option value="lab-a" selected"#)
            && form.body.contains("GPU card-hours"),
        "a form for lab-a's budget, by name: {}",
        form.body
    );
    let sent = o
        .bob
        .post(
            "/transfers",
            &[
                ("kind", "topUp"),
                ("source", "parent"),
                ("to", "lab-a"),
                ("key", CASH),
                ("amount", "50"),
                ("reason", "the eval sweep needs a week more"),
            ],
        )
        .await;
    assert_eq!(sent.status, StatusCode::SEE_OTHER, "{}", sent.body);
    let at = sent.location().unwrap().to_string();
    assert!(at.starts_with("/transfers/"), "{at}");
    let shown = o.bob.get(&at).await.body;
    assert!(shown.contains("requested"), "{shown}");
    // Moving quota out of what one does not own: refused, in words.
    let refused = o
        .bob
        .post(
            "/transfers",
            &[
                ("from", "cv"),
                ("to", "lab-a"),
                ("key", "requests.nvidia.com/gpu"),
                ("amount", "1"),
                ("reason", "more cards"),
            ],
        )
        .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.body);
    // A grant of new budget stays an owner's (and an admin's) ask.
    let grant = o
        .bob
        .post(
            "/transfers",
            &[
                ("kind", "topUp"),
                ("source", "grant"),
                ("to", "lab-a"),
                ("key", CASH),
                ("amount", "50"),
                ("reason", "free money"),
            ],
        )
        .await;
    assert_eq!(grant.status, StatusCode::FORBIDDEN, "{}", grant.body);
}

on_both!(
    the_short_child_form_folds_the_other_keys,
    a_member_asks_for_more_budget_on_a_form,
    a_child_that_does_not_fit_is_refused_on_the_form,
    a_child_that_fits_is_created_and_audited,
    a_stale_edit_form_says_someone_else_changed_the_quota,
    an_edit_keeps_the_fair_sharing_weight,
    error_pages_keep_the_navigation,
    a_cut_below_what_runs_is_confirmed_first,
);
