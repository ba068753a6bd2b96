//! What a relying party must check of an ID token's claims once its
//! signature verified (OpenID Connect Core §3.1.3.7), and who the token
//! says the person is. Pure: the time comes in as an argument.
//!
//! - `iss` is exactly the configured issuer;
//! - `aud` holds the client id; with more than one audience, `azp` must be
//!   present, and whenever `azp` is present it must be the client id (a
//!   token issued to another client of the same provider is refused);
//! - `exp` is after now, `nbf` (if any) and `iat` not after now, each give
//!   or take the allowed clock skew, and `iat` is recent (a token kept for
//!   later is not taken);
//! - `nonce` is the one this sign-in sent (single use with its flow);
//! - `sub` is present, at most 255 characters, and holds no control
//!   character.

use serde_json::{Map, Value};

/// The longest `sub` (OpenID Connect Core: 255 ASCII characters).
pub const MAX_SUBJECT: usize = 255;
/// Groups kept from one token; more is a misconfigured claim.
pub const MAX_GROUPS: usize = 512;
/// The longest group name kept (Keycloak's full paths, Entra's ids).
pub const MAX_GROUP: usize = 256;
/// The longest username or email read from a claim.
pub const MAX_NAME: usize = 254;

/// What the token must say.
#[derive(Clone, Debug)]
pub struct Expected<'a> {
    pub issuer: &'a str,
    pub client_id: &'a str,
    /// The nonce this sign-in sent; None on a refresh (no nonce is sent).
    pub nonce: Option<&'a str>,
    pub now_s: i64,
    /// Clock skew allowed either way, in seconds.
    pub skew_s: i64,
    /// How old `iat` may be, in seconds.
    pub max_age_s: i64,
}

/// A token whose claims passed.
#[derive(Clone, Debug, PartialEq)]
pub struct IdToken {
    pub subject: String,
    pub expires_s: i64,
    pub claims: Map<String, Value>,
}

#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum ClaimError {
    #[error("the token's payload is not a JSON object")]
    NotJson,
    #[error("the token has no {0} claim")]
    Missing(&'static str),
    #[error("the token was issued by \"{got}\", not by the configured issuer \"{want}\"")]
    WrongIssuer { got: String, want: String },
    #[error("the token is meant for {got}, not for this client (\"{want}\")")]
    WrongAudience { got: String, want: String },
    #[error("the token was issued to the client \"{0}\" (azp), not to this one")]
    WrongParty(String),
    #[error("the token has several audiences but no azp naming this client")]
    NoAuthorizedParty,
    #[error("the token expired {0} seconds ago")]
    Expired(i64),
    #[error("the token is valid only in {0} seconds (nbf)")]
    NotYetValid(i64),
    #[error("the token says it was issued {0} seconds from now (iat): check the clocks")]
    IssuedInFuture(i64),
    #[error("the token was issued {0} seconds ago, longer than a sign-in takes")]
    TooOld(i64),
    #[error("the token's nonce is not the one this sign-in sent")]
    WrongNonce,
    #[error("the {0} claim is not a usable value")]
    Unusable(&'static str),
}

fn seconds(claims: &Map<String, Value>, name: &'static str) -> Result<Option<i64>, ClaimError> {
    match claims.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_i64()
            .or_else(|| v.as_f64().filter(|f| f.is_finite()).map(|f| f as i64))
            .map(Some)
            .ok_or(ClaimError::Unusable(name)),
    }
}

fn shown(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).take(128).collect()
}

/// Checks an ID token's claims (its signature already verified).
pub fn check(payload: &[u8], e: &Expected) -> Result<IdToken, ClaimError> {
    let claims: Map<String, Value> = match serde_json::from_slice(payload) {
        Ok(Value::Object(m)) => m,
        _ => return Err(ClaimError::NotJson),
    };
    let iss = claims
        .get("iss")
        .and_then(Value::as_str)
        .ok_or(ClaimError::Missing("iss"))?;
    if iss != e.issuer {
        return Err(ClaimError::WrongIssuer {
            got: shown(iss),
            want: e.issuer.to_string(),
        });
    }
    let audiences: Vec<&str> = match claims.get("aud") {
        Some(Value::String(a)) => vec![a.as_str()],
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
        _ => return Err(ClaimError::Missing("aud")),
    };
    if !audiences.contains(&e.client_id) {
        let got = audiences
            .iter()
            .take(4)
            .map(|a| format!("\"{}\"", shown(a)))
            .collect::<Vec<_>>()
            .join(", ");
        return Err(ClaimError::WrongAudience {
            got: if got.is_empty() { "nobody".into() } else { got },
            want: e.client_id.to_string(),
        });
    }
    match claims.get("azp").and_then(Value::as_str) {
        Some(azp) if azp != e.client_id => return Err(ClaimError::WrongParty(shown(azp))),
        None if audiences.len() > 1 => return Err(ClaimError::NoAuthorizedParty),
        _ => {}
    }
    let exp = seconds(&claims, "exp")?.ok_or(ClaimError::Missing("exp"))?;
    // Saturating: a signed value near the ends of i64 is refused, never a
    // panic or a wrap.
    if exp.saturating_add(e.skew_s) <= e.now_s {
        return Err(ClaimError::Expired(e.now_s.saturating_sub(exp)));
    }
    if let Some(nbf) = seconds(&claims, "nbf")? {
        if nbf.saturating_sub(e.skew_s) > e.now_s {
            return Err(ClaimError::NotYetValid(nbf.saturating_sub(e.now_s)));
        }
    }
    let iat = seconds(&claims, "iat")?.ok_or(ClaimError::Missing("iat"))?;
    if iat.saturating_sub(e.skew_s) > e.now_s {
        return Err(ClaimError::IssuedInFuture(iat.saturating_sub(e.now_s)));
    }
    if e.now_s.saturating_sub(iat) > e.max_age_s.saturating_add(e.skew_s) {
        return Err(ClaimError::TooOld(e.now_s.saturating_sub(iat)));
    }
    if let Some(want) = e.nonce {
        let got = claims
            .get("nonce")
            .and_then(Value::as_str)
            .ok_or(ClaimError::Missing("nonce"))?;
        if !ring_eq(got.as_bytes(), want.as_bytes()) {
            return Err(ClaimError::WrongNonce);
        }
    }
    let sub = claims
        .get("sub")
        .and_then(Value::as_str)
        .ok_or(ClaimError::Missing("sub"))?;
    if sub.is_empty() || sub.len() > MAX_SUBJECT || quota::text::hostile_char(sub).is_some() {
        return Err(ClaimError::Unusable("sub"));
    }
    Ok(IdToken {
        subject: sub.to_string(),
        expires_s: exp,
        claims,
    })
}

/// Equal, in time that depends only on the lengths.
fn ring_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The claim at a dotted path (`groups`, `realm_access.roles`); a claim
/// whose own name holds a dot is found whole first.
pub fn at<'a>(claims: &'a Map<String, Value>, path: &str) -> Option<&'a Value> {
    if let Some(v) = claims.get(path) {
        return Some(v);
    }
    let mut parts = path.split('.');
    let mut v = claims.get(parts.next()?)?;
    for p in parts {
        v = v.as_object()?.get(p)?;
    }
    Some(v)
}

/// Which claims carry the username, the email and the groups.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimNames {
    pub username: String,
    pub email: String,
    pub groups: String,
}

/// Who the token says the person is: strings as the provider gave them
/// (trimmed, bounded, without control characters).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Person {
    pub subject: String,
    pub username: String,
    pub email: Option<String>,
    /// In the provider's order, without repeats.
    pub groups: Vec<String>,
    /// Groups left out: over [`MAX_GROUP`] bytes, holding a control
    /// character, or past [`MAX_GROUPS`].
    pub groups_dropped: usize,
    /// The provider said, with a JSON `true`, that the email is verified.
    pub email_verified: bool,
}

/// Whether the claims mark the email unverified: `email_verified` given as
/// anything but `true` (`false`, `"false"`, `"true"`, a number). Absent is
/// not unverified: some providers never send it.
pub fn email_unverified(c: &serde_json::Map<String, Value>) -> bool {
    c.get("email_verified")
        .is_some_and(|v| v != &Value::Bool(true))
}

fn clean_string(v: &Value, max: usize) -> Option<String> {
    let s = v.as_str()?.trim();
    (!s.is_empty() && s.len() <= max && quota::text::hostile_char(s).is_none())
        .then(|| s.to_string())
}

/// The groups a claim value lists: an array of strings, or one string.
pub fn groups_of(v: Option<&Value>) -> (Vec<String>, usize) {
    let items: Vec<&Value> = match v {
        Some(Value::Array(a)) => a.iter().collect(),
        Some(s @ Value::String(_)) => vec![s],
        _ => return (Vec::new(), 0),
    };
    let mut groups: Vec<String> = Vec::new();
    let mut dropped = 0;
    for item in items {
        match clean_string(item, MAX_GROUP) {
            Some(g) if groups.len() < MAX_GROUPS => {
                if !groups.contains(&g) {
                    groups.push(g);
                }
            }
            _ => dropped += 1,
        }
    }
    (groups, dropped)
}

/// The person of a checked token. The username claim must be there; an
/// email given as the username must not be marked unverified.
pub fn person(token: &IdToken, names: &ClaimNames) -> Result<Person, ClaimError> {
    let c = &token.claims;
    let username = at(c, &names.username)
        .ok_or(ClaimError::Missing("username"))
        .and_then(|v| clean_string(v, MAX_NAME).ok_or(ClaimError::Unusable("username")))?;
    let unverified = email_unverified(c);
    if names.username == "email" && unverified {
        return Err(ClaimError::Unusable("email (not verified by the provider)"));
    }
    let email = at(c, &names.email)
        .and_then(|v| clean_string(v, MAX_NAME))
        .filter(|_| !(names.email == "email" && unverified));
    let (groups, groups_dropped) = groups_of(at(c, &names.groups));
    Ok(Person {
        subject: token.subject.clone(),
        username,
        email,
        groups,
        groups_dropped,
        email_verified: c.get("email_verified") == Some(&Value::Bool(true)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NOW: i64 = 1_800_000_000;

    fn expected(nonce: Option<&str>) -> Expected<'_> {
        Expected {
            issuer: "https://idp.example/realms/acme",
            client_id: "bizrq",
            nonce,
            now_s: NOW,
            skew_s: 60,
            max_age_s: 600,
        }
    }

    fn good() -> Value {
        json!({"iss": "https://idp.example/realms/acme", "aud": "bizrq", "sub": "u-1",
               "exp": NOW + 300, "iat": NOW - 5, "nonce": "n-1",
               "preferred_username": "alice", "email": "alice@example.com",
               "groups": ["team-nlp", "nlp-leads"]})
    }

    fn with(f: impl FnOnce(&mut Map<String, Value>)) -> Vec<u8> {
        let mut v = good();
        f(v.as_object_mut().unwrap());
        v.to_string().into_bytes()
    }

    #[test]
    fn a_good_token_passes_and_names_its_person() {
        let t = check(good().to_string().as_bytes(), &expected(Some("n-1"))).unwrap();
        assert_eq!((t.subject.as_str(), t.expires_s), ("u-1", NOW + 300));
        let names = ClaimNames {
            username: "preferred_username".into(),
            email: "email".into(),
            groups: "groups".into(),
        };
        let p = person(&t, &names).unwrap();
        assert_eq!(p.username, "alice");
        assert_eq!(p.email.as_deref(), Some("alice@example.com"));
        assert_eq!(p.groups, ["team-nlp", "nlp-leads"]);
    }

    #[test]
    fn every_claim_a_relying_party_must_check_is_checked() {
        let e = expected(Some("n-1"));
        let cases: Vec<(Vec<u8>, ClaimError)> = vec![
            (
                with(|m| {
                    m.insert("iss".into(), "https://evil.example".into());
                }),
                ClaimError::WrongIssuer {
                    got: "https://evil.example".into(),
                    want: e.issuer.into(),
                },
            ),
            (
                with(|m| {
                    m.insert("iss".into(), "https://idp.example/realms/acme/".into());
                }),
                ClaimError::WrongIssuer {
                    got: "https://idp.example/realms/acme/".into(),
                    want: e.issuer.into(),
                },
            ),
            (
                with(|m| {
                    m.remove("iss");
                }),
                ClaimError::Missing("iss"),
            ),
            (
                with(|m| {
                    m.insert("aud".into(), "other-app".into());
                }),
                ClaimError::WrongAudience {
                    got: "\"other-app\"".into(),
                    want: "bizrq".into(),
                },
            ),
            (
                with(|m| {
                    m.insert("aud".into(), json!([]));
                }),
                ClaimError::WrongAudience {
                    got: "nobody".into(),
                    want: "bizrq".into(),
                },
            ),
            (
                with(|m| {
                    m.remove("aud");
                }),
                ClaimError::Missing("aud"),
            ),
            (
                with(|m| {
                    m.insert("aud".into(), json!(["bizrq", "other-app"]));
                }),
                ClaimError::NoAuthorizedParty,
            ),
            (
                with(|m| {
                    m.insert("aud".into(), json!(["bizrq", "other-app"]));
                    m.insert("azp".into(), "other-app".into());
                }),
                ClaimError::WrongParty("other-app".into()),
            ),
            (
                with(|m| {
                    m.insert("azp".into(), "other-app".into());
                }),
                ClaimError::WrongParty("other-app".into()),
            ),
            (
                with(|m| {
                    m.insert("exp".into(), (NOW - 61).into());
                }),
                ClaimError::Expired(61),
            ),
            (
                with(|m| {
                    m.insert("exp".into(), "soon".into());
                }),
                ClaimError::Unusable("exp"),
            ),
            (
                with(|m| {
                    m.remove("exp");
                }),
                ClaimError::Missing("exp"),
            ),
            (
                with(|m| {
                    m.insert("nbf".into(), (NOW + 61).into());
                }),
                ClaimError::NotYetValid(61),
            ),
            (
                with(|m| {
                    m.insert("iat".into(), (NOW + 61).into());
                }),
                ClaimError::IssuedInFuture(61),
            ),
            (
                with(|m| {
                    m.insert("iat".into(), (NOW - 661).into());
                }),
                ClaimError::TooOld(661),
            ),
            (
                with(|m| {
                    m.remove("iat");
                }),
                ClaimError::Missing("iat"),
            ),
            (
                with(|m| {
                    m.insert("nonce".into(), "n-2".into());
                }),
                ClaimError::WrongNonce,
            ),
            (
                with(|m| {
                    m.remove("nonce");
                }),
                ClaimError::Missing("nonce"),
            ),
            (
                with(|m| {
                    m.remove("sub");
                }),
                ClaimError::Missing("sub"),
            ),
            (
                with(|m| {
                    m.insert("sub".into(), "".into());
                }),
                ClaimError::Unusable("sub"),
            ),
            (
                with(|m| {
                    m.insert("sub".into(), "a\u{0}b".into());
                }),
                ClaimError::Unusable("sub"),
            ),
            (
                with(|m| {
                    m.insert("sub".into(), "x".repeat(256).into());
                }),
                ClaimError::Unusable("sub"),
            ),
            (b"[1]".to_vec(), ClaimError::NotJson),
        ];
        for (payload, want) in cases {
            assert_eq!(check(&payload, &e), Err(want.clone()), "{want}");
        }
    }

    #[test]
    fn the_clock_skew_is_allowed_either_way_and_no_more() {
        let e = expected(Some("n-1"));
        for ok in [
            with(|m| {
                m.insert("exp".into(), (NOW - 59).into());
            }),
            with(|m| {
                m.insert("nbf".into(), (NOW + 59).into());
            }),
            with(|m| {
                m.insert("iat".into(), (NOW + 59).into());
            }),
            with(|m| {
                m.insert("iat".into(), (NOW - 659).into());
            }),
            with(|m| {
                m.insert("aud".into(), json!(["other-app", "bizrq"]));
                m.insert("azp".into(), "bizrq".into());
            }),
            with(|m| {
                m.insert("exp".into(), json!(NOW as f64 + 300.5));
            }),
        ] {
            assert!(check(&ok, &e).is_ok(), "{}", String::from_utf8_lossy(&ok));
        }
        // A refresh sends no nonce: none is asked for.
        assert!(check(
            &with(|m| {
                m.remove("nonce");
            }),
            &expected(None)
        )
        .is_ok());
    }

    #[test]
    fn groups_and_names_are_bounded_and_clean() {
        let names = ClaimNames {
            username: "email".into(),
            email: "email".into(),
            groups: "realm_access.roles".into(),
        };
        let mut many: Vec<Value> = (0..MAX_GROUPS + 3)
            .map(|i| json!(format!("g{i}")))
            .collect();
        many.insert(0, json!("x".repeat(MAX_GROUP + 1)));
        many.insert(0, json!("bad\u{202e}"));
        many.insert(0, json!(7));
        many.insert(0, json!("g0"));
        let t = check(
            &with(|m| {
                m.insert("realm_access".into(), json!({"roles": many}));
            }),
            &expected(Some("n-1")),
        )
        .unwrap();
        let p = person(&t, &names).unwrap();
        assert_eq!(p.username, "alice@example.com");
        assert_eq!(p.groups.len(), MAX_GROUPS);
        assert_eq!(p.groups[0], "g0");
        assert_eq!(
            p.groups_dropped,
            3 + 3,
            "three bad (a repeat is no drop), three past the cap"
        );
        // One string is one group; something else is none.
        assert_eq!(
            groups_of(Some(&json!("solo"))),
            (vec!["solo".to_string()], 0)
        );
        assert_eq!(groups_of(Some(&json!({"a": 1}))), (vec![], 0));
        // An unverified email is no username.
        let t = check(
            &with(|m| {
                m.insert("email_verified".into(), false.into());
            }),
            &expected(Some("n-1")),
        )
        .unwrap();
        assert!(person(&t, &names).is_err());
        // A username with a control character, or none.
        let t = check(
            &with(|m| {
                m.insert("email".into(), "a\nb@example.com".into());
            }),
            &expected(Some("n-1")),
        )
        .unwrap();
        assert_eq!(person(&t, &names), Err(ClaimError::Unusable("username")));
        let names = ClaimNames {
            username: "upn".into(),
            ..names
        };
        assert_eq!(person(&t, &names), Err(ClaimError::Missing("username")));
    }
}
