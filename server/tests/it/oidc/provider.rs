//! A small OpenID provider of the tests' own, over real HTTP: discovery,
//! a key set, the token endpoint (code with PKCE S256, refresh), userinfo
//! and end-session. Its sign-in page is a function (`authorize`): the test
//! plays the person. What it signs can be made wrong on purpose
//! ([`Forge`]) — what a real provider never sends, and a relying party
//! must refuse — and it can rotate its keys, go slow, answer too much or
//! stop.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::rand::SystemRandom;
use ring::signature::{self as sig};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub const CLIENT_ID: &str = "bizrq";
pub const CLIENT_SECRET: &str = "client-secret-for-tests";

fn key(name: &str) -> Vec<u8> {
    std::fs::read(crate::common::fixtures_dir().join(format!("oidc/{name}.pk8"))).unwrap()
}

fn b64(b: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(b)
}

fn jwk(pk8: &[u8], kid: &str) -> Value {
    let kp = sig::RsaKeyPair::from_pkcs8(pk8).unwrap();
    let c: ring::rsa::PublicKeyComponents<Vec<u8>> = kp.public().into();
    json!({"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256", "n": b64(&c.n), "e": b64(&c.e)})
}

/// How the next ID token is made wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Forge {
    /// Signed by a key the provider does not publish, under its kid.
    OtherKey,
    /// `alg: none`, no signature.
    AlgNone,
    /// HS256 keyed with the client secret.
    Hmac,
    /// For another client.
    WrongAudience,
    /// Expired ten minutes ago.
    Expired,
    /// Another sign-in's nonce.
    WrongNonce,
    /// Another issuer.
    WrongIssuer,
    /// Under a kid nobody published.
    UnknownKid,
}

/// A person of the provider.
#[derive(Clone, Debug)]
pub struct Person {
    pub sub: String,
    pub username: String,
    pub email: String,
    pub groups: Vec<String>,
}

struct Code {
    who: String,
    nonce: String,
    challenge: String,
    redirect_uri: String,
}

pub struct State {
    pub issuer: String,
    /// The key signing now (kid, PKCS#8) and the keys published.
    signing: (String, Vec<u8>),
    published: Vec<Value>,
    pub people: HashMap<String, Person>,
    codes: HashMap<String, Code>,
    refresh: HashMap<String, String>,
    /// Access tokens given, by whom (userinfo).
    access: HashMap<String, String>,
    pub forge: Option<Forge>,
    pub jwks_reads: u64,
    pub token_requests: u64,
    pub slow: Option<Duration>,
    pub huge_jwks: bool,
    /// Answer sign-ins without a refresh token (as Dex, Okta and Google
    /// do unless asked for `offline_access`).
    pub no_refresh_tokens: bool,
    /// Leave the groups claim out of ID tokens and userinfo.
    pub omit_groups: bool,
    /// Refresh grants answer `invalid_grant` (the person left).
    pub revoked: bool,
}

#[derive(Clone)]
pub struct FakeOp {
    pub state: Arc<Mutex<State>>,
    pub issuer: String,
    task: Arc<tokio::task::JoinHandle<()>>,
}

impl Drop for FakeOp {
    fn drop(&mut self) {
        if Arc::strong_count(&self.task) == 1 {
            self.task.abort();
        }
    }
}

fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn random() -> String {
    b64(&rand::random::<[u8; 24]>())
}

fn sign_rs256(header: &Value, claims: &Value, pk8: &[u8]) -> String {
    let input = format!(
        "{}.{}",
        b64(header.to_string().as_bytes()),
        b64(claims.to_string().as_bytes())
    );
    let kp = sig::RsaKeyPair::from_pkcs8(pk8).unwrap();
    let mut out = vec![0; kp.public().modulus_len()];
    kp.sign(
        &sig::RSA_PKCS1_SHA256,
        &SystemRandom::new(),
        input.as_bytes(),
        &mut out,
    )
    .unwrap();
    format!("{input}.{}", b64(&out))
}

impl State {
    fn id_token(&mut self, who: &str, nonce: Option<&str>) -> String {
        let p = self.people[who].clone();
        let now = now_s();
        let mut claims = json!({
            "iss": self.issuer, "sub": p.sub, "aud": CLIENT_ID, "exp": now + 300, "iat": now,
            "preferred_username": p.username, "email": p.email, "email_verified": true,
            "groups": p.groups,
        });
        if let Some(n) = nonce {
            claims["nonce"] = n.into();
        }
        if self.omit_groups {
            claims.as_object_mut().unwrap().remove("groups");
        }
        let (kid, pk8) = self.signing.clone();
        let header = json!({"alg": "RS256", "kid": kid, "typ": "JWT"});
        let token = match self.forge.take() {
            None => sign_rs256(&header, &claims, &pk8),
            Some(Forge::OtherKey) => sign_rs256(&header, &claims, &key("rsa-b")),
            Some(Forge::UnknownKid) => {
                sign_rs256(&json!({"alg": "RS256", "kid": random()}), &claims, &pk8)
            }
            Some(Forge::AlgNone) => format!(
                "{}.{}.",
                b64(json!({"alg": "none"}).to_string().as_bytes()),
                b64(claims.to_string().as_bytes())
            ),
            Some(Forge::Hmac) => {
                let input = format!(
                    "{}.{}",
                    b64(json!({"alg": "HS256", "kid": kid}).to_string().as_bytes()),
                    b64(claims.to_string().as_bytes())
                );
                let k = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, CLIENT_SECRET.as_bytes());
                format!(
                    "{input}.{}",
                    b64(ring::hmac::sign(&k, input.as_bytes()).as_ref())
                )
            }
            Some(Forge::WrongAudience) => {
                claims["aud"] = "another-app".into();
                sign_rs256(&header, &claims, &pk8)
            }
            Some(Forge::Expired) => {
                claims["exp"] = (now - 600).into();
                claims["iat"] = (now - 900).into();
                sign_rs256(&header, &claims, &pk8)
            }
            Some(Forge::WrongNonce) => {
                claims["nonce"] = "a-nonce-of-another-sign-in".into();
                sign_rs256(&header, &claims, &pk8)
            }
            Some(Forge::WrongIssuer) => {
                claims["iss"] = "https://evil.example".into();
                sign_rs256(&header, &claims, &pk8)
            }
        };
        token
    }
}

type Shared = Arc<Mutex<State>>;

async fn pause(s: &Shared) {
    let slow = s.lock().unwrap().slow;
    if let Some(d) = slow {
        tokio::time::sleep(d).await;
    }
}

async fn discovery(axum::extract::State(s): axum::extract::State<Shared>) -> axum::Json<Value> {
    pause(&s).await;
    let iss = s.lock().unwrap().issuer.clone();
    axum::Json(json!({
        "issuer": iss,
        "authorization_endpoint": format!("{iss}/authorize"),
        "token_endpoint": format!("{iss}/token"),
        "jwks_uri": format!("{iss}/jwks"),
        "userinfo_endpoint": format!("{iss}/userinfo"),
        "end_session_endpoint": format!("{iss}/logout"),
        "code_challenge_methods_supported": ["S256"],
        "id_token_signing_alg_values_supported": ["RS256"],
    }))
}

async fn jwks(axum::extract::State(s): axum::extract::State<Shared>) -> String {
    pause(&s).await;
    let mut st = s.lock().unwrap();
    st.jwks_reads += 1;
    let mut keys = st.published.clone();
    if st.huge_jwks {
        let filler = "x".repeat(70 * 1024);
        keys.push(json!({"kty": "oct", "kid": "filler", "k": filler}));
    }
    json!({ "keys": keys }).to_string()
}

fn oauth_error(error: &str) -> axum::response::Response {
    use axum::response::IntoResponse;
    (
        axum::http::StatusCode::BAD_REQUEST,
        axum::Json(
            json!({"error": error, "error_description": format!("the test provider says {error}")}),
        ),
    )
        .into_response()
}

async fn token(
    axum::extract::State(s): axum::extract::State<Shared>,
    headers: axum::http::HeaderMap,
    axum::Form(form): axum::Form<HashMap<String, String>>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    pause(&s).await;
    let basic = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{CLIENT_ID}:{CLIENT_SECRET}"))
    );
    if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some(basic.as_str()) {
        return oauth_error("invalid_client");
    }
    let mut st = s.lock().unwrap();
    st.token_requests += 1;
    let get = |k: &str| form.get(k).cloned().unwrap_or_default();
    match get("grant_type").as_str() {
        "authorization_code" => {
            // A code is good once.
            let Some(c) = st.codes.remove(&get("code")) else {
                return oauth_error("invalid_grant");
            };
            let challenge = b64(&Sha256::digest(get("code_verifier").as_bytes()));
            if challenge != c.challenge || get("redirect_uri") != c.redirect_uri {
                return oauth_error("invalid_grant");
            }
            let id_token = st.id_token(&c.who, Some(&c.nonce));
            let mut answer = json!({"access_token": random(), "token_type": "Bearer", "expires_in": 300,
                                    "id_token": id_token});
            if !st.no_refresh_tokens {
                let rt = random();
                st.refresh.insert(rt.clone(), c.who.clone());
                answer["refresh_token"] = rt.into();
            }
            axum::Json(answer).into_response()
        }
        "refresh_token" => {
            if st.revoked {
                return oauth_error("invalid_grant");
            }
            let Some(who) = st.refresh.remove(&get("refresh_token")) else {
                return oauth_error("invalid_grant");
            };
            let id_token = st.id_token(&who, None);
            let rt = random();
            let at = random();
            st.access.insert(at.clone(), who.clone());
            st.refresh.insert(rt.clone(), who);
            axum::Json(
                json!({"access_token": at, "token_type": "Bearer", "expires_in": 300,
                              "id_token": id_token, "refresh_token": rt}),
            )
            .into_response()
        }
        _ => oauth_error("unsupported_grant_type"),
    }
}

async fn userinfo(
    axum::extract::State(s): axum::extract::State<Shared>,
    headers: axum::http::HeaderMap,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let st = s.lock().unwrap();
    let who = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .and_then(|t| st.access.get(t));
    let Some(p) = who.and_then(|w| st.people.get(w)) else {
        return axum::http::StatusCode::UNAUTHORIZED.into_response();
    };
    let mut claims = json!({"sub": p.sub, "preferred_username": p.username, "groups": p.groups});
    if st.omit_groups {
        claims.as_object_mut().unwrap().remove("groups");
    }
    axum::Json(claims).into_response()
}

async fn logout() -> &'static str {
    "signed out of the test provider"
}

impl FakeOp {
    /// Starts on a free port with alice (team-nlp) and bob (team-cv).
    pub async fn start() -> FakeOp {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let issuer = format!("http://{}", listener.local_addr().unwrap());
        let a = key("rsa-a");
        let person = |sub: &str, name: &str, groups: &[&str]| Person {
            sub: sub.into(),
            username: name.into(),
            email: format!("{name}@example.com"),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        };
        let state = Arc::new(Mutex::new(State {
            issuer: issuer.clone(),
            published: vec![jwk(&a, "a")],
            signing: ("a".into(), a),
            people: [
                (
                    "alice".to_string(),
                    person("sub-alice", "alice", &["team-nlp"]),
                ),
                ("bob".to_string(), person("sub-bob", "bob", &["team-cv"])),
                (
                    "root".to_string(),
                    person("sub-root", "root", &["platform-admins"]),
                ),
            ]
            .into(),
            codes: HashMap::new(),
            refresh: HashMap::new(),
            access: HashMap::new(),
            forge: None,
            jwks_reads: 0,
            token_requests: 0,
            slow: None,
            huge_jwks: false,
            no_refresh_tokens: false,
            omit_groups: false,
            revoked: false,
        }));
        let app = axum::Router::new()
            .route(
                "/.well-known/openid-configuration",
                axum::routing::get(discovery),
            )
            .route("/jwks", axum::routing::get(jwks))
            .route("/token", axum::routing::post(token))
            .route("/logout", axum::routing::get(logout))
            .route("/userinfo", axum::routing::get(userinfo))
            .with_state(state.clone());
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        FakeOp {
            state,
            issuer,
            task: Arc::new(task),
        }
    }

    /// The serve flags that point bizrq at this provider.
    pub fn flags(&self) -> Vec<String> {
        vec![
            "--oidc-issuer".into(),
            self.issuer.clone(),
            "--oidc-client-id".into(),
            CLIENT_ID.into(),
            "--oidc-display-name".into(),
            "Test IdP".into(),
        ]
    }

    /// The person `who` signs in at the provider's page that `url` (the
    /// authorization request bizrq sent the browser to) opens; the URL the
    /// provider sends the browser back to.
    pub fn authorize(&self, url: &str, who: &str) -> String {
        let query = url.split_once('?').expect("a query").1;
        let q: HashMap<String, String> = serde_urlencoded::from_str(query).unwrap();
        assert_eq!(q["response_type"], "code");
        assert_eq!(q["client_id"], CLIENT_ID);
        assert_eq!(q["code_challenge_method"], "S256");
        assert!(q["scope"].split(' ').any(|s| s == "openid"));
        let code = random();
        self.state.lock().unwrap().codes.insert(
            code.clone(),
            Code {
                who: who.into(),
                nonce: q["nonce"].clone(),
                challenge: q["code_challenge"].clone(),
                redirect_uri: q["redirect_uri"].clone(),
            },
        );
        format!(
            "{}?{}",
            q["redirect_uri"],
            serde_urlencoded::to_string([("code", code.as_str()), ("state", q["state"].as_str())])
                .unwrap()
        )
    }

    pub fn set_groups(&self, who: &str, groups: &[&str]) {
        self.state
            .lock()
            .unwrap()
            .people
            .get_mut(who)
            .unwrap()
            .groups = groups.iter().map(|g| g.to_string()).collect();
    }

    /// A person the provider knows from now on: `who` signs in with
    /// username claim `username` and these groups.
    pub fn add_person(&self, who: &str, username: &str, groups: &[&str]) {
        self.state.lock().unwrap().people.insert(
            who.to_string(),
            Person {
                sub: format!("sub-{who}"),
                username: username.into(),
                email: format!("{who}@example.com"),
                groups: groups.iter().map(|g| g.to_string()).collect(),
            },
        );
    }

    pub fn forge(&self, f: Forge) {
        self.state.lock().unwrap().forge = Some(f);
    }

    /// Signs with key B under kid `b` from now on, publishing only it.
    pub fn rotate(&self) {
        let b = key("rsa-b");
        let mut st = self.state.lock().unwrap();
        st.published = vec![jwk(&b, "b")];
        st.signing = ("b".into(), b);
    }

    pub fn jwks_reads(&self) -> u64 {
        self.state.lock().unwrap().jwks_reads
    }
}
