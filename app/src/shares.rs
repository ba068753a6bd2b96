//! A quota's `sshare`-like table (docs/queueing.md §11, "Between the
//! submitters of one quota"): per submitter, what they spent over the
//! horizon and the same decayed with the half-life, their normalised usage
//! and shares, and the fair-share factor. The server words every cell;
//! this only lays them out (server-rendered, nothing needs JavaScript).

use crate::layout::Viewer;

#[cfg(feature = "ssr")]
use crate::layout::{document, encode_component, Layout, Section};
#[cfg(feature = "ssr")]
use leptos::prelude::*;

/// One submitter's line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShareRow {
    /// The username; empty where none was recorded (`unnamed`).
    pub user: String,
    /// No username recorded: shown in words of the page's own, set apart
    /// so that no username can pass for it.
    pub unnamed: bool,
    /// Spent over the horizon, one line per cash key (`12.5 card-hours`).
    pub raw: Vec<String>,
    /// The same decayed to now.
    pub decayed: Vec<String>,
    /// Normalised usage (`0.42`).
    pub usage: String,
    /// Normalised shares (`0.33`).
    pub shares: String,
    /// SLURM's factor (`0.559`).
    pub factor: String,
}

/// The page's contents.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SharesPage {
    pub quota: String,
    /// `subtree` or `own`.
    pub scope: String,
    /// What the table covers and how it weighs, in words, one per line.
    pub notes: Vec<String>,
    pub rows: Vec<ShareRow>,
}

/// The shares page of `page.quota`.
#[cfg(feature = "ssr")]
pub fn render_shares_page(viewer: Viewer, page: SharesPage) -> String {
    let title = format!("Quota {}: usage per submitter", page.quota);
    let encoded = encode_component(&page.quota);
    let back = format!("/quotas/{encoded}");
    let (other, other_label) = if page.scope == "subtree" {
        (
            format!("/quotas/{encoded}/shares"),
            "Only this quota's own workloads",
        )
    } else {
        (
            format!("/quotas/{encoded}/shares?scope=subtree"),
            "This quota and every quota under it",
        )
    };
    let quota = page.quota.clone();
    document(move || {
        let body = if page.rows.is_empty() {
            view! { <p class="hint">"No submitter has spent anything in this range of the ledger."</p> }
                .into_any()
        } else {
            view! {
                <table class="shares">
                    <thead><tr>
                        <th>"Submitter"</th>
                        <th>"Spent"</th>
                        <th>"Decayed"</th>
                        <th title="The largest fraction of everyone's decayed usage, over the budget keys">"Usage"</th>
                        <th title="Every submitter weighs the same">"Shares"</th>
                        <th title="2^(−usage ÷ shares): 1 unused, 0.5 at the fair line">"Factor"</th>
                    </tr></thead>
                    <tbody>{page.rows.into_iter().map(|r| view! {
                        <tr>
                            <td class="user">{if r.unnamed {
                                view! { <em>"no username recorded"</em> }.into_any()
                            } else {
                                view! { <span>{r.user}</span> }.into_any()
                            }}</td>
                            <td>{r.raw.into_iter().map(|l| view! { <div>{l}</div> }).collect_view()}</td>
                            <td>{r.decayed.into_iter().map(|l| view! { <div>{l}</div> }).collect_view()}</td>
                            <td class="num">{r.usage}</td>
                            <td class="num">{r.shares}</td>
                            <td class="num">{r.factor}</td>
                        </tr>
                    }).collect_view()}</tbody>
                </table>
            }
            .into_any()
        };
        view! {
            <Layout viewer=Some(viewer) title=title section=Section::Tree flash=None>
                <p class="hint"><a href=back>{format!("Back to {quota}")}</a>" · "<a href=other>{other_label}</a></p>
                {page.notes.into_iter().map(|n| view! { <p class="hint">{n}</p> }).collect_view()}
                {body}
            </Layout>
        }
    })
}
