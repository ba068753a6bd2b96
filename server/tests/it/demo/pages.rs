//! The demo's quota pages: read GPUs, then budgets, then the queue, then
//! the workloads; a department's page weighs under 200 kB.
use super::*;

/// The text of the first `<p class="strip">` of a page: the quota's one
/// line, its parts joined by " · ".
fn strip_text(page: &str) -> String {
    let start = page
        .find("<p class=\"strip\">")
        .expect("a page with its one line");
    let inner = &page[start..start + page[start..].find("</p>").unwrap()];
    let mut text = String::new();
    let mut tag = false;
    for c in inner.chars() {
        match c {
            '<' => tag = true,
            '>' => tag = false,
            // The separators' no-break spaces read as spaces.
            '\u{a0}' if !tag => text.push(' '),
            c if !tag => text.push(c),
            _ => {}
        }
    }
    text
}

/// A quota page reads GPUs → budgets → queue → workloads → the rest
/// (docs/portal.md "Quota detail"): its one line right under the `<h1>`,
/// the GPU keys and budgets' table, the GPU charts then the budgets',
/// the budgets box, the queue, the bound workloads, then CPU, memory and
/// pods folded in a `<details>` (closed: no script needed to open it),
/// the children and the members. And the line says the usage API's free
/// now and borrowable now of each GPU model and the budgets API's left
/// and run-out day.
async fn quota_pages_read_gpus_then_budgets_then_queue_then_workloads(url: &str) {
    let start = quota::time::parse_rfc3339("2026-11-22T04:00:00Z").unwrap();
    let (_clock, c) = test_clock(start);
    let running = bizrq::start_with(&demo_args(url), None, Some(c))
        .await
        .unwrap();
    let api = Server::in_process(&running);
    let admin = Browser::admin(&api).await;
    let cfg = quota::KeyConfig::default();
    for name in ["nlp", "research"] {
        let page = admin.get(&format!("/quotas/{name}")).await;
        assert_eq!(page.status, StatusCode::OK, "{name}");
        let page = page.body;
        let mut order = vec![
            ("the <h1>", at(&page, "<h1", name)),
            ("the one line", at(&page, "<p class=\"strip\">", name)),
            ("the GPUs and budgets", at(&page, "id=\"keys\"", name)),
            (
                "a GPU chart",
                at(&page, "data-key=\"requests.nvidia.com/gpu", name),
            ),
            (
                "a budget chart",
                at(&page, "data-key=\"cash/requests.nvidia.com/gpu", name),
            ),
            ("the budgets box", at(&page, "id=\"budgets\"", name)),
        ];
        if name == "nlp" {
            order.push(("the queue", at(&page, "id=\"queue\"", name)));
        }
        order.extend([
            ("the bound workloads", at(&page, "id=\"workloads\"", name)),
            ("the other keys", at(&page, "id=\"other-keys\"", name)),
            ("the children", at(&page, "id=\"children\"", name)),
            ("the members", at(&page, "id=\"members\"", name)),
        ]);
        for pair in order.windows(2) {
            assert!(
                pair[0].1 < pair[1].1,
                "{name}: {} before {} ({order:?})",
                pair[0].0,
                pair[1].0
            );
        }
        // Nothing between the heading and the line but the flash's place.
        let h1_end = page[order[0].1..].find("</h1>").unwrap() + order[0].1;
        assert!(
            !page[h1_end..order[1].1].contains("<table"),
            "{name}: the line is right under the heading"
        );
        // CPU, memory and pods only in the fold, which starts closed.
        let fold = order.iter().find(|o| o.0 == "the other keys").unwrap().1;
        let details = page[..fold].rfind("<details").unwrap();
        let tag_end = fold + page[fold..].find('>').unwrap();
        assert!(
            !page[details..tag_end].contains(" open"),
            "{name}: the fold starts closed: {}",
            &page[details..=tag_end]
        );
        for key in ["requests.cpu", "requests.memory", "pods"] {
            let row = at(&page, &format!("<td title=\"{key}\" class=\"key\">"), name);
            assert!(row > fold, "{name}: the {key} row is in the fold");
        }
        // So are their by-model charts; the GPUs' lead.
        let by_model: Vec<(usize, bool)> = page
            .match_indices("<figcaption>")
            .map(|(i, _)| (i, page[i..].starts_with("<figcaption>GPUs by model")))
            .collect();
        assert!(
            by_model.iter().any(|(i, gpu)| *gpu && *i < fold)
                && by_model.iter().any(|(_, gpu)| !gpu)
                && by_model.iter().all(|(i, gpu)| *gpu || *i > fold),
            "{name}: the GPUs' by-model chart leads, the CPU's are in the fold: {by_model:?}"
        );
        assert!(
            page.contains(
                "<summary>Other keys: CPU cores, CPU cores (limit), memory, pods</summary>"
            ),
            "{name}: the fold names what it holds"
        );
        // The line: the APIs' figures, in words.
        let line = strip_text(&page);
        let (_, usage) = api
            .api(
                reqwest::Method::GET,
                &format!("/api/v1/quotas/{name}/usage"),
                None,
            )
            .await;
        let mut want = Vec::new();
        for k in usage["keys"].as_array().unwrap() {
            let key = k["key"].as_str().unwrap();
            let parsed = quota::keys::Key::parse(key, &cfg).unwrap();
            if parsed.model.is_none() || !cfg.is_gpu(&parsed.resource) {
                continue;
            }
            let q = |f: &str| k[f].as_str().map(|v| v.parse::<quota::Quantity>().unwrap());
            let more = q("borrowableNow")
                .filter(|b| !b.is_zero())
                .map(|b| format!(" (+{} borrowable)", quota::readable::amount(key, b)))
                .unwrap_or_default();
            want.push(format!(
                "{}: {} of {} free{more}",
                quota::keys::display_name(key, &cfg),
                quota::readable::amount(key, q("freeNow").unwrap()),
                quota::readable::amount(key, q("hard").unwrap()),
            ));
        }
        let (_, b) = api
            .api(
                reqwest::Method::GET,
                &format!("/api/v1/quotas/{name}/budgets"),
                None,
            )
            .await;
        let budget = &b["budgets"][0];
        let left = quota::readable::grouped(budget["left"].as_str().unwrap().parse().unwrap());
        assert!(
            line.contains(&format!("{left} card-hours left")),
            "{name}'s line says the budgets API's left {left}: {line}"
        );
        if let Some(day) = budget["runsOutAt"].as_str() {
            assert!(
                line.ends_with(&format!("runs out {}", &day[..10])),
                "{name}'s line says the budgets API's run-out day {day}: {line}"
            );
        }
        let gpus = line.split(" · ").take(want.len()).collect::<Vec<_>>();
        assert_eq!(
            gpus, want,
            "{name}'s line: GPU models first, as the usage API has them"
        );
    }
    running.shutdown().await;
}

#[tokio::test]
async fn quota_pages_read_gpus_then_budgets_then_queue_then_workloads_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    quota_pages_read_gpus_then_budgets_then_queue_then_workloads(&fresh_sqlite(&dir)).await;
}

/// A department's quota page on the demo stays under 200 KB of HTML
/// uncompressed (docs/portal.md "Charts": each chart drawn once, the
/// other keys' charts a link away), as does the root's.
#[tokio::test]
async fn a_departments_quota_page_weighs_under_200_kb() {
    let dir = tempfile::tempdir().unwrap();
    let running = bizrq::start_with(&demo_args(&fresh_sqlite(&dir)), None, None)
        .await
        .unwrap();
    let api = Server::in_process(&running);
    let admin = Browser::admin(&api).await;
    for name in ["acme", "research", "platform", "product"] {
        let page = admin.get(&format!("/quotas/{name}")).await;
        assert_eq!(page.status, StatusCode::OK, "{name}");
        assert!(
            page.body.len() < 200 * 1024,
            "{name}'s page weighs {} bytes",
            page.body.len()
        );
        assert!(
            page.body.contains("class=\"chart-panel\""),
            "{name} draws its charts"
        );
    }
    running.shutdown().await;
}
