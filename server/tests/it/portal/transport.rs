//! What crosses the wire to a browser: pages gzipped for a client that
//! accepts it (never the webhook's reviews), the CSRF token masked afresh
//! in every page so that compressed sizes cannot leak it (BREACH), and the
//! stylesheet revalidated by its ETag.

use crate::common::*;
use reqwest::StatusCode;

#[tokio::test]
async fn pages_are_gzipped_and_every_page_masks_the_csrf_token_afresh() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&fresh_sqlite(&dir)).await;
    let admin = Browser::admin(&s).await;

    let first = admin.get("/tokens").await;
    assert_eq!(first.status, StatusCode::OK);
    let older = admin.csrf().unwrap();
    admin.get("/tokens").await;
    let newer = admin.csrf().unwrap();
    assert_ne!(older, newer, "the same token bytes in two pages");

    // Either page's form is the session's: the older one still posts.
    let p = admin
        .request(reqwest::Method::POST, "/tokens", |r| {
            r.form(&[("name", "from-older-page"), ("csrf", older.as_str())])
        })
        .await;
    assert_eq!(p.status, StatusCode::OK, "{}", p.body);
    // A mask of another token, and a token cut short, are refused.
    let mut forged = older.clone().into_bytes();
    let last = forged.len() - 1;
    forged[last] = if forged[last] == b'0' { b'1' } else { b'0' };
    for bad in [String::from_utf8(forged).unwrap(), older[..40].to_string()] {
        let p = admin
            .request(reqwest::Method::POST, "/tokens", |r| {
                r.form(&[("name", "forged"), ("csrf", bad.as_str())])
            })
            .await;
        assert_eq!(p.status, StatusCode::FORBIDDEN, "{bad}: {}", p.body);
    }

    // Gzip for a browser that asks for it, plain for a client that does not.
    let zipped = admin
        .request(reqwest::Method::GET, "/tokens", |r| {
            r.header("accept-encoding", "gzip")
        })
        .await;
    assert_eq!(zipped.status, StatusCode::OK);
    assert_eq!(
        zipped
            .headers
            .get("content-encoding")
            .map(|v| v.to_str().unwrap()),
        Some("gzip")
    );
    let plain = admin.get("/tokens").await;
    assert!(plain.headers.get("content-encoding").is_none());
    assert!(plain.body.contains("<html"), "{}", plain.body);
}

#[tokio::test]
async fn the_stylesheet_is_revalidated_by_its_etag() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&fresh_sqlite(&dir)).await;
    let b = Browser::new(&s);
    let css = b.get("/style.css").await;
    assert_eq!(css.status, StatusCode::OK);
    assert_eq!(
        css.headers.get("cache-control").unwrap().to_str().unwrap(),
        "no-cache"
    );
    let etag = css
        .headers
        .get("etag")
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    let again = b
        .request(reqwest::Method::GET, "/style.css", |r| {
            r.header("if-none-match", etag.as_str())
        })
        .await;
    assert_eq!(again.status, StatusCode::NOT_MODIFIED);
    assert!(again.body.is_empty());
}
