//! Whose share of a queue an entry counts against
//! (`queueing.maxPerSubmitter`, docs/queueing.md §8).
//!
//! The API server names who created a workload (`userInfo.username`), but
//! that name is not always one tenant. A tenant may run as many service
//! accounts as it likes in its namespace, so counting them apart would
//! give it one share per account; and a controller's account (the
//! CronJob controller, `system:serviceaccount:kube-system:cronjob-controller`,
//! or an operator creating workloads in every tenant's namespace) acts for
//! whichever namespace it creates in, so counting it as itself would make
//! every tenant's cron jobs share one allowance, and let one team's fill it
//! for all. So:
//!
//! - a person (any username outside the reserved `system:` prefix) counts
//!   as themselves, in whatever namespace they create;
//! - every `system:` identity — service accounts of the workload's own
//!   namespace, service accounts creating in another namespace (controllers,
//!   operators), kube-system's controllers, nodes, `system:anonymous` — and
//!   a review with no username count as the workload's namespace.
//!
//! A service account therefore always counts as the namespace it creates
//! in: its own namespace's accounts are its tenant's, and another
//! namespace's act for the namespace they create in. The prefix is
//! reserved by Kubernetes for identities it issues (authenticators may not
//! hand it to people), so a person cannot pass for a namespace. Derived
//! from what the entry stores (`submittedBy`, the reference's namespace),
//! so entries written before this rule count by it too.

use crate::workload::WorkloadRef;
use std::fmt;

/// Usernames Kubernetes reserves for the identities it issues itself.
const SYSTEM_PREFIX: &str = "system:";

/// What one allowance of a queue is counted by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Share<'a> {
    /// A person, by username.
    Person(&'a str),
    /// A namespace: its service accounts, and the controllers creating in it.
    Namespace(&'a str),
}

/// The share of a workload `workload_ref` (`group/Kind/namespace/name`)
/// created by `username` (as the entry keeps it: `submitters::submitter`).
pub fn of<'a>(username: Option<&'a str>, workload_ref: &'a str) -> Share<'a> {
    match username {
        Some(u) if !u.is_empty() && !u.starts_with(SYSTEM_PREFIX) => Share::Person(u),
        _ => Share::Namespace(namespace(workload_ref)),
    }
}

/// `of` for an entry, owned (a person's share `(true, username)`, a
/// namespace's `(false, namespace)`): a key to count a queue's entries
/// by while the queue changes.
pub(crate) fn key(e: &crate::object::queue::Queued) -> (bool, String) {
    match of(e.submitted_by.as_deref(), &e.workload_ref) {
        Share::Person(u) => (true, u.to_string()),
        Share::Namespace(ns) => (false, ns.to_string()),
    }
}

/// The namespace part of a reference, also of one too long to parse
/// (never of a stored entry: the webhook writes parsed references).
fn namespace(workload_ref: &str) -> &str {
    match WorkloadRef::parse(workload_ref) {
        Some(r) => r.namespace,
        None => workload_ref.split('/').nth(2).unwrap_or(""),
    }
}

impl fmt::Display for Share<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Share::Person(u) => write!(f, "{u:?}"),
            Share::Namespace(ns) => write!(
                f,
                "namespace {ns:?} (its service accounts and the controllers creating in it)"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const JOB_IN_TEAM_A: &str = "batch/Job/team-a/train";

    #[test]
    fn people_count_as_themselves_wherever_they_create() {
        assert_eq!(of(Some("alice"), JOB_IN_TEAM_A), Share::Person("alice"));
        assert_eq!(
            of(Some("alice"), "batch/Job/team-b/x"),
            Share::Person("alice")
        );
        // A person named like a namespace is still a person.
        assert_ne!(
            of(Some("team-a"), JOB_IN_TEAM_A),
            Share::Namespace("team-a")
        );
        // Prefixes of other authenticators are people's names.
        assert_eq!(
            of(Some("oidc:bob@example.com"), JOB_IN_TEAM_A),
            Share::Person("oidc:bob@example.com")
        );
    }

    #[test]
    fn a_namespaces_service_accounts_count_as_the_namespace() {
        for sa in [
            "system:serviceaccount:team-a:default",
            "system:serviceaccount:team-a:runner-1",
            "system:serviceaccount:team-a:runner-2",
        ] {
            assert_eq!(
                of(Some(sa), JOB_IN_TEAM_A),
                Share::Namespace("team-a"),
                "{sa}"
            );
        }
    }

    #[test]
    fn controllers_count_by_the_namespace_they_create_in() {
        let cron = "system:serviceaccount:kube-system:cronjob-controller";
        assert_eq!(of(Some(cron), JOB_IN_TEAM_A), Share::Namespace("team-a"));
        assert_eq!(
            of(Some(cron), "batch/Job/team-b/nightly-29000"),
            Share::Namespace("team-b")
        );
        // An operator's account from its own namespace, in a tenant's.
        assert_eq!(
            of(
                Some("system:serviceaccount:kubeflow:training-operator"),
                "kubeflow.org/PyTorchJob/team-b/p"
            ),
            Share::Namespace("team-b")
        );
        // A tenant's account creating elsewhere counts there, not at home.
        assert_eq!(
            of(
                Some("system:serviceaccount:team-a:ci"),
                "batch/Job/team-b/x"
            ),
            Share::Namespace("team-b")
        );
        for u in [
            "system:kube-controller-manager",
            "system:node:gpu-07",
            "system:anonymous",
            "system:",
        ] {
            assert_eq!(
                of(Some(u), JOB_IN_TEAM_A),
                Share::Namespace("team-a"),
                "{u}"
            );
        }
    }

    #[test]
    fn no_username_counts_as_the_namespace() {
        assert_eq!(of(None, JOB_IN_TEAM_A), Share::Namespace("team-a"));
        assert_eq!(of(Some(""), JOB_IN_TEAM_A), Share::Namespace("team-a"));
        // A reference that does not parse still yields its namespace part.
        let long = format!("batch/Job/team-a/{}", "n".repeat(300));
        assert_eq!(of(None, &long), Share::Namespace("team-a"));
        assert_eq!(of(None, "garbage"), Share::Namespace(""));
    }

    #[test]
    fn a_submitter_cut_to_its_stored_length_keeps_its_share() {
        // `submittedBy` keeps 128 bytes; the prefix decides, not the rest.
        let sa = format!("system:serviceaccount:team-a:{}", "r".repeat(200));
        let kept = crate::submitters::submitter(&sa).unwrap();
        assert_eq!(kept.len(), crate::submitters::MAX_SUBMITTER);
        assert_eq!(of(Some(&kept), JOB_IN_TEAM_A), Share::Namespace("team-a"));
    }

    #[test]
    fn shares_read_as_whom_they_count() {
        assert_eq!(Share::Person("mallory").to_string(), "\"mallory\"");
        assert_eq!(
            Share::Namespace("team-a").to_string(),
            "namespace \"team-a\" (its service accounts and the controllers creating in it)"
        );
    }
}
