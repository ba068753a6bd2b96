//! An `admission.k8s.io/v1` AdmissionReview as the webhook reads it: the
//! request's envelope, with the objects left as raw JSON for the adapter of
//! their kind to parse once. Pure, so it can be fuzzed without a server.

use crate::text;
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

/// The longest review uid accepted (`Request::oversized_uid`), in bytes.
pub const MAX_UID: usize = 128;

/// Fields of an object whose string values are identifiers: names, uids,
/// kinds (a Deployment's, a container's, an owner's, a scale target's),
/// and the PriorityClass a queue entry keeps.
const IDENTIFIER_FIELDS: [&str; 7] = [
    "name",
    "generateName",
    "namespace",
    "uid",
    "kind",
    "apiVersion",
    "priorityClassName",
];
/// Maps whose values are label values (the gpu-type and cpu-type labels
/// among them).
const LABEL_MAPS: [&str; 3] = ["labels", "matchLabels", "nodeSelector"];
/// Annotations bizrq reads; other annotations are free text it never keeps.
const OUR_ANNOTATIONS: [&str; 2] = ["bizrq.io/", "biz.group.resource.quota"];

impl Request {
    /// The first string of the review that no identifier may hold
    /// (`text::hostile_char`), as a message naming the field: the
    /// envelope's uid, names, kinds and `userInfo`, and in the objects every
    /// key (resource names included), every identifier field, every label
    /// value and the values of bizrq's own annotations. Free text bizrq
    /// never keeps (an env value, another annotation) is not read.
    pub fn hostile_field(&self) -> Option<Hostile> {
        let envelope = [
            ("request.uid", Some(&self.uid)),
            ("request.operation", Some(&self.operation)),
            ("request.name", self.name.as_ref()),
            ("request.namespace", self.namespace.as_ref()),
            ("request.subResource", self.sub_resource.as_ref()),
            ("request.kind.group", Some(&self.kind.group)),
            ("request.kind.version", Some(&self.kind.version)),
            ("request.kind.kind", Some(&self.kind.kind)),
            ("request.resource.group", Some(&self.resource.group)),
            ("request.resource.version", Some(&self.resource.version)),
            ("request.resource.resource", Some(&self.resource.resource)),
            ("request.userInfo.username", Some(&self.user_info.username)),
        ];
        for (field, value) in envelope {
            if let Some(c) = value.and_then(|v| text::hostile_char(v)) {
                return Some(refused(field, c));
            }
        }
        for (i, g) in self.user_info.groups.iter().enumerate() {
            if let Some(c) = text::hostile_char(g) {
                return Some(refused(&format!("request.userInfo.groups[{i}]"), c));
            }
        }
        self.hostile_in_objects()
    }

    /// The refusal of a review uid longer than `MAX_UID` bytes, if it is:
    /// a tenant's charge is stored under the review's uid, so one the size
    /// of a request body would fill its quota's status (the API server's
    /// are 36). A DELETE's uid is never stored, so never asked about.
    pub fn oversized_uid(&self) -> Option<String> {
        let n = self.uid.len();
        (n > MAX_UID).then(|| {
            format!(
                "bizrq: request.uid is {n} bytes long, more than the {MAX_UID} a review's \
                 uid may be (the API server's are 36); refused before anything is stored"
            )
        })
    }

    /// The review uid as a log line may carry it: cut to `MAX_UID`.
    pub fn uid_for_log(&self) -> &str {
        let mut end = self.uid.len().min(MAX_UID);
        while !self.uid.is_char_boundary(end) {
            end -= 1;
        }
        &self.uid[..end]
    }

    /// `hostile_field` of what names the object under review only: its
    /// name and namespace, and the objects. A DELETE's username or review
    /// uid is never stored (an HPA's DELETE leaves the lowered charge its
    /// own uid), so only these decide whether it is read.
    pub fn hostile_target(&self) -> Option<Hostile> {
        let fields = [
            ("request.name", self.name.as_ref()),
            ("request.namespace", self.namespace.as_ref()),
        ];
        for (field, value) in fields {
            if let Some(c) = value.and_then(|v| text::hostile_char(v)) {
                return Some(refused(field, c));
            }
        }
        self.hostile_in_objects()
    }

    fn hostile_in_objects(&self) -> Option<Hostile> {
        [
            ("request.object", &self.object),
            ("request.oldObject", &self.old_object),
        ]
        .into_iter()
        .find_map(|(at, raw)| raw.as_deref().and_then(|r| hostile_in_raw(r.get(), at)))
    }
}

/// A string of a review no identifier may hold: where, and which
/// character.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hostile {
    /// The field, as a path in the review (`request.userInfo.username`,
    /// `a key in request.object.metadata.labels`).
    pub field: String,
    pub found: char,
}

impl Hostile {
    /// The message of the denial.
    pub fn refusal(&self) -> String {
        format!(
            "bizrq: {} contains {}; refused before anything is stored (Kubernetes names, \
             labels, uids and usernames hold none)",
            self.field,
            text::describe(self.found)
        )
    }

    /// The warning of a DELETE let through without touching anything.
    pub fn let_through(&self) -> String {
        format!(
            "bizrq: {} contains {}; no object of such a name is charged, so this DELETE \
             releases nothing",
            self.field,
            text::describe(self.found)
        )
    }
}

fn refused(field: &str, c: char) -> Hostile {
    Hostile {
        field: field.to_string(),
        found: c,
    }
}

/// Whether raw JSON text may hold a hostile character at all: only as an
/// escape (`\\u…`, `\\n`, `\\t`, …; JSON holds no raw control below
/// U+0020), as DEL, or as the UTF-8 of a C1 control or a bidirectional
/// character. Most reviews hold none of these, and are not parsed again.
fn may_hold_hostile(json: &str) -> bool {
    let b = json.as_bytes();
    (0..b.len()).any(|i| match b[i] {
        b'\\' => matches!(b.get(i + 1), Some(b'u' | b'n' | b't' | b'r' | b'b' | b'f')),
        0x7F => true,
        0xC2 => matches!(b.get(i + 1), Some(0x80..=0x9F)),
        0xE2 => matches!(
            (b.get(i + 1), b.get(i + 2)),
            (Some(0x80), Some(0xAA..=0xAE)) | (Some(0x81), Some(0xA6..=0xA9))
        ),
        _ => false,
    })
}

/// The first hostile string of an object (raw JSON), by the rules of
/// `Request::hostile_field`.
fn hostile_in_raw(json: &str, at: &str) -> Option<Hostile> {
    if !may_hold_hostile(json) {
        return None;
    }
    // A walk that allocates nothing first (most objects that get here hold
    // only an escaped line break in an annotation); the path is written out
    // by a second walk, over a parsed value, only when it found something.
    let mut de = serde_json::Deserializer::from_str(json);
    let clean = serde::de::DeserializeSeed::deserialize(
        Scan {
            within: Within::Other,
            checked: false,
        },
        &mut de,
    )
    .is_ok();
    if clean {
        return None;
    }
    let value: serde_json::Value = serde_json::from_str(json).ok()?;
    let mut path = vec![Step::Key(at)];
    hostile_in_value(&value, &mut path, Within::Other)
}

/// The rules of `hostile_in_value`, as a serde visitor over the text: an
/// error as soon as a checked string or a key holds a hostile character,
/// nothing allocated for strings without escapes. It reads at least what
/// `hostile_in_value` reads (keys below a label's value too), so "clean"
/// here is clean there; its error only sends the object to that walk.
#[derive(Clone, Copy)]
struct Scan {
    within: Within,
    checked: bool,
}

/// What a key says of its value, read without keeping the key.
struct KeyInfo {
    identifier: bool,
    labels: bool,
    annotations: bool,
    ours: bool,
}

struct KeyScan;

impl<'de> serde::de::DeserializeSeed<'de> for KeyScan {
    type Value = KeyInfo;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<KeyInfo, D::Error> {
        d.deserialize_str(self)
    }
}

impl serde::de::Visitor<'_> for KeyScan {
    type Value = KeyInfo;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a key")
    }
    fn visit_str<E: serde::de::Error>(self, k: &str) -> Result<KeyInfo, E> {
        if text::hostile_char(k).is_some() {
            return Err(E::custom("hostile"));
        }
        Ok(KeyInfo {
            identifier: IDENTIFIER_FIELDS.contains(&k),
            labels: LABEL_MAPS.contains(&k),
            annotations: k == "annotations",
            ours: OUR_ANNOTATIONS.iter().any(|p| k.starts_with(p)),
        })
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for Scan {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Scan {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("JSON")
    }
    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<(), E> {
        match self.checked && text::hostile_char(s).is_some() {
            true => Err(E::custom("hostile")),
            false => Ok(()),
        }
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let item = Scan {
            within: Within::Other,
            checked: false,
        };
        while seq.next_element_seed(item)?.is_some() {}
        Ok(())
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(k) = map.next_key_seed(KeyScan)? {
            let checked = match self.within {
                Within::Labels => true,
                Within::Annotations => k.ours,
                Within::Other => k.identifier,
                Within::Done => false,
            };
            let within = match self.within {
                Within::Other if k.labels => Within::Labels,
                Within::Other if k.annotations => Within::Annotations,
                Within::Other => Within::Other,
                // Values below a label or an annotation are not read.
                _ => Within::Done,
            };
            map.next_value_seed(Scan { within, checked })?;
        }
        Ok(())
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Within {
    Labels,
    Annotations,
    Other,
    /// Inside a label's or an annotation's value: keys only.
    Done,
}

/// Where a walk is, written out only when it finds something.
enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

fn written(path: &[Step]) -> String {
    let mut out = String::new();
    for (i, step) in path.iter().enumerate() {
        match step {
            Step::Key(k) if i == 0 => out.push_str(k),
            Step::Key(k) => {
                out.push('.');
                out.extend(k.escape_debug());
            }
            Step::Index(n) => out.push_str(&format!("[{n}]")),
        }
    }
    out
}

fn hostile_in_value<'a>(
    v: &'a serde_json::Value,
    path: &mut Vec<Step<'a>>,
    within: Within,
) -> Option<Hostile> {
    use serde_json::Value;
    match v {
        Value::Array(a) => a.iter().enumerate().find_map(|(i, v)| {
            path.push(Step::Index(i));
            let found = hostile_in_value(v, path, Within::Other);
            path.pop();
            found
        }),
        Value::Object(o) => o.iter().find_map(|(k, v)| {
            if let Some(c) = text::hostile_char(k) {
                return Some(refused(&format!("a key in {}", written(path)), c));
            }
            let checked = match within {
                Within::Labels => true,
                Within::Annotations => OUR_ANNOTATIONS.iter().any(|p| k.starts_with(p)),
                Within::Other => IDENTIFIER_FIELDS.contains(&k.as_str()),
                Within::Done => false,
            };
            path.push(Step::Key(k));
            let found = match v {
                Value::String(s) if checked => {
                    text::hostile_char(s).map(|c| refused(&written(path), c))
                }
                Value::String(_) => None,
                _ if within != Within::Other => None,
                _ if LABEL_MAPS.contains(&k.as_str()) => hostile_in_value(v, path, Within::Labels),
                _ if k == "annotations" => hostile_in_value(v, path, Within::Annotations),
                _ => hostile_in_value(v, path, Within::Other),
            };
            path.pop();
            found
        }),
        _ => None,
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
    fn a_uid_past_its_bound_is_refused_and_logged_cut() {
        let mut r = review(serde_json::json!({"uid": "u", "operation": "CREATE"}));
        assert_eq!(r.oversized_uid(), None);
        r.uid = "é".repeat(MAX_UID / 2);
        assert_eq!(r.oversized_uid(), None, "exactly the bound");
        r.uid.push('x');
        let m = r.oversized_uid().unwrap();
        assert!(m.contains("request.uid is 129 bytes long"), "{m}");
        // Cut on a character boundary, never past the bound.
        r.uid = format!("x{}", "é".repeat(MAX_UID));
        assert!(r.uid_for_log().len() <= MAX_UID);
        assert!(r.uid_for_log().starts_with("xé"));
    }

    fn review(request: serde_json::Value) -> Request {
        let body = serde_json::json!({"apiVersion": REVIEW_API_VERSION, "request": request});
        decode(body.to_string().as_bytes()).unwrap()
    }

    fn deployment(name: &str, labels: serde_json::Value, res: &str) -> serde_json::Value {
        serde_json::json!({
            "uid": "r-1", "operation": "CREATE", "namespace": "ml",
            "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
            "userInfo": {"username": "alice", "groups": ["dev"]},
            "object": {"metadata": {"name": name, "namespace": "ml", "labels": labels,
                "annotations": {"note": "free\u{1b} text", "bizrq.io/min-replicas": "1"}},
              "spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "c",
                "env": [{"name": "E", "value": "bell\u{7}"}],
                "resources": {"requests": {res: "1"}}}]}}}}
        })
    }

    #[test]
    fn every_identifier_of_a_review_is_checked_and_named() {
        let clean = deployment("web", serde_json::json!({"a": "b"}), "cpu");
        assert_eq!(
            review(clean.clone()).hostile_field(),
            None,
            "free text (an env value, another annotation) is not an identifier"
        );
        let cases: Vec<(serde_json::Value, &str)> = vec![
            (
                serde_json::json!({"uid": "r\u{0}"}),
                "request.uid contains a control character (U+0000)",
            ),
            (
                serde_json::json!({"userInfo": {"username": "al\u{0}ice"}}),
                "request.userInfo.username contains a control character (U+0000)",
            ),
            (
                serde_json::json!({"userInfo": {"username": "a", "groups": ["ok", "x\u{202E}"]}}),
                "request.userInfo.groups[1] contains a bidirectional override character (U+202E)",
            ),
            (
                serde_json::json!({"name": "we\u{1b}b"}),
                "request.name contains a control character (U+001B)",
            ),
            (
                serde_json::json!({"namespace": "ml\n"}),
                "request.namespace contains a control character (U+000A)",
            ),
        ];
        for (patch, says) in cases {
            let mut r = clean.clone();
            for (k, v) in patch.as_object().unwrap() {
                r[k] = v.clone();
            }
            let m = review(r).hostile_field().expect(says).refusal();
            assert!(m.contains(says), "{m}");
            assert!(m.contains("refused before anything is stored"), "{m}");
        }
        let objects = [
            (deployment("we\u{0}b", serde_json::json!({}), "cpu"), "request.object.metadata.name contains a control character (U+0000)"),
            (deployment("web", serde_json::json!({"biz.group.resource.quota/gpu-type": "A100\u{0}"}), "cpu"), "request.object.metadata.labels.biz.group.resource.quota/gpu-type contains a control character (U+0000)"),
            (deployment("web", serde_json::json!({"biz.group.resource.quota/cpu-type": "\u{2066}x"}), "cpu"), "cpu-type contains a bidirectional override character (U+2066)"),
            (deployment("web", serde_json::json!({}), "example.com/f\u{0}o"), "a key in request.object.spec.template.spec.containers[0].resources.requests contains a control character (U+0000)"),
            (deployment("web", serde_json::json!({"k\u{85}": "v"}), "cpu"), "a key in request.object.metadata.labels contains a control character (U+0085)"),
        ];
        for (r, says) in objects {
            let m = review(r).hostile_field().expect(says).refusal();
            assert!(m.contains(says), "{m}");
        }
        let mut held = clean.clone();
        held["object"]["metadata"]["annotations"]["bizrq.io/min-replicas"] = "1\u{7f}".into();
        assert!(review(held)
            .hostile_field()
            .unwrap()
            .field
            .contains("bizrq.io/min-replicas"));
        let mut old = clean;
        old["operation"] = "DELETE".into();
        old["userInfo"]["username"] = "x\u{0}".into();
        old["oldObject"] = serde_json::json!({"metadata": {"uid": "u\u{0}"}});
        let r = review(old);
        assert_eq!(
            r.hostile_field().unwrap().field,
            "request.userInfo.username"
        );
        let h = r.hostile_target().unwrap();
        assert_eq!(
            (h.field.as_str(), h.found),
            ("request.oldObject.metadata.uid", '\0')
        );
        assert!(h.let_through().contains("releases nothing"), "{h:?}");
    }

    /// The scan that allocates nothing never calls clean what the walk
    /// that names the field would refuse.
    #[test]
    fn the_scan_and_the_walk_agree() {
        let docs = [
            r#"{"metadata":{"name":"a\nb"}}"#,
            r#"{"metadata":{"annotations":{"note":"x\ny","bizrq.io/x":"\u0000"}}}"#,
            r#"{"metadata":{"annotations":{"note":"x\ny"}}}"#,
            r#"{"metadata":{"labels":{"a":"\t"}}}"#,
            r#"{"metadata":{"labels":{"a":{"b\n":"c"}}}}"#,
            r#"{"spec":{"containers":[{"name":"c","args":["\u001b"],"env":[{"name":"E","value":"\n"}]}]}}"#,
            r#"{"spec":{"containers":[{"name":"c\u202e"}]}}"#,
            r#"{"spec":{"x":[["\u0000"],{"uid":"\b"}]}}"#,
            r#"{"spec":{"resources":{"requests":{"a\u0085b":"1"}}}}"#,
            "{\"spec\":{\"nodeSelector\":{\"gpu\":\"A100\u{2066}\"}}}",
        ];
        for doc in docs {
            let value: serde_json::Value = serde_json::from_str(doc).unwrap();
            let walked = hostile_in_value(&value, &mut vec![Step::Key("o")], Within::Other);
            assert_eq!(hostile_in_raw(doc, "o"), walked, "{doc}");
        }
        assert!(hostile_in_raw(docs[0], "o").is_some());
        assert!(hostile_in_raw(docs[2], "o").is_none());
        assert!(hostile_in_raw(docs[5], "o").is_none());
    }

    #[test]
    fn only_text_that_may_hold_a_hostile_character_is_walked() {
        assert!(!may_hold_hostile(r#"{"a":"b\"c\\d","é":"名"}"#));
        for raw in [
            r#""\u0000""#,
            r#""a\nb""#,
            r#""\t""#,
            "\"\u{7f}\"",
            "\"\u{85}\"",
            "\"\u{202A}\"",
            "\"\u{2069}\"",
        ] {
            assert!(may_hold_hostile(raw), "{raw}");
        }
        assert!(!may_hold_hostile("\"\u{2028}\u{20AC}\u{A0}\""));
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
