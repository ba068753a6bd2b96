//! The authorization code flow's secrets and URLs (pure; randomness comes
//! in as bytes).
//!
//! A sign-in starts with four random values, each 256 bits in base64url:
//! - `state`, sent to the provider and back, names the flow's row;
//! - `browser`, a cookie only this browser holds, binds the flow to it
//!   (a callback carrying the right state in another browser is refused);
//! - `nonce`, which the ID token must carry (a token minted for another
//!   sign-in is refused);
//! - the PKCE `verifier`, whose SHA-256 (`S256`) the provider keeps with
//!   the code: a code stolen on its way back cannot be redeemed without it.
//!
//! Only SHA-256 digests of `state` and `browser` are stored.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use sha2::{Digest, Sha256};

/// The secrets of one sign-in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Secrets {
    pub state: String,
    pub browser: String,
    pub nonce: String,
    pub verifier: String,
}

/// Length of each secret (43 characters of base64url).
pub const SECRET_CHARS: usize = 43;

impl Secrets {
    /// From 4 × 32 random bytes.
    pub fn from_random(bytes: [[u8; 32]; 4]) -> Secrets {
        let [s, b, n, v] = bytes.map(|b| URL_SAFE_NO_PAD.encode(b));
        Secrets {
            state: s,
            browser: b,
            nonce: n,
            verifier: v,
        }
    }

    pub fn generate() -> Secrets {
        Secrets::from_random(std::array::from_fn(|_| rand::random::<[u8; 32]>()))
    }
}

/// Whether a value has the shape of a secret made here (so nothing else is
/// hashed or looked up).
pub fn is_secret(s: &str) -> bool {
    s.len() == SECRET_CHARS
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The PKCE S256 challenge of a verifier (RFC 7636 §4.2).
pub fn challenge(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// The SHA-256 of a secret in hex, as it is stored.
pub fn digest(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

fn with_query(endpoint: &str, pairs: &[(&str, &str)]) -> String {
    let q = serde_urlencoded::to_string(pairs).unwrap_or_default();
    let sep = if endpoint.contains('?') { '&' } else { '?' };
    format!("{endpoint}{sep}{q}")
}

/// Where the browser is sent to sign in.
pub struct Authorize<'a> {
    pub endpoint: &'a str,
    pub client_id: &'a str,
    pub redirect_uri: &'a str,
    pub scopes: &'a [String],
    pub secrets: &'a Secrets,
}

impl Authorize<'_> {
    pub fn url(&self) -> String {
        let scope = self.scopes.join(" ");
        let challenge = challenge(&self.secrets.verifier);
        with_query(
            self.endpoint,
            &[
                ("response_type", "code"),
                ("client_id", self.client_id),
                ("redirect_uri", self.redirect_uri),
                ("scope", scope.as_str()),
                ("state", self.secrets.state.as_str()),
                ("nonce", self.secrets.nonce.as_str()),
                ("code_challenge", challenge.as_str()),
                ("code_challenge_method", "S256"),
            ],
        )
    }
}

/// RP-initiated logout (OpenID Connect RP-Initiated Logout 1.0): the
/// provider's end-session endpoint with the ID token as a hint and where
/// to come back to.
pub fn end_session_url(
    endpoint: &str,
    id_token_hint: Option<&str>,
    client_id: &str,
    post_logout_redirect_uri: &str,
) -> String {
    let mut pairs = vec![
        ("client_id", client_id),
        ("post_logout_redirect_uri", post_logout_redirect_uri),
    ];
    if let Some(t) = id_token_hint {
        pairs.push(("id_token_hint", t));
    }
    with_query(endpoint, &pairs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_s256_challenge_is_rfc_7636s() {
        // RFC 7636 appendix B.
        assert_eq!(
            challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
    }

    #[test]
    fn secrets_are_distinct_and_shaped() {
        let s = Secrets::from_random([[1; 32], [2; 32], [3; 32], [4; 32]]);
        for v in [&s.state, &s.browser, &s.nonce, &s.verifier] {
            assert!(is_secret(v), "{v}");
        }
        let g = Secrets::generate();
        assert_ne!(g.state, g.browser);
        assert!(!is_secret("short"));
        assert!(!is_secret(&format!("{}=", &s.state[..42])));
    }

    #[test]
    fn the_authorize_url_carries_every_parameter_encoded() {
        let s = Secrets::from_random([[1; 32], [2; 32], [3; 32], [4; 32]]);
        let scopes = vec!["openid".to_string(), "email".into(), "groups".into()];
        let url = Authorize {
            endpoint: "https://idp.example/auth?kc_idp_hint=corp",
            client_id: "bizrq portal",
            redirect_uri: "https://bizrq.example/login/oidc/callback",
            scopes: &scopes,
            secrets: &s,
        }
        .url();
        assert!(url.starts_with("https://idp.example/auth?kc_idp_hint=corp&response_type=code&"));
        for part in [
            "client_id=bizrq+portal",
            "redirect_uri=https%3A%2F%2Fbizrq.example%2Flogin%2Foidc%2Fcallback",
            "scope=openid+email+groups",
            "code_challenge_method=S256",
            &format!("state={}", s.state),
            &format!("nonce={}", s.nonce),
            &format!("code_challenge={}", challenge(&s.verifier)),
        ] {
            assert!(url.contains(part), "{part} in {url}");
        }
        assert!(!url.contains(&s.verifier), "the verifier never leaves");
        assert!(!url.contains(&s.browser), "nor the browser's cookie");
        let out = end_session_url(
            "https://idp.example/logout",
            Some("a.b.c"),
            "bizrq",
            "https://bizrq.example/login",
        );
        assert_eq!(
            out,
            "https://idp.example/logout?client_id=bizrq&post_logout_redirect_uri=https%3A%2F%2Fbizrq.example%2Flogin&id_token_hint=a.b.c"
        );
    }
}
