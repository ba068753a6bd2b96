//! Leader election on a `coordination.k8s.io/v1` Lease: every replica
//! serves the webhook, API and portal; one of them runs the controller.
//!
//! The decision (create, renew, take over an expired lease, follow) is a
//! pure function of the Lease as read; every write carries the Lease's
//! `resourceVersion`, so two replicas racing for an expired lease cannot
//! both win. Correctness of quota status never depends on there being one
//! leader (every status write is itself a compare-and-swap): the Lease
//! keeps a second replica from doing the same work twice.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::Client;
use std::time::Duration;
use tokio::sync::watch;

/// How long the Lease holds without renewal: another replica takes it
/// over once this has passed since its `renewTime`.
pub const LEASE_DURATION: Duration = Duration::from_secs(15);
/// Time between attempts.
pub const RETRY: Duration = Duration::from_secs(2);
/// The default renew deadline: below [`LEASE_DURATION`], so a leader whose
/// renewal stalls stops before another replica can take the Lease over.
pub const RENEW_DEADLINE: Duration = Duration::from_secs(10);

#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    /// How long a lease holds without renewal.
    pub duration: Duration,
    /// A leader that could not renew for this long stops leading, and no
    /// attempt (a GET and a write) may take longer than what is left of
    /// it: a renewal call that hangs (a stalled connection: no answer, no
    /// error; kube's client sets no read timeout) is cut off at the
    /// deadline like a failed one. Keep it below `duration`: the Lease
    /// read by another replica says renewed at the start of our last
    /// successful attempt, so it cannot be taken over before `duration`
    /// has passed since then, and by then this leader has stopped (as in
    /// client-go, where each renewal is bounded by its RenewDeadline).
    pub renew_deadline: Duration,
    /// Time between attempts.
    pub retry: Duration,
}

impl LeaseConfig {
    pub fn new(namespace: &str, name: &str, identity: &str) -> LeaseConfig {
        LeaseConfig {
            namespace: namespace.into(),
            name: name.into(),
            identity: identity.into(),
            duration: LEASE_DURATION,
            renew_deadline: RENEW_DEADLINE,
            retry: RETRY,
        }
    }
}

/// The shortest bound on one attempt, when the renew deadline is all but
/// spent: enough for an answer on a healthy connection.
const MIN_ATTEMPT: Duration = Duration::from_millis(100);

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// No Lease yet: create it, held by us.
    Create,
    /// We hold it: renew.
    Renew,
    /// Its holder let it expire (or released it): take it over.
    TakeOver,
    /// Somebody else holds it.
    Follow(String),
}

fn ms(t: &MicroTime) -> i64 {
    t.0.as_millisecond()
}

/// What to do with the Lease as read at `now_ms`.
pub fn decide(lease: Option<&LeaseSpec>, me: &str, now_ms: i64) -> Decision {
    let Some(spec) = lease else {
        return Decision::Create;
    };
    let holder = spec.holder_identity.as_deref().unwrap_or("");
    if holder == me {
        return Decision::Renew;
    }
    if holder.is_empty() {
        return Decision::TakeOver;
    }
    let duration_ms = spec.lease_duration_seconds.unwrap_or(15).max(1) as i64 * 1000;
    let renewed = spec
        .renew_time
        .as_ref()
        .or(spec.acquire_time.as_ref())
        .map(ms)
        .unwrap_or(0);
    if renewed + duration_ms < now_ms {
        Decision::TakeOver
    } else {
        Decision::Follow(holder.to_string())
    }
}

fn micro(now_ms: i64) -> MicroTime {
    MicroTime(Timestamp::from_millisecond(now_ms).unwrap_or(Timestamp::UNIX_EPOCH))
}

/// One attempt: returns whether we lead after it.
pub async fn try_lead(api: &Api<Lease>, cfg: &LeaseConfig, now_ms: i64) -> kube::Result<bool> {
    let current = api.get_opt(&cfg.name).await?;
    let decision = decide(
        current.as_ref().and_then(|l| l.spec.as_ref()),
        &cfg.identity,
        now_ms,
    );
    let secs = cfg.duration.as_secs().max(1) as i32;
    match decision {
        Decision::Follow(_) => Ok(false),
        Decision::Create => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(cfg.name.clone()),
                    namespace: Some(cfg.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(cfg.identity.clone()),
                    lease_duration_seconds: Some(secs),
                    acquire_time: Some(micro(now_ms)),
                    renew_time: Some(micro(now_ms)),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            match api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.is_already_exists() => Ok(false),
                Err(e) => Err(e),
            }
        }
        Decision::Renew | Decision::TakeOver => {
            let mut lease = current.expect("a lease was read");
            let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
            if decision == Decision::TakeOver {
                spec.holder_identity = Some(cfg.identity.clone());
                spec.acquire_time = Some(micro(now_ms));
                spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
            }
            spec.lease_duration_seconds = Some(secs);
            spec.renew_time = Some(micro(now_ms));
            // `lease.metadata.resourceVersion` is the one read: the swap.
            match api.replace(&cfg.name, &PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.is_conflict() => Ok(false),
                Err(e) => Err(e),
            }
        }
    }
}

/// Give the Lease up (on shutdown) so another replica takes over at once.
pub async fn release(api: &Api<Lease>, cfg: &LeaseConfig) -> kube::Result<()> {
    if let Some(mut lease) = api.get_opt(&cfg.name).await? {
        if let Some(spec) = lease.spec.as_mut() {
            if spec.holder_identity.as_deref() == Some(cfg.identity.as_str()) {
                spec.holder_identity = None;
                api.replace(&cfg.name, &PostParams::default(), &lease)
                    .await?;
            }
        }
    }
    Ok(())
}

/// Campaign forever; `leading` says whether we lead right now.
///
/// Each attempt is bounded: while leading, by what is left of
/// `renew_deadline` since the start of the last successful one (at least
/// [`MIN_ATTEMPT`]); while not, by `renew_deadline`. An attempt cut off so
/// counts as a failed one, and a leader whose last renewal began
/// `renew_deadline` ago or more stops leading — before the Lease, renewed
/// at that start, can expire for the other replicas.
pub async fn campaign(
    client: Client,
    cfg: LeaseConfig,
    clock: crate::service::Clock,
    leading: watch::Sender<bool>,
) {
    let api: Api<Lease> = Api::namespaced(client, &cfg.namespace);
    // When the last successful attempt started: the `renewTime` it wrote
    // was read from the clock no earlier.
    let mut last_renewed: Option<tokio::time::Instant> = None;
    loop {
        let now = clock();
        let started = tokio::time::Instant::now();
        let bound = match last_renewed {
            Some(t) => cfg
                .renew_deadline
                .saturating_sub(t.elapsed())
                .max(MIN_ATTEMPT),
            None => cfg.renew_deadline,
        };
        let attempt = match tokio::time::timeout(bound, try_lead(&api, &cfg, now)).await {
            Ok(r) => r.map_err(|e| e.to_string()),
            Err(_) => Err(format!("no answer within {} ms", bound.as_millis())),
        };
        match attempt {
            Ok(true) => {
                last_renewed = Some(started);
                if !*leading.borrow() {
                    tracing::info!(identity = %cfg.identity, lease = %cfg.name, "leading: starting the controller");
                }
                leading.send_replace(true);
            }
            Ok(false) => {
                if *leading.borrow() {
                    tracing::warn!(identity = %cfg.identity, "lost the lease: stopping the controller");
                }
                last_renewed = None;
                leading.send_replace(false);
            }
            Err(e) => {
                tracing::warn!(error = %e, lease = %cfg.name, "lease call failed");
                if last_renewed.is_some_and(|t| t.elapsed() >= cfg.renew_deadline) {
                    tracing::warn!("could not renew the lease in time: stopping the controller");
                    last_renewed = None;
                    leading.send_replace(false);
                }
            }
        }
        tokio::time::sleep(cfg.retry).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{Method, Request, Response};
    use kube::client::Body;
    use serde_json::{json, Value};
    use std::sync::Arc;

    const T: i64 = 1_800_000_000_000;

    fn spec(holder: &str, renewed_ms: i64) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(15),
            renew_time: Some(micro(renewed_ms)),
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn decisions() {
        assert_eq!(decide(None, "a", T), Decision::Create);
        assert_eq!(
            decide(Some(&spec("a", T - 60_000)), "a", T),
            Decision::Renew
        );
        assert_eq!(
            decide(Some(&spec("b", T - 5_000)), "a", T),
            Decision::Follow("b".into())
        );
        assert_eq!(
            decide(Some(&spec("b", T - 16_000)), "a", T),
            Decision::TakeOver
        );
        assert_eq!(
            decide(Some(&spec("", T)), "a", T),
            Decision::TakeOver,
            "released"
        );
    }

    type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

    async fn next(
        h: &mut Handle,
    ) -> (
        Method,
        String,
        Value,
        tower_test::mock::SendResponse<Response<Body>>,
    ) {
        let (req, send) = h.next_request().await.expect("a request");
        let method = req.method().clone();
        let path = req.uri().path().to_string();
        let bytes = http_body_util::BodyExt::collect(req.into_body())
            .await
            .unwrap()
            .to_bytes();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap()
        };
        (method, path, body, send)
    }

    fn respond(code: u16, v: Value) -> Response<Body> {
        Response::builder()
            .status(code)
            .body(Body::from(serde_json::to_vec(&v).unwrap()))
            .unwrap()
    }

    fn status(code: u16, reason: &str) -> Value {
        json!({"kind":"Status","apiVersion":"v1","status":"Failure","reason":reason,"code":code,"message":reason})
    }

    const PATH: &str =
        "/apis/coordination.k8s.io/v1/namespaces/bizrq-system/leases/bizrq-controller";

    /// The exact Lease calls: a GET that finds none and a create; a GET
    /// and a renewal carrying the resourceVersion read; a lost race (409)
    /// means we do not lead.
    #[tokio::test]
    async fn lease_calls_over_the_wire() {
        let (svc, mut h) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(svc, "default");
        let api: Api<Lease> = Api::namespaced(client, "bizrq-system");
        let cfg = LeaseConfig::new("bizrq-system", "bizrq-controller", "bizrq-0");
        let server = tokio::spawn(async move {
            // 1: none yet → create.
            let (m, p, _, send) = next(&mut h).await;
            assert_eq!((m, p.as_str()), (Method::GET, PATH));
            send.send_response(respond(404, status(404, "NotFound")));
            let (m, p, body, send) = next(&mut h).await;
            assert_eq!(
                (m, p.as_str()),
                (
                    Method::POST,
                    "/apis/coordination.k8s.io/v1/namespaces/bizrq-system/leases"
                )
            );
            assert_eq!(body["spec"]["holderIdentity"], "bizrq-0");
            assert_eq!(body["spec"]["leaseDurationSeconds"], 15);
            let mut stored = body.clone();
            stored["metadata"]["resourceVersion"] = json!("41");
            send.send_response(respond(201, stored.clone()));
            // 2: ours → renew with the resourceVersion read.
            let (m, _, _, send) = next(&mut h).await;
            assert_eq!(m, Method::GET);
            send.send_response(respond(200, stored.clone()));
            let (m, p, body, send) = next(&mut h).await;
            assert_eq!((m, p.as_str()), (Method::PUT, PATH));
            assert_eq!(body["metadata"]["resourceVersion"], "41");
            assert_eq!(body["spec"]["holderIdentity"], "bizrq-0");
            send.send_response(respond(200, body.clone()));
            // 3: another replica took it over in between: 409 → not leading.
            let (_, _, _, send) = next(&mut h).await;
            send.send_response(respond(200, stored));
            let (m, _, _, send) = next(&mut h).await;
            assert_eq!(m, Method::PUT);
            send.send_response(respond(409, status(409, "Conflict")));
            // 4: held by someone else and fresh → follow, no write.
            let (_, _, _, send) = next(&mut h).await;
            let mut other = body;
            other["spec"]["holderIdentity"] = json!("bizrq-1");
            other["spec"]["renewTime"] = json!("2027-01-15T08:00:00.000000Z");
            send.send_response(respond(200, other));
        });
        let now = Timestamp::from_second(1_800_000_000)
            .unwrap()
            .as_millisecond();
        assert!(try_lead(&api, &cfg, now).await.unwrap(), "created");
        assert!(try_lead(&api, &cfg, now + 2000).await.unwrap(), "renewed");
        assert!(
            !try_lead(&api, &cfg, now + 4000).await.unwrap(),
            "lost the race"
        );
        let renewed = Timestamp::from_second(1_800_000_000)
            .unwrap()
            .as_millisecond();
        assert!(!try_lead(&api, &cfg, renewed).await.unwrap(), "follows");
        server.await.unwrap();
    }

    /// A leader whose renewal hangs (the GET is never answered, never
    /// fails) stops leading once `renew_deadline` has passed since its
    /// last renewal began, and not before: it cannot still lead when
    /// another replica may take the Lease over (`duration` after it).
    #[tokio::test(start_paused = true)]
    async fn a_hung_renewal_stops_leading_at_the_renew_deadline() {
        let (svc, mut h) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(svc, "default");
        let cfg = LeaseConfig::new("bizrq-system", "bizrq-controller", "bizrq-0");
        assert!(cfg.renew_deadline < cfg.duration);
        let (tx, mut rx) = watch::channel(false);
        let campaign = tokio::spawn(campaign(client, cfg.clone(), Arc::new(|| T), tx));
        let t0 = tokio::time::Instant::now();
        // Created: leading.
        let (m, _, _, send) = next(&mut h).await;
        assert_eq!(m, Method::GET);
        send.send_response(respond(404, status(404, "NotFound")));
        let (m, _, body, send) = next(&mut h).await;
        assert_eq!(m, Method::POST);
        send.send_response(respond(201, body));
        rx.wait_for(|l| *l).await.unwrap();
        // The renewal's GET, one retry on: never answered (`_hung` kept,
        // so it does not fail either).
        let (m, _, _, _hung) = next(&mut h).await;
        assert_eq!(m, Method::GET);
        assert_eq!(t0.elapsed(), cfg.retry);
        tokio::time::sleep_until(t0 + cfg.renew_deadline - Duration::from_millis(1)).await;
        assert!(*rx.borrow(), "still within the renew deadline");
        tokio::time::timeout(cfg.retry, rx.wait_for(|l| !*l))
            .await
            .expect("stopped leading within renew_deadline (+ retry)")
            .unwrap();
        let stopped = t0.elapsed();
        assert!(
            stopped >= cfg.renew_deadline && stopped < cfg.duration,
            "{stopped:?}"
        );
        campaign.abort();
    }
}
