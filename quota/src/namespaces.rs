//! Which namespaces bizrq governs: one rule for the webhook and the
//! controller. The webhook configuration's `namespaceSelector` keeps the
//! excluded namespaces' writes away from bizrq, but the controller watches
//! the whole cluster, and a hand-edited configuration may still send them:
//! both ask `Namespaces::governs`, so what is never reviewed is never charged.

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// The namespaces excluded by default, as in `deploy/base/webhook.yaml`'s
/// `namespaceSelector`: the system's own and bizrq's, so a bizrq outage
/// never blocks the components that repair it.
pub const DEFAULT_EXCLUDED: [&str; 2] = ["kube-system", "bizrq-system"];

/// The longest namespace name Kubernetes accepts (a DNS-1123 label).
const MAX_NAME: usize = 63;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Namespaces {
    excluded: BTreeSet<String>,
}

impl Default for Namespaces {
    fn default() -> Self {
        Namespaces {
            excluded: DEFAULT_EXCLUDED.iter().map(|s| s.to_string()).collect(),
        }
    }
}

impl Namespaces {
    /// Everything governed except `names`; each must be a namespace name.
    pub fn excluding<S: AsRef<str>>(
        names: impl IntoIterator<Item = S>,
    ) -> Result<Namespaces, String> {
        let mut excluded = BTreeSet::new();
        for name in names {
            let name = name.as_ref();
            check_name(name)?;
            excluded.insert(name.to_string());
        }
        Ok(Namespaces { excluded })
    }

    /// A comma-separated list ("kube-system,bizrq-system"); blanks around
    /// names are ignored, and an empty list governs every namespace.
    pub fn parse(list: &str) -> Result<Namespaces, String> {
        Namespaces::excluding(list.split(',').map(str::trim).filter(|s| !s.is_empty()))
    }

    /// Whether workloads in `namespace` are charged to quotas.
    pub fn governs(&self, namespace: &str) -> bool {
        !self.excluded.contains(namespace)
    }

    /// The excluded namespaces, in order.
    pub fn excluded(&self) -> impl Iterator<Item = &str> {
        self.excluded.iter().map(String::as_str)
    }
}

/// A namespace name is a DNS-1123 label: a name that could never be a
/// namespace is a typo, and excluding it would silently exclude nothing.
fn check_name(name: &str) -> Result<(), String> {
    let bytes = name.as_bytes();
    let ok_char = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-';
    let alnum = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    if bytes.is_empty()
        || bytes.len() > MAX_NAME
        || !bytes.iter().all(ok_char)
        || !alnum(bytes.first())
        || !alnum(bytes.last())
    {
        let shown: String = name.chars().take(MAX_NAME + 1).collect();
        return Err(format!(
            "{shown:?} is not a namespace name (lowercase letters, digits and '-', \
             at most {MAX_NAME}, starting and ending with a letter or digit)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_governs_everything_but_the_system_and_bizrq() {
        let n = Namespaces::default();
        assert!(!n.governs("kube-system"));
        assert!(!n.governs("bizrq-system"));
        assert!(n.governs("nlp"));
        assert!(n.governs("default"));
        assert!(n.governs("kube-public"));
    }

    #[test]
    fn a_list_is_read_with_blanks_ignored() {
        let n = Namespaces::parse(" kube-system, gpu-ops ,,").unwrap();
        assert_eq!(n.excluded().collect::<Vec<_>>(), ["gpu-ops", "kube-system"]);
        assert!(!n.governs("gpu-ops"));
        assert!(n.governs("bizrq-system"));
    }

    #[test]
    fn an_empty_list_governs_every_namespace() {
        let n = Namespaces::parse("").unwrap();
        assert!(n.governs("kube-system"));
        assert_eq!(n.excluded().count(), 0);
    }

    #[test]
    fn a_name_that_cannot_be_a_namespace_is_refused() {
        for bad in [
            "Kube-System",
            "kube_system",
            "-ops",
            "ops-",
            "a/b",
            &"x".repeat(64),
        ] {
            let e = Namespaces::parse(bad).unwrap_err();
            assert!(e.contains("is not a namespace name"), "{bad}: {e}");
        }
        assert!(Namespaces::parse(&"x".repeat(63)).is_ok());
    }
}
