//! A quota's queue on its page (docs/queueing.md §5): each waiting
//! workload's place, priority, what it needs, why it waits and since
//! when. The server words every cell; this only lays them out — a table
//! on a desktop, a card per workload on a phone (style: `table.queue`).

#[cfg(feature = "ssr")]
use leptos::prelude::*;

/// One queued workload as the quota page shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueRow {
    pub position: u32,
    /// `batch/Job/ml/train-7`.
    pub workload: String,
    /// `1,000 (urgent)`, `0`, `0 (PriorityClass 'x' missing)`.
    pub priority: String,
    /// `4 × requests.nvidia.com/gpu.A100, 32 × requests.cpu`.
    pub needs: String,
    /// `waits for 4 × requests.nvidia.com/gpu.A100: 2 free, 6 needed`.
    pub reason: String,
    /// `Quota`, `Budget`, `Turn` or `Never`.
    pub waiting: String,
    /// `2 hours ago`.
    pub since: String,
    /// `2026-11-21 10:00 UTC`, for the title.
    pub since_exact: String,
}

/// The Queue section: the policy in words, then the rows (or that none
/// waits).
#[cfg(feature = "ssr")]
pub fn section(policy: String, rows: Vec<QueueRow>) -> impl IntoView {
    let count = rows.len();
    let body = if rows.is_empty() {
        view! { <p class="hint">"Nothing waits in this quota's queue."</p> }.into_any()
    } else {
        view! {
            <table class="queue">
                <thead><tr><th>"#"</th><th>"Workload"</th><th>"Priority"</th><th>"Needs"</th><th>"Why it waits"</th><th>"Queued"</th></tr></thead>
                <tbody>{rows.into_iter().map(|r| {
                    let class = format!("waiting {}", r.waiting.to_ascii_lowercase());
                    view! {
                        <tr class=class>
                            <td class="num position" data-label="Position">{r.position}</td>
                            <td class="key workload">{r.workload}</td>
                            <td class="num" data-label="Priority">{r.priority}</td>
                            <td class="needs" data-label="Needs">{r.needs}</td>
                            <td class="reason" data-label="Why">{r.reason}</td>
                            <td class="num since" data-label="Queued"><time title=r.since_exact.clone()>{r.since}</time></td>
                        </tr>
                    }
                }).collect_view()}</tbody>
            </table>
        }
        .into_any()
    };
    view! {
        <h3 id="queue">{format!("Queue ({count})")}</h3>
        <p class="hint">{policy}</p>
        {body}
    }
}
