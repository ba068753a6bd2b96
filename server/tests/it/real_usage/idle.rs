//! Idle cards told and taken back (docs/real-usage.md), end to end: a
//! Job busy, then idle, read from a real Prometheus; past its quota's
//! `idle.after` its submitter and the quota's owner are mailed (a real
//! SMTP server) with what it costs, and under `idle.action: Suspend` it
//! is marked and suspended after the reclaim grace, while busy work runs
//! on.

use super::prom::{Exporter, Prom};
use super::{load, now_ms, reading, until};
use crate::cluster::{pod, Cluster};
use crate::fakeapi::FakeApi;
use crate::mail::{free_port, received, start_smtp};
use crate::support::{job, jobs_of, until_event};
use bizrq::store::sql::SqlStore;
use kube::api::PostParams;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_job_is_told_mailed_and_suspended_after_its_grace() {
    let exporter = Exporter::start().await;
    exporter.set("train-0", load(vec![90], 1.0));
    exporter.set("train-1", load(vec![80], 1.0));
    exporter.set("notebook-0", load(vec![60], 1.0));
    let prom = Prom::start(exporter.addr.unwrap()).await;
    prom.until_scraped("DCGM_FI_DEV_GPU_UTIL").await;

    let dir = tempfile::tempdir().unwrap();
    let db = crate::common::fresh_sqlite(&dir);
    // alice submits; olga owns the quota (bound once it exists: the
    // controller's first list drops the roles of quotas it does not see).
    let store = SqlStore::connect(&db).await.unwrap();
    let now = bizrq::util::now_ms();
    let mut olga = None;
    for (name, email) in [("alice", "alice@example.org"), ("olga", "olga@example.org")] {
        let u = store
            .create_user(name, "not-a-login", false, now)
            .await
            .unwrap();
        store.set_user_email(u.id, Some(email)).await.unwrap();
        olga = Some(u.id);
    }
    let mail_dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let _smtp = start_smtp(port, mail_dir.path()).await;
    let url = prom.url();
    let c = Cluster::on_wall_clock_at(FakeApi::new(), dir, &db, move |a| {
        reading(url)(a);
        a.smtp_host = Some("127.0.0.1".into());
        a.smtp_port = port;
        a.smtp_security = bizrq::config::SmtpSecurity::Plain;
        a.reclaim_grace_seconds = 4;
    })
    .await;
    c.server
        .create_quota_spec(
            "team",
            "",
            json!({"hard": {"requests.nvidia.com/gpu": "16"},
                   "idle": {"showAfter": "3s", "after": "6s", "action": "Suspend"}}),
        )
        .await;
    c.until("team", "first reconcile", |q| {
        !q["status"]["lastReconcileTime"].is_null()
    })
    .await;
    store
        .set_binding(olga.unwrap(), "team", bizrq::authz::Role::Owner, now)
        .await
        .unwrap();
    let jobs = jobs_of(&c, "alice", "ml");
    for (name, cards) in [("train", 2), ("notebook", 1)] {
        let j = job(name).quota("team").cards(cards).named_uid().dynamic();
        jobs.create(&PostParams::default(), &j).await.unwrap();
    }
    let since = quota::time::format_rfc3339(now_ms() - 30_000);
    for (p, owner) in [
        ("train-0", "train"),
        ("train-1", "train"),
        ("notebook-0", "notebook"),
    ] {
        c.fake.put(pod("ml", p, "Job", owner, 1, &since));
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
            .map(|_| ())
    })
    .await;

    // From now on train computes nothing.
    exporter.set_util("train-0", 0);
    exporter.set_util("train-1", 0);
    // (olga is also told of the reclaim pending, an alert of its own.)
    let idle_mails = |got: Vec<serde_json::Value>| -> Vec<serde_json::Value> {
        got.into_iter()
            .filter(|m| m["subject"].as_str().unwrap_or("").contains("GPUs idle"))
            .collect()
    };
    let mut polls = 0;
    let mails = until("the idle alert mailed to alice and olga", 150, async || {
        let got = idle_mails(received(mail_dir.path()));
        polls += 1;
        if polls % 40 == 0 {
            // What there is, should this never come.
            let open = store.open_alerts().await.unwrap();
            let outbox = store.outbox().await.unwrap();
            eprintln!(
                "open alerts: {:?}\noutbox: {:?}\nreceived: {:?}\nidle now: {:?}",
                open.iter()
                    .map(|a| (a.kind, &a.key, &a.message))
                    .collect::<Vec<_>>(),
                outbox
                    .iter()
                    .map(|m| (&m.recipient, &m.subject))
                    .collect::<Vec<_>>(),
                received(mail_dir.path())
                    .iter()
                    .map(|m| m["subject"].clone())
                    .collect::<Vec<_>>(),
                store.idle_now(None).await.unwrap(),
            );
        }
        (got.len() >= 2).then_some(got)
    })
    .await;
    let mut to: Vec<String> = mails
        .iter()
        .map(|m| m["rcpt_tos"][0].as_str().unwrap().to_string())
        .collect();
    to.sort();
    assert_eq!(to, ["alice@example.org", "olga@example.org"]);
    for m in &mails {
        let subject = m["subject"].as_str().unwrap();
        assert!(
            subject
                .starts_with("[bizrq warning] train in team, submitted by alice: 2 GPUs idle for"),
            "{subject}"
        );
        assert!(subject.contains("card-hours"), "{subject}");
        let text = m["text"].as_str().unwrap();
        assert!(text.contains("suspended after the reclaim grace"), "{text}");
        assert!(text.contains("/quotas/team"), "{text}");
    }
    let open = store.open_alerts().await.unwrap();
    assert_eq!(
        open.iter()
            .filter(|a| a.kind == bizrq::alerts::Kind::IdleGpus)
            .map(|a| a.key.as_str())
            .collect::<Vec<_>>(),
        ["batch/Job/ml/train"],
        "the busy notebook is not idle"
    );
    // Marked, warned, then suspended once the grace is over.
    let warned = until_event(&c, "ReclaimPending", "train").await;
    // The owner is told of the reclaim pending, and why.
    until("the reclaim pending mailed to olga", 30, async || {
        received(mail_dir.path())
            .iter()
            .any(|m| {
                m["subject"]
                    .as_str()
                    .unwrap()
                    .contains("batch work sits on idle GPUs")
                    && m["rcpt_tos"][0] == "olga@example.org"
            })
            .then_some(())
    })
    .await;
    assert!(
        warned["note"]
            .as_str()
            .unwrap()
            .contains("unless it gets busy"),
        "{warned}"
    );
    until("train suspended", 60, async || {
        (c.fake.get("batch", "jobs", "ml", "train")?["spec"]["suspend"] == true).then_some(())
    })
    .await;
    until_event(&c, "Reclaimed", "train").await;
    assert_eq!(
        idle_mails(received(mail_dir.path())).len(),
        2,
        "told once each"
    );
    assert_ne!(
        c.fake.get("batch", "jobs", "ml", "notebook").unwrap()["spec"]["suspend"],
        true,
        "busy work runs on"
    );
    store.close().await;
}
