//! API tokens, for people and for machines (docs/machine-access.md):
//! - a person's own (`/tokens`), made from a signed-in session;
//! - a service account's (`/users/{name}/tokens`, admins): a user of its
//!   own kind that never signs in and acts only through its tokens, with
//!   the roles bound to it like anyone's.
//!
//! Any token may expire (7, 30, 90 or 365 days; "never" is a choice made
//! on the form) and may be held to some quotas: it then acts only on their
//! subtrees, with the role its user holds there, and never as an admin
//! (`authz::scoped`). Only its SHA-256 is stored; it is shown once.

use super::accounts::{done, refused, require_confirm, user_named, ConfirmForm};
use super::auth::{random_token, Viewer};
use super::PageError;
use crate::authz::Principal;
use crate::edge::AppState;
use crate::service::audit::{user_json, user_target};
use crate::store::accounts::{TokenTerms, User};
use crate::store::audit::action;
use crate::store::StoreError;
use app::accounts::TokensOf;
use app::layout::Flash;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use axum::Form;
use serde::Deserialize;
use serde_json::json;

/// API tokens start with this, so a leaked one is recognisable.
pub const TOKEN_PREFIX: &str = "bzq_";
/// Quotas one token may be held to.
pub const MAX_SCOPE: usize = 32;
const DAY_MS: i64 = 24 * 3_600_000;

async fn page(
    app: &AppState,
    viewer: &Viewer,
    of: TokensOf,
    user_id: i64,
    new_token: Option<(String, String)>,
    flash: Option<Flash>,
) -> Result<Response, PageError> {
    let rows = app
        .portal
        .sql
        .tokens_of(user_id)
        .await?
        .into_iter()
        .map(|t| app::accounts::TokenRow {
            id: t.id,
            name: t.name,
            created: quota::time::format_when(t.created_at_ms),
            last_used: t.last_used_ms.map(quota::time::format_when),
            revoked: t.revoked_at_ms.map(quota::time::format_when),
            expires: t
                .expires_at_ms
                .map(quota::time::format_when)
                .unwrap_or_else(|| "never".into()),
            scope: t.scope.unwrap_or_default().join(", "),
        })
        .collect();
    // A form refused is answered with its page again, the reason on top,
    // as a refusal (422), never as a success.
    let status = if matches!(flash, Some(Flash::Error(_))) {
        StatusCode::UNPROCESSABLE_ENTITY
    } else {
        StatusCode::OK
    };
    Ok((
        status,
        Html(app::accounts::render_tokens_page(
            viewer.page(),
            of,
            rows,
            new_token,
            flash,
        )),
    )
        .into_response())
}

fn own_id(viewer: &Viewer) -> Result<i64, PageError> {
    viewer
        .principal
        .user_id
        .ok_or_else(|| PageError::Forbidden("the admin token has no personal tokens".into()))
}

/// GET /tokens: the viewer's own tokens.
pub async fn mine(State(app): State<AppState>, viewer: Viewer) -> Result<Response, PageError> {
    let id = own_id(&viewer)?;
    let flash = viewer.take_flash().await;
    page(&app, &viewer, TokensOf::Me, id, None, flash).await
}

#[derive(Deserialize)]
pub struct TokenForm {
    name: String,
    /// 7, 30, 90, 365 or `never` (a form without it: 90).
    #[serde(default)]
    expires_days: Option<String>,
    /// Quota names separated by commas or spaces ("" for none).
    #[serde(default)]
    scope: String,
}

/// The name, and what a form asks a token to be, checked: the quotas of
/// its scope must exist and `owner` (the token's user) must hold a role on
/// each (an admin holds every one).
async fn terms_of(
    app: &AppState,
    owner: &Principal,
    f: &TokenForm,
) -> Result<(String, TokenTerms), String> {
    let name = f.name.trim().to_string();
    if name.is_empty() || name.chars().count() > 100 {
        return Err("a token needs a name of 1–100 characters".into());
    }
    let now = app.service.now();
    let expires_at_ms = match f.expires_days.as_deref().unwrap_or("90").trim() {
        "never" => None,
        d => match d.parse::<i64>() {
            Ok(days @ (7 | 30 | 90 | 365)) => Some(now + days * DAY_MS),
            _ => return Err(format!("'{d}' is not one of 7, 30, 90, 365 days or never")),
        },
    };
    let mut scope: Vec<String> = f
        .scope
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    scope.sort();
    scope.dedup();
    if scope.len() > MAX_SCOPE {
        return Err(format!("a token is held to at most {MAX_SCOPE} quotas"));
    }
    for q in &scope {
        quota::tree::validate_name(q).map_err(|e| e.to_string())?;
        if app.service.get_for_view(q).await.is_err() {
            return Err(format!("there is no quota {q}"));
        }
    }
    if !scope.is_empty() && !owner.is_admin {
        let tree = super::auth::lineage_tree(app, &scope, owner).await;
        for q in &scope {
            if crate::authz::role_on(owner, q, &tree).is_none() {
                return Err(format!("{} holds no role on {q}", owner.username));
            }
        }
    }
    Ok((
        name,
        TokenTerms {
            expires_at_ms,
            scope: (!scope.is_empty()).then_some(scope),
        },
    ))
}

fn terms_json(t: &crate::store::accounts::ApiToken) -> serde_json::Value {
    json!({"id": t.id, "name": t.name, "expiresAtMs": t.expires_at_ms, "scope": t.scope})
}

/// POST /tokens: a new token of one's own, shown once on the page it
/// answers with.
pub async fn create_mine(
    State(app): State<AppState>,
    viewer: Viewer,
    Form(f): Form<TokenForm>,
) -> Result<Response, PageError> {
    let user_id = own_id(&viewer)?;
    let (name, terms) = match terms_of(&app, &viewer.principal, &f).await {
        Ok(t) => t,
        Err(m) => {
            return page(
                &app,
                &viewer,
                TokensOf::Me,
                user_id,
                None,
                Some(Flash::Error(m)),
            )
            .await
        }
    };
    let token = random_token(TOKEN_PREFIX);
    let ended = || PageError::Forbidden("your session has ended; sign in again".into());
    let session_id = viewer.session.id().ok_or_else(ended)?.to_string();
    // The generation this session signed in under (checked when the
    // viewer was resolved): a reset since leaves the token dead.
    let credential_gen = super::auth::session_generation(&viewer.session).await?;
    let t = app
        .portal
        .sql
        .create_token_with(
            user_id,
            &session_id,
            credential_gen,
            &name,
            &crate::util::sha256_hex(&token),
            &terms,
            app.service.now(),
        )
        .await?
        .ok_or_else(ended)?;
    app.audit(
        &viewer.principal,
        action::TOKEN_CREATE,
        &user_target(&viewer.principal.username),
        None,
        Some(terms_json(&t)),
        &format!("token '{name}'"),
    )
    .await;
    page(
        &app,
        &viewer,
        TokensOf::Me,
        user_id,
        Some((name, token)),
        None,
    )
    .await
}

/// POST /tokens/{id}/revoke: revoke one of the viewer's own tokens.
pub async fn revoke_mine(
    State(app): State<AppState>,
    viewer: Viewer,
    Path(id): Path<i64>,
    Form(f): Form<ConfirmForm>,
) -> Result<Response, PageError> {
    let user_id = own_id(&viewer)?;
    require_confirm(&f.confirm, &format!("revoking token {id}"))?;
    revoke(
        &app,
        &viewer,
        user_id,
        &viewer.principal.username.clone(),
        id,
    )
    .await?;
    done(&viewer, "/tokens", format!("token {id} revoked")).await
}

async fn revoke(
    app: &AppState,
    viewer: &Viewer,
    user_id: i64,
    username: &str,
    id: i64,
) -> Result<(), PageError> {
    let Some(t) = app
        .portal
        .sql
        .revoke_token(user_id, id, app.service.now())
        .await?
    else {
        return Err(PageError::NotFound(format!(
            "no live token {id} of {username}"
        )));
    };
    app.audit(
        &viewer.principal,
        action::TOKEN_REVOKE,
        &user_target(username),
        Some(json!({"id": t.id, "name": t.name})),
        None,
        &format!("token '{}'", t.name),
    )
    .await;
    Ok(())
}

#[derive(Deserialize)]
pub struct ServiceAccountForm {
    username: String,
}

/// POST /users/service-accounts (admins): a service account.
pub async fn create_service_account(
    State(app): State<AppState>,
    viewer: Viewer,
    Form(f): Form<ServiceAccountForm>,
) -> Result<Response, PageError> {
    viewer.require_admin()?;
    let username = f.username.trim().to_lowercase();
    if !crate::authz::valid_username(&username) {
        return refused(&app, &viewer, format!("'{username}' is not a valid name: use 1–64 lower-case letters, digits, '.', '_', '-' and one '@'")).await;
    }
    if crate::authz::reserved_username(&username) {
        return refused(
            &app,
            &viewer,
            format!(
                "'{username}' is the name the audit log gives bizrq's own work: choose another"
            ),
        )
        .await;
    }
    let user = match app
        .portal
        .sql
        .create_service_account(&username, app.service.now())
        .await
    {
        Ok(u) => u,
        Err(StoreError::AlreadyExists(_)) => {
            return refused(&app, &viewer, format!("user '{username}' already exists")).await
        }
        Err(e) => return Err(e.into()),
    };
    let mut after = user_json(&user);
    after["kind"] = "service".into();
    app.audit(
        &viewer.principal,
        action::USER_CREATE,
        &user_target(&username),
        None,
        Some(after),
        "a service account",
    )
    .await;
    done(
        &viewer,
        &format!("/users/{username}/tokens"),
        format!(
            "created the service account {username}; bind it roles on /users, make its tokens here"
        ),
    )
    .await
}

async fn service_account(app: &AppState, viewer: &Viewer, name: &str) -> Result<User, PageError> {
    viewer.require_admin()?;
    let user = user_named(app, name).await?;
    if !user.is_service {
        return Err(PageError::NotFound(format!(
            "{name} is not a service account (people make their own tokens on /tokens)"
        )));
    }
    Ok(user)
}

/// GET /users/{name}/tokens (admins): a service account's tokens.
pub async fn of_service(
    State(app): State<AppState>,
    viewer: Viewer,
    Path(name): Path<String>,
) -> Result<Response, PageError> {
    let user = service_account(&app, &viewer, &name).await?;
    let flash = viewer.take_flash().await;
    page(&app, &viewer, TokensOf::Service(name), user.id, None, flash).await
}

/// POST /users/{name}/tokens (admins): a new token of a service account.
pub async fn create_for_service(
    State(app): State<AppState>,
    viewer: Viewer,
    Path(name): Path<String>,
    Form(f): Form<TokenForm>,
) -> Result<Response, PageError> {
    let user = service_account(&app, &viewer, &name).await?;
    let of = TokensOf::Service(name.clone());
    let owner = super::auth::principal_of(
        &app.portal.sql,
        user.clone(),
        crate::authz::Credential::Session,
    )
    .await?
    .ok_or_else(|| PageError::Invalid(format!("{name} is disabled")))?;
    let (token_name, terms) = match terms_of(&app, &owner, &f).await {
        Ok(t) => t,
        Err(m) => return page(&app, &viewer, of, user.id, None, Some(Flash::Error(m))).await,
    };
    let token = random_token(TOKEN_PREFIX);
    let t = app
        .portal
        .sql
        .create_service_token(
            user.id,
            &token_name,
            &crate::util::sha256_hex(&token),
            &terms,
            app.service.now(),
        )
        .await?
        .ok_or_else(|| PageError::NotFound(format!("{name} is not a service account")))?;
    app.audit(
        &viewer.principal,
        action::TOKEN_CREATE,
        &user_target(&name),
        None,
        Some(terms_json(&t)),
        &format!("token '{token_name}' of the service account {name}"),
    )
    .await;
    page(&app, &viewer, of, user.id, Some((token_name, token)), None).await
}

/// POST /users/{name}/tokens/{id}/revoke (admins).
pub async fn revoke_for_service(
    State(app): State<AppState>,
    viewer: Viewer,
    Path((name, id)): Path<(String, i64)>,
    Form(f): Form<ConfirmForm>,
) -> Result<Response, PageError> {
    let user = service_account(&app, &viewer, &name).await?;
    require_confirm(&f.confirm, &format!("revoking token {id}"))?;
    revoke(&app, &viewer, user.id, &name, id).await?;
    done(
        &viewer,
        &format!("/users/{name}/tokens"),
        format!("token {id} revoked"),
    )
    .await
}
