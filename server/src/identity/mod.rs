//! Who a person of the company's identity provider is in bizrq: the user
//! made on first sign-in (or an existing one linked), the roles their
//! groups give (`mapping`), the Kubernetes username the API server gives
//! them (`kube_name`), and the refresh that keeps the roles current
//! (`refresh`). The protocol itself is `oidc`'s; the pages are
//! `portal::oidc`'s.
//!
//! A person is the provider's (issuer, subject), never a username: a
//! provider user who calls themselves `admin` gets no local account of
//! that name. The first sign-in makes a user named by the username claim
//! (lower-cased; it must be a valid portal username) who has no password;
//! a taken name is refused in words, unless `--oidc-adopt-local-users`
//! lets the person take over the local account of that name (for
//! installations that move from passwords to the provider, with a claim
//! people cannot edit).
//!
//! Every change of roles and admin flag the mapping makes is appended to
//! the audit log by `bizrq`, with `"source": "mapping"` and the group that
//! gave it; a hand change says `"source": "hand"`.

pub mod kube_name;
pub mod mapping;
pub mod refresh;

use crate::authz::Source;
use crate::config::{LocalLogin, OidcClientAuth, ServeArgs};
use crate::oidc::claims::{ClaimNames, Person};
use crate::oidc::provider::{ClientAuth, Provider};
use crate::service::Service;
use crate::store::accounts::User;
use crate::store::audit::{action, entry};
use crate::store::identity::MappedWrite;
use crate::store::sql::SqlStore;
use crate::store::StoreError;
use kube_name::KubeNames;
use mapping::{Change, Grant, Rule};
use serde_json::json;
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// What `serve`'s flags say about sign-in with the provider.
#[derive(Clone, Debug)]
pub struct Settings {
    pub provider: crate::oidc::provider::Settings,
    pub ca_file: Option<PathBuf>,
    pub local_login: LocalLogin,
    pub break_glass: Vec<String>,
    pub adopt_local_users: bool,
    pub kube_names: Option<KubeNames>,
    /// How often the roles of people who can act are refreshed.
    pub refresh_every: Duration,
    /// How long a sign-in's mapped roles last for a person without a
    /// refresh token (`--oidc-unrefreshed-roles-seconds`).
    pub unrefreshed_roles_for: Duration,
    pub group_roles_file: Option<PathBuf>,
    pub group_roles_poll: Duration,
}

impl Settings {
    /// From `serve`'s arguments and the environment (the client secret:
    /// from `--oidc-client-secret-file` or `BIZRQ_OIDC_CLIENT_SECRET`,
    /// never a flag, so it is not in the process list). None without
    /// `--oidc-issuer`.
    pub fn from_args(
        args: &ServeArgs,
        env_secret: Option<String>,
    ) -> anyhow::Result<Option<Settings>> {
        let Some(issuer) = args.oidc_issuer.clone().filter(|i| !i.is_empty()) else {
            if args.local_login == LocalLogin::BreakGlass {
                anyhow::bail!(
                    "--local-login break-glass turns passwords off for everyone but the \
                     break-glass accounts: it needs sign-in with a provider (--oidc-issuer)"
                );
            }
            return Ok(None);
        };
        if !crate::oidc::http::allowed_url(&issuer) {
            anyhow::bail!(
                "--oidc-issuer {issuer} is not an https URL (http only to a loopback address)"
            );
        }
        let Some(client_id) = args.oidc_client_id.clone().filter(|c| !c.is_empty()) else {
            anyhow::bail!("--oidc-issuer needs --oidc-client-id (BIZRQ_OIDC_CLIENT_ID)");
        };
        let secret = match &args.oidc_client_secret_file {
            Some(path) => Some(
                std::fs::read_to_string(path)
                    .map_err(|e| {
                        anyhow::anyhow!("--oidc-client-secret-file {}: {e}", path.display())
                    })?
                    .trim()
                    .to_string(),
            ),
            None => env_secret.map(|s| s.trim().to_string()),
        }
        .filter(|s| !s.is_empty());
        let client_auth = match (args.oidc_client_auth, &secret) {
            (OidcClientAuth::None, _) => ClientAuth::None,
            (_, None) => anyhow::bail!(
                "--oidc-client-id {client_id} has no secret: give --oidc-client-secret-file or \
                 BIZRQ_OIDC_CLIENT_SECRET, or --oidc-client-auth none for a public client"
            ),
            (OidcClientAuth::Basic, Some(_)) => ClientAuth::Basic,
            (OidcClientAuth::Post, Some(_)) => ClientAuth::Post,
        };
        let public = args.public_url.trim_end_matches('/');
        let redirect_uri = args
            .oidc_redirect_url
            .clone()
            .unwrap_or_else(|| format!("{public}/login/oidc/callback"));
        let post_logout_redirect_uri = args
            .oidc_post_logout_redirect_url
            .clone()
            .unwrap_or_else(|| format!("{public}/login"));
        let mut scopes: Vec<String> = args
            .oidc_scopes
            .iter()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        if !scopes.iter().any(|s| s == "openid") {
            scopes.insert(0, "openid".into());
        }
        let break_glass: Vec<String> = args
            .break_glass_users
            .iter()
            .map(|u| u.trim().to_lowercase())
            .filter(|u| !u.is_empty())
            .collect();
        if args.local_login == LocalLogin::BreakGlass && break_glass.is_empty() {
            anyhow::bail!("--local-login break-glass needs at least one --break-glass-users name");
        }
        Ok(Some(Settings {
            provider: crate::oidc::provider::Settings {
                issuer,
                client_id,
                client_secret: secret,
                client_auth,
                redirect_uri,
                post_logout_redirect_uri,
                scopes,
                claims: ClaimNames {
                    username: args.oidc_username_claim.clone(),
                    email: args.oidc_email_claim.clone(),
                    groups: args.oidc_groups_claim.clone(),
                },
                display_name: args.oidc_display_name.clone(),
                skew: Duration::from_secs(args.oidc_clock_skew_seconds),
                timeout: Duration::from_secs(args.oidc_timeout_seconds.max(1)),
                jwks_refetch: Duration::from_secs(args.oidc_jwks_refetch_seconds),
            },
            ca_file: args.oidc_ca_file.clone(),
            local_login: args.local_login,
            break_glass,
            adopt_local_users: args.oidc_adopt_local_users,
            kube_names: args
                .oidc_kube_username_claim
                .clone()
                .filter(|c| !c.is_empty())
                .map(|claim| KubeNames {
                    claim,
                    prefix: args.oidc_kube_username_prefix.clone(),
                }),
            refresh_every: Duration::from_secs(args.oidc_refresh_seconds.max(1)),
            unrefreshed_roles_for: Duration::from_secs(args.oidc_unrefreshed_roles_seconds),
            group_roles_file: args.oidc_group_roles.clone(),
            group_roles_poll: Duration::from_secs(args.oidc_group_roles_poll_seconds.max(1)),
        }))
    }
}

/// The rules of the group roles file, and where they came from.
#[derive(Clone, Debug, Default)]
pub struct FileRules {
    pub rules: Arc<Vec<Rule>>,
    pub source: String,
}

/// Sign-in with the provider: the provider, the settings, the rules.
pub struct Identities {
    pub provider: Provider,
    pub settings: Settings,
    pub sql: Arc<SqlStore>,
    pub service: Arc<Service>,
    file_rules: RwLock<FileRules>,
}

/// Why a sign-in did not make a session, in words a person can act on.
#[derive(Debug, thiserror::Error)]
pub enum SignInError {
    #[error("the provider's {claim} claim is \"{value}\", which is not a bizrq username (1–64 lower-case letters, digits, '.', '_', '-' and one '@'): ask an admin to choose another claim (--oidc-username-claim)")]
    UnusableUsername { claim: String, value: String },
    #[error("the username \"{0}\" belongs to a local bizrq account: an admin must rename or remove it, or start bizrq with --oidc-adopt-local-users")]
    NameTaken(String),
    #[error("your bizrq account is disabled: ask an admin")]
    Disabled,
    #[error("the username \"{0}\" is reserved in bizrq (its own work, or an account kept for when the provider is down): ask an admin to choose another claim (--oidc-username-claim)")]
    Reserved(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A person signed in.
pub struct SignedIn {
    pub user: User,
    pub created: bool,
    pub changes: Vec<Change>,
}

/// The portal username a provider's username becomes: lower-cased, and
/// valid as it is (never altered into someone else's name).
pub fn portal_username(provider_username: &str) -> Option<String> {
    let u = provider_username.trim().to_lowercase();
    crate::authz::valid_username(&u).then_some(u)
}

/// Why `local` may not be adopted by a sign-in of `person`, if so. An
/// admin, a service account or a disabled account is never handed to a
/// provider's person by name; nor is any account to an email the
/// provider did not say it verified, when the email is the username.
pub fn not_adoptable(local: &User, person: &Person, username_claim: &str) -> Option<&'static str> {
    if local.is_admin {
        Some("it is an admin's")
    } else if local.is_service {
        Some("it is a service account")
    } else if local.disabled {
        Some("it is disabled")
    } else if username_claim == "email" && !person.email_verified {
        Some("the provider did not say the email is verified")
    } else {
        None
    }
}

fn rule_of_row(r: &crate::store::identity::GroupRoleRow) -> Option<Rule> {
    Some(Rule {
        group: r.group.clone(),
        grant: Grant::parse(&r.role, &r.quota).ok()?,
    })
}

impl Identities {
    pub fn new(
        settings: Settings,
        sql: Arc<SqlStore>,
        service: Arc<Service>,
    ) -> anyhow::Result<Identities> {
        let ca = match &settings.ca_file {
            Some(p) => Some(
                std::fs::read(p)
                    .map_err(|e| anyhow::anyhow!("--oidc-ca-file {}: {e}", p.display()))?,
            ),
            None => None,
        };
        let http = crate::oidc::http::client(ca.as_deref(), settings.provider.timeout)?;
        let file_rules = match &settings.group_roles_file {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| anyhow::anyhow!("--oidc-group-roles {}: {e}", path.display()))?;
                let rules = mapping::parse_file(&text)
                    .map_err(|e| anyhow::anyhow!("--oidc-group-roles {}: {e}", path.display()))?;
                FileRules {
                    rules: Arc::new(rules),
                    source: path.display().to_string(),
                }
            }
            None => FileRules::default(),
        };
        Ok(Identities {
            provider: Provider::new(settings.provider.clone(), http),
            settings,
            sql,
            service,
            file_rules: RwLock::new(file_rules),
        })
    }

    pub fn issuer(&self) -> &str {
        &self.settings.provider.issuer
    }

    /// The file's rules in force.
    pub fn file_rules(&self) -> FileRules {
        self.file_rules
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Replaces the file's rules (a reload); whether they changed.
    pub fn set_file_rules(&self, rules: Vec<Rule>) -> bool {
        let mut f = self.file_rules.write().unwrap_or_else(|e| e.into_inner());
        if *f.rules == rules {
            return false;
        }
        f.rules = Arc::new(rules);
        true
    }

    /// Whether `user` is a local account (a person with a password) that
    /// `--local-login break-glass` turned off: what it already holds (a
    /// session, API tokens) stops working too, not only its password.
    pub fn local_account_off(&self, user: &User) -> bool {
        self.settings.local_login == LocalLogin::BreakGlass
            && !user.is_service
            && user.password_hash != crate::store::accounts::NO_PASSWORD
            && !self.settings.break_glass.contains(&user.username)
    }

    /// May `username` sign in with a password?
    pub fn password_allowed(&self, username: &str) -> bool {
        match self.settings.local_login {
            LocalLogin::All => true,
            LocalLogin::BreakGlass => self.settings.break_glass.iter().any(|b| b == username),
        }
    }

    /// Every rule in force: the portal's and the file's.
    pub async fn rules(&self) -> Result<Vec<Rule>, StoreError> {
        let mut rules: Vec<Rule> = self
            .sql
            .group_roles()
            .await?
            .iter()
            .filter_map(rule_of_row)
            .collect();
        rules.extend(self.file_rules().rules.iter().cloned());
        Ok(rules)
    }

    /// The user of a person who just proved who they are, made on first
    /// sign-in; then what the sign-in learnt (groups, refresh token, the
    /// Kubernetes username) recorded, and the roles the groups give applied.
    pub async fn sign_in(
        &self,
        person: &Person,
        claims: &serde_json::Map<String, serde_json::Value>,
        refresh_token: Option<&str>,
    ) -> Result<SignedIn, SignInError> {
        let sql = &self.sql;
        let issuer = self.issuer().to_string();
        let now = self.service.now();
        let (user, created) = match sql.identity(&issuer, &person.subject).await? {
            Some(id) => {
                let user = sql
                    .user_by_id(id.user_id)
                    .await?
                    .ok_or_else(|| StoreError::NotFound(format!("user {}", id.user_id)))?;
                (user, false)
            }
            None => self.first_sign_in(&issuer, person, now).await?,
        };
        if user.disabled {
            return Err(SignInError::Disabled);
        }
        sql.record_identity(
            &issuer,
            &person.subject,
            &person.groups,
            Some(refresh_token),
            true,
            now,
        )
        .await?;
        if let Some(names) = &self.settings.kube_names {
            if let Some(k) = names.of(claims, &issuer) {
                self.link_kube_username(&user, &k, "its provider's claim at sign-in")
                    .await;
            }
        }
        self.adopt_email(&user, person).await?;
        let changes = self
            .apply_roles(&user, &person.groups, "at sign-in")
            .await?;
        let user = sql.user_by_id(user.id).await?.unwrap_or(user);
        Ok(SignedIn {
            user,
            created,
            changes,
        })
    }

    async fn first_sign_in(
        &self,
        issuer: &str,
        person: &Person,
        now: i64,
    ) -> Result<(User, bool), SignInError> {
        let sql = &self.sql;
        let claim = &self.settings.provider.claims.username;
        let Some(username) = portal_username(&person.username) else {
            return Err(SignInError::UnusableUsername {
                claim: claim.clone(),
                value: person.username.chars().take(64).collect(),
            });
        };
        if crate::authz::reserved_username(&username)
            || self.settings.break_glass.contains(&username)
        {
            // bizrq's own actors, and the accounts kept for when the
            // provider is down, are never a provider's person's.
            tracing::warn!(username = %username, subject = %person.subject, "refused a sign-in whose username is reserved");
            return Err(SignInError::Reserved(username));
        }
        if let Some(local) = sql.user_by_name(&username).await? {
            let linked = !sql.identities_of(local.id).await?.is_empty();
            if !self.settings.adopt_local_users || linked {
                return Err(SignInError::NameTaken(username));
            }
            if let Some(why) = not_adoptable(&local, person, claim) {
                tracing::warn!(username = %username, subject = %person.subject, why, "refused to adopt a local account");
                self.audit(
                    action::USER_IDENTITY,
                    &crate::service::audit::user_target(&username),
                    json!({"issuer": issuer, "subject": person.subject, "adopted": false, "why": why}),
                    &format!("{username}'s local account was not adopted by a sign-in with the identity provider: {why}"),
                )
                .await;
                return Err(SignInError::NameTaken(username));
            }
            sql.adopt_identity(issuer, &person.subject, local.id, now)
                .await
                .map_err(|e| match e {
                    StoreError::AlreadyExists(_) | StoreError::Conflict(_) => {
                        SignInError::NameTaken(username.clone())
                    }
                    e => e.into(),
                })?;
            self.audit(
                action::USER_IDENTITY,
                &crate::service::audit::user_target(&username),
                json!({"issuer": issuer, "subject": person.subject, "adopted": true}),
                &format!("{username} signs in with the identity provider from now on (the local account of that name was adopted; its password and tokens ended)"),
            )
            .await;
            let local = sql.user_by_id(local.id).await?.unwrap_or(local);
            return Ok((local, false));
        }
        let user = match sql.sign_up(issuer, &person.subject, &username, now).await {
            Ok(u) => u,
            Err(StoreError::AlreadyExists(_)) => {
                // Another sign-in of the same person won the race, or the
                // name was just taken.
                if let Some(id) = sql.identity(issuer, &person.subject).await? {
                    if let Some(u) = sql.user_by_id(id.user_id).await? {
                        return Ok((u, false));
                    }
                }
                return Err(SignInError::NameTaken(username));
            }
            Err(e) => return Err(e.into()),
        };
        self.audit(
            action::USER_CREATE,
            &crate::service::audit::user_target(&username),
            json!({"username": username, "isAdmin": false, "disabled": false,
                   "issuer": issuer, "subject": person.subject}),
            &format!("{username} signed in with the identity provider for the first time"),
        )
        .await;
        Ok((user, true))
    }

    /// The provider's email (not marked unverified) becomes the user's
    /// alert address when they have none, so alerts about their work reach
    /// them (an address set by hand or by an admin is kept); audited.
    async fn adopt_email(&self, user: &User, person: &Person) -> Result<(), StoreError> {
        let Some(email) = person.email.as_deref() else {
            return Ok(());
        };
        if !crate::mail::deliverable(email) {
            return Ok(());
        }
        if self.sql.user_email(user.id).await?.is_some() {
            return Ok(());
        }
        self.sql.set_user_email(user.id, Some(email)).await?;
        self.record(
            action::USER_EMAIL,
            &crate::service::audit::user_target(&user.username),
            Some(json!({"email": null})),
            Some(json!({"email": email, "source": "sign-in"})),
            &format!(
                "{}'s alert email is {email} (the identity provider's, at sign-in)",
                user.username
            ),
        )
        .await;
        Ok(())
    }

    async fn audit(&self, act: &str, target: &str, after: serde_json::Value, detail: &str) {
        self.record(act, target, None, Some(after), detail).await;
    }

    /// Writes an audit entry by bizrq (the mapping, sign-in, the refresh);
    /// a failure to write it is logged, never a failed sign-in.
    pub async fn record(
        &self,
        act: &str,
        target: &str,
        before: Option<serde_json::Value>,
        after: Option<serde_json::Value>,
        detail: &str,
    ) {
        let e = entry(
            self.service.now(),
            crate::authz::SYSTEM_ACTOR,
            act,
            target,
            before,
            after,
            detail,
        );
        if let Err(err) = self.sql.append_audit(&e).await {
            tracing::error!(error = %err, action = act, "could not write an audit entry");
        }
    }

    /// Sets the user's Kubernetes username when it changed; a name another
    /// user holds is logged, not taken.
    pub async fn link_kube_username(&self, user: &User, kube: &str, why: &str) {
        if user.kube_username.as_deref() == Some(kube) {
            return;
        }
        match self.sql.set_kube_username(user.id, Some(kube)).await {
            Ok(()) => {
                self.record(
                    action::USER_KUBE_USERNAME,
                    &crate::service::audit::user_target(&user.username),
                    Some(json!({"kubeUsername": user.kube_username})),
                    Some(json!({"kubeUsername": kube, "source": "sign-in"})),
                    &format!("{} is {kube} in Kubernetes ({why})", user.username),
                )
                .await;
            }
            Err(StoreError::AlreadyExists(_)) => tracing::warn!(
                user = %user.username, kube_username = %kube,
                "another user already has this Kubernetes username; not linked"
            ),
            Err(e) => tracing::warn!(error = %e, "could not set a Kubernetes username"),
        }
    }

    /// Brings `user`'s roles to what `groups` give by the rules in force,
    /// touching only what the mapping gave; each change made is audited.
    pub async fn apply_roles(
        &self,
        user: &User,
        groups: &[String],
        when: &str,
    ) -> Result<Vec<Change>, StoreError> {
        let rules = self.rules().await?;
        // Which quotas the matching rules name exist (a rule naming a
        // deleted quota gives nothing).
        let mut named: HashSet<String> = HashSet::new();
        for r in rules.iter().filter(|r| groups.contains(&r.group)) {
            if let Grant::On { quota, .. } = &r.grant {
                named.insert(quota.clone());
            }
        }
        let mut existing = HashSet::new();
        for q in named {
            if self.service.get_for_view(&q).await.is_ok() {
                existing.insert(q);
            }
        }
        let desired = mapping::desired(&rules, groups, |q| existing.contains(q));
        let (admin, on) = self.sql.roles_with_source(user.id).await?;
        let current = mapping::Current { admin, on };
        let changes = mapping::changes(&current, &desired);
        let now = self.service.now();
        let mut made = Vec::new();
        for c in changes {
            let write = match &c {
                Change::MakeAdmin { .. } => MappedWrite::MakeAdmin,
                Change::DropAdmin => MappedWrite::DropAdmin,
                Change::Bind {
                    quota,
                    role,
                    before,
                    ..
                } => MappedWrite::Bind {
                    quota,
                    role: *role,
                    before: *before,
                },
                Change::Unbind { quota, role } => MappedWrite::Unbind { quota, role: *role },
            };
            if !self.sql.write_mapped(user.id, &write, now).await? {
                // Changed by hand meanwhile: the hand's stands.
                continue;
            }
            self.audit_change(user, &c, when).await;
            made.push(c);
        }
        Ok(made)
    }

    async fn audit_change(&self, user: &User, c: &Change, when: &str) {
        let name = &user.username;
        let mapping = Source::Mapping.as_str();
        let (act, target, before, after, detail) = match c {
            Change::MakeAdmin { group } => (
                action::USER_ADMIN,
                crate::service::audit::user_target(name),
                Some(json!({"username": name, "isAdmin": false})),
                Some(json!({"username": name, "isAdmin": true, "source": mapping, "group": group})),
                format!("{name} is an admin: member of group {group} (group mapping, {when})"),
            ),
            Change::DropAdmin => (
                action::USER_ADMIN,
                crate::service::audit::user_target(name),
                Some(json!({"username": name, "isAdmin": true, "source": mapping})),
                Some(json!({"username": name, "isAdmin": false, "source": mapping})),
                format!("{name} is no longer an admin: no longer in an admin group (group mapping, {when})"),
            ),
            Change::Bind {
                quota,
                role,
                group,
                before,
            } => (
                action::ROLE_ADD,
                quota.clone(),
                before.map(|r| json!({"user": name, "quota": quota, "role": r.as_str(), "source": mapping})),
                Some(json!({"user": name, "quota": quota, "role": role.as_str(), "source": mapping, "group": group})),
                format!("{name} is {role} of {quota}: member of group {group} (group mapping, {when})"),
            ),
            Change::Unbind { quota, role } => (
                action::ROLE_REMOVE,
                quota.clone(),
                Some(json!({"user": name, "quota": quota, "role": role.as_str(), "source": mapping})),
                None,
                format!("{name} is no longer {role} of {quota}: no group gives it (group mapping, {when})"),
            ),
        };
        self.record(act, &target, before, after, &detail).await;
    }

    /// Applies the rules in force again to everyone linked, from the
    /// groups their provider named last (after a rule changed); how many
    /// changes were made.
    pub async fn reapply_all(&self, when: &str) -> Result<usize, StoreError> {
        let mut made = 0;
        for (user_id, _) in self.sql.users_with_identity().await? {
            let Some(user) = self.sql.user_by_id(user_id).await? else {
                continue;
            };
            let groups: Vec<String> = self
                .sql
                .identities_of(user_id)
                .await?
                .into_iter()
                .filter(|i| i.issuer == self.issuer())
                .flat_map(|i| i.groups)
                .collect();
            made += self.apply_roles(&user, &groups, when).await?.len();
        }
        Ok(made)
    }
}

/// A role as `/groups` and the users page name it.
pub fn grant_text(g: &Grant) -> String {
    match g {
        Grant::Admin => "admin".into(),
        Grant::On { quota, role } => format!("{role} of {quota}"),
    }
}

/// Watches the group roles file: read again when it changes (polled), the
/// new rules applied to everyone linked and the reload audited; a file
/// that does not parse keeps the rules in force and is logged.
pub async fn watch_rules_file(ids: Arc<Identities>) {
    let Some(path) = ids.settings.group_roles_file.clone() else {
        return;
    };
    let mut last = std::fs::metadata(&path).and_then(|m| m.modified()).ok();
    let mut tick = tokio::time::interval(ids.settings.group_roles_poll);
    loop {
        tick.tick().await;
        let modified = std::fs::metadata(&path).and_then(|m| m.modified()).ok();
        if modified == last {
            continue;
        }
        last = modified;
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(error = %e, file = %path.display(), "cannot read the group roles file; the rules in force stay");
                continue;
            }
        };
        match mapping::parse_file(&text) {
            Ok(rules) => {
                let n = rules.len();
                if ids.set_file_rules(rules) {
                    tracing::info!(rules = n, file = %path.display(), "group roles file reloaded");
                    ids.audit(
                        action::GROUP_ROLES_RELOAD,
                        "group-roles",
                        json!({"file": path.display().to_string(), "rules": n}),
                        &format!("the group roles file {} changed: {n} rules", path.display()),
                    )
                    .await;
                    if let Err(e) = ids.reapply_all("after the group roles file changed").await {
                        tracing::warn!(error = %e, "could not apply the new group roles");
                    }
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, file = %path.display(), "the group roles file does not parse; the rules in force stay")
            }
        }
    }
}
