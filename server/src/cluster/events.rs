//! Kubernetes Events (`events.k8s.io/v1`) on quotas and workloads:
//! admission denials, cash exhaustion, reclaim marks. Which Events exist,
//! on what, with which reasons: docs/events-and-crd.md.
//!
//! Published off the hot path through a bounded queue (a full queue drops
//! and counts, never slows an admission). A repeat of the same notice —
//! same object, reason, action and note — within six minutes becomes the
//! series of the first Event (`series.count`); any other notice is an Event
//! of its own, so an Event's note always says what happened. An Event the
//! API server refuses is logged at warn and counted (`bizrq_events_failed`).
//!
//! The queue's consumer is this module's `Publisher`, not kube-runtime's
//! `events::Recorder`, which gives up four things the publisher keeps:
//! - Its series key is object, type, reason and action, not the note: a
//!   second denial with a different note would patch the first Event's
//!   series, and the Event would keep saying the first denial.
//! - Its series cache is pruned only by age: every distinct object seen
//!   within six minutes stays in memory, however many there are; here at
//!   most `SERIES_MAX` series are kept, the oldest forgotten first.
//! - It names an Event `<object name>.<nanoseconds>` and posts the note as
//!   given: a long or non-DNS object name, or a note over 1 kB, makes an
//!   Event the API server refuses. Here names are DNS-1123 subdomains
//!   unique per replica, and notes and the instance are cut to the limits.
//! - A repeat whose Event has expired fails its patch (404) and keeps
//!   failing until its cache entry ages out; here it starts a new Event.
//!
//! It also reads the wall clock itself, where this module's clock is
//! passed in, as its tests need.

use crate::metrics::Metrics;
use crate::service::notify::Notice;
use crate::service::notify::Notifier;
use crate::service::{Clock, ServiceError};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use quota::admission::Denial;
use quota::object::{API_GROUP, KIND};
use quota::tree::TreeError;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::mpsc;

const QUEUE: usize = 1024;
/// The reporting controller (`reportingController`, `kubectl describe`'s "From").
pub const REPORTER: &str = "bizrq";
/// A repeat this soon after the last one extends its series.
const SERIES_TTL_MS: i64 = 6 * 60 * 1000;
/// Series remembered at once; the oldest is forgotten first.
const SERIES_MAX: usize = 4096;
/// API server limits on an Event: note 1 kB, reportingInstance 128,
/// name a DNS-1123 subdomain of at most 253.
const NOTE_MAX: usize = 1024;
const INSTANCE_MAX: usize = 128;
const NAME_MAX: usize = 253;

/// Reasons on the object under review.
pub const QUOTA_EXCEEDED: &str = "QuotaExceeded";
pub const CASH_EXHAUSTED: &str = "CashExhausted";
pub const TREE_RULE_VIOLATED: &str = "TreeRuleViolated";
/// Reason on the quota whose limit refused someone else's change.
pub const ADMISSION_DENIED: &str = "AdmissionDenied";

/// Where Events go: a cluster, or nowhere (standalone).
#[derive(Clone, Default)]
pub struct Events {
    tx: Option<mpsc::Sender<Notice>>,
    metrics: Option<Arc<Metrics>>,
}

impl Events {
    pub fn start(client: Client, instance: String, metrics: Arc<Metrics>) -> Events {
        let (tx, mut rx) = mpsc::channel::<Notice>(QUEUE);
        let mut publisher = Publisher::new(
            client,
            &instance,
            metrics.clone(),
            Arc::new(crate::util::now_ms),
        );
        tokio::spawn(async move {
            while let Some(n) = rx.recv().await {
                publisher.publish(&n).await;
            }
        });
        Events {
            tx: Some(tx),
            metrics: Some(metrics),
        }
    }

    pub fn emit(&self, n: Notice) {
        let Some(tx) = &self.tx else { return };
        if tx.try_send(n).is_err() {
            if let Some(m) = &self.metrics {
                m.events_dropped.inc();
            }
        }
    }

    pub fn enabled(&self) -> bool {
        self.tx.is_some()
    }
}

impl Notifier for Events {
    fn emit(&self, n: Notice) {
        Events::emit(self, n)
    }

    fn enabled(&self) -> bool {
        Events::enabled(self)
    }
}

/// The Event identity a repeat must match to join a series.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct SeriesKey {
    regarding: [Option<String>; 5],
    warning: bool,
    reason: &'static str,
    action: &'static str,
    note: String,
}

impl SeriesKey {
    fn of(n: &Notice) -> SeriesKey {
        let r = &n.regarding;
        SeriesKey {
            regarding: [
                r.api_version.clone(),
                r.kind.clone(),
                r.namespace.clone(),
                r.name.clone(),
                r.uid.clone(),
            ],
            warning: n.warning,
            reason: n.reason,
            action: n.action,
            note: n.note.clone(),
        }
    }
}

struct Posted {
    namespace: String,
    name: String,
    count: i32,
    last_ms: i64,
}

/// Writes notices as Events, one at a time (the queue's single consumer).
pub struct Publisher {
    client: Client,
    instance: String,
    /// Distinguishes this replica's Event names from another's.
    tag: String,
    seq: u64,
    clock: Clock,
    metrics: Arc<Metrics>,
    series: HashMap<SeriesKey, Posted>,
}

impl Publisher {
    pub fn new(client: Client, instance: &str, metrics: Arc<Metrics>, clock: Clock) -> Publisher {
        Publisher {
            client,
            instance: truncate(instance, INSTANCE_MAX),
            tag: crate::util::sha256_hex(instance)[..6].to_string(),
            seq: 0,
            clock,
            metrics,
            series: HashMap::new(),
        }
    }

    /// Publish, or log at warn and count why not.
    pub async fn publish(&mut self, n: &Notice) {
        if let Err(e) = self.try_publish(n).await {
            self.metrics.events_failed.inc();
            tracing::warn!(
                error = %e,
                reason = n.reason,
                kind = n.regarding.kind.as_deref().unwrap_or(""),
                namespace = n.regarding.namespace.as_deref().unwrap_or(""),
                name = n.regarding.name.as_deref().unwrap_or(""),
                "event not published"
            );
        }
    }

    async fn try_publish(&mut self, n: &Notice) -> Result<(), kube::Error> {
        let now = (self.clock)();
        self.series.retain(|_, p| p.last_ms + SERIES_TTL_MS > now);
        let key = SeriesKey::of(n);
        if let Some(p) = self.series.get_mut(&key) {
            let count = p.count + 1;
            let api: Api<Event> = Api::namespaced(self.client.clone(), &p.namespace);
            let patch = serde_json::json!({
                "series": { "count": count, "lastObservedTime": micro_time(now) }
            });
            match api
                .patch(&p.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {
                    p.count = count;
                    p.last_ms = now;
                    return Ok(());
                }
                // Gone (expired or deleted): start a new Event.
                Err(kube::Error::Api(s)) if s.is_not_found() => {
                    self.series.remove(&key);
                }
                Err(e) => return Err(e),
            }
        }
        self.seq += 1;
        let name = event_name(
            n.regarding.name.as_deref().unwrap_or(""),
            now,
            &self.tag,
            self.seq,
        );
        let ev = event_body(n, &name, &self.instance, now);
        let namespace = ev.metadata.namespace.clone().unwrap_or_default();
        Api::<Event>::namespaced(self.client.clone(), &namespace)
            .create(&PostParams::default(), &ev)
            .await?;
        if self.series.len() >= SERIES_MAX {
            let oldest = self
                .series
                .iter()
                .min_by_key(|(_, p)| p.last_ms)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                self.series.remove(&k);
            }
        }
        self.series.insert(
            key,
            Posted {
                namespace,
                name,
                count: 1,
                last_ms: now,
            },
        );
        Ok(())
    }
}

fn micro_time(ms: i64) -> MicroTime {
    MicroTime(Timestamp::from_millisecond(ms).unwrap_or(Timestamp::UNIX_EPOCH))
}

/// The Event a notice becomes. A cluster-scoped object's Events live in
/// `default`, as the API server requires.
pub fn event_body(n: &Notice, name: &str, instance: &str, now_ms: i64) -> Event {
    let namespace = n
        .regarding
        .namespace
        .clone()
        .filter(|ns| !ns.is_empty())
        .unwrap_or_else(|| "default".into());
    Event {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace),
            ..ObjectMeta::default()
        },
        event_time: Some(micro_time(now_ms)),
        type_: Some(if n.warning { "Warning" } else { "Normal" }.into()),
        reason: Some(n.reason.into()),
        action: Some(n.action.into()),
        note: Some(truncate(&n.note, NOTE_MAX)),
        regarding: Some(n.regarding.clone()),
        reporting_controller: Some(REPORTER.into()),
        reporting_instance: Some(instance.to_string()),
        ..Event::default()
    }
}

/// `<object name>.<time><replica><sequence>`, a valid DNS-1123 subdomain
/// of at most 253 characters whatever the object's name, unique per
/// replica (sequence) and across replicas (tag).
pub fn event_name(object: &str, now_ms: i64, tag: &str, seq: u64) -> String {
    let suffix = format!("{now_ms:x}{tag}{seq:x}");
    let labels: Vec<String> = object
        .to_ascii_lowercase()
        .split('.')
        .map(|l| {
            l.chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
                .collect::<String>()
                .trim_matches('-')
                .to_string()
        })
        .filter(|l| !l.is_empty())
        .collect();
    let mut base = if labels.is_empty() {
        REPORTER.to_string()
    } else {
        labels.join(".")
    };
    base.truncate(NAME_MAX - suffix.len() - 1);
    let base = base.trim_end_matches(['-', '.']);
    format!("{base}.{suffix}")
}

/// At most `max` bytes, cut at a character boundary; a cut ends in "…".
fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max - '…'.len_utf8();
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// A quota by name; `uid` when known (`kubectl describe` matches on it).
pub fn quota_ref(name: &str, uid: Option<String>) -> ObjectReference {
    ObjectReference {
        api_version: Some(format!("{API_GROUP}/v1")),
        kind: Some(KIND.into()),
        name: Some(name.into()),
        uid,
        ..ObjectReference::default()
    }
}

/// A workload by its reference `group/Kind/ns/name` and `apiVersion`.
pub fn workload_ref(api_version: &str, wref: &str) -> Option<ObjectReference> {
    let w = quota::workload::WorkloadRef::parse(wref)?;
    Some(ObjectReference {
        api_version: Some(api_version.into()),
        kind: Some(w.kind.into()),
        namespace: Some(w.namespace.into()),
        name: Some(w.name.into()),
        ..ObjectReference::default()
    })
}

/// Why a review was refused, as Events state it: the reason on the object
/// under review, and the quotas whose limits refused it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub reason: &'static str,
    pub quotas: Vec<String>,
}

/// The refusal a service error is, when it is one (a broken quota or tree
/// rule; not bad input, a missing object or an internal failure).
pub fn refusal(e: &ServiceError) -> Option<Refusal> {
    let (reason, mut quotas): (_, Vec<String>) = match e {
        ServiceError::Denied(Denial::Short(s)) => {
            (QUOTA_EXCEEDED, s.iter().map(|x| x.quota.clone()).collect())
        }
        ServiceError::Denied(Denial::CashExhausted(c)) => (CASH_EXHAUSTED, vec![c.quota.clone()]),
        ServiceError::Denied(Denial::Budget(b)) => (CASH_EXHAUSTED, vec![b.quota().to_string()]),
        // The parent whose remainder was too small.
        ServiceError::Tree(TreeError::DoesNotFit(s, _)) => {
            (QUOTA_EXCEEDED, s.iter().map(|x| x.quota.clone()).collect())
        }
        ServiceError::Tree(_) => (TREE_RULE_VIOLATED, Vec::new()),
        _ => return None,
    };
    quotas.dedup();
    Some(Refusal { reason, quotas })
}

/// The Events of one refused review: one on each quota that refused it
/// (unless that quota is the subject), then one on the object under
/// review (`subject`). `uid_of` finds a quota's uid.
pub fn denial_notices(
    subject: &ObjectReference,
    action: &'static str,
    refusal: &Refusal,
    message: &str,
    uid_of: impl Fn(&str) -> Option<String>,
) -> Vec<Notice> {
    let mut out = Vec::new();
    let is_quota = subject.kind.as_deref() == Some(KIND);
    let what = format!(
        "{} {}{}",
        subject.kind.as_deref().unwrap_or(""),
        subject
            .namespace
            .as_deref()
            .filter(|ns| !ns.is_empty())
            .map(|ns| format!("{ns}/"))
            .unwrap_or_default(),
        subject.name.as_deref().unwrap_or("")
    );
    for q in &refusal.quotas {
        if is_quota && subject.name.as_deref() == Some(q.as_str()) {
            continue;
        }
        out.push(Notice {
            regarding: quota_ref(q, uid_of(q)),
            warning: true,
            reason: ADMISSION_DENIED,
            action,
            note: format!("{action} of {what} refused: {message}"),
        });
    }
    out.push(Notice {
        regarding: subject.clone(),
        warning: true,
        reason: refusal.reason,
        action,
        note: message.to_string(),
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{Method, Request, Response};
    use kube::client::Body;
    use quota::admission::{CashShortfall, Shortfall};
    use serde_json::{json, Value};

    type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

    const T: i64 = 1_795_000_000_000; // 2026-11-18T11:06:40Z

    fn publisher(now: i64) -> (Publisher, Handle, Arc<Metrics>) {
        let (svc, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let metrics = Arc::new(Metrics::default());
        let p = Publisher::new(
            Client::new(svc, "default"),
            "bizrq-0",
            metrics.clone(),
            Arc::new(move || now),
        );
        (p, handle, metrics)
    }

    async fn next(
        handle: &mut Handle,
    ) -> (
        Method,
        String,
        Value,
        tower_test::mock::SendResponse<Response<Body>>,
    ) {
        let (req, send) = handle.next_request().await.expect("a request");
        let method = req.method().clone();
        let path = req.uri().path().to_string();
        let bytes = http_body_util::BodyExt::collect(req.into_body())
            .await
            .unwrap()
            .to_bytes();
        (method, path, serde_json::from_slice(&bytes).unwrap(), send)
    }

    fn answer(send: tower_test::mock::SendResponse<Response<Body>>, code: u16, body: &Value) {
        send.send_response(
            Response::builder()
                .status(code)
                .body(Body::from(serde_json::to_vec(body).unwrap()))
                .unwrap(),
        );
    }

    fn shortfall(quota: &str) -> Shortfall {
        Shortfall {
            quota: quota.into(),
            key: "requests.nvidia.com/gpu".into(),
            asked: "12".parse().unwrap(),
            left: "8".parse().unwrap(),
            hard: "16".parse().unwrap(),
            borrowing: None,
        }
    }

    fn deployment(uid: Option<&str>) -> ObjectReference {
        ObjectReference {
            api_version: Some("apps/v1".into()),
            kind: Some("Deployment".into()),
            namespace: Some("nlp".into()),
            name: Some("train".into()),
            uid: uid.map(str::to_string),
            ..ObjectReference::default()
        }
    }

    fn notice(note: &str) -> Notice {
        Notice {
            regarding: deployment(Some("d-1")),
            warning: true,
            reason: QUOTA_EXCEEDED,
            action: "Update",
            note: note.into(),
        }
    }

    #[tokio::test]
    async fn a_notice_is_posted_as_this_exact_event() {
        let (mut p, mut handle, metrics) = publisher(T);
        let n = notice("bizrq nlp-team: requests.nvidia.com/gpu asks 12, 8 left of 16");
        let server = tokio::spawn(async move {
            let (method, path, body, send) = next(&mut handle).await;
            answer(send, 201, &body);
            (method, path, body)
        });
        p.publish(&n).await;
        let (method, path, body) = server.await.unwrap();
        assert_eq!(method, Method::POST);
        assert_eq!(path, "/apis/events.k8s.io/v1/namespaces/nlp/events");
        let name = format!("train.{T:x}{}1", &crate::util::sha256_hex("bizrq-0")[..6]);
        assert_eq!(
            body,
            json!({
                "apiVersion": "events.k8s.io/v1", "kind": "Event",
                "metadata": {"name": name, "namespace": "nlp"},
                "eventTime": "2026-11-18T11:06:40.000000Z",
                "type": "Warning", "reason": "QuotaExceeded", "action": "Update",
                "note": "bizrq nlp-team: requests.nvidia.com/gpu asks 12, 8 left of 16",
                "regarding": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "nlp", "name": "train", "uid": "d-1"},
                "reportingController": "bizrq", "reportingInstance": "bizrq-0"
            })
        );
        assert_eq!(metrics.events_failed.get(), 0);
    }

    /// The same notice again extends the first Event's series; a different
    /// note is an Event of its own, so each denial reads as itself.
    #[tokio::test]
    async fn a_repeat_extends_the_series_and_a_different_note_is_a_new_event() {
        let (mut p, mut handle, _) = publisher(T);
        let first = notice("bizrq nlp-team: requests.nvidia.com/gpu asks 12, 8 left of 16");
        let other = notice("bizrq nlp-team: requests.nvidia.com/gpu asks 4, 2 left of 16");
        let server = tokio::spawn(async move {
            let mut seen = Vec::new();
            for _ in 0..3 {
                let (method, path, body, send) = next(&mut handle).await;
                answer(send, 201, &body);
                seen.push((method, path, body));
            }
            seen
        });
        p.publish(&first).await;
        p.publish(&first).await;
        p.publish(&other).await;
        let seen = server.await.unwrap();
        let first_name = seen[0].2["metadata"]["name"].as_str().unwrap().to_string();
        assert_eq!(seen[1].0, Method::PATCH);
        assert_eq!(
            seen[1].1,
            format!("/apis/events.k8s.io/v1/namespaces/nlp/events/{first_name}")
        );
        assert_eq!(
            seen[1].2,
            json!({"series": {"count": 2, "lastObservedTime": "2026-11-18T11:06:40.000000Z"}})
        );
        assert_eq!(seen[2].0, Method::POST);
        assert_ne!(seen[2].2["metadata"]["name"], first_name.as_str());
        assert_eq!(
            seen[2].2["note"],
            "bizrq nlp-team: requests.nvidia.com/gpu asks 4, 2 left of 16"
        );
    }

    #[tokio::test]
    async fn a_refused_event_is_counted() {
        let (mut p, mut handle, metrics) = publisher(T);
        let server = tokio::spawn(async move {
            let (_, _, _, send) = next(&mut handle).await;
            answer(
                send,
                422,
                &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Invalid", "code": 422, "message": "Event is invalid"}),
            );
        });
        p.publish(&notice("x")).await;
        server.await.unwrap();
        assert_eq!(metrics.events_failed.get(), 1);
    }

    #[tokio::test]
    async fn a_cluster_scoped_object_has_its_events_in_default() {
        let (mut p, mut handle, _) = publisher(T);
        let n = Notice {
            regarding: quota_ref("nlp-team", Some("q-1".into())),
            warning: true,
            reason: ADMISSION_DENIED,
            action: "Create",
            note: "n".into(),
        };
        let server = tokio::spawn(async move {
            let (_, path, body, send) = next(&mut handle).await;
            answer(send, 201, &body);
            (path, body)
        });
        p.publish(&n).await;
        let (path, body) = server.await.unwrap();
        assert_eq!(path, "/apis/events.k8s.io/v1/namespaces/default/events");
        assert_eq!(
            body["regarding"],
            json!({"apiVersion": "bizrq.io/v1", "kind": "BizGroupResourceQuota", "name": "nlp-team", "uid": "q-1"})
        );
    }

    fn is_dns_subdomain(s: &str) -> bool {
        s.len() <= 253
            && s.split('.').all(|l| {
                !l.is_empty()
                    && l.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !l.starts_with('-')
                    && !l.ends_with('-')
            })
    }

    #[test]
    fn event_names_are_dns_subdomains_whatever_the_object_name() {
        for name in [
            "nlp-team",
            "nlp does not fit in its parent",
            "",
            "..",
            "A.B-",
            "-x-.-y-",
            &"a".repeat(300),
            &format!("{}.{}", "b".repeat(250), "c"),
            "ünï/cödé",
        ] {
            let n = event_name(name, T, "abc123", u64::MAX);
            assert!(is_dns_subdomain(&n), "{name:?} → {n:?}");
        }
        assert_eq!(
            event_name("nlp-team", 255, "abc123", 1),
            "nlp-team.ffabc1231"
        );
        assert_eq!(event_name("", 255, "abc123", 1), "bizrq.ffabc1231");
    }

    #[test]
    fn notes_and_instances_fit_the_api_limits() {
        let n = Notice {
            note: "é".repeat(2000),
            ..notice("")
        };
        let ev = event_body(&n, "x.1", "i", T);
        let note = ev.note.unwrap();
        assert!(note.len() <= 1024 && note.ends_with('…'), "{}", note.len());
        assert_eq!(truncate("short", 1024), "short");
    }

    #[test]
    fn refusals_name_the_refusing_quota_from_the_error_not_the_message() {
        let short = ServiceError::Denied(Denial::Short(vec![shortfall("nlp-team")]));
        assert_eq!(
            refusal(&short),
            Some(Refusal {
                reason: QUOTA_EXCEEDED,
                quotas: vec!["nlp-team".into()]
            })
        );
        // "bizrq nlp does not fit in its parent: bizrq ai: …": the parent.
        let carve = ServiceError::Tree(TreeError::DoesNotFit(vec![shortfall("ai")], "nlp".into()));
        assert_eq!(refusal(&carve).unwrap().quotas, ["ai"]);
        let cash = ServiceError::Denied(Denial::CashExhausted(Box::new(CashShortfall {
            quota: "cv".into(),
            key: "cash/requests.nvidia.com/gpu".into(),
            used: "3".parse().unwrap(),
            hard: "3".parse().unwrap(),
            asked_key: "requests.nvidia.com/gpu".into(),
            asked: "1".parse().unwrap(),
        })));
        assert_eq!(refusal(&cash).unwrap().reason, CASH_EXHAUSTED);
        let leaf = ServiceError::Tree(TreeError::NotALeaf {
            name: "ai".into(),
            children: vec!["nlp".into()],
        });
        assert_eq!(
            refusal(&leaf),
            Some(Refusal {
                reason: TREE_RULE_VIOLATED,
                quotas: vec![]
            })
        );
        assert_eq!(refusal(&ServiceError::BadRequest("x".into())), None);
        assert_eq!(refusal(&ServiceError::Internal("x".into())), None);
    }

    #[test]
    fn a_denial_is_told_on_the_object_and_on_the_quota_that_refused() {
        let r = Refusal {
            reason: QUOTA_EXCEEDED,
            quotas: vec!["nlp-team".into()],
        };
        let msg = "bizrq nlp-team: requests.nvidia.com/gpu asks 12, 8 left of 16";
        let uid = |q: &str| (q == "nlp-team").then(|| "q-1".to_string());
        let out = denial_notices(&deployment(Some("d-1")), "Update", &r, msg, uid);
        assert_eq!(
            out,
            [
                Notice {
                    regarding: quota_ref("nlp-team", Some("q-1".into())),
                    warning: true,
                    reason: ADMISSION_DENIED,
                    action: "Update",
                    note: format!("Update of Deployment nlp/train refused: {msg}"),
                },
                Notice {
                    regarding: deployment(Some("d-1")),
                    warning: true,
                    reason: QUOTA_EXCEEDED,
                    action: "Update",
                    note: msg.into(),
                }
            ]
        );
    }

    #[test]
    fn a_quota_refused_by_its_own_rule_gets_one_event() {
        let r = Refusal {
            reason: TREE_RULE_VIOLATED,
            quotas: vec![],
        };
        let me = quota_ref("ai", Some("q-ai".into()));
        let out = denial_notices(
            &me,
            "Delete",
            &r,
            "bizrq ai: only leaves can be deleted; children: nlp",
            |_| None,
        );
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].regarding, me);
        assert_eq!(out[0].reason, TREE_RULE_VIOLATED);
    }
}
