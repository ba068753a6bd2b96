//! The shape of the quota tree: each quota's parent, and the walks over it
//! (a quota's line up to its root, children, lowest common ancestor).
//!
//! Parents are immutable and must exist when a quota is created, so a cycle
//! or a missing parent needs bad data (a cluster object written while the
//! webhook was away, a partial read). Every walk here is bounded and says
//! how it ended rather than trusting the data: one place, so no caller
//! loops forever on a corrupt tree.

use crate::Quota;
use std::collections::{BTreeMap, BTreeSet};

/// Quotas by name and their parents ("" for a root). It may hold only part
/// of the tree: a walk that reaches a name it does not hold says so.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Forest {
    parent: BTreeMap<String, String>,
}

/// A walk from a quota up its parents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Line<'a> {
    /// The quota, its parent, its parent's parent…; each name once.
    pub names: Vec<&'a str>,
    /// Why the walk stopped after the last name.
    pub end: End<'a>,
}

/// How a walk up the parents ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End<'a> {
    /// The last name is a root.
    Root,
    /// The last name is not in the forest: its parent is not known.
    Unknown,
    /// The last name's parent is already on the line: the parents loop.
    Cycle(&'a str),
}

impl<'a> Line<'a> {
    /// The ancestors' names as one string, with the repeated name at the
    /// end for a cycle: `a → b → c → a`.
    pub fn describe(&self) -> String {
        let mut names = self.names.clone();
        if let End::Cycle(again) = self.end {
            names.push(again);
        }
        names.join(" → ")
    }
}

impl Forest {
    pub fn new<N: Into<String>, P: Into<String>>(
        pairs: impl IntoIterator<Item = (N, P)>,
    ) -> Forest {
        Forest {
            parent: pairs
                .into_iter()
                .map(|(n, p)| (n.into(), p.into()))
                .collect(),
        }
    }

    pub fn from_quotas<'q>(quotas: impl IntoIterator<Item = &'q Quota>) -> Forest {
        Forest::new(
            quotas
                .into_iter()
                .map(|q| (q.name().to_string(), q.spec.parent.clone())),
        )
    }

    /// Record `name`'s parent ("" for a root).
    pub fn insert(&mut self, name: impl Into<String>, parent: impl Into<String>) {
        self.parent.insert(name.into(), parent.into());
    }

    pub fn contains(&self, name: &str) -> bool {
        self.parent.contains_key(name)
    }

    /// The parent of a quota; None for a root or a name not in the forest.
    pub fn parent(&self, name: &str) -> Option<&str> {
        self.parent
            .get(name)
            .map(String::as_str)
            .filter(|p| !p.is_empty())
    }

    /// Every name, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.parent.keys().map(String::as_str)
    }

    pub fn len(&self) -> usize {
        self.parent.len()
    }

    pub fn is_empty(&self) -> bool {
        self.parent.is_empty()
    }

    /// The children of `name`, in order.
    pub fn children<'s>(&'s self, name: &'s str) -> impl Iterator<Item = &'s str> + 's {
        self.parent
            .iter()
            .filter(move |(_, p)| !name.is_empty() && p.as_str() == name)
            .map(|(c, _)| c.as_str())
    }

    /// The walk from `name` up its parents: it ends at a root, at a name
    /// the forest does not hold, or where the parents loop.
    pub fn line<'s>(&'s self, name: &'s str) -> Line<'s> {
        let mut names = vec![name];
        let mut seen = BTreeSet::from([name]);
        loop {
            let at = names[names.len() - 1];
            let Some(parent) = self.parent.get(at) else {
                return Line {
                    names,
                    end: End::Unknown,
                };
            };
            let parent = parent.as_str();
            if parent.is_empty() {
                return Line {
                    names,
                    end: End::Root,
                };
            }
            if !seen.insert(parent) {
                return Line {
                    names,
                    end: End::Cycle(parent),
                };
            }
            names.push(parent);
        }
    }

    /// The first name on `name`'s line whose parent the forest does not
    /// know: what to read next to complete the line. None when the line
    /// ends at a root or in a cycle.
    pub fn next_unknown<'s>(&'s self, name: &'s str) -> Option<&'s str> {
        let line = self.line(name);
        (line.end == End::Unknown).then(|| line.names[line.names.len() - 1])
    }

    /// Whether `ancestor` is `name` or above it.
    pub fn is_ancestor(&self, ancestor: &str, name: &str) -> bool {
        self.line(name).names.contains(&ancestor)
    }

    /// The lowest quota that is `a` or above it and `b` or above it; None
    /// when their lines do not meet (different trees, or a line that stops
    /// at a name the forest does not hold).
    pub fn lca<'s>(&'s self, a: &'s str, b: &'s str) -> Option<&'s str> {
        let above_b: BTreeSet<&str> = self.line(b).names.into_iter().collect();
        self.line(a).names.into_iter().find(|n| above_b.contains(n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn forest(pairs: &[(&str, &str)]) -> Forest {
        Forest::new(pairs.iter().copied())
    }

    #[test]
    fn a_line_climbs_to_its_root() {
        let f = forest(&[("ai", ""), ("nlp", "ai"), ("llm", "nlp"), ("cv", "ai")]);
        let line = f.line("llm");
        assert_eq!(line.names, ["llm", "nlp", "ai"]);
        assert_eq!(line.end, End::Root);
        assert_eq!(f.parent("ai"), None);
        assert_eq!(f.parent("llm"), Some("nlp"));
        assert_eq!(f.children("ai").collect::<Vec<_>>(), ["cv", "nlp"]);
        assert_eq!(f.children("").count(), 0, "\"\" is no quota's parent");
        assert_eq!(f.lca("llm", "cv"), Some("ai"));
        assert_eq!(f.lca("llm", "nlp"), Some("nlp"));
        assert!(f.is_ancestor("ai", "llm") && !f.is_ancestor("cv", "llm"));
    }

    #[test]
    fn a_line_stops_where_the_forest_does_not_know_the_parent() {
        let mut f = forest(&[("llm", "nlp")]);
        let line = f.line("llm");
        assert_eq!((line.names, line.end), (vec!["llm", "nlp"], End::Unknown));
        assert_eq!(f.next_unknown("llm"), Some("nlp"));
        f.insert("nlp", "ai");
        f.insert("ai", "");
        assert_eq!(f.next_unknown("llm"), None);
        assert_eq!(f.lca("llm", "other"), None);
    }

    #[test]
    fn a_cycle_is_detected_and_described() {
        let f = forest(&[("x", "a"), ("a", "b"), ("b", "c"), ("c", "a")]);
        let line = f.line("x");
        assert_eq!(line.names, ["x", "a", "b", "c"]);
        assert_eq!(line.end, End::Cycle("a"));
        assert_eq!(line.describe(), "x → a → b → c → a");
        assert_eq!(f.next_unknown("x"), None);
        let own = forest(&[("a", "a")]).line("a").describe();
        assert_eq!(own, "a → a");
    }

    /// Any parent map over `n` names (cycles allowed; index `n` is a root's
    /// "" and `n + 1` a name the forest does not hold).
    fn parent_maps() -> impl Strategy<Value = Vec<usize>> {
        (1usize..12).prop_flat_map(|n| proptest::collection::vec(0..n + 2, n))
    }

    fn build(parents: &[usize]) -> Forest {
        let n = parents.len();
        Forest::new(parents.iter().enumerate().map(|(i, &p)| {
            let parent = match p {
                p if p == n => String::new(),
                p if p == n + 1 => "gone".to_string(),
                p => format!("q{p}"),
            };
            (format!("q{i}"), parent)
        }))
    }

    /// A tree: every name's parent comes before it (or it is a root).
    fn trees() -> impl Strategy<Value = Vec<usize>> {
        (1usize..12).prop_flat_map(|n| {
            (0..n)
                .map(|i| (0..=i).prop_map(move |p| if p == i { n } else { p }))
                .collect::<Vec<_>>()
        })
    }

    proptest! {
        #[test]
        fn ancestors_never_repeat_and_a_cycle_is_detected(parents in parent_maps()) {
            let f = build(&parents);
            let n = parents.len();
            for i in 0..n {
                let name = format!("q{i}");
                let line = f.line(&name);
                let unique: BTreeSet<&str> = line.names.iter().copied().collect();
                prop_assert_eq!(unique.len(), line.names.len(), "{:?}", line.names);
                // Reference: follow the parents n + 1 times by index; still
                // on a name means the parents loop.
                let mut at = Some(i);
                for _ in 0..=n {
                    at = at.and_then(|a| (parents[a] < n).then_some(parents[a]));
                }
                let cycles = at.is_some();
                prop_assert_eq!(matches!(line.end, End::Cycle(_)), cycles);
                if let End::Cycle(again) = line.end {
                    prop_assert!(line.names.contains(&again));
                }
                for pair in line.names.windows(2) {
                    prop_assert_eq!(f.parent(pair[0]), Some(pair[1]));
                }
            }
        }

        #[test]
        fn the_lca_is_an_ancestor_of_both_and_the_lowest(
            parents in trees(),
            a in 0usize..12,
            b in 0usize..12,
        ) {
            let f = build(&parents);
            let n = parents.len();
            let (a, b) = (format!("q{}", a % n), format!("q{}", b % n));
            let lines = (f.line(&a), f.line(&b));
            prop_assert_eq!(lines.0.end, End::Root);
            match f.lca(&a, &b) {
                Some(l) => {
                    prop_assert!(f.is_ancestor(l, &a) && f.is_ancestor(l, &b));
                    // No child of the LCA is above both.
                    for c in f.children(l) {
                        prop_assert!(!(f.is_ancestor(c, &a) && f.is_ancestor(c, &b)));
                    }
                }
                None => {
                    // Different trees: their roots differ.
                    prop_assert_ne!(lines.0.names.last(), lines.1.names.last());
                }
            }
        }
    }
}
