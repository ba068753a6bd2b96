//! The group roles page (admins): which groups of the identity provider
//! give which role, the rules kept here (editable) and those of the file
//! (read-only).

use crate::layout::{Flash, Viewer};

#[cfg(feature = "ssr")]
use crate::layout::{document, CsrfField, Layout, Section};
#[cfg(feature = "ssr")]
use leptos::prelude::*;

/// A rule as the page lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleRow {
    pub group: String,
    /// `admin`, `owner` or `member`.
    pub role: String,
    /// "" for admin.
    pub quota: String,
    /// Who added it and when ("" for the file's).
    pub added: String,
}

/// What the page shows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupsPage {
    /// The provider's name; None when none is configured.
    pub provider: Option<String>,
    /// The claim groups are read from.
    pub groups_claim: String,
    /// How often roles are refreshed, in words ("5 minutes").
    pub refresh: String,
    pub rules: Vec<RuleRow>,
    /// The file's rules and the file's name, when there is one.
    pub file: Option<(String, Vec<RuleRow>)>,
}

#[cfg(feature = "ssr")]
fn what(r: &RuleRow) -> String {
    if r.role == "admin" {
        "admin (everything)".into()
    } else {
        format!("{} of {}", r.role, r.quota)
    }
}

/// The page.
#[cfg(feature = "ssr")]
pub fn render_groups_page(viewer: Viewer, page: GroupsPage, flash: Option<Flash>) -> String {
    let csrf = viewer.csrf.clone();
    let intro = match &page.provider {
        Some(p) => format!(
            "People who sign in with {p} get the roles their groups (the ID token's \"{}\" claim) give here, at each sign-in and every {}: someone removed from a group loses its role within that. A role given by hand on /users stands whatever the groups say.",
            page.groups_claim, page.refresh
        ),
        None => "No identity provider is configured (--oidc-issuer): these rules take effect once people sign in with one.".into(),
    };
    let rows = if page.rules.is_empty() {
        view! { <p class="empty">"No rules yet."</p> }.into_any()
    } else {
        let rows = page
            .rules
            .iter()
            .map(|r| {
                let (group, role, quota) = (r.group.clone(), r.role.clone(), r.quota.clone());
                view! {
                    <tr>
                        <td class="name" data-label="Group"><code>{r.group.clone()}</code></td>
                        <td data-label="Gives"><span class=format!("role {}", r.role)>{what(r)}</span></td>
                        <td data-label="Added">{r.added.clone()}</td>
                        <td class="wide">
                            <form method="post" action="/groups/delete">
                                <CsrfField csrf=csrf.clone()/>
                                <input type="hidden" name="group" value=group/>
                                <input type="hidden" name="role" value=role/>
                                <input type="hidden" name="quota" value=quota/>
                                <label class="check"><input type="checkbox" name="confirm" value="yes" required/>"sure"</label>
                                <button type="submit">"Remove"</button>
                            </form>
                        </td>
                    </tr>
                }
            })
            .collect_view();
        view! {
            <table class="groups cards">
                <thead><tr><th>"Group"</th><th>"Gives"</th><th>"Added"</th><th></th></tr></thead>
                <tbody>{rows}</tbody>
            </table>
        }
        .into_any()
    };
    let file = page.file.clone().map(|(name, rules)| {
        let rows = rules
            .iter()
            .map(|r| {
                view! {
                    <tr>
                        <td class="name" data-label="Group"><code>{r.group.clone()}</code></td>
                        <td data-label="Gives"><span class=format!("role {}", r.role)>{what(r)}</span></td>
                    </tr>
                }
            })
            .collect_view();
        view! {
            <h2>"From the file"</h2>
            <p class="hint">"Read from "<code>{name}</code>" (--oidc-group-roles); change the file to change these."</p>
            <table class="groups cards">
                <thead><tr><th>"Group"</th><th>"Gives"</th></tr></thead>
                <tbody>{rows}</tbody>
            </table>
        }
    });
    document(move || {
        view! {
            <Layout viewer=Some(viewer) title="Group roles".into() section=Section::Users flash=flash>
                <p class="hint">{intro}</p>
                <form class="card inline" method="post" action="/groups">
                    <CsrfField csrf=csrf/>
                    <label>"Group"<input name="group" required maxlength="256" placeholder="e.g. team-nlp"/></label>
                    <label>"Role"<select name="role">
                        <option value="member">"member"</option>
                        <option value="owner">"owner"</option>
                        <option value="admin">"admin"</option>
                    </select></label>
                    <label>"Quota"<input name="quota" maxlength="253" placeholder="e.g. nlp (none for admin)"/></label>
                    <button type="submit">"Add rule"</button>
                </form>
                <h2>"Kept here"</h2>
                {rows}
                {file}
            </Layout>
        }
    })
}
