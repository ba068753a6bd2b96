//! "My workloads": what a person submitted with kubectl (their Kubernetes
//! username, linked to their portal user), in every quota it runs or waits
//! in.

use crate::layout::{Flash, Viewer};

#[cfg(feature = "ssr")]
use crate::layout::{document, Layout, Section};
#[cfg(feature = "ssr")]
use leptos::prelude::*;

/// One workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MyWorkloadRow {
    pub quota: String,
    /// The viewer may open the quota's page.
    pub visible: bool,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// "charged" or "queued, #3".
    pub state: String,
}

/// What the page shows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MyWorkloads {
    /// The viewer's Kubernetes username; None when not linked.
    pub kube_username: Option<String>,
    /// How to get linked, in words (for an unlinked viewer).
    pub how_to_link: String,
    pub rows: Vec<MyWorkloadRow>,
    /// Rows past the page's bound, not listed.
    pub more: usize,
}

/// The page.
#[cfg(feature = "ssr")]
pub fn render_my_workloads_page(viewer: Viewer, page: MyWorkloads, flash: Option<Flash>) -> String {
    let body = match &page.kube_username {
        None => view! { <p class="empty">{page.how_to_link.clone()}</p> }.into_any(),
        Some(k) if page.rows.is_empty() => {
            view! { <p class="empty">{format!("Nothing submitted as {k} is charged or queued now.")}</p> }.into_any()
        }
        Some(_) => {
            let rows = page
                .rows
                .iter()
                .map(|r| {
                    let quota = if r.visible {
                        view! { <a href=format!("/quotas/{}", r.quota)>{r.quota.clone()}</a> }.into_any()
                    } else {
                        view! { <span>{r.quota.clone()}</span> }.into_any()
                    };
                    view! {
                        <tr>
                            <td class="name" data-label="Workload">{format!("{} {}/{}", r.kind, r.namespace, r.name)}</td>
                            <td data-label="Quota">{quota}</td>
                            <td data-label="State">{r.state.clone()}</td>
                        </tr>
                    }
                })
                .collect_view();
            let more = (page.more > 0).then(|| view! { <p class="hint">{format!("{} more not listed.", page.more)}</p> });
            view! {
                <table class="workloads cards">
                    <thead><tr><th>"Workload"</th><th>"Quota"</th><th>"State"</th></tr></thead>
                    <tbody>{rows}</tbody>
                </table>
                {more}
            }
            .into_any()
        }
    };
    let who = page
        .kube_username
        .clone()
        .map(|k| format!("Workloads the Kubernetes API server names {k} as their submitter."));
    document(move || {
        view! {
            <Layout viewer=Some(viewer) title="My workloads".into() section=Section::Overview flash=flash>
                {who.map(|w| view! { <p class="hint">{w}</p> })}
                {body}
            </Layout>
        }
    })
}
