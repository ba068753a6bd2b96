//! `/workloads`: "my workloads" — what the viewer submitted with kubectl,
//! found by the Kubernetes username linked to their portal user
//! (`users.kube_username`, docs/oidc.md): each quota's charges
//! (`status.users`, who asked for each) and queue entries
//! (`submittedBy`). The viewer's own work is theirs to see in any quota it
//! runs in; a quota they may not open is named without a link. A heavy
//! request: it reads the whole forest (the shared, cached copy).

use super::auth::Viewer;
use super::PageError;
use crate::authz;
use crate::edge::AppState;
use app::workloads::{MyWorkloadRow, MyWorkloads};
use axum::extract::State;
use axum::response::{Html, IntoResponse, Response};

/// Rows listed at most; the rest are counted.
pub const MAX_ROWS: usize = 500;

fn row_of(quota: &str, visible: bool, wref: &str, state: String) -> MyWorkloadRow {
    let (kind, namespace, name) = match quota::workload::WorkloadKey::parse(wref) {
        Some(k) => {
            let p = k.parts();
            (
                p.kind.to_string(),
                p.namespace.to_string(),
                p.name.to_string(),
            )
        }
        None => (String::new(), String::new(), wref.to_string()),
    };
    MyWorkloadRow {
        quota: quota.to_string(),
        visible,
        kind,
        namespace,
        name,
        state,
    }
}

/// GET /workloads
pub async fn mine(State(app): State<AppState>, viewer: Viewer) -> Result<Response, PageError> {
    let user = match viewer.principal.user_id {
        Some(id) => app.portal.sql.user_by_id(id).await?,
        None => None,
    };
    let kube = user.and_then(|u| u.kube_username);
    let how_to_link = match &app.portal.identity {
        Some(ids) if ids.settings.kube_names.is_some() => format!(
            "Your bizrq account is not linked to a Kubernetes username yet: sign in with {} once, or ask an admin to set it on the Users page.",
            ids.settings.provider.display_name
        ),
        _ => "Your bizrq account is not linked to a Kubernetes username: ask an admin to set it on the Users page.".into(),
    };
    let mut page = MyWorkloads {
        kube_username: kube.clone(),
        how_to_link,
        ..Default::default()
    };
    if let Some(kube) = kube {
        let place = app.portal.heavy.enter(&viewer.principal.username)?;
        let forest = app.service.forest().await?;
        let p = viewer.principal.clone();
        page = place
            .work(move || {
                let tree = authz::Tree::from_quotas(forest.quotas.iter());
                let mut rows = Vec::new();
                let mut more = 0;
                for q in &forest.quotas {
                    let visible = authz::can_view(&p, q.name(), &tree);
                    let charged = q
                        .status
                        .users
                        .iter()
                        .filter(|(_, u)| **u == kube)
                        .map(|(w, _)| (w.clone(), "charged".to_string()));
                    let queued = q
                        .status
                        .queue
                        .iter()
                        .filter(|e| e.work.submitted_by.as_deref() == Some(kube.as_str()))
                        .map(|e| {
                            (
                                e.work.workload_ref.clone(),
                                format!("queued, #{}", e.position),
                            )
                        });
                    for (wref, state) in charged.chain(queued) {
                        if rows.len() < MAX_ROWS {
                            rows.push(row_of(q.name(), visible, &wref, state));
                        } else {
                            more += 1;
                        }
                    }
                }
                MyWorkloads { rows, more, ..page }
            })
            .await
            .map_err(|e| PageError::Internal(e.to_string()))?;
    }
    let flash = viewer.take_flash().await;
    Ok(Html(app::workloads::render_my_workloads_page(
        viewer.page(),
        page,
        flash,
    ))
    .into_response())
}
