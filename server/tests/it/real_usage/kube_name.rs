//! The idle-GPU mail reaches a person through their Kubernetes username
//! (docs/real-usage.md, docs/oidc.md "One name from kubectl to the
//! portal"): the API server names alice `oidc:alice@example.com`, an admin
//! links that name to the portal user `alice` on the Users page, and when
//! the Job she submitted sits idle past its quota's `idle.after` (read
//! from a real Prometheus), alice's address gets the "GPUs idle" mail (a
//! real SMTP server) with its card-hours. The portal user whose name is
//! merely another Kubernetes name, `alice@example.com` (the same email
//! without the API server's prefix), gets nothing.

use super::prom::{Exporter, Prom};
use super::{load, now_ms, reading, until};
use crate::cluster::{pod, Cluster};
use crate::common::{create_user, Browser};
use crate::fakeapi::FakeApi;
use crate::mail::{free_port, received, start_smtp};
use crate::support::{job, jobs_of};
use bizrq::store::sql::SqlStore;
use kube::api::PostParams;
use reqwest::StatusCode;
use serde_json::json;

const KUBE_NAME: &str = "oidc:alice@example.com";

async fn the_idle_mail_reaches_the_submitter_through_their_kubernetes_username(db: &str) {
    let exporter = Exporter::start().await;
    exporter.set("train-0", load(vec![90], 1.0));
    exporter.set("train-1", load(vec![80], 1.0));
    let prom = Prom::start(exporter.addr.unwrap()).await;
    prom.until_scraped("DCGM_FI_DEV_GPU_UTIL").await;

    let mail_dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let _smtp = start_smtp(port, mail_dir.path()).await;
    let dir = tempfile::tempdir().unwrap();
    let url = prom.url();
    let c = Cluster::on_wall_clock_at(FakeApi::new(), dir, db, move |a| {
        reading(url)(a);
        a.smtp_host = Some("127.0.0.1".into());
        a.smtp_port = port;
        a.smtp_security = bizrq::config::SmtpSecurity::Plain;
    })
    .await;

    // The admin makes the two users on the Users page, gives each an
    // address, and links alice to the name the API server gives her.
    let admin = Browser::admin(&c.server).await;
    for (name, email) in [
        ("alice", "alice@example.org"),
        ("alice@example.com", "not-alice@example.org"),
    ] {
        create_user(&admin, name, "a-password-of-length").await;
        admin.get("/users").await;
        let p = admin
            .post(&format!("/users/{name}/email"), &[("email", email)])
            .await;
        assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    }
    admin.get("/users").await;
    let p = admin
        .post(
            "/users/alice/kube-username",
            &[("kube_username", KUBE_NAME)],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    let users = admin.get("/users").await;
    assert!(users.body.contains(KUBE_NAME), "the link is shown");
    let store = SqlStore::connect(db).await.unwrap();
    assert_eq!(
        store
            .user_by_kube_username(KUBE_NAME)
            .await
            .unwrap()
            .map(|u| u.username),
        Some("alice".to_string())
    );

    c.server
        .create_quota_spec(
            "team",
            "",
            json!({"hard": {"requests.nvidia.com/gpu": "16"},
                   "idle": {"showAfter": "2s", "after": "4s", "action": "Notify"}}),
        )
        .await;
    c.until("team", "first reconcile", |q| {
        !q["status"]["lastReconcileTime"].is_null()
    })
    .await;
    // Submitted through the API server by the person it names so.
    let j = job("train").quota("team").cards(2).named_uid().dynamic();
    jobs_of(&c, KUBE_NAME, "ml")
        .create(&PostParams::default(), &j)
        .await
        .unwrap();
    let since = quota::time::format_rfc3339(now_ms() - 30_000);
    for p in ["train-0", "train-1"] {
        c.fake.put(pod("ml", p, "Job", "train", 1, &since));
    }
    until("a reading with train busy", 60, async || {
        let w = store
            .real_usage_by(
                bizrq::store::real_usage::By::Workload,
                &["team".into()],
                0,
                i64::MAX,
            )
            .await
            .unwrap();
        w.iter()
            .find(|g| g.key == "batch/Job/ml/train" && g.figures.gpu.busy > 0)
            .map(|g| assert_eq!(g.username, KUBE_NAME, "the submitter, as the review named"))
    })
    .await;

    // From now on train computes nothing.
    exporter.set_util("train-0", 0);
    exporter.set_util("train-1", 0);
    let idle_mails = || -> Vec<serde_json::Value> {
        received(mail_dir.path())
            .into_iter()
            .filter(|m| m["subject"].as_str().unwrap_or("").contains("GPUs idle"))
            .collect()
    };
    let mail = until("the idle mail to alice", 120, async || idle_mails().pop()).await;
    assert_eq!(mail["rcpt_tos"], json!(["alice@example.org"]));
    let subject = mail["subject"].as_str().unwrap();
    assert!(
        subject.starts_with(&format!(
            "[bizrq warning] train in team, submitted by {KUBE_NAME}: 2 GPUs idle for"
        )),
        "{subject}"
    );
    assert!(subject.contains("card-hours"), "{subject}");
    let text = mail["text"].as_str().unwrap();
    assert!(
        text.contains("card-hours") && text.contains("/quotas/team"),
        "{text}"
    );
    // The alert is open; a few more readings tell no one else, and alice
    // not twice.
    let open = store.open_alerts().await.unwrap();
    assert!(
        open.iter()
            .any(|a| a.kind == bizrq::alerts::Kind::IdleGpus && a.key == "batch/Job/ml/train"),
        "{open:?}"
    );
    tokio::time::sleep(std::time::Duration::from_secs(4)).await;
    let to: Vec<serde_json::Value> = received(mail_dir.path())
        .iter()
        .map(|m| m["rcpt_tos"].clone())
        .collect();
    assert_eq!(
        to,
        [json!(["alice@example.org"])],
        "alice alone, once; the user named alice@example.com is not her"
    );
    store.close().await;
}

on_both!(the_idle_mail_reaches_the_submitter_through_their_kubernetes_username);
