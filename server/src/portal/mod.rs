//! The portal's accounts and authorisation, and its pages.
//!
//! - [`crate::authz`]: who may do what (pure functions over the quota tree;
//!   below the edges, the JSON API reads the same table).
//! - [`auth`]: who is asking: [`authz::Principal`] from a bearer token or a
//!   session, the page extractor [`auth::Viewer`], login and logout, login
//!   rate limiting, CSRF.
//! - [`audit`]: the audit page and CSV export (appending: `service::audit`).
//! - [`transfers`]: transfer pages and JSON API, authorised and audited.
//! - [`quotas`]: overview, tree, quota detail, create / edit / delete forms.
//! - [`accounts`]: users and roles; [`tokens`]: API tokens of people and
//!   of service accounts.
//! - [`live`]: what the islands fetch to redraw in place (the tree's rows
//!   under a quota, the overview's changing parts).
//! - [`oidc`]: sign-in with the company's identity provider (the code
//!   flow's start and callback); [`groups`]: the rules from its groups to
//!   roles (admins).
//!
//! The portal's tables always live in SQL ([`SqlStore`]), also in cluster
//! mode where the quota objects live in the cluster.

pub mod accounts;
pub mod alerts;
pub mod audit;
pub mod auth;
pub mod budgets;
pub mod efficiency;
pub mod export;
pub mod forms;
pub mod frame;
pub mod groups;
pub mod guards;
pub mod live;
pub mod oidc;
pub mod prices;
pub mod quotas;
pub mod refusal;
pub mod reports;
pub mod scope;
pub mod shares;
pub mod tokens;
pub mod transfers;
pub mod workloads;

// Tests and callers knew them here; the permissions table sits below the edges.
use crate::edge::limits;
use crate::edge::state::Portal;

use crate::edge::AppState;
use crate::store::sessions::SqlSessionStore;
use crate::store::sql::SqlStore;
use crate::store::StoreError;
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;
use tower_sessions::cookie::SameSite;
use tower_sessions::{Expiry, SessionManagerLayer};

/// The username of the account created on first start.
pub const BOOTSTRAP_ADMIN: &str = "admin";

impl Portal {
    /// tower-sessions over our SQL store: an HttpOnly, SameSite=Strict
    /// cookie holding only the session id, ended after `session_idle`.
    pub fn session_layer(&self) -> SessionManagerLayer<SqlSessionStore> {
        let idle = time::Duration::seconds(self.config.session_idle.as_secs() as i64);
        SessionManagerLayer::new(SqlSessionStore::new(self.sql.clone()))
            .with_name(auth::SESSION_COOKIE)
            .with_http_only(true)
            .with_same_site(SameSite::Strict)
            .with_secure(self.config.secure_cookies)
            .with_path("/")
            .with_expiry(Expiry::OnInactivity(idle))
    }
}

/// The portal's pages and forms (state-changing ones are POST, CSRF-checked
/// by [`auth::require_csrf`] on the whole HTTP router).
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/", get(quotas::overview))
        .route("/tree", get(quotas::tree))
        .route("/tree/rows", get(live::tree_rows))
        .route("/workloads", get(workloads::mine))
        .route("/quotas/{name}", get(quotas::detail))
        .route("/quotas/{name}/charts", get(quotas::charts_page))
        .route("/quotas/{name}/shares", get(shares::page))
        .route(
            "/quotas/{name}/children/new",
            get(quotas::new_child_form).post(quotas::create_child),
        )
        .route(
            "/quotas/{name}/edit",
            get(quotas::edit_page).post(quotas::edit),
        )
        .route("/quotas/{name}/delete", post(quotas::delete))
        .route("/quotas/{name}/members", post(quotas::add_member))
        .route("/quotas/{name}/members/delete", post(quotas::remove_member))
        .route("/login", get(auth::login_page).post(auth::login))
        .route("/logout", post(auth::logout))
        .route("/login/oidc", post(oidc::start))
        .route("/login/oidc/callback", get(oidc::callback))
        .route("/groups", get(groups::show).post(groups::add))
        .route("/groups/delete", post(groups::remove))
        .route("/users", get(accounts::users).post(accounts::create_user))
        .route("/users/{name}/disabled", post(accounts::set_disabled))
        .route("/users/{name}/admin", post(accounts::set_admin))
        .route("/users/{name}/password", post(accounts::set_password))
        .route("/users/{name}/email", post(accounts::set_email))
        .route(
            "/users/{name}/kube-username",
            post(accounts::set_kube_username),
        )
        .route("/users/{name}/roles", post(accounts::add_role))
        .route("/users/{name}/roles/delete", post(accounts::remove_role))
        .route("/tokens", get(tokens::mine).post(tokens::create_mine))
        .route("/tokens/{id}/revoke", post(tokens::revoke_mine))
        .route(
            "/users/service-accounts",
            post(tokens::create_service_account),
        )
        .route(
            "/users/{name}/tokens",
            get(tokens::of_service).post(tokens::create_for_service),
        )
        .route(
            "/users/{name}/tokens/{id}/revoke",
            post(tokens::revoke_for_service),
        )
        .route("/alerts", get(alerts::page))
        .route("/alerts.csv", get(export::alerts))
        .route("/tree.csv", get(export::tree))
        .route("/alerts/{id}/ack", post(alerts::ack))
        .route("/alerts/quiet", post(alerts::quiet_many))
        .route("/alerts/{id}/snooze", post(alerts::snooze))
        .route(
            "/quotas/{name}/alerts",
            get(alerts::rules_page).post(alerts::save_rule),
        )
        .route(
            "/account",
            get(alerts::account_page).post(alerts::save_account),
        )
        .route(
            "/account/password",
            get(accounts::password_page).post(accounts::change_password),
        )
        .route("/audit", get(audit::page))
        .route("/prices", get(prices::page))
        .route("/reports", get(reports::page))
        .route("/reports.csv", get(reports::csv))
        .route("/audit.csv", get(audit::csv))
        .merge(transfers::pages())
}

/// On first start (no user at all), create the admin account with the given
/// password, or a generated one that is returned to be shown once. Another
/// replica creating it at the same time wins quietly.
pub async fn bootstrap_admin(
    sql: &SqlStore,
    password: Option<&str>,
    now_ms: i64,
) -> anyhow::Result<Option<String>> {
    if sql.count_users().await? > 0 {
        return Ok(None);
    }
    let (password, generated) = match password.filter(|p| !p.is_empty()) {
        Some(p) => (p.to_string(), None),
        None => {
            let p = crate::util::hex(&rand::random::<[u8; 12]>());
            (p.clone(), Some(p))
        }
    };
    let hash = auth::hash_password(password).await?;
    match sql.create_user(BOOTSTRAP_ADMIN, &hash, true, now_ms).await {
        Ok(user) => {
            let entry = crate::store::audit::entry(
                now_ms,
                crate::authz::SYSTEM_ACTOR,
                crate::store::audit::action::USER_CREATE,
                &crate::service::audit::user_target(BOOTSTRAP_ADMIN),
                None,
                Some(crate::service::audit::user_json(&user)),
                "bootstrap admin on first start",
            );
            sql.append_audit(&entry).await?;
            Ok(generated)
        }
        Err(StoreError::AlreadyExists(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Deletes expired sessions, old login failures, browsers and addresses
/// no longer trusted, sign-ins never finished and ID tokens expired, every
/// `every`.
pub fn spawn_janitor(sql: Arc<SqlStore>, every: Duration) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        loop {
            tick.tick().await;
            let now = crate::util::now_ms();
            match sql.delete_expired_sessions(now).await {
                Ok(n) if n > 0 => tracing::debug!(sessions = n, "expired sessions deleted"),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "could not delete expired sessions"),
            }
            if let Err(e) = sql.prune_login_failures(now - auth::LOGIN_WINDOW_MS).await {
                tracing::warn!(error = %e, "could not prune login failures");
            }
            if let Err(e) = sql.prune_login_trust(now - auth::DEVICE_TRUST_MS).await {
                tracing::warn!(error = %e, "could not forget old browsers and addresses");
            }
            if let Err(e) = sql.prune_sign_ins(now - oidc::FLOW_TTL_MS, now).await {
                tracing::warn!(error = %e, "could not forget old sign-ins");
            }
        }
    })
}

/// Errors of the pages: one variant, one status, shown as a small page.
#[derive(Debug, thiserror::Error)]
pub enum PageError {
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Invalid(String),
    /// 429: too many attempts; retry after so many seconds.
    #[error("{0}")]
    TooMany(String, u64),
    /// 503: busy (password hashing); retry after so many seconds.
    #[error("{0}")]
    Busy(String, u64),
    #[error("{0}")]
    Internal(String),
    /// A refusal of the service layer, coded by its one table
    /// (`edge::status_of`, docs/errors.md).
    #[error(transparent)]
    Service(crate::service::ServiceError),
}

impl From<limits::Busy> for PageError {
    fn from(e: limits::Busy) -> Self {
        PageError::Busy(e.to_string(), limits::BUSY_RETRY_SECS)
    }
}

impl From<crate::heavy::Refused> for PageError {
    fn from(e: crate::heavy::Refused) -> Self {
        PageError::TooMany(e.to_string(), crate::heavy::RETRY_SECS)
    }
}

impl From<crate::heavy::Failed> for PageError {
    fn from(e: crate::heavy::Failed) -> Self {
        PageError::Internal(e.to_string())
    }
}

impl From<StoreError> for PageError {
    fn from(e: StoreError) -> Self {
        PageError::Internal(e.to_string())
    }
}

impl From<crate::service::ServiceError> for PageError {
    fn from(e: crate::service::ServiceError) -> Self {
        match e {
            crate::service::ServiceError::Unavailable(m) => {
                PageError::Busy(m, limits::BUSY_RETRY_SECS)
            }
            crate::service::ServiceError::Internal(m) => PageError::Internal(m),
            e => PageError::Service(e),
        }
    }
}

/// What an error page said, for drawing it again with the navigation.
#[derive(Clone, Debug)]
pub struct ErrorPage {
    pub status: StatusCode,
    pub message: String,
}

/// Any other URL: a page that says so (the JSON API answers in JSON).
pub async fn no_such_page(uri: axum::http::Uri) -> Response {
    if uri.path().starts_with("/api/") {
        return crate::edge::ApiError::Service(crate::service::ServiceError::NotFound(format!(
            "no API at {}",
            uri.path()
        )))
        .into_response();
    }
    PageError::NotFound(format!("there is no page at {}", uri.path())).into_response()
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let (status, message) = match &self {
            PageError::Forbidden(m) => (StatusCode::FORBIDDEN, m.clone()),
            PageError::NotFound(m) => (StatusCode::NOT_FOUND, m.clone()),
            PageError::Invalid(m) => (StatusCode::UNPROCESSABLE_ENTITY, m.clone()),
            PageError::TooMany(m, _) => (StatusCode::TOO_MANY_REQUESTS, m.clone()),
            PageError::Busy(m, _) => (StatusCode::SERVICE_UNAVAILABLE, m.clone()),
            PageError::Service(e) => (crate::edge::status_of(e).0, e.to_string()),
            PageError::Internal(m) => {
                tracing::error!(error = %m, "portal internal error");
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal error; see the bizrq logs".to_string(),
                )
            }
        };
        let mut resp = (
            status,
            Html(frame::error_page(status, message.clone(), None)),
        )
            .into_response();
        // Drawn again with the navigation when someone is logged in
        // (`auth::error_pages_with_navigation`).
        resp.extensions_mut().insert(ErrorPage { status, message });
        let retry = match &self {
            PageError::TooMany(_, secs) | PageError::Busy(_, secs) => Some(*secs),
            PageError::Service(e) => e.retry_after(),
            _ => None,
        };
        if let Some(secs) = retry {
            resp.headers_mut()
                .insert(axum::http::header::RETRY_AFTER, secs.into());
        }
        resp
    }
}
