//! Account pages: login, users and roles (admins), personal API tokens.

use crate::layout::{Flash, Viewer};

#[cfg(feature = "ssr")]
use crate::layout::{document, CsrfField, Layout, Section};
#[cfg(feature = "ssr")]
use leptos::prelude::*;

/// A user as the users page lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserRow {
    pub username: String,
    pub is_admin: bool,
    pub disabled: bool,
    pub created: String,
    /// (quota, role) pairs.
    pub bindings: Vec<(String, String)>,
    /// The viewer itself: it may not disable itself or drop its own admin.
    pub is_self: bool,
    /// Where its alerts are emailed ("" for none).
    pub email: String,
}

/// A personal API token as the tokens page lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenRow {
    pub id: i64,
    pub name: String,
    pub created: String,
    pub last_used: Option<String>,
    pub revoked: Option<String>,
}

/// The login page. `csrf` is the anonymous session's token; `next` where
/// to go after logging in.
#[cfg(feature = "ssr")]
pub fn render_login_page(
    csrf: String,
    username: String,
    next: String,
    flash: Option<Flash>,
) -> String {
    document(move || {
        view! {
            <Layout viewer=None title="Log in".into() section=Section::None flash=flash>
                <form class="card narrow" method="post" action="/login">
                    <CsrfField csrf=csrf/>
                    <input type="hidden" name="next" value=next/>
                    <label>"Username"<input name="username" value=username autocomplete="username" required autofocus/></label>
                    <label>"Password"<input name="password" type="password" autocomplete="current-password" required/></label>
                    <button type="submit">"Log in"</button>
                </form>
            </Layout>
        }
    })
}

#[cfg(feature = "ssr")]
#[component]
fn UserActions(u: UserRow, csrf: String) -> impl IntoView {
    let base = format!("/users/{}", u.username);
    let (disable_label, disable_value) = if u.disabled {
        ("Enable", "false")
    } else {
        ("Disable", "true")
    };
    let (admin_label, admin_value) = if u.is_admin {
        ("Revoke admin", "false")
    } else {
        ("Make admin", "true")
    };
    let self_lock = u.is_self;
    // Disabling and making admin ask for a tick first (the browser holds the
    // form until it is ticked; the server refuses without it).
    let confirm = |on: bool| {
        on.then(|| view! { <label class="check"><input type="checkbox" name="confirm" value="yes" required/>"sure"</label> })
    };
    let summary = format!("Manage {}", u.username);
    // Folded: one "Manage" per row instead of a wall of buttons; a native
    // <details>, so it opens without JavaScript.
    view! {
        <details class="manage">
        <summary>{summary}</summary>
        <div class="actions">
            <form method="post" action=format!("{base}/disabled")>
                <CsrfField csrf=csrf.clone()/>
                <input type="hidden" name="disabled" value=disable_value/>
                {confirm(!u.disabled && !self_lock)}
                <button type="submit" disabled=self_lock>{disable_label}</button>
            </form>
            <form method="post" action=format!("{base}/admin")>
                <CsrfField csrf=csrf.clone()/>
                <input type="hidden" name="admin" value=admin_value/>
                {confirm(!u.is_admin && !self_lock)}
                <button type="submit" disabled=self_lock>{admin_label}</button>
            </form>
            <form method="post" action=format!("{base}/password")>
                <CsrfField csrf=csrf.clone()/>
                <label>"New password"<input name="password" type="password" placeholder="at least 12 characters" autocomplete="new-password" required minlength="12"/></label>
                <button type="submit">"Set password"</button>
            </form>
            <form method="post" action=format!("{base}/email")>
                <CsrfField csrf=csrf.clone()/>
                <label>"Email for alerts"<input name="email" type="email" placeholder="name@example.com" value=u.email.clone()/></label>
                <button type="submit">"Set email"</button>
            </form>
            <form method="post" action=format!("{base}/roles")>
                <CsrfField csrf=csrf/>
                <label>"Quota"<input name="quota" placeholder="e.g. nlp" required/></label>
                <label>"Role"<select name="role">
                    <option value="member">"member"</option>
                    <option value="owner">"owner"</option>
                </select></label>
                <button type="submit">"Bind"</button>
            </form>
        </div>
        </details>
    }
}

/// The users and roles page (admins).
#[cfg(feature = "ssr")]
pub fn render_users_page(viewer: Viewer, users: Vec<UserRow>, flash: Option<Flash>) -> String {
    let csrf = viewer.csrf.clone();
    let rows = users
        .into_iter()
        .map(|u| {
            let csrf = csrf.clone();
            let unbind = u
                .bindings
                .iter()
                .map(|(quota, role)| {
                    let action = format!("/users/{}/roles/delete", u.username);
                    view! {
                        <form class="binding" method="post" action=action>
                            <CsrfField csrf=csrf.clone()/>
                            <input type="hidden" name="quota" value=quota.clone()/>
                            <span class=format!("role {role}")>{role.clone()}</span>
                            " "<a href=format!("/tree#{quota}")>{quota.clone()}</a>
                            <button type="submit" class="link" title="remove this binding">"×"</button>
                        </form>
                    }
                })
                .collect_view();
            let status = match (u.disabled, u.is_admin) {
                (true, _) => "disabled",
                (false, true) => "admin",
                (false, false) => "active",
            };
            let (disabled, username) = (u.disabled, u.username.clone());
            let sort_name = username.clone();
            let created = u.created.clone();
            view! {
                <tr class:disabled=disabled>
                    <td class="name" data-sort-value=sort_name>{username}" "<span class=format!("badge {status}")>{status}</span></td>
                    <td data-label="Roles">{unbind}</td>
                    <td class="num" data-label="Created">{created}</td>
                    <td><UserActions u=u csrf=csrf/></td>
                </tr>
            }
        })
        .collect_view();
    document(move || {
        view! {
            <Layout viewer=Some(viewer) title="Users and roles".into() section=Section::Users flash=flash>
                <form class="card inline" method="post" action="/users">
                    <CsrfField csrf=csrf/>
                    <label>"Username"<input name="username" required pattern="[a-z0-9][a-z0-9._\\-]{0,63}" title="lower-case letters, digits, '.', '_' and '-'"/></label>
                    <label>"Password"<input name="password" type="password" required minlength="12" autocomplete="new-password"/></label>
                    <label class="check"><input type="checkbox" name="admin" value="true"/>"admin"</label>
                    <button type="submit">"Create user"</button>
                </form>
                <p class="hint">"A binding gives a role on a quota and its whole subtree: "<b>"owner"</b>" manages the children (within the quota's hard, never the quota's own hard), "<b>"member"</b>" reads."</p>
                <bizrq_islands::SortTable>
                <table class="users">
                    <thead><tr><th data-sort="text">"User"</th><th data-sort="text">"Roles"</th><th data-sort="text" data-sort-first="desc">"Created"</th><th>"Actions"</th></tr></thead>
                    <tbody>{rows}</tbody>
                </table>
                </bizrq_islands::SortTable>
            </Layout>
        }
    })
}

/// The personal API tokens page. `new_token` is (name, token) right after
/// creation: the only time the token is shown.
#[cfg(feature = "ssr")]
pub fn render_tokens_page(
    viewer: Viewer,
    tokens: Vec<TokenRow>,
    new_token: Option<(String, String)>,
    flash: Option<Flash>,
) -> String {
    let csrf = viewer.csrf.clone();
    let shown = new_token.map(|(name, token)| {
        view! {
            <div class="card created">
                <p>"New token "<b>{name}</b>" — copy it now, it is not shown again:"</p>
                <pre class="token">{token}</pre>
                <p class="hint">"Use it as "<code>"Authorization: Bearer TOKEN"</code>" on the JSON API (/api/v1/…)."</p>
            </div>
        }
    });
    let body = if tokens.is_empty() {
        view! { <p class="empty">"No tokens yet."</p> }.into_any()
    } else {
        let rows = tokens
            .into_iter()
            .map(|t| {
                let state = match &t.revoked {
                    Some(at) => {
                        view! { <span class="badge disabled">{format!("revoked {at}")}</span> }
                            .into_any()
                    }
                    None => view! {
                        <form method="post" action=format!("/tokens/{}/revoke", t.id)>
                            <CsrfField csrf=csrf.clone()/>
                            <label class="check"><input type="checkbox" name="confirm" value="yes" required/>"sure"</label>
                            <button type="submit">"Revoke"</button>
                        </form>
                    }
                    .into_any(),
                };
                view! {
                    <tr class:disabled=t.revoked.is_some()>
                        <td class="name">{t.name}</td>
                        <td class="num" data-label="Created">{t.created}</td>
                        <td class="num" data-label="Last used">{t.last_used.unwrap_or_else(|| "never".into())}</td>
                        <td class="wide">{state}</td>
                    </tr>
                }
            })
            .collect_view();
        view! {
            <table class="tokens cards">
                <thead><tr><th>"Name"</th><th>"Created"</th><th>"Last used"</th><th></th></tr></thead>
                <tbody>{rows}</tbody>
            </table>
        }
        .into_any()
    };
    document(move || {
        view! {
            <Layout viewer=Some(viewer) title="API tokens".into() section=Section::Tokens flash=flash>
                {shown}
                <form class="card inline" method="post" action="/tokens">
                    <CsrfField csrf=csrf/>
                    <label>"Name"<input name="name" required maxlength="100" placeholder="e.g. ci-pipeline"/></label>
                    <button type="submit">"Create token"</button>
                </form>
                <p class="hint">"A token acts as you, with your roles, on the JSON API. Revoke one you no longer use."</p>
                {body}
            </Layout>
        }
    })
}

/// The form to change one's own password.
#[cfg(feature = "ssr")]
pub fn render_password_page(viewer: Viewer, flash: Option<Flash>) -> String {
    let csrf = viewer.csrf.clone();
    document(move || {
        view! {
            <Layout viewer=Some(viewer) title="Change password".into() section=Section::None flash=flash>
                <form class="card narrow" method="post" action="/account/password">
                    <CsrfField csrf=csrf/>
                    <label>"Current password"<input name="current" type="password" autocomplete="current-password" required/></label>
                    <label>"New password"<input name="new" type="password" autocomplete="new-password" required minlength="12"/></label>
                    <label>"New password again"<input name="confirm" type="password" autocomplete="new-password" required minlength="12"/></label>
                    <button type="submit">"Change password"</button>
                </form>
                <p class="hint">"A new password ends your other sessions and revokes your API tokens (anyone who knew the old password may have made them); this session goes on."</p>
            </Layout>
        }
    })
}
