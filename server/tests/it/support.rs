//! The test-support builders every module of the suite uses, in the style
//! of Kueue's `MakeWorkload(...).Obj()`: one `Job` builder
//! (`job("a").ns("ml").quota("team").pods(2).cpu("4").obj()`), one
//! AdmissionReview builder (`Review`), and the readers several modules
//! share: a quota's queue (`queue_refs`), the Events the emulated API
//! server holds (`events`, `until_event` and its named variants) and
//! `/metrics` (`metric` and its named variants); and a user's Jobs as
//! kubectl reaches them (`jobs_of`).
//!
//! Each builder produces exactly the JSON the hand-written helpers it
//! replaced produced for the same arguments.
use crate::cluster::Cluster;
use crate::common::{review, Server};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use serde_json::{json, Value};
use std::time::Duration;

/// The label binding a workload to its quota.
pub const QUOTA_LABEL: &str = "biz.group.resource.quota";
/// The label naming the GPU model a workload asks for.
pub const MODEL_LABEL: &str = "biz.group.resource.quota/gpu-type";
/// The annotation declaring a workload's maximum run time.
pub const MAX_RUNTIME: &str = "biz.group.resource.quota/max-runtime";

/// The Jobs of `ns` as `user` reaches them through the emulated API
/// server, as kubectl would: every write goes through bizrq's webhooks.
pub fn jobs_of(c: &Cluster, user: &str, ns: &str) -> Api<DynamicObject> {
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("batch", "v1", "Job"), "jobs");
    Api::namespaced_with(c.kubectl(user), ns, &ar)
}

/// What each pod of a `Job` asks for.
#[derive(Clone)]
enum Asks {
    Cpu(String),
    /// One `nvidia.com/gpu` per pod.
    Card,
}

/// A batch/v1 Job: `pods` pods at once (parallelism = completions), each
/// of one container asking (requests = limits) for a cpu quantity or for
/// one card. Defaults: namespace `ml`, quota `ml`, one pod of 1 cpu,
/// image `trainer`.
#[derive(Clone)]
pub struct Job {
    name: String,
    ns: String,
    quota: String,
    pods: i64,
    asks: Asks,
    image: String,
    uid: Option<String>,
    model: Option<String>,
    class: Option<String>,
    priority: Option<i64>,
    deadline: Option<i64>,
    max_runtime: Option<String>,
}

/// A Job named `name`; see [`Job`] for the defaults.
pub fn job(name: &str) -> Job {
    Job {
        name: name.to_string(),
        ns: "ml".to_string(),
        quota: "ml".to_string(),
        pods: 1,
        asks: Asks::Cpu("1".to_string()),
        image: "trainer".to_string(),
        uid: None,
        model: None,
        class: None,
        priority: None,
        deadline: None,
        max_runtime: None,
    }
}

impl Job {
    pub fn ns(mut self, ns: &str) -> Job {
        self.ns = ns.to_string();
        self
    }

    /// The quota it is bound to (its quota label).
    pub fn quota(mut self, quota: &str) -> Job {
        self.quota = quota.to_string();
        self
    }

    /// How many pods run at once (parallelism and completions).
    pub fn pods(mut self, pods: i64) -> Job {
        self.pods = pods;
        self
    }

    /// Each pod's cpu: a quantity ("4", "500m") or a whole number of cores.
    pub fn cpu(mut self, cpu: impl ToString) -> Job {
        self.asks = Asks::Cpu(cpu.to_string());
        self
    }

    /// `cards` cards: as many pods, each asking for one `nvidia.com/gpu`.
    pub fn cards(mut self, cards: i64) -> Job {
        self.pods = cards;
        self.asks = Asks::Card;
        self
    }

    /// The GPU model label; None leaves it off.
    pub fn model<'a>(mut self, model: impl Into<Option<&'a str>>) -> Job {
        self.model = model.into().map(str::to_string);
        self
    }

    /// The template's `priorityClassName`; None leaves it off.
    pub fn class<'a>(mut self, class: impl Into<Option<&'a str>>) -> Job {
        self.class = class.into().map(str::to_string);
        self
    }

    /// The template's resolved `priority`; None leaves it off.
    pub fn priority(mut self, priority: impl Into<Option<i64>>) -> Job {
        self.priority = priority.into();
        self
    }

    /// `spec.activeDeadlineSeconds`; None leaves it off.
    pub fn deadline(mut self, seconds: impl Into<Option<i64>>) -> Job {
        self.deadline = seconds.into();
        self
    }

    /// The declared maximum run time (the annotation, e.g. "2h"); None
    /// leaves it off.
    pub fn max_runtime<'a>(mut self, runtime: impl Into<Option<&'a str>>) -> Job {
        self.max_runtime = runtime.into().map(str::to_string);
        self
    }

    /// `metadata.uid`, as the API server would have set it.
    pub fn uid(mut self, uid: &str) -> Job {
        self.uid = Some(uid.to_string());
        self
    }

    /// `metadata.uid` "uid-{name}".
    pub fn named_uid(self) -> Job {
        let uid = format!("uid-{}", self.name);
        self.uid(&uid)
    }

    /// The container's image.
    pub fn image(mut self, image: &str) -> Job {
        self.image = image.to_string();
        self
    }

    /// The Job as JSON.
    pub fn obj(&self) -> Value {
        let (requests, limits) = match &self.asks {
            Asks::Cpu(cpu) => (json!({"cpu": cpu}), json!({"cpu": cpu})),
            Asks::Card => (
                json!({"nvidia.com/gpu": "1"}),
                json!({"nvidia.com/gpu": "1"}),
            ),
        };
        let mut j = json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": self.name, "namespace": self.ns, "labels": {QUOTA_LABEL: self.quota}},
            "spec": {"parallelism": self.pods, "completions": self.pods,
                "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": self.image,
                    "resources": {"requests": requests, "limits": limits}}]}}}});
        if let Some(uid) = &self.uid {
            j["metadata"]["uid"] = json!(uid);
        }
        if let Some(m) = &self.model {
            j["metadata"]["labels"][MODEL_LABEL] = json!(m);
        }
        if let Some(r) = &self.max_runtime {
            j["metadata"]["annotations"] = json!({MAX_RUNTIME: r});
        }
        if let Some(d) = self.deadline {
            j["spec"]["activeDeadlineSeconds"] = json!(d);
        }
        if let Some(c) = &self.class {
            j["spec"]["template"]["spec"]["priorityClassName"] = json!(c);
        }
        if let Some(p) = self.priority {
            j["spec"]["template"]["spec"]["priority"] = json!(p);
        }
        j
    }

    /// The Job as the dynamic object kube's `Api` creates.
    pub fn dynamic(&self) -> DynamicObject {
        serde_json::from_value(self.obj()).unwrap()
    }
}

/// An AdmissionReview, from the fixtures (`common::review`) or bare.
pub struct Review {
    r: Value,
}

impl Review {
    /// A CREATE of `object` (the Deployment CREATE fixture's frame).
    pub fn create(uid: &str, object: Value) -> Review {
        Review {
            r: review("deployment-create.json", uid, Some(object), None),
        }
    }

    /// A DELETE of `old` (the Deployment DELETE fixture's frame).
    pub fn delete(uid: &str, old: Value) -> Review {
        Review {
            r: review("deployment-delete.json", uid, None, Some(old)),
        }
    }

    /// An UPDATE from `old` to `object` (the CREATE fixture's frame, its
    /// operation UPDATE).
    pub fn update(uid: &str, object: Value, old: Value) -> Review {
        let mut r = review("deployment-create.json", uid, Some(object), Some(old));
        r["request"]["operation"] = "UPDATE".into();
        Review { r }
    }

    /// A CREATE under `kind: Job` by `user` of `object` (which need not
    /// be a Job), in `ml`, built bare rather than from a fixture: only
    /// uid, kind, resource, name, namespace, operation, userInfo.username,
    /// object and dryRun — what reaches the webhook when nobody creates
    /// the object afterwards.
    pub fn bare_job_create(uid: &str, user: &str, object: Value) -> Review {
        Review {
            r: json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "request": {"uid": uid,
                    "kind": {"group": "batch", "version": "v1", "kind": "Job"},
                    "resource": {"group": "batch", "version": "v1", "resource": "jobs"},
                    "name": object["metadata"]["name"], "namespace": "ml", "operation": "CREATE",
                    "userInfo": {"username": user}, "object": object, "dryRun": false}}),
        }
    }

    /// Of a batch/v1 Job (kind, requestKind, resource, requestResource).
    pub fn of_job(mut self) -> Review {
        let gvk = json!({"group": "batch", "version": "v1", "kind": "Job"});
        let gvr = json!({"group": "batch", "version": "v1", "resource": "jobs"});
        let r = &mut self.r["request"];
        r["kind"] = gvk.clone();
        r["requestKind"] = gvk;
        r["resource"] = gvr.clone();
        r["requestResource"] = gvr;
        self
    }

    /// `kind` and `resource` only (requestKind and requestResource kept).
    pub fn kind(mut self, group: &str, version: &str, kind: &str, resource: &str) -> Review {
        let r = &mut self.r["request"];
        r["kind"] = json!({"group": group, "version": version, "kind": kind});
        r["resource"] = json!({"group": group, "version": version, "resource": resource});
        self
    }

    pub fn name(mut self, name: &str) -> Review {
        self.r["request"]["name"] = name.into();
        self
    }

    pub fn ns(mut self, ns: &str) -> Review {
        self.r["request"]["namespace"] = ns.into();
        self
    }

    /// The namespace of the request's object.
    pub fn ns_of_object(mut self) -> Review {
        self.r["request"]["namespace"] =
            self.r["request"]["object"]["metadata"]["namespace"].clone();
        self
    }

    pub fn user(mut self, user: &str) -> Review {
        self.r["request"]["userInfo"]["username"] = user.into();
        self
    }

    pub fn obj(self) -> Value {
        self.r
    }
}

/// The answer of `/validate/workloads` to a CREATE of the Job `j` in
/// `ml` (as `user` when given).
pub async fn review_job_create(s: &Server, uid: &str, user: Option<&str>, j: &Value) -> Value {
    let mut r = Review::create(uid, j.clone()).of_job().ns("ml");
    if let Some(u) = user {
        r = r.user(u);
    }
    s.review("/validate/workloads", &r.obj()).await
}

/// As `review_job_create`, asserting the Job is allowed.
pub async fn admit_job(s: &Server, uid: &str, user: Option<&str>, j: &Value) {
    let v = review_job_create(s, uid, user, j).await;
    assert_eq!(v["allowed"], true, "{v}");
}

/// The workloads in a quota's `status.queue`, in order.
pub fn queue_refs(q: &Value) -> Vec<String> {
    q["status"]["queue"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| e["workloadRef"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// Events about `name` with `reason`, as published so far, oldest first.
pub fn events(c: &Cluster, reason: &str, name: &str) -> Vec<Value> {
    c.fake
        .list("events.k8s.io", "events")
        .into_iter()
        .filter(|e| e["reason"] == reason && e["regarding"]["name"] == name)
        .collect()
}

/// Waits (20 s at most) for an Event about `name` with `reason`; returns
/// the newest one.
pub async fn until_event(c: &Cluster, reason: &str, name: &str) -> Value {
    for _ in 0..400 {
        if let Some(e) = events(c, reason, name).pop() {
            return e;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "no Event {reason} on {name}: {:#?}",
        c.fake.list("events.k8s.io", "events")
    );
}

/// As `until_event`, but returns the oldest such Event (the first sent).
pub async fn until_first_event(c: &Cluster, reason: &str, name: &str) -> Value {
    for _ in 0..400 {
        if let Some(e) = events(c, reason, name).into_iter().next() {
            return e;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "no {reason} Event on {name}: {:#?}",
        c.fake.list("events.k8s.io", "events")
    );
}

/// Waits (20 s at most) until `f` holds of some Event the API server has
/// (`what` says which, for the failure); returns the oldest such one.
pub async fn until_event_where(c: &Cluster, what: &str, f: impl Fn(&Value) -> bool) -> Value {
    for _ in 0..400 {
        if let Some(e) = c
            .fake
            .list("events.k8s.io", "events")
            .into_iter()
            .find(|e| f(e))
        {
            return e;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "no Event: {what}\n{:#?}",
        c.fake.list("events.k8s.io", "events")
    );
}

/// The number after `line` on the first `/metrics` line starting with it,
/// in a rendered exposition (None when absent).
pub fn metric_in(text: &str, line: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(line)?.trim().parse().ok())
}

/// The number after `line` in a server's `/metrics` (0 when absent).
pub async fn metric(server: &Server, line: &str) -> f64 {
    let (_, text) = server.get_text("/metrics").await;
    metric_in(&text, line).unwrap_or(0.0)
}

/// A metric's value summed over a server's `/metrics` lines that start
/// with `prefix` (every label set of it).
pub async fn metric_sum(server: &Server, prefix: &str) -> f64 {
    let (_, text) = server.get_text("/metrics").await;
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The text after `name ` on the first line of a rendered exposition
/// that has it ("" when absent): for exact comparisons of the printed
/// value.
pub fn metric_text(text: &str, name: &str) -> String {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ').map(str::to_string))
        .unwrap_or_default()
}
