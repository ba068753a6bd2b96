//! What every kind's reader shares: where the object comes from (review
//! text or a watched value), why a reader refuses it, the checks of its
//! name, and a pod set made of a count and a pod template.

use super::model::{check_count, check_names, is_dns_subdomain, ChargeMode, PodSet, Workload};
use super::runtime;
use crate::keys::KeyConfig;
use crate::quantity::MAX_NANOS;
use crate::usage::{
    check_amounts, nullable, pod_usage, qos_class, BadAmount, Models, ObjectMeta, PodTemplate,
};
use serde::Deserialize;

/// Why an adapter refused an object, before the kind is known to say so.
pub(crate) enum Fault {
    Parse(String),
    Bad {
        /// `ns/name`, or empty when the name itself is at fault.
        object: String,
        /// Where in it (`container "worker"`); None: the object as a whole.
        subject: Option<String>,
        problem: String,
    },
}

impl Fault {
    pub(super) fn bad(meta: &ObjectMeta, subject: Option<String>, problem: String) -> Fault {
        Fault::Bad {
            object: object_name(meta),
            subject,
            problem,
        }
    }
}

fn object_name(meta: &ObjectMeta) -> String {
    match (meta.namespace.as_str(), meta.name.as_str()) {
        ("", name) => name.to_string(),
        (ns, "") => format!("{ns}/(no name yet)"),
        (ns, name) => format!("{ns}/{name}"),
    }
}

/// An object's namespace and name as the API server would take them: a
/// namespace that is a DNS-1123 label, and a name that is a DNS-1123
/// subdomain (empty: a CREATE whose name is still to be generated). In a
/// cluster the API server refused any other before asking; standalone
/// (`/api/v1/check`, reviews sent by hand) this refuses it alike.
pub(super) fn check_meta(meta: &ObjectMeta) -> Result<(), Fault> {
    check_names(
        "metadata.namespace",
        &meta.namespace,
        "metadata.name",
        &meta.name,
    )
    .and_then(|()| {
        if meta.name.is_empty() || is_dns_subdomain(&meta.name) {
            Ok(())
        } else {
            Err(format!(
                "metadata.name {:?} is not a DNS-1123 subdomain: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit",
                meta.name
            ))
        }
    })
    .map_err(|problem| Fault::Bad {
        object: String::new(),
        subject: None,
        problem,
    })
}

/// Where a reader takes an object from: the JSON text of an admission
/// review, or a value a watch has already parsed. Both give the same
/// answer; a watched object is not printed and parsed again.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Source<'a> {
    Text(&'a str),
    Value(&'a serde_json::Value),
}

impl<'a> Source<'a> {
    pub(crate) fn parse<T: Deserialize<'a>>(self) -> Result<T, String> {
        match self {
            Source::Text(json) => serde_json::from_str(json),
            Source::Value(v) => T::deserialize(v),
        }
        .map_err(|e| e.to_string())
    }
}

pub(super) fn parse<'a, T: Deserialize<'a>>(json: &'a str) -> Result<T, String> {
    Source::Text(json).parse()
}

/// Parses an object and checks its name, for the read functions below.
pub(super) fn parse_object<'a, T: Deserialize<'a>>(
    src: Source<'a>,
    meta: impl Fn(&T) -> &ObjectMeta,
) -> Result<T, Fault> {
    let o: T = src.parse().map_err(Fault::Parse)?;
    check_meta(meta(&o))?;
    Ok(o)
}

/// `count` pods of `tpl` (`count` as the object holds it in `field`),
/// refused when the count or an amount is negative or too large.
pub(super) fn pod_set(
    name: &str,
    (field, count): (&str, i64),
    tpl: &PodTemplate,
    meta: &ObjectMeta,
    cfg: &KeyConfig,
) -> Result<PodSet, Fault> {
    let count = check_count(field, count).map_err(|p| Fault::bad(meta, None, p))?;
    check_amounts(&tpl.spec)
        .map_err(|BadAmount { subject, problem }| Fault::bad(meta, Some(subject), problem))?;
    let models = Models::from_labels(&meta.labels, &tpl.metadata.labels);
    let per_pod = pod_usage(&tpl.spec, &models, cfg);
    if let Some((k, v)) = per_pod.iter().find(|(_, v)| v.nanos() > MAX_NANOS) {
        let problem = format!(
            "one pod comes to {v} of {k}; at most {} units",
            MAX_NANOS / crate::quantity::NANO
        );
        return Err(Fault::bad(meta, Some(format!("pod set {name:?}")), problem));
    }
    Ok(PodSet {
        name: name.to_string(),
        count,
        per_pod,
        qos: Some(qos_class(&tpl.spec)),
    })
}

pub(super) fn workload(meta: ObjectMeta, pod_sets: Vec<PodSet>) -> Workload {
    Workload {
        run_time: runtime::declared(None, None, &meta.annotations),
        finished: false,
        finished_at: None,
        priority_classes: Vec::new(),
        meta,
        pod_sets,
        governed: true,
        mode: ChargeMode::Charge,
        warnings: Vec::new(),
    }
}

/// The PriorityClasses `templates` name, sorted, each once.
pub(super) fn classes<'a>(templates: impl IntoIterator<Item = &'a PodTemplate>) -> Vec<String> {
    let mut out: Vec<String> = templates
        .into_iter()
        .filter_map(|t| t.spec.priority_class_name.clone())
        .filter(|c| !c.is_empty())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The conditions of a batch object's status: enough to say it finished.
#[derive(Default, Deserialize)]
pub(super) struct Finishing {
    #[serde(default, deserialize_with = "nullable")]
    conditions: Vec<Condition>,
}

#[derive(Default, Deserialize)]
struct Condition {
    #[serde(default, rename = "type")]
    kind: String,
    #[serde(default)]
    status: String,
    #[serde(default, rename = "lastTransitionTime")]
    last_transition_time: Option<String>,
}

impl Finishing {
    /// Whether a condition among `kinds` is true.
    pub(super) fn any(&self, kinds: &[&str]) -> bool {
        self.conditions
            .iter()
            .any(|c| c.status == "True" && kinds.contains(&c.kind.as_str()))
    }

    /// The latest transition time of a true condition among `kinds`.
    pub(super) fn at(&self, kinds: &[&str]) -> Option<i64> {
        self.conditions
            .iter()
            .filter(|c| c.status == "True" && kinds.contains(&c.kind.as_str()))
            .filter_map(|c| c.last_transition_time.as_deref())
            .filter_map(crate::time::parse_rfc3339)
            .max()
    }
}
