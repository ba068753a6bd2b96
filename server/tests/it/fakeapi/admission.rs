//! Validating admission as kube-apiserver runs it (see the module above).

use super::serve::{scale_of, stale, updated};
use super::*;
use base64::prelude::{Engine as _, BASE64_STANDARD};

/// What kube-apiserver knows of a write when it runs validating admission.
pub(super) struct Attrs {
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
#[derive(Clone)]
pub(super) struct Webhook {
    name: String,
    rules: Vec<Value>,
    namespace_selector: Option<Value>,
    object_selector: Option<Value>,
    /// `failurePolicy: Fail` (the default); else Ignore.
    fail: bool,
    side_effects: String,
    url: String,
    /// `timeoutSeconds`: each call's own.
    timeout: std::time::Duration,
    /// Which transport it calls through (`State::transports`).
    transport: Transport,
    client: reqwest::Client,
}

/// A webhook client's key, as kube-apiserver caches its webhook clients
/// (`ClientManager::HookClient`, by the whole client config): the server
/// name, the URL (its path included), the endpoint it resolves to and the
/// caBundle (base64). Webhooks of one Service and path share a client;
/// each path has its own (kube-apiserver's custom dialer keeps client-go
/// from sharing transports between them).
pub(super) type Transport = (String, String, std::net::SocketAddr, String);

/// An HTTPS client for `key`: the Service's name resolves to its endpoint
/// (a port in the URL other than the default 443 is kept), verified
/// against the caBundle alone. HTTP/1.1 only, as kube-apiserver calls
/// webhooks (`NextProtos = ["http/1.1"]`, kubernetes#75791): one
/// connection per review in flight, up to 25 kept idle for 90 s
/// (client-go's transport defaults).
fn transport(key: &Transport) -> reqwest::Client {
    let (host, _, endpoint, bundle) = key;
    let pem = base64_decode(bundle);
    let ca = reqwest::Certificate::from_pem(&pem).expect("caBundle holds a PEM certificate");
    reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(ca)
        .resolve(host, *endpoint)
        .http1_only()
        .pool_max_idle_per_host(25)
        .pool_idle_timeout(std::time::Duration::from_secs(90))
        .build()
        .expect("webhook client")
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
        let mutating = config["kind"] == "MutatingWebhookConfiguration";
        assert!(mutating || config["kind"] == "ValidatingWebhookConfiguration");
        let hooks = config["webhooks"]
            .as_array_mut()
            .expect("webhooks is a list");
        let mut loaded = Vec::new();
        let mut transports = std::mem::take(&mut self.state.lock().unwrap().transports);
        for hook in hooks {
            hook["clientConfig"]["caBundle"] = json!(base64_encode(ca_pem.as_bytes()));
            loaded.push(Webhook::load(hook, endpoint, &mut transports));
        }
        let mut g = self.state.lock().unwrap();
        g.transports = transports;
        if mutating {
            g.mutating = Arc::new(loaded);
        } else {
            g.webhooks = Arc::new(loaded);
        }
    }

    /// The webhooks' connections are dropped, as when kube-apiserver
    /// restarts: the configurations stay, each call after this one dials
    /// afresh (on a new transport, shared again as before).
    pub fn restart_webhook_transports(&self) {
        let mut g = self.state.lock().unwrap();
        g.transports.clear();
        let fresh = |hooks: &Arc<Vec<Webhook>>, made: &mut HashMap<_, reqwest::Client>| {
            Arc::new(
                hooks
                    .iter()
                    .map(|h| Webhook {
                        client: made
                            .entry(h.transport.clone())
                            .or_insert_with(|| transport(&h.transport))
                            .clone(),
                        ..h.clone()
                    })
                    .collect::<Vec<_>>(),
            )
        };
        let mut made = HashMap::new();
        g.webhooks = fresh(&g.webhooks, &mut made);
        g.mutating = fresh(&g.mutating, &mut made);
        g.transports = made;
    }

    /// Mutating admission of one write, before validating admission: each
    /// matching webhook in order, its JSONPatch applied to the object the
    /// next one sees. Ok with the object as patched (None: unchanged) and
    /// the warnings, or the answer that refuses the write. Failure
    /// policies as for validating webhooks.
    pub(super) async fn mutate(
        &self,
        a: &mut Attrs,
        dry: bool,
    ) -> Result<(Option<Value>, Vec<String>), Response<RespBody>> {
        let hooks = self.state.lock().unwrap().mutating.clone();
        let mut changed = false;
        let mut warnings = Vec::new();
        let matched: Vec<&Webhook> = hooks.iter().filter(|h| h.matches(a)).collect();
        for h in matched {
            if dry && !matches!(h.side_effects.as_str(), "None" | "NoneOnDryRun") {
                let msg = format!("admission webhook {:?} does not support dry run", h.name);
                return Err(once(400, &status(400, "BadRequest", &msg)));
            }
            let r = self.review(a, dry);
            super::keep_review(
                &mut self.state.lock().unwrap(),
                json!({"webhook": h.name, "request": r["request"]}),
            );
            let sent = std::time::Instant::now();
            let answer = h.call(&r).await;
            let patched = matches!(&answer, Ok(r) if r["patch"].is_string());
            self.observe_webhook(&h.name, a.operation, Some(patched), sent.elapsed());
            match answer {
                Ok(resp) => {
                    if let Some(w) = resp["warnings"].as_array() {
                        warnings.extend(w.iter().filter_map(|w| w.as_str().map(str::to_string)));
                    }
                    if resp["allowed"] != true {
                        return Err(denied(&h.name, &resp["status"]));
                    }
                    if let Some(p) = resp["patch"].as_str() {
                        assert_eq!(resp["patchType"], "JSONPatch", "{}: patchType", h.name);
                        let ops: Value =
                            serde_json::from_slice(&base64_decode(p)).expect("the patch is JSON");
                        json_patch(&mut a.object, &ops).map_err(|e| {
                            let msg = format!(
                                "Internal error occurred: admission webhook {:?} returned an invalid patch: {e}",
                                h.name
                            );
                            once(500, &status(500, "InternalError", &msg))
                        })?;
                        changed = true;
                    }
                }
                Err(e) if h.fail => return Err(call_failed(&h.name, &e)),
                Err(_) => {}
            }
        }
        Ok((changed.then(|| a.object.clone()), warnings))
    }

    /// Whether a write is one mutating admission sees (not a DELETE, not a
    /// subresource such as scale or status).
    pub(super) fn mutable(a: &Attrs) -> bool {
        a.operation != "DELETE" && a.sub.is_none()
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
    pub(super) fn attributes(
        &self,
        method: &Method,
        path: &str,
        body: Option<&Value>,
    ) -> Option<Attrs> {
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
        // A write no webhook's rules name, and that is not a pod update
        // (checked by `invalid` whatever the webhooks), goes to storage
        // without admission: its objects are not built. kube-apiserver
        // builds them only for the webhooks it calls; here they were built
        // twice a write (before the mutating and the validating webhooks),
        // each time copying the stored object and the object the write
        // leaves (a quota's status, 40 KB at the Kueue baseline's scale,
        // on every round).
        // Its answer is unchanged: what it would refuse before admission
        // (no such object, a stale version) `handle` refuses as well.
        let probe = Attrs {
            operation,
            group: def.group.to_string(),
            version: def.version.to_string(),
            resource: def.plural.to_string(),
            sub: t.sub.clone(),
            kind: Value::Null,
            namespaced: def.namespaced,
            namespace: String::new(),
            name: String::new(),
            object: Value::Null,
            old_object: Value::Null,
            delete_options: Value::Null,
        };
        let named = g
            .webhooks
            .iter()
            .chain(g.mutating.iter())
            .any(|h| h.rules.iter().any(|r| rule_matches(r, &probe)));
        if !named && !gates_checked(&probe) {
            return None;
        }
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
                if stale(&body, &current) {
                    return None;
                }
                // A patch that cannot apply is answered 422 before admission.
                let next = updated(&def, &current, method, t.sub.as_deref(), &body).ok()?;
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
            kind,
            namespace: ns,
            name,
            object,
            old_object,
            delete_options,
            ..probe
        })
    }

    /// Validating admission of one write: every matching webhook is called
    /// (at once, as kube-apiserver does); Ok with their warnings, or the
    /// answer that refuses the write.
    pub(super) async fn admit(
        &self,
        a: &Attrs,
        dry: bool,
    ) -> Result<Vec<String>, Response<RespBody>> {
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
                super::keep_review(&mut g, json!({"webhook": h.name, "request": r["request"]}));
            }
        }
        let answers =
            futures::future::join_all(matched.iter().zip(&reviews).map(|(h, r)| async move {
                let sent = std::time::Instant::now();
                let answer = h.call(r).await;
                self.observe_webhook(&h.name, a.operation, None, sent.elapsed());
                answer
            }))
            .await;
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
                Err(e) if h.fail => return Err(call_failed(&h.name, &e)),
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

/// A webhook that could not be called under `failurePolicy: Fail`, as
/// kube-apiserver answers the write.
fn call_failed(webhook: &str, e: &dyn std::fmt::Display) -> Response<RespBody> {
    let msg = format!("Internal error occurred: failed calling webhook {webhook:?}: {e}");
    once(500, &status(500, "InternalError", &msg))
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
    /// `transports`: the clients made so far (`State::transports`), the
    /// hook's taken from them or added.
    fn load(
        hook: &Value,
        endpoint: std::net::SocketAddr,
        transports: &mut HashMap<Transport, reqwest::Client>,
    ) -> Webhook {
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
        let key = (
            host,
            url.clone(),
            endpoint,
            cc["caBundle"].as_str().expect("caBundle").to_string(),
        );
        let client = transports
            .entry(key.clone())
            .or_insert_with(|| transport(&key))
            .clone();
        let url = format!("{url}?timeout={timeout}s");
        let selector = |k: &str| Some(hook[k].clone()).filter(|v| v.is_object());
        Webhook {
            rules: hook["rules"].as_array().cloned().unwrap_or_default(),
            namespace_selector: selector("namespaceSelector"),
            object_selector: selector("objectSelector"),
            fail: hook["failurePolicy"].as_str().unwrap_or("Fail") == "Fail",
            side_effects,
            url,
            timeout: std::time::Duration::from_secs(timeout),
            transport: key,
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
            .timeout(self.timeout)
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

fn base64_encode(bytes: &[u8]) -> String {
    BASE64_STANDARD.encode(bytes)
}

/// As the API server reads a `[]byte` field: standard, padded base64.
fn base64_decode(text: &str) -> Vec<u8> {
    BASE64_STANDARD.decode(text).expect("valid base64")
}

/// RFC 6902 `add`, `replace`, `remove` and `test`, on object members and
/// list elements (`-` appends), as kube-apiserver applies a JSON patch: an
/// op that cannot apply fails the whole patch.
pub(super) fn json_patch(target: &mut Value, ops: &Value) -> Result<(), String> {
    for op in ops.as_array().ok_or("a patch is a list")? {
        let path = op["path"].as_str().ok_or("op without path")?;
        if op["op"] == "test" {
            if target.pointer(path) != Some(&op["value"]) {
                return Err(format!("testing value {path} failed"));
            }
            continue;
        }
        let (parent, last) = path.rsplit_once('/').ok_or("path must start with /")?;
        let last = last.replace("~1", "/").replace("~0", "~");
        let at = target
            .pointer_mut(parent)
            .ok_or_else(|| format!("{path}: parent does not exist"))?;
        match (op["op"].as_str(), at) {
            (Some("add") | Some("replace"), Value::Object(m)) => {
                if op["op"] == "replace" && !m.contains_key(&last) {
                    return Err(format!(
                        "replace operation does not apply: doc is missing key: {path}"
                    ));
                }
                m.insert(last, op["value"].clone());
            }
            (Some("remove"), Value::Object(m)) => {
                m.remove(&last).ok_or_else(|| {
                    format!("remove operation does not apply: doc is missing key: {path}")
                })?;
            }
            (Some(o @ ("add" | "replace" | "remove")), Value::Array(l)) => {
                let i = if last == "-" && o == "add" {
                    l.len()
                } else {
                    last.parse::<usize>()
                        .ok()
                        .filter(|i| *i < l.len() || (o == "add" && *i == l.len()))
                        .ok_or_else(|| format!("{path}: index out of range"))?
                };
                match o {
                    "add" => l.insert(i, op["value"].clone()),
                    "replace" => l[i] = op["value"].clone(),
                    _ => {
                        l.remove(i);
                    }
                }
            }
            (o, _) => return Err(format!("unsupported op {o:?} at {path}")),
        }
    }
    Ok(())
}

/// Whether `invalid` checks the write (a pod's own update), whatever the
/// webhooks: its review's objects are built for it.
fn gates_checked(a: &Attrs) -> bool {
    a.group.is_empty() && a.resource == "pods" && a.operation == "UPDATE" && a.sub.is_none()
}

/// kube-apiserver's validation of a write, after mutating and before
/// validating admission, for what the fake models: a pod update may only
/// remove scheduling gates (`validateOnlyDeletedSchedulingGates` in
/// pkg/apis/core/validation/validation.go). The refusal, if any.
pub(super) fn invalid(a: &Attrs) -> Option<Response<RespBody>> {
    if !gates_checked(a) {
        return None;
    }
    let names = |p: &Value| -> Vec<String> {
        p["spec"]["schedulingGates"]
            .as_array()
            .map(|g| {
                g.iter()
                    .filter_map(|g| g["name"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let before = names(&a.old_object);
    if let Some((i, added)) = names(&a.object)
        .into_iter()
        .enumerate()
        .find(|(_, g)| !before.contains(g))
    {
        let msg = format!(
            "Pod {:?} is invalid: spec.schedulingGates[{i}].name: Forbidden: only deletion is allowed, but found new scheduling gate '{added}'",
            a.name
        );
        return Some(once(422, &status(422, "Invalid", &msg)));
    }
    None
}
