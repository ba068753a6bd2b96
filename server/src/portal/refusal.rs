//! A refusal as the portal's forms say it: keys by name
//! (`quota::keys::display_name`), amounts in their units, and what the
//! person can do about it — lower what they asked to what is left, or ask
//! whoever can give more (the owners of the quota above the one that is
//! short; an admin at a root). The JSON API and the webhook keep the
//! service's message, raw keys and all: scripts and `kubectl` read it.
//!
//! [`said`] is pure; [`words`] reads the parents it names.

use crate::edge::AppState;
use crate::service::ServiceError;
use quota::admission::{Denial, Shortfall};
use quota::tree::TreeError;
use quota::KeyConfig;
use std::collections::BTreeMap;

/// `e` in words, for a form: `parents` names each short quota's parent
/// (none: a root, whose hard an admin raises); `keys` are the keys in play
/// (the form's), named wherever a message the service wrote names them.
pub fn said(
    e: &ServiceError,
    parents: &BTreeMap<String, String>,
    keys: &[&str],
    cfg: &KeyConfig,
) -> String {
    let name = |k: &str| quota::keys::display_name(k, cfg);
    let names = |ks: &[String]| ks.iter().map(|k| name(k)).collect::<Vec<_>>().join(", ");
    match e {
        ServiceError::Denied(Denial::Short(s)) => shortfalls(s, parents, cfg),
        ServiceError::Tree(TreeError::DoesNotFit(s, child)) => {
            format!("{child} does not fit: {}", shortfalls(s, parents, cfg))
        }
        ServiceError::Tree(TreeError::MissingKeys {
            child,
            parent,
            keys,
        }) => format!(
            "{child} needs every key {parent} has: add {} (0 if it needs none)",
            names(keys)
        ),
        ServiceError::Tree(TreeError::ChildrenLackKeys {
            name: quota,
            keys,
            children,
        }) => format!(
            "{quota} cannot take {} while its children {} lack it: add it to them first \
             (0 will do), then to {quota}",
            names(keys),
            children.join(", ")
        ),
        ServiceError::Denied(Denial::CashExhausted(c)) => format!(
            "{} of {} is spent ({} of {}): {}",
            name(&c.key),
            c.quota,
            quota::readable::amount(&c.key, c.used),
            quota::readable::amount(&c.key, c.hard),
            match parents.get(&c.quota) {
                Some(p) => format!("ask {p}'s owners for a top-up, or wait for its next period"),
                None => "ask an admin for a top-up, or wait for its next period".to_string(),
            }
        ),
        other => quota::keys::with_names(&other.to_string(), keys.iter().copied(), cfg),
    }
}

/// Each shortfall in words, one quota's after another's: `A100 GPUs: 7
/// asked, 5 left of 32 in nlp: ask research's owners for more, or lower it
/// to 5`.
fn shortfalls(s: &[Shortfall], parents: &BTreeMap<String, String>, cfg: &KeyConfig) -> String {
    s.iter()
        .map(|x| {
            let show = |q: quota::Quantity| quota::readable::amount(&x.key, q);
            let left = x.left.max(quota::Quantity::ZERO);
            let who = match parents.get(&x.quota) {
                Some(p) => format!("{p}'s owners"),
                None => "an admin".to_string(),
            };
            format!(
                "{}: {} asked, {} left of {} in {}: ask {who} for more, or lower it to {}",
                quota::keys::display_name(&x.key, cfg),
                show(x.asked),
                show(left),
                show(x.hard),
                x.quota,
                show(left)
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The quotas a refusal says are short.
fn short_quotas(e: &ServiceError) -> Vec<&str> {
    match e {
        ServiceError::Denied(Denial::Short(s))
        | ServiceError::Tree(TreeError::DoesNotFit(s, _)) => {
            s.iter().map(|x| x.quota.as_str()).collect()
        }
        ServiceError::Denied(Denial::CashExhausted(c)) => vec![c.quota.as_str()],
        _ => Vec::new(),
    }
}

/// `said`, with the parents of the quotas it names read from the service.
pub async fn words(app: &AppState, e: &ServiceError, keys: &[&str]) -> String {
    let mut parents = BTreeMap::new();
    for q in short_quotas(e) {
        if let Ok(s) = app.service.get(q).await {
            if !s.quota.spec.parent.is_empty() {
                parents.insert(q.to_string(), s.quota.spec.parent.clone());
            }
        }
    }
    said(e, &parents, keys, &app.service.keys)
}

#[cfg(test)]
mod tests {
    use super::*;
    use quota::Quantity;

    fn short(quota: &str, key: &str, asked: i64, left: i64, hard: i64) -> Shortfall {
        Shortfall {
            quota: quota.into(),
            key: key.into(),
            asked: Quantity::from_units(asked),
            left: Quantity::from_units(left),
            hard: Quantity::from_units(hard),
            borrowing: None,
        }
    }

    #[test]
    fn a_refusal_names_the_key_and_says_what_to_do() {
        let cfg = KeyConfig::default();
        let parents: BTreeMap<String, String> = [("nlp".into(), "research".into())].into();
        let e = ServiceError::Tree(TreeError::DoesNotFit(
            vec![short("nlp", "requests.nvidia.com/gpu.A100", 7, 5, 32)],
            "nlp-eval".into(),
        ));
        assert_eq!(
            said(&e, &parents, &[], &cfg),
            "nlp-eval does not fit: A100 GPUs: 7 asked, 5 left of 32 in nlp: ask research's \
             owners for more, or lower it to 5"
        );
        // A root's hard is an admin's to raise; a budget reads in its unit.
        let e = ServiceError::Denied(Denial::Short(vec![short(
            "acme",
            "cash/requests.nvidia.com/gpu",
            1200,
            -3,
            1000,
        )]));
        assert_eq!(
            said(&e, &parents, &[], &cfg),
            "GPU card-hours: 1,200 card-hours asked, 0 card-hours left of 1,000 card-hours in \
             acme: ask an admin for more, or lower it to 0 card-hours"
        );
        let e = ServiceError::Tree(TreeError::MissingKeys {
            child: "cv".into(),
            parent: "ai".into(),
            keys: vec!["requests.nvidia.com/gpu".into(), "pods".into()],
        });
        assert_eq!(
            said(&e, &parents, &[], &cfg),
            "cv needs every key ai has: add GPUs, pods (0 if it needs none)"
        );
        // Any other message: the keys in play by name.
        let e = ServiceError::BadRequest("requests.cpu: hard must not be negative".into());
        assert_eq!(
            said(&e, &parents, &["requests.cpu"], &cfg),
            "CPU cores: hard must not be negative"
        );
    }
}
