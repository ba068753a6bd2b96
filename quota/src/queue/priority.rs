//! A queued workload's priority (docs/queueing.md §3): the value of the
//! PriorityClass its pod templates name (`scheduling.k8s.io/v1`), as the
//! API server's Priority admission gives its pods — never an integer the
//! user wrote in the template. kube-apiserver refuses a pod that states a
//! `priority` of its own beside a class (or instead of one), so a number
//! typed into a Job's template would only jump the queue, never run.
//!
//! - A template that names no class gets the global default class's value
//!   (the lowest one if several claim to be default, as kube-apiserver
//!   picks), or 0 without one.
//! - A class that does not exist is judged at 0 and said so: the API
//!   server's Priority admission would refuse every pod of that template
//!   until the class is created.
//! - A workload of several templates (Kubeflow replica specs) takes the
//!   highest value among the classes they name.

use serde_json::Value;
use std::collections::BTreeMap;

/// The PriorityClasses of the cluster, as admission reads them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Classes {
    values: BTreeMap<String, i32>,
    /// The global default class: (name, value).
    default: Option<(String, i32)>,
}

/// A workload's priority and what a person should know about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    pub value: i32,
    /// Classes named that do not exist (sorted).
    pub unknown: Vec<String>,
}

impl Resolved {
    /// What the reason says when a class is missing.
    pub fn note(&self) -> Option<String> {
        unknown_note(&self.unknown)
    }
}

/// `PriorityClass 'x' does not exist: judged at priority 0; …`.
pub fn unknown_note(unknown: &[String]) -> Option<String> {
    let names: Vec<String> = unknown.iter().map(|n| format!("'{n}'")).collect();
    match names.len() {
        0 => None,
        1 => Some(format!(
            "PriorityClass {} does not exist: judged at priority 0, and the API server \
             refuses its pods until it is created",
            names[0]
        )),
        _ => Some(format!(
            "PriorityClasses {} do not exist: judged at priority 0, and the API server \
             refuses their pods until they are created",
            names.join(", ")
        )),
    }
}

/// Names a template may give: a DNS subdomain (what the API server
/// accepts for a PriorityClass's name), at most 253 characters.
fn plausible(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
}

impl Classes {
    /// From (name, value, globalDefault) triples, as listed.
    pub fn new<'a>(classes: impl IntoIterator<Item = (&'a str, i32, bool)>) -> Classes {
        let mut out = Classes::default();
        for (name, value, global_default) in classes {
            out.values.insert(name.to_string(), value);
            if global_default && out.default.as_ref().is_none_or(|(_, v)| value < *v) {
                out.default = Some((name.to_string(), value));
            }
        }
        out
    }

    /// From PriorityClass objects as the API serves them (`value` and
    /// `globalDefault` at the top level); objects without a name or a
    /// value in i32 are left out (the API server would not hold them).
    pub fn from_objects<'a>(objects: impl IntoIterator<Item = &'a Value>) -> Classes {
        let triples: Vec<(&str, i32, bool)> = objects
            .into_iter()
            .filter_map(|o| {
                let name = o["metadata"]["name"].as_str()?;
                let value = i32::try_from(o["value"].as_i64()?).ok()?;
                Some((name, value, o["globalDefault"].as_bool().unwrap_or(false)))
            })
            .collect();
        Classes::new(triples)
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The priority of a workload whose templates name `names` (distinct;
    /// empty: none names a class).
    pub fn resolve(&self, names: &[String]) -> Resolved {
        if names.is_empty() {
            return Resolved {
                value: self.default.as_ref().map_or(0, |(_, v)| *v),
                unknown: Vec::new(),
            };
        }
        let mut unknown = Vec::new();
        let mut value: Option<i32> = None;
        for n in names {
            match self.values.get(n) {
                Some(v) => value = Some(value.map_or(*v, |x| x.max(*v))),
                None => unknown.push(n.clone()),
            }
        }
        unknown.sort();
        unknown.dedup();
        Resolved {
            value: value.unwrap_or(0),
            unknown,
        }
    }
}

/// The distinct `priorityClassName`s the pod templates of `obj` name
/// (`…template.spec.priorityClassName`, at any depth up to 8), sorted. A
/// name that could not be a PriorityClass's is kept as written (cut to
/// 253 characters): it names no class, so it is judged unknown.
pub fn class_names(obj: &Value) -> Vec<String> {
    let mut out = Vec::new();
    walk(obj, 0, &mut out);
    out.sort();
    out.dedup();
    // A template list is small; a hostile object could name many.
    out.truncate(16);
    out
}

fn walk(obj: &Value, depth: u32, out: &mut Vec<String>) {
    if depth > 8 {
        return;
    }
    match obj {
        Value::Object(m) => {
            if let Some(n) = m
                .get("template")
                .and_then(|t| t.get("spec"))
                .and_then(|s| s.get("priorityClassName"))
                .and_then(Value::as_str)
                .map(str::trim)
                .filter(|n| !n.is_empty())
            {
                let n = if plausible(n) {
                    n.to_string()
                } else {
                    n.chars().take(253).collect()
                };
                out.push(n);
            }
            for v in m.values() {
                walk(v, depth + 1, out);
            }
        }
        Value::Array(a) => {
            for v in a {
                walk(v, depth + 1, out);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn classes() -> Classes {
        Classes::new([
            ("high", 1000, false),
            ("low", 10, false),
            ("batch", 100, true),
            ("other-default", 50, true),
        ])
    }

    #[test]
    fn a_named_class_gives_its_value_and_a_number_in_the_template_counts_for_nothing() {
        let job = json!({"spec": {"template": {"spec": {
            "priorityClassName": "high", "priority": 2_000_000_000}}}});
        assert_eq!(class_names(&job), ["high"]);
        assert_eq!(classes().resolve(&class_names(&job)).value, 1000);
        let forged = json!({"spec": {"template": {"spec": {"priority": 2_000_000_000}}}});
        assert!(class_names(&forged).is_empty());
        // No class named: the global default (the lowest of two), not the number.
        assert_eq!(classes().resolve(&class_names(&forged)).value, 50);
        assert_eq!(Classes::default().resolve(&[]).value, 0);
    }

    #[test]
    fn an_unknown_class_is_judged_at_zero_and_said() {
        let r = classes().resolve(&["urgent".to_string()]);
        assert_eq!(r.value, 0);
        assert_eq!(
            r.note().unwrap(),
            "PriorityClass 'urgent' does not exist: judged at priority 0, and the API server \
             refuses its pods until it is created"
        );
        // Beside a known one, the known one counts; the unknown is still said.
        let r = classes().resolve(&["low".to_string(), "urgent".to_string()]);
        assert_eq!(r.value, 10);
        assert!(r.note().is_some());
        assert_eq!(classes().resolve(&["low".to_string()]).note(), None);
    }

    #[test]
    fn several_templates_take_the_highest_class() {
        let tf = json!({"spec": {"tfReplicaSpecs": {
            "PS": {"template": {"spec": {"priorityClassName": "low"}}},
            "Worker": {"template": {"spec": {"priorityClassName": "high"}}}}}});
        assert_eq!(class_names(&tf), ["high", "low"]);
        assert_eq!(classes().resolve(&class_names(&tf)).value, 1000);
    }

    #[test]
    fn classes_read_from_api_objects() {
        let list = [
            json!({"metadata": {"name": "system-cluster-critical"}, "value": 2_000_000_000}),
            json!({"metadata": {"name": "team"}, "value": 7, "globalDefault": true}),
            json!({"metadata": {"name": "broken"}, "value": 1_i64 << 40}),
        ];
        let c = Classes::from_objects(list.iter());
        assert_eq!(c.len(), 2);
        assert_eq!(c.resolve(&[]).value, 7);
        assert_eq!(
            c.resolve(&["system-cluster-critical".into()]).value,
            2_000_000_000
        );
    }
}
