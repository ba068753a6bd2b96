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
use crate::store::audit::{action, entry};
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

/// One round: everyone due; how many were refreshed.
pub async fn round(ids: &Identities) -> Result<usize, crate::store::StoreError> {
    let now = ids.service.now();
    let every = ids.settings.refresh_every.as_millis() as i64;
    let due = ids
        .sql
        .identities_due(now - every + 500, now, MAX_PER_ROUND)
        .await?;
    let mut n = 0;
    for id in due.iter().filter(|i| i.issuer == ids.issuer()) {
        match one(ids, id).await {
            Ok(Outcome::Taken) => {}
            Ok(_) => n += 1,
            Err(e) => {
                tracing::warn!(error = %e, subject = %id.subject, "could not refresh one person's roles")
            }
        }
    }
    Ok(n)
}

/// Refreshes one person.
pub async fn one(ids: &Identities, id: &Identity) -> Result<Outcome, crate::store::StoreError> {
    let now = ids.service.now();
    let Some(refresh_token) = id.refresh_token.as_deref() else {
        return Ok(Outcome::Skipped);
    };
    if !ids.sql.claim_refresh(id, now).await? {
        return Ok(Outcome::Taken);
    }
    let Some(user) = ids.sql.user_by_id(id.user_id).await? else {
        return Ok(Outcome::Skipped);
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
            let e = entry(
                now,
                "bizrq",
                action::USER_SIGNED_OUT,
                &crate::service::audit::user_target(&user.username),
                None,
                None,
                &format!(
                    "{} signed out: the identity provider no longer refreshes the sign-in ({e})",
                    user.username
                ),
            );
            if let Err(err) = ids.sql.append_audit(&e).await {
                tracing::error!(error = %err, "could not write an audit entry");
            }
            return Ok(Outcome::Ended);
        }
        Err(e) => {
            tracing::warn!(user = %user.username, error = %e, "could not refresh roles from the identity provider; they stay as they are");
            return Ok(Outcome::Skipped);
        }
    };
    let names = &p.settings.claims;
    let groups = match (&tokens.id_token, &tokens.access_token) {
        (Some(t), _) => match p.check_id_token(t, None, now / 1000).await {
            Ok(tok) if tok.subject == id.subject => {
                claims::groups_of(claims::at(&tok.claims, &names.groups)).0
            }
            Ok(_) => {
                tracing::warn!(user = %user.username, "a refreshed ID token names another subject; roles stay as they are");
                return Ok(Outcome::Skipped);
            }
            Err(e) => {
                tracing::warn!(user = %user.username, error = %e, "a refreshed ID token was refused; roles stay as they are");
                return Ok(Outcome::Skipped);
            }
        },
        (None, Some(access)) => match p.userinfo(access, &id.subject).await {
            Ok(c) => claims::groups_of(claims::at(&c, &names.groups)).0,
            Err(e) => {
                tracing::warn!(user = %user.username, error = %e, "userinfo failed; roles stay as they are");
                return Ok(Outcome::Skipped);
            }
        },
        (None, None) => {
            tracing::warn!(user = %user.username, "the refresh gave neither an ID token nor an access token; roles stay as they are");
            return Ok(Outcome::Skipped);
        }
    };
    // A rotated refresh token replaces the one used; none given keeps it.
    let keep = tokens.refresh_token.as_deref().map(Some);
    ids.sql
        .record_identity(&id.issuer, &id.subject, &groups, keep, false, now)
        .await?;
    let changes = ids.apply_roles(&user, &groups, "on a refresh").await?;
    Ok(Outcome::Applied(changes.len()))
}
