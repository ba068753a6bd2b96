//! The identity provider as bizrq talks to it: discovery, the key set
//! (read again when a token names a key it does not hold — a rotation —
//! at most once per `jwks_refetch`, so a flood of forged key ids costs one
//! request per window), the
//! code and refresh grants at the token endpoint, userinfo, and the ID
//! token checked from signature to claims.
//!
//! Every request is bounded ([`super::http`]); a provider that is down,
//! slow or answers nonsense is a [`ProviderError`] in words, which the
//! pages show and the log records.

use super::claims::{self, ClaimError, Expected, IdToken};
use super::http::{allowed_url, Auth, FetchError, Http};
use super::jws::{self, KeySet, TokenError};
use serde::Deserialize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The largest discovery document, key set, token or userinfo answer read.
pub const MAX_ANSWER: usize = 64 * 1024;
/// Discovery is read again after this long (and on a failure to use it).
pub const METADATA_TTL: Duration = Duration::from_secs(3600);

/// How the client proves itself at the token endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientAuth {
    /// HTTP Basic with the client id and secret (the default of most providers).
    Basic,
    /// `client_id` and `client_secret` in the form.
    Post,
    /// A public client: PKCE only.
    None,
}

/// What `serve`'s flags say about the provider.
#[derive(Clone)]
pub struct Settings {
    /// Exactly as the provider writes it in `iss` (no trailing slash added
    /// or removed).
    pub issuer: String,
    pub client_id: String,
    pub client_secret: Option<String>,
    pub client_auth: ClientAuth,
    pub redirect_uri: String,
    pub post_logout_redirect_uri: String,
    pub scopes: Vec<String>,
    pub claims: claims::ClaimNames,
    /// What the login page calls it ("Sign in with …").
    pub display_name: String,
    pub skew: Duration,
    pub timeout: Duration,
    /// The least time between two reads of the key set.
    pub jwks_refetch: Duration,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .field("client_secret", &self.client_secret.as_ref().map(|_| "…"))
            .field("redirect_uri", &self.redirect_uri)
            .field("scopes", &self.scopes)
            .finish()
    }
}

/// The provider's discovery document, as far as bizrq uses it.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Metadata {
    pub issuer: String,
    pub authorization_endpoint: String,
    pub token_endpoint: String,
    pub jwks_uri: String,
    #[serde(default)]
    pub userinfo_endpoint: Option<String>,
    #[serde(default)]
    pub end_session_endpoint: Option<String>,
    #[serde(default)]
    pub code_challenge_methods_supported: Option<Vec<String>>,
    #[serde(default)]
    pub id_token_signing_alg_values_supported: Option<Vec<String>>,
}

/// What went wrong with the provider, as a page and a log line say it.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProviderError {
    #[error("the identity provider cannot be reached ({what}): {detail}")]
    Unreachable { what: &'static str, detail: String },
    #[error("the identity provider gave an answer bizrq cannot use ({what}): {detail}")]
    BadAnswer { what: &'static str, detail: String },
    #[error("the identity provider is configured in a way bizrq cannot use: {0}")]
    Misconfigured(String),
    #[error("the identity provider refused: {error}{}", if .description.is_empty() { String::new() } else { format!(" ({})", .description) })]
    Refused { error: String, description: String },
    #[error("the ID token was refused: {0}")]
    Token(#[from] TokenError),
    #[error("the ID token was refused: {0}")]
    Claims(#[from] ClaimError),
}

impl ProviderError {
    /// Whether the provider itself is at fault (down, slow, misconfigured)
    /// rather than the token or the person.
    pub fn is_outage(&self) -> bool {
        matches!(
            self,
            ProviderError::Unreachable { .. }
                | ProviderError::BadAnswer { .. }
                | ProviderError::Misconfigured(_)
        )
    }

    /// The grant is no longer good (`invalid_grant`): the provider ended
    /// the person's session, or took the person away.
    pub fn grant_ended(&self) -> bool {
        matches!(self, ProviderError::Refused { error, .. } if error == "invalid_grant")
    }
}

fn fetch_error(what: &'static str, e: FetchError) -> ProviderError {
    match e {
        FetchError::Unreachable(_) | FetchError::TimedOut(_) => ProviderError::Unreachable {
            what,
            detail: e.to_string(),
        },
        FetchError::TooLarge(_) => ProviderError::BadAnswer {
            what,
            detail: e.to_string(),
        },
        FetchError::NotAllowed(_) => ProviderError::Misconfigured(e.to_string()),
    }
}

/// The token endpoint's answer.
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Tokens {
    #[serde(default)]
    pub id_token: Option<String>,
    #[serde(default)]
    pub access_token: Option<String>,
    #[serde(default)]
    pub refresh_token: Option<String>,
    #[serde(default)]
    pub token_type: Option<String>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokens")
            .field("id_token", &self.id_token.is_some())
            .field("access_token", &self.access_token.is_some())
            .field("refresh_token", &self.refresh_token.is_some())
            .finish()
    }
}

#[derive(Deserialize)]
struct OAuthError {
    error: String,
    #[serde(default)]
    error_description: Option<String>,
}

#[derive(Default)]
struct Keys {
    set: Option<Arc<KeySet>>,
    /// When the key set was last asked for again because a token named a
    /// key it did not hold (answered or not). The first read does not
    /// count: a rotation right after it is still followed.
    asked_on_miss: Option<Instant>,
    /// When the set held was read, and when a read was last tried
    /// because it had grown old ([`KEY_SET_MAX_AGE`]).
    read_at: Option<Instant>,
    aged_try_at: Option<Instant>,
}

/// A key set is read again once it is this old, so a key the provider
/// retired stops being trusted (the set read before is kept, and tried
/// again each refetch window, while the provider is down).
pub const KEY_SET_MAX_AGE: Duration = METADATA_TTL;

/// One configured provider.
pub struct Provider {
    pub settings: Settings,
    http: Http,
    metadata: Mutex<Option<(Arc<Metadata>, Instant)>>,
    keys: Mutex<Keys>,
    /// One key set read at a time; the others wait and use it.
    refetching: tokio::sync::Mutex<()>,
    /// Key set reads made (tests and metrics).
    pub key_set_reads: std::sync::atomic::AtomicU64,
}

fn clean(s: &str, max: usize) -> String {
    s.chars().filter(|c| !c.is_control()).take(max).collect()
}

impl Provider {
    pub fn new(settings: Settings, http: Http) -> Provider {
        Provider {
            settings,
            http,
            metadata: Mutex::new(None),
            keys: Mutex::new(Keys::default()),
            refetching: tokio::sync::Mutex::new(()),
            key_set_reads: Default::default(),
        }
    }

    /// The discovery document, read when missing or older than
    /// [`METADATA_TTL`] (an old one is kept while the provider is down).
    pub async fn metadata(&self) -> Result<Arc<Metadata>, ProviderError> {
        let cached = self
            .metadata
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some((m, at)) = &cached {
            if at.elapsed() < METADATA_TTL {
                return Ok(m.clone());
            }
        }
        match self.discover().await {
            Ok(m) => {
                let m = Arc::new(m);
                *self.metadata.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some((m.clone(), Instant::now()));
                Ok(m)
            }
            Err(e) => match cached {
                Some((m, _)) if e.is_outage() => {
                    tracing::warn!(error = %e, "OpenID discovery failed; using the document read before");
                    Ok(m)
                }
                _ => Err(e),
            },
        }
    }

    /// The discovery document read now (the cache refreshed): a sign-in
    /// starts with it, so a provider that is down is said on bizrq's page
    /// rather than by a browser that cannot reach it.
    pub async fn metadata_now(&self) -> Result<Arc<Metadata>, ProviderError> {
        let m = Arc::new(self.discover().await?);
        *self.metadata.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((m.clone(), Instant::now()));
        Ok(m)
    }

    async fn discover(&self) -> Result<Metadata, ProviderError> {
        const WHAT: &str = "discovery";
        let url = format!(
            "{}/.well-known/openid-configuration",
            self.settings.issuer.trim_end_matches('/')
        );
        let a = self
            .http
            .get(&url, None, MAX_ANSWER)
            .await
            .map_err(|e| fetch_error(WHAT, e))?;
        if a.status != 200 {
            return Err(ProviderError::BadAnswer {
                what: WHAT,
                detail: format!("{url} answered HTTP {}", a.status),
            });
        }
        let m: Metadata =
            serde_json::from_slice(&a.body).map_err(|e| ProviderError::BadAnswer {
                what: WHAT,
                detail: format!("{url} is not an OpenID configuration: {e}"),
            })?;
        check_metadata(&m, &self.settings.issuer)?;
        Ok(m)
    }

    /// Signature, then claims, of an ID token. `nonce`: the sign-in's
    /// (None on a refresh).
    pub async fn check_id_token(
        &self,
        token: &str,
        nonce: Option<&str>,
        now_s: i64,
    ) -> Result<IdToken, ProviderError> {
        let signed = jws::parse(token)?;
        self.verify(&signed).await?;
        let expected = Expected {
            issuer: &self.settings.issuer,
            client_id: &self.settings.client_id,
            nonce,
            now_s,
            skew_s: self.settings.skew.as_secs() as i64,
            max_age_s: 600,
        };
        Ok(claims::check(&signed.payload, &expected)?)
    }

    async fn verify(&self, signed: &jws::Signed) -> Result<(), ProviderError> {
        if self.key_set_aged() {
            let _one = self.refetching.lock().await;
            if self.key_set_aged() {
                self.keys
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .aged_try_at = Some(Instant::now());
                if let Err(e) = self.read_key_set(false).await {
                    tracing::warn!(error = %e, "could not read the provider's key set again; the one read before is kept");
                }
            }
        }
        let current = self
            .keys
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .set
            .clone();
        let first = match &current {
            Some(set) => match signed.verify(set) {
                Ok(()) => return Ok(()),
                Err(e) if e.may_be_rotation() => e,
                Err(e) => return Err(e.into()),
            },
            None => TokenError::UnknownKey(String::new()),
        };
        // A key bizrq does not hold: read the set again, unless it was read
        // a moment ago (then this token is simply refused).
        let _one = self.refetching.lock().await;
        let newer = {
            let k = self.keys.lock().unwrap_or_else(|e| e.into_inner());
            match (&k.set, &current) {
                (Some(now), Some(before)) if !Arc::ptr_eq(now, before) => Some(now.clone()),
                (Some(now), None) => Some(now.clone()),
                _ => None,
            }
        };
        let set = match newer {
            Some(set) => set,
            None => {
                let recently = self
                    .keys
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .asked_on_miss
                    .is_some_and(|at| at.elapsed() < self.settings.jwks_refetch);
                if recently && current.is_some() {
                    tracing::info!(error = %first, "token refused; the key set was read again moments ago");
                    return Err(first.into());
                }
                self.read_key_set(current.is_some()).await?
            }
        };
        Ok(signed.verify(&set)?)
    }

    /// Whether the set held is older than [`KEY_SET_MAX_AGE`] and no read
    /// was tried for that within the refetch window.
    fn key_set_aged(&self) -> bool {
        let k = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        k.set.is_some()
            && k.read_at.is_some_and(|at| at.elapsed() >= KEY_SET_MAX_AGE)
            && k.aged_try_at
                .is_none_or(|at| at.elapsed() >= self.settings.jwks_refetch)
    }

    /// Reads the key set; `on_miss`: because a token named a key the set
    /// held did not have (what the refetch window limits).
    async fn read_key_set(&self, on_miss: bool) -> Result<Arc<KeySet>, ProviderError> {
        const WHAT: &str = "key set";
        let meta = self.metadata().await?;
        if on_miss {
            self.keys
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .asked_on_miss = Some(Instant::now());
        }
        self.key_set_reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let a = self
            .http
            .get(&meta.jwks_uri, None, MAX_ANSWER)
            .await
            .map_err(|e| fetch_error(WHAT, e))?;
        if a.status != 200 {
            return Err(ProviderError::BadAnswer {
                what: WHAT,
                detail: format!("{} answered HTTP {}", meta.jwks_uri, a.status),
            });
        }
        let set = Arc::new(
            KeySet::parse(&a.body).map_err(|e| ProviderError::BadAnswer {
                what: WHAT,
                detail: e.to_string(),
            })?,
        );
        tracing::info!(keys = set.keys.len(), "read the OpenID provider's key set");
        {
            let mut k = self.keys.lock().unwrap_or_else(|e| e.into_inner());
            k.set = Some(set.clone());
            k.read_at = Some(Instant::now());
        }
        Ok(set)
    }

    async fn token_request<'a>(
        &'a self,
        what: &'static str,
        mut form: Vec<(&'a str, &'a str)>,
    ) -> Result<Tokens, ProviderError> {
        let meta = self.metadata().await?;
        let s = &self.settings;
        let secret = s.client_secret.as_deref().unwrap_or("");
        let basic = match s.client_auth {
            ClientAuth::Basic => Some((s.client_id.as_str(), secret)),
            ClientAuth::Post => {
                form.push(("client_id", s.client_id.as_str()));
                form.push(("client_secret", secret));
                None
            }
            ClientAuth::None => {
                form.push(("client_id", s.client_id.as_str()));
                None
            }
        };
        let a = self
            .http
            .post_form(
                &meta.token_endpoint,
                &form,
                basic.map_or(Auth::None, |(user, password)| Auth::Basic(user, password)),
                MAX_ANSWER,
            )
            .await
            .map_err(|e| fetch_error(what, e))?;
        if a.status == 200 {
            let t: Tokens =
                serde_json::from_slice(&a.body).map_err(|e| ProviderError::BadAnswer {
                    what,
                    detail: format!("the token endpoint's answer is not a token response: {e}"),
                })?;
            if t.token_type
                .as_deref()
                .is_some_and(|tt| !tt.eq_ignore_ascii_case("bearer"))
            {
                return Err(ProviderError::BadAnswer {
                    what,
                    detail: "the token type is not Bearer".into(),
                });
            }
            return Ok(t);
        }
        match serde_json::from_slice::<OAuthError>(&a.body) {
            Ok(e) if (400..500).contains(&a.status) => Err(ProviderError::Refused {
                error: clean(&e.error, 64),
                description: clean(e.error_description.as_deref().unwrap_or(""), 300),
            }),
            _ => Err(ProviderError::BadAnswer {
                what,
                detail: format!("the token endpoint answered HTTP {}", a.status),
            }),
        }
    }

    /// Redeems an authorization code with its PKCE verifier.
    pub async fn redeem(&self, code: &str, verifier: &str) -> Result<Tokens, ProviderError> {
        let redirect = self.settings.redirect_uri.clone();
        self.token_request(
            "code exchange",
            vec![
                ("grant_type", "authorization_code"),
                ("code", code),
                ("redirect_uri", redirect.as_str()),
                ("code_verifier", verifier),
            ],
        )
        .await
    }

    /// A refresh grant: what the provider says of the person now.
    pub async fn refresh(&self, refresh_token: &str) -> Result<Tokens, ProviderError> {
        self.token_request(
            "refresh",
            vec![
                ("grant_type", "refresh_token"),
                ("refresh_token", refresh_token),
            ],
        )
        .await
    }

    /// The userinfo endpoint's claims for an access token (JSON answers
    /// only). `subject` must be the ID token's (Core §5.3.2).
    pub async fn userinfo(
        &self,
        access_token: &str,
        subject: &str,
    ) -> Result<serde_json::Map<String, serde_json::Value>, ProviderError> {
        const WHAT: &str = "userinfo";
        let meta = self.metadata().await?;
        let Some(url) = &meta.userinfo_endpoint else {
            return Err(ProviderError::Misconfigured(
                "the provider has no userinfo endpoint".into(),
            ));
        };
        let a = self
            .http
            .get(url, Some(access_token), MAX_ANSWER)
            .await
            .map_err(|e| fetch_error(WHAT, e))?;
        if a.status == 401 {
            return Err(ProviderError::Refused {
                error: "invalid_token".into(),
                description: "userinfo refused the access token".into(),
            });
        }
        if a.status != 200 {
            return Err(ProviderError::BadAnswer {
                what: WHAT,
                detail: format!("{url} answered HTTP {}", a.status),
            });
        }
        let claims: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(&a.body)
            .map_err(|e| ProviderError::BadAnswer {
                what: WHAT,
                detail: format!("not a JSON object: {e}"),
            })?;
        if claims.get("sub").and_then(|v| v.as_str()) != Some(subject) {
            return Err(ProviderError::BadAnswer {
                what: WHAT,
                detail: "userinfo is about another subject".into(),
            });
        }
        Ok(claims)
    }

    /// The origins a form may be sent on to (the Content-Security-Policy's
    /// `form-action`): the issuer's, its authorization and end-session
    /// endpoints'.
    pub fn form_origins(&self) -> Vec<String> {
        let mut urls = vec![self.settings.issuer.clone()];
        if let Some((m, _)) = self
            .metadata
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            urls.push(m.authorization_endpoint.clone());
            urls.extend(m.end_session_endpoint.clone());
        }
        let mut origins: Vec<String> = urls.iter().filter_map(|u| origin(u)).collect();
        origins.sort();
        origins.dedup();
        origins
    }
}

/// `scheme://host[:port]` of a URL.
pub fn origin(url: &str) -> Option<String> {
    let uri: axum::http::Uri = url.parse().ok()?;
    let scheme = uri.scheme_str()?;
    let auth = uri.authority()?.as_str();
    let auth = auth.rsplit('@').next()?;
    (matches!(scheme, "http" | "https")
        && auth
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b)))
    .then(|| format!("{scheme}://{auth}"))
}

/// The discovery document's promises that bizrq relies on.
pub fn check_metadata(m: &Metadata, issuer: &str) -> Result<(), ProviderError> {
    if m.issuer != issuer {
        return Err(ProviderError::Misconfigured(format!(
            "its discovery document names the issuer \"{}\", not \"{issuer}\" (--oidc-issuer must be exactly the provider's issuer)",
            clean(&m.issuer, 200)
        )));
    }
    let mut endpoints = vec![
        ("authorization_endpoint", &m.authorization_endpoint),
        ("token_endpoint", &m.token_endpoint),
        ("jwks_uri", &m.jwks_uri),
    ];
    if let Some(u) = &m.userinfo_endpoint {
        endpoints.push(("userinfo_endpoint", u));
    }
    if let Some(u) = &m.end_session_endpoint {
        endpoints.push(("end_session_endpoint", u));
    }
    // http (to a loopback address) only for a provider that is itself one
    // (a test or a sidecar): an https issuer's discovery never sends the
    // client secret or the codes over plain http, even to this machine.
    let issuer_is_https = issuer.starts_with("https://");
    for (name, url) in endpoints {
        if url.len() > 2048
            || !allowed_url(url)
            || (issuer_is_https && !url.starts_with("https://"))
        {
            return Err(ProviderError::Misconfigured(format!(
                "its {name} \"{}\" is not https (http only to a loopback address, and only for a provider on one)",
                clean(url, 200)
            )));
        }
    }
    if let Some(methods) = &m.code_challenge_methods_supported {
        if !methods.iter().any(|x| x == "S256") {
            return Err(ProviderError::Misconfigured(
                "it does not support PKCE with S256 (code_challenge_methods_supported)".into(),
            ));
        }
    }
    if let Some(algs) = &m.id_token_signing_alg_values_supported {
        if !algs.iter().any(|a| jws::Alg::parse(a).is_some()) {
            return Err(ProviderError::Misconfigured(format!(
                "it signs ID tokens only with {} (bizrq accepts RS256, PS256 and ES256)",
                clean(&algs.join(", "), 200)
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> Metadata {
        Metadata {
            issuer: "https://idp.example/realms/acme".into(),
            authorization_endpoint: "https://idp.example/realms/acme/auth".into(),
            token_endpoint: "https://idp.example/realms/acme/token".into(),
            jwks_uri: "https://idp.example/realms/acme/certs".into(),
            userinfo_endpoint: None,
            end_session_endpoint: Some("https://idp.example/realms/acme/logout".into()),
            code_challenge_methods_supported: Some(vec!["plain".into(), "S256".into()]),
            id_token_signing_alg_values_supported: Some(vec!["RS256".into(), "HS256".into()]),
        }
    }

    #[test]
    fn discovery_must_name_the_issuer_and_keep_its_promises() {
        let iss = "https://idp.example/realms/acme";
        assert_eq!(check_metadata(&meta(), iss), Ok(()));
        assert!(check_metadata(&meta(), "https://idp.example/realms/acme/").is_err());
        let mut m = meta();
        m.token_endpoint = "http://idp.example/token".into();
        assert!(
            matches!(check_metadata(&m, iss), Err(ProviderError::Misconfigured(t)) if t.contains("token_endpoint"))
        );
        // An https issuer's endpoints stay https, loopback or not.
        let mut m = meta();
        m.jwks_uri = "http://127.0.0.1:9000/jwks".into();
        assert!(
            matches!(check_metadata(&m, iss), Err(ProviderError::Misconfigured(t)) if t.contains("jwks_uri"))
        );
        let local = "http://127.0.0.1:8080";
        let mut m = meta();
        m.issuer = local.into();
        m.authorization_endpoint = format!("{local}/auth");
        m.token_endpoint = format!("{local}/token");
        m.jwks_uri = format!("{local}/jwks");
        m.end_session_endpoint = None;
        assert_eq!(check_metadata(&m, local), Ok(()));
        let mut m = meta();
        m.code_challenge_methods_supported = Some(vec!["plain".into()]);
        assert!(check_metadata(&m, iss).is_err());
        let mut m = meta();
        m.id_token_signing_alg_values_supported = Some(vec!["HS256".into(), "none".into()]);
        assert!(check_metadata(&m, iss).is_err());
    }

    #[test]
    fn origins_are_scheme_and_authority() {
        assert_eq!(
            origin("https://idp.example:8443/a/b?c").as_deref(),
            Some("https://idp.example:8443")
        );
        assert_eq!(
            origin("http://127.0.0.1:5556/dex").as_deref(),
            Some("http://127.0.0.1:5556")
        );
        assert_eq!(
            origin("https://u:p@idp.example/").as_deref(),
            Some("https://idp.example")
        );
        assert_eq!(origin("javascript:alert(1)"), None);
        assert_eq!(origin("https://idp.example;script-src/"), None);
    }
}
