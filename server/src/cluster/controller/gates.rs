//! Pods held back by bizrq's scheduling gate (`quota::hold`: a Volcano
//! Job waiting in its quota's queue has no suspend flag, so every pod
//! template carries the gate and kube-apiserver binds none of its pods).
//!
//! The gate comes off a pod only once its workload is charged: right
//! after the queue's charge (`Context::release` in `queue`), and at every
//! reconcile of the quota for any gated pod of a charged workload
//! (`release_gated`) — pods its controller makes later from the gated
//! templates (a restart, a failed pod replaced), and the pods of an
//! admission whose release a crash cut short. A workload waiting in the
//! queue is charged nothing, so its pods stay gated. Each patch `test`s
//! the gate where it last saw it, so a list changed meanwhile fails the
//! patch (422) rather than removing another gate; the next reconcile
//! reads the pod again.

use super::Context;
use quota::hold::{self, GatedPod};

impl Context {
    /// Release the gated pods of `name`'s charged workloads.
    pub(super) async fn release_gated(&self, name: &str) {
        let pods = self.view.lock().unwrap().gated_pods(name);
        if pods.is_empty() {
            return;
        }
        let Some(s) = self.service.cached_quota(name) else {
            return;
        };
        let charged = |wref: &str| {
            s.quota
                .status
                .workloads
                .get(wref)
                .is_some_and(|c| c.usage().values().any(|v| v.nanos() > 0))
        };
        // A round releasing a workload now ungates its pods itself.
        let releasing = self.releasing.lock().unwrap().clone();
        let release: Vec<GatedPod> = hold::to_ungate(&pods, charged)
            .into_iter()
            .filter(|p| !releasing.contains(&p.workload_ref))
            .cloned()
            .collect();
        self.ungate(&release).await;
    }

    /// Remove bizrq's gate from each of `pods` (a JSONPatch, through the
    /// pods webhook like anyone's write: it lets bizrq's own account pass).
    pub(super) async fn ungate(&self, pods: &[GatedPod]) {
        for p in pods {
            let url = format!("/api/v1/namespaces/{}/pods/{}", p.namespace, p.name);
            let body = serde_json::to_vec(&p.patch).expect("a patch serialises");
            let req = axum::http::Request::patch(url)
                .header(
                    axum::http::header::CONTENT_TYPE,
                    "application/json-patch+json",
                )
                .body(body)
                .expect("a valid request");
            match self.client.request::<serde_json::Value>(req).await {
                Ok(_) => {
                    self.view.lock().unwrap().ungated(&p.namespace, &p.name);
                    tracing::info!(pod = %p.name, namespace = %p.namespace, workload = %p.workload_ref, "pod ungated")
                }
                // Gone, or its gates changed since the watch saw them: the
                // next reconcile works from what the watch shows then.
                Err(kube::Error::Api(s)) if s.is_not_found() || s.code == 422 => {
                    self.view.lock().unwrap().ungated(&p.namespace, &p.name);
                }
                Err(e) => {
                    tracing::warn!(pod = %p.name, namespace = %p.namespace, error = %e, "ungating failed; the next reconcile retries")
                }
            }
        }
    }
}
