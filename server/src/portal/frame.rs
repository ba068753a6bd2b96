//! What frames every page the portal answers with when it cannot answer
//! with the page asked for: the error page.

use app::layout::{Flash, Section};
use axum::http::StatusCode;

/// A small page for an error (no navigation: the viewer may be unknown).
pub fn error_page(status: StatusCode, message: String, viewer: Option<app::Viewer>) -> String {
    use leptos::prelude::*;
    let title = format!(
        "{} {}",
        status.as_u16(),
        status.canonical_reason().unwrap_or("")
    );
    app::layout::document(move || {
        view! {
            <app::layout::Layout viewer=viewer title=title section=Section::None flash=Some(Flash::Error(message))>
                <p><a href="/">"Back to bizrq"</a></p>
            </app::layout::Layout>
        }
    })
}
