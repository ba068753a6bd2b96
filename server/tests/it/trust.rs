//! Who may call the webhook: a reviewed review changes quotas, so the
//! webhook knows its caller — the API server's client certificate, a
//! bearer token, or nobody but this machine (loopback).

use crate::common::{deployment, fresh_sqlite, review};
use bizrq::config::ServeArgs;
use serde_json::json;
use std::time::Duration;

fn args(dir: &tempfile::TempDir) -> ServeArgs {
    ServeArgs::for_tests(&fresh_sqlite(dir))
}

fn create_review(uid: &str) -> Vec<u8> {
    let d = deployment("train", "team", 1, 1);
    serde_json::to_vec(&review("deployment-create.json", uid, Some(d), None)).unwrap()
}

fn client(identity: Option<reqwest::Identity>) -> reqwest::Client {
    let mut b = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .timeout(Duration::from_secs(10));
    if let Some(i) = identity {
        b = b.identity(i);
    }
    b.build().unwrap()
}

async fn post(
    c: &reqwest::Client,
    running: &bizrq::Running,
    token: Option<&str>,
) -> Result<(u16, String), reqwest::Error> {
    let mut req = c
        .post(format!(
            "https://{}/validate/workloads",
            running.webhook_addr
        ))
        .header("content-type", "application/json")
        .body(create_review("u-1"));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let r = req.send().await?;
    let status = r.status().as_u16();
    Ok((status, r.text().await?))
}

#[tokio::test]
async fn a_webhook_others_can_reach_without_authentication_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = args(&dir);
    a.webhook_listen = "0.0.0.0:0".parse().unwrap();
    let e = match bizrq::start_with(&a, None, None).await {
        Ok(_) => panic!("started an unauthenticated webhook on 0.0.0.0"),
        Err(e) => e.to_string(),
    };
    for what in [
        "without authentication",
        "--webhook-client-ca",
        "--webhook-token",
        "loopback",
    ] {
        assert!(e.contains(what), "{what}: {e}");
    }
    // A token, or the operator's explicit consent, lets it start.
    a.webhook_token = Some("s3cret".into());
    bizrq::start_with(&a, None, None)
        .await
        .unwrap()
        .shutdown()
        .await;
    a.webhook_token = None;
    a.webhook_allow_unauthenticated = true;
    bizrq::start_with(&a, None, None)
        .await
        .unwrap()
        .shutdown()
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_webhook_token_a_review_without_it_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = args(&dir);
    a.webhook_token = Some("s3cret".into());
    let running = bizrq::start_with(&a, None, None).await.unwrap();
    let s = crate::common::Server::in_process(&running);
    s.create_quota("team", "", json!({"requests.nvidia.com/gpu": "8"}))
        .await;
    let c = client(None);
    let (status, body) = post(&c, &running, None).await.unwrap();
    assert_eq!(status, 401, "{body}");
    let (status, body) = post(&c, &running, Some("wrong")).await.unwrap();
    assert_eq!(status, 401, "{body}");
    assert_eq!(
        s.used("team", "requests.nvidia.com/gpu").await,
        "0",
        "nothing charged"
    );
    let (status, body) = post(&c, &running, Some("s3cret")).await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"allowed\":true"), "{body}");
    assert!(running
        .service
        .metrics
        .render()
        .contains("bizrq_webhook_unauthorized_total 2"));
    running.shutdown().await;
}

/// A CA and client certificates it signed, as PEM.
struct Ca {
    cert: rcgen::Certificate,
    key: rcgen::KeyPair,
}

impl Ca {
    fn new() -> Ca {
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let key = rcgen::KeyPair::generate().unwrap();
        Ca {
            cert: p.self_signed(&key).unwrap(),
            key,
        }
    }

    fn client(&self, name: &str) -> reqwest::Identity {
        let mut p = rcgen::CertificateParams::new(vec![name.to_string()]).unwrap();
        p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, &self.cert, &self.key).unwrap();
        let pem = format!("{}{}", cert.pem(), key.serialize_pem());
        reqwest::Identity::from_pem(pem.as_bytes()).unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_client_ca_only_the_api_servers_certificate_gets_a_review_in() {
    bizrq::tls::install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new();
    let ca_file = dir.path().join("client-ca.crt");
    std::fs::write(&ca_file, ca.cert.pem()).unwrap();
    let mut a = args(&dir);
    a.webhook_client_ca = Some(ca_file);
    a.webhook_client_names = vec!["kube-apiserver.bizrq.io".into()];
    // Listening on every interface is fine with a client CA.
    a.webhook_listen = "0.0.0.0:0".parse().unwrap();
    let running = bizrq::start_with(&a, None, None).await.unwrap();
    let mut addr = running.webhook_addr;
    addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    let url = format!("https://{addr}/validate/workloads");
    let send = |c: reqwest::Client| {
        let url = url.clone();
        async move {
            c.post(url)
                .header("content-type", "application/json")
                .body(create_review("u-1"))
                .send()
                .await
        }
    };
    assert!(send(client(None)).await.is_err(), "no client certificate");
    assert!(
        send(client(Some(Ca::new().client("kube-apiserver.bizrq.io"))))
            .await
            .is_err(),
        "a certificate of another CA"
    );
    assert!(
        send(client(Some(ca.client("someone.example"))))
            .await
            .is_err(),
        "a certificate of the CA for another name"
    );
    let r = send(client(Some(ca.client("kube-apiserver.bizrq.io"))))
        .await
        .expect("the API server's certificate is accepted");
    assert_eq!(r.status().as_u16(), 200);
    running.shutdown().await;
}

/// A Secret's file usually ends in a newline, which the API server never
/// sends: the token is trimmed, from the flag and from the file alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_with_a_final_newline_matches_from_the_flag_and_from_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    std::fs::write(&file, "s3cret\n").unwrap();
    let mut from_file = args(&dir);
    from_file.webhook_token_file = Some(file);
    from_file.webhook_listen = "0.0.0.0:0".parse().unwrap();
    let other_dir = tempfile::tempdir().unwrap();
    let mut from_flag = args(&other_dir);
    from_flag.webhook_token = Some("s3cret\n".into());
    for a in [from_file, from_flag] {
        let running = bizrq::start_with(&a, None, None).await.unwrap();
        let mut addr = running.webhook_addr;
        addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
        let r = client(None)
            .post(format!("https://{addr}/validate/workloads"))
            .header("content-type", "application/json")
            .bearer_auth("s3cret")
            .body(create_review("u-1"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200, "{:?}", a.webhook_token_file);
        let r = client(None)
            .post(format!("https://{addr}/validate/workloads"))
            .header("content-type", "application/json")
            .body(create_review("u-2"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 401);
        running.shutdown().await;
    }
    // An empty file would take anyone: refused at start.
    let empty = dir.path().join("empty");
    std::fs::write(&empty, "\n").unwrap();
    let third_dir = tempfile::tempdir().unwrap();
    let mut a = args(&third_dir);
    a.webhook_token_file = Some(empty);
    let e = bizrq::start_with(&a, None, None).await.err().unwrap();
    assert!(e.to_string().contains("is empty"), "{e}");
}

#[test]
fn client_names_without_a_client_ca_are_refused() {
    use clap::Parser;
    let e = bizrq::config::Cli::try_parse_from([
        "bizrq",
        "serve",
        "--webhook-client-names",
        "kube-apiserver.bizrq.io",
    ])
    .expect_err("names without a CA are an error");
    assert!(e.to_string().contains("--webhook-client-ca"), "{e}");
    bizrq::config::Cli::try_parse_from([
        "bizrq",
        "serve",
        "--webhook-client-names",
        "kube-apiserver.bizrq.io",
        "--webhook-client-ca",
        "/etc/bizrq/tls/ca.crt",
    ])
    .expect("with the CA they parse");
}
