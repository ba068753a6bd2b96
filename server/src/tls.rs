//! TLS for the webhook: a given certificate and key, or a self-signed one
//! generated at start (standalone trials; a cluster uses cert-manager or a
//! mounted secret), and, with a client CA, the verification of the API
//! server's client certificate (mTLS).

use axum_server::tls_rustls::RustlsConfig;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{DigitallySignedStruct, DistinguishedName, ServerConfig, SignatureScheme};
use std::path::Path;
use std::sync::Arc;

pub fn install_crypto_provider() {
    // Ignore "already installed": tests and benches call this repeatedly.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Who may call the webhook over TLS: None accepts any client (no client
/// certificate is asked for).
pub type ClientAuth = Option<Arc<dyn ClientCertVerifier>>;

/// A verifier that requires a client certificate chaining to a CA of the
/// PEM bundle `ca`, and, when `names` is not empty, carrying one of them as
/// a DNS subjectAltName.
pub fn client_verifier(ca: &Path, names: &[String]) -> anyhow::Result<Arc<dyn ClientCertVerifier>> {
    let pem = std::fs::read(ca)
        .map_err(|e| anyhow::anyhow!("cannot read the webhook client CA {}: {e}", ca.display()))?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| anyhow::anyhow!("webhook client CA {}: {e}", ca.display()))?;
        roots
            .add(cert)
            .map_err(|e| anyhow::anyhow!("webhook client CA {}: {e}", ca.display()))?;
    }
    if roots.is_empty() {
        anyhow::bail!(
            "webhook client CA {} holds no PEM certificate",
            ca.display()
        );
    }
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
        .build()
        .map_err(|e| anyhow::anyhow!("webhook client CA {}: {e}", ca.display()))?;
    let names: Vec<ServerName<'static>> = names
        .iter()
        .map(|n| n.trim())
        .filter(|n| !n.is_empty())
        .map(|n| {
            ServerName::try_from(n.to_string())
                .map_err(|_| anyhow::anyhow!("--webhook-client-names: '{n}' is not a DNS name"))
        })
        .collect::<anyhow::Result<_>>()?;
    if names.is_empty() {
        return Ok(verifier);
    }
    Ok(Arc::new(NamedClients {
        inner: verifier,
        names,
    }))
}

/// The CA's verdict, then one of the allowed names: a CA shared with other
/// clients (a cluster's own CA) must not let all of them in. A certificate
/// with a wildcard name is refused outright: `*.bizrq.io` would otherwise
/// match `kube-apiserver.bizrq.io`, and nobody mints a wildcard for the
/// API servers' identity.
#[derive(Debug)]
struct NamedClients {
    inner: Arc<dyn ClientCertVerifier>,
    names: Vec<ServerName<'static>>,
}

impl ClientCertVerifier for NamedClients {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        let cert = webpki::EndEntityCert::try_from(end_entity).map_err(|_| {
            rustls::Error::InvalidCertificate(rustls::CertificateError::BadEncoding)
        })?;
        if cert.valid_dns_names().any(|n| n.contains('*')) {
            return Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForName,
            ));
        }
        if self
            .names
            .iter()
            .any(|n| cert.verify_is_valid_for_subject_name(n).is_ok())
        {
            Ok(verified)
        } else {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForName,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// A server config from PEM, offering HTTP/2 and HTTP/1.1, verifying
/// clients with `clients` when given.
pub fn server_config(
    cert_pem: &[u8],
    key_pem: &[u8],
    clients: &ClientAuth,
) -> anyhow::Result<ServerConfig> {
    let certs = CertificateDer::pem_slice_iter(cert_pem).collect::<Result<Vec<_>, _>>()?;
    if certs.is_empty() {
        anyhow::bail!("no PEM certificate found");
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem)?;
    let builder =
        ServerConfig::builder_with_provider(provider()).with_safe_default_protocol_versions()?;
    let builder = match clients {
        Some(v) => builder.with_client_cert_verifier(v.clone()),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(certs, key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

fn load_config(cert: &Path, key: &Path, clients: &ClientAuth) -> anyhow::Result<ServerConfig> {
    let read = |p: &Path| std::fs::read(p).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()));
    server_config(&read(cert)?, &read(key)?, clients).map_err(|e| {
        anyhow::anyhow!(
            "cannot load TLS certificate {} / key {}: {e}",
            cert.display(),
            key.display()
        )
    })
}

pub async fn load(cert: &Path, key: &Path, clients: &ClientAuth) -> anyhow::Result<RustlsConfig> {
    Ok(RustlsConfig::from_config(Arc::new(load_config(
        cert, key, clients,
    )?)))
}

/// A self-signed certificate for localhost, 127.0.0.1 and ::1. Returns the
/// config and the certificate's PEM (so a caller can trust it).
pub async fn self_signed(clients: &ClientAuth) -> anyhow::Result<(RustlsConfig, String)> {
    let names = vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ];
    let ck = rcgen::generate_simple_self_signed(names)?;
    let cert_pem = ck.cert.pem();
    let key_pem = ck.key_pair.serialize_pem();
    let config = server_config(cert_pem.as_bytes(), key_pem.as_bytes(), clients)?;
    Ok((RustlsConfig::from_config(Arc::new(config)), cert_pem))
}

/// Keep serving the certificate on disk: check every `every` and reload
/// when the files change (cert-manager renews the secret, the kubelet
/// updates the mounted files), so a renewal needs no restart. A file that
/// cannot be read or parsed keeps the current certificate in use. The
/// client verification stays what it was at start.
pub fn reload_on_change(
    config: RustlsConfig,
    cert: std::path::PathBuf,
    key: std::path::PathBuf,
    every: std::time::Duration,
    clients: ClientAuth,
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
            match load_config(&cert, &key, &clients) {
                Ok(c) => {
                    config.reload_from_config(Arc::new(c));
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
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A CA, and PEM files of a leaf it signed for `name` (server or client).
    struct Ca {
        cert: rcgen::Certificate,
        key: rcgen::KeyPair,
    }

    impl Ca {
        fn new() -> Ca {
            let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
            p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            let key = rcgen::KeyPair::generate().unwrap();
            Ca {
                cert: p.self_signed(&key).unwrap(),
                key,
            }
        }

        fn leaf(&self, name: &str, client: bool) -> (String, String) {
            let mut p = rcgen::CertificateParams::new(vec![name.to_string()]).unwrap();
            p.extended_key_usages = vec![if client {
                rcgen::ExtendedKeyUsagePurpose::ClientAuth
            } else {
                rcgen::ExtendedKeyUsagePurpose::ServerAuth
            }];
            let key = rcgen::KeyPair::generate().unwrap();
            let cert = p.signed_by(&key, &self.cert, &self.key).unwrap();
            (cert.pem(), key.serialize_pem())
        }
    }

    /// Handshake `server` against a client presenting `client_cert` (PEM
    /// cert and key); whether the server accepted it.
    async fn handshake(
        server: Arc<ServerConfig>,
        server_ca: &Ca,
        client_cert: Option<&(String, String)>,
    ) -> bool {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(server_ca.cert.der().clone()).unwrap();
        let builder = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        let client = match client_cert {
            Some((c, k)) => builder
                .with_client_auth_cert(
                    CertificateDer::pem_slice_iter(c.as_bytes())
                        .collect::<Result<Vec<_>, _>>()
                        .unwrap(),
                    PrivateKeyDer::from_pem_slice(k.as_bytes()).unwrap(),
                )
                .unwrap(),
            None => builder.with_no_client_auth(),
        };
        let (a, b) = tokio::io::duplex(64 * 1024);
        let acceptor = tokio_rustls::TlsAcceptor::from(server);
        let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
        let server = tokio::spawn(async move {
            let mut s = acceptor.accept(a).await.ok()?;
            let mut byte = [0u8; 1];
            s.read_exact(&mut byte).await.ok()?;
            Some(byte[0])
        });
        let name = ServerName::try_from("webhook.example").unwrap();
        // The client stays open until the server is done (it writes
        // session tickets after the handshake).
        let _client = match connector.connect(name, b).await {
            Ok(mut c) => {
                let _ = c.write_all(b"x").await;
                let _ = c.flush().await;
                Some(c)
            }
            Err(_) => None,
        };
        server.await.unwrap() == Some(b'x')
    }

    /// A renewed certificate on disk is served without a restart, and the
    /// reloaded config still requires the API server's client certificate.
    #[tokio::test]
    async fn a_renewed_certificate_is_picked_up_and_keeps_client_verification() {
        install_crypto_provider();
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        let server_ca = Ca::new();
        let write = |(c, k): (String, String)| {
            std::fs::write(&cert, &c).unwrap();
            std::fs::write(&key, k).unwrap();
            c
        };
        let client_ca = Ca::new();
        let ca_file = dir.path().join("client-ca.crt");
        std::fs::write(&ca_file, client_ca.cert.pem()).unwrap();
        let clients = Some(client_verifier(&ca_file, &[]).unwrap());
        let first = write(server_ca.leaf("webhook.example", false));
        let config = load(&cert, &key, &clients).await.unwrap();
        let before = config.get_inner();
        let task = tokio::spawn(reload_on_change(
            config.clone(),
            cert.clone(),
            key.clone(),
            std::time::Duration::from_millis(20),
            clients,
        ));
        let second = write(server_ca.leaf("webhook.example", false));
        assert_ne!(first, second);
        let mut changed = false;
        for _ in 0..100 {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            if !Arc::ptr_eq(&config.get_inner(), &before) {
                changed = true;
                break;
            }
        }
        task.abort();
        assert!(changed, "the new certificate is in use");
        let apiserver = client_ca.leaf("kube-apiserver.example", true);
        assert!(!handshake(config.get_inner(), &server_ca, None).await);
        assert!(handshake(config.get_inner(), &server_ca, Some(&apiserver)).await);
    }

    /// A client certificate from another CA, or from the right CA under a
    /// name not allowed, is refused during the handshake.
    #[tokio::test]
    async fn only_the_allowed_client_of_the_configured_ca_gets_in() {
        install_crypto_provider();
        let dir = tempfile::tempdir().unwrap();
        let server_ca = Ca::new();
        let (c, k) = server_ca.leaf("webhook.example", false);
        let client_ca = Ca::new();
        let ca_file = dir.path().join("client-ca.crt");
        std::fs::write(&ca_file, client_ca.cert.pem()).unwrap();
        let clients =
            Some(client_verifier(&ca_file, &["kube-apiserver.bizrq.io".to_string()]).unwrap());
        let config = Arc::new(server_config(c.as_bytes(), k.as_bytes(), &clients).unwrap());
        let allowed = client_ca.leaf("kube-apiserver.bizrq.io", true);
        let other_name = client_ca.leaf("someone-else.example", true);
        let other_ca = Ca::new().leaf("kube-apiserver.bizrq.io", true);
        assert!(handshake(config.clone(), &server_ca, Some(&allowed)).await);
        assert!(!handshake(config.clone(), &server_ca, Some(&other_name)).await);
        assert!(!handshake(config.clone(), &server_ca, Some(&other_ca)).await);
        assert!(!handshake(config, &server_ca, None).await);
    }

    /// `*.bizrq.io` would match the allowed name; a certificate with a
    /// wildcard name is refused when names are configured, even one that
    /// also carries the allowed name.
    #[tokio::test]
    async fn a_client_certificate_with_a_wildcard_name_is_refused() {
        install_crypto_provider();
        let dir = tempfile::tempdir().unwrap();
        let server_ca = Ca::new();
        let (c, k) = server_ca.leaf("webhook.example", false);
        let client_ca = Ca::new();
        let ca_file = dir.path().join("client-ca.crt");
        std::fs::write(&ca_file, client_ca.cert.pem()).unwrap();
        let clients =
            Some(client_verifier(&ca_file, &["kube-apiserver.bizrq.io".to_string()]).unwrap());
        let config = Arc::new(server_config(c.as_bytes(), k.as_bytes(), &clients).unwrap());
        let wildcard = client_ca.leaf("*.bizrq.io", true);
        assert!(!handshake(config.clone(), &server_ca, Some(&wildcard)).await);
        let mut p = rcgen::CertificateParams::new(vec![
            "kube-apiserver.bizrq.io".to_string(),
            "*.other.example".to_string(),
        ])
        .unwrap();
        p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let key = rcgen::KeyPair::generate().unwrap();
        let both = p.signed_by(&key, &client_ca.cert, &client_ca.key).unwrap();
        let both = (both.pem(), key.serialize_pem());
        assert!(!handshake(config.clone(), &server_ca, Some(&both)).await);
        let allowed = client_ca.leaf("kube-apiserver.bizrq.io", true);
        assert!(handshake(config, &server_ca, Some(&allowed)).await);
    }

    #[test]
    fn a_bad_client_ca_or_name_is_refused_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.crt");
        std::fs::write(&empty, "not a certificate").unwrap();
        let e = client_verifier(&empty, &[]).err().unwrap().to_string();
        assert!(e.contains("holds no PEM certificate"), "{e}");
        let missing = client_verifier(&dir.path().join("nope.crt"), &[])
            .err()
            .unwrap()
            .to_string();
        assert!(
            missing.contains("cannot read the webhook client CA"),
            "{missing}"
        );
        let ca = dir.path().join("ca.crt");
        std::fs::write(&ca, Ca::new().cert.pem()).unwrap();
        let e = client_verifier(&ca, &["not a name!".to_string()])
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("is not a DNS name"), "{e}");
    }
}
