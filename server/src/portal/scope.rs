//! What a page about one quota may read: the quota's subtree and, for a
//! member, the line above it, and only if the viewer may see the quota.

use super::auth::Viewer;
use super::PageError;
use crate::authz::{self, Tree};
use crate::edge::AppState;
use crate::service::ServiceError;
use quota::Quota;
use std::collections::BTreeSet;

/// What a page about `name` reads: `name` with all its descendants (its
/// usage, its children) and, for a member, its line above it (every right
/// is decided on the line: a binding on it or on an ancestor); and their
/// tree, if the viewer may see `name` (else 404, as for a quota that does
/// not exist). Never the rest of what a member may see: a member bound at
/// a forest's root who opens a leaf reads the leaf and its line, not the
/// forest.
pub async fn visible_tree(
    app: &AppState,
    viewer: &Viewer,
    name: &str,
) -> Result<(Vec<Quota>, Tree), PageError> {
    let mut all = app.service.subtrees(&[name.to_string()]).await?;
    if !viewer.principal.is_admin {
        // An admin may see everything: the line is not needed.
        let line = line_above(app, &all, name).await?;
        all.extend(line);
    }
    let tree = Tree::from_quotas(&all);
    if !authz::can_view(&viewer.principal, name, &tree) || !tree.contains(name) {
        return Err(PageError::NotFound(format!("bizrq {name} not found")));
    }
    Ok((all, tree))
}

/// The quotas above `name` (found in `subtree`), nearest first, read one
/// by one: at most the tree's depth (`quota::tree::MAX_DEPTH`) in a valid
/// store; a cycle or a missing parent ends it, and so does a line longer
/// than that (a hand-edited store).
async fn line_above(
    app: &AppState,
    subtree: &[Quota],
    name: &str,
) -> Result<Vec<Quota>, PageError> {
    let mut seen: BTreeSet<String> = subtree.iter().map(|q| q.name().to_string()).collect();
    let mut next = subtree
        .iter()
        .find(|q| q.name() == name)
        .map(|q| q.spec.parent.clone())
        .unwrap_or_default();
    let mut out = Vec::new();
    while !next.is_empty() && out.len() < quota::tree::MAX_DEPTH && seen.insert(next.clone()) {
        let s = match app.service.get_for_view(&next).await {
            Ok(s) => s,
            Err(ServiceError::NotFound(_)) => break,
            Err(e) => return Err(e.into()),
        };
        next = s.quota.spec.parent.clone();
        out.push(s.quota);
    }
    Ok(out)
}
