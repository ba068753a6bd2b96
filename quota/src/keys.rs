//! Resource keys of a quota: standard (`requests.cpu`, `pods`), model-qualified
//! (`limits.cpu.A4`, `requests.nvidia.com/gpu.A100`) and cash (`cash/…`).

use serde::{Deserialize, Serialize};

pub const CASH_PREFIX: &str = "cash/";
pub const QUOTA_LABEL: &str = "biz.group.resource.quota";
pub const CPU_TYPE_LABEL: &str = "biz.group.resource.quota/cpu-type";
pub const GPU_TYPE_LABEL: &str = "biz.group.resource.quota/gpu-type";
pub const MEMORY_TYPE_LABEL: &str = "biz.group.resource.quota/memory-type";

/// The site's settings that decisions read: which extended resources are
/// GPUs (and so take the gpu-type label), and which namespaces are governed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyConfig {
    pub gpu_resources: Vec<String>,
    /// Carried here so the webhook and the controller, which both hold
    /// this configuration, read the one rule.
    #[serde(default)]
    pub namespaces: crate::namespaces::Namespaces,
}

impl Default for KeyConfig {
    fn default() -> Self {
        KeyConfig {
            gpu_resources: vec![
                "nvidia.com/gpu".into(),
                "amd.com/gpu".into(),
                "gpu.intel.com/i915".into(),
                "habana.ai/gaudi".into(),
                "huawei.com/Ascend910".into(),
            ],
            namespaces: Default::default(),
        }
    }
}

impl KeyConfig {
    pub fn is_gpu(&self, resource: &str) -> bool {
        self.gpu_resources.iter().any(|g| g == resource)
    }

    /// Which model label qualifies a resource, if any.
    pub fn model_label(&self, resource: &str) -> Option<&'static str> {
        match resource {
            "cpu" => Some(CPU_TYPE_LABEL),
            "memory" => Some(MEMORY_TYPE_LABEL),
            r if self.is_gpu(r) => Some(GPU_TYPE_LABEL),
            _ => None,
        }
    }
}

/// Whether a key counts requests, limits or pods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    Requests,
    Limits,
    Pods,
}

/// A parsed key. `base` is the standard key without model (`limits.cpu`),
/// `resource` the pod resource it counts (`cpu`, `nvidia.com/gpu`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Key {
    pub cash: bool,
    pub class: Class,
    pub base: String,
    pub resource: String,
    pub model: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("unknown resource key '{0}': expected pods, cpu, memory, ephemeral-storage, requests.<resource>, limits.<resource>, a model-qualified key such as limits.cpu.A4, or cash/<key>")]
    Unknown(String),
    #[error("resource key '{key}': '{resource}' cannot be qualified by a model (only cpu, memory and the configured GPU resources can)")]
    NoModel { key: String, resource: String },
    #[error(
        "resource key '{key}': model '{model}' must be letters, digits, '-' or '_' (at most 63)"
    )]
    BadModel { key: String, model: String },
}

impl Key {
    pub fn parse(text: &str, cfg: &KeyConfig) -> Result<Key, KeyError> {
        let (cash, rest) = match text.strip_prefix(CASH_PREFIX) {
            Some(r) => (true, r),
            None => (false, text),
        };
        let unknown = || KeyError::Unknown(text.to_string());
        if rest == "pods" {
            return Ok(Key {
                cash,
                class: Class::Pods,
                base: "pods".into(),
                resource: "pods".into(),
                model: None,
            });
        }
        let (class, prefix, res) = if let Some(r) = rest.strip_prefix("requests.") {
            (Class::Requests, "requests.", r)
        } else if let Some(r) = rest.strip_prefix("limits.") {
            (Class::Limits, "limits.", r)
        } else {
            // plain cpu / memory / ephemeral-storage alias requests.*
            (Class::Requests, "", rest)
        };
        if res.is_empty() {
            return Err(unknown());
        }
        // Split a trailing `.MODEL` when what stands before it is a resource
        // that takes a model; otherwise the dot belongs to the resource name
        // (e.g. `nvidia.com/mig-1g.5gb`).
        let (resource, model) = match res.rsplit_once('.') {
            Some((r, m)) if cfg.model_label(r).is_some() && !r.ends_with('/') => (r, Some(m)),
            _ => (res, None),
        };
        let native = matches!(resource, "cpu" | "memory" | "ephemeral-storage")
            || resource.starts_with("hugepages-");
        if !is_resource_name(resource) || (!native && !resource.contains('/')) {
            return Err(unknown());
        }
        if prefix.is_empty() && !matches!(resource, "cpu" | "memory" | "ephemeral-storage") {
            return Err(unknown());
        }
        if let Some(m) = model {
            if cfg.model_label(resource).is_none() {
                return Err(KeyError::NoModel {
                    key: text.into(),
                    resource: resource.into(),
                });
            }
            if !is_model_name(m) {
                return Err(KeyError::BadModel {
                    key: text.into(),
                    model: m.into(),
                });
            }
        }
        Ok(Key {
            cash,
            class,
            base: format!("{prefix}{resource}"),
            resource: resource.to_string(),
            model: model.map(str::to_string),
        })
    }

    /// The key without the cash prefix (what a cash key accrues from).
    pub fn usage_key(&self) -> String {
        match &self.model {
            Some(m) => format!("{}.{m}", self.base),
            None => self.base.clone(),
        }
    }
}

/// A key as people read it — the one name cards, the tree, alerts, queue
/// reasons, chart titles and forms show (the raw key stays in a tooltip
/// and, unchanged, in the API): `requests.nvidia.com/gpu.A100` → `A100
/// GPUs`, `cash/requests.nvidia.com/gpu` → `GPU card-hours`,
/// `requests.cpu` → `CPU cores`, `limits.cpu.A4` → `CPU A4 cores
/// (limit)`, `requests.memory` → `memory`, `pods` → `pods`. A key that
/// does not parse is shown as it is.
pub fn display_name(key: &str, cfg: &KeyConfig) -> String {
    let Ok(k) = Key::parse(key, cfg) else {
        return key.to_string();
    };
    let gpu = cfg.is_gpu(&k.resource);
    let m = k.model.as_deref();
    let with = |word: &str| match m {
        Some(m) => format!("{word} {m}"),
        None => word.to_string(),
    };
    let name = if k.cash {
        let unit = cash_unit(key);
        match k.resource.as_str() {
            _ if gpu => format!("{} {unit}", m.unwrap_or("GPU")),
            "cpu" => format!("{} {unit}", with("CPU")),
            "memory" => format!("{} GiB-hours", with("memory")),
            "pods" => "pod-hours".to_string(),
            // An extended resource that is not a configured GPU: its unit
            // is not known here.
            r => format!("{} budget", with(r)),
        }
    } else {
        match k.resource.as_str() {
            _ if gpu => match m {
                Some(m) => format!("{m} GPUs"),
                None => "GPUs".to_string(),
            },
            "cpu" => format!("{} cores", with("CPU")),
            "memory" => with("memory"),
            "ephemeral-storage" => with("local storage"),
            "pods" => "pods".to_string(),
            r => with(r),
        }
    };
    if k.class == Class::Limits {
        format!("{name} (limit)")
    } else {
        name
    }
}

/// `text` with each of `keys` that stands in it as a whole word replaced
/// by its [`display_name`] (the longest key first, so
/// `requests.nvidia.com/gpu.A100` is not read as `requests.nvidia.com/gpu`
/// followed by `.A100`): a stored queue reason or alert message, written
/// with raw keys (as the API and `kubectl` keep them), as a page shows it.
pub fn with_names<'a>(
    text: &str,
    keys: impl IntoIterator<Item = &'a str>,
    cfg: &KeyConfig,
) -> String {
    let mut keys: Vec<&str> = keys.into_iter().filter(|k| !k.is_empty()).collect();
    keys.sort_by_key(|k| std::cmp::Reverse(k.len()));
    keys.dedup();
    let part_of_key = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '/' | '-' | '_');
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    'scan: while i < text.len() {
        let starts_word = text[..i]
            .chars()
            .next_back()
            .is_none_or(|c| !part_of_key(c));
        if starts_word {
            for k in &keys {
                if let Some(rest) = text[i..].strip_prefix(k) {
                    // A key may be followed by punctuation (`…A100: 2 free`,
                    // `…gpu.`), never by more of a key.
                    let mut next = rest.chars();
                    let ends_word = match next.next() {
                        None => true,
                        Some('.') => next.next().is_none_or(|c| !part_of_key(c)),
                        Some(c) => !part_of_key(c),
                    };
                    if ends_word {
                        out.push_str(&display_name(k, cfg));
                        i += k.len();
                        continue 'scan;
                    }
                }
            }
        }
        let c = text[i..].chars().next().unwrap_or_default();
        out.push(c);
        i += c.len_utf8().max(1);
    }
    out
}

/// Whether a key leads a page: GPU keys and budgets, shown first on
/// cards, quota pages and charts; CPU, memory, storage and pods fold
/// below them.
pub fn leads(key: &str, cfg: &KeyConfig) -> bool {
    display_order(key, cfg).0 <= 2
}

/// Where a key is listed, GPUs first: GPUs and their models, then
/// budgets (GPU budgets first), then CPU, memory, storage and other
/// resources, pods last; within each, `requests.*` before `limits.*`, a
/// model after its generic key. Sort keys by it.
pub fn display_order(key: &str, cfg: &KeyConfig) -> (u8, u8, String, String) {
    let Ok(k) = Key::parse(key, cfg) else {
        return (9, 0, key.to_string(), String::new());
    };
    let gpu = cfg.is_gpu(&k.resource);
    let rank = match (k.cash, k.resource.as_str()) {
        (false, _) if gpu => 0,
        (true, _) if gpu => 1,
        (true, _) => 2,
        (false, "cpu") => 3,
        (false, "memory") => 4,
        (false, "pods") => 6,
        (false, _) => 5,
    };
    let class = match k.class {
        Class::Requests | Class::Pods => 0,
        Class::Limits => 1,
    };
    (rank, class, k.resource, k.model.unwrap_or_default())
}

/// Whether `key` counts GPUs: a configured GPU resource, generic or of a
/// model, requests or limits (`requests.nvidia.com/gpu`,
/// `requests.nvidia.com/gpu.A100`, `limits.amd.com/gpu`); a budget is not
/// (`is_budget`). A key that does not parse is not.
pub fn is_gpu_key(key: &str, cfg: &KeyConfig) -> bool {
    Key::parse(key, cfg).is_ok_and(|k| !k.cash && cfg.is_gpu(&k.resource))
}

/// Whether `key` is a budget (`cash/…`), whatever it accrues from.
pub fn is_budget(key: &str) -> bool {
    key.starts_with(CASH_PREFIX)
}

/// The keys people plan and pay by: GPUs (every GPU resource and model)
/// and budgets. What alerts watch by default (`server::alerts`), before
/// CPU, memory and pods, which a GPU job takes alongside.
pub fn is_gpu_or_budget(key: &str, cfg: &KeyConfig) -> bool {
    is_budget(key) || is_gpu_key(key, cfg)
}

/// The unit a cash key counts in: `card-hours` for devices such as GPUs,
/// `core-hours`, `pod-hours`, `byte-hours` for memory and storage.
pub fn cash_unit(cash_key: &str) -> &'static str {
    let target = cash_target(cash_key).unwrap_or(cash_key);
    let resource = target
        .strip_prefix("requests.")
        .or_else(|| target.strip_prefix("limits."))
        .unwrap_or(target);
    if resource.contains('/') {
        "card-hours"
    } else if resource == "cpu" || resource.starts_with("cpu.") {
        "core-hours"
    } else if resource == "pods" {
        "pod-hours"
    } else if resource.starts_with("memory")
        || resource.starts_with("ephemeral-storage")
        || resource.starts_with("hugepages-")
    {
        "byte-hours"
    } else {
        "resource-hours"
    }
}

/// `cash/requests.nvidia.com/gpu` → `requests.nvidia.com/gpu`.
pub fn cash_target(key: &str) -> Option<&str> {
    key.strip_prefix(CASH_PREFIX)
}

pub fn is_model_name(m: &str) -> bool {
    !m.is_empty()
        && m.len() <= 63
        && m.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Kubernetes resource names: `cpu`, `hugepages-2Mi`, `nvidia.com/gpu`.
fn is_resource_name(r: &str) -> bool {
    let name_ok = |s: &str| {
        !s.is_empty()
            && s.len() <= 63
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
            && s.as_bytes()[0].is_ascii_alphanumeric()
            && s.as_bytes()[s.len() - 1].is_ascii_alphanumeric()
    };
    match r.split_once('/') {
        Some((domain, name)) => {
            !domain.is_empty()
                && domain.len() <= 253
                && domain.split('.').all(name_ok)
                && name_ok(name)
        }
        None => name_ok(r),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Key, KeyError> {
        Key::parse(s, &KeyConfig::default())
    }

    #[test]
    fn standard_keys() {
        let k = parse("requests.cpu").unwrap();
        assert_eq!(
            (k.class, k.base.as_str(), k.model),
            (Class::Requests, "requests.cpu", None)
        );
        assert_eq!(parse("cpu").unwrap().base, "cpu");
        assert_eq!(parse("memory").unwrap().resource, "memory");
        assert_eq!(parse("pods").unwrap().class, Class::Pods);
        assert_eq!(
            parse("limits.ephemeral-storage").unwrap().class,
            Class::Limits
        );
        let k = parse("requests.example.com/fpga").unwrap();
        assert_eq!(k.resource, "example.com/fpga");
    }

    #[test]
    fn every_key_has_a_name_people_read() {
        let cfg = KeyConfig::default();
        let name = |k: &str| display_name(k, &cfg);
        assert_eq!(name("requests.nvidia.com/gpu.A100"), "A100 GPUs");
        assert_eq!(name("requests.nvidia.com/gpu"), "GPUs");
        assert_eq!(name("cash/requests.nvidia.com/gpu"), "GPU card-hours");
        assert_eq!(name("cash/requests.nvidia.com/gpu.A100"), "A100 card-hours");
        assert_eq!(name("requests.cpu"), "CPU cores");
        assert_eq!(name("cpu"), "CPU cores");
        assert_eq!(name("limits.cpu"), "CPU cores (limit)");
        assert_eq!(name("limits.cpu.A4"), "CPU A4 cores (limit)");
        assert_eq!(name("requests.cpu.A4"), "CPU A4 cores");
        assert_eq!(name("cash/limits.cpu"), "CPU core-hours (limit)");
        assert_eq!(name("requests.memory"), "memory");
        assert_eq!(name("limits.memory.A4"), "memory A4 (limit)");
        assert_eq!(name("requests.ephemeral-storage"), "local storage");
        assert_eq!(name("pods"), "pods");
        assert_eq!(name("requests.example.com/fpga"), "example.com/fpga");
        assert_eq!(name("not a key"), "not a key");
    }

    #[test]
    fn stored_words_read_with_names() {
        let cfg = KeyConfig::default();
        let keys = [
            "requests.nvidia.com/gpu",
            "requests.nvidia.com/gpu.A100",
            "cash/requests.nvidia.com/gpu",
        ];
        assert_eq!(
            with_names(
                "waits for 4 × requests.nvidia.com/gpu.A100: 2 free, 6 needed",
                keys,
                &cfg
            ),
            "waits for 4 × A100 GPUs: 2 free, 6 needed"
        );
        assert_eq!(
            with_names(
                "cash/requests.nvidia.com/gpu of nlp runs out in 8.3 days (2026-12-07)",
                keys,
                &cfg
            ),
            "GPU card-hours of nlp runs out in 8.3 days (2026-12-07)"
        );
        // Not inside a longer word; a sentence's full stop is not the key's.
        assert_eq!(
            with_names(
                "xrequests.nvidia.com/gpu, requests.nvidia.com/gpu.",
                keys,
                &cfg
            ),
            "xrequests.nvidia.com/gpu, GPUs."
        );
        assert_eq!(with_names("café ünïcode", keys, &cfg), "café ünïcode");
    }

    #[test]
    fn gpus_and_budgets_come_first_and_pods_last() {
        let cfg = KeyConfig::default();
        let mut keys = vec![
            "pods",
            "requests.memory",
            "limits.cpu.A4",
            "requests.cpu",
            "cash/requests.nvidia.com/gpu",
            "requests.nvidia.com/gpu.A100",
            "requests.nvidia.com/gpu",
        ];
        keys.push("limits.cpu");
        keys.sort_by_key(|k| display_order(k, &cfg));
        assert_eq!(
            keys,
            [
                "requests.nvidia.com/gpu",
                "requests.nvidia.com/gpu.A100",
                "cash/requests.nvidia.com/gpu",
                "requests.cpu",
                "limits.cpu",
                "limits.cpu.A4",
                "requests.memory",
                "pods",
            ]
        );
    }

    #[test]
    fn gpus_and_budgets_are_told_from_the_rest() {
        let cfg = KeyConfig::default();
        for k in [
            "requests.nvidia.com/gpu",
            "requests.nvidia.com/gpu.A100",
            "limits.nvidia.com/gpu.T4",
            "requests.amd.com/gpu",
        ] {
            assert!(is_gpu_key(k, &cfg) && is_gpu_or_budget(k, &cfg), "{k}");
        }
        for k in [
            "cash/requests.nvidia.com/gpu",
            "cash/requests.nvidia.com/gpu.A100",
            "cash/requests.cpu",
        ] {
            assert!(
                is_budget(k) && !is_gpu_key(k, &cfg) && is_gpu_or_budget(k, &cfg),
                "{k}"
            );
        }
        for k in [
            "requests.cpu",
            "limits.cpu.A4",
            "cpu",
            "requests.memory",
            "pods",
            "requests.nvidia.com/mig-1g.5gb",
            "requests.example.com/fpga",
            "not a key",
        ] {
            assert!(!is_gpu_or_budget(k, &cfg), "{k}");
        }
    }

    #[test]
    fn model_keys() {
        let k = parse("requests.nvidia.com/gpu.A100").unwrap();
        assert_eq!(k.base, "requests.nvidia.com/gpu");
        assert_eq!(k.model.as_deref(), Some("A100"));
        assert_eq!(k.usage_key(), "requests.nvidia.com/gpu.A100");
        let k = parse("limits.cpu.A4").unwrap();
        assert_eq!(
            (k.base.as_str(), k.model.as_deref()),
            ("limits.cpu", Some("A4"))
        );
        let k = parse("limits.memory.A4").unwrap();
        assert_eq!(k.resource, "memory");
        let k = parse("cpu.A4").unwrap();
        assert_eq!(k.base, "cpu");
        // A MIG profile keeps its dot: not a GPU resource in the config.
        let k = parse("requests.nvidia.com/mig-1g.5gb").unwrap();
        assert_eq!(
            (k.resource.as_str(), k.model),
            ("nvidia.com/mig-1g.5gb", None)
        );
    }

    #[test]
    fn cash_keys() {
        let k = parse("cash/requests.nvidia.com/gpu").unwrap();
        assert!(k.cash);
        assert_eq!(k.usage_key(), "requests.nvidia.com/gpu");
        assert_eq!(cash_target("cash/limits.cpu"), Some("limits.cpu"));
        assert!(parse("cash/requests.nvidia.com/gpu.T4").unwrap().cash);
    }

    #[test]
    fn rejects_unknown() {
        for bad in [
            "foo",
            "requests.",
            "nvidia.com/gpu",
            "limits",
            "cash/",
            "requests.cpu..A4",
            "storage.A4",
            "requests.ephemeral-storage.X",
        ] {
            assert!(parse(bad).is_err(), "{bad} should be rejected");
        }
        assert!(matches!(
            parse("requests.cpu.A 4"),
            Err(KeyError::Unknown(_) | KeyError::BadModel { .. })
        ));
    }
}
