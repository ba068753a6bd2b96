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

/// Keep serving the certificate on disk: check every `every` and reload
/// when the files change (cert-manager renews the secret, the kubelet
/// updates the mounted files), so a renewal needs no restart. A file that
/// cannot be read or parsed keeps the current certificate in use.
pub fn reload_on_change(
    config: RustlsConfig,
    cert: std::path::PathBuf,
    key: std::path::PathBuf,
    every: std::time::Duration,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let stamp = |p: &Path| std::fs::read(p).ok();
    // What is served now, read before the first wait.
    let mut last = (stamp(&cert), stamp(&key));
    async move {
        loop {
            tokio::time::sleep(every).await;
            let now = (stamp(&cert), stamp(&key));
            if now == last || now.0.is_none() || now.1.is_none() {
                continue;
            }
            match config.reload_from_pem_file(&cert, &key).await {
                Ok(()) => {
                    tracing::info!(cert = %cert.display(), "webhook certificate reloaded");
                    last = now;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "new webhook certificate unusable; keeping the current one")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A renewed certificate on disk is served without a restart.
    #[tokio::test]
    async fn a_renewed_certificate_is_picked_up() {
        install_crypto_provider();
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        let write = |name: &str| {
            let ck = rcgen::generate_simple_self_signed(vec![name.to_string()]).unwrap();
            std::fs::write(&cert, ck.cert.pem()).unwrap();
            std::fs::write(&key, ck.key_pair.serialize_pem()).unwrap();
            ck.cert.der().to_vec()
        };
        let first = write("first.example");
        let config = load(&cert, &key).await.unwrap();
        let before = config.get_inner();
        let task = tokio::spawn(reload_on_change(
            config.clone(),
            cert.clone(),
            key.clone(),
            std::time::Duration::from_millis(20),
        ));
        let second = write("second.example");
        assert_ne!(first, second);
        let mut changed = false;
        for _ in 0..100 {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            if !std::sync::Arc::ptr_eq(&config.get_inner(), &before) {
                changed = true;
                break;
            }
        }
        task.abort();
        assert!(changed, "the new certificate is in use");
    }
}
