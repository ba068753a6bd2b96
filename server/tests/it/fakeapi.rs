//! An in-memory Kubernetes API server behind `kube::Client` (a tower
//! service at its HTTP boundary): discovery, list, watch (a live stream of
//! JSON lines from a resourceVersion), get, create, replace with
//! `resourceVersion` compare-and-swap (409 on a stale one), the status and
//! scale subresources, JSON merge patch, delete and `dryRun=All`. Every
//! request is recorded, so tests assert the exact calls the controller makes.
//!
//! Validating admission as kube-apiserver runs it: once a
//! ValidatingWebhookConfiguration is loaded (`admit_with`, the shipped
//! `deploy/base/webhook.yaml`), every write through the HTTP boundary —
//! bizrq's own included — whose operation, resource and subresource a rule
//! matches, and whose namespace and object the selectors select, is sent as
//! an `admission.k8s.io/v1` AdmissionReview over HTTPS to the webhook's
//! service, verified against the configuration's caBundle, before it is
//! stored (and, for a create, before the name is checked). A denial is the
//! client's answer (`admission webhook "NAME" denied the request: …`, with
//! the webhook's code and reason); a call that fails or times out refuses
//! the write under `failurePolicy: Fail` and is skipped under `Ignore`.
//! `put` and `remove` are the test's backdoor: an object as stored after an
//! admission the test made itself, with no webhook called.

use axum::body::Bytes;
use futures::StreamExt;
use http::{Method, Request, Response};
use http_body_util::{combinators::UnsyncBoxBody, BodyExt, StreamBody};
use kube::client::Body;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio::sync::broadcast;

type RespBody = UnsyncBoxBody<Bytes, Infallible>;

#[derive(Clone, Debug)]
pub struct KindDef {
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
    pub namespaced: bool,
    /// Status is a subresource: the main PUT keeps it, `/status` writes only it.
    pub status: bool,
    /// Has a `/scale` subresource (GET/PUT/PATCH map to spec.replicas).
    pub scale: bool,
}

pub const KINDS: &[KindDef] = &[
    KindDef {
        group: "",
        version: "v1",
        kind: "Pod",
        plural: "pods",
        namespaced: true,
        status: true,
        scale: false,
    },
    KindDef {
        group: "apps",
        version: "v1",
        kind: "Deployment",
        plural: "deployments",
        namespaced: true,
        status: true,
        scale: true,
    },
    KindDef {
        group: "apps",
        version: "v1",
        kind: "StatefulSet",
        plural: "statefulsets",
        namespaced: true,
        status: true,
        scale: true,
    },
    KindDef {
        group: "apps",
        version: "v1",
        kind: "ReplicaSet",
        plural: "replicasets",
        namespaced: true,
        status: true,
        scale: true,
    },
    KindDef {
        group: "batch",
        version: "v1",
        kind: "Job",
        plural: "jobs",
        namespaced: true,
        status: true,
        scale: false,
    },
    KindDef {
        group: "batch",
        version: "v1",
        kind: "CronJob",
        plural: "cronjobs",
        namespaced: true,
        status: true,
        scale: false,
    },
    KindDef {
        group: "autoscaling",
        version: "v2",
        kind: "HorizontalPodAutoscaler",
        plural: "horizontalpodautoscalers",
        namespaced: true,
        status: true,
        scale: false,
    },
    KindDef {
        group: "bizrq.io",
        version: "v1",
        kind: "BizGroupResourceQuota",
        plural: "bizgroupresourcequotas",
        namespaced: false,
        status: true,
        scale: false,
    },
    KindDef {
        group: "coordination.k8s.io",
        version: "v1",
        kind: "Lease",
        plural: "leases",
        namespaced: true,
        status: false,
        scale: false,
    },
    KindDef {
        group: "events.k8s.io",
        version: "v1",
        kind: "Event",
        plural: "events",
        namespaced: true,
        status: false,
        scale: false,
    },
];

/// Installed only when a test says so (a CRD installed later).
pub const PYTORCHJOB: KindDef = KindDef {
    group: "kubeflow.org",
    version: "v1",
    kind: "PyTorchJob",
    plural: "pytorchjobs",
    namespaced: true,
    status: true,
    scale: false,
};

struct Coll {
    def: KindDef,
    objects: BTreeMap<(String, String), Value>,
    log: Vec<(u64, &'static str, Value)>,
    tx: broadcast::Sender<(u64, &'static str, Value)>,
}

#[derive(Default)]
struct State {
    rv: u64,
    colls: HashMap<String, Coll>,
    requests: Vec<String>,
    /// Answer the next N writes to these paths with 409.
    conflicts: HashMap<String, usize>,
    /// Make the next write to these paths, then answer 504 as if the
    /// connection had timed out after the write.
    lost_answers: HashMap<String, usize>,
    /// The loaded ValidatingWebhookConfiguration, if any.
    webhooks: Arc<Vec<Webhook>>,
    /// Every AdmissionReview sent: `{"webhook": name, "request": …}`.
    reviews: Vec<Value>,
}

/// bizrq's service account: who `client()` is.
pub const BIZRQ_USER: &str = "system:serviceaccount:bizrq-system:bizrq";

#[derive(Clone, Default)]
pub struct FakeApi {
    state: Arc<Mutex<State>>,
    /// Who this handle's requests come from (empty: `BIZRQ_USER`).
    user: Arc<String>,
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "reason": reason, "code": code, "message": message})
}

fn once(code: u16, v: &Value) -> Response<RespBody> {
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(
            http_body_util::Full::new(Bytes::from(serde_json::to_vec(v).unwrap()))
                .map_err(|e| match e {})
                .boxed_unsync(),
        )
        .unwrap()
}

fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

fn coll_key(group: &str, plural: &str) -> String {
    format!("{group}/{plural}")
}

/// A parsed resource path.
struct Target {
    coll: String,
    namespace: Option<String>,
    name: Option<String>,
    sub: Option<String>,
}

impl FakeApi {
    pub fn new() -> FakeApi {
        let f = FakeApi::default();
        for k in KINDS {
            f.install(k.clone());
        }
        f
    }

    /// A client as bizrq's service account.
    pub fn client(&self) -> kube::Client {
        kube::Client::new(self.clone(), "default")
    }

    /// A client as a person (kubectl as `user`): the same API server.
    pub fn client_as(&self, user: &str) -> kube::Client {
        let me = FakeApi {
            state: self.state.clone(),
            user: Arc::new(user.to_string()),
        };
        kube::Client::new(me, "default")
    }

    /// Every AdmissionReview request sent so far, with its webhook's name.
    pub fn reviews(&self) -> Vec<Value> {
        self.state.lock().unwrap().reviews.clone()
    }

    /// Serve a kind (a CRD installed).
    pub fn install(&self, def: KindDef) {
        let (tx, _) = broadcast::channel(4096);
        self.state.lock().unwrap().colls.insert(
            coll_key(def.group, def.plural),
            Coll {
                def,
                objects: BTreeMap::new(),
                log: Vec::new(),
                tx,
            },
        );
    }

    pub fn requests(&self) -> Vec<String> {
        self.state.lock().unwrap().requests.clone()
    }

    /// Answer the next `n` writes (PUT/PATCH) of `path` with 409 Conflict,
    /// as if someone else had just written the object.
    pub fn conflict_next(&self, path: &str, n: usize) {
        self.state
            .lock()
            .unwrap()
            .conflicts
            .insert(path.to_string(), n);
    }

    /// Make the next `n` writes to `path`, then answer each with 504 as a
    /// timeout would: the client cannot tell whether the write was made.
    pub fn lose_answer_next(&self, path: &str, n: usize) {
        self.state
            .lock()
            .unwrap()
            .lost_answers
            .insert(path.to_string(), n);
    }

    fn emit(coll: &mut Coll, rv: u64, kind: &'static str, obj: Value) {
        coll.log.push((rv, kind, obj.clone()));
        let _ = coll.tx.send((rv, kind, obj));
    }

    fn find_def(obj: &Value) -> KindDef {
        let api_version = obj["apiVersion"].as_str().unwrap_or("");
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        let kind = obj["kind"].as_str().unwrap_or("");
        KINDS
            .iter()
            .chain(std::iter::once(&PYTORCHJOB))
            .find(|d| d.group == group && d.kind == kind)
            .unwrap_or_else(|| panic!("fake API: unknown kind {api_version} {kind}"))
            .clone()
    }

    /// Create or replace an object as stored (what kubectl apply leaves
    /// after admission), status included. Returns it as stored.
    pub fn put(&self, mut obj: Value) -> Value {
        let def = Self::find_def(&obj);
        let mut g = self.state.lock().unwrap();
        g.rv += 1;
        let rv = g.rv;
        let coll = g
            .colls
            .get_mut(&coll_key(def.group, def.plural))
            .expect("kind installed");
        let ns = obj["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let name = obj["metadata"]["name"].as_str().unwrap().to_string();
        let existing = coll.objects.get(&(ns.clone(), name.clone())).cloned();
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        if obj["metadata"]["uid"].is_null() {
            obj["metadata"]["uid"] = existing
                .as_ref()
                .map(|e| e["metadata"]["uid"].clone())
                .unwrap_or_else(|| json!(format!("uid-{name}-{rv}")));
        }
        if obj["metadata"]["creationTimestamp"].is_null() {
            obj["metadata"]["creationTimestamp"] = json!("2026-11-21T10:00:00Z");
        }
        coll.objects.insert((ns, name), obj.clone());
        let kind = if existing.is_some() {
            "MODIFIED"
        } else {
            "ADDED"
        };
        Self::emit(coll, rv, kind, obj.clone());
        obj
    }

    pub fn remove(&self, group: &str, plural: &str, namespace: &str, name: &str) {
        let mut g = self.state.lock().unwrap();
        g.rv += 1;
        let rv = g.rv;
        let coll = g.colls.get_mut(&coll_key(group, plural)).unwrap();
        if let Some(mut obj) = coll
            .objects
            .remove(&(namespace.to_string(), name.to_string()))
        {
            obj["metadata"]["resourceVersion"] = json!(rv.to_string());
            Self::emit(coll, rv, "DELETED", obj);
        }
    }

    pub fn get(&self, group: &str, plural: &str, namespace: &str, name: &str) -> Option<Value> {
        let g = self.state.lock().unwrap();
        g.colls[&coll_key(group, plural)]
            .objects
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    pub fn list(&self, group: &str, plural: &str) -> Vec<Value> {
        let g = self.state.lock().unwrap();
        g.colls[&coll_key(group, plural)]
            .objects
            .values()
            .cloned()
            .collect()
    }

    /// Every version of quota `name` stored after resourceVersion `after`,
    /// in order: what any reader could have seen in between.
    pub fn quota_versions(&self, name: &str, after: u64) -> Vec<Value> {
        let g = self.state.lock().unwrap();
        g.colls[&coll_key("bizrq.io", "bizgroupresourcequotas")]
            .log
            .iter()
            .filter(|(rv, _, o)| *rv > after && o["metadata"]["name"] == name)
            .map(|(_, _, o)| o.clone())
            .collect()
    }

    pub fn quota(&self, name: &str) -> Value {
        self.get("bizrq.io", "bizgroupresourcequotas", "", name)
            .unwrap_or_else(|| panic!("no quota {name}"))
    }

    fn parse(path: &str) -> Option<Target> {
        let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
        let (group, rest) = match *segs.first()? {
            "api" => ("", &segs[2..]),
            "apis" if segs.len() >= 3 => (segs[1], &segs[3..]),
            _ => return None,
        };
        let (namespace, rest) = if rest.first() == Some(&"namespaces") && rest.len() >= 3 {
            (Some(rest[1].to_string()), &rest[2..])
        } else {
            (None, rest)
        };
        Some(Target {
            coll: coll_key(group, rest.first()?),
            namespace,
            name: rest.get(1).map(|s| s.to_string()),
            sub: rest.get(2).map(|s| s.to_string()),
        })
    }

    fn discovery(&self, path: &str) -> Option<Value> {
        let g = self.state.lock().unwrap();
        let defs: Vec<&KindDef> = g.colls.values().map(|c| &c.def).collect();
        if path == "/apis" {
            let mut groups: BTreeMap<&str, &str> = BTreeMap::new();
            for d in defs.iter().filter(|d| !d.group.is_empty()) {
                groups.insert(d.group, d.version);
            }
            let groups: Vec<Value> = groups
                .iter()
                .map(|(g, v)| {
                    let gv = format!("{g}/{v}");
                    json!({"name": g, "versions": [{"groupVersion": gv, "version": v}], "preferredVersion": {"groupVersion": gv, "version": v}})
                })
                .collect();
            return Some(json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}));
        }
        let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
        if segs.len() == 3 && segs[0] == "apis" {
            let found: Vec<Value> = defs
                .iter()
                .filter(|d| d.group == segs[1] && d.version == segs[2])
                .flat_map(|d| {
                    let mut v = vec![json!({"name": d.plural, "singularName": "", "namespaced": d.namespaced, "kind": d.kind, "verbs": ["get","list","watch","create","update","patch","delete"]})];
                    if d.status {
                        v.push(json!({"name": format!("{}/status", d.plural), "singularName": "", "namespaced": d.namespaced, "kind": d.kind, "verbs": ["get","update","patch"]}));
                    }
                    v
                })
                .collect();
            if found.is_empty() {
                return Some(status(
                    404,
                    "NotFound",
                    "the server could not find the requested resource",
                ));
            }
            return Some(
                json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": format!("{}/{}", segs[1], segs[2]), "resources": found}),
            );
        }
        None
    }

    fn record(&self, method: &Method, path: &str, query: &str) {
        self.state.lock().unwrap().requests.push(format!(
            "{method} {path}{}{query}",
            if query.is_empty() { "" } else { "?" }
        ));
    }

    /// Serve one request; with `dry` (dryRun=All) a write is checked and
    /// answered as it would be, and nothing is stored.
    fn handle(
        &self,
        method: Method,
        path: &str,
        query: &str,
        body: Option<Value>,
        dry: bool,
    ) -> Response<RespBody> {
        if method == Method::GET {
            if let Some(d) = self.discovery(path) {
                let code = d["code"].as_u64().unwrap_or(200) as u16;
                return once(code, &d);
            }
        }
        let Some(t) = Self::parse(path) else {
            return once(404, &status(404, "NotFound", path));
        };
        let params = query_params(query);
        let mut g = self.state.lock().unwrap();
        if !g.colls.contains_key(&t.coll) {
            return once(
                404,
                &status(
                    404,
                    "NotFound",
                    &format!("the server could not find the requested resource ({path})"),
                ),
            );
        }
        let write = matches!(method, Method::PUT | Method::PATCH);
        if write {
            if let Some(n) = g.conflicts.get_mut(path).filter(|n| **n > 0) {
                *n -= 1;
                return once(409, &status(409, "Conflict", "the object has been modified; please apply your changes to the latest version and try again"));
            }
        }
        g.rv += 1;
        let rv = g.rv;
        let coll = g.colls.get_mut(&t.coll).unwrap();
        let ns = t.namespace.clone().unwrap_or_default();
        match (method, t.name.clone()) {
            (Method::GET, None) if params.get("watch").is_some_and(|w| w == "true" || w == "1") => {
                let from: u64 = params
                    .get("resourceVersion")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                let rx = coll.tx.subscribe();
                let filter_ns = t.namespace.clone();
                let keep = move |o: &Value| {
                    filter_ns
                        .as_ref()
                        .is_none_or(|n| o["metadata"]["namespace"] == n.as_str())
                };
                let backlog: Vec<(u64, &'static str, Value)> = coll
                    .log
                    .iter()
                    .filter(|(r, _, o)| *r > from && keep(o))
                    .cloned()
                    .collect();
                let line = |(_, kind, obj): (u64, &'static str, Value)| {
                    let mut b = serde_json::to_vec(&json!({"type": kind, "object": obj})).unwrap();
                    b.push(b'\n');
                    Ok::<_, Infallible>(http_body::Frame::data(Bytes::from(b)))
                };
                let live = futures::stream::unfold(rx, |mut rx| async move {
                    loop {
                        match rx.recv().await {
                            Ok(ev) => return Some((ev, rx)),
                            Err(broadcast::error::RecvError::Lagged(_)) => continue,
                            Err(broadcast::error::RecvError::Closed) => return None,
                        }
                    }
                });
                let keep2 = keep.clone();
                let stream = futures::stream::iter(backlog)
                    .chain(live.filter(move |(r, _, o)| std::future::ready(*r > from && keep2(o))))
                    .map(line);
                Response::builder()
                    .status(200)
                    .header("content-type", "application/json")
                    .body(StreamBody::new(stream).boxed_unsync())
                    .unwrap()
            }
            (Method::GET, None) => {
                let items: Vec<Value> = coll
                    .objects
                    .iter()
                    .filter(|((n, _), _)| t.namespace.as_ref().is_none_or(|x| x == n))
                    .map(|(_, o)| o.clone())
                    .collect();
                once(
                    200,
                    &json!({"apiVersion": format!("{}{}{}", coll.def.group, if coll.def.group.is_empty() { "" } else { "/" }, coll.def.version),
                    "kind": format!("{}List", coll.def.kind), "metadata": {"resourceVersion": (rv).to_string()}, "items": items}),
                )
            }
            (Method::GET, Some(name)) => match coll.objects.get(&(ns, name.clone())) {
                Some(o) if t.sub.as_deref() == Some("scale") && coll.def.scale => {
                    once(200, &scale_of(o))
                }
                Some(o) => once(200, o),
                None => once(
                    404,
                    &status(
                        404,
                        "NotFound",
                        &format!("{} \"{name}\" not found", coll.def.plural),
                    ),
                ),
            },
            (Method::POST, None) => {
                let mut obj = body.unwrap_or(Value::Null);
                let name = obj["metadata"]["name"]
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("gen-{rv}"));
                if coll.objects.contains_key(&(ns.clone(), name.clone())) {
                    return once(
                        409,
                        &status(
                            409,
                            "AlreadyExists",
                            &format!("{} \"{name}\" already exists", coll.def.plural),
                        ),
                    );
                }
                obj["metadata"]["name"] = json!(name);
                if coll.def.namespaced {
                    obj["metadata"]["namespace"] = json!(ns);
                }
                obj["metadata"]["resourceVersion"] = json!(rv.to_string());
                obj["metadata"]["uid"] = json!(format!("uid-{name}-{rv}"));
                obj["metadata"]["creationTimestamp"] = json!("2026-11-21T10:00:00Z");
                if coll.def.status {
                    obj.as_object_mut().unwrap().remove("status");
                }
                if !dry {
                    coll.objects.insert((ns, name), obj.clone());
                    Self::emit(coll, rv, "ADDED", obj.clone());
                }
                once(201, &obj)
            }
            (m @ (Method::PUT | Method::PATCH), Some(name)) => {
                let Some(current) = coll.objects.get(&(ns.clone(), name.clone())).cloned() else {
                    return once(
                        404,
                        &status(
                            404,
                            "NotFound",
                            &format!("{} \"{name}\" not found", coll.def.plural),
                        ),
                    );
                };
                let body = body.unwrap_or(Value::Null);
                let sub = t.sub.as_deref();
                if m == Method::PUT && stale(&body, &current) {
                    return once(409, &status(409, "Conflict", &format!("Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again", coll.def.plural)));
                }
                let mut next = updated(&coll.def, &current, &m, sub, &body);
                if dry {
                    return once(
                        200,
                        &if sub == Some("scale") {
                            scale_of(&next)
                        } else {
                            next
                        },
                    );
                }
                next["metadata"]["resourceVersion"] = json!(rv.to_string());
                if !next["metadata"]["deletionTimestamp"].is_null() && !finalized(&next) {
                    // The last finalizer of a terminating object removed.
                    coll.objects.remove(&(ns, name));
                    Self::emit(coll, rv, "DELETED", next.clone());
                    return once(200, &next);
                }
                coll.objects.insert((ns, name), next.clone());
                Self::emit(coll, rv, "MODIFIED", next.clone());
                if sub == Some("scale") {
                    once(200, &scale_of(&next))
                } else {
                    once(200, &next)
                }
            }
            (Method::DELETE, Some(name)) => match coll.objects.remove(&(ns, name.clone())) {
                Some(mut o) => {
                    let want = body.as_ref().and_then(|b| {
                        b["preconditions"]["resourceVersion"]
                            .as_str()
                            .map(str::to_string)
                    });
                    if let Some(want) = want.filter(|w| {
                        w.as_str() != o["metadata"]["resourceVersion"].as_str().unwrap_or("")
                    }) {
                        let key = (
                            o["metadata"]["namespace"]
                                .as_str()
                                .unwrap_or("")
                                .to_string(),
                            name.clone(),
                        );
                        coll.objects.insert(key, o);
                        return once(
                            409,
                            &status(
                                409,
                                "Conflict",
                                &format!("precondition failed: resourceVersion {want}"),
                            ),
                        );
                    }
                    if dry {
                        let key = (
                            o["metadata"]["namespace"]
                                .as_str()
                                .unwrap_or("")
                                .to_string(),
                            name.clone(),
                        );
                        coll.objects.insert(key, o.clone());
                        return once(200, &o);
                    }
                    o["metadata"]["resourceVersion"] = json!(rv.to_string());
                    if finalized(&o) {
                        // As the API server does: an object with finalizers
                        // stays, terminating, until the last one is removed.
                        if o["metadata"]["deletionTimestamp"].is_null() {
                            o["metadata"]["deletionTimestamp"] = json!("2026-11-21T10:00:00Z");
                        }
                        let key = (
                            o["metadata"]["namespace"]
                                .as_str()
                                .unwrap_or("")
                                .to_string(),
                            name.clone(),
                        );
                        coll.objects.insert(key, o.clone());
                        Self::emit(coll, rv, "MODIFIED", o.clone());
                        return once(200, &o);
                    }
                    Self::emit(coll, rv, "DELETED", o.clone());
                    once(200, &o)
                }
                None => once(
                    404,
                    &status(404, "NotFound", &format!("\"{name}\" not found")),
                ),
            },
            (m, _) => once(405, &status(405, "MethodNotAllowed", m.as_str())),
        }
    }
}

fn query_params(query: &str) -> HashMap<String, String> {
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A PUT naming a resourceVersion other than the current one.
/// Whether an object has finalizers (a DELETE leaves it terminating).
fn finalized(o: &Value) -> bool {
    o["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| !f.is_empty())
}

fn stale(body: &Value, current: &Value) -> bool {
    let sent = body["metadata"]["resourceVersion"].as_str().unwrap_or("");
    !sent.is_empty()
        && sent
            != current["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or("")
}

/// The object a PUT or PATCH of `current` (or of its subresource `sub`)
/// leaves, before its new resourceVersion.
fn updated(def: &KindDef, current: &Value, m: &Method, sub: Option<&str>, body: &Value) -> Value {
    let mut next = current.clone();
    if m == Method::PUT {
        match sub {
            Some("status") => next["status"] = body["status"].clone(),
            Some("scale") => next["spec"]["replicas"] = body["spec"]["replicas"].clone(),
            _ => {
                next = body.clone();
                if def.status {
                    next["status"] = current["status"].clone();
                }
                next["metadata"]["uid"] = current["metadata"]["uid"].clone();
                next["metadata"]["creationTimestamp"] =
                    current["metadata"]["creationTimestamp"].clone();
            }
        }
    } else {
        match sub {
            Some("scale") => {
                if let Some(r) = body["spec"]["replicas"].as_i64() {
                    next["spec"]["replicas"] = json!(r);
                }
            }
            _ => merge(&mut next, body),
        }
    }
    next
}

fn scale_of(o: &Value) -> Value {
    json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
           "metadata": {"name": o["metadata"]["name"], "namespace": o["metadata"]["namespace"], "resourceVersion": o["metadata"]["resourceVersion"]},
           "spec": {"replicas": o["spec"]["replicas"]}})
}

impl tower::Service<Request<Body>> for FakeApi {
    type Response = Response<RespBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let me = self.clone();
        Box::pin(async move {
            let method = req.method().clone();
            let path = req.uri().path().to_string();
            let query = req.uri().query().unwrap_or("").to_string();
            let bytes = req
                .into_body()
                .collect()
                .await
                .map(|c| c.to_bytes())
                .unwrap_or_default();
            let body =
                (!bytes.is_empty()).then(|| serde_json::from_slice(&bytes).unwrap_or(Value::Null));
            me.record(&method, &path, &query);
            let dry = query_params(&query)
                .get("dryRun")
                .is_some_and(|d| d == "All");
            let mut warnings = Vec::new();
            if let Some(attrs) = me.attributes(&method, &path, body.as_ref()) {
                match me.admit(&attrs, dry).await {
                    Ok(w) => warnings = w,
                    Err(refused) => return Ok(refused),
                }
            }
            let write = method != Method::GET;
            let mut resp = me.handle(method, &path, &query, body, dry);
            if write {
                let mut g = me.state.lock().unwrap();
                if let Some(n) = g.lost_answers.get_mut(&path).filter(|n| **n > 0) {
                    *n -= 1;
                    let msg = "Timeout: request did not complete within the allotted timeout";
                    return Ok(once(504, &status(504, "Timeout", msg)));
                }
            }
            for w in warnings {
                if let Ok(v) = http::HeaderValue::from_str(&format!("299 - {w:?}")) {
                    resp.headers_mut().append("warning", v);
                }
            }
            Ok(resp)
        })
    }
}

// ---- validating admission ------------------------------------------------

/// What kube-apiserver knows of a write when it runs validating admission.
struct Attrs {
    operation: &'static str,
    group: String,
    version: String,
    resource: String,
    sub: Option<String>,
    /// The kind of `object` (a Scale for the scale subresource).
    kind: Value,
    namespaced: bool,
    namespace: String,
    name: String,
    object: Value,
    old_object: Value,
    /// DeleteOptions as sent (preconditions), for a DELETE.
    delete_options: Value,
}

/// One webhook of the loaded ValidatingWebhookConfiguration.
struct Webhook {
    name: String,
    rules: Vec<Value>,
    namespace_selector: Option<Value>,
    object_selector: Option<Value>,
    /// `failurePolicy: Fail` (the default); else Ignore.
    fail: bool,
    side_effects: String,
    url: String,
    client: reqwest::Client,
}

impl FakeApi {
    /// Load a ValidatingWebhookConfiguration (YAML, as shipped) with
    /// `ca_pem` injected as every webhook's caBundle (what cert-manager's CA
    /// injector or gen-certs.sh does). A `clientConfig.service` resolves to
    /// `endpoint` (the Service's one ready endpoint); TLS is verified
    /// against the caBundle for the name `<service>.<namespace>.svc`. Loading
    /// again replaces the configuration (a new endpoint, a new CA).
    pub fn admit_with(&self, config_yaml: &str, ca_pem: &str, endpoint: std::net::SocketAddr) {
        let mut config: Value =
            serde_yaml_ng::from_str(config_yaml).expect("webhook configuration is YAML");
        assert_eq!(config["apiVersion"], "admissionregistration.k8s.io/v1");
        assert_eq!(config["kind"], "ValidatingWebhookConfiguration");
        let hooks = config["webhooks"]
            .as_array_mut()
            .expect("webhooks is a list");
        let mut loaded = Vec::new();
        for hook in hooks {
            hook["clientConfig"]["caBundle"] = json!(base64_encode(ca_pem.as_bytes()));
            loaded.push(Webhook::load(hook, endpoint));
        }
        self.state.lock().unwrap().webhooks = Arc::new(loaded);
    }

    fn username(&self) -> String {
        if self.user.is_empty() {
            BIZRQ_USER.to_string()
        } else {
            self.user.to_string()
        }
    }

    /// The admission attributes of a write, or None when the request
    /// fails before admission (no such object, a stale resourceVersion or
    /// precondition, an injected conflict) or is not a write.
    fn attributes(&self, method: &Method, path: &str, body: Option<&Value>) -> Option<Attrs> {
        let operation = match *method {
            Method::POST => "CREATE",
            Method::PUT | Method::PATCH => "UPDATE",
            Method::DELETE => "DELETE",
            _ => return None,
        };
        let t = Self::parse(path)?;
        let g = self.state.lock().unwrap();
        if operation == "UPDATE" && g.conflicts.get(path).is_some_and(|n| *n > 0) {
            return None;
        }
        let coll = g.colls.get(&t.coll)?;
        let def = coll.def.clone();
        let ns = t.namespace.clone().unwrap_or_default();
        let body = body.cloned().unwrap_or(Value::Null);
        let gvk = |g: &str, v: &str, k: &str| json!({"group": g, "version": v, "kind": k});
        let mut kind = gvk(def.group, def.version, def.kind);
        let current = |name: &str| coll.objects.get(&(ns.clone(), name.to_string())).cloned();
        let mut delete_options = Value::Null;
        let (name, object, old_object) = match (operation, &t.name) {
            ("CREATE", None) => {
                let mut obj = body;
                if def.namespaced {
                    obj["metadata"]["namespace"] = json!(ns);
                }
                // The status of a kind with a status subresource is dropped
                // before admission.
                if def.status {
                    if let Some(o) = obj.as_object_mut() {
                        o.remove("status");
                    }
                }
                let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
                (name, obj, Value::Null)
            }
            ("UPDATE", Some(name)) => {
                let current = current(name)?;
                if *method == Method::PUT && stale(&body, &current) {
                    return None;
                }
                let next = updated(&def, &current, method, t.sub.as_deref(), &body);
                if t.sub.as_deref() == Some("scale") {
                    kind = gvk("autoscaling", "v1", "Scale");
                    (name.clone(), scale_of(&next), scale_of(&current))
                } else {
                    (name.clone(), next, current)
                }
            }
            ("DELETE", Some(name)) => {
                let current = current(name)?;
                let want = body["preconditions"]["resourceVersion"].as_str();
                if want.is_some_and(|w| Some(w) != current["metadata"]["resourceVersion"].as_str())
                {
                    return None;
                }
                delete_options = body;
                (name.clone(), Value::Null, current)
            }
            _ => return None,
        };
        Some(Attrs {
            operation,
            group: def.group.to_string(),
            version: def.version.to_string(),
            resource: def.plural.to_string(),
            sub: t.sub.clone(),
            kind,
            namespaced: def.namespaced,
            namespace: ns,
            name,
            object,
            old_object,
            delete_options,
        })
    }

    /// Validating admission of one write: every matching webhook is called
    /// (at once, as kube-apiserver does); Ok with their warnings, or the
    /// answer that refuses the write.
    async fn admit(&self, a: &Attrs, dry: bool) -> Result<Vec<String>, Response<RespBody>> {
        let hooks = self.state.lock().unwrap().webhooks.clone();
        let matched: Vec<&Webhook> = hooks.iter().filter(|h| h.matches(a)).collect();
        if dry {
            if let Some(h) = matched
                .iter()
                .find(|h| !matches!(h.side_effects.as_str(), "None" | "NoneOnDryRun"))
            {
                let msg = format!("admission webhook {:?} does not support dry run", h.name);
                return Err(once(400, &status(400, "BadRequest", &msg)));
            }
        }
        let reviews: Vec<Value> = matched.iter().map(|_| self.review(a, dry)).collect();
        {
            let mut g = self.state.lock().unwrap();
            for (h, r) in matched.iter().zip(&reviews) {
                g.reviews
                    .push(json!({"webhook": h.name, "request": r["request"]}));
            }
        }
        let answers =
            futures::future::join_all(matched.iter().zip(&reviews).map(|(h, r)| h.call(r))).await;
        let mut warnings = Vec::new();
        for (h, answer) in matched.iter().zip(answers) {
            match answer {
                Ok(resp) => {
                    if let Some(w) = resp["warnings"].as_array() {
                        warnings.extend(w.iter().filter_map(|w| w.as_str().map(str::to_string)));
                    }
                    if resp["allowed"] != true {
                        return Err(denied(&h.name, &resp["status"]));
                    }
                }
                Err(e) if h.fail => {
                    let msg = format!(
                        "Internal error occurred: failed calling webhook {:?}: {e}",
                        h.name
                    );
                    return Err(once(500, &status(500, "InternalError", &msg)));
                }
                // failurePolicy: Ignore — the write proceeds.
                Err(_) => {}
            }
        }
        Ok(warnings)
    }

    /// The AdmissionReview kube-apiserver sends for `a`.
    fn review(&self, a: &Attrs, dry: bool) -> Value {
        let resource = json!({"group": a.group, "version": a.version, "resource": a.resource});
        let username = self.username();
        let groups = match username.strip_prefix("system:serviceaccount:") {
            Some(rest) => {
                let ns = rest.split(':').next().unwrap_or("");
                json!([
                    "system:serviceaccounts",
                    format!("system:serviceaccounts:{ns}"),
                    "system:authenticated"
                ])
            }
            None => json!(["system:authenticated"]),
        };
        let mut options = match a.operation {
            "CREATE" => json!({"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}),
            "UPDATE" => json!({"apiVersion": "meta.k8s.io/v1", "kind": "UpdateOptions"}),
            _ => {
                let mut o = a.delete_options.clone();
                if !o.is_object() {
                    o = json!({});
                }
                o["apiVersion"] = json!("meta.k8s.io/v1");
                o["kind"] = json!("DeleteOptions");
                o
            }
        };
        if dry {
            options["dryRun"] = json!(["All"]);
        }
        let mut request = json!({
            "uid": bizrq::util::new_uid(),
            "kind": a.kind, "resource": resource,
            "requestKind": a.kind, "requestResource": resource,
            "name": a.name,
            "operation": a.operation,
            "userInfo": {"username": username, "uid": format!("uid-{username}"), "groups": groups},
            "object": a.object, "oldObject": a.old_object,
            "dryRun": dry,
            "options": options,
        });
        if let Some(sub) = &a.sub {
            request["subResource"] = json!(sub);
            request["requestSubResource"] = json!(sub);
        }
        if a.namespaced {
            request["namespace"] = json!(a.namespace);
        }
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
    }
}

/// A webhook's denial as kube-apiserver hands it to the client: the
/// webhook's code (400 at least) and reason, its message prefixed.
fn denied(webhook: &str, st: &Value) -> Response<RespBody> {
    let code = st["code"].as_u64().unwrap_or(0).max(400) as u16;
    let reason = st["reason"].as_str().unwrap_or("");
    let by = format!("admission webhook {webhook:?} denied the request");
    let message = match st["message"].as_str().filter(|m| !m.is_empty()) {
        Some(m) => format!("{by}: {m}"),
        None if !reason.is_empty() => format!("{by}: {reason}"),
        None => format!("{by} without explanation"),
    };
    once(code, &status(code, reason, &message))
}

impl Webhook {
    fn load(hook: &Value, endpoint: std::net::SocketAddr) -> Webhook {
        let name = hook["name"].as_str().expect("webhook name").to_string();
        assert!(
            hook["admissionReviewVersions"]
                .as_array()
                .is_some_and(|v| v.iter().any(|v| v == "v1")),
            "{name}: admissionReviewVersions must include v1"
        );
        let side_effects = hook["sideEffects"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: sideEffects is required in v1"))
            .to_string();
        let timeout = hook["timeoutSeconds"].as_u64().unwrap_or(10);
        let cc = &hook["clientConfig"];
        let (host, url) = match cc["url"].as_str() {
            Some(u) => {
                let parsed = reqwest::Url::parse(u).expect("clientConfig.url");
                (parsed.host_str().unwrap_or("").to_string(), u.to_string())
            }
            None => {
                let svc = &cc["service"];
                let host = format!(
                    "{}.{}.svc",
                    svc["name"].as_str().expect("service name"),
                    svc["namespace"].as_str().expect("service namespace")
                );
                let port = svc["port"].as_u64().unwrap_or(443);
                let path = svc["path"].as_str().unwrap_or("/");
                let url = format!("https://{host}:{port}{path}");
                (host, url)
            }
        };
        let url = format!("{url}?timeout={timeout}s");
        let pem = base64_decode(cc["caBundle"].as_str().expect("caBundle"));
        let ca = reqwest::Certificate::from_pem(&pem).expect("caBundle holds a PEM certificate");
        let client = reqwest::Client::builder()
            .tls_built_in_root_certs(false)
            .add_root_certificate(ca)
            // The Service's name resolves to its endpoint; a port in the
            // URL other than the default 443 is kept.
            .resolve(&host, endpoint)
            .timeout(std::time::Duration::from_secs(timeout))
            .build()
            .expect("webhook client");
        let selector = |k: &str| Some(hook[k].clone()).filter(|v| v.is_object());
        Webhook {
            rules: hook["rules"].as_array().cloned().unwrap_or_default(),
            namespace_selector: selector("namespaceSelector"),
            object_selector: selector("objectSelector"),
            fail: hook["failurePolicy"].as_str().unwrap_or("Fail") == "Fail",
            side_effects,
            url,
            client,
            name,
        }
    }

    fn matches(&self, a: &Attrs) -> bool {
        if !self.rules.iter().any(|r| rule_matches(r, a)) {
            return false;
        }
        // A namespaceSelector never filters cluster-scoped objects; the API
        // server labels every namespace with its own name.
        if let Some(sel) = self.namespace_selector.as_ref().filter(|_| a.namespaced) {
            let labels = json!({"kubernetes.io/metadata.name": a.namespace});
            if !selects(sel, &labels) {
                return false;
            }
        }
        // The object selector is matched against the new and the old object:
        // either one selected sends the request.
        if let Some(sel) = &self.object_selector {
            let objects: Vec<&Value> = [&a.object, &a.old_object]
                .into_iter()
                .filter(|o| !o.is_null())
                .collect();
            let empty = json!({});
            let labels = |o: &Value| o["metadata"].get("labels").cloned().unwrap_or(json!({}));
            let selected = if objects.is_empty() {
                selects(sel, &empty)
            } else {
                objects.iter().any(|o| selects(sel, &labels(o)))
            };
            if !selected {
                return false;
            }
        }
        true
    }

    async fn call(&self, review: &Value) -> Result<Value, String> {
        let r = self
            .client
            .post(&self.url)
            .json(review)
            .send()
            .await
            .map_err(|e| {
                // The innermost cause, as Go's net/http prints it.
                let mut cause: &dyn std::error::Error = &e;
                while let Some(next) = cause.source() {
                    cause = next;
                }
                format!("failed to call webhook: Post {:?}: {cause}", self.url)
            })?;
        let code = r.status();
        if !code.is_success() {
            let text = r.text().await.unwrap_or_default();
            return Err(format!(
                "failed to call webhook: the server responded with {code}: {text}"
            ));
        }
        let v: Value = r
            .json()
            .await
            .map_err(|e| format!("received invalid webhook response: {e}"))?;
        if v["apiVersion"] != "admission.k8s.io/v1" || v["kind"] != "AdmissionReview" {
            return Err(format!(
                "received invalid webhook response: expected admission.k8s.io/v1 AdmissionReview, got {}/{}",
                v["apiVersion"], v["kind"]
            ));
        }
        if v["response"]["uid"] != review["request"]["uid"] {
            return Err(format!(
                "received invalid webhook response: expected response.uid={}, got {}",
                review["request"]["uid"], v["response"]["uid"]
            ));
        }
        Ok(v["response"].clone())
    }
}

/// One rule of a webhook (`RuleWithOperations`): operations, apiGroups,
/// apiVersions, resources (`res`, `res/sub`, `*`, `*/sub`, `*/*`), scope.
fn rule_matches(rule: &Value, a: &Attrs) -> bool {
    let has = |field: &str, v: &str| {
        rule[field]
            .as_array()
            .is_some_and(|l| l.iter().any(|x| x == "*" || x == v))
    };
    let resource = rule["resources"].as_array().is_some_and(|l| {
        l.iter().filter_map(Value::as_str).any(|r| {
            if r == "*/*" {
                return true;
            }
            let (res, sub) = match r.split_once('/') {
                Some((res, sub)) => (res, Some(sub)),
                None => (r, None),
            };
            let res_ok = res == "*" || res == a.resource;
            match (sub, a.sub.as_deref()) {
                (None, None) => res_ok,
                (Some(s), Some(asub)) => res_ok && (s == "*" || s == asub),
                _ => false,
            }
        })
    });
    let scope = match rule["scope"].as_str().unwrap_or("*") {
        "Cluster" => !a.namespaced,
        "Namespaced" => a.namespaced,
        _ => true,
    };
    has("operations", a.operation)
        && has("apiGroups", &a.group)
        && has("apiVersions", &a.version)
        && resource
        && scope
}

/// A LabelSelector (matchLabels, matchExpressions) applied to labels.
fn selects(sel: &Value, labels: &Value) -> bool {
    let get = |k: &str| labels.get(k).and_then(Value::as_str);
    let by_labels = sel["matchLabels"]
        .as_object()
        .is_none_or(|m| m.iter().all(|(k, v)| get(k) == v.as_str()));
    let by_expr = sel["matchExpressions"].as_array().is_none_or(|l| {
        l.iter().all(|e| {
            let key = e["key"].as_str().unwrap_or("");
            let values: Vec<&str> = e["values"]
                .as_array()
                .map(|v| v.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            match e["operator"].as_str().unwrap_or("") {
                "In" => get(key).is_some_and(|v| values.contains(&v)),
                "NotIn" => get(key).is_none_or(|v| !values.contains(&v)),
                "Exists" => get(key).is_some(),
                "DoesNotExist" => get(key).is_none(),
                op => panic!("unknown selector operator {op}"),
            }
        })
    });
    by_labels && by_expr
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn base64_encode(bytes: &[u8]) -> String {
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(B64[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn base64_decode(text: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0);
    for c in text
        .bytes()
        .filter(|c| !c.is_ascii_whitespace() && *c != b'=')
    {
        let v = B64
            .iter()
            .position(|b| *b == c)
            .expect("caBundle is base64") as u32;
        acc = acc << 6 | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    out
}
