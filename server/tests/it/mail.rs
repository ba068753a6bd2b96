//! The email outbox against a real SMTP server (aiosmtpd with
//! tests/smtp_sink.py), on SQLite and PostgreSQL.

use crate::common::test_clock;
use bizrq::config::SmtpSecurity;
use bizrq::mail::{message_id, Mailer, Sender, SmtpConfig, LEASE_MS};
use bizrq::metrics::Metrics;
use bizrq::store::outbox::NewMail;
use bizrq::store::sql::SqlStore;
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::process::{Child, Command};

/// aiosmtpd writing each accepted message to `dir` as JSON.
pub struct Smtp {
    _child: Child,
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub async fn start_smtp(port: u16, dir: &Path) -> Smtp {
    let tests = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests");
    let child = Command::new("python3")
        .args(["-m", "aiosmtpd", "-n", "-l"])
        .arg(format!("127.0.0.1:{port}"))
        .args(["-c", "smtp_sink.Sink"])
        .arg(dir)
        .env("PYTHONPATH", tests)
        .kill_on_drop(true)
        .spawn()
        .expect("python3 with aiosmtpd is required (pip install aiosmtpd)");
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return Smtp { _child: child };
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("aiosmtpd did not listen on port {port} (is it installed? pip install aiosmtpd)");
}

pub fn received(dir: &Path) -> Vec<Value> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "json") {
            out.push(serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap());
        }
    }
    out
}

fn mailer(port: u16) -> Mailer {
    Mailer::new(&SmtpConfig {
        host: "127.0.0.1".into(),
        port,
        security: SmtpSecurity::Plain,
        username: None,
        password: None,
        from: "bizrq <bizrq@example.org>".into(),
    })
    .unwrap()
}

fn mail(key: &str) -> NewMail {
    NewMail {
        idempotency_key: key.into(),
        recipient: "Ada <ada@example.org>".into(),
        subject: format!("nlp-team at 80 % of nvidia.com/gpu ({key})"),
        text_body: "nlp-team uses 8 of 10 nvidia.com/gpu.\nhttp://bizrq/quotas/nlp-team\n".into(),
        html_body: "<p>nlp-team uses <b>8 of 10</b> nvidia.com/gpu.</p>".into(),
    }
}

const T0: i64 = 1_800_000_000_000;

async fn delivers_once_with_both_parts(url: &str) {
    let store = Arc::new(SqlStore::connect(url).await.unwrap());
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let _smtp = start_smtp(port, dir.path()).await;
    assert!(store.enqueue_mail(&mail("alert:7:80"), T0).await.unwrap());
    // The alert engine's retry of the same alert queues nothing new.
    assert!(!store.enqueue_mail(&mail("alert:7:80"), T0).await.unwrap());
    let metrics = Arc::new(Metrics::default());
    let (_t, c) = test_clock(T0);
    let sender = Sender::new(store.clone(), Some(mailer(port)), metrics.clone(), c);
    let pass = sender.pass().await.unwrap();
    assert_eq!((pass.claimed, pass.sent, pass.failed), (1, 1, 0));
    assert_eq!(sender.pass().await.unwrap().claimed, 0);

    let got = received(dir.path());
    assert_eq!(got.len(), 1, "{got:?}");
    let m = &got[0];
    assert_eq!(m["rcpt_tos"], serde_json::json!(["ada@example.org"]));
    assert_eq!(m["mail_from"], "bizrq@example.org");
    assert_eq!(m["message_id"], "<alert=3A7=3A80@bizrq>");
    assert_eq!(m["message_id"], message_id("alert:7:80").as_str());
    assert_eq!(
        m["subject"],
        "nlp-team at 80 % of nvidia.com/gpu (alert:7:80)"
    );
    assert_eq!(m["content_type"], "multipart/alternative");
    // Lines end in CRLF on the wire.
    let part = |k: &str| m[k].as_str().unwrap().replace("\r\n", "\n");
    assert_eq!(part("text"), mail("x").text_body);
    assert_eq!(part("html").trim_end(), mail("x").html_body);

    let row = store.mail_by_key("alert:7:80").await.unwrap().unwrap();
    assert_eq!(row.sent_at, Some(T0));
    assert_eq!((row.attempts, row.lease_until), (0, None));
    assert_eq!(store.mail_queue_depth().await.unwrap(), 0);
    let text = metrics.render();
    assert!(text.contains("bizrq_mail_sent_total 1"), "{text}");
    assert!(text.contains("bizrq_mail_queue_depth 0"), "{text}");
    store.close().await;
}

async fn outage_is_retried_with_backoff_then_delivered_once(url: &str) {
    let store = Arc::new(SqlStore::connect(url).await.unwrap());
    let dir = tempfile::tempdir().unwrap();
    let port = free_port(); // nothing listens yet
    store.enqueue_mail(&mail("down-1"), T0).await.unwrap();
    let metrics = Arc::new(Metrics::default());
    let (t, c) = test_clock(T0);
    let sender = Sender::new(store.clone(), Some(mailer(port)), metrics.clone(), c);

    let mut waits = Vec::new();
    for attempt in 1..=3 {
        let pass = sender.pass().await.unwrap();
        assert_eq!((pass.sent, pass.failed), (0, 1), "attempt {attempt}");
        let row = store.mail_by_key("down-1").await.unwrap().unwrap();
        assert_eq!(row.attempts, attempt);
        assert_eq!((row.sent_at, row.lease_until), (None, None));
        assert!(row.last_error.as_deref().unwrap().contains("SMTP server"));
        let now = t.load(Ordering::SeqCst);
        let wait = row.next_attempt_at - now;
        let full = 30_000 << (attempt - 1);
        assert!(
            wait <= full && wait >= full - full / 5,
            "wait {wait} after {attempt}"
        );
        waits.push(wait);
        // Not due before its time.
        t.store(row.next_attempt_at - 1, Ordering::SeqCst);
        assert_eq!(sender.pass().await.unwrap().claimed, 0);
        t.store(row.next_attempt_at, Ordering::SeqCst);
    }
    assert!(waits[0] < waits[1] && waits[1] < waits[2], "{waits:?}");
    assert_eq!(store.mail_queue_depth().await.unwrap(), 1);
    assert!(metrics.render().contains("bizrq_mail_failures_total 3"));

    let _smtp = start_smtp(port, dir.path()).await;
    let pass = sender.pass().await.unwrap();
    assert_eq!((pass.sent, pass.failed), (1, 0));
    assert_eq!(sender.pass().await.unwrap().claimed, 0);
    let got = received(dir.path());
    assert_eq!(got.len(), 1);
    assert_eq!(got[0]["message_id"], "<down-1@bizrq>");
    let row = store.mail_by_key("down-1").await.unwrap().unwrap();
    assert!(row.sent_at.is_some());
    assert_eq!(row.attempts, 3);
    store.close().await;
}

async fn two_senders_deliver_each_row_once(url: &str) {
    let setup = SqlStore::connect(url).await.unwrap();
    let now = bizrq::util::now_ms();
    for i in 0..50 {
        setup
            .enqueue_mail(&mail(&format!("many-{i}")), now)
            .await
            .unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let _smtp = start_smtp(port, dir.path()).await;
    let mut replicas = Vec::new();
    for _ in 0..2 {
        // Each replica with its own pool, as two processes.
        let store = Arc::new(SqlStore::connect(url).await.unwrap());
        let sender = Sender::new(
            store,
            Some(mailer(port)),
            Arc::new(Metrics::default()),
            Arc::new(bizrq::util::now_ms),
        );
        replicas.push(tokio::spawn(async move {
            let mut sent = 0;
            let mut idle = 0;
            while idle < 3 {
                let p = sender.pass().await.unwrap();
                assert_eq!(p.failed, 0);
                sent += p.sent;
                idle = if p.claimed == 0 { idle + 1 } else { 0 };
                tokio::task::yield_now().await;
            }
            sent
        }));
    }
    let mut total = 0;
    for r in replicas {
        total += r.await.unwrap();
    }
    assert_eq!(total, 50);
    let got = received(dir.path());
    let mut ids: HashMap<String, usize> = HashMap::new();
    for m in &got {
        *ids.entry(m["message_id"].as_str().unwrap().into())
            .or_default() += 1;
    }
    assert_eq!(got.len(), 50);
    assert_eq!(ids.len(), 50);
    assert!(ids.values().all(|n| *n == 1));
    assert_eq!(setup.mail_queue_depth().await.unwrap(), 0);
    setup.close().await;
}

async fn a_lease_left_by_a_dead_sender_expires_then_one_delivery(url: &str) {
    let store = Arc::new(SqlStore::connect(url).await.unwrap());
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let _smtp = start_smtp(port, dir.path()).await;
    store.enqueue_mail(&mail("dead-1"), T0).await.unwrap();
    store.enqueue_mail(&mail("dead-2"), T0).await.unwrap();

    // Replica A claims both and dies before sending.
    let claimed = store.claim_mail(T0, T0 + LEASE_MS, 10).await.unwrap();
    assert_eq!(claimed.len(), 2);
    // Nobody else (not A restarted either) claims them while the lease holds.
    assert!(store
        .claim_mail(T0, T0 + LEASE_MS, 10)
        .await
        .unwrap()
        .is_empty());

    // Replica A dies after the server accepted dead-2, before marking it.
    let m = mailer(port);
    let dead2 = claimed
        .iter()
        .find(|r| r.idempotency_key == "dead-2")
        .unwrap();
    m.send(dead2).await.unwrap();

    let (t, c) = test_clock(T0 + 1000);
    let b = Sender::new(store.clone(), Some(m), Arc::new(Metrics::default()), c);
    assert_eq!(b.pass().await.unwrap().claimed, 0, "leased rows wait");
    t.store(T0 + LEASE_MS, Ordering::SeqCst);
    assert_eq!(
        b.pass().await.unwrap().claimed,
        0,
        "until the lease is over"
    );
    t.store(T0 + LEASE_MS + 1, Ordering::SeqCst);
    let pass = b.pass().await.unwrap();
    assert_eq!((pass.claimed, pass.sent), (2, 2));
    assert_eq!(b.pass().await.unwrap().claimed, 0);

    let got = received(dir.path());
    let ids: Vec<&str> = got
        .iter()
        .map(|m| m["message_id"].as_str().unwrap())
        .collect();
    // dead-1: claimed but never sent: delivered once.
    assert_eq!(ids.iter().filter(|i| **i == "<dead-1@bizrq>").count(), 1);
    // dead-2: the at-least-once window: accepted, not marked, resent with
    // the same Message-ID, by which the receiver drops the copy.
    assert_eq!(ids.iter().filter(|i| **i == "<dead-2@bizrq>").count(), 2);
    assert_eq!(got.len(), 3);
    assert_eq!(store.mail_queue_depth().await.unwrap(), 0);
    store.close().await;
}

macro_rules! on_both_databases {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                let dir = tempfile::tempdir().unwrap();
                super::$name(&crate::common::fresh_sqlite(&dir)).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                super::$name(&crate::common::fresh_postgres().await).await;
            }
        }
    )*};
}

on_both_databases!(
    delivers_once_with_both_parts,
    outage_is_retried_with_backoff_then_delivered_once,
    two_senders_deliver_each_row_once,
    a_lease_left_by_a_dead_sender_expires_then_one_delivery,
);

/// `bizrq serve` with `--smtp-host` sends what waits in the outbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_sends_the_outbox() {
    let db = tempfile::tempdir().unwrap();
    let url = crate::common::fresh_sqlite(&db);
    let store = SqlStore::connect(&url).await.unwrap();
    store
        .enqueue_mail(&mail("wired-1"), bizrq::util::now_ms())
        .await
        .unwrap();
    store.close().await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let _smtp = start_smtp(port, dir.path()).await;
    let mut args = bizrq::config::ServeArgs::for_tests(&url);
    args.smtp_host = Some("127.0.0.1".into());
    args.smtp_port = port;
    args.smtp_security = SmtpSecurity::Plain;
    let running = bizrq::start_with(&args, None, None).await.unwrap();
    let mut got = Vec::new();
    for _ in 0..100 {
        got = received(dir.path());
        if !got.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(got.len(), 1);
    assert_eq!(got[0]["message_id"], "<wired-1@bizrq>");
    running.shutdown().await;
}

/// Issue 5 end to end: a quota crossing 80 % of a key emails its owner
/// once, with the numbers and a link; while it stays crossed nothing more is
/// sent; when the condition clears and recurs, it fires (and mails) again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_threshold_crossing_emails_the_owner_once_and_again_when_it_recurs() {
    use crate::common::{deployment, review, Server};
    let db = tempfile::tempdir().unwrap();
    let url = crate::common::fresh_sqlite(&db);
    let store = SqlStore::connect(&url).await.unwrap();
    let ada = store
        .create_user("ada", "not-a-login", false, bizrq::util::now_ms())
        .await
        .unwrap();
    store
        .set_user_email(ada.id, Some("ada@example.org"))
        .await
        .unwrap();
    store
        .set_binding(
            ada.id,
            "team",
            bizrq::authz::Role::Owner,
            bizrq::util::now_ms(),
        )
        .await
        .unwrap();
    store.close().await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let _smtp = start_smtp(port, dir.path()).await;
    let mut args = bizrq::config::ServeArgs::for_tests(&url);
    args.smtp_host = Some("127.0.0.1".into());
    args.smtp_port = port;
    args.smtp_security = SmtpSecurity::Plain;
    // No resync, no sweep in the test's time: each write is evaluated
    // within `SETTLE` by itself.
    args.resync_seconds = 3600;
    let running = bizrq::start_with(&args, None, None).await.unwrap();
    let s = Server::in_process(&running);
    s.create_quota(
        "team",
        "",
        serde_json::json!({"requests.nvidia.com/gpu": "10"}),
    )
    .await;

    let wait_for = |n: usize| {
        let dir = dir.path().to_path_buf();
        async move {
            for _ in 0..300 {
                let got = received(&dir);
                if got.len() >= n {
                    return got;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            panic!("fewer than {n} emails arrived: {:?}", received(&dir));
        }
    };

    // 8 of 10 cards: the 80 % warning.
    let d = deployment("train", "team", 8, 1);
    let r = s
        .review(
            "/validate/workloads",
            &review("deployment-create.json", "c-1", Some(d.clone()), None),
        )
        .await;
    assert_eq!(r["allowed"], true, "{r}");
    let got = wait_for(1).await;
    let m = &got[0];
    assert_eq!(m["rcpt_tos"], serde_json::json!(["ada@example.org"]), "{m}");
    let text = m["text"].as_str().unwrap();
    assert!(m["subject"].as_str().unwrap().contains("team"), "{m}");
    assert!(
        text.contains("8") && text.contains("10"),
        "the numbers: {text}"
    );
    assert!(text.contains("/quotas/team"), "a link to the quota: {text}");
    // Still crossed over several evaluations and sender polls: no repeat.
    tokio::time::sleep(Duration::from_secs(7)).await;
    assert_eq!(received(dir.path()).len(), 1, "one email per crossing");

    // It clears (the workload goes), then recurs: a second email.
    let r = s
        .review(
            "/validate/workloads",
            &review("deployment-delete.json", "c-2", None, Some(d.clone())),
        )
        .await;
    assert_eq!(r["allowed"], true, "{r}");
    tokio::time::sleep(Duration::from_secs(1)).await; // its evaluation resolves it
    assert_eq!(received(dir.path()).len(), 1, "clearing sends nothing");
    let r = s
        .review(
            "/validate/workloads",
            &review("deployment-create.json", "c-3", Some(d), None),
        )
        .await;
    assert_eq!(r["allowed"], true, "{r}");
    let got = wait_for(2).await;
    assert_eq!(got.len(), 2, "fires again when it recurs");
    running.shutdown().await;
}

/// One training job that crosses 80 % of four keys of its quota at once is
/// one alert and one email, its keys by name, GPUs first; the raw keys stay
/// in the API. (Its quota watches every key by a '*' rule; by default only
/// its GPUs would warn.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_job_over_several_keys_is_one_email_naming_them() {
    use crate::common::{deployment, review, Server};
    let db = tempfile::tempdir().unwrap();
    let url = crate::common::fresh_sqlite(&db);
    let store = SqlStore::connect(&url).await.unwrap();
    let ada = store
        .create_user("ada", "not-a-login", false, bizrq::util::now_ms())
        .await
        .unwrap();
    store
        .set_user_email(ada.id, Some("ada@example.org"))
        .await
        .unwrap();
    store
        .set_binding(
            ada.id,
            "team",
            bizrq::authz::Role::Owner,
            bizrq::util::now_ms(),
        )
        .await
        .unwrap();
    // Every key watched (by default a GPU quota warns on GPUs and budgets
    // only: `alerts::Defaults`).
    store
        .set_alert_rule("team", &bizrq::alerts::Rule::default_for("*"))
        .await
        .unwrap();
    store.close().await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let _smtp = start_smtp(port, dir.path()).await;
    let mut args = bizrq::config::ServeArgs::for_tests(&url);
    args.smtp_host = Some("127.0.0.1".into());
    args.smtp_port = port;
    args.smtp_security = SmtpSecurity::Plain;
    args.resync_seconds = 3600;
    let running = bizrq::start_with(&args, None, None).await.unwrap();
    let s = Server::in_process(&running);
    s.create_quota(
        "team",
        "",
        serde_json::json!({
            "requests.cpu": "80",
            "pods": "10",
            "requests.nvidia.com/gpu": "10",
            "requests.nvidia.com/gpu.A100": "10",
        }),
    )
    .await;
    // 8 pods of 1 A100 and 8 cores each: 80 % of GPUs, A100 GPUs, CPU
    // cores and pods.
    let d = deployment("train", "team", 8, 1);
    let r = s
        .review(
            "/validate/workloads",
            &review("deployment-create.json", "g-1", Some(d), None),
        )
        .await;
    assert_eq!(r["allowed"], true, "{r}");
    for _ in 0..300 {
        if !received(dir.path()).is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Senders poll every 5 s: a second email would be here by now.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let got = received(dir.path());
    assert_eq!(got.len(), 1, "one email for the four keys: {got:?}");
    let m = &got[0];
    assert_eq!(m["rcpt_tos"], serde_json::json!(["ada@example.org"]), "{m}");
    assert_eq!(
        m["subject"],
        "[bizrq warning] GPUs of team reached 80 %: 8 in use of 10 (and 3 more keys)"
    );
    let text = m["text"].as_str().unwrap().replace("\r\n", "\n");
    for line in [
        "Usage threshold (warning) on team, 4 keys:\n",
        "- GPUs: 8 of 10 (80 %)\n",
        "- A100 GPUs: 8 of 10 (80 %)\n",
        "- CPU cores: 64 of 80 (80 %)\n",
        "- pods: 8 of 10 (80 %)\n",
    ] {
        assert!(text.contains(line), "{line:?} in {text}");
    }
    assert!(!text.contains("requests.nvidia.com"), "no raw key: {text}");
    assert!(text.contains("/quotas/team"), "{text}");
    let html = m["html"].as_str().unwrap();
    assert!(
        html.contains("title=\"requests.nvidia.com/gpu.A100\""),
        "the raw key in a tooltip: {html}"
    );
    // The API has the one alert, its raw keys and their names, GPUs first;
    // `group=condition` (kept for clients) reads the same.
    let get = |path: &'static str| {
        let s = &s;
        async move {
            let (status, v) = s.api(reqwest::Method::GET, path, None).await;
            assert_eq!(status, reqwest::StatusCode::OK, "{v}");
            v
        }
    };
    for path in [
        "/api/v1/alerts?state=open",
        "/api/v1/alerts?state=open&group=condition",
    ] {
        let api = get(path).await;
        let items = api["items"].as_array().unwrap();
        assert_eq!(items.len(), 1, "{api}");
        let a = &items[0];
        assert_eq!(
            (&a["quota"], &a["kind"], &a["level"]),
            (&"team".into(), &"threshold".into(), &"warning".into())
        );
        assert_eq!(
            a["keys"],
            serde_json::json!([
                "requests.nvidia.com/gpu",
                "requests.nvidia.com/gpu.A100",
                "requests.cpu",
                "pods"
            ])
        );
        assert_eq!(
            a["names"],
            serde_json::json!(["GPUs", "A100 GPUs", "CPU cores", "pods"])
        );
    }
    running.shutdown().await;
}

/// A real `bizrq serve` process SIGKILLed in the middle of an SMTP send
/// (after its claim, during RCPT, so the server never accepted the message)
/// and then restarted on the same database delivers the email exactly once.
///
/// The dead process's claim is a lease of `LEASE_MS` from when it claimed:
/// the restarted process leaves the row alone until the lease is over, then
/// claims and sends it; no second copy follows. This shows the "once" side
/// of the outbox for a kill before the SMTP server's 250. The at-least-once
/// window is a kill after that 250 and before the row is marked sent: the
/// email is then sent again with the same Message-ID (by which the receiver
/// can drop the copy); `a_lease_left_by_a_dead_sender_expires_then_one_delivery`
/// covers that case.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_killed_mid_send_and_restarted_delivers_the_email_once() {
    use crate::common::{Server, ADMIN_PASSWORD};
    let db = tempfile::tempdir().unwrap();
    let url = crate::common::fresh_sqlite(&db);
    let store = SqlStore::connect(&url).await.unwrap();
    store
        .enqueue_mail(&mail("killed-1"), bizrq::util::now_ms())
        .await
        .unwrap();
    store.close().await;

    let dir = tempfile::tempdir().unwrap();
    let hold = dir.path().join("hold");
    let held = dir.path().join("held");
    std::fs::write(&hold, "").unwrap();
    let port = free_port();
    let _smtp = start_smtp(port, dir.path()).await;
    let port = port.to_string();
    let smtp_args = [
        "--smtp-host",
        "127.0.0.1",
        "--smtp-port",
        &port,
        "--smtp-security",
        "plain",
    ];

    // No claim (and so no lease) can start before this instant.
    let first_start = bizrq::util::now_ms();
    let (mut first, _) = Server::start_with(&url, &smtp_args, Some(ADMIN_PASSWORD)).await;
    let mut waited = 0;
    while !held.exists() {
        assert!(waited < 600, "the first process never reached RCPT in 30 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
        waited += 1;
    }
    // Mid-send: claimed, connected, envelope half sent. No graceful shutdown.
    first.kill().await;
    std::fs::remove_file(&hold).unwrap();
    // Let the sink finish the orphaned RCPT on the dead connection.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(received(dir.path()).is_empty(), "nothing was accepted");

    let (_second, _) = Server::start_with(&url, &smtp_args, Some(ADMIN_PASSWORD)).await;
    let mut got = Vec::new();
    for _ in 0..900 {
        got = received(dir.path());
        if !got.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let delivered_after = bizrq::util::now_ms() - first_start;
    assert_eq!(got.len(), 1, "delivered once after restart: {got:?}");
    assert_eq!(got[0]["message_id"], "<killed-1@bizrq>");
    assert!(
        delivered_after >= LEASE_MS,
        "the restarted process waited for the dead one's lease: \
         delivered {delivered_after} ms after the first start"
    );

    // Over more than one poll of the sender: still one.
    tokio::time::sleep(Duration::from_secs(7)).await;
    let got = received(dir.path());
    assert_eq!(got.len(), 1, "no second copy: {got:?}");
    let store = SqlStore::connect(&url).await.unwrap();
    assert_eq!(store.mail_queue_depth().await.unwrap(), 0);
    let row = store.mail_by_key("killed-1").await.unwrap().unwrap();
    assert!(row.sent_at.is_some());
    store.close().await;
}
