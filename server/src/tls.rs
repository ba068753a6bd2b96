//! TLS for the webhook: a given certificate and key, or a self-signed one
//! generated at start (standalone trials; a cluster uses cert-manager or a
//! mounted secret).

use axum_server::tls_rustls::RustlsConfig;
use std::path::Path;

pub fn install_crypto_provider() {
    // Ignore "already installed": tests and benches call this repeatedly.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

pub async fn load(cert: &Path, key: &Path) -> anyhow::Result<RustlsConfig> {
    RustlsConfig::from_pem_file(cert, key).await.map_err(|e| {
        anyhow::anyhow!(
            "cannot load TLS certificate {} / key {}: {e}",
            cert.display(),
            key.display()
        )
    })
}

/// A self-signed certificate for localhost, 127.0.0.1 and ::1. Returns the
/// config and the certificate's PEM (so a caller can trust it).
pub async fn self_signed() -> anyhow::Result<(RustlsConfig, String)> {
    let names = vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ];
    let ck = rcgen::generate_simple_self_signed(names)?;
    let cert_pem = ck.cert.pem();
    let key_pem = ck.key_pair.serialize_pem();
    let config =
        RustlsConfig::from_pem(cert_pem.clone().into_bytes(), key_pem.into_bytes()).await?;
    Ok((config, cert_pem))
}
