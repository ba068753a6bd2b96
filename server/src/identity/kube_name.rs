//! One name from kubectl to the portal (pure): the username the Kubernetes
//! API server gives the same person, so that what a review's
//! `userInfo.username` names (`status.users`, a queue entry's
//! `submittedBy`, the budget ledger's user) leads to the portal user.
//!
//! The API server's OIDC authenticator makes it from one claim of the ID
//! token and a prefix (`--oidc-username-claim`, `--oidc-username-prefix`,
//! or `claimMappings.username` in an `AuthenticationConfiguration`). bizrq
//! makes the same from the same claim, with the API server's defaults:
//! no prefix given means none for the `email` claim and `<issuer>#` for any
//! other; `-` means none.

use serde_json::{Map, Value};

/// How the API server names people (`--oidc-kube-username-claim`,
/// `--oidc-kube-username-prefix`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeNames {
    pub claim: String,
    /// None: the API server's default for the claim.
    pub prefix: Option<String>,
}

impl KubeNames {
    /// The prefix in force for an issuer.
    pub fn prefix_for(&self, issuer: &str) -> String {
        match self.prefix.as_deref() {
            Some("-") => String::new(),
            Some(p) => p.to_string(),
            None if self.claim == "email" => String::new(),
            None => format!("{issuer}#"),
        }
    }

    /// The Kubernetes username of the person an ID token's claims name, in
    /// the canonical form bizrq keeps usernames in (`quota::submitters`).
    /// None when the claim is missing, not a string, or (for `email`) not
    /// verified — the API server refuses such a token too.
    pub fn of(&self, claims: &Map<String, Value>, issuer: &str) -> Option<String> {
        let v = crate::oidc::claims::at(claims, &self.claim)?.as_str()?;
        if v.is_empty() {
            return None;
        }
        if self.claim == "email" && crate::oidc::claims::email_unverified(claims) {
            return None;
        }
        quota::submitters::submitter(&format!("{}{v}", self.prefix_for(issuer)))
    }
}

/// A Kubernetes username as pages show it: the portal user it is linked
/// to, and the name itself (`alice (oidc:alice@example.com)`); unlinked,
/// the name alone. `linked`: Kubernetes username → portal username.
pub fn shown(linked: &std::collections::HashMap<String, String>, kube: &str) -> String {
    match linked.get(kube) {
        Some(user) if user != kube => format!("{user} ({kube})"),
        _ => kube.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claims() -> Map<String, Value> {
        json!({"sub": "4f1c", "email": "alice@example.com", "email_verified": true,
               "preferred_username": "alice"})
        .as_object()
        .unwrap()
        .clone()
    }

    #[test]
    fn a_linked_name_shows_its_person() {
        let linked = [("oidc:alice@example.com".to_string(), "alice".to_string())].into();
        assert_eq!(
            shown(&linked, "oidc:alice@example.com"),
            "alice (oidc:alice@example.com)"
        );
        assert_eq!(
            shown(&linked, "system:serviceaccount:ci:bot"),
            "system:serviceaccount:ci:bot"
        );
    }

    #[test]
    fn the_api_servers_defaults_are_followed() {
        let iss = "https://idp.example/realms/acme";
        let k = |claim: &str, prefix: Option<&str>| KubeNames {
            claim: claim.into(),
            prefix: prefix.map(str::to_string),
        };
        assert_eq!(
            k("email", None).of(&claims(), iss).as_deref(),
            Some("alice@example.com")
        );
        assert_eq!(
            k("sub", None).of(&claims(), iss).as_deref(),
            Some("https://idp.example/realms/acme#4f1c")
        );
        assert_eq!(
            k("sub", Some("-")).of(&claims(), iss).as_deref(),
            Some("4f1c")
        );
        assert_eq!(
            k("email", Some("oidc:")).of(&claims(), iss).as_deref(),
            Some("oidc:alice@example.com")
        );
        assert_eq!(k("groups", None).of(&claims(), iss), None);
        let mut unverified = claims();
        unverified.insert("email_verified".into(), false.into());
        assert_eq!(k("email", None).of(&unverified, iss), None);
        // Bounded and clean as status.users keeps names.
        let mut long = claims();
        long.insert("preferred_username".into(), "x".repeat(300).into());
        assert_eq!(
            k("preferred_username", Some("-"))
                .of(&long, iss)
                .unwrap()
                .len(),
            128
        );
    }
}
