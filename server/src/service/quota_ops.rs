//! Quota changes made by a person: authorised with `crate::authz`, made
//! through the service (which holds every tree rule), then audited. The JSON
//! API and the portal's forms both come through here, so who may change what
//! and what the audit log records live in one place.

use super::audit::Audited;
use crate::authz::{self, Principal, Tree};
use crate::service::audit::quota_json;
use crate::service::forest::Forest;
use crate::service::{Persist, ServiceError};
use crate::store::audit::action;
use quota::{Quota, QuotaSpec};

/// Why a change was not made.
#[derive(Debug, thiserror::Error)]
pub enum ChangeError {
    /// The caller may see the quota but not make this change (403).
    #[error("{0}")]
    Forbidden(String),
    /// Refused by the service: not found (also for quotas the caller may
    /// not see), a broken tree rule, a stale version…
    #[error(transparent)]
    Service(#[from] ServiceError),
}

/// The tree's shape, for deciding what a non-admin may do (admins need
/// none): the part `p` may see, which holds every quota `p` has a role on
/// and the lineage from each up to the binding that gives it, all that
/// `authz` looks at.
pub async fn tree_for(app: &Audited, p: &Principal) -> Result<Tree, ServiceError> {
    if p.is_admin {
        return Ok(Tree::default());
    }
    Ok(Tree::from_quotas(&visible_quotas(&app.service, p).await?))
}

/// The quotas `p` may see, read as such: the whole forest for an admin,
/// else the subtrees under `p`'s bindings (a role on a quota is a role on
/// its descendants, `authz::role_on`), so a member's page costs what the
/// member can see, not what the forest holds. Every visible quota's
/// descendants are in the answer, so its subtree usage and the roles on it
/// are the same as from the whole forest.
pub async fn visible_quotas(
    service: &super::Service,
    p: &Principal,
) -> Result<Vec<Quota>, ServiceError> {
    if p.is_admin {
        // The forest the service keeps: only what changed since is read.
        return Ok(service.forest().await?.quotas.clone());
    }
    let roots: Vec<String> = p.bindings.iter().map(|b| b.quota.clone()).collect();
    if roots.is_empty() {
        return Ok(Vec::new());
    }
    service.subtrees(&roots).await
}

/// `visible_quotas` with each one's subtree usage. An admin's is the
/// forest the service keeps (`Service::forest`: only what was written
/// since the last request is read again); a member's is read as its
/// subtrees.
pub async fn visible_forest(
    service: &super::Service,
    p: &Principal,
) -> Result<std::sync::Arc<Forest>, ServiceError> {
    if p.is_admin {
        return service.forest().await;
    }
    Ok(std::sync::Arc::new(Forest::of(
        visible_quotas(service, p).await?,
    )))
}

/// `visible_forest` for a heavy request: a member's forest (each quota's
/// subtree usage, CPU work in the quotas it sees) is computed on the render
/// threads under the request's place, not on the runtime's.
pub async fn visible_forest_on(
    service: &super::Service,
    p: &Principal,
    place: &crate::heavy::Permit,
) -> Result<std::sync::Arc<Forest>, ServiceError> {
    if p.is_admin {
        return service.forest().await;
    }
    let quotas = visible_quotas(service, p).await?;
    let forest = place
        .work(move || Forest::of(quotas))
        .await
        .map_err(|e| ServiceError::Internal(e.to_string()))?;
    Ok(std::sync::Arc::new(forest))
}

/// The quotas whose records (alerts, audit entries) `p` may read: None for
/// admins (all, also of quotas since deleted), else those it may see.
pub async fn records_scope(
    service: &super::Service,
    p: &Principal,
) -> Result<Option<Vec<String>>, ServiceError> {
    if p.is_admin {
        return Ok(None);
    }
    let visible = visible_quotas(service, p).await?;
    Ok(Some(visible.iter().map(|q| q.name().to_string()).collect()))
}

/// The answer for a quota the caller may not see: the same as for one that
/// does not exist, so existence does not leak.
pub fn not_found(name: &str) -> ServiceError {
    ServiceError::NotFound(format!("bizrq {name} not found"))
}

/// Not found unless `p` may see `name`.
pub fn require_view(p: &Principal, name: &str, tree: &Tree) -> Result<(), ChangeError> {
    if authz::can_view(p, name, tree) {
        Ok(())
    } else {
        Err(not_found(name).into())
    }
}

/// Creating a child of X needs ownership of X or an ancestor (roots:
/// admins). Refused before anything about X is looked at.
pub fn require_manage_children(
    p: &Principal,
    parent: &str,
    tree: &Tree,
) -> Result<(), ChangeError> {
    if authz::can_manage_children(p, parent, tree) {
        return Ok(());
    }
    Err(ChangeError::Forbidden(if parent.is_empty() {
        "only admins may create root quotas".to_string()
    } else {
        format!("you may not create children of bizrq {parent}: that takes an owner of it or of an ancestor")
    }))
}

/// Changing or deleting X needs sight of X and ownership of an ancestor of
/// X: an owner of X may not raise its own hard.
pub fn require_edit(p: &Principal, name: &str, tree: &Tree) -> Result<(), ChangeError> {
    require_view(p, name, tree)?;
    if authz::can_edit_hard(p, name, tree) {
        Ok(())
    } else {
        Err(ChangeError::Forbidden(format!(
            "you may not change or delete bizrq {name}: that takes an owner of its parent (or an ancestor) or an admin"
        )))
    }
}

/// Create a quota under `spec.parent`. `tree`: `tree_for(app, p)`.
pub async fn create(
    app: &Audited,
    p: &Principal,
    tree: &Tree,
    name: &str,
    spec: QuotaSpec,
    dry: bool,
) -> Result<Quota, ChangeError> {
    require_manage_children(p, &spec.parent, tree)?;
    let q = app
        .service
        .create_quota(name, spec, Persist::Here, "", dry)
        .await?;
    if !dry {
        let after = Some(quota_json(&q));
        app.audit(p, action::QUOTA_CREATE, q.name(), None, after, "")
            .await;
    }
    Ok(q)
}

/// Replace a quota's spec; with `version`, only if it is still current.
pub async fn update(
    app: &Audited,
    p: &Principal,
    tree: &Tree,
    name: &str,
    spec: QuotaSpec,
    version: Option<i64>,
    dry: bool,
) -> Result<Quota, ChangeError> {
    require_edit(p, name, tree)?;
    let before = app.service.get(name).await?.quota;
    let q = app
        .service
        .update_quota(name, spec, version, Persist::Here, dry)
        .await?;
    if !dry {
        let (before, after) = (Some(quota_json(&before)), Some(quota_json(&q)));
        app.audit(p, action::QUOTA_UPDATE, name, before, after, "")
            .await;
    }
    Ok(q)
}

/// Delete a leaf; with `version`, only if it is still current. Returns the
/// quota as it was.
pub async fn delete(
    app: &Audited,
    p: &Principal,
    tree: &Tree,
    name: &str,
    version: Option<i64>,
    dry: bool,
) -> Result<Quota, ChangeError> {
    require_edit(p, name, tree)?;
    let before = app.service.get(name).await?.quota;
    app.service
        .delete_quota(name, version, Persist::Here, dry)
        .await?;
    if !dry {
        let was = Some(quota_json(&before));
        app.audit(p, action::QUOTA_DELETE, name, was, None, "")
            .await;
    }
    Ok(before)
}
