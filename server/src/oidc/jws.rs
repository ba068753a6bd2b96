//! A signed JWT (compact JWS) as an ID token carries it, verified against
//! the provider's JSON Web Key Set. Pure: bytes in, a verdict out.
//!
//! Only asymmetric algorithms are accepted: RS256, PS256 and ES256. `none`
//! is no signature, and an HMAC (HS256, …) would be keyed with the client
//! secret — a provider that publishes a key set does not sign that way, and
//! whoever else knows the secret could forge tokens. Either is refused
//! before any key is looked at. A key is used only for the algorithm its
//! type allows (an RSA key never checks an ES256 signature) and, when the
//! key names an `alg`, for that one only.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::Deserialize;

/// The longest token read (an ID token with a few hundred groups fits).
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;
/// The longest header read.
pub const MAX_HEADER_BYTES: usize = 2 * 1024;
/// Keys a key set may hold; a provider publishes a handful.
pub const MAX_KEYS: usize = 64;
/// The longest `kid` kept.
pub const MAX_KID: usize = 256;

/// The signature algorithms bizrq accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Alg {
    Rs256,
    Ps256,
    Es256,
}

impl Alg {
    pub fn parse(s: &str) -> Option<Alg> {
        match s {
            "RS256" => Some(Alg::Rs256),
            "PS256" => Some(Alg::Ps256),
            "ES256" => Some(Alg::Es256),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Alg::Rs256 => "RS256",
            Alg::Ps256 => "PS256",
            Alg::Es256 => "ES256",
        }
    }
}

/// A public key of the set, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PublicKey {
    /// Modulus and exponent, big-endian.
    Rsa { n: Vec<u8>, e: Vec<u8> },
    /// An uncompressed P-256 point (0x04 ‖ x ‖ y).
    P256 { point: Vec<u8> },
}

impl PublicKey {
    fn fits(&self, alg: Alg) -> bool {
        matches!(
            (self, alg),
            (PublicKey::Rsa { .. }, Alg::Rs256 | Alg::Ps256) | (PublicKey::P256 { .. }, Alg::Es256)
        )
    }

    fn verify(&self, alg: Alg, message: &[u8], signature: &[u8]) -> bool {
        use ring::signature as sig;
        match (self, alg) {
            (PublicKey::Rsa { n, e }, Alg::Rs256) => sig::RsaPublicKeyComponents { n, e }
                .verify(&sig::RSA_PKCS1_2048_8192_SHA256, message, signature)
                .is_ok(),
            (PublicKey::Rsa { n, e }, Alg::Ps256) => sig::RsaPublicKeyComponents { n, e }
                .verify(&sig::RSA_PSS_2048_8192_SHA256, message, signature)
                .is_ok(),
            (PublicKey::P256 { point }, Alg::Es256) => {
                sig::UnparsedPublicKey::new(&sig::ECDSA_P256_SHA256_FIXED, point)
                    .verify(message, signature)
                    .is_ok()
            }
            _ => false,
        }
    }
}

/// One usable key of the set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Jwk {
    pub kid: Option<String>,
    /// The one algorithm the key is for, when it names one.
    pub alg: Option<Alg>,
    pub key: PublicKey,
}

/// The provider's signing keys that bizrq can use; the others (encryption
/// keys, symmetric keys, algorithms it does not accept) are left out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeySet {
    pub keys: Vec<Jwk>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KeySetError {
    #[error("the key set is not a JSON object with a \"keys\" array: {0}")]
    Malformed(String),
    #[error("the key set holds more than {MAX_KEYS} keys")]
    TooMany,
    #[error("no key of the set can check RS256, PS256 or ES256 signatures")]
    NoUsableKey,
}

#[derive(Deserialize)]
struct RawSet {
    keys: Vec<serde_json::Value>,
}

#[derive(Deserialize)]
struct RawJwk {
    kty: String,
    #[serde(default)]
    kid: Option<String>,
    #[serde(default, rename = "use")]
    use_: Option<String>,
    #[serde(default)]
    alg: Option<String>,
    #[serde(default)]
    n: Option<String>,
    #[serde(default)]
    e: Option<String>,
    #[serde(default)]
    crv: Option<String>,
    #[serde(default)]
    x: Option<String>,
    #[serde(default)]
    y: Option<String>,
}

fn decode_b64(s: &str, max: usize) -> Option<Vec<u8>> {
    if s.len() > max {
        return None;
    }
    URL_SAFE_NO_PAD.decode(s.trim_end_matches('=')).ok()
}

fn usable(raw: RawJwk) -> Option<Jwk> {
    if raw.use_.as_deref().is_some_and(|u| u != "sig") {
        return None;
    }
    let alg = match raw.alg.as_deref() {
        None => None,
        Some(a) => Some(Alg::parse(a)?),
    };
    let key = match raw.kty.as_str() {
        "RSA" => {
            // 8192 bits at most: 1,366 base64url characters.
            // Leading zero bytes, which some providers publish, dropped:
            // ring refuses a modulus or exponent that has them.
            let strip = |v: Vec<u8>| -> Vec<u8> {
                let zeros = v.iter().take_while(|b| **b == 0).count();
                v[zeros..].to_vec()
            };
            let n = strip(decode_b64(raw.n.as_deref()?, 1400)?);
            let e = strip(decode_b64(raw.e.as_deref()?, 16)?);
            // Below 2048 bits ring refuses to verify anyway; say so here.
            let bits = n.len() * 8;
            if bits < 2048 {
                return None;
            }
            PublicKey::Rsa { n, e }
        }
        "EC" if raw.crv.as_deref() == Some("P-256") => {
            let x = decode_b64(raw.x.as_deref()?, 64)?;
            let y = decode_b64(raw.y.as_deref()?, 64)?;
            if x.len() != 32 || y.len() != 32 {
                return None;
            }
            let mut point = Vec::with_capacity(65);
            point.push(4);
            point.extend_from_slice(&x);
            point.extend_from_slice(&y);
            PublicKey::P256 { point }
        }
        _ => return None,
    };
    if alg.is_some_and(|a| !key.fits(a)) {
        return None;
    }
    let kid = raw.kid.filter(|k| k.len() <= MAX_KID);
    Some(Jwk { kid, alg, key })
}

impl KeySet {
    /// The usable keys of a JWKS document. A set with none is an error: no
    /// token could ever verify.
    pub fn parse(bytes: &[u8]) -> Result<KeySet, KeySetError> {
        let raw: RawSet =
            serde_json::from_slice(bytes).map_err(|e| KeySetError::Malformed(e.to_string()))?;
        if raw.keys.len() > MAX_KEYS {
            return Err(KeySetError::TooMany);
        }
        let keys: Vec<Jwk> = raw
            .keys
            .into_iter()
            .filter_map(|v| serde_json::from_value::<RawJwk>(v).ok())
            .filter_map(usable)
            .collect();
        if keys.is_empty() {
            return Err(KeySetError::NoUsableKey);
        }
        Ok(KeySet { keys })
    }
}

/// A token's header, as far as bizrq reads it.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Header {
    pub alg: String,
    #[serde(default)]
    pub kid: Option<String>,
    /// Critical extensions: bizrq understands none, so any is refused.
    #[serde(default)]
    pub crit: Option<serde_json::Value>,
}

/// A parsed, not yet verified, token.
#[derive(Clone, Debug)]
pub struct Signed {
    pub header: Header,
    pub alg: Alg,
    signing_input: String,
    signature: Vec<u8>,
    /// The payload's bytes (JSON), trusted only once [`Signed::verify`] passed.
    pub payload: Vec<u8>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TokenError {
    #[error("the token is longer than {MAX_TOKEN_BYTES} bytes")]
    TooLong,
    #[error("the token is not a signed JWT (three base64url parts): {0}")]
    Malformed(String),
    #[error("the token is signed with \"{0}\", which bizrq never accepts (RS256, PS256 or ES256 only; never none, never an HMAC)")]
    AlgNotAllowed(String),
    #[error("the token names critical header extensions, which bizrq does not understand")]
    Critical,
    #[error("no key of the provider's key set has the id \"{0}\"")]
    UnknownKey(String),
    #[error("the provider's key set has no {0} key for a token without a key id")]
    NoKeyFor(&'static str),
    #[error("the token's signature does not verify with the provider's keys")]
    BadSignature,
}

impl TokenError {
    /// Whether fetching the key set again might help: the provider may
    /// have rotated its keys since they were read — to a new kid, or (some
    /// do) a new key under a kid it used before. The refetch window
    /// bounds what a forged signature can make bizrq read.
    pub fn may_be_rotation(&self) -> bool {
        matches!(
            self,
            TokenError::UnknownKey(_) | TokenError::NoKeyFor(_) | TokenError::BadSignature
        )
    }
}

/// Splits and decodes a compact JWS, refusing an algorithm bizrq does not
/// accept and critical extensions, before anything is verified.
pub fn parse(token: &str) -> Result<Signed, TokenError> {
    if token.len() > MAX_TOKEN_BYTES {
        return Err(TokenError::TooLong);
    }
    let mut parts = token.split('.');
    let (Some(h), Some(p), Some(s), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(TokenError::Malformed(
            "not three parts separated by dots".into(),
        ));
    };
    if h.len() > MAX_HEADER_BYTES * 4 / 3 + 4 {
        return Err(TokenError::Malformed("the header is too long".into()));
    }
    let header_bytes = URL_SAFE_NO_PAD
        .decode(h)
        .map_err(|_| TokenError::Malformed("the header is not base64url".into()))?;
    let header: Header = serde_json::from_slice(&header_bytes)
        .map_err(|e| TokenError::Malformed(format!("the header is not JSON with an alg: {e}")))?;
    let Some(alg) = Alg::parse(&header.alg) else {
        let shown: String = header.alg.chars().take(32).collect();
        return Err(TokenError::AlgNotAllowed(shown));
    };
    if header.crit.is_some() {
        return Err(TokenError::Critical);
    }
    if header.kid.as_ref().is_some_and(|k| k.len() > MAX_KID) {
        return Err(TokenError::Malformed("the key id is too long".into()));
    }
    let payload = URL_SAFE_NO_PAD
        .decode(p)
        .map_err(|_| TokenError::Malformed("the payload is not base64url".into()))?;
    let signature = URL_SAFE_NO_PAD
        .decode(s)
        .map_err(|_| TokenError::Malformed("the signature is not base64url".into()))?;
    if signature.is_empty() {
        return Err(TokenError::Malformed("the signature is empty".into()));
    }
    Ok(Signed {
        signing_input: format!("{h}.{p}"),
        header,
        alg,
        signature,
        payload,
    })
}

impl Signed {
    /// Checks the signature with the key the header names (`kid`), or,
    /// without one, with any key of the set that fits the algorithm.
    pub fn verify(&self, keys: &KeySet) -> Result<(), TokenError> {
        let candidates: Vec<&Jwk> = match &self.header.kid {
            Some(kid) => {
                let named: Vec<&Jwk> = keys
                    .keys
                    .iter()
                    .filter(|k| k.kid.as_deref() == Some(kid.as_str()))
                    .collect();
                if named.is_empty() {
                    let shown: String = kid.chars().take(64).collect();
                    return Err(TokenError::UnknownKey(shown));
                }
                named
            }
            None => {
                let fitting: Vec<&Jwk> =
                    keys.keys.iter().filter(|k| k.key.fits(self.alg)).collect();
                if fitting.is_empty() {
                    return Err(TokenError::NoKeyFor(self.alg.as_str()));
                }
                fitting
            }
        };
        let message = self.signing_input.as_bytes();
        let verified = candidates.iter().any(|k| {
            k.alg.is_none_or(|a| a == self.alg)
                && k.key.fits(self.alg)
                && k.key.verify(self.alg, message, &self.signature)
        });
        if verified {
            Ok(())
        } else {
            Err(TokenError::BadSignature)
        }
    }
}

/// Test-only: tokens signed (or forged) as a provider would, and key sets.
#[cfg(test)]
pub mod forge {
    use super::*;
    use ring::rand::SystemRandom;
    use ring::signature::{self as sig, KeyPair};

    pub const RSA_A: &[u8] = include_bytes!("../../tests/fixtures/oidc/rsa-a.pk8");
    pub const RSA_B: &[u8] = include_bytes!("../../tests/fixtures/oidc/rsa-b.pk8");

    pub fn b64(bytes: &[u8]) -> String {
        URL_SAFE_NO_PAD.encode(bytes)
    }

    /// The JWK (public) of an RSA key, with a kid.
    pub fn rsa_jwk(pk8: &[u8], kid: &str) -> serde_json::Value {
        let kp = sig::RsaKeyPair::from_pkcs8(pk8).unwrap();
        let c: ring::rsa::PublicKeyComponents<Vec<u8>> = kp.public().into();
        serde_json::json!({"kty": "RSA", "kid": kid, "use": "sig", "n": b64(&c.n), "e": b64(&c.e)})
    }

    /// A fresh P-256 key: its PKCS#8 and its JWK.
    pub fn ec_key(kid: &str) -> (Vec<u8>, serde_json::Value) {
        let rng = SystemRandom::new();
        let pk8 = sig::EcdsaKeyPair::generate_pkcs8(&sig::ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .unwrap()
            .as_ref()
            .to_vec();
        let kp = sig::EcdsaKeyPair::from_pkcs8(&sig::ECDSA_P256_SHA256_FIXED_SIGNING, &pk8, &rng)
            .unwrap();
        let point = kp.public_key().as_ref();
        let jwk = serde_json::json!({"kty": "EC", "crv": "P-256", "kid": kid,
            "x": b64(&point[1..33]), "y": b64(&point[33..65])});
        (pk8, jwk)
    }

    /// A compact JWS of `claims` with `header`, signed as `alg` with `pk8`.
    pub fn sign(
        header: serde_json::Value,
        claims: &serde_json::Value,
        alg: &str,
        pk8: &[u8],
    ) -> String {
        let input = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let rng = SystemRandom::new();
        let signature = match alg {
            "RS256" | "PS256" => {
                let kp = sig::RsaKeyPair::from_pkcs8(pk8).unwrap();
                let mut out = vec![0; kp.public().modulus_len()];
                let padding: &dyn sig::RsaEncoding = if alg == "RS256" {
                    &sig::RSA_PKCS1_SHA256
                } else {
                    &sig::RSA_PSS_SHA256
                };
                kp.sign(padding, &rng, input.as_bytes(), &mut out).unwrap();
                out
            }
            "ES256" => {
                let kp =
                    sig::EcdsaKeyPair::from_pkcs8(&sig::ECDSA_P256_SHA256_FIXED_SIGNING, pk8, &rng)
                        .unwrap();
                kp.sign(&rng, input.as_bytes()).unwrap().as_ref().to_vec()
            }
            "HS256" => {
                let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, pk8);
                ring::hmac::sign(&key, input.as_bytes()).as_ref().to_vec()
            }
            other => panic!("no signer for {other}"),
        };
        format!("{input}.{}", b64(&signature))
    }

    /// RS256 with key A under kid `a`: what the test provider issues.
    pub fn rs256(claims: &serde_json::Value) -> String {
        sign(
            serde_json::json!({"alg": "RS256", "kid": "a", "typ": "JWT"}),
            claims,
            "RS256",
            RSA_A,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::forge::*;
    use super::*;
    use serde_json::json;

    fn set(keys: serde_json::Value) -> KeySet {
        KeySet::parse(json!({ "keys": keys }).to_string().as_bytes()).unwrap()
    }

    fn claims() -> serde_json::Value {
        json!({"iss": "https://idp.example", "sub": "alice", "aud": "bizrq"})
    }

    #[test]
    fn rs256_ps256_and_es256_verify_with_their_keys() {
        let (ec, ec_jwk) = ec_key("e");
        let keys = set(json!([rsa_jwk(RSA_A, "a"), ec_jwk]));
        for (alg, kid, pk8) in [
            ("RS256", "a", RSA_A),
            ("PS256", "a", RSA_A),
            ("ES256", "e", &ec[..]),
        ] {
            let t = sign(json!({"alg": alg, "kid": kid}), &claims(), alg, pk8);
            let s = parse(&t).unwrap();
            assert_eq!(s.verify(&keys), Ok(()), "{alg}");
            assert_eq!(
                serde_json::from_slice::<serde_json::Value>(&s.payload).unwrap(),
                claims()
            );
        }
    }

    #[test]
    fn a_token_signed_by_another_key_is_refused() {
        let keys = set(json!([rsa_jwk(RSA_A, "a")]));
        // The attacker's key under the provider's kid.
        let t = sign(
            json!({"alg": "RS256", "kid": "a"}),
            &claims(),
            "RS256",
            RSA_B,
        );
        assert_eq!(
            parse(&t).unwrap().verify(&keys),
            Err(TokenError::BadSignature)
        );
        // Without a kid: no key of the set verifies it.
        let t = sign(json!({"alg": "RS256"}), &claims(), "RS256", RSA_B);
        assert_eq!(
            parse(&t).unwrap().verify(&keys),
            Err(TokenError::BadSignature)
        );
        // Under a kid the set does not have: maybe a rotation, asked again.
        let t = sign(
            json!({"alg": "RS256", "kid": "b"}),
            &claims(),
            "RS256",
            RSA_B,
        );
        let e = parse(&t).unwrap().verify(&keys).unwrap_err();
        assert_eq!(e, TokenError::UnknownKey("b".into()));
        assert!(e.may_be_rotation());
        // A payload changed after signing.
        let good = rs256(&claims());
        let mut parts: Vec<&str> = good.split('.').collect();
        let other = b64(
            json!({"iss": "https://idp.example", "sub": "mallory", "aud": "bizrq"})
                .to_string()
                .as_bytes(),
        );
        parts[1] = &other;
        assert_eq!(
            parse(&parts.join(".")).unwrap().verify(&keys),
            Err(TokenError::BadSignature)
        );
    }

    #[test]
    fn none_and_hmac_are_refused_before_any_key_is_looked_at() {
        let keys = set(json!([rsa_jwk(RSA_A, "a")]));
        let unsigned = format!(
            "{}.{}.",
            b64(json!({"alg": "none"}).to_string().as_bytes()),
            b64(claims().to_string().as_bytes())
        );
        assert_eq!(
            parse(&unsigned).unwrap_err(),
            TokenError::AlgNotAllowed("none".into())
        );
        let unsigned = format!("{unsigned}AAAA");
        assert_eq!(
            parse(&unsigned).unwrap_err(),
            TokenError::AlgNotAllowed("none".into())
        );
        for alg in [
            "None", "NONE", "HS256", "HS512", "RS384", "ES512", "EdDSA", "",
        ] {
            let h = b64(json!({"alg": alg, "kid": "a"}).to_string().as_bytes());
            let t = format!("{h}.{}.AAAA", b64(b"{}"));
            assert_eq!(
                parse(&t).unwrap_err(),
                TokenError::AlgNotAllowed(alg.into()),
                "{alg}"
            );
        }
        // An HMAC "signed" with the public key's bytes (the classic
        // confusion attack) is an HS256 token: refused by its alg.
        let n = match &keys.keys[0].key {
            PublicKey::Rsa { n, .. } => n.clone(),
            _ => unreachable!(),
        };
        let t = sign(json!({"alg": "HS256", "kid": "a"}), &claims(), "HS256", &n);
        assert_eq!(
            parse(&t).unwrap_err(),
            TokenError::AlgNotAllowed("HS256".into())
        );
    }

    #[test]
    fn a_key_checks_only_the_algorithm_its_type_and_alg_allow() {
        let (ec, ec_jwk) = ec_key("a");
        // An RSA key named for PS256 does not check RS256.
        let mut ps_only = rsa_jwk(RSA_A, "a");
        ps_only["alg"] = "PS256".into();
        let keys = set(json!([ps_only]));
        let t = sign(
            json!({"alg": "RS256", "kid": "a"}),
            &claims(),
            "RS256",
            RSA_A,
        );
        assert_eq!(
            parse(&t).unwrap().verify(&keys),
            Err(TokenError::BadSignature)
        );
        // An EC key under the kid an RS256 token names.
        let keys = set(json!([ec_jwk]));
        assert_eq!(
            parse(&t).unwrap().verify(&keys),
            Err(TokenError::BadSignature)
        );
        let t = sign(json!({"alg": "ES256", "kid": "a"}), &claims(), "ES256", &ec);
        assert_eq!(parse(&t).unwrap().verify(&keys), Ok(()));
    }

    #[test]
    fn key_sets_keep_only_signing_keys_bizrq_can_use() {
        let mut enc = rsa_jwk(RSA_B, "enc");
        enc["use"] = "enc".into();
        let oct = json!({"kty": "oct", "kid": "h", "k": "c2VjcmV0"});
        let mut hs = rsa_jwk(RSA_B, "hs");
        hs["alg"] = "HS256".into();
        let short = json!({"kty": "RSA", "kid": "s", "n": b64(&[0xc5; 128]), "e": "AQAB"});
        let bad_curve = json!({"kty": "EC", "crv": "P-384", "kid": "p", "x": b64(&[1; 48]), "y": b64(&[1; 48])});
        let keys = set(json!([
            enc,
            oct,
            hs,
            short,
            bad_curve,
            rsa_jwk(RSA_A, "a"),
            7,
            "x"
        ]));
        assert_eq!(keys.keys.len(), 1);
        assert_eq!(keys.keys[0].kid.as_deref(), Some("a"));
        assert_eq!(
            KeySet::parse(json!({"keys": [oct_only()]}).to_string().as_bytes()),
            Err(KeySetError::NoUsableKey)
        );
        let many: Vec<_> = (0..=MAX_KEYS)
            .map(|i| rsa_jwk(RSA_A, &i.to_string()))
            .collect();
        assert_eq!(
            KeySet::parse(json!({ "keys": many }).to_string().as_bytes()),
            Err(KeySetError::TooMany)
        );
        assert!(matches!(
            KeySet::parse(b"[]"),
            Err(KeySetError::Malformed(_))
        ));
    }

    fn oct_only() -> serde_json::Value {
        json!({"kty": "oct", "k": "c2VjcmV0"})
    }

    #[test]
    fn malformed_and_oversized_tokens_are_refused() {
        assert_eq!(
            parse(&"a".repeat(MAX_TOKEN_BYTES + 1)).unwrap_err(),
            TokenError::TooLong
        );
        for t in ["", "a.b", "a.b.c.d", "a.b.c.d.e", "!!.e30.AAAA"] {
            assert!(matches!(parse(t), Err(TokenError::Malformed(_))), "{t:?}");
        }
        let h = b64(json!({"alg": "RS256", "crit": ["exp"]})
            .to_string()
            .as_bytes());
        assert_eq!(
            parse(&format!("{h}.e30.AAAA")).unwrap_err(),
            TokenError::Critical
        );
        let h = b64(json!({"alg": "RS256"}).to_string().as_bytes());
        assert!(matches!(
            parse(&format!("{h}.e30.")),
            Err(TokenError::Malformed(_))
        ));
    }
}
