//! The HTTP boundary: discovery, list, watch, get, create, replace, patch,
//! delete and the subresources, each call recorded.

use super::*;

impl FakeApi {
    pub(super) fn parse(path: &str) -> Option<Target> {
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
        let mut g = self.state.lock().unwrap();
        g.requests.push(format!(
            "{method} {path}{}{query}",
            if query.is_empty() { "" } else { "?" }
        ));
        let keep = g.history;
        trim(&mut g.requests, keep);
        *g.tally.entry(tally_key(method, path, query)).or_default() += 1;
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
        metadata_only: bool,
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
        let stamp = self.creation_stamp();
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
        if method == Method::GET && t.name.is_some() {
            if let Some(n) = g.forbidden_reads.get_mut(path).filter(|n| **n > 0) {
                *n -= 1;
                let name = t.name.as_deref().unwrap_or_default();
                return once(
                    403,
                    &status(
                        403,
                        "Forbidden",
                        &format!("{name:?} is forbidden: the caller cannot get {path}"),
                    ),
                );
            }
            if let Some(n) = g.failed_reads.get_mut(path).filter(|n| **n > 0) {
                *n -= 1;
                return once(
                    500,
                    &status(500, "InternalError", "etcdserver: request timed out"),
                );
            }
        }
        let write = matches!(method, Method::PUT | Method::PATCH);
        if write {
            if let Some(n) = g.conflicts.get_mut(path).filter(|n| **n > 0) {
                *n -= 1;
                return once(409, &status(409, "Conflict", "the object has been modified; please apply your changes to the latest version and try again"));
            }
            if let Some(n) = g.failures.get_mut(path).filter(|n| **n > 0) {
                *n -= 1;
                return once(
                    500,
                    &status(500, "InternalError", "etcdserver: request timed out"),
                );
            }
        }
        g.rv += 1;
        let rv = g.rv;
        let lag = g.watch_delay.clone();
        let watching = method == Method::GET
            && t.name.is_none()
            && params.get("watch").is_some_and(|w| w == "true" || w == "1");
        let extra_lag = if watching {
            g.next_watch_lag.remove(&t.coll).unwrap_or_default()
        } else {
            std::time::Duration::ZERO
        };
        let coll = g.colls.get_mut(&t.coll).unwrap();
        let ns = t.namespace.clone().unwrap_or_default();
        match (method, t.name.clone()) {
            (Method::GET, None) if params.get("watch").is_some_and(|w| w == "true" || w == "1") => {
                let from: u64 = params
                    .get("resourceVersion")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                // kube-apiserver answers a watch from a version older
                // than the history it keeps with one ERROR event, 410
                // Expired; its client lists again.
                if from != 0 && from < coll.compacted {
                    let msg = format!("too old resource version: {from} ({})", coll.compacted);
                    let plural = coll.def.plural;
                    *g.tally.entry(format!("expired {plural}")).or_default() += 1;
                    let ev = json!({"type": "ERROR", "object": status(410, "Expired", &msg)});
                    let mut b = serde_json::to_vec(&ev).unwrap();
                    b.push(b'\n');
                    let frame = Ok::<_, Infallible>(http_body::Frame::data(Bytes::from(b)));
                    return Response::builder()
                        .status(200)
                        .header("content-type", "application/json")
                        .body(StreamBody::new(futures::stream::iter([frame])).boxed_unsync())
                        .unwrap();
                }
                let rx = coll.tx.subscribe();
                let filter_ns = t.namespace.clone();
                let keep = move |o: &Value| {
                    filter_ns
                        .as_ref()
                        .is_none_or(|n| o["metadata"]["namespace"] == n.as_str())
                };
                let backlog: Vec<super::Event> = coll
                    .log
                    .iter()
                    .filter(|(r, _, o, _)| *r > from && keep(o))
                    .cloned()
                    .collect();
                let line = |(_, kind, obj, encoded): super::Event| {
                    let mut b = format!("{{\"type\":\"{kind}\",\"object\":").into_bytes();
                    b.extend_from_slice(encoded.of(&obj));
                    b.extend_from_slice(b"}\n");
                    Ok::<_, Infallible>(http_body::Frame::data(Bytes::from(b)))
                };
                // A watcher too slow for the events (`Lagged`) has its
                // stream ended, as kube-apiserver closes a watcher that
                // cannot keep up: its client watches again from the last
                // version it saw, never silently missing the events between.
                let live = futures::stream::unfold(rx, move |mut rx| {
                    let lag = lag.clone();
                    async move {
                        let ev = rx.recv().await.ok()?;
                        let lag = lag.load(std::sync::atomic::Ordering::SeqCst);
                        if lag > 0 {
                            tokio::time::sleep(std::time::Duration::from_millis(lag)).await;
                        }
                        Some((ev, rx))
                    }
                })
                .boxed();
                // A watch lagging the others (`lag_next_watch`): each event
                // reaches it `extra_lag` after it was made, however many
                // come at once (a starved reader catches up in a burst).
                let live = if extra_lag.is_zero() {
                    live
                } else {
                    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
                    tokio::spawn(async move {
                        let mut live = live;
                        while let Some(ev) = live.next().await {
                            let due = tokio::time::Instant::now() + extra_lag;
                            if tx.send((due, ev)).is_err() {
                                break;
                            }
                        }
                    });
                    futures::stream::unfold(rx, |mut rx| async move {
                        let (due, ev) = rx.recv().await?;
                        tokio::time::sleep_until(due).await;
                        Some((ev, rx))
                    })
                    .boxed()
                };
                let keep2 = keep.clone();
                // `end_watches` ends it.
                let mut ends = coll.ends.subscribe();
                let stream = futures::stream::iter(backlog)
                    .chain(
                        live.filter(move |(r, _, o, _)| std::future::ready(*r > from && keep2(o))),
                    )
                    .map(line)
                    .take_until(async move {
                        let _ = ends.changed().await;
                    });
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
                // `Accept: application/json;as=PartialObjectMetadata;…`: the
                // metadata alone, as kube-apiserver answers it.
                Some(o) if metadata_only => once(200, &partial_metadata(o)),
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
            // pods/binding, as the scheduler binds a pod
            // (`setPodNodeAndMetadata` in pkg/registry/core/pod/storage).
            (Method::POST, Some(name))
                if t.sub.as_deref() == Some("binding") && coll.def.plural == "pods" =>
            {
                let Some(pod) = coll.objects.get_mut(&(ns, name.clone())) else {
                    return once(
                        404,
                        &status(404, "NotFound", &format!("pods \"{name}\" not found")),
                    );
                };
                let conflict = |why: String| {
                    let msg =
                        format!("Operation cannot be fulfilled on pods/binding \"{name}\": {why}");
                    once(409, &status(409, "Conflict", &msg))
                };
                if let Some(node) = pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) {
                    return conflict(format!("pod {name} is already assigned to node {node:?}"));
                }
                if pod["spec"]["schedulingGates"]
                    .as_array()
                    .is_some_and(|g| !g.is_empty())
                {
                    return conflict(format!("pod {name} has non-empty .spec.schedulingGates"));
                }
                if dry {
                    return once(
                        201,
                        &json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}),
                    );
                }
                pod["spec"]["nodeName"] = body.unwrap_or_default()["target"]["name"].clone();
                pod["metadata"]["resourceVersion"] = json!(rv.to_string());
                let obj = pod.clone();
                Self::emit(coll, rv, "MODIFIED", obj);
                once(
                    201,
                    &json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}),
                )
            }
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
                obj["metadata"]["creationTimestamp"] = json!(stamp);
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
                // A merge patch naming a resourceVersion is a compare-and-swap
                // as a PUT is: kube-apiserver applies it to the stored object
                // and refuses the result if its version is not the stored one.
                if stale(&body, &current) {
                    return once(409, &status(409, "Conflict", &format!("Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again", coll.def.plural)));
                }
                let mut next = match updated(&coll.def, &current, &m, sub, &body) {
                    Ok(next) => next,
                    Err(e) => {
                        let msg = format!(
                            "the server rejected our request due to an error in our request: {e}"
                        );
                        return once(422, &status(422, "Invalid", &msg));
                    }
                };
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
                } else if metadata_only {
                    once(200, &partial_metadata(&next))
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

impl FakeApi {
    /// A PUT or PATCH whose object (a merge patch's result, or the patch
    /// itself) names a `metadata.uid` other than the stored object's is
    /// refused with 409, as kube-apiserver refuses a write whose uid
    /// precondition fails; before validating admission, which never sees
    /// it. A write naming no uid is not checked.
    fn uid_mismatch(
        &self,
        method: &Method,
        path: &str,
        body: Option<&Value>,
    ) -> Option<Response<RespBody>> {
        if !matches!(*method, Method::PUT | Method::PATCH) {
            return None;
        }
        let sent = body?["metadata"]["uid"]
            .as_str()
            .filter(|u| !u.is_empty())?;
        let t = Self::parse(path)?;
        let name = t.name.clone()?;
        let g = self.state.lock().unwrap();
        let coll = g.colls.get(&t.coll)?;
        let current = coll
            .objects
            .get(&(t.namespace.clone().unwrap_or_default(), name.clone()))?;
        let have = current["metadata"]["uid"].as_str().unwrap_or("");
        (have != sent).then(|| {
            let msg = format!(
                "Operation cannot be fulfilled on {} \"{name}\": Precondition failed: UID in precondition: {sent}, UID in object meta: {have}",
                coll.def.plural
            );
            once(409, &status(409, "Conflict", &msg))
        })
    }
}

pub(super) fn stale(body: &Value, current: &Value) -> bool {
    let sent = body["metadata"]["resourceVersion"].as_str().unwrap_or("");
    !sent.is_empty()
        && sent
            != current["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or("")
}

/// The object a PUT or PATCH of `current` (or of its subresource `sub`)
/// leaves, before its new resourceVersion.
pub(super) fn updated(
    def: &KindDef,
    current: &Value,
    m: &Method,
    sub: Option<&str>,
    body: &Value,
) -> Result<Value, String> {
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
            // A JSON patch (RFC 6902) is a list; a merge patch an object.
            _ if body.is_array() => super::admission::json_patch(&mut next, body)?,
            // The status subresource takes only the status of the patched
            // object; everything else stays as stored (a CRD's status
            // strategy).
            // Merged into the status alone, which is what the whole
            // merge leaves there (RFC 7386 merges key by key), without a
            // second copy of the stored object.
            Some("status") => match body.get("status") {
                Some(s) if !s.is_null() => merge(&mut next["status"], s),
                None if body.is_object() => {}
                // `"status": null`, or a patch that is no object (it
                // replaces the whole, which then has no status).
                _ => {
                    if let Some(o) = next.as_object_mut() {
                        o.remove("status");
                    }
                }
            },
            _ => merge(&mut next, body),
        }
    }
    Ok(next)
}

/// An object's metadata alone, as kube-apiserver answers a request that
/// accepts `as=PartialObjectMetadata` (a get, an update or a patch).
fn partial_metadata(o: &Value) -> Value {
    json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": o["metadata"]})
}

pub(super) fn scale_of(o: &Value) -> Value {
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
        let served: Self::Future = Box::pin(async move {
            let method = req.method().clone();
            let metadata_only = req.headers().get_all(http::header::ACCEPT).iter().any(|a| {
                a.to_str()
                    .is_ok_and(|a| a.contains("as=PartialObjectMetadata"))
            });
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
            if metadata_only && method == Method::GET {
                let mut g = me.state.lock().unwrap();
                g.metadata_gets.push(path.clone());
                // Counted apart too: "metadata get <plural>" (the GET is
                // also in "get <plural>").
                *g.tally
                    .entry(format!("metadata {}", tally_key(&method, &path, &query)))
                    .or_default() += 1;
                let keep = g.history;
                trim(&mut g.metadata_gets, keep);
            }
            if path.starts_with("/apis/coordination.k8s.io/") {
                // A stalled connection: no answer, and no error either.
                while me.leases_hang.load(std::sync::atomic::Ordering::SeqCst) {
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
            }
            let raced = if method != Method::GET {
                me.start_line(&path, body.as_ref()).await
            } else {
                None
            };
            let raced_body = raced.as_ref().and(body.clone());
            if method != Method::GET {
                let mut g = me.state.lock().unwrap();
                if let Some(n) = g.unreachable.get_mut(&path).filter(|n| **n > 0) {
                    *n -= 1;
                    let msg = "the server is currently unable to handle the request";
                    return Ok(once(503, &status(503, "ServiceUnavailable", msg)));
                }
            }
            let dry = query_params(&query)
                .get("dryRun")
                .is_some_and(|d| d == "All");
            let mut warnings = Vec::new();
            let (mut method, mut body) = (method, body);
            if let Some(mut attrs) = me
                .attributes(&method, &path, body.as_ref())
                .filter(FakeApi::mutable)
            {
                match me.mutate(&mut attrs, dry).await {
                    // The patched object is what is written: a merge patch
                    // becomes the replace of its result.
                    Ok((Some(object), w)) => {
                        warnings = w;
                        if method == Method::PATCH {
                            method = Method::PUT;
                        }
                        body = Some(object);
                    }
                    Ok((None, w)) => warnings = w,
                    Err(refused) => return Ok(refused),
                }
            }
            if let Some(refused) = me.uid_mismatch(&method, &path, body.as_ref()) {
                return Ok(refused);
            }
            if let Some(attrs) = me.attributes(&method, &path, body.as_ref()) {
                if let Some(invalid) = super::admission::invalid(&attrs) {
                    return Ok(invalid);
                }
                let paused = matches!(method, Method::POST | Method::PUT | Method::PATCH)
                    .then(|| me.state.lock().unwrap().paused_validation.remove(&path))
                    .flatten();
                if let Some(delay) = paused {
                    tokio::time::sleep(delay).await;
                }
                match me.admit(&attrs, dry).await {
                    Ok(w) => warnings.extend(w),
                    Err(refused) => return Ok(refused),
                }
            }
            let write = method != Method::GET;
            if write {
                let delay = {
                    let g = me.state.lock().unwrap();
                    g.write_delay + g.slow_writes.get(&path).copied().unwrap_or_default()
                };
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
            }
            if write && !dry {
                me.interfere(&path);
            }
            let mut resp = me.handle(method, &path, &query, body, dry, metadata_only);
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
            if let (Some((log, together)), Some(b)) = (raced, raced_body) {
                log.lock()
                    .unwrap()
                    .push((b, resp.status().as_u16(), together));
            }
            Ok(resp)
        });
        // A runtime of its own (`serve_on`), as kube-apiserver is a process
        // of its own: its work never holds a thread of the server's. A
        // request in flight when that runtime shuts down (the end of a
        // bench) is answered 503, as a stopping kube-apiserver answers.
        match self.state.lock().unwrap().runtime.clone() {
            Some(rt) => Box::pin(async move {
                rt.spawn(served).await.unwrap_or_else(|_| {
                    Ok(once(
                        503,
                        &status(503, "ServiceUnavailable", "the API server is stopping"),
                    ))
                })
            }),
            None => served,
        }
    }
}

/// The key `FakeApi::tally` counts a request under: its verb (get, list,
/// watch, post, put, patch, delete) and its resource, with a subresource
/// after a slash ("put bizgroupresourcequotas/status").
fn tally_key(method: &Method, path: &str, query: &str) -> String {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let mut at = match segs.first() {
        Some(&"api") => 2,
        Some(&"apis") => 3,
        _ => return format!("{} {path}", method.as_str().to_lowercase()),
    };
    if segs.get(at) == Some(&"namespaces") && segs.len() > at + 2 {
        at += 2;
    }
    let plural = segs.get(at).copied().unwrap_or("");
    let named = segs.len() > at + 1;
    let verb = match method.as_str() {
        "GET" if named => "get",
        "GET" if query.contains("watch=true") || query.contains("watch=1") => "watch",
        "GET" => "list",
        m => return format!("{} {plural}{}", m.to_lowercase(), sub_of(&segs, at)),
    };
    format!("{verb} {plural}{}", sub_of(&segs, at))
}

fn sub_of(segs: &[&str], at: usize) -> String {
    segs.get(at + 2)
        .map(|s| format!("/{s}"))
        .unwrap_or_default()
}

/// A merge patch of the status subresource leaves the status the whole
/// merge leaves (what `updated` did before it merged into the status
/// alone), and everything else as stored: fields set, replaced, removed
/// by null, a status made where there was none, the status removed, a
/// patch that names no status, and one that is no object.
#[test]
fn a_status_merge_patch_leaves_what_merging_the_whole_object_leaves() {
    let def = KINDS
        .iter()
        .find(|k| k.plural == "bizgroupresourcequotas")
        .expect("the quota kind");
    let whole = |current: &Value, body: &Value| {
        let mut next = current.clone();
        let mut patched = current.clone();
        merge(&mut patched, body);
        match patched.get("status") {
            Some(s) => next["status"] = s.clone(),
            None => {
                next.as_object_mut().unwrap().remove("status");
            }
        }
        next
    };
    let stored = json!({"metadata": {"name": "q", "resourceVersion": "7"},
        "spec": {"hard": {"cpu": "4"}},
        "status": {"used": {"cpu": "1", "memory": "2Gi"}, "queue": [{"a": 1}], "note": "x"}});
    let bare = json!({"metadata": {"name": "q"}, "spec": {"hard": {"cpu": "4"}}});
    let bodies = [
        json!({"status": {"used": {"cpu": "2"}}}),
        json!({"status": {"used": {"memory": null}, "queue": [], "note": null}}),
        json!({"status": {"queue": [{"b": 2}], "new": {"deep": {"x": 1}}}}),
        json!({"status": null}),
        json!({"status": "flat"}),
        json!({"metadata": {"labels": {"x": "y"}}, "spec": {"hard": null}}),
        json!({}),
        json!("not an object"),
    ];
    for current in [&stored, &bare] {
        for body in &bodies {
            let got = updated(def, current, &Method::PATCH, Some("status"), body).unwrap();
            assert_eq!(got, whole(current, body), "{current} patched with {body}");
            assert_eq!(got["spec"], current["spec"], "only the status changes");
            assert_eq!(got["metadata"], current["metadata"]);
        }
    }
}
