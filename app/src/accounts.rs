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
    /// (quota, role, given by a group) triples.
    pub bindings: Vec<(String, String, bool)>,
    /// The identity provider the user signs in with (None: a password).
    pub signs_in_with: Option<String>,
    /// An admin because a group makes them one (not by hand).
    pub admin_by_group: bool,
    /// The username the Kubernetes API server gives this person ("": none).
    pub kube_username: String,
    /// A service account (tokens only, managed here).
    pub is_service: bool,
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
    /// When it stops working ("never" when it does not).
    pub expires: String,
    /// The quotas it is held to ("" for all its user's roles).
    pub scope: String,
}

/// Whose tokens a tokens page shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokensOf {
    /// The viewer's own.
    Me,
    /// A service account's, managed by an admin.
    Service(String),
}

impl TokensOf {
    /// Where the page's forms post.
    pub fn base(&self) -> String {
        match self {
            TokensOf::Me => "/tokens".into(),
            TokensOf::Service(name) => format!("/users/{name}/tokens"),
        }
    }
}

/// How people may sign in, as the login page offers it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SignInOptions {
    /// The identity provider's name, when one is configured: "Sign in with …".
    pub provider: Option<String>,
    /// Passwords only for break-glass accounts: the password form is folded
    /// under a line that says so.
    pub break_glass_only: bool,
}

/// The login page. `csrf` is the anonymous session's token; `next` where
/// to go after logging in.
#[cfg(feature = "ssr")]
pub fn render_login_page(
    csrf: String,
    username: String,
    next: String,
    flash: Option<Flash>,
    options: SignInOptions,
) -> String {
    document(move || {
        let provider = options.provider.clone().map(|name| {
            let label = format!("Sign in with {name}");
            view! {
                <form class="card narrow sign-in-with" method="post" action="/login/oidc">
                    <CsrfField csrf=csrf.clone()/>
                    <input type="hidden" name="next" value=next.clone()/>
                    <button type="submit" class="primary">{label}</button>
                    <p class="hint">"You are sent to your company's sign-in page and brought back here."</p>
                </form>
            }
        });
        let password_form = view! {
            <form class="card narrow" method="post" action="/login">
                <CsrfField csrf=csrf.clone()/>
                <input type="hidden" name="next" value=next.clone()/>
                <label>"Username"<input name="username" value=username autocomplete="username" required autofocus=options.provider.is_none()/></label>
                <label>"Password"<input name="password" type="password" autocomplete="current-password" required/></label>
                <button type="submit">"Log in"</button>
            </form>
        };
        let passwords = match (options.provider.is_some(), options.break_glass_only) {
            (_, true) => view! {
                <details class="card narrow break-glass">
                    <summary>"Break-glass sign-in (local admin account)"</summary>
                    <p class="hint">"Passwords are turned off for everyone else."</p>
                    {password_form}
                </details>
            }
            .into_any(),
            (true, false) => view! {
                <p class="narrow or">"or with a bizrq password"</p>
                {password_form}
            }
            .into_any(),
            (false, false) => password_form.into_any(),
        };
        view! {
            <Layout viewer=None title="Log in".into() section=Section::None flash=flash>
                {provider}
                {passwords}
            </Layout>
        }
    })
}

/// After a sign-in through the identity provider: the browser arrived from
/// the provider's site, so it does not send the SameSite=Strict session
/// cookie with a redirect from here; this page moves it on (a refresh
/// without scripts, and a link) as a navigation of bizrq's own, which does.
#[cfg(feature = "ssr")]
pub fn render_continue_page(username: &str, next: &str) -> String {
    use crate::layout::escape_text;
    let (u, n) = (escape_text(username), escape_text(next));
    format!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta http-equiv=\"refresh\" content=\"0;url={n}\">\
         <title>Signed in · bizrq</title><link rel=\"stylesheet\" href=\"/style.css\"></head>\
         <body><header><a class=\"brand\" href=\"/\">bizrq</a></header><main>\
         <h1 class=\"page-title\">Signed in</h1>\
         <p class=\"card narrow\">Signed in as <strong>{u}</strong>. <a href=\"{n}\">Continue</a></p>\
         </main></body></html>"
    )
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
            {(u.signs_in_with.is_none() && !u.is_service).then(|| view! {
                <form method="post" action=format!("{base}/password")>
                    <CsrfField csrf=csrf.clone()/>
                    <label>"New password"<input name="password" type="password" placeholder="at least 12 characters" autocomplete="new-password" required minlength="12"/></label>
                    <button type="submit">"Set password"</button>
                </form>
            })}
            <form method="post" action=format!("{base}/kube-username")>
                <CsrfField csrf=csrf.clone()/>
                <label>"Kubernetes username"<input name="kube_username" placeholder="e.g. oidc:alice@example.com" value=u.kube_username.clone() maxlength="128"/></label>
                <button type="submit">"Set"</button>
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
                .map(|(quota, role, by_group)| {
                    let action = format!("/users/{}/roles/delete", u.username);
                    let from = by_group.then(|| view! { " "<span class="hint" title="given by a group of the identity provider; it comes back at the next refresh unless the group or the rule changes">"(group)"</span> });
                    view! {
                        <form class="binding" method="post" action=action>
                            <CsrfField csrf=csrf.clone()/>
                            <input type="hidden" name="quota" value=quota.clone()/>
                            <span class=format!("role {role}")>{role.clone()}</span>
                            " "<a href=format!("/tree#{quota}")>{quota.clone()}</a>
                            {from}
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
            let by_group = (u.is_admin && u.admin_by_group).then(|| view! { " "<span class="hint">"(group)"</span> });
            let sso = u.signs_in_with.clone().map(|p| view! { " "<span class="badge sso" title=format!("signs in with {p}; bizrq keeps no password")>"SSO"</span> });
            let service = u.is_service.then(|| {
                let href = format!("/users/{}/tokens", u.username);
                view! { " "<span class="badge service">"service account"</span>" "<a href=href>"tokens"</a> }
            });
            let kube = (!u.kube_username.is_empty()).then(|| {
                let k = u.kube_username.clone();
                view! { <br/><span class="hint" title="the Kubernetes username of this person">"k8s: "{k}</span> }
            });
            view! {
                <tr class:disabled=disabled>
                    <td class="name" data-sort-value=sort_name>{username}" "<span class=format!("badge {status}")>{status}</span>{by_group}{sso}{service}{kube}</td>
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
                    <CsrfField csrf=csrf.clone()/>
                    <label>"Username"<input name="username" required pattern="[a-z0-9][a-z0-9._@\\-]{0,63}" title="lower-case letters, digits, '.', '_', '-' and one '@'"/></label>
                    <label>"Password"<input name="password" type="password" required minlength="12" autocomplete="new-password"/></label>
                    <label class="check"><input type="checkbox" name="admin" value="true"/>"admin"</label>
                    <button type="submit">"Create user"</button>
                </form>
                <form class="card inline" method="post" action="/users/service-accounts">
                    <CsrfField csrf=csrf/>
                    <label>"Service account"<input name="username" required pattern="[a-z0-9][a-z0-9._@\\-]{0,63}" placeholder="e.g. ci-deployer"/></label>
                    <button type="submit">"Create service account"</button>
                </form>
                <p class="hint">"A binding gives a role on a quota and its whole subtree: "<b>"owner"</b>" manages the children (within the quota's hard, never the quota's own hard), "<b>"member"</b>" reads. Roles marked (group) come from the identity provider's groups: "<a href="/groups">"group roles"</a>"."</p>
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

/// The API tokens page (one's own, or a service account's). `new_token`
/// is (name, token) right after creation: the only time the token is shown.
#[cfg(feature = "ssr")]
pub fn render_tokens_page(
    viewer: Viewer,
    of: TokensOf,
    tokens: Vec<TokenRow>,
    new_token: Option<(String, String)>,
    flash: Option<Flash>,
) -> String {
    let csrf = viewer.csrf.clone();
    let base = of.base();
    let (title, section, whose) = match &of {
        TokensOf::Me => (
            "API tokens".to_string(),
            Section::Tokens,
            "you, with your roles".to_string(),
        ),
        TokensOf::Service(name) => (
            format!("API tokens of the service account {name}"),
            Section::Users,
            format!("the service account {name}, with its roles"),
        ),
    };
    let shown = new_token.map(|(name, token)| {
        view! {
            <div class="card created">
                <p>"New token "<b>{name}</b>" — copy it now, it is not shown again:"</p>
                <pre class="token">{token}</pre>
                <p class="hint">"Use it as "<code>"Authorization: Bearer TOKEN"</code>" on the JSON API (/api/v1/…), e.g. "<code>"curl -H \"Authorization: Bearer $TOKEN\" …/api/v1/quotas"</code>"."</p>
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
                        <form method="post" action=format!("{base}/{}/revoke", t.id)>
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
                        <td class="num" data-label="Expires">{t.expires}</td>
                        <td data-label="Scope">{if t.scope.is_empty() { "all its roles".to_string() } else { t.scope }}</td>
                        <td class="wide">{state}</td>
                    </tr>
                }
            })
            .collect_view();
        view! {
            <table class="tokens cards">
                <thead><tr><th>"Name"</th><th>"Created"</th><th>"Last used"</th><th>"Expires"</th><th>"Scope"</th><th></th></tr></thead>
                <tbody>{rows}</tbody>
            </table>
        }
        .into_any()
    };
    document(move || {
        view! {
            <Layout viewer=Some(viewer) title=title section=section flash=flash>
                {shown}
                <form class="card inline" method="post" action=base.clone()>
                    <CsrfField csrf=csrf/>
                    <label>"Name"<input name="name" required maxlength="100" placeholder="e.g. ci-pipeline"/></label>
                    <label>"Expires in"<select name="expires_days">
                        <option value="7">"7 days"</option>
                        <option value="30">"30 days"</option>
                        <option value="90" selected>"90 days"</option>
                        <option value="365">"a year"</option>
                        <option value="never">"never"</option>
                    </select></label>
                    <label>"Only on quotas"<input name="scope" maxlength="2000" placeholder="e.g. nlp, cv (empty: all)"/></label>
                    <button type="submit">"Create token"</button>
                </form>
                <p class="hint">{format!("A token acts as {whose}, on the JSON API; held to some quotas, it acts only on their subtrees (and never as an admin). Revoke one you no longer use.")}</p>
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
