//! `/pkg/…`: the portal's islands bundle (the `islands` crate built for
//! the browser, docs/portal.md "Portal islands"). Read once at startup from
//! `--islands-dir` into memory; without it there is no bundle, `/pkg/`
//! answers 404 and pages carry no script, so they are exactly the
//! server-rendered pages a browser without JavaScript gets.
//!
//! The bundle is a fact about the process, like the stylesheet compiled
//! into it, so it is kept process-wide; the page frame is told its script
//! once (`app::layout::use_islands`).

use axum::extract::Path;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use std::path::Path as FsPath;
use std::sync::OnceLock;

/// The loader: imports the glue, starts the WASM module, hydrates.
const BOOT_JS: &str = include_str!("pkg/boot.js");
const GLUE: &str = "bizrq_islands.js";
const WASM: &str = "bizrq_islands_bg.wasm";

struct Bundle {
    glue: Vec<u8>,
    wasm: Vec<u8>,
    /// A digest of all three files: the ETag, so a browser revalidates
    /// cheaply and never runs a glue file with another build's WASM.
    etag: String,
}

static BUNDLE: OnceLock<Bundle> = OnceLock::new();

/// Loads the bundle from `dir` and tells the page frame to load it. A
/// directory without both files is refused: a half bundle would break
/// every page's script, not leave them server-rendered.
pub fn install(dir: &FsPath) -> anyhow::Result<()> {
    let read = |name: &str| {
        std::fs::read(dir.join(name)).map_err(|e| {
            anyhow::anyhow!(
                "--islands-dir {}: cannot read {name} ({e}); build it as README \"Portal islands\" says, or leave the option unset",
                dir.display()
            )
        })
    };
    let (glue, wasm) = (read(GLUE)?, read(WASM)?);
    let mut all = Vec::with_capacity(glue.len() + wasm.len() + BOOT_JS.len());
    all.extend_from_slice(BOOT_JS.as_bytes());
    all.extend_from_slice(&glue);
    all.extend_from_slice(&wasm);
    use sha2::Digest;
    let etag = format!("\"{}\"", &hex::encode(sha2::Sha256::digest(&all))[..16]);
    let version = etag.trim_matches('"').to_string();
    let _ = BUNDLE.set(Bundle { glue, wasm, etag });
    app::layout::use_islands(format!("/pkg/boot.js?v={version}"));
    tracing::info!(dir = %dir.display(), wasm_bytes = BUNDLE.get().map_or(0, |b| b.wasm.len()), "portal islands bundle loaded");
    Ok(())
}

/// GET /pkg/{file}: `boot.js`, the glue and the WASM, revalidated by ETag.
pub async fn file(Path(name): Path<String>, headers: HeaderMap) -> Response {
    let Some(b) = BUNDLE.get() else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let (body, kind): (&'static [u8], &str) = match name.as_str() {
        "boot.js" => (BOOT_JS.as_bytes(), "text/javascript"),
        GLUE => (&b.glue, "text/javascript"),
        WASM => (&b.wasm, "application/wasm"),
        _ => return StatusCode::NOT_FOUND.into_response(),
    };
    let etag = HeaderValue::from_str(&b.etag).unwrap_or(HeaderValue::from_static("\"\""));
    let cache = (header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if headers.get(header::IF_NONE_MATCH) == Some(&etag) {
        return (StatusCode::NOT_MODIFIED, [(header::ETAG, etag), cache]).into_response();
    }
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(kind)),
            (header::ETAG, etag),
            cache,
        ],
        body,
    )
        .into_response()
}
