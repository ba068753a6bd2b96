//! Test harness: real `bizrq` processes, real databases, HTTPS reviews.

use reqwest::{Method, StatusCode};
use serde_json::Value;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

pub const TOKEN: &str = "test-token";

/// PostgreSQL for tests. Required: a missing server fails the test.
pub fn postgres_base() -> String {
    std::env::var("BIZRQ_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".into())
}

/// A fresh, empty PostgreSQL database; returns its URL.
pub async fn fresh_postgres() -> String {
    use sqlx::Connection;
    let base = postgres_base();
    let mut conn = sqlx::postgres::PgConnection::connect(&format!("{base}/postgres"))
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL is required for these tests ({base}): {e}"));
    let db = format!("bizrq_t_{}", bizrq::util::new_uid().replace('-', ""));
    sqlx::query(&format!("CREATE DATABASE {db}"))
        .execute(&mut conn)
        .await
        .unwrap();
    format!("{base}/{db}")
}

pub fn fresh_sqlite(dir: &tempfile::TempDir) -> String {
    format!("sqlite://{}", dir.path().join("bizrq.db").display())
}

pub fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// A fixture, with `"@other.json"` strings replaced by that fixture.
pub fn fixture(name: &str) -> Value {
    let text = std::fs::read_to_string(fixtures_dir().join(name))
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut v: Value = serde_json::from_str(&text).unwrap();
    fn expand(v: &mut Value) {
        match v {
            Value::String(s) if s.starts_with('@') => *v = fixture(&s[1..]),
            Value::Array(a) => a.iter_mut().for_each(expand),
            Value::Object(o) => o.values_mut().for_each(expand),
            _ => {}
        }
    }
    expand(&mut v);
    v
}

/// The Deployment fixture, renamed, rebound and resized.
pub fn deployment(name: &str, quota: &str, replicas: i64, gpus: i64) -> Value {
    let mut d = fixture("deployment.json");
    d["metadata"]["name"] = name.into();
    d["metadata"]["labels"]["biz.group.resource.quota"] = quota.into();
    d["spec"]["replicas"] = replicas.into();
    let res = &mut d["spec"]["template"]["spec"]["containers"][0]["resources"];
    res["limits"]["nvidia.com/gpu"] = gpus.to_string().into();
    res["requests"]["nvidia.com/gpu"] = gpus.to_string().into();
    d
}

/// An AdmissionReview from a fixture with the given object(s) and uid.
pub fn review(fixture_name: &str, uid: &str, object: Option<Value>, old: Option<Value>) -> Value {
    let mut r = fixture(fixture_name);
    r["request"]["uid"] = uid.into();
    if let Some(o) = object {
        r["request"]["name"] = o["metadata"]["name"].clone();
        r["request"]["object"] = o;
    }
    if let Some(o) = old {
        r["request"]["name"] = o["metadata"]["name"].clone();
        r["request"]["oldObject"] = o;
    }
    r
}

pub struct Server {
    _child: Option<Child>,
    pub http: String,
    pub webhook: String,
    client: reqwest::Client,
}

impl Server {
    pub async fn start(database_url: &str) -> Server {
        bizrq::tls::install_crypto_provider();
        let mut child = Command::new(env!("CARGO_BIN_EXE_bizrq"))
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--webhook-listen",
                "127.0.0.1:0",
                "--admin-token",
                TOKEN,
            ])
            .args(["--database-url", database_url])
            .env("BIZRQ_LOG", "warn")
            .env_remove("KUBECONFIG")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn bizrq");
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .expect("bizrq did not get ready in 60 s")
            .unwrap()
            .expect("bizrq exited before it was ready");
        let (http, webhook) =
            bizrq::parse_ready_line(&line).unwrap_or_else(|| panic!("not a ready line: {line:?}"));
        let (http, webhook) = (format!("http://{http}"), format!("https://{webhook}"));
        // Keep draining stdout so the child never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let client = reqwest::Client::builder()
            .danger_accept_invalid_certs(true)
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap();
        Server {
            _child: Some(child),
            http,
            webhook,
            client,
        }
    }

    /// A server started in this process (`bizrq::start_with`).
    pub fn in_process(running: &bizrq::Running) -> Server {
        Server {
            _child: None,
            http: format!("http://{}", running.http_addr),
            webhook: format!("https://{}", running.webhook_addr),
            client: reqwest::Client::builder()
                .danger_accept_invalid_certs(true)
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap(),
        }
    }

    /// POST a review over HTTPS; returns the HTTP status and body.
    pub async fn post_review_raw(&self, path: &str, body: Vec<u8>) -> (StatusCode, String) {
        let r = self
            .client
            .post(format!("{}{path}", self.webhook))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        let s = r.status();
        (s, r.text().await.unwrap())
    }

    /// POST a review and return its `response` (asserting HTTP 200 and uid echo).
    pub async fn review(&self, path: &str, review: &Value) -> Value {
        let (status, text) = self
            .post_review_raw(path, serde_json::to_vec(review).unwrap())
            .await;
        assert_eq!(status, StatusCode::OK, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(v["kind"], "AdmissionReview");
        assert_eq!(
            v["response"]["uid"], review["request"]["uid"],
            "uid must be echoed"
        );
        v["response"].clone()
    }

    pub async fn api(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        self.api_with(
            method,
            path,
            body.map(|b| serde_json::to_vec(&b).unwrap()),
            Some(TOKEN),
        )
        .await
    }

    pub async fn api_with(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        token: Option<&str>,
    ) -> (StatusCode, Value) {
        let mut req = self.client.request(method, format!("{}{path}", self.http));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.header("content-type", "application/json").body(b);
        }
        let r = req.send().await.unwrap();
        let s = r.status();
        let text = r.text().await.unwrap();
        (
            s,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    pub async fn get_text(&self, path: &str) -> (StatusCode, String) {
        let r = self
            .client
            .get(format!("{}{path}", self.http))
            .send()
            .await
            .unwrap();
        (r.status(), r.text().await.unwrap())
    }

    pub async fn create_quota(&self, name: &str, parent: &str, hard: Value) {
        let (s, v) = self
            .api(
                Method::POST,
                "/api/v1/quotas",
                Some(serde_json::json!({"metadata": {"name": name}, "spec": {"parent": parent, "hard": hard}})),
            )
            .await;
        assert_eq!(s, StatusCode::CREATED, "{v}");
    }

    pub async fn quota(&self, name: &str) -> Value {
        let (s, v) = self
            .api(Method::GET, &format!("/api/v1/quotas/{name}"), None)
            .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        v
    }

    /// status.used[key] of a quota.
    pub async fn used(&self, name: &str, key: &str) -> String {
        self.quota(name).await["status"]["used"][key]
            .as_str()
            .unwrap_or("0")
            .to_string()
    }
}
