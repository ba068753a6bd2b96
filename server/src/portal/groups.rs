//! The group roles page (admins): rules from identity provider groups to
//! roles, kept in the portal beside those of the file
//! (`identity::mapping`). Every rule added or removed is audited and
//! applied at once to everyone linked, from the groups their provider
//! named last; the refresh and each sign-in keep applying them.

use super::auth::Viewer;
use super::PageError;
use crate::edge::AppState;
use crate::identity::mapping::{check_group, Grant, Rule};
use crate::store::audit::action;
use app::groups::{GroupsPage, RuleRow};
use app::layout::Flash;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::Form;
use serde::Deserialize;
use serde_json::json;

fn minutes(secs: u64) -> String {
    match secs {
        s if s % 60 == 0 && s >= 60 => {
            let m = s / 60;
            format!("{m} minute{}", if m == 1 { "" } else { "s" })
        }
        s => format!("{s} seconds"),
    }
}

fn row(r: &Rule, added: String) -> RuleRow {
    RuleRow {
        group: r.group.clone(),
        role: r.grant.role_name().into(),
        quota: r.grant.quota().into(),
        added,
    }
}

async fn page(
    app: &AppState,
    viewer: &Viewer,
    flash: Option<Flash>,
    status: StatusCode,
) -> Result<Response, PageError> {
    let rules = app
        .portal
        .sql
        .group_roles()
        .await?
        .into_iter()
        .map(|r| RuleRow {
            added: format!(
                "{} by {}",
                quota::time::format_when(r.created_at_ms),
                r.created_by
            ),
            group: r.group,
            role: r.role,
            quota: r.quota,
        })
        .collect();
    let ids = app.portal.identity.as_ref();
    let file = ids.and_then(|i| {
        let f = i.file_rules();
        i.settings.group_roles_file.as_ref().map(|_| {
            (
                f.source.clone(),
                f.rules.iter().map(|r| row(r, String::new())).collect(),
            )
        })
    });
    let p = GroupsPage {
        provider: ids.map(|i| i.settings.provider.display_name.clone()),
        groups_claim: ids
            .map(|i| i.settings.provider.claims.groups.clone())
            .unwrap_or_else(|| "groups".into()),
        refresh: ids
            .map(|i| minutes(i.settings.refresh_every.as_secs()))
            .unwrap_or_default(),
        rules,
        file,
    };
    Ok((
        status,
        Html(app::groups::render_groups_page(viewer.page(), p, flash)),
    )
        .into_response())
}

/// GET /groups (admins).
pub async fn show(State(app): State<AppState>, viewer: Viewer) -> Result<Response, PageError> {
    viewer.require_admin()?;
    let flash = viewer.take_flash().await;
    page(&app, &viewer, flash, StatusCode::OK).await
}

#[derive(Deserialize)]
pub struct RuleForm {
    group: String,
    role: String,
    #[serde(default)]
    quota: String,
    #[serde(default)]
    confirm: String,
}

fn parse(f: &RuleForm) -> Result<Rule, String> {
    let group = check_group(&f.group)?.to_string();
    let grant = Grant::parse(f.role.trim(), &f.quota)?;
    Ok(Rule { group, grant })
}

/// Applies the rules again to everyone linked, in the background (a
/// thousand people are a thousand reads; the page does not wait).
fn reapply(app: &AppState, when: &'static str) {
    if let Some(ids) = app.portal.identity.clone() {
        tokio::spawn(async move {
            if let Err(e) = ids.reapply_all(when).await {
                tracing::warn!(error = %e, "could not apply the group roles after a change");
            }
        });
    }
}

/// POST /groups (admins): a new rule.
pub async fn add(
    State(app): State<AppState>,
    viewer: Viewer,
    Form(f): Form<RuleForm>,
) -> Result<Response, PageError> {
    viewer.require_admin()?;
    let refused = |m: String| {
        page(
            &app,
            &viewer,
            Some(Flash::Error(m)),
            StatusCode::UNPROCESSABLE_ENTITY,
        )
    };
    let rule = match parse(&f) {
        Ok(r) => r,
        Err(m) => return refused(m).await,
    };
    if let Grant::On { quota, .. } = &rule.grant {
        if let Err(e) = app.service.get_for_view(quota).await {
            return refused(e.to_string()).await;
        }
    }
    let (role, quota) = (rule.grant.role_name(), rule.grant.quota());
    let added = app
        .portal
        .sql
        .add_group_role(
            &rule.group,
            role,
            quota,
            viewer.principal.actor(),
            app.service.now(),
        )
        .await?;
    let text = format!(
        "members of group {} are {}",
        rule.group,
        crate::identity::grant_text(&rule.grant)
    );
    if !added {
        return refused(format!("there is such a rule already: {text}")).await;
    }
    app.audit(
        &viewer.principal,
        action::GROUP_ROLE_ADD,
        "group-roles",
        None,
        Some(json!({"group": rule.group, "role": role, "quota": quota})),
        &text,
    )
    .await;
    reapply(&app, "after a rule was added");
    viewer
        .set_flash(Flash::Ok(format!("rule added: {text}")))
        .await;
    Ok(Redirect::to("/groups").into_response())
}

/// POST /groups/delete (admins): a rule removed (with its box ticked).
pub async fn remove(
    State(app): State<AppState>,
    viewer: Viewer,
    Form(f): Form<RuleForm>,
) -> Result<Response, PageError> {
    viewer.require_admin()?;
    if f.confirm != "yes" {
        return Err(PageError::Invalid(
            "removing a rule needs confirming: tick the box next to the button".into(),
        ));
    }
    let rule = parse(&f).map_err(PageError::Invalid)?;
    let (role, quota) = (rule.grant.role_name(), rule.grant.quota());
    if !app
        .portal
        .sql
        .remove_group_role(&rule.group, role, quota)
        .await?
    {
        return Err(PageError::NotFound(
            "there is no such rule (any more)".into(),
        ));
    }
    let text = format!(
        "members of group {} are no longer {} by this rule",
        rule.group,
        crate::identity::grant_text(&rule.grant)
    );
    app.audit(
        &viewer.principal,
        action::GROUP_ROLE_REMOVE,
        "group-roles",
        Some(json!({"group": rule.group, "role": role, "quota": quota})),
        None,
        &text,
    )
    .await;
    reapply(&app, "after a rule was removed");
    viewer
        .set_flash(Flash::Ok(format!("rule removed: {text}")))
        .await;
    Ok(Redirect::to("/groups").into_response())
}
