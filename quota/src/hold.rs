//! How a queued workload is held back until its quota's queue admits it
//! (docs/queueing.md §1, "Holding"). Each adapter says how (`Hold`); the
//! queue, the webhooks and the controller only ask this module, never the
//! kind.
//!
//! - `Hold::Suspend(path)`: a flag in the spec stops all its pods (Job,
//!   Kubeflow jobs, JobSet). Held: the flag is true. Released: set false.
//! - `Hold::PodGate(templates)`: the kind has no such flag (Volcano Job),
//!   so every pod template carries the scheduling gate `GATE` from its
//!   creation on, and the object the annotation `GATE: "true"` while it
//!   waits. kube-apiserver never binds a pod whose `spec.schedulingGates`
//!   is not empty, under any scheduler, and after a pod is created its
//!   gates may only be removed: its pods exist but cannot run. Held: the
//!   annotation **and** every template gated (an annotation over ungated
//!   templates holds nothing back, so it reads as running). Released:
//!   the annotation removed (the workload then reads as what it runs) and
//!   the gate removed from each of its pods (`ungate_patch`); pods made
//!   later from the templates carry the gate too, and are ungated while
//!   the workload is charged (`to_ungate`).

use crate::usage::{ObjectMeta, PodTemplate};
use serde_json::{json, Value};

/// The scheduling gate on a held workload's pods, the label on its pod
/// templates (so the pods webhook sees only such pods) and the
/// annotation on the workload while it waits: one name for all three.
pub const GATE: &str = "biz.group.resource.quota/queued";

/// How a kind's queued workloads are held back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hold {
    /// They cannot be: admitted or refused at once.
    Never,
    /// The spec flag at this path stops every pod.
    Suspend(&'static [&'static str]),
    /// Every pod template at this path (`*`: each element of a list)
    /// carries `GATE`.
    PodGate(&'static [&'static str]),
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// The JSON pointer (RFC 6901) of `path`, each key escaped.
pub fn pointer(path: &[&str]) -> String {
    path.iter().map(|k| format!("/{}", escape(k))).collect()
}

fn at<'a>(obj: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(obj, |v, k| v.get(*k))
}

/// JSON pointers of the pod templates at `path` in `obj` (`*` stands for
/// each element of a list), in document order; absent ones are left out.
pub fn template_pointers(obj: &Value, path: &[&str]) -> Vec<String> {
    let mut found = vec![(String::new(), obj)];
    for k in path {
        let mut next = Vec::new();
        for (p, v) in found {
            if *k == "*" {
                for (i, e) in v.as_array().into_iter().flatten().enumerate() {
                    next.push((format!("{p}/{i}"), e));
                }
            } else if let Some(e) = v.get(*k) {
                next.push((format!("{p}/{}", escape(k)), e));
            }
        }
        found = next;
    }
    found.into_iter().map(|(p, _)| p).collect()
}

/// Where `GATE` is in a pod spec's `schedulingGates`, if it is.
fn gate_index(spec: &Value) -> Option<usize> {
    spec.get("schedulingGates")?
        .as_array()?
        .iter()
        .position(|g| g.get("name").and_then(Value::as_str) == Some(GATE))
}

fn annotated(obj: &Value) -> bool {
    obj.pointer(&format!("/metadata/annotations/{}", escape(GATE)))
        .and_then(Value::as_str)
        == Some("true")
}

/// Whether `obj` is held back now.
pub fn is_held(hold: Hold, obj: &Value) -> bool {
    match hold {
        Hold::Never => false,
        Hold::Suspend(path) => at(obj, path) == Some(&Value::Bool(true)),
        Hold::PodGate(path) => {
            let tpls = template_pointers(obj, path);
            annotated(obj)
                && !tpls.is_empty()
                && tpls.iter().all(|p| {
                    obj.pointer(p)
                        .and_then(|t| t.get("spec"))
                        .and_then(gate_index)
                        .is_some()
                })
        }
    }
}

/// `is_held` of a `PodGate` kind as its adapter reads it (typed): the
/// annotation and every one of `templates` gated.
pub fn held_by_gates<'a>(
    meta: &ObjectMeta,
    templates: impl IntoIterator<Item = &'a PodTemplate>,
) -> bool {
    let mut any = false;
    let all = templates.into_iter().all(|t| {
        any = true;
        t.spec.scheduling_gates.iter().any(|g| g.name == GATE)
    });
    meta.annotations.get(GATE).map(String::as_str) == Some("true") && any && all
}

/// A copy of `obj` as it reads once released: what it will run.
pub fn as_released(hold: Hold, obj: &Value) -> Value {
    let mut out = obj.clone();
    match hold {
        Hold::Never => {}
        Hold::Suspend(path) => {
            let mut cur = &mut out;
            for (i, k) in path.iter().enumerate() {
                let Some(m) = cur.as_object_mut() else {
                    return obj.clone();
                };
                if i + 1 == path.len() {
                    m.insert((*k).to_string(), Value::Bool(false));
                    break;
                }
                cur = m.entry((*k).to_string()).or_insert_with(|| json!({}));
            }
        }
        Hold::PodGate(_) => {
            if let Some(a) = out
                .pointer_mut("/metadata/annotations")
                .and_then(Value::as_object_mut)
            {
                a.remove(GATE);
            }
        }
    }
    out
}

/// The JSONPatch (RFC 6902) that holds `obj` back: `add` at the first
/// missing level of each change, since `add` needs its parent.
pub fn hold_patch(hold: Hold, obj: &Value) -> Value {
    // `add` of `leaf` at `base` + `path`, at the first level missing.
    let add = |base: &str, path: &[&str], leaf: Value| {
        let mut depth = 0;
        while depth + 1 < path.len()
            && obj
                .pointer(&format!("{base}{}", pointer(&path[..=depth])))
                .is_some_and(Value::is_object)
        {
            depth += 1;
        }
        let value = path[depth + 1..]
            .iter()
            .rev()
            .fold(leaf, |inner, k| json!({ *k: inner }));
        json!({"op": "add", "path": format!("{base}{}", pointer(&path[..=depth])), "value": value})
    };
    let mut ops = Vec::new();
    match hold {
        Hold::Never => {}
        Hold::Suspend(path) => ops.push(add("", path, Value::Bool(true))),
        Hold::PodGate(path) => {
            if !annotated(obj) {
                ops.push(add("", &["metadata", "annotations", GATE], json!("true")));
            }
            for t in template_pointers(obj, path) {
                let tpl = obj.pointer(&t).unwrap_or(&Value::Null);
                let label = format!("/metadata/labels/{}", escape(GATE));
                if tpl.pointer(&label) != Some(&json!("true")) {
                    ops.push(add(&t, &["metadata", "labels", GATE], json!("true")));
                }
                let spec = tpl.get("spec").unwrap_or(&Value::Null);
                if gate_index(spec).is_none() {
                    let gate = json!({"name": GATE});
                    ops.push(match spec.get("schedulingGates").and_then(Value::as_array) {
                        Some(_) => json!({"op": "add", "path": format!("{t}/spec/schedulingGates/-"), "value": gate}),
                        None => add(&t, &["spec", "schedulingGates"], json!([gate])),
                    });
                }
            }
        }
    }
    Value::Array(ops)
}

/// The merge patch that releases a held workload (None: nothing holds
/// it). A `PodGate` workload's pods are released one by one
/// (`ungate_patch`).
pub fn release_patch(hold: Hold) -> Option<Value> {
    match hold {
        Hold::Never => None,
        Hold::Suspend(path) => Some(
            path.iter()
                .rev()
                .fold(Value::Bool(false), |inner, k| json!({ *k: inner })),
        ),
        Hold::PodGate(_) => Some(json!({"metadata": {"annotations": {GATE: null}}})),
    }
}

/// Whether a pod carries `GATE`.
pub fn pod_gated(pod: &Value) -> bool {
    pod.get("spec").and_then(gate_index).is_some()
}

/// The JSONPatch that removes `GATE` from a pod (and its label): a
/// `test` of the gate at its index first, so a list changed meanwhile
/// makes the patch fail (422) instead of removing another gate. None
/// when the pod carries no such gate.
pub fn ungate_patch(pod: &Value) -> Option<Value> {
    let i = pod.get("spec").and_then(gate_index)?;
    let mut ops = vec![
        json!({"op": "test", "path": format!("/spec/schedulingGates/{i}/name"), "value": GATE}),
        json!({"op": "remove", "path": format!("/spec/schedulingGates/{i}")}),
    ];
    let label = format!("/metadata/labels/{}", escape(GATE));
    if pod.pointer(&label).is_some() {
        ops.push(json!({"op": "remove", "path": label}));
    }
    Some(Value::Array(ops))
}

/// The pods webhook's rule (UPDATE of a pod's spec or metadata): the
/// gate, and the label that sends the pod to the webhook while it is
/// gated, are removed by bizrq only (`by_bizrq`: the request's user is
/// bizrq's service account). A refusal says what to do instead.
pub fn pod_update(old: &Value, new: &Value, by_bizrq: bool) -> Result<(), String> {
    if by_bizrq || !pod_gated(old) {
        return Ok(());
    }
    let name = format!(
        "{}/{}",
        old.pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or(""),
        old.pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
    );
    let waits = format!(
        "pod {name} belongs to a workload waiting in its quota's queue (scheduling gate {GATE}); \
         bizrq removes the gate when the quota admits the workload"
    );
    if !pod_gated(new) {
        return Err(format!("bizrq: {waits}: only bizrq may remove it"));
    }
    let label = format!("/metadata/labels/{}", escape(GATE));
    if old.pointer(&label).is_some() && new.pointer(&label).is_none() {
        return Err(format!(
            "bizrq: {waits}: its label {GATE} stays while it is gated"
        ));
    }
    Ok(())
}

/// A gated pod as the controller knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatedPod {
    pub workload_ref: String,
    pub namespace: String,
    pub name: String,
    /// Its `ungate_patch`.
    pub patch: Value,
}

/// The gated pods to release now: those whose workload is charged (the
/// queue admitted it, or it was admitted at once). A workload waiting in
/// the queue is charged nothing, so its pods stay gated.
pub fn to_ungate(gated: &[GatedPod], charged: impl Fn(&str) -> bool) -> Vec<&GatedPod> {
    gated.iter().filter(|p| charged(&p.workload_ref)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TASKS: Hold = Hold::PodGate(&["spec", "tasks", "*", "template"]);

    fn vcjob(tpls: &[Value]) -> Value {
        let tasks: Vec<Value> = tpls
            .iter()
            .map(|t| json!({"name": "t", "replicas": 2, "template": t}))
            .collect();
        json!({"metadata": {"name": "v", "namespace": "ml"}, "spec": {"tasks": tasks}})
    }

    /// RFC 6902 as kube-apiserver applies it, for the ops `hold_patch`
    /// writes (`add` of members and of `-`).
    fn apply(obj: &mut Value, ops: &Value) {
        for op in ops.as_array().unwrap() {
            let path = op["path"].as_str().unwrap();
            let (parent, last) = path.rsplit_once('/').unwrap();
            let last = last.replace("~1", "/").replace("~0", "~");
            match obj.pointer_mut(parent).unwrap() {
                Value::Object(m) => {
                    assert!(m.insert(last, op["value"].clone()).is_none(), "{path}");
                }
                Value::Array(a) => {
                    assert_eq!(last, "-");
                    a.push(op["value"].clone());
                }
                _ => panic!("{path}"),
            }
        }
    }

    #[test]
    fn a_held_volcano_job_has_every_template_gated_and_the_annotation() {
        let bare = json!({"spec": {"containers": []}});
        let gated_already = json!({"metadata": {"labels": {"a": "b"}},
            "spec": {"schedulingGates": [{"name": "other"}], "containers": []}});
        let mut obj = vcjob(&[bare, json!({}), gated_already]);
        assert!(!is_held(TASKS, &obj));
        let ops = hold_patch(TASKS, &obj);
        apply(&mut obj, &ops);
        assert!(is_held(TASKS, &obj), "{obj:#}");
        // Other gates and labels are kept; ours is added once.
        assert_eq!(
            obj.pointer("/spec/tasks/2/template/spec/schedulingGates")
                .unwrap(),
            &json!([{"name": "other"}, {"name": GATE}])
        );
        assert_eq!(
            obj.pointer("/spec/tasks/2/template/metadata/labels")
                .unwrap(),
            &json!({"a": "b", GATE: "true"})
        );
        // Holding a held object again changes nothing.
        assert_eq!(hold_patch(TASKS, &obj), json!([]));
        // The typed reader agrees.
        let o: crate::usage::PodTemplate =
            serde_json::from_value(obj["spec"]["tasks"][0]["template"].clone()).unwrap();
        let meta: ObjectMeta = serde_json::from_value(obj["metadata"].clone()).unwrap();
        assert!(held_by_gates(&meta, [&o]));
        // Released: the annotation goes, the templates keep their gates
        // (Volcano forbids changing them), and it reads as running.
        let released = as_released(TASKS, &obj);
        assert!(!is_held(TASKS, &released));
        let meta: ObjectMeta = serde_json::from_value(released["metadata"].clone()).unwrap();
        assert!(!held_by_gates(&meta, [&o]));
        assert_eq!(
            release_patch(TASKS),
            Some(json!({"metadata": {"annotations": {GATE: null}}}))
        );
    }

    #[test]
    fn an_annotation_over_an_ungated_template_holds_nothing() {
        let mut obj = vcjob(&[
            json!({"spec": {"schedulingGates": [{"name": GATE}]}}),
            json!({}),
        ]);
        obj["metadata"]["annotations"] = json!({GATE: "true"});
        assert!(!is_held(TASKS, &obj), "one task would run");
        let none = vcjob(&[]);
        let mut none = none.clone();
        none["metadata"]["annotations"] = json!({GATE: "true"});
        assert!(!is_held(TASKS, &none), "no template: nothing to hold");
        let meta: ObjectMeta = serde_json::from_value(none["metadata"].clone()).unwrap();
        assert!(!held_by_gates(&meta, []));
    }

    #[test]
    fn suspend_holds_by_its_flag() {
        let path: &'static [&'static str] = &["spec", "runPolicy", "suspend"];
        let tf = json!({"spec": {"tfReplicaSpecs": {}}});
        assert_eq!(
            hold_patch(Hold::Suspend(path), &tf),
            json!([{"op": "add", "path": "/spec/runPolicy", "value": {"suspend": true}}])
        );
        let job = json!({"spec": {"suspend": true}});
        assert!(is_held(Hold::Suspend(&["spec", "suspend"]), &job));
        assert_eq!(
            as_released(Hold::Suspend(&["spec", "suspend"]), &job),
            json!({"spec": {"suspend": false}})
        );
        assert_eq!(
            release_patch(Hold::Suspend(path)),
            Some(json!({"spec": {"runPolicy": {"suspend": false}}}))
        );
        assert_eq!(release_patch(Hold::Never), None);
    }

    #[test]
    fn the_ungate_patch_tests_the_gate_it_removes() {
        let pod = json!({"metadata": {"labels": {GATE: "true"}},
            "spec": {"schedulingGates": [{"name": "other"}, {"name": GATE}]}});
        assert_eq!(
            ungate_patch(&pod),
            Some(json!([
                {"op": "test", "path": "/spec/schedulingGates/1/name", "value": GATE},
                {"op": "remove", "path": "/spec/schedulingGates/1"},
                {"op": "remove", "path": "/metadata/labels/biz.group.resource.quota~1queued"},
            ]))
        );
        assert_eq!(
            ungate_patch(&json!({"spec": {"schedulingGates": [{"name": "other"}]}})),
            None
        );
        assert_eq!(ungate_patch(&json!({})), None);
    }

    #[test]
    fn only_bizrq_removes_the_gate_or_its_label() {
        let gated = json!({"metadata": {"name": "p", "namespace": "ml", "labels": {GATE: "true"}},
            "spec": {"schedulingGates": [{"name": GATE}]}});
        let mut ungated = gated.clone();
        ungated["spec"]["schedulingGates"] = json!([]);
        let mut unlabelled = gated.clone();
        unlabelled["metadata"]["labels"] = json!({});
        let e = pod_update(&gated, &ungated, false).unwrap_err();
        assert!(
            e.starts_with("bizrq: pod ml/p belongs to a workload waiting"),
            "{e}"
        );
        assert!(e.ends_with("only bizrq may remove it"), "{e}");
        assert!(pod_update(&gated, &unlabelled, false)
            .unwrap_err()
            .contains("stays while it is gated"));
        assert_eq!(pod_update(&gated, &ungated, true), Ok(()));
        // Anything else of a gated pod, and any pod without the gate.
        let mut relabelled = gated.clone();
        relabelled["metadata"]["labels"]["x"] = json!("y");
        assert_eq!(pod_update(&gated, &relabelled, false), Ok(()));
        assert_eq!(pod_update(&ungated, &ungated, false), Ok(()));
    }

    #[test]
    fn only_pods_of_charged_workloads_are_ungated() {
        let p = |w: &str, n: &str| GatedPod {
            workload_ref: w.to_string(),
            namespace: "ml".into(),
            name: n.into(),
            patch: json!([]),
        };
        let gated = [p("a", "a-0"), p("b", "b-0"), p("a", "a-1")];
        let out: Vec<&str> = to_ungate(&gated, |w| w == "a")
            .into_iter()
            .map(|p| p.name.as_str())
            .collect();
        assert_eq!(out, ["a-0", "a-1"]);
        assert!(to_ungate(&gated, |_| false).is_empty());
    }
}
