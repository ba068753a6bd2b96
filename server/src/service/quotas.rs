//! Quotas made, changed and deleted through the service, each with its
//! carve-out in its parent.
//!
//! A parent's status holds one carve-out per child (`status.children`);
//! `parent.used = selfUsed + Σ carve-outs`, and a child's create or raise
//! must fit in `hard − used`. The invariant: **a carve-out is never below
//! what its stored child holds** (unless the child was written past the
//! webhook, which the repair then records as over quota). A child write
//! the webhook allows may still never be stored — a finalizer keeps a
//! deleted child, a later webhook refuses, two writes race on one
//! resourceVersion, a write is lost — so nothing that frees room is done
//! on the strength of a review or of a write in flight. Room is taken
//! before a write, and given back only after the stored child shows it.
//!
//! 1. **Create** (`create_quota`): the name must be free; the child's hard
//!    is carved under a token (fit-checked compare-and-swap on the
//!    parent), then the object is created carrying the token
//!    (`CREATE_TOKEN_ANNOTATION`). Its review finds the carve-out under
//!    that token and passes. The annotation is honoured only when the
//!    review names bizrq's own identity (`Service::service_account`):
//!    anyone else's create carves under its review's uid, so a copied token
//!    neither takes over nor resizes bizrq's create in flight, and a create
//!    under a token asking another size than was carved is refused. A
//!    failed create returns the carve-out only if it is still under its
//!    token.
//! 2. **Change** (`update_quota`): raise first. The carve-out becomes, key
//!    by key, the larger of itself and the new hard (`tree::carve_raise`;
//!    a raise of the child renews its `since`), both before bizrq's own
//!    write and in every review. A review never lowers. After bizrq's own
//!    write, done or failed, a fresh read of the child settles the
//!    carve-out (`tree::settle_carve`): lowered to the stored hard if no
//!    other raise was carved since its own step, else as the repair would.
//! 3. **Delete** (`delete_quota`): the review checks the rules and frees
//!    nothing. bizrq's own delete returns the carve-out once a fresh read
//!    shows the child gone (not terminating), and only the carve-out it saw
//!    before (a name created again carves under a token of its own). A
//!    delete by anyone else is seen by the controller's quota watch:
//!    `release_gone` returns the carve-out made under the deleted object's
//!    token, and the parent's repair any other once it is not young.
//! 4. **Repair** (`quota::tree::repair_carves`, run by the controller and
//!    the standalone resync): each carve-out follows its stored child; a
//!    carve-out younger than `CARVE_TTL_MS` is only raised (a write may be
//!    in flight behind it), an older one is set to the child's hard, and
//!    one whose child is gone is returned.
//!
//! Windows. A crash between a carve-out and its write leaves room taken,
//! not given: the repair returns it after `CARVE_TTL_MS`. A write refused
//! or failed after its raise settles it as one that succeeded does; a
//! raise another writer's raise followed, one whose write's fate is
//! unknown (`Unavailable`), or one lost with a crash, stays
//! (never set back to a value read before another writer's): the repair
//! lowers it to the stored child once it is old. A lowering waits, at worst, for the window of a recent raise.
//! A child deleted by anyone but bizrq within `CARVE_TTL_MS` of its own
//! kubectl create keeps its carve-out until the repair after the window
//! (its name is refused meanwhile, as for a create in flight). In every
//! window the parent's used counts at least what its children hold, so a
//! sibling can never be carved room a child still holds.

use super::error::ServiceError;
use super::{backoff, check_version, show, Persist, Service, MAX_ATTEMPTS};
use crate::store::{StoreError, Stored};
use crate::util::new_uid;
use quota::borrow;
use quota::object::{Quota, QuotaSpec};
use quota::resources::ResourceList;
use quota::tree::{self, TreeError, CARVE_TTL_MS};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// The annotation by which a quota bizrq creates itself names its create:
/// for a child, the carve-out made in the parent (the parent's
/// `status.children[name].uid`).
/// In cluster mode the API server sends that create back to bizrq's own
/// webhook, possibly on another replica: the token tells the webhook that
/// the carve-out is this create's, not a concurrent one's (docs/cluster-mode.md).
pub const CREATE_TOKEN_ANNOTATION: &str = "bizrq.io/create-token";

/// Children of a parent read fresh by `Service::confirm_children`.
#[derive(Debug, Default)]
pub struct Confirmed(BTreeSet<String>);

impl Confirmed {
    /// The children a repair of `parent`, as it is about to be written, may
    /// trust: those it holds a carve-out for, and those confirmed to exist.
    /// A child without either is left out (no carve-out is made for it this
    /// time; the next reconcile confirms it).
    pub fn for_repair<'a>(&self, parent: &Quota, kids: &'a [Stored]) -> Vec<&'a Quota> {
        kids.iter()
            .map(|s| &s.quota)
            .filter(|k| parent.status.children.contains_key(k.name()) || self.0.contains(k.name()))
            .collect()
    }
}

pub(super) fn already_exists(name: &str) -> ServiceError {
    ServiceError::AlreadyExists(format!("bizrq {name} already exists"))
}

/// Whether `q` is the object of the create that carved under `token`.
pub(super) fn created_by(q: &Quota, token: &str) -> bool {
    q.metadata
        .annotations
        .get(CREATE_TOKEN_ANNOTATION)
        .map(String::as_str)
        == Some(token)
}

impl Service {
    /// Create a quota: rules checked, carved out of the parent first (so two
    /// concurrent children can never both take the last unit), then stored.
    ///
    /// The carve-out carries a token (`token`, or a fresh one): the parent's
    /// `status.children[name].uid`. A create made here writes the token on
    /// the object as `CREATE_TOKEN_ANNOTATION`; in cluster mode the API server
    /// sends that create to the webhook (`Persist::ByApiServer`, with the
    /// annotation as `token`), which finds the carve-out under the same token
    /// and passes it unchanged. A carve-out under another token is another
    /// create's, in flight or crashed (dropped after `CARVE_TTL_MS`).
    #[tracing::instrument(level = "debug", skip_all, fields(quota = name, dry_run = dry_run))]
    pub async fn create_quota(
        &self,
        name: &str,
        spec: QuotaSpec,
        persist: Persist,
        token: &str,
        dry_run: bool,
    ) -> Result<Quota, ServiceError> {
        tree::validate_spec(name, &spec, &self.keys)?;
        // Under review the object is not stored yet; one that is means a
        // second create of the name (the API server admits before it looks).
        if self.store.get(name).await?.is_some() {
            return Err(already_exists(name));
        }
        let token = if token.is_empty() {
            new_uid()
        } else {
            token.to_string()
        };
        if !spec.parent.is_empty() {
            self.check_ancestry(name, &spec.parent).await?;
            let since = quota::time::format_rfc3339(self.now());
            let (hard, child, token2) = (spec.hard.clone(), name.to_string(), token.clone());
            self.update_status(&spec.parent, dry_run, move |p| {
                // One without a token was made by a repair for a child of
                // this name, which is gone (checked above): it is stale.
                if let Some(c) = p.status.children.get(&child) {
                    // The carve-out made for this create is exactly its
                    // hard: a create under its token asking another size
                    // is not the one it was made for.
                    if c.uid == token2 && c.hard != hard {
                        return Err(ServiceError::Conflict(format!(
                            "bizrq {child}: the carve-out in {} under this create's token is {}, \
                             the object asks {}; a create cannot resize it",
                            p.name(),
                            show(&c.hard),
                            show(&hard),
                        )));
                    }
                    if !c.uid.is_empty() && c.uid != token2 {
                        return Err(ServiceError::Conflict(format!(
                            "bizrq {child} is being created by another request, which already \
                             carved it out of {} (since {}); retry once that create is done, or \
                             after {} s if it never finishes",
                            p.name(),
                            c.since,
                            CARVE_TTL_MS / 1000
                        )));
                    }
                }
                let changed = tree::carve(p, &child, &hard, &since)?;
                if let Some(c) = p.status.children.get_mut(&child) {
                    c.uid = token2.clone();
                }
                Ok((changed, ()))
            })
            .await
            .map_err(|e| match e {
                ServiceError::NotFound(_) => TreeError::ParentMissing {
                    child: name.into(),
                    parent: spec.parent.clone(),
                }
                .into(),
                e => e,
            })?;
        }
        let mut quota = Quota::new(name, spec);
        if persist == Persist::ByApiServer || dry_run {
            return Ok(quota);
        }
        quota.metadata.uid = Some(token.clone());
        quota
            .metadata
            .annotations
            .insert(CREATE_TOKEN_ANNOTATION.to_string(), token.clone());
        let before_write = self.now();
        let result = match self.store.create(&quota).await {
            Ok(stored) => Ok(stored),
            // The answer may be lost after the write (a timeout, a retry
            // that met our own object): the object carrying our token is ours.
            Err(e) => match self.store.get(name).await {
                Ok(Some(s)) if created_by(&s.quota, &token) => Ok(s),
                _ => Err(e),
            },
        };
        match result {
            Ok(stored) => {
                self.changed
                    .mark(name, before_write, Some(Arc::new(stored.clone())));
                Ok(stored.quota)
            }
            Err(e) => {
                if !quota.spec.parent.is_empty() {
                    self.uncarve_if_ours(&quota.spec.parent, name, &token).await;
                }
                Err(e.into())
            }
        }
    }

    /// Return `child`'s carve-out to `parent` if it is still the one made
    /// under `token` (a later create of the same name carves under its own).
    pub(super) async fn uncarve_if_ours(&self, parent: &str, child: &str, token: &str) {
        let res = self
            .update_status(parent, false, |p| {
                let ours = p.status.children.get(child).is_some_and(|c| c.uid == token);
                Ok((ours && tree::uncarve(p, child), ()))
            })
            .await;
        if let Err(e) = res {
            tracing::warn!(parent, child, error = %e, "could not return a carve-out; the resync will");
        }
    }

    /// Parents are immutable and must exist, so a cycle needs bad data; read
    /// the line anyway rather than trust it (`tree::check_ancestry`).
    pub(super) async fn check_ancestry(
        &self,
        name: &str,
        parent: &str,
    ) -> Result<(), ServiceError> {
        let mut forest = quota::lineage::Forest::new([(name, parent)]);
        while let Some(at) = forest.next_unknown(name).map(str::to_string) {
            // A line already past the limit (a store from before it) is
            // not walked to its end: one read per level.
            if forest.len() > tree::MAX_DEPTH {
                return Err(TreeError::TooDeep {
                    name: name.into(),
                    depth: forest.len() + 1,
                }
                .into());
            }
            let Some(p) = self.store.get(&at).await? else {
                break;
            };
            forest.insert(at, p.quota.spec.parent.clone());
        }
        Ok(tree::check_ancestry(name, &forest)?)
    }

    /// Change a quota's spec. Raises are carved out of the parent first;
    /// lowering always passes. `expected_version` makes it a strict
    /// compare-and-swap for the caller; without it, conflicts with status
    /// writes are retried here.
    #[tracing::instrument(level = "debug", skip_all, fields(quota = name, dry_run = dry_run))]
    pub async fn update_quota(
        &self,
        name: &str,
        spec: QuotaSpec,
        expected_version: Option<i64>,
        persist: Persist,
        dry_run: bool,
    ) -> Result<Quota, ServiceError> {
        tree::validate_spec(name, &spec, &self.keys)?;
        let current = self.get(name).await?;
        check_version(name, expected_version, current.version)?;
        let old = current.quota.spec.clone();
        if spec.parent != old.parent {
            return Err(TreeError::ParentImmutable {
                name: name.into(),
                from: old.parent,
                to: spec.parent,
            }
            .into());
        }
        let added: ResourceList = spec
            .hard
            .iter()
            .filter(|(k, _)| !old.hard.contains_key(*k))
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        if !added.is_empty() {
            let children = self.store.children(name).await?;
            let hards: Vec<(&str, &ResourceList)> = children
                .iter()
                .map(|c| (c.quota.name(), &c.quota.spec.hard))
                .collect();
            tree::check_children_cover(name, &added, &hards)?;
        }
        let carved = !old.parent.is_empty() && old.hard != spec.hard;
        let mut carve_before = None;
        if carved {
            // Raise first (see the module doc): never lowered here, as the
            // write may yet be refused or lost.
            let since = quota::time::format_rfc3339(self.now());
            let renew = tree::raises(&old.hard, &spec.hard);
            let (hard, child) = (spec.hard.clone(), name.to_string());
            carve_before = self
                .update_status(&old.parent, dry_run, move |p| {
                    if tree::holder(p, &child).is_some() {
                        // A transfer owns this carve-out until it is done:
                        // only its own planned value passes (in cluster
                        // mode, its spec write comes back here through the
                        // webhook), and the transfer moves the carve-out in
                        // its own order.
                        tree::check_not_held(p, &child, &hard)?;
                        return Ok((false, None));
                    }
                    let changed = tree::carve_raise(p, &child, &hard, renew, &since)?;
                    Ok((changed, p.status.children.get(&child).cloned()))
                })
                .await?;
        }
        if persist == Persist::ByApiServer || dry_run {
            let mut q = current.quota.clone();
            q.spec = spec;
            q.status.refresh(&q.spec);
            return Ok(q);
        }
        let result = self.replace_spec(name, &spec, expected_version).await;
        // The carve-out follows the child as a fresh read shows it stored,
        // whether this write went through or was refused: a raise left
        // behind by a failed write reads to transfers as a change in flight
        // (409) until the repair. It is never set back to a value read
        // before a concurrent writer's: unless it is exactly as this raise
        // left it, it is only lowered once no longer young
        // (`tree::settle_carve`). A write whose fate is unknown (the API
        // server did not answer) may still land: its raise stays for the
        // repair.
        let unknown = matches!(result, Err(ServiceError::Unavailable(_)));
        if carved && !unknown {
            self.settle_carve(&old.parent, name, carve_before).await;
        }
        result
    }

    /// After a spec write of `child`, done or failed: its carve-out in
    /// `parent` follows the child as stored now (`tree::settle_carve`). Best effort:
    /// what is left undone, the repair does.
    pub(super) async fn settle_carve(
        &self,
        parent: &str,
        child: &str,
        before: Option<quota::object::Carve>,
    ) {
        let stored = match self.store.get(child).await {
            Ok(Some(s)) => s.quota.spec.hard,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(parent, child, error = %e, "could not read a child to settle its carve-out; the repair will");
                return;
            }
        };
        let now = self.now();
        let res = self
            .update_status(parent, false, |p| {
                Ok((
                    tree::settle_carve(p, child, before.as_ref(), &stored, now),
                    (),
                ))
            })
            .await;
        if let Err(e) = res {
            tracing::warn!(parent, child, error = %e, "could not settle a carve-out; the repair will");
        }
    }

    pub(super) async fn replace_spec(
        &self,
        name: &str,
        spec: &QuotaSpec,
        expected_version: Option<i64>,
    ) -> Result<Quota, ServiceError> {
        self.modify(name, false, expected_version, |q| {
            q.spec = spec.clone();
            q.status.refresh(&q.spec);
            Ok((true, ()))
        })
        .await?;
        Ok(self.get(name).await?.quota)
    }

    /// Delete a leaf and return its carve-out to the parent.
    #[tracing::instrument(level = "debug", skip_all, fields(quota = name, dry_run = dry_run))]
    pub async fn delete_quota(
        &self,
        name: &str,
        expected_version: Option<i64>,
        persist: Persist,
        dry_run: bool,
    ) -> Result<(), ServiceError> {
        let current = self.get(name).await?;
        check_version(name, expected_version, current.version)?;
        let parent = current.quota.spec.parent.clone();
        let children = self.store.children(name).await?;
        tree::check_leaf(&current.quota, children.iter().map(|c| c.quota.name()))?;
        // The token of the carve-out this leaf holds: only that one is
        // returned below (see `uncarve_if_ours`).
        let mut carve_token = None;
        if !parent.is_empty() {
            // A transfer moving quota through this leaf holds its carve-out
            // until it is done; the leaf goes after that.
            if let Some(p) = self.store.get(&parent).await? {
                if let Some(id) = tree::holder(&p.quota, name) {
                    return Err(TreeError::Held {
                        child: name.into(),
                        parent,
                        transfer: id.into(),
                    }
                    .into());
                }
                carve_token = p.quota.status.children.get(name).map(|c| c.uid.clone());
            }
        }
        if dry_run {
            return Ok(());
        }
        if persist == Persist::ByApiServer {
            // The review of a DELETE frees nothing: a finalizer, or a later
            // webhook refusing, may keep the child. Its carve-out goes back
            // when the child is gone (the controller's repair, on the
            // quota's Delete event); a re-check soon confirms the parent.
            if !parent.is_empty() {
                self.recheck.mark(&parent);
            }
            return Ok(());
        }
        {
            let _guard = self.lock(name).await;
            let mut current = current;
            for attempt in 1..=MAX_ATTEMPTS {
                let before_write = self.now();
                match self.store.delete(&current).await {
                    Ok(()) => {
                        self.changed.mark(name, before_write, None);
                        break;
                    }
                    Err(StoreError::Conflict(_))
                        if expected_version.is_none() && attempt < MAX_ATTEMPTS =>
                    {
                        backoff(attempt).await;
                        current = self.get(name).await?;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
        if !parent.is_empty() {
            // Returned only if a fresh read shows the child gone: in cluster
            // mode a finalizer keeps it terminating, and then the repair
            // returns the carve-out once the API server removes it.
            match self.store.get(name).await {
                Ok(None) => {}
                Ok(Some(_)) => {
                    tracing::info!(%parent, child = name, "deleted quota still terminating; its carve-out goes back once it is gone");
                    self.recheck.mark(&parent);
                    return Ok(());
                }
                Err(e) => {
                    tracing::warn!(%parent, child = name, error = %e, "could not confirm a delete; the repair returns the carve-out");
                    self.recheck.mark(&parent);
                    return Ok(());
                }
            }
            // The name may since have been created again with a carve-out
            // of its own: return only the one seen before the delete, or
            // one a repair made (no token) while the leaf still existed.
            let child = name.to_string();
            match self
                .update_status(&parent, false, |p| {
                    let ours = match p.status.children.get(&child) {
                        Some(c) => c.uid.is_empty() || Some(&c.uid) == carve_token.as_ref(),
                        None => true,
                    };
                    if !ours {
                        return Ok((false, ()));
                    }
                    let uncarved = tree::uncarve(p, &child);
                    let unlent = borrow::drop_loan(p, &child);
                    Ok((uncarved || unlent, ()))
                })
                .await
            {
                Ok(()) | Err(ServiceError::NotFound(_)) => {}
                Err(e) => {
                    tracing::warn!(%parent, child = name, error = %e, "could not return a carve-out; the resync will")
                }
            }
        }
        Ok(())
    }

    /// A child quota the cluster reports deleted (the controller's quota
    /// watch): its carve-out goes back to `parent` now, young or not, if a
    /// fresh read confirms the child gone and the carve-out is the one made
    /// under the deleted object's create token (`token`, from its
    /// annotation: a later create of the name carves under a token of its
    /// own). Anything else is left to the parent's repair, which returns a
    /// gone child's carve-out once it is no longer young.
    pub async fn release_gone(&self, parent: &str, child: &str, token: &str) {
        if token.is_empty() || !matches!(self.store.get(child).await, Ok(None)) {
            return;
        }
        let res = self
            .update_status(parent, false, |p| {
                let ours = p.status.children.get(child).is_some_and(|c| c.uid == token);
                let released = ours && tree::holder(p, child).is_none() && tree::uncarve(p, child);
                Ok((released, ()))
            })
            .await;
        match res {
            Ok(()) | Err(ServiceError::NotFound(_)) => {}
            Err(e) => {
                tracing::warn!(parent, child, error = %e, "could not return a deleted child's carve-out; the repair will")
            }
        }
    }

    /// The children of `parent` for its repair, from a list that can lag
    /// behind the API server (the controller's watch cache). A listed child
    /// that holds no carve-out in the parent is the one case where lag does
    /// harm: a delete not yet seen would get its carve-out back and keep it.
    /// Those few are read fresh, and dropped when gone; see `Confirmed`.
    #[tracing::instrument(level = "debug", skip_all, fields(quota = parent))]
    pub async fn confirm_children(
        &self,
        parent: &str,
        listed: Vec<Stored>,
    ) -> Result<(Vec<Stored>, Confirmed), ServiceError> {
        let carved: BTreeSet<String> = self
            .cached(parent)
            .map(|p| p.quota.status.children.keys().cloned().collect())
            .unwrap_or_default();
        let mut kept = Vec::with_capacity(listed.len());
        let mut confirmed = Confirmed::default();
        for kid in listed {
            if carved.contains(kid.quota.name()) {
                kept.push(kid);
            } else if let Some(fresh) = self.store.get(kid.quota.name()).await? {
                confirmed.0.insert(fresh.quota.name().to_string());
                kept.push(fresh);
            }
        }
        Ok((kept, confirmed))
    }

    /// Periodic full resync in standalone mode: make every parent's carve-out
    /// ledger match its children (dropping carve-outs of creates that never
    /// finished, after `CARVE_TTL_MS`), accrue cash, refresh used. Returns
    /// how many quotas it had to write.
    #[tracing::instrument(level = "debug", skip_all)]
    pub async fn resync(&self) -> Result<usize, ServiceError> {
        let started = std::time::Instant::now();
        let all = self.store.list().await?;
        let mut children: BTreeMap<&str, Vec<&Quota>> = BTreeMap::new();
        for s in &all {
            if !s.quota.spec.parent.is_empty() {
                children
                    .entry(&s.quota.spec.parent)
                    .or_default()
                    .push(&s.quota);
            }
        }
        let mut written = 0;
        for s in &all {
            let name = s.quota.name().to_string();
            let kids = children.remove(name.as_str()).unwrap_or_default();
            let now = self.now();
            let listed = &s.quota.status;
            let result = self
                .update_status(&name, false, |q| {
                    borrow::repair_children(q, &kids, now);
                    // Standalone, nothing names a queue's entries (no
                    // watch): one a CREATE's review left (older versions
                    // queued here too) expires; nothing queues now.
                    if !self.queueing {
                        let grace = quota::queue::entries::UNSEEN_GRACE_MS;
                        quota::queue::entries::expire_unseen(q, now, grace);
                    }
                    // Write only what a reader would see change.
                    let changed = q.status.differs_visibly(listed);
                    Ok((changed, changed))
                })
                .await;
            match result {
                Ok(changed) => written += changed as usize,
                Err(ServiceError::NotFound(_)) => {}
                Err(e) => tracing::warn!(quota = %name, error = %e, "resync failed for one quota"),
            }
        }
        self.metrics
            .reconcile_duration
            .observe(started.elapsed().as_secs_f64());
        Ok(written)
    }
}
