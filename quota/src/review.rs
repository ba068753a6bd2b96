//! An `admission.k8s.io/v1` AdmissionReview as the webhook reads it: the
//! request's envelope, with the objects left as raw JSON for the adapter of
//! their kind to parse once. Pure, so it can be fuzzed without a server.

use crate::usage::ObjectMeta;
use serde::Deserialize;
use serde_json::value::RawValue;

pub const REVIEW_API_VERSION: &str = "admission.k8s.io/v1";

#[derive(Deserialize)]
struct Review {
    #[serde(default, rename = "apiVersion")]
    api_version: String,
    request: Option<Request>,
}

#[derive(Default, Deserialize)]
pub struct Gvk {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub kind: String,
}

#[derive(Default, Deserialize)]
pub struct Gvr {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub resource: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Request {
    pub uid: String,
    #[serde(default)]
    pub kind: Gvk,
    #[serde(default)]
    pub resource: Gvr,
    #[serde(default)]
    pub sub_resource: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub namespace: Option<String>,
    pub operation: String,
    #[serde(default)]
    pub object: Option<Box<RawValue>>,
    #[serde(default)]
    pub old_object: Option<Box<RawValue>>,
    #[serde(default)]
    pub dry_run: Option<bool>,
    /// Who sent the write under review, as the API server authenticated
    /// them: what a request may claim about itself is trusted only from
    /// the identity it names.
    #[serde(default)]
    pub user_info: UserInfo,
}

/// `request.userInfo` of an AdmissionReview.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
pub struct UserInfo {
    #[serde(default)]
    pub username: String,
    #[serde(default)]
    pub groups: Vec<String>,
}

/// The request of a review body, or why it is not one we serve (a 400).
pub fn decode(body: &[u8]) -> Result<Request, String> {
    let review: Review =
        serde_json::from_slice(body).map_err(|e| format!("malformed AdmissionReview: {e}"))?;
    if review.api_version != REVIEW_API_VERSION {
        return Err(format!(
            "AdmissionReview apiVersion '{}' is not served; use {REVIEW_API_VERSION}",
            review.api_version
        ));
    }
    review
        .request
        .ok_or_else(|| "AdmissionReview has no request".to_string())
}

impl Request {
    pub fn dry(&self) -> bool {
        self.dry_run == Some(true)
    }

    /// Whether the write under review was sent by `username` (an empty
    /// name is nobody's).
    pub fn sent_by(&self, username: &str) -> bool {
        !username.is_empty() && self.user_info.username == username
    }

    /// Namespace and name of the object under review (the request's own
    /// fields first; generated names appear in the object).
    pub fn target(&self) -> (String, String) {
        let given = |v: &Option<String>| v.clone().filter(|s| !s.is_empty());
        if let (Some(ns), Some(name)) = (given(&self.namespace), given(&self.name)) {
            return (ns, name);
        }
        // Only then read the object's metadata (cluster-scoped objects have
        // no namespace; a generated name is in the object).
        let from_obj = self
            .object
            .as_deref()
            .or(self.old_object.as_deref())
            .map(raw_meta_name)
            .unwrap_or_default();
        let ns = given(&self.namespace).unwrap_or(from_obj.0);
        let name = given(&self.name)
            .or(Some(from_obj.1).filter(|s| !s.is_empty()))
            .unwrap_or_else(|| self.uid.clone());
        (ns, name)
    }
}

/// The metadata of a raw object (empty when it has none or does not read).
pub fn raw_meta(raw: &RawValue) -> ObjectMeta {
    #[derive(Deserialize, Default)]
    struct M {
        #[serde(default)]
        metadata: ObjectMeta,
    }
    let m: M = serde_json::from_str(raw.get()).unwrap_or_default();
    m.metadata
}

fn raw_meta_name(raw: &RawValue) -> (String, String) {
    let m = raw_meta(raw);
    (m.namespace, m.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_who_sent_the_write() {
        let r = decode(
            br#"{"apiVersion":"admission.k8s.io/v1","request":{"uid":"u","operation":"CREATE","userInfo":{"username":"system:serviceaccount:bizrq-system:bizrq","uid":"x","groups":["system:serviceaccounts"]}}}"#,
        )
        .unwrap();
        assert_eq!(r.user_info.groups, vec!["system:serviceaccounts"]);
        assert!(r.sent_by("system:serviceaccount:bizrq-system:bizrq"));
        assert!(!r.sent_by("system:serviceaccount:bizrq-system:other"));
        assert!(!r.sent_by(""));
    }

    #[test]
    fn decodes_a_review_and_refuses_what_is_not_one() {
        let r = decode(
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","operation":"CREATE","namespace":"ml","object":{"metadata":{"name":"web"}}}}"#,
        )
        .unwrap();
        assert_eq!(r.target(), ("ml".to_string(), "web".to_string()));
        assert!(!r.sent_by(""), "no userInfo is nobody");
        for (body, says) in [
            (&b"{"[..], "malformed AdmissionReview"),
            (
                br#"{"apiVersion":"admission.k8s.io/v1beta1"}"#,
                "is not served",
            ),
            (br#"{"apiVersion":"admission.k8s.io/v1"}"#, "has no request"),
        ] {
            let err = decode(body).err().unwrap();
            assert!(err.contains(says), "{err}");
        }
    }
}
