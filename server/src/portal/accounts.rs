//! Portal pages: users and roles (admins) (API tokens: [`super::tokens`];
//! the quota pages: [`super::quotas`]).
//! Forms post here; each answers with a redirect and a flash message on
//! success (303), or the page again with the error (422), 403 or 404.

use super::auth::{client_addr, Viewer};
use super::PageError;
use crate::authz::{Principal, Role, Source};
use crate::edge::limits::MAX_PASSWORD_BYTES;
use crate::edge::AppState;
use crate::service::audit::{user_json, user_target};
use crate::store::accounts::User;
use crate::store::audit::action;
use crate::store::StoreError;
use app::layout::Flash;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::Form;
use serde::Deserialize;
use serde_json::json;

async fn users_page(
    app: &AppState,
    viewer: &Viewer,
    flash: Option<Flash>,
    status: StatusCode,
) -> Result<Response, PageError> {
    let sql = &app.portal.sql;
    let bindings = sql.all_bindings().await?;
    let emails = sql.user_emails().await?;
    let linked = sql.users_with_identity().await?;
    let provider = app
        .portal
        .identity
        .as_ref()
        .map(|i| i.settings.provider.display_name.clone())
        .unwrap_or_else(|| "an identity provider".into());
    let me = viewer.principal.user_id;
    let rows = sql
        .users()
        .await?
        .into_iter()
        .map(|u| app::accounts::UserRow {
            bindings: bindings
                .iter()
                .filter(|b| b.user_id == u.id)
                .map(|b| {
                    (
                        b.binding.quota.clone(),
                        b.binding.role.to_string(),
                        b.source == Source::Mapping,
                    )
                })
                .collect(),
            signs_in_with: linked.contains_key(&u.id).then(|| provider.clone()),
            admin_by_group: u.admin_source == Source::Mapping,
            kube_username: u.kube_username.clone().unwrap_or_default(),
            is_service: u.is_service,
            is_self: Some(u.id) == me,
            email: emails.get(&u.id).cloned().unwrap_or_default(),
            created: quota::time::format_when(u.created_at_ms),
            username: u.username,
            is_admin: u.is_admin,
            disabled: u.disabled,
        })
        .collect();
    Ok((
        status,
        Html(app::accounts::render_users_page(viewer.page(), rows, flash)),
    )
        .into_response())
}

/// GET /users (admins)
pub async fn users(State(app): State<AppState>, viewer: Viewer) -> Result<Response, PageError> {
    viewer.require_admin()?;
    let flash = viewer.take_flash().await;
    users_page(&app, &viewer, flash, StatusCode::OK).await
}

/// The users page again with an error (422), for a form that was refused.
pub(super) async fn refused(
    app: &AppState,
    viewer: &Viewer,
    message: String,
) -> Result<Response, PageError> {
    users_page(
        app,
        viewer,
        Some(Flash::Error(message)),
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await
}

pub(super) async fn done(
    viewer: &Viewer,
    to: &str,
    message: String,
) -> Result<Response, PageError> {
    viewer.set_flash(Flash::Ok(message)).await;
    Ok(Redirect::to(to).into_response())
}

pub(super) async fn user_named(app: &AppState, name: &str) -> Result<User, PageError> {
    app.portal
        .sql
        .user_by_name(name)
        .await?
        .ok_or_else(|| PageError::NotFound(format!("no user '{name}'")))
}

#[derive(Deserialize)]
pub struct CreateUserForm {
    username: String,
    password: String,
    #[serde(default)]
    admin: Option<String>,
}

/// POST /users (admins): a new account.
pub async fn create_user(
    State(app): State<AppState>,
    viewer: Viewer,
    Form(f): Form<CreateUserForm>,
) -> Result<Response, PageError> {
    viewer.require_admin()?;
    let username = f.username.trim().to_lowercase();
    if !crate::authz::valid_username(&username) {
        return refused(&app, &viewer, format!("'{username}' is not a valid username: use 1–64 lower-case letters, digits, '.', '_' or '-'")).await;
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
    if let Err(m) = super::forms::check_new_password(&f.password) {
        return refused(&app, &viewer, m).await;
    }
    let is_admin = f.admin.as_deref() == Some("true");
    let hash = app.portal.hasher.hash(f.password).await?;
    let user = match app
        .portal
        .sql
        .create_user(&username, &hash, is_admin, app.service.now())
        .await
    {
        Ok(u) => u,
        Err(StoreError::AlreadyExists(_)) => {
            return refused(&app, &viewer, format!("user '{username}' already exists")).await
        }
        Err(e) => return Err(e.into()),
    };
    app.audit(
        &viewer.principal,
        action::USER_CREATE,
        &user_target(&username),
        None,
        Some(user_json(&user)),
        "",
    )
    .await;
    done(&viewer, "/users", format!("created user {username}")).await
}

#[derive(Deserialize)]
pub struct FlagForm {
    #[serde(alias = "disabled", alias = "admin")]
    value: String,
    /// `yes`: the box next to Disable / Make admin was ticked.
    #[serde(default)]
    confirm: String,
}

/// Ticked, or refused with what to do (the form's box is `required`, so
/// only a client that skips the browser gets here without it).
pub(super) fn require_confirm(confirm: &str, what: &str) -> Result<(), PageError> {
    if confirm == "yes" {
        Ok(())
    } else {
        Err(PageError::Invalid(format!(
            "{what} needs confirming: tick the box next to the button"
        )))
    }
}

#[derive(Deserialize, Default)]
pub struct ConfirmForm {
    #[serde(default)]
    pub(super) confirm: String,
}

fn parse_flag(v: &str) -> Result<bool, PageError> {
    match v {
        "true" => Ok(true),
        "false" => Ok(false),
        o => Err(PageError::Invalid(format!("'{o}' is not true or false"))),
    }
}

/// POST /users/{name}/disabled (admins): `disabled=true|false`. A disabled
/// user's sessions end and its tokens stop working.
pub async fn set_disabled(
    State(app): State<AppState>,
    viewer: Viewer,
    Path(name): Path<String>,
    Form(f): Form<FlagForm>,
) -> Result<Response, PageError> {
    viewer.require_admin()?;
    let disabled = parse_flag(&f.value)?;
    let user = user_named(&app, &name).await?;
    if Some(user.id) == viewer.principal.user_id && disabled {
        return refused(&app, &viewer, "you cannot disable yourself".into()).await;
    }
    if disabled {
        require_confirm(&f.confirm, &format!("disabling {name}"))?;
    }
    app.portal.sql.set_user_disabled(user.id, disabled).await?;
    let after = User {
        disabled,
        ..user.clone()
    };
    let act = if disabled {
        action::USER_DISABLE
    } else {
        action::USER_ENABLE
    };
    app.audit(
        &viewer.principal,
        act,
        &user_target(&name),
        Some(user_json(&user)),
        Some(user_json(&after)),
        "",
    )
    .await;
    done(
        &viewer,
        "/users",
        format!("{name} {}", if disabled { "disabled" } else { "enabled" }),
    )
    .await
}

/// POST /users/{name}/admin (admins): `admin=true|false`.
pub async fn set_admin(
    State(app): State<AppState>,
    viewer: Viewer,
    Path(name): Path<String>,
    Form(f): Form<FlagForm>,
) -> Result<Response, PageError> {
    viewer.require_admin()?;
    let is_admin = parse_flag(&f.value)?;
    let user = user_named(&app, &name).await?;
    if Some(user.id) == viewer.principal.user_id && !is_admin {
        return refused(
            &app,
            &viewer,
            "you cannot revoke your own admin role".into(),
        )
        .await;
    }
    if is_admin {
        require_confirm(&f.confirm, &format!("making {name} an admin"))?;
    }
    if user.is_admin == is_admin
        && (!is_admin
            || user.admin_source == Source::Hand
            || Some(user.id) == viewer.principal.user_id)
    {
        // Nothing to do; and an admin by the group mapping cannot make
        // their own role one by hand, which the mapping would never take
        // back (another admin can).
        return done(
            &viewer,
            "/users",
            format!(
                "{name} is {}an admin already",
                if is_admin { "" } else { "not " }
            ),
        )
        .await;
    }
    app.portal.sql.set_user_admin(user.id, is_admin).await?;
    let after = User {
        is_admin,
        admin_source: Source::Hand,
        ..user.clone()
    };
    app.audit(
        &viewer.principal,
        action::USER_ADMIN,
        &user_target(&name),
        Some(user_json(&user)),
        Some(user_json(&after)),
        "",
    )
    .await;
    done(
        &viewer,
        "/users",
        format!(
            "{name} is {}an admin",
            if is_admin { "" } else { "no longer " }
        ),
    )
    .await
}

#[derive(Deserialize)]
pub struct PasswordForm {
    password: String,
}

/// POST /users/{name}/password (admins): a new password; the user's
/// sessions end.
pub async fn set_password(
    State(app): State<AppState>,
    viewer: Viewer,
    Path(name): Path<String>,
    Form(f): Form<PasswordForm>,
) -> Result<Response, PageError> {
    viewer.require_admin()?;
    let user = user_named(&app, &name).await?;
    if user.is_service {
        return refused(
            &app,
            &viewer,
            format!(
                "{name} is a service account: it acts through its API tokens, never a password"
            ),
        )
        .await;
    }
    if !app.portal.sql.identities_of(user.id).await?.is_empty() {
        return refused(
            &app,
            &viewer,
            format!("{name} signs in with the identity provider; bizrq keeps no password for them"),
        )
        .await;
    }
    if let Err(m) = super::forms::check_new_password(&f.password) {
        return refused(&app, &viewer, m).await;
    }
    let hash = app.portal.hasher.hash(f.password).await?;
    let revoked = app
        .portal
        .sql
        .set_password_hash(user.id, &hash, app.service.now())
        .await?
        .revoked;
    app.audit(
        &viewer.principal,
        action::USER_PASSWORD,
        &user_target(&name),
        None,
        None,
        &format!("password set by an admin; sessions ended, {revoked} API token(s) revoked"),
    )
    .await;
    if Some(user.id) == viewer.principal.user_id {
        // Our own sessions ended with the old password.
        return Ok(Redirect::to("/login").into_response());
    }
    done(&viewer, "/users", format!("password of {name} set")).await
}

/// A user who signs in with the identity provider has no password here.
async fn refuse_if_signs_in_with_provider(app: &AppState, user_id: i64) -> Result<(), PageError> {
    if app.portal.sql.identities_of(user_id).await?.is_empty() {
        return Ok(());
    }
    let provider = app
        .portal
        .identity
        .as_ref()
        .map(|i| i.settings.provider.display_name.clone())
        .unwrap_or_else(|| "your identity provider".into());
    Err(PageError::Forbidden(format!(
        "you sign in with {provider}; bizrq keeps no password for you (change it there)"
    )))
}

/// GET /account/password: the form to change one's own password.
pub async fn password_page(
    State(app): State<AppState>,
    viewer: Viewer,
) -> Result<Response, PageError> {
    let Some(user_id) = viewer.principal.user_id else {
        return Err(PageError::Forbidden(
            "the admin token has no password".into(),
        ));
    };
    refuse_if_signs_in_with_provider(&app, user_id).await?;
    let flash = viewer.take_flash().await;
    Ok(Html(app::accounts::render_password_page(viewer.page(), flash)).into_response())
}

#[derive(Deserialize)]
pub struct ChangePasswordForm {
    current: String,
    new: String,
    confirm: String,
}

/// POST /account/password: a user changes its own password. Limited like
/// a login (the address's bucket, then the failure count per username and
/// address, a wrong current password counting as a failed login); on
/// success every other session of the user ends, its API tokens are
/// revoked, and this session continues under a new id.
pub async fn change_password(
    State(app): State<AppState>,
    viewer: Viewer,
    parts: axum::http::request::Parts,
    Form(f): Form<ChangePasswordForm>,
) -> Result<Response, PageError> {
    let Some(user_id) = viewer.principal.user_id else {
        return Err(PageError::Forbidden(
            "the admin token has no password".into(),
        ));
    };
    refuse_if_signs_in_with_provider(&app, user_id).await?;
    let sql = &app.portal.sql;
    let again = |m: String| {
        let page = app::accounts::render_password_page(viewer.page(), Some(Flash::Error(m)));
        Ok((StatusCode::UNPROCESSABLE_ENTITY, Html(page)).into_response())
    };
    let client = crate::edge::limits::address_key(&client_addr(
        &parts,
        app.portal.config.trust_forwarded_for,
    ));
    let now = crate::util::now_ms();
    if let Err(secs) = app.portal.attempts.attempt(&client, now) {
        return Err(PageError::TooMany(
            format!("Too many password attempts from your address. Try again in {secs} seconds."),
            secs,
        ));
    }
    if f.current.len() > MAX_PASSWORD_BYTES {
        return again("the current password is wrong".into());
    }
    if let Err(m) = super::forms::check_new_password(&f.new) {
        return again(m);
    }
    if f.new != f.confirm {
        return again("the new password and its confirmation differ".into());
    }
    let username = viewer.principal.username.clone();
    sql.add_login_failure(&username, &client, now).await?;
    let recent = sql
        .login_failures(&username, &client, now - super::auth::LOGIN_WINDOW_MS)
        .await?;
    if recent.len() > super::auth::LOGIN_MAX_FAILURES {
        return Err(PageError::TooMany(
            "Too many wrong passwords for this account from your address; try again in 15 minutes."
                .into(),
            (super::auth::LOGIN_WINDOW_MS / 1000) as u64,
        ));
    }
    let user = sql
        .user_by_id(user_id)
        .await?
        .ok_or_else(|| PageError::NotFound("your account is gone".into()))?;
    let verified = app
        .portal
        .hasher
        .verify(f.current, Some(user.password_hash.clone()))
        .await;
    match verified {
        Ok(true) => {}
        Ok(false) => return again("the current password is wrong".into()),
        Err(busy) => {
            sql.clear_login_failure(&username, &client, now).await?;
            return Err(busy.into());
        }
    }
    sql.clear_login_failures(&username, &client).await?;
    let hash = app.portal.hasher.hash(f.new).await?;
    // This session goes on under a new id (created when the response is
    // written); every stored session of the user ends with the old password.
    viewer
        .session
        .cycle_id()
        .await
        .map_err(|e| PageError::Internal(format!("session: {e}")))?;
    let set = sql.set_password_hash(user_id, &hash, now).await?;
    let revoked = set.revoked;
    // This session goes on under the new password's generation.
    viewer
        .session
        .insert(
            crate::store::sessions::CREDENTIAL_GEN_KEY,
            set.credential_gen,
        )
        .await
        .map_err(|e| PageError::Internal(format!("session: {e}")))?;
    app.audit(
        &viewer.principal,
        action::USER_PASSWORD,
        &user_target(&username),
        None,
        None,
        &format!(
            "password changed by the user; other sessions ended, {revoked} API token(s) revoked"
        ),
    )
    .await;
    let tokens = if revoked > 0 {
        format!(" and your {revoked} API token(s) revoked")
    } else {
        String::new()
    };
    done(
        &viewer,
        "/account/password",
        format!("password changed; your other sessions were ended{tokens}"),
    )
    .await
}

#[derive(Deserialize)]
pub struct EmailForm {
    #[serde(default)]
    email: String,
}

/// POST /users/{name}/email (admins): where the user's alerts go ("" for
/// nowhere).
pub async fn set_email(
    State(app): State<AppState>,
    viewer: Viewer,
    Path(name): Path<String>,
    Form(f): Form<EmailForm>,
) -> Result<Response, PageError> {
    viewer.require_admin()?;
    let user = user_named(&app, &name).await?;
    let email = super::forms::parse_email(&f.email)?;
    let by_admin = "alert email address set by an admin";
    change_email(&app, &viewer.principal, user.id, &name, email, by_admin).await?;
    done(&viewer, "/users", format!("email of {name} set")).await
}

#[derive(Deserialize)]
pub struct KubeUsernameForm {
    #[serde(default)]
    kube_username: String,
}

/// POST /users/{name}/kube-username (admins): the username the Kubernetes
/// API server gives this person ("" for none), by hand (a local account, a
/// cluster without OIDC); audited. A sign-in whose claim gives another sets
/// it again.
pub async fn set_kube_username(
    State(app): State<AppState>,
    viewer: Viewer,
    Path(name): Path<String>,
    Form(f): Form<KubeUsernameForm>,
) -> Result<Response, PageError> {
    viewer.require_admin()?;
    let user = user_named(&app, &name).await?;
    let typed = f.kube_username.trim();
    let kube = if typed.is_empty() {
        None
    } else if typed.len() > quota::submitters::MAX_SUBMITTER {
        return refused(
            &app,
            &viewer,
            format!(
                "a Kubernetes username has at most {} bytes here",
                quota::submitters::MAX_SUBMITTER
            ),
        )
        .await;
    } else {
        quota::submitters::submitter(typed)
    };
    if kube == user.kube_username {
        return done(
            &viewer,
            "/users",
            format!("{name}'s Kubernetes username is unchanged"),
        )
        .await;
    }
    match app
        .portal
        .sql
        .set_kube_username(user.id, kube.as_deref())
        .await
    {
        Ok(()) => {}
        Err(StoreError::AlreadyExists(_)) => {
            return refused(
                &app,
                &viewer,
                format!(
                    "another user already has the Kubernetes username {}",
                    kube.unwrap_or_default()
                ),
            )
            .await
        }
        Err(e) => return Err(e.into()),
    }
    app.audit(
        &viewer.principal,
        action::USER_KUBE_USERNAME,
        &user_target(&name),
        Some(json!({"kubeUsername": user.kube_username})),
        Some(json!({"kubeUsername": kube, "source": "hand"})),
        &format!("{name}'s Kubernetes username set by an admin"),
    )
    .await;
    done(
        &viewer,
        "/users",
        format!("{name}'s Kubernetes username set"),
    )
    .await
}

#[derive(Deserialize)]
pub struct RoleForm {
    quota: String,
    #[serde(default)]
    role: Option<String>,
}

/// POST /users/{name}/roles (admins): bind `role` (owner|member) on
/// `quota`, replacing the role the user had there.
pub async fn add_role(
    State(app): State<AppState>,
    viewer: Viewer,
    Path(name): Path<String>,
    Form(f): Form<RoleForm>,
) -> Result<Response, PageError> {
    viewer.require_admin()?;
    let user = user_named(&app, &name).await?;
    let quota = f.quota.trim().to_string();
    let Some(role) = f.role.as_deref().and_then(Role::parse) else {
        return refused(&app, &viewer, "the role must be owner or member".into()).await;
    };
    if let Err(e) = app.service.get(&quota).await {
        return refused(&app, &viewer, e.to_string()).await;
    }
    grant(&app, &viewer.principal, &user, &quota, role).await?;
    done(
        &viewer,
        "/users",
        format!("{name} is now {role} of {quota}"),
    )
    .await
}

/// POST /users/{name}/roles/delete (admins): remove the binding on `quota`.
pub async fn remove_role(
    State(app): State<AppState>,
    viewer: Viewer,
    Path(name): Path<String>,
    Form(f): Form<RoleForm>,
) -> Result<Response, PageError> {
    viewer.require_admin()?;
    let user = user_named(&app, &name).await?;
    let quota = f.quota.trim().to_string();
    let before = app
        .portal
        .sql
        .bindings_of(user.id)
        .await?
        .into_iter()
        .find(|b| b.quota == quota);
    let Some(before) = before else {
        return Err(PageError::NotFound(format!(
            "{name} has no role on {quota}"
        )));
    };
    revoke(&app, &viewer.principal, &user, &quota, before.role).await?;
    done(
        &viewer,
        "/users",
        format!("{name} is no longer {} of {quota}", before.role),
    )
    .await
}

/// Bind `user` as `role` on `quota`, audited (whoever may: the admin page
/// and an owner's quota page both come here).
pub(crate) async fn grant(
    app: &AppState,
    by: &Principal,
    user: &User,
    quota: &str,
    role: Role,
) -> Result<(), PageError> {
    let name = &user.username;
    let before = app
        .portal
        .sql
        .set_binding(user.id, quota, role, app.service.now())
        .await?;
    app.audit(
        by,
        action::ROLE_ADD,
        quota,
        before.map(|r| json!({"user": name, "quota": quota, "role": r.as_str()})),
        Some(json!({"user": name, "quota": quota, "role": role.as_str(), "source": "hand"})),
        &format!("{name} is {role} of {quota}"),
    )
    .await;
    Ok(())
}

/// Like [`grant`], but only if `user`'s role on `quota` is still
/// `expected` (what the caller was allowed to replace); false if it
/// changed meanwhile, and then nothing was written.
pub(crate) async fn grant_replacing(
    app: &AppState,
    by: &Principal,
    user: &User,
    quota: &str,
    role: Role,
    expected: Option<Role>,
) -> Result<bool, PageError> {
    let name = &user.username;
    if !app
        .portal
        .sql
        .set_binding_if(user.id, quota, role, expected, app.service.now())
        .await?
    {
        return Ok(false);
    }
    app.audit(
        by,
        action::ROLE_ADD,
        quota,
        expected.map(|r| json!({"user": name, "quota": quota, "role": r.as_str()})),
        Some(json!({"user": name, "quota": quota, "role": role.as_str(), "source": "hand"})),
        &format!("{name} is {role} of {quota}"),
    )
    .await;
    Ok(true)
}

/// Take `user`'s `role` on `quota` away, audited.
pub(crate) async fn revoke(
    app: &AppState,
    by: &Principal,
    user: &User,
    quota: &str,
    role: Role,
) -> Result<(), PageError> {
    let name = &user.username;
    if !app.portal.sql.remove_binding(user.id, quota, role).await? {
        // Changed since it was read (and checked): nothing is taken away.
        return Err(PageError::Invalid(format!(
            "{name}'s role on {quota} changed meanwhile; look again"
        )));
    }
    app.audit(
        by,
        action::ROLE_REMOVE,
        quota,
        Some(json!({"user": name, "quota": quota, "role": role.as_str(), "source": "hand"})),
        None,
        &format!("{name} is no longer {role} of {quota}"),
    )
    .await;
    Ok(())
}

/// Sets the alert email of `username` (`user_id`) as `actor` asked, audited
/// with before and after when it changed.
pub async fn change_email(
    app: &AppState,
    actor: &Principal,
    user_id: i64,
    username: &str,
    email: Option<&str>,
    detail: &str,
) -> Result<(), PageError> {
    let sql = &app.portal.sql;
    let was = sql.user_email(user_id).await?;
    if was.as_deref() != email {
        sql.set_user_email(user_id, email).await?;
        app.audit(
            actor,
            crate::store::audit::action::USER_EMAIL,
            &crate::service::audit::user_target(username),
            Some(serde_json::json!({ "email": was })),
            Some(serde_json::json!({ "email": email })),
            detail,
        )
        .await;
    }
    Ok(())
}
