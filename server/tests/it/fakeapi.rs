//! An in-memory Kubernetes API server behind `kube::Client` (a tower
//! service at its HTTP boundary): discovery, list, watch (a live stream of
//! JSON lines from a resourceVersion), get, create, replace with
//! `resourceVersion` compare-and-swap (409 on a stale one), the status and
//! scale subresources, JSON merge patch and delete. Every request is
//! recorded, so tests assert the exact calls the controller makes.

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
}

#[derive(Clone, Default)]
pub struct FakeApi {
    state: Arc<Mutex<State>>,
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

    pub fn client(&self) -> kube::Client {
        kube::Client::new(self.clone(), "default")
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

    fn handle(
        &self,
        method: Method,
        path: &str,
        query: &str,
        body: Option<Value>,
    ) -> Response<RespBody> {
        self.state.lock().unwrap().requests.push(format!(
            "{method} {path}{}{query}",
            if query.is_empty() { "" } else { "?" }
        ));
        if method == Method::GET {
            if let Some(d) = self.discovery(path) {
                let code = d["code"].as_u64().unwrap_or(200) as u16;
                return once(code, &d);
            }
        }
        let Some(t) = Self::parse(path) else {
            return once(404, &status(404, "NotFound", path));
        };
        let params: HashMap<String, String> = query
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
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
                coll.objects.insert((ns, name), obj.clone());
                Self::emit(coll, rv, "ADDED", obj.clone());
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
                let mut next = current.clone();
                let sub = t.sub.as_deref();
                if m == Method::PUT {
                    let sent_rv = body["metadata"]["resourceVersion"].as_str().unwrap_or("");
                    if !sent_rv.is_empty()
                        && sent_rv
                            != current["metadata"]["resourceVersion"]
                                .as_str()
                                .unwrap_or("")
                    {
                        return once(409, &status(409, "Conflict", &format!("Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again", coll.def.plural)));
                    }
                    match sub {
                        Some("status") => next["status"] = body["status"].clone(),
                        Some("scale") => {
                            next["spec"]["replicas"] = body["spec"]["replicas"].clone()
                        }
                        _ => {
                            next = body.clone();
                            if coll.def.status {
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
                        _ => merge(&mut next, &body),
                    }
                }
                next["metadata"]["resourceVersion"] = json!(rv.to_string());
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
                    o["metadata"]["resourceVersion"] = json!(rv.to_string());
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
            Ok(me.handle(method, &path, &query, body))
        })
    }
}
