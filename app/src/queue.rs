//! A quota's queue on its page (docs/queueing.md §5): each waiting
//! workload's place, priority, what it needs, why it waits, since when
//! and when it should start. The server words every cell; this only lays
//! them out — a table on a desktop, a card per workload on a phone
//! (style: `table.queue`).

#[cfg(feature = "ssr")]
use leptos::prelude::*;

/// What a queued workload needs, for people: `16 A100 GPUs, 8 CPU A4
/// cores (limit), 128 GiB memory, 8 pods` — GPUs first, then CPU, memory
/// and pods (`quota::keys::display_order`), each by its display name; a generic key
/// is left out where one of its models asks the same amount (`16 GPU` says
/// less than `16 GPU A100`). The exact keys are in the queue API.
pub fn needs_words(needs: &quota::ResourceList, cfg: &quota::KeyConfig) -> String {
    use quota::keys::Key;
    let said_by_a_model = |k: &str, v: &quota::Quantity| {
        needs.iter().any(|(m, mv)| {
            mv == v
                && m.strip_prefix(k).is_some_and(|rest| rest.starts_with('.'))
                && Key::parse(m, cfg).is_ok_and(|x| x.model.is_some())
        })
    };
    let rank = |k: &str| quota::keys::display_order(k, cfg);
    let mut shown: Vec<(_, &String, &quota::Quantity)> = needs
        .iter()
        .filter(|(k, v)| !said_by_a_model(k, v))
        .map(|(k, v)| (rank(k), k, v))
        .collect();
    shown.sort();
    shown
        .into_iter()
        .map(|(_, k, v)| counted(k, *v, cfg))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `2 A100 GPUs`, `1 pod`, `1 CPU core`, `16 GiB memory`: an amount of a
/// key with the key's name, singular for exactly one.
pub fn counted(key: &str, q: quota::Quantity, cfg: &quota::KeyConfig) -> String {
    let amount = quota::readable::amount(key, q);
    let name = crate::tree::short_key(key, cfg);
    let one = q == quota::Quantity::from_units(1) && amount == "1";
    format!("{amount} {}", if one { singular(&name) } else { name })
}

/// `A100 GPUs` → `A100 GPU`, `CPU A4 cores (limit)` → `CPU A4 core
/// (limit)`, `pods` → `pod`: the counted word of a key's name, one.
fn singular(name: &str) -> String {
    for (many, one) in [("GPUs", "GPU"), ("cores", "core"), ("pods", "pod")] {
        let at_word = name.match_indices(many).find(|(i, _)| {
            let end = i + many.len();
            (*i == 0 || name.as_bytes()[i - 1] == b' ')
                && (end == name.len() || name.as_bytes()[end] == b' ')
        });
        if let Some((i, _)) = at_word {
            return format!("{}{one}{}", &name[..i], &name[i + many.len()..]);
        }
    }
    name.to_string()
}

/// One queued workload as the quota page shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueRow {
    pub position: u32,
    /// `batch/Job/ml/train-7`.
    pub workload: String,
    /// `1,000 (urgent)`, `0`, `0 (PriorityClass 'x' missing)`.
    pub priority: String,
    /// `4 GPU A100, 32 cpu, 64 GiB memory` (`needs_words`).
    pub needs: String,
    /// `waits for 4 × requests.nvidia.com/gpu.A100: 2 free, 6 needed`.
    pub reason: String,
    /// `Quota`, `Budget`, `Turn` or `Never`.
    pub waiting: String,
    /// `2 hours ago`.
    pub since: String,
    /// `2026-11-21 10:00 UTC`, for the title.
    pub since_exact: String,
    /// `starts by about 2026-11-27 14:00 UTC`, or why there is no
    /// estimate (`no estimate: running work declares no deadline, or has outlived it`).
    pub estimate: String,
}

/// The Queue section: the policy in words, then the rows (or that none
/// waits).
#[cfg(feature = "ssr")]
/// `more`: entries waiting beyond those listed (a status with queue marks
/// lists only the head of its queue, docs/queueing.md §12).
pub fn section(policy: String, rows: Vec<QueueRow>, more: usize) -> impl IntoView {
    let count = rows.len() + more;
    let tail = (more > 0).then(|| {
        view! { <p class="hint more">{format!("and {more} more, waiting in their places behind these.")}</p> }
    });
    let body = if rows.is_empty() {
        view! { <p class="hint">"Nothing waits in this quota's queue."</p> }.into_any()
    } else {
        view! {
            <table class="queue">
                <thead><tr><th>"#"</th><th>"Workload"</th><th>"Priority"</th><th>"Needs"</th><th>"Why it waits"</th><th>"Queued"</th><th>"Start"</th></tr></thead>
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
                            <td class="estimate" data-label="Start">{r.estimate}</td>
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
        {tail}
    }
}

/// One queued workload on the overview: in a quota the viewer holds a
/// role on (portal accounts are not Kubernetes users, so "yours" is "your
/// quotas'"), with who submitted it as Kubernetes named them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WaitingRow {
    pub quota: String,
    pub row: QueueRow,
    /// `alice@example.com`, or `unknown` for an entry queued before the
    /// submitter was recorded.
    pub submitted_by: String,
}

/// The overview's "Queued in your quotas" section: nothing when nothing
/// waits; else the rows (`more` left out past the cap, counted).
#[cfg(feature = "ssr")]
pub fn overview_section(rows: Vec<WaitingRow>, more: usize) -> impl IntoView {
    if rows.is_empty() {
        return ().into_any();
    }
    let count = rows.len() + more;
    let tail = (more > 0).then(|| {
        view! { <p class="hint">{format!("and {more} more: each quota's page shows its queue.")}</p> }
    });
    view! {
        <section class="card queued-mine" id="queued">
            <h3>{format!("Queued in your quotas ({count})")}</h3>
            <p class="hint">"Work waiting, suspended, in the queues of the quotas you hold a role on, with who submitted it (as Kubernetes named them)."</p>
            <table class="queue">
                <thead><tr><th>"Quota"</th><th>"#"</th><th>"Workload"</th><th>"Submitted by"</th><th>"Why it waits"</th><th>"Queued"</th><th>"Start"</th></tr></thead>
                <tbody>{rows.into_iter().map(|w| {
                    let r = w.row;
                    let class = format!("waiting {}", r.waiting.to_ascii_lowercase());
                    let href = format!("/quotas/{}#queue", w.quota);
                    view! {
                        <tr class=class>
                            <td class="key quota" data-label="Quota"><a href=href>{w.quota}</a></td>
                            <td class="num position" data-label="Position">{r.position}</td>
                            <td class="key workload">{r.workload}</td>
                            <td class="submitter" data-label="By">{w.submitted_by}</td>
                            <td class="reason" data-label="Why">{r.reason}</td>
                            <td class="num since" data-label="Queued"><time title=r.since_exact.clone()>{r.since}</time></td>
                            <td class="estimate" data-label="Start">{r.estimate}</td>
                        </tr>
                    }
                }).collect_view()}</tbody>
            </table>
            {tail}
        </section>
    }
    .into_any()
}

/// [`overview_section`] as HTML (for `/api/v1/live/overview`, which
/// redraws it beside "needs attention", so that both say one budget's
/// "left" as of one moment).
#[cfg(feature = "ssr")]
pub fn overview_html(rows: Vec<WaitingRow>, more: usize) -> String {
    Owner::new().with(|| overview_section(rows, more).to_html())
}

#[cfg(test)]
mod tests {
    use super::*;
    use quota::{KeyConfig, Quantity, ResourceList};

    #[test]
    fn one_of_a_thing_reads_singular() {
        let n = |v: i64| Quantity::from_units(v);
        let one: ResourceList = [
            ("limits.cpu.A4".to_string(), n(1)),
            ("pods".to_string(), n(1)),
            ("requests.cpu".to_string(), n(1)),
            ("requests.memory".to_string(), n(1 << 30)),
            ("requests.nvidia.com/gpu.A100".to_string(), n(1)),
        ]
        .into();
        assert_eq!(
            needs_words(&one, &KeyConfig::default()),
            "1 A100 GPU, 1 CPU core, 1 CPU A4 core (limit), 1 GiB memory, 1 pod"
        );
        let cfg = KeyConfig::default();
        assert_eq!(counted("pods", n(2), &cfg), "2 pods");
        assert_eq!(
            counted("requests.cpu", "1500m".parse().unwrap(), &cfg),
            "1.5 CPU cores"
        );
    }

    #[test]
    fn needs_read_gpus_first_in_short_names() {
        let n = |v: i64| Quantity::from_units(v);
        let needs: ResourceList = [
            ("limits.cpu".to_string(), n(8)),
            ("limits.cpu.A4".to_string(), n(8)),
            ("pods".to_string(), n(8)),
            ("requests.cpu".to_string(), n(8)),
            ("requests.memory".to_string(), n(128 << 30)),
            ("requests.nvidia.com/gpu".to_string(), n(16)),
            ("requests.nvidia.com/gpu.A100".to_string(), n(16)),
        ]
        .into();
        assert_eq!(
            needs_words(&needs, &KeyConfig::default()),
            "16 A100 GPUs, 8 CPU cores, 8 CPU A4 cores (limit), 128 GiB memory, 8 pods"
        );
        // A generic key that asks more than its model says is kept.
        let mixed: ResourceList = [
            ("requests.nvidia.com/gpu".to_string(), n(4)),
            ("requests.nvidia.com/gpu.A100".to_string(), n(2)),
        ]
        .into();
        assert_eq!(
            needs_words(&mixed, &KeyConfig::default()),
            "4 GPUs, 2 A100 GPUs"
        );
    }
}
