//! The portal's own state, as the edges' shared state holds it: accounts,
//! sessions and the audit log in SQL, its settings, and its limits.

use super::limits;
use crate::config::ServeArgs;
use crate::metrics::Metrics;
use crate::store::sql::SqlStore;
use std::sync::Arc;
use std::time::Duration;

/// How the portal's cookies and client addresses are treated.
#[derive(Clone, Debug)]
pub struct PortalConfig {
    /// Always mark the session cookie `Secure` (behind a TLS-terminating
    /// ingress). Without it, the cookie is `Secure` when the request says
    /// it came over HTTPS (`X-Forwarded-Proto: https`).
    pub secure_cookies: bool,
    /// Take the client address for login rate limiting from the last entry
    /// of `X-Forwarded-For` (set by our own ingress), not the peer.
    pub trust_forwarded_for: bool,
    /// A session ends after this long without activity.
    pub session_idle: Duration,
    /// When daily alert digests go out (hour, UTC), as the account page says.
    pub digest_hour: u8,
    /// Threads hashing and checking passwords (argon2: 19 MiB each).
    pub password_hash_threads: usize,
    /// Login and password-change attempts per client address and minute.
    pub login_attempts_per_minute: u32,
    /// Heavy requests at once, per person, and the render threads.
    pub heavy: crate::heavy::Config,
}

impl PortalConfig {
    /// From `serve`'s arguments.
    pub fn from_args(args: &ServeArgs) -> PortalConfig {
        PortalConfig {
            secure_cookies: args.secure_cookies,
            trust_forwarded_for: args.trust_forwarded_for,
            session_idle: std::time::Duration::from_secs(args.session_idle_minutes.max(1) * 60),
            digest_hour: args.digest_hour,
            password_hash_threads: args.password_hash_threads,
            login_attempts_per_minute: args.login_attempts_per_minute,
            heavy: crate::heavy::Config {
                total: args.heavy_requests,
                per_user: args.heavy_requests_per_user,
                threads: match args.render_threads {
                    0 => crate::heavy::default_threads(),
                    n => n,
                },
            },
        }
    }
}

impl Default for PortalConfig {
    fn default() -> Self {
        PortalConfig {
            secure_cookies: false,
            trust_forwarded_for: false,
            session_idle: Duration::from_secs(8 * 3600),
            digest_hour: 8,
            password_hash_threads: 2,
            login_attempts_per_minute: 30,
            heavy: crate::heavy::Config::default(),
        }
    }
}

pub struct Portal {
    pub sql: Arc<SqlStore>,
    pub config: PortalConfig,
    /// Every password hash and check of the portal goes through this.
    pub hasher: limits::PasswordHasher,
    /// Every heavy page, chart, report and export of the portal and the
    /// JSON API takes a place here and renders on its threads.
    pub heavy: Arc<crate::heavy::Heavy>,
    /// Logins and password changes per client address, before hashing.
    pub attempts: limits::AddressLimiter,
    /// Sign-in with the company's identity provider, when configured
    /// (`--oidc-issuer`).
    pub identity: Option<Arc<crate::identity::Identities>>,
}

impl Portal {
    /// `metrics`: where the heavy requests' refusals are counted.
    pub fn new(sql: Arc<SqlStore>, config: PortalConfig, metrics: &Metrics) -> Portal {
        Portal {
            hasher: limits::PasswordHasher::new(config.password_hash_threads),
            heavy: crate::heavy::Heavy::counted(config.heavy, metrics.heavy_refused.clone()),
            attempts: limits::AddressLimiter::new(config.login_attempts_per_minute),
            identity: None,
            sql,
            config,
        }
    }

    /// With sign-in through an identity provider.
    pub fn with_identity(mut self, identity: Option<Arc<crate::identity::Identities>>) -> Portal {
        self.identity = identity;
        self
    }
}
