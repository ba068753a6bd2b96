//! What one pod of a template uses, by Kubernetes' effective-request rules,
//! expressed in quota keys (with model-qualified keys from model labels).

use crate::keys::{KeyConfig, CPU_TYPE_LABEL, GPU_TYPE_LABEL, MEMORY_TYPE_LABEL};
use crate::quantity::Quantity;
use crate::resources::ResourceList;
use serde::{Deserialize, Deserializer};
use std::collections::BTreeMap;

/// `null` and absent both mean "empty", as in Go's omitempty JSON.
pub(crate) fn nullable<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    #[serde(default, deserialize_with = "nullable")]
    pub namespace: String,
    #[serde(default, deserialize_with = "nullable")]
    pub uid: String,
    #[serde(default, deserialize_with = "nullable")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "nullable")]
    pub annotations: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "nullable")]
    pub owner_references: Vec<OwnerReference>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnerReference {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub controller: Option<bool>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct PodTemplate {
    #[serde(default, deserialize_with = "nullable")]
    pub metadata: ObjectMeta,
    #[serde(default, deserialize_with = "nullable")]
    pub spec: PodSpec,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSpec {
    #[serde(default, deserialize_with = "nullable")]
    pub containers: Vec<Container>,
    #[serde(default, deserialize_with = "nullable")]
    pub init_containers: Vec<Container>,
    #[serde(default, deserialize_with = "nullable")]
    pub overhead: BTreeMap<String, Quantity>,
    #[serde(default)]
    pub priority_class_name: Option<String>,
    /// The PriorityClass value the API server resolved; 0 when unset or not
    /// an integer (it is never refused: a pod is read as it comes).
    #[serde(default, deserialize_with = "lenient_priority")]
    pub priority: i32,
    /// Its scheduling gates: a gated pod is never bound to a node
    /// (`crate::hold`).
    #[serde(default, deserialize_with = "nullable")]
    pub scheduling_gates: Vec<SchedulingGate>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
pub struct SchedulingGate {
    #[serde(default)]
    pub name: String,
}

/// An integer read as Kubernetes' int32 (truncated like a Go conversion),
/// anything else as 0.
fn lenient_priority<'de, D: Deserializer<'de>>(d: D) -> Result<i32, D::Error> {
    Ok(serde_json::Value::deserialize(d)?.as_i64().unwrap_or(0) as i32)
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Container {
    #[serde(default)]
    pub name: String,
    #[serde(default, deserialize_with = "nullable")]
    pub resources: Resources,
    #[serde(default)]
    pub restart_policy: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
pub struct Resources {
    #[serde(default, deserialize_with = "nullable")]
    pub requests: BTreeMap<String, Quantity>,
    #[serde(default, deserialize_with = "nullable")]
    pub limits: BTreeMap<String, Quantity>,
}

impl Container {
    fn is_sidecar(&self) -> bool {
        self.restart_policy.as_deref() == Some("Always")
    }

    /// Requests after API defaulting: a limit without a request implies an
    /// equal request.
    fn requests(&self) -> BTreeMap<String, Quantity> {
        let mut r = self.resources.requests.clone();
        for (k, v) in &self.resources.limits {
            r.entry(k.clone()).or_insert(*v);
        }
        r
    }
}

/// An amount a pod spec may not hold, and where: no request, limit or
/// overhead is negative (a negative one would lower `used`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadAmount {
    /// `container "worker"`, `init container #0`, `pod overhead`.
    pub subject: String,
    /// `requests nvidia.com/gpu is negative (-100)`.
    pub problem: String,
}

/// Refuses a negative request, limit or overhead. Each amount is already
/// at most `quantity::MAX_NANOS` (the parser's bound); what they sum to is
/// bounded where pods are counted (`workload`).
pub fn check_amounts(spec: &PodSpec) -> Result<(), BadAmount> {
    let kinds = [
        ("container", &spec.containers),
        ("init container", &spec.init_containers),
    ];
    for (what, containers) in kinds {
        for (i, c) in containers.iter().enumerate() {
            let subject = || match c.name.as_str() {
                "" => format!("{what} #{i}"),
                name => format!("{what} {name:?}"),
            };
            for (field, list) in [
                ("requests", &c.resources.requests),
                ("limits", &c.resources.limits),
            ] {
                if let Some((k, v)) = list.iter().find(|(_, v)| v.is_negative()) {
                    return Err(BadAmount {
                        subject: subject(),
                        problem: format!("{field} {k} is negative ({v})"),
                    });
                }
            }
        }
    }
    if let Some((k, v)) = spec.overhead.iter().find(|(_, v)| v.is_negative()) {
        return Err(BadAmount {
            subject: "pod overhead".into(),
            problem: format!("{k} is negative ({v})"),
        });
    }
    Ok(())
}

/// Pod-level requests or limits: containers and restartable (sidecar) init
/// containers summed, each ordinary init container taking the max with the
/// sidecars started before it, then pod overhead.
fn effective(
    spec: &PodSpec,
    per: impl Fn(&Container) -> BTreeMap<String, Quantity>,
) -> BTreeMap<String, Quantity> {
    let mut total: BTreeMap<String, Quantity> = BTreeMap::new();
    let add = |into: &mut BTreeMap<String, Quantity>, from: &BTreeMap<String, Quantity>| {
        for (k, v) in from {
            let e = into.entry(k.clone()).or_insert(Quantity::ZERO);
            *e = e.saturating_add(*v);
        }
    };
    for c in &spec.containers {
        add(&mut total, &per(c));
    }
    let mut sidecars: BTreeMap<String, Quantity> = BTreeMap::new();
    let mut init_peak: BTreeMap<String, Quantity> = BTreeMap::new();
    for c in &spec.init_containers {
        let r = per(c);
        if c.is_sidecar() {
            add(&mut total, &r);
            add(&mut sidecars, &r);
        } else {
            let mut during = sidecars.clone();
            add(&mut during, &r);
            for (k, v) in during {
                let e = init_peak.entry(k).or_insert(Quantity::ZERO);
                *e = (*e).max(v);
            }
        }
    }
    for (k, v) in init_peak {
        let e = total.entry(k).or_insert(Quantity::ZERO);
        *e = (*e).max(v);
    }
    add(&mut total, &spec.overhead);
    total.retain(|_, v| !v.is_zero());
    total
}

pub fn pod_requests(spec: &PodSpec) -> BTreeMap<String, Quantity> {
    effective(spec, Container::requests)
}

pub fn pod_limits(spec: &PodSpec) -> BTreeMap<String, Quantity> {
    effective(spec, |c| c.resources.limits.clone())
}

/// The models a workload declares through its labels.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Models {
    pub cpu: Option<String>,
    pub gpu: Option<String>,
    pub memory: Option<String>,
}

impl Models {
    /// Labels of the workload first, then of its pod template.
    pub fn from_labels(
        workload: &BTreeMap<String, String>,
        template: &BTreeMap<String, String>,
    ) -> Models {
        let pick = |k: &str| {
            workload
                .get(k)
                .or_else(|| template.get(k))
                .filter(|v| !v.is_empty())
                .cloned()
        };
        Models {
            cpu: pick(CPU_TYPE_LABEL),
            gpu: pick(GPU_TYPE_LABEL),
            memory: pick(MEMORY_TYPE_LABEL),
        }
    }

    fn for_resource(&self, resource: &str, cfg: &KeyConfig) -> Option<&str> {
        match cfg.model_label(resource)? {
            CPU_TYPE_LABEL => self.cpu.as_deref(),
            MEMORY_TYPE_LABEL => self.memory.as_deref(),
            GPU_TYPE_LABEL => self.gpu.as_deref(),
            _ => None,
        }
    }
}

/// One pod's usage in quota keys: `requests.*`, `limits.*`, the plain
/// aliases of requests, `pods`, and the model-qualified variants.
pub fn pod_usage(spec: &PodSpec, models: &Models, cfg: &KeyConfig) -> ResourceList {
    let mut out = ResourceList::new();
    out.insert("pods".into(), Quantity::from_units(1));
    for (resource, q) in pod_requests(spec) {
        let model = models.for_resource(&resource, cfg);
        let alias = matches!(resource.as_str(), "cpu" | "memory" | "ephemeral-storage");
        out.insert(format!("requests.{resource}"), q);
        if alias {
            out.insert(resource.clone(), q);
        }
        if let Some(m) = model {
            out.insert(format!("requests.{resource}.{m}"), q);
            if alias {
                out.insert(format!("{resource}.{m}"), q);
            }
        }
    }
    for (resource, q) in pod_limits(spec) {
        out.insert(format!("limits.{resource}"), q);
        if let Some(m) = models.for_resource(&resource, cfg) {
            out.insert(format!("limits.{resource}.{m}"), q);
        }
    }
    out
}

/// Kubernetes QoS class of a pod, for per-class cash prices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum QosClass {
    Guaranteed,
    Burstable,
    BestEffort,
}

pub fn qos_class(spec: &PodSpec) -> QosClass {
    let all: Vec<&Container> = spec
        .containers
        .iter()
        .chain(&spec.init_containers)
        .collect();
    let compute = |m: &BTreeMap<String, Quantity>| {
        m.iter()
            .any(|(k, v)| (k == "cpu" || k == "memory") && !v.is_zero())
    };
    if all
        .iter()
        .all(|c| !compute(&c.resources.requests) && !compute(&c.resources.limits))
    {
        return QosClass::BestEffort;
    }
    let guaranteed = all.iter().all(|c| {
        let req = c.requests();
        ["cpu", "memory"].iter().all(|r| {
            let l = c.resources.limits.get(*r);
            l.is_some() && l == req.get(*r)
        })
    });
    if guaranteed {
        QosClass::Guaranteed
    } else {
        QosClass::Burstable
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: &str) -> PodSpec {
        serde_json::from_str(json).unwrap()
    }
    fn q(s: &str) -> Quantity {
        s.parse().unwrap()
    }

    #[test]
    fn containers_sum_and_init_takes_max() {
        let s = spec(
            r#"{"containers":[{"name":"a","resources":{"requests":{"cpu":"1","memory":"1Gi"}}},
                              {"name":"b","resources":{"requests":{"cpu":"500m"}}}],
                "initContainers":[{"name":"i","resources":{"requests":{"cpu":"2","memory":"512Mi"}}}]}"#,
        );
        let r = pod_requests(&s);
        assert_eq!(r["cpu"], q("2"), "init container's 2 cores beat 1.5 summed");
        assert_eq!(r["memory"], q("1Gi"));
    }

    #[test]
    fn sidecars_add_up_and_count_during_later_inits() {
        let s = spec(
            r#"{"containers":[{"name":"app","resources":{"requests":{"cpu":"1"}}}],
                "initContainers":[
                  {"name":"side","restartPolicy":"Always","resources":{"requests":{"cpu":"1"}}},
                  {"name":"migrate","resources":{"requests":{"cpu":"2500m"}}}],
                "overhead":{"cpu":"100m"}}"#,
        );
        // containers+sidecar = 2; init after sidecar = 2.5+1 = 3.5; + overhead
        assert_eq!(pod_requests(&s)["cpu"], q("3600m"));
    }

    #[test]
    fn limit_without_request_defaults_request() {
        let s =
            spec(r#"{"containers":[{"resources":{"limits":{"nvidia.com/gpu":"8","cpu":"4"}}}]}"#);
        let r = pod_requests(&s);
        assert_eq!(r["nvidia.com/gpu"], q("8"));
        assert_eq!(r["cpu"], q("4"));
        assert_eq!(qos_class(&s), QosClass::Burstable, "no memory limit");
    }

    #[test]
    fn usage_has_aliases_and_models() {
        let s = spec(
            r#"{"containers":[{"resources":{"requests":{"cpu":"4","nvidia.com/gpu":"2"},"limits":{"cpu":"4","nvidia.com/gpu":"2"}}}]}"#,
        );
        let models = Models {
            cpu: Some("A4".into()),
            gpu: Some("A100".into()),
            memory: None,
        };
        let u = pod_usage(&s, &models, &KeyConfig::default());
        for (k, v) in [
            ("pods", "1"),
            ("requests.cpu", "4"),
            ("cpu", "4"),
            ("cpu.A4", "4"),
            ("requests.cpu.A4", "4"),
            ("limits.cpu", "4"),
            ("limits.cpu.A4", "4"),
            ("requests.nvidia.com/gpu", "2"),
            ("requests.nvidia.com/gpu.A100", "2"),
            ("limits.nvidia.com/gpu.A100", "2"),
        ] {
            assert_eq!(u.get(k), Some(&q(v)), "{k}");
        }
        assert!(!u.contains_key("memory"));
    }

    #[test]
    fn qos_classes() {
        assert_eq!(
            qos_class(&spec(r#"{"containers":[{}]}"#)),
            QosClass::BestEffort
        );
        let g = spec(r#"{"containers":[{"resources":{"limits":{"cpu":"1","memory":"1Gi"}}}]}"#);
        assert_eq!(qos_class(&g), QosClass::Guaranteed);
    }

    #[test]
    fn nulls_are_empty() {
        let s = spec(
            r#"{"containers":[{"name":"a","resources":{"requests":null,"limits":null}}],"initContainers":null,"overhead":null}"#,
        );
        assert!(pod_requests(&s).is_empty());
    }
}
