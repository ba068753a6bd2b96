//! The page frame every portal page shares: header with the navigation,
//! the signed-in user and the logout form, a flash message, then the page.
//!
//! A page handler renders its body inside [`Layout`] and wraps the whole in
//! [`document`]:
//!
//! ```ignore
//! app::layout::document(move || view! {
//!     <Layout viewer=Some(viewer) title="Quota tree".into() section=Section::Tree flash=None>
//!         <p>"…"</p>
//!     </Layout>
//! })
//! ```
//!
//! Every `<form method="post">` must carry [`CsrfField`] (the server
//! refuses a state-changing POST without it, 403).

#[cfg(feature = "ssr")]
use leptos::prelude::*;

/// The signed-in user as the frame shows it, with the session's CSRF token
/// for the forms of the page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Viewer {
    pub username: String,
    pub is_admin: bool,
    pub csrf: String,
    /// Open alerts the viewer may see: a badge on the Alerts link.
    pub open_alerts: usize,
}

/// Which entry of the navigation is the current page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Section {
    Overview,
    Tree,
    Transfers,
    Alerts,
    Audit,
    Users,
    Tokens,
    Reports,
    /// A page outside the navigation (login, errors).
    None,
}

/// The script that loads the islands bundle (`/pkg/boot.js?v=…`), once
/// the server has one; until then pages carry no script at all.
static ISLANDS_SCRIPT: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Tells every page frame from now on to load the islands bundle from
/// `src`. Called once at startup; a bundle is the process's, like its
/// stylesheet.
pub fn use_islands(src: String) {
    let _ = ISLANDS_SCRIPT.set(src);
}

/// The navigation: (section, label, href, admins only).
pub const NAV: [(Section, &str, &str, bool); 8] = [
    (Section::Overview, "Overview", "/", false),
    (Section::Tree, "Tree", "/tree", false),
    (Section::Transfers, "Transfers", "/transfers", false),
    (Section::Alerts, "Alerts", "/alerts", false),
    (Section::Reports, "Reports", "/reports", false),
    (Section::Audit, "Audit", "/audit", false),
    (Section::Users, "Users", "/users", true),
    (Section::Tokens, "Tokens", "/tokens", false),
];

/// A one-line message above the page: what just happened, or what went wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Flash {
    Ok(String),
    Error(String),
}

/// The hidden CSRF field every POST form carries.
#[cfg(feature = "ssr")]
#[component]
pub fn CsrfField(csrf: String) -> impl IntoView {
    view! { <input type="hidden" name="csrf" value=csrf/> }
}

#[cfg(feature = "ssr")]
#[component]
pub fn FlashLine(flash: Option<Flash>) -> impl IntoView {
    flash.map(|f| match f {
        Flash::Ok(t) => view! { <p class="flash ok" role="status">{t}</p> }.into_any(),
        Flash::Error(t) => view! { <p class="flash error" role="alert">{t}</p> }.into_any(),
    })
}

/// The frame of a page. Without a viewer (the login page) there is no
/// navigation.
#[cfg(feature = "ssr")]
#[component]
pub fn Layout(
    viewer: Option<Viewer>,
    title: String,
    section: Section,
    flash: Option<Flash>,
    children: Children,
) -> impl IntoView {
    let nav = viewer.map(|v| {
        let links = NAV
            .iter()
            .filter(|(_, _, _, admin_only)| v.is_admin || !admin_only)
            .map(|(s, label, href, _)| {
                let current = (*s == section).then_some("page");
                // An island: hidden at zero, kept current when scripts run.
                let badge = (*s == Section::Alerts).then(|| {
                    view! { " "<bizrq_islands::AlertsBadge count=v.open_alerts/> }
                });
                view! { <a href=*href aria-current=current>{*label}{badge}</a> }
            })
            .collect_view();
        view! {
            <nav>{links}</nav>
            <form class="whoami" method="post" action="/logout">
                <span><a href="/account" title="your email and alert preferences">{v.username}</a>{v.is_admin.then_some(" (admin)")}</span>
                <CsrfField csrf=v.csrf/>
                <button type="submit">"Log out"</button>
            </form>
        }
    });
    view! {
        <html lang="en">
            <head>
                <meta charset="utf-8"/>
                <meta name="viewport" content="width=device-width, initial-scale=1"/>
                <title>{format!("{title} · bizrq")}</title>
                <link rel="stylesheet" href="/style.css"/>
                {ISLANDS_SCRIPT.get().map(|src| view! { <script type="module" src=src.clone()></script> })}
            </head>
            <body>
                <header><a class="brand" href="/">"bizrq"</a>{nav}</header>
                <main>
                    <h1 class="page-title">{title}</h1>
                    <FlashLine flash=flash/>
                    {children()}
                </main>
            </body>
        </html>
    }
}

/// Percent-encodes a URL path segment or query value (RFC 3986
/// unreserved characters kept).
pub fn encode_component(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Text escaped for HTML and XML (`&`, `<`, `>`, both quotes), safe as
/// element text and as a quoted attribute value: the one escaper of text
/// written into markup by hand (this textarea text, the charts' SVG, the
/// alert mails' HTML). Leptos 0.8's SSR renderer writes the children of
/// `<textarea>` as they are (tachys marks it as an element whose children
/// are not escaped), so text put into a textarea must be escaped here, or
/// `</textarea><script>` gets through. The browser decodes the entities
/// back into the textarea's value.
pub fn escape_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Renders a whole HTML document (with its doctype) from a view.
#[cfg(feature = "ssr")]
pub fn document<V: IntoView + 'static>(f: impl FnOnce() -> V) -> String {
    // An islands context: an island's server-rendered children need one.
    let context = hydration_context::SsrSharedContext::new_islands();
    let owner = Owner::new_root(Some(std::sync::Arc::new(context)));
    let html = owner.with(|| f().to_html());
    format!("<!DOCTYPE html>{html}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaped_text_is_safe_in_elements_and_in_either_quotes() {
        assert_eq!(
            escape_text(r#"</textarea><a href="x" title='y'>Tom & Jerry</a>"#),
            "&lt;/textarea&gt;&lt;a href=&quot;x&quot; title=&#39;y&#39;&gt;Tom &amp; Jerry&lt;/a&gt;"
        );
        assert_eq!(escape_text("plain ünï"), "plain ünï");
        assert_eq!(escape_text("&amp;"), "&amp;amp;");
    }
}
