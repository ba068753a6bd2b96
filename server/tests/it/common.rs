//! Test harness: real `bizrq` processes, real databases, HTTPS reviews.

use reqwest::{Method, StatusCode};
use serde_json::Value;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

pub const TOKEN: &str = "test-token";
/// The resource key most tests count.
pub const GPU: &str = "requests.nvidia.com/gpu";
/// The bootstrap admin's password in the servers these tests start.
pub const ADMIN_PASSWORD: &str = "admin-password-for-tests";

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
    child: Option<Child>,
    /// The database it was started on ("" when started in process).
    pub database_url: String,
    pub http: String,
    pub webhook: String,
    client: reqwest::Client,
}

impl Server {
    pub async fn start(database_url: &str) -> Server {
        Server::start_with(database_url, &[], Some(ADMIN_PASSWORD))
            .await
            .0
    }

    /// A server with extra `serve` arguments and the bootstrap admin's
    /// password (None: generated); also returns the stdout lines printed
    /// before the ready line.
    pub async fn start_with(
        database_url: &str,
        extra: &[&str],
        admin_password: Option<&str>,
    ) -> (Server, Vec<String>) {
        bizrq::tls::install_crypto_provider();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_bizrq"));
        match admin_password {
            Some(p) => cmd.env("BIZRQ_ADMIN_PASSWORD", p),
            None => cmd.env_remove("BIZRQ_ADMIN_PASSWORD"),
        };
        let mut child = cmd
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--webhook-listen",
                "127.0.0.1:0",
                "--probe-listen",
                "127.0.0.1:0",
                "--admin-token",
                TOKEN,
            ])
            .args(["--database-url", database_url])
            .args(extra)
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
        let mut before = Vec::new();
        let (http, webhook) = loop {
            let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
                .await
                .expect("bizrq did not get ready in 60 s")
                .unwrap()
                .expect("bizrq exited before it was ready");
            match bizrq::parse_ready_line(&line) {
                Some(addrs) => break addrs,
                None => before.push(line),
            }
        };
        let (http, webhook) = (format!("http://{http}"), format!("https://{webhook}"));
        // Keep draining stdout so the child never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let client = reqwest::Client::builder()
            .danger_accept_invalid_certs(true)
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap();
        (
            Server {
                child: Some(child),
                database_url: database_url.to_string(),
                http,
                webhook,
                client,
            },
            before,
        )
    }

    /// The process id of a spawned server.
    pub fn pid(&self) -> u32 {
        self.child
            .as_ref()
            .and_then(|c| c.id())
            .expect("pid: this server was not spawned as a process")
    }

    /// SIGKILL the spawned process (no graceful shutdown) and wait until it
    /// has exited. Panics for a server started in process.
    pub async fn kill(&mut self) {
        let child = self
            .child
            .as_mut()
            .expect("kill: this server was not spawned as a process");
        child.kill().await.expect("SIGKILL bizrq");
    }

    /// A server started in this process (`bizrq::start_with`).
    pub fn in_process(running: &bizrq::Running) -> Server {
        Server {
            child: None,
            database_url: String::new(),
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
        self.create_quota_spec(name, parent, serde_json::json!({"hard": hard}))
            .await;
    }

    /// Create `name` under `parent` with the rest of its `spec` as given.
    pub async fn create_quota_spec(&self, name: &str, parent: &str, mut spec: Value) {
        spec["parent"] = serde_json::json!(parent);
        let (s, v) = self
            .api(
                Method::POST,
                "/api/v1/quotas",
                Some(serde_json::json!({"metadata": {"name": name}, "spec": spec})),
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

/// A browser of the portal: keeps the session cookie, follows no redirect
/// (so tests see the 303s), and sends the CSRF token of the last page it
/// read with every form.
pub struct Browser {
    pub base: String,
    client: reqwest::Client,
    cookie: std::sync::Mutex<Option<String>>,
    /// The device cookie a login gave this browser (sent as a browser
    /// would, so later logins are this browser's).
    device: std::sync::Mutex<Option<String>>,
    /// The login form's CSRF cookie, sent back as a browser would.
    login: std::sync::Mutex<Option<String>>,
    /// The cookie of a sign-in with the identity provider under way
    /// (`bizrq_oidc`, sent to `/login/oidc/` only).
    flow: std::sync::Mutex<Option<String>>,
    csrf: std::sync::Mutex<Option<String>>,
}

/// What a browser got back.
pub struct Page {
    pub status: StatusCode,
    pub headers: reqwest::header::HeaderMap,
    pub body: String,
}

impl Page {
    pub fn location(&self) -> Option<&str> {
        self.headers.get("location").and_then(|v| v.to_str().ok())
    }

    /// The session cookie's Set-Cookie line, if the response set one.
    pub fn session_cookie(&self) -> Option<String> {
        self.headers
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find(|c| c.starts_with("bizrq_session="))
            .map(str::to_string)
    }
}

/// The value of `<input … name="NAME" value="…">` in a page.
pub fn hidden_field(html: &str, name: &str) -> Option<String> {
    let at = html.find(&format!("name=\"{name}\""))?;
    let rest = &html[at..];
    let v = rest.find("value=\"")? + "value=\"".len();
    let end = rest[v..].find('"')?;
    Some(rest[v..v + end].to_string())
}

impl Browser {
    pub fn new(server: &Server) -> Browser {
        Browser {
            base: server.http.clone(),
            client: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap(),
            cookie: Default::default(),
            device: Default::default(),
            login: Default::default(),
            flow: Default::default(),
            csrf: Default::default(),
        }
    }

    /// A browser logged in as `username` (asserting the login's redirect).
    pub async fn logged_in(server: &Server, username: &str, password: &str) -> Browser {
        let b = Browser::new(server);
        let p = b.login(username, password).await;
        assert_eq!(
            p.status,
            StatusCode::SEE_OTHER,
            "login of {username}: {}",
            p.body
        );
        b
    }

    /// The bootstrap admin, logged in.
    pub async fn admin(server: &Server) -> Browser {
        Browser::logged_in(server, "admin", ADMIN_PASSWORD).await
    }

    pub fn csrf(&self) -> Option<String> {
        self.csrf.lock().unwrap().clone()
    }

    /// The device cookie a login gave this browser, if any.
    pub fn device_cookie(&self) -> Option<String> {
        self.device.lock().unwrap().clone()
    }

    pub fn forget_csrf(&self) {
        *self.csrf.lock().unwrap() = None;
    }

    pub async fn request(
        &self,
        method: Method,
        path: &str,
        build: impl FnOnce(reqwest::RequestBuilder) -> reqwest::RequestBuilder,
    ) -> Page {
        let mut req = self.client.request(method, format!("{}{path}", self.base));
        let mut cookies = Vec::new();
        if let Some(c) = self.cookie.lock().unwrap().clone() {
            cookies.push(format!("bizrq_session={c}"));
        }
        if let Some(d) = self.device.lock().unwrap().clone() {
            cookies.push(format!("bizrq_device={d}"));
        }
        if path.starts_with("/login") {
            if let Some(l) = self.login.lock().unwrap().clone() {
                cookies.push(format!("bizrq_login={l}"));
            }
        }
        if path.starts_with("/login/oidc/") {
            if let Some(f) = self.flow.lock().unwrap().clone() {
                cookies.push(format!("bizrq_oidc={f}"));
            }
        }
        if !cookies.is_empty() {
            req = req.header("cookie", cookies.join("; "));
        }
        let r = build(req).send().await.unwrap();
        let status = r.status();
        let headers = r.headers().clone();
        let body = r.text().await.unwrap();
        let page = Page {
            status,
            headers,
            body,
        };
        if let Some(set) = page.session_cookie() {
            let value = set["bizrq_session=".len()..]
                .split(';')
                .next()
                .unwrap_or("")
                .to_string();
            let removed = set.to_ascii_lowercase().contains("max-age=0");
            *self.cookie.lock().unwrap() = (!removed && !value.is_empty()).then_some(value);
        }
        if let Some(set) = page
            .headers
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find(|c| c.starts_with("bizrq_device="))
        {
            let value = set["bizrq_device=".len()..].split(';').next().unwrap_or("");
            *self.device.lock().unwrap() = Some(value.to_string());
        }
        if let Some(set) = page
            .headers
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find(|c| c.starts_with("bizrq_login="))
        {
            let value = set["bizrq_login=".len()..].split(';').next().unwrap_or("");
            *self.login.lock().unwrap() = Some(value.to_string());
        }
        if let Some(set) = page
            .headers
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find(|c| c.starts_with("bizrq_oidc="))
        {
            let value = set["bizrq_oidc=".len()..].split(';').next().unwrap_or("");
            *self.flow.lock().unwrap() = (!value.is_empty()).then(|| value.to_string());
        }
        if let Some(t) = hidden_field(&page.body, "csrf") {
            *self.csrf.lock().unwrap() = Some(t);
        }
        page
    }

    pub async fn get(&self, path: &str) -> Page {
        self.request(Method::GET, path, |r| r).await
    }

    /// POSTs a form, adding the CSRF token of the last page read.
    pub async fn post(&self, path: &str, fields: &[(&str, &str)]) -> Page {
        let mut form: Vec<(String, String)> = fields
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        if let Some(t) = self.csrf() {
            form.push(("csrf".into(), t));
        }
        self.request(Method::POST, path, |r| r.form(&form)).await
    }

    /// POSTs a form with the CSRF token and session as `post` does, but
    /// hands back a transport error instead of failing on it (a server
    /// may refuse a body unread and close the connection under it).
    pub async fn try_post(
        &self,
        path: &str,
        fields: &[(&str, &str)],
    ) -> Result<(StatusCode, String), reqwest::Error> {
        let mut form: Vec<(String, String)> = fields
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        if let Some(t) = self.csrf() {
            form.push(("csrf".into(), t));
        }
        let mut req = self.client.post(format!("{}{path}", self.base));
        let mut cookies = Vec::new();
        if let Some(c) = self.cookie.lock().unwrap().clone() {
            cookies.push(format!("bizrq_session={c}"));
        }
        if path.starts_with("/login") {
            if let Some(l) = self.login.lock().unwrap().clone() {
                cookies.push(format!("bizrq_login={l}"));
            }
        }
        if !cookies.is_empty() {
            req = req.header("cookie", cookies.join("; "));
        }
        let r = req.form(&form).send().await?;
        let status = r.status();
        Ok((status, r.text().await?))
    }

    /// POSTs a form as is (no CSRF token added).
    pub async fn post_raw(&self, path: &str, fields: &[(&str, &str)]) -> Page {
        let form = fields.to_vec();
        self.request(Method::POST, path, |r| r.form(&form)).await
    }

    pub async fn login(&self, username: &str, password: &str) -> Page {
        let p = self.get("/login").await;
        assert_eq!(p.status, StatusCode::OK, "{}", p.body);
        let p = self
            .post("/login", &[("username", username), ("password", password)])
            .await;
        if p.status == StatusCode::SEE_OTHER {
            // Pick up the session's new CSRF token.
            self.get("/tokens").await;
        }
        p
    }

    /// A JSON API call with the session cookie (and the CSRF header).
    pub async fn api(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let csrf = self.csrf();
        let p = self
            .request(method, path, |mut r| {
                if let Some(t) = csrf {
                    r = r.header("x-csrf-token", t);
                }
                if let Some(b) = body {
                    r = r.json(&b);
                }
                r
            })
            .await;
        (
            p.status,
            serde_json::from_str(&p.body).unwrap_or(Value::String(p.body)),
        )
    }
}

/// A resource list from `(key, quantity)` pairs.
pub fn resources(pairs: &[(&str, &str)]) -> quota::ResourceList {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.parse().unwrap()))
        .collect()
}

/// Creates a portal user through the admin's users page.
pub async fn create_user(admin: &Browser, name: &str, password: &str) {
    admin.get("/users").await;
    let p = admin
        .post("/users", &[("username", name), ("password", password)])
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "create {name}: {}", p.body);
}

/// Gives `user` a role on `quota` through the admin's users page.
pub async fn bind(admin: &Browser, user: &str, quota: &str, role: &str) {
    admin.get("/users").await;
    let p = admin
        .post(
            &format!("/users/{user}/roles"),
            &[("quota", quota), ("role", role)],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "bind {user}: {}", p.body);
}

/// The token a tokens page shows once, after creating it.
pub fn shown_token(html: &str) -> String {
    let start = html.find("bzq_").expect("a new token on the page");
    html[start..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

/// Creates a personal API token on the tokens page and returns it.
pub async fn create_token(b: &Browser, name: &str) -> String {
    b.get("/tokens").await;
    let p = b.post("/tokens", &[("name", name)]).await;
    assert_eq!(p.status, StatusCode::OK, "{}", p.body);
    shown_token(&p.body)
}

/// For each `story(&Server)` named, a module with two tests running it
/// against a fresh server: `sqlite` and `postgres`.
macro_rules! on_both {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            use crate::common::*;
            #[tokio::test]
            async fn sqlite() {
                let dir = tempfile::tempdir().unwrap();
                let s = Server::start(&fresh_sqlite(&dir)).await;
                super::$name(&s).await;
            }
            #[tokio::test]
            async fn postgres() {
                let s = Server::start(&fresh_postgres().await).await;
                super::$name(&s).await;
            }
        }
    )*};
}
pub(crate) use on_both;

/// Calls `probe` every `every` until it yields a value, at most `tries`
/// times; `None` if it never did.
pub async fn poll_until<T, Fut>(
    tries: u32,
    every: Duration,
    mut probe: impl FnMut() -> Fut,
) -> Option<T>
where
    Fut: std::future::Future<Output = Option<T>>,
{
    for _ in 0..tries {
        if let Some(v) = probe().await {
            return Some(v);
        }
        tokio::time::sleep(every).await;
    }
    None
}

/// A clock the test moves: the handle to set it, and the service's view.
pub fn test_clock(
    start: i64,
) -> (
    std::sync::Arc<std::sync::atomic::AtomicI64>,
    bizrq::service::Clock,
) {
    let t = std::sync::Arc::new(std::sync::atomic::AtomicI64::new(start));
    let c = t.clone();
    (
        t,
        std::sync::Arc::new(move || c.load(std::sync::atomic::Ordering::SeqCst)),
    )
}
