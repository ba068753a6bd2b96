//! Roles kept current between sign-ins: every `--oidc-refresh-seconds`,
//! each person who can still act (a live session or API token) and whose
//! provider gave a refresh token is asked about again with it; the groups
//! the fresh ID token (or, without one, userinfo) names are mapped to roles
//! as at sign-in. So someone removed from a group loses what it gave within
//! one interval, and someone the provider no longer refreshes
//! (`invalid_grant`: the person left, or the provider ended the session)
//! is signed out of bizrq and loses what the mapping gave.
//!
//! Replicas share the work without doing it twice: a replica takes a
//! person's refresh by moving its `synced_at_ms` from the value it read
//! (a compare-and-swap), so one refresh token is never used twice at once
//! (a provider that rotates refresh tokens would revoke the family).
//! A provider that is down leaves roles as they are until it answers.

use super::Identities;
use crate::oidc::claims;
use crate::store::audit::action;
use crate::store::identity::Identity;
use std::sync::Arc;

/// People refreshed in one round at most; the rest wait for the next.
pub const MAX_PER_ROUND: i64 = 200;

/// What one person's refresh did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Roles applied from the groups named now; how many changed.
    Applied(usize),
    /// Signed out: the provider no longer refreshes this sign-in.
    Ended,
    /// The provider could not be asked (down, a bad answer); nothing changed.
    Skipped,
    /// Another replica took it.
    Taken,
}

/// Refreshes forever, every `settings.refresh_every`.
pub async fn run(ids: Arc<Identities>) {
    let mut tick = tokio::time::interval(ids.settings.refresh_every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match round(&ids).await {
            Ok(0) => {}
            Ok(n) => tracing::debug!(people = n, "roles refreshed from the identity provider"),
            Err(e) => {
                tracing::warn!(error = %e, "could not refresh roles from the identity provider")
            }
        }
    }
}

/// People refreshed at once: a slow provider holds up a few, not a round.
pub const AT_ONCE: usize = 8;

/// Batches taken in one round at most (of [`MAX_PER_ROUND`] each), so a
/// round ends even when every person is due at every tick.
pub const MAX_BATCHES: usize = 10;

/// One round: everyone due, [`AT_ONCE`] at a time, in batches until none
/// is due; how many were refreshed. A batch in which the provider answered
/// nobody ends the round (it is down: the next tick tries again).
pub async fn round(ids: &Identities) -> Result<usize, crate::store::StoreError> {
    use futures::StreamExt;
    let mut n = 0;
    for _ in 0..MAX_BATCHES {
        let now = ids.service.now();
        let every = ids.settings.refresh_every.as_millis() as i64;
        let due = ids
            .sql
            .identities_due(now - every + 500, now, MAX_PER_ROUND)
            .await?;
        let fetched = due.len();
        let ours: Vec<Identity> = due
            .into_iter()
            .filter(|i| i.issuer == ids.issuer())
            .collect();
        let outcomes: Vec<_> = futures::stream::iter(ours)
            .map(|id| async move {
                let r = one(ids, &id).await;
                if let Err(e) = &r {
                    tracing::warn!(error = %e, subject = %id.subject, "could not refresh one person's roles");
                }
                r
            })
            .buffer_unordered(AT_ONCE)
            .collect()
            .await;
        let done = outcomes
            .iter()
            .filter(|o| matches!(o, Ok(Outcome::Applied(_) | Outcome::Ended)))
            .count();
        n += done;
        let asked = outcomes
            .iter()
            .filter(|o| !matches!(o, Ok(Outcome::Taken)))
            .count();
        if (fetched as i64) < MAX_PER_ROUND || (asked > 0 && done == 0) {
            break;
        }
    }
    Ok(n)
}

/// Refreshes one person.
pub async fn one(ids: &Identities, id: &Identity) -> Result<Outcome, crate::store::StoreError> {
    let now = ids.service.now();
    if !ids.sql.claim_refresh(id, now).await? {
        return Ok(Outcome::Taken);
    }
    let Some(user) = ids.sql.user_by_id(id.user_id).await? else {
        return Ok(Outcome::Skipped);
    };
    let Some(refresh_token) = id.refresh_token.as_deref() else {
        return unrefreshed(ids, id, &user, now).await;
    };
    let p = &ids.provider;
    let tokens = match p.refresh(refresh_token).await {
        Ok(t) => t,
        Err(e) if e.grant_ended() => {
            tracing::info!(user = %user.username, error = %e, "the identity provider no longer refreshes this sign-in: signed out");
            ids.sql.delete_sessions_of(user.id).await?;
            ids.sql
                .record_identity(&id.issuer, &id.subject, &[], Some(None), false, now)
                .await?;
            ids.apply_roles(&user, &[], "the provider ended the sign-in")
                .await?;
            signed_out(
                ids,
                &user,
                &format!(
                    "{} signed out: the identity provider no longer refreshes the sign-in ({e})",
                    user.username
                ),
            )
            .await;
            return Ok(Outcome::Ended);
        }
        Err(e) => {
            tracing::warn!(user = %user.username, error = %e, "could not refresh roles from the identity provider; they stay as they are");
            return Ok(Outcome::Skipped);
        }
    };
    // A provider that rotates refresh tokens has spent the one used: the
    // new one is kept before anything below may leave roles as they are,
    // or the next refresh would be refused and sign the person out.
    if let Some(rotated) = tokens.refresh_token.as_deref() {
        ids.sql
            .record_identity(
                &id.issuer,
                &id.subject,
                &id.groups,
                Some(Some(rotated)),
                false,
                now,
            )
            .await?;
    }
    let names = &p.settings.claims;
    // The groups claim as the fresh ID token names it; without an ID
    // token, or one that leaves the claim out (some providers send groups
    // at sign-in only), as userinfo names it. Absent everywhere is not "in
    // no group": roles stay as they are. An empty list is no group.
    let mut named = None;
    if let Some(t) = &tokens.id_token {
        match p.check_id_token(t, None, now / 1000).await {
            Ok(tok) if tok.subject == id.subject => {
                named = claims::at(&tok.claims, &names.groups).cloned()
            }
            Ok(_) => {
                tracing::warn!(user = %user.username, "a refreshed ID token names another subject; roles stay as they are");
                return Ok(Outcome::Skipped);
            }
            Err(e) => {
                tracing::warn!(user = %user.username, error = %e, "a refreshed ID token was refused; roles stay as they are");
                return Ok(Outcome::Skipped);
            }
        }
    }
    if named.is_none() {
        if let Some(access) = &tokens.access_token {
            match p.userinfo(access, &id.subject).await {
                Ok(c) => named = claims::at(&c, &names.groups).cloned(),
                Err(e) => {
                    tracing::warn!(user = %user.username, error = %e, "userinfo failed; roles stay as they are");
                    return Ok(Outcome::Skipped);
                }
            }
        }
    }
    let Some(named) = named else {
        tracing::warn!(user = %user.username, claim = %names.groups, "the refresh named no groups claim (neither the ID token nor userinfo); roles stay as they are");
        return Ok(Outcome::Skipped);
    };
    let groups = claims::groups_of(Some(&named)).0;
    // A rotated refresh token replaces the one used; none given keeps it.
    let keep = tokens.refresh_token.as_deref().map(Some);
    ids.sql
        .record_identity(&id.issuer, &id.subject, &groups, keep, false, now)
        .await?;
    let changes = ids.apply_roles(&user, &groups, "on a refresh").await?;
    Ok(Outcome::Applied(changes.len()))
}

/// A person whose provider gave no refresh token: their groups cannot be
/// asked about again, so what a sign-in's groups gave lasts
/// `--oidc-unrefreshed-roles-seconds` from it. After that their sessions end
/// and the mapping's roles go (their API tokens keep the roles given by
/// hand), until they sign in again.
async fn unrefreshed(
    ids: &Identities,
    id: &Identity,
    user: &crate::store::accounts::User,
    now: i64,
) -> Result<Outcome, crate::store::StoreError> {
    let lasts = ids.settings.unrefreshed_roles_for.as_millis() as i64;
    if now.saturating_sub(id.last_login_ms) < lasts {
        return Ok(Outcome::Skipped);
    }
    let ended = ids.sql.delete_sessions_of(user.id).await? > 0;
    // Groups recorded empty: the mapping gave nothing since (a rule
    // change applies the groups named last), so nothing is read again
    // for a person whose API token keeps them due round after round.
    let changes = if id.groups.is_empty() {
        Vec::new()
    } else {
        ids.sql
            .record_identity(&id.issuer, &id.subject, &[], None, false, now)
            .await?;
        ids.apply_roles(user, &[], "the sign-in that gave them is older than --oidc-unrefreshed-roles-seconds, and the provider gave no refresh token")
            .await?
    };
    if ended {
        signed_out(
            ids,
            user,
            &format!(
                "{} signed out: the sign-in is older than {} and the identity provider gave no refresh token to ask about it again",
                user.username,
                quota::budget::runway::span(lasts)
            ),
        )
        .await;
    }
    Ok(if ended || !changes.is_empty() {
        Outcome::Applied(changes.len())
    } else {
        Outcome::Skipped
    })
}

/// Audits that `user` was signed out by the refresh, and why.
async fn signed_out(ids: &Identities, user: &crate::store::accounts::User, why: &str) {
    ids.record(
        action::USER_SIGNED_OUT,
        &crate::service::audit::user_target(&user.username),
        None,
        None,
        why,
    )
    .await;
}
