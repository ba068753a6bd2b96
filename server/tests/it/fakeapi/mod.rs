//! An in-memory Kubernetes API server behind `kube::Client` (a tower
//! service at its HTTP boundary): discovery, list, watch (a live stream of
//! JSON lines from a resourceVersion), get, create, replace with
//! `resourceVersion` compare-and-swap (409 on a stale one), a write naming
//! a `metadata.uid` refused with 409 when the stored object has another
//! (the uid precondition, before validating admission), the status and
//! scale subresources, JSON merge patch and JSON patch (RFC 6902, 422 when
//! it cannot be applied), delete and `dryRun=All`. Every request is
//! recorded, so tests assert the exact calls the controller makes.
//!
//! Pods as kube-apiserver keeps them: `spec.schedulingGates` may only lose
//! gates on an update (an added one is refused with 422, in the words of
//! `validateOnlyDeletedSchedulingGates`, before validating admission), and
//! `pods/binding` refuses a gated pod with 409 (`setPodNodeAndMetadata`).
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

mod admission;
mod kinds;
mod serve;

use admission::Webhook;
pub use kinds::{KindDef, JOBSET, KINDS, PYTORCHJOB, VOLCANOJOB};

use axum::body::Bytes;
use futures::StreamExt;
use http::{Method, Request, Response};
use http_body_util::{combinators::UnsyncBoxBody, BodyExt, StreamBody};
use k8s_openapi::jiff::Timestamp;
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

/// A watch event as stored and sent to every watcher: the object is
/// shared, as kube-apiserver's watch cache shares one decoded object
/// between its watchers, and serialized once for all of them (`Encoded`),
/// as kube-apiserver encodes a watched object once per format, not once
/// per watcher (its `cachingObject`, since 1.18).
type Event = (u64, &'static str, Arc<Value>, Arc<Encoded>);

/// An event's object as JSON, made by the first watcher that sends it.
#[derive(Default)]
struct Encoded(std::sync::OnceLock<Bytes>);

impl Encoded {
    fn of(&self, o: &Value) -> &Bytes {
        self.0
            .get_or_init(|| Bytes::from(serde_json::to_vec(o).unwrap()))
    }
}

struct Coll {
    def: KindDef,
    objects: BTreeMap<(String, String), Value>,
    /// The events watches are served from: bounded, as kube-apiserver's
    /// watch cache and etcd's compaction bound them (`WATCH_HISTORY`, or
    /// `bound_history`).
    log: Vec<Event>,
    /// The newest resourceVersion dropped from `log`: a watch from an
    /// older version cannot be served.
    compacted: u64,
    /// How many events `log` keeps.
    keep: Option<usize>,
    /// Every version stored, for the tests that read them all
    /// (`quota_versions`): unbounded unless `bound_history` bounds it.
    versions: Vec<(u64, Arc<Value>)>,
    /// How many `versions` keeps (None: all).
    versions_keep: Option<usize>,
    tx: broadcast::Sender<Event>,
    /// Bumped by `end_watches`: every watch open on the kind ends.
    ends: tokio::sync::watch::Sender<u64>,
}

#[derive(Default)]
struct State {
    /// Where requests are served (`serve_on`); None: the caller's runtime.
    runtime: Option<tokio::runtime::Handle>,
    rv: u64,
    colls: HashMap<String, Coll>,
    requests: Vec<String>,
    /// The paths of the GETs answered with the metadata alone
    /// (`as=PartialObjectMetadata`), which `requests` lists as any GET.
    metadata_gets: Vec<String>,
    /// How many requests of each verb and resource were served, whatever
    /// `history` keeps (`tally`): "get bizgroupresourcequotas",
    /// "patch jobs", "put bizgroupresourcequotas/status", "list …", "watch …";
    /// "metadata get …", the GETs of those answered with the metadata alone;
    /// and "expired …", the watches answered 410 Expired.
    tally: HashMap<String, u64>,
    /// Answer the next N writes to these paths with 409.
    conflicts: HashMap<String, usize>,
    /// Answer the next N writes to these paths with 500, writing nothing
    /// (etcd unavailable).
    failures: HashMap<String, usize>,
    /// Answer the next N GETs of these objects' paths with 500.
    failed_reads: HashMap<String, usize>,
    /// Answer the next N GETs of these objects' paths with 403, as RBAC
    /// refuses an identity without `get` on the resource.
    forbidden_reads: HashMap<String, usize>,
    /// How long each write (POST, PUT, PATCH, DELETE; dry runs too) takes
    /// before it is made, as etcd's commit would; zero by default.
    write_delay: std::time::Duration,
    /// How late each live watch event reaches its watchers (a loaded API
    /// server's or client's lag); zero by default. Reads see writes at once.
    /// (milliseconds, shared with every open watch, so a change reaches
    /// watches already open)
    watch_delay: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// The next watch opened on these collections lags this much more than
    /// `watch_delay` (`lag_next_watch`): one client's watch behind another's.
    next_watch_lag: HashMap<String, std::time::Duration>,
    /// Writes to these paths take this long besides `write_delay` (one
    /// object's writes slow, as under a loaded API server and webhooks).
    slow_writes: HashMap<String, std::time::Duration>,
    /// One-shot pauses of the next write to a path, between reading the
    /// object its validating reviews are sent about and sending them.
    paused_validation: HashMap<String, std::time::Duration>,
    /// Make the next write to these paths, then answer 504 as if the
    /// connection had timed out after the write.
    lost_answers: HashMap<String, usize>,
    /// Just before the next write to these paths is made: another
    /// client's write of the same object (the change given), so that
    /// write meets a newer version than the one it was decided on.
    interfere: HashMap<String, Interference>,
    /// Answer the next N writes to these paths with 503 before anything
    /// else: no webhook called, nothing written (the request never got
    /// through, as when its sender stopped before sending it).
    unreachable: HashMap<String, usize>,
    /// The loaded ValidatingWebhookConfiguration, if any.
    webhooks: Arc<Vec<Webhook>>,
    /// The webhooks' HTTPS clients, one per client config (Service, path,
    /// endpoint, caBundle), as kube-apiserver caches them: two webhooks of
    /// the same path share one; HTTP/1.1, one connection per review in
    /// flight (`admission::transport`).
    transports: HashMap<admission::Transport, reqwest::Client>,
    /// The loaded MutatingWebhookConfiguration, if any: called before the
    /// validating ones, one after another, each seeing the object as the
    /// previous one patched it.
    mutating: Arc<Vec<Webhook>>,
    /// Every AdmissionReview sent: `{"webhook": name, "request": …}`.
    reviews: Vec<Value>,
    /// Writes held at a starting line until enough arrive (`race_writes`).
    races: HashMap<String, Race>,
    /// At most this many events per kind, requests and reviews are kept
    /// (`bound_history`); all of them when None.
    history: Option<usize>,
    /// How long each call to each webhook took, by webhook name.
    latencies: HashMap<String, Vec<std::time::Duration>>,
    /// Stamp `creationTimestamp` with the wall clock (`wall_clock_stamps`).
    wall_clock: bool,
    /// Stamp `creationTimestamp` at this time (`stamp_creations_at`).
    stamp_at: Option<i64>,
}

/// About how many events of each kind watches are served from by default
/// (`Coll::log`): kube-apiserver always compacts, so a watch from a version
/// older than that is told 410 Expired and lists again. More than a live
/// watch's channel holds (4096), so a watcher ended for lagging is resumed
/// from the log, as before.
const WATCH_HISTORY: usize = 5_000;

/// A review sent, kept within the bounded history.
fn keep_review(g: &mut State, review: Value) {
    g.reviews.push(review);
    let keep = g.history;
    trim(&mut g.reviews, keep);
}

/// Drop the oldest entries of `v` once it holds half again `keep`, so
/// trimming costs O(1) amortised per entry; returns what was dropped.
fn trim<T>(v: &mut Vec<T>, keep: Option<usize>) -> Vec<T> {
    match keep {
        Some(keep) if v.len() > keep + keep / 2 + 1 => v.drain(..v.len() - keep).collect(),
        _ => Vec::new(),
    }
}

/// Writes to one path that match `matches`, held until `n` of them have
/// arrived (or `deadline` passes), then let through together: each is
/// logged with the code it was answered.
struct Race {
    matches: fn(&Value) -> bool,
    n: usize,
    arrived: usize,
    deadline: std::time::Instant,
    log: RaceLog,
}

/// What `race_writes` saw: each held write's body, its answer's code, and
/// whether it was let through because all `n` had arrived (not the time).
pub type RaceLog = Arc<Mutex<Vec<(Value, u16, bool)>>>;

type Interference = Box<dyn FnOnce(&mut Value) + Send>;

/// bizrq's service account: who `client()` is.
pub const BIZRQ_USER: &str = "system:serviceaccount:bizrq-system:bizrq";

#[derive(Clone, Default)]
pub struct FakeApi {
    state: Arc<Mutex<State>>,
    /// Who this handle's requests come from (empty: `BIZRQ_USER`).
    user: Arc<String>,
    /// This handle's own connection (`own_link`): while set, its calls
    /// to the Lease API hang, unanswered, as over a stalled connection.
    leases_hang: Arc<std::sync::atomic::AtomicBool>,
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

/// JSON merge patch as RFC 7386 defines it (and kube-apiserver applies
/// it): an object patch makes the target an object first, and a null
/// removes a member, also inside a member the target did not have.
fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Default::default());
    }
    let t = target.as_object_mut().expect("made an object");
    for (k, v) in p {
        if v.is_null() {
            t.remove(k);
        } else {
            merge(t.entry(k.clone()).or_insert(Value::Null), v);
        }
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
        // kube-apiserver creates these two at start and serves them like
        // any PriorityClass (list, get, watch).
        for (name, value) in [
            ("system-node-critical", 2_000_001_000),
            ("system-cluster-critical", 2_000_000_000),
        ] {
            f.put(json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                "metadata": {"name": name}, "value": value, "globalDefault": false,
                "preemptionPolicy": "PreemptLowerPriority",
                "description": "Used for system critical pods that must not be moved from their current node."}));
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
            leases_hang: Arc::default(),
        };
        kube::Client::new(me, "default")
    }

    /// The same API server over a connection of its own, as a second pod
    /// has: what `hang_lease_calls` does to it touches no other handle.
    pub fn own_link(&self) -> FakeApi {
        FakeApi {
            state: self.state.clone(),
            user: self.user.clone(),
            leases_hang: Arc::default(),
        }
    }

    /// While `on`, this link's calls to `coordination.k8s.io` (the Lease)
    /// are never answered: a leader whose renewal hangs on a stalled
    /// connection, while its other calls still get through. It never
    /// hears that it lost the Lease: it keeps leading until its renew
    /// deadline has passed since its last renewal, or until `off`.
    pub fn hang_lease_calls(&self, on: bool) {
        self.leases_hang
            .store(on, std::sync::atomic::Ordering::SeqCst);
    }

    /// Hold the writes (POST, PUT, PATCH) to `path` whose body `matches`
    /// until `n` have arrived, or `within` has passed, then let them all
    /// through at once: writers that decided on the same version meet at
    /// the compare-and-swap, whatever their timing. The log has each held
    /// write's body and the code it was answered, in the order answered.
    pub fn race_writes(
        &self,
        path: &str,
        n: usize,
        matches: fn(&Value) -> bool,
        within: std::time::Duration,
    ) -> RaceLog {
        let log = RaceLog::default();
        self.state.lock().unwrap().races.insert(
            path.to_string(),
            Race {
                matches,
                n,
                arrived: 0,
                deadline: std::time::Instant::now() + within,
                log: log.clone(),
            },
        );
        log
    }

    /// A write arriving at a race: wait at its starting line. Returns the
    /// log to record its answer in, if it raced, and whether all arrived.
    pub(super) async fn start_line(
        &self,
        path: &str,
        body: Option<&Value>,
    ) -> Option<(RaceLog, bool)> {
        let log = {
            let mut g = self.state.lock().unwrap();
            let race = g.races.get_mut(path)?;
            if !body.is_some_and(|b| (race.matches)(b)) {
                return None;
            }
            race.arrived += 1;
            race.log.clone()
        };
        loop {
            {
                let g = self.state.lock().unwrap();
                let race = &g.races[path];
                if race.arrived >= race.n {
                    return Some((log, true));
                }
                if std::time::Instant::now() >= race.deadline {
                    return Some((log, false));
                }
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }

    /// Every AdmissionReview request sent so far, with its webhook's name.
    pub fn reviews(&self) -> Vec<Value> {
        self.state.lock().unwrap().reviews.clone()
    }

    /// Keep only about the last `n` events of each kind (for watches and
    /// for `quota_versions`), requests and reviews, as kube-apiserver's
    /// watch cache and etcd's compaction keep a bounded history: a long run
    /// (a benchmark) then holds bounded memory. A watch from a
    /// resourceVersion older than the history kept is answered `410
    /// Expired`, and its client lists again. Without it, watches are served
    /// from about the last `WATCH_HISTORY` events and the rest is kept whole.
    pub fn bound_history(&self, n: usize) {
        let mut g = self.state.lock().unwrap();
        g.history = Some(n.max(1));
        for c in g.colls.values_mut() {
            c.keep = Some(n.max(1));
            c.versions_keep = Some(n.max(1));
        }
    }

    /// How long each call the API server made to webhook `name` took
    /// (the review sent over HTTPS to its answer), in order; what
    /// kube-apiserver reports as `apiserver_admission_webhook_admission_duration_seconds`.
    #[allow(dead_code)] // for benches/kueue.rs
    pub fn webhook_latencies(&self, name: &str) -> Vec<std::time::Duration> {
        let g = self.state.lock().unwrap();
        g.latencies.get(name).cloned().unwrap_or_default()
    }

    /// Serve every request on `rt`, a runtime of its own, as
    /// kube-apiserver runs in a process of its own: the bench's server
    /// then shares the machine's CPUs with it, never its runtime's
    /// threads.
    #[allow(dead_code)] // for benches/kueue.rs
    pub fn serve_on(&self, rt: tokio::runtime::Handle) {
        self.state.lock().unwrap().runtime = Some(rt);
    }

    /// Kept under the webhook's name and again under `name/OPERATION`,
    /// so a bench can tell the creates' latency from the updates'; a
    /// mutating webhook's also under `name/OPERATION/patched` or `/plain`
    /// (`patched`: Some), so it can tell the reviews that held an object
    /// back from those passed on.
    pub(super) fn observe_webhook(
        &self,
        name: &str,
        operation: &str,
        patched: Option<bool>,
        took: std::time::Duration,
    ) {
        let mut g = self.state.lock().unwrap();
        g.latencies.entry(name.to_string()).or_default().push(took);
        g.latencies
            .entry(format!("{name}/{operation}"))
            .or_default()
            .push(took);
        if let Some(patched) = patched {
            let answer = if patched { "patched" } else { "plain" };
            g.latencies
                .entry(format!("{name}/{operation}/{answer}"))
                .or_default()
                .push(took);
        }
    }

    /// Stamp each created object's `creationTimestamp` with the wall clock,
    /// as kube-apiserver does, instead of the fixed time the tests' test
    /// clock starts at.
    #[allow(dead_code)] // for benches/kueue.rs
    pub fn wall_clock_stamps(&self) {
        self.state.lock().unwrap().wall_clock = true;
    }

    /// Stamp each object created from now on with `ms` as its
    /// `creationTimestamp`: the time an API server on the tests' clock,
    /// moved on, would give it.
    pub fn stamp_creations_at(&self, ms: i64) {
        self.state.lock().unwrap().stamp_at = Some(ms);
    }

    /// The `creationTimestamp` of an object created now.
    pub(super) fn creation_stamp(&self) -> String {
        if let Some(ms) = self.state.lock().unwrap().stamp_at {
            return rfc3339_secs(Timestamp::from_millisecond(ms).unwrap());
        }
        if self.state.lock().unwrap().wall_clock {
            rfc3339_secs(Timestamp::now())
        } else {
            "2026-11-21T10:00:00Z".to_string()
        }
    }

    /// Serve a kind (a CRD installed).
    pub fn install(&self, def: KindDef) {
        let (tx, _) = broadcast::channel(4096);
        let mut g = self.state.lock().unwrap();
        let versions_keep = g.history;
        let keep = versions_keep.or(Some(WATCH_HISTORY));
        g.colls.insert(
            coll_key(def.group, def.plural),
            Coll {
                def,
                objects: BTreeMap::new(),
                log: Vec::new(),
                compacted: 0,
                keep,
                versions: Vec::new(),
                versions_keep,
                tx,
                ends: tokio::sync::watch::Sender::new(0),
            },
        );
    }

    pub fn requests(&self) -> Vec<String> {
        self.state.lock().unwrap().requests.clone()
    }

    /// The paths of the GETs answered with the object's metadata alone.
    #[allow(dead_code)] // not every test binary reads it
    pub fn metadata_gets(&self) -> Vec<String> {
        self.state.lock().unwrap().metadata_gets.clone()
    }

    /// How many requests of each verb and resource were served since the
    /// start, counted whatever the bounded history keeps (see `State::tally`).
    #[allow(dead_code)] // for benches/kueue.rs
    pub fn tally(&self) -> HashMap<String, u64> {
        self.state.lock().unwrap().tally.clone()
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

    /// Answer the next `n` writes (PUT/PATCH) of `path` with 500, writing
    /// nothing, as an API server does when etcd fails the write.
    pub fn fail_next(&self, path: &str, n: usize) {
        self.state
            .lock()
            .unwrap()
            .failures
            .insert(path.to_string(), n);
    }

    /// Answer the next `n` GETs of the object at `path` with 500 (0: none
    /// from now on): a read that must not happen shows as a failure.
    pub fn fail_reads(&self, path: &str, n: usize) {
        self.state
            .lock()
            .unwrap()
            .failed_reads
            .insert(path.to_string(), n);
    }

    /// Answer the next `n` GETs of the object at `path` with 403 Forbidden
    /// (0: none from now on), as kube-apiserver's authorizer answers a
    /// caller whose roles grant no `get` on the resource.
    pub fn forbid_reads(&self, path: &str, n: usize) {
        self.state
            .lock()
            .unwrap()
            .forbidden_reads
            .insert(path.to_string(), n);
    }

    /// Every write from now on takes `delay` before it is made (and
    /// answered), as a real API server's round trip to etcd does. Reads,
    /// watches and the webhooks' own time are not delayed.
    pub fn set_write_delay(&self, delay: std::time::Duration) {
        self.state.lock().unwrap().write_delay = delay;
    }

    /// Every live watch event from now on reaches its watchers `delay`
    /// after it is made, while reads (GET, LIST) see it at once: the lag a
    /// loaded cluster puts between a write and the caches watching it.
    pub fn set_watch_delay(&self, delay: std::time::Duration) {
        self.state.lock().unwrap().watch_delay.store(
            delay.as_millis() as u64,
            std::sync::atomic::Ordering::SeqCst,
        );
    }

    /// The next watch opened on `group`/`plural` delivers each live event
    /// `delay` later than the others do (bizrq watches quotas twice, its
    /// store's cache first at start and then its controller: this makes
    /// the cache lag the controller, as one task starved under load does).
    pub fn lag_next_watch(&self, group: &str, plural: &str, delay: std::time::Duration) {
        self.state
            .lock()
            .unwrap()
            .next_watch_lag
            .insert(coll_key(group, plural), delay);
    }

    /// End every watch open now on `group`/`plural`, as kube-apiserver
    /// ends its watches at their timeout or when it restarts: each client
    /// watches again from the last version it saw (and, if that version
    /// has been compacted meanwhile, is told 410 Expired and lists again).
    pub fn end_watches(&self, group: &str, plural: &str) {
        let g = self.state.lock().unwrap();
        g.colls[&coll_key(group, plural)]
            .ends
            .send_modify(|n| *n += 1);
    }

    /// Every write to `path` from now on takes `delay` more before it is
    /// made (after its admission), as one object's writes do when the API
    /// server and the webhooks it calls are loaded.
    pub fn slow_writes(&self, path: &str, delay: std::time::Duration) {
        self.state
            .lock()
            .unwrap()
            .slow_writes
            .insert(path.to_string(), delay);
    }

    /// The next write to `path` (POST, PUT or PATCH) waits `delay` after
    /// the API server has read the object it reviews and before its
    /// validating webhooks are called: what a loaded webhook's queue does
    /// to a write, so another write (a DELETE) can be reviewed and made
    /// in between, and this one is then stored against what is left.
    pub fn pause_next_validation(&self, path: &str, delay: std::time::Duration) {
        self.state
            .lock()
            .unwrap()
            .paused_validation
            .insert(path.to_string(), delay);
    }

    /// Just before the next write to `path` is made (after its admission
    /// and its write delay), someone else writes the object: `change`
    /// applied to it as stored, stored under a new resourceVersion (a
    /// MODIFIED event). A write naming the version it read then meets a
    /// newer one, as when another replica's write lands first.
    pub fn interfere_next(&self, path: &str, change: impl FnOnce(&mut Value) + Send + 'static) {
        self.state
            .lock()
            .unwrap()
            .interfere
            .insert(path.to_string(), Box::new(change));
    }

    /// The interference queued for a write to `path`, made now.
    fn interfere(&self, path: &str) {
        let Some(change) = self.state.lock().unwrap().interfere.remove(path) else {
            return;
        };
        let Some(t) = Self::parse(path) else { return };
        let (Some(name), ns) = (t.name, t.namespace.unwrap_or_default()) else {
            return;
        };
        let mut g = self.state.lock().unwrap();
        g.rv += 1;
        let rv = g.rv;
        let Some(coll) = g.colls.get_mut(&t.coll) else {
            return;
        };
        let Some(obj) = coll.objects.get_mut(&(ns, name)) else {
            return;
        };
        change(obj);
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        let obj = obj.clone();
        Self::emit(coll, rv, "MODIFIED", obj);
    }

    /// The next `n` writes to `path` never get through: 503, before any
    /// webhook is called, nothing written. What a writer that stopped
    /// before sending leaves behind, without stopping it.
    pub fn unreachable_next(&self, path: &str, n: usize) {
        self.state
            .lock()
            .unwrap()
            .unreachable
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
        let obj = Arc::new(obj);
        let encoded = Arc::new(Encoded::default());
        coll.log.push((rv, kind, obj.clone(), encoded.clone()));
        if let Some((last, _, _, _)) = trim(&mut coll.log, coll.keep).last() {
            coll.compacted = *last;
        }
        coll.versions.push((rv, obj.clone()));
        trim(&mut coll.versions, coll.versions_keep);
        let _ = coll.tx.send((rv, kind, obj, encoded));
    }

    fn find_def(obj: &Value) -> KindDef {
        let api_version = obj["apiVersion"].as_str().unwrap_or("");
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        let kind = obj["kind"].as_str().unwrap_or("");
        KINDS
            .iter()
            .chain([&PYTORCHJOB, &JOBSET, &VOLCANOJOB])
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
            .versions
            .iter()
            .filter(|(rv, o)| *rv > after && o["metadata"]["name"] == name)
            .map(|(_, o)| Value::clone(o))
            .collect()
    }

    pub fn quota(&self, name: &str) -> Value {
        self.get("bizrq.io", "bizgroupresourcequotas", "", name)
            .unwrap_or_else(|| panic!("no quota {name}"))
    }
}

/// A time as Kubernetes stores `metav1.Time`: RFC 3339 in whole seconds.
fn rfc3339_secs(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}
