//! Command line and environment.

use crate::real_usage::RealUsageConfig;
use clap::{Parser, Subcommand, ValueEnum};
use quota::cash::QosMultipliers;
use quota::real_usage::template::{Metric, Template, TemplateError};
use quota::KeyConfig;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

// Where it always was for callers; it belongs to the store that connects.

#[derive(Parser, Debug)]
#[command(
    name = "bizrq",
    version,
    about = "Hierarchical GPU quotas for Kubernetes: portal, admission webhook and controller"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Serve the portal, the JSON API and the admission webhook.
    Serve(Box<ServeArgs>),
    /// Print the BizGroupResourceQuota CustomResourceDefinition as YAML.
    Crd,
    /// Repair the quotas of a standalone database that hold a string no
    /// name, uid or username may hold (NUL, another control character, a
    /// bidirectional override), stored by an older version: such charges
    /// are dropped or scrubbed and used is computed again
    /// (docs/hostile-input.md). Safe beside a running server.
    Repair(RepairArgs),
}

#[derive(clap::Args, Debug, Clone)]
pub struct RepairArgs {
    /// sqlite://FILE or postgres://USER@HOST/DB: the server's database.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: String,
    /// Only print what would be repaired.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// Who may still sign in with a password (`--local-login`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum LocalLogin {
    /// Every local account.
    #[default]
    All,
    /// Only the break-glass accounts (`--break-glass-users`); everyone
    /// else signs in with the identity provider.
    BreakGlass,
}

/// How bizrq authenticates at the provider's token endpoint.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum OidcClientAuth {
    /// HTTP Basic with the client id and secret (`client_secret_basic`).
    #[default]
    Basic,
    /// In the form (`client_secret_post`).
    Post,
    /// A public client, PKCE only (`none`).
    None,
}

#[derive(clap::Args, Debug, Clone)]
pub struct ServeArgs {
    /// Portal, JSON API, /metrics and health (plain HTTP).
    #[arg(long, env = "BIZRQ_LISTEN", default_value = "127.0.0.1:3000")]
    pub listen: SocketAddr,
    /// Admission webhook (HTTPS).
    #[arg(long, env = "BIZRQ_WEBHOOK_LISTEN", default_value = "127.0.0.1:8443")]
    pub webhook_listen: SocketAddr,
    /// /healthz and /readyz (plain HTTP) with a small pool of their own, so
    /// that a full portal pool never fails the kubelet's probes. The portal
    /// port serves them too.
    #[arg(long, env = "BIZRQ_PROBE_LISTEN", default_value = "127.0.0.1:3001")]
    pub probe_listen: SocketAddr,
    /// Where users reach the portal: the base of links in alert emails.
    #[arg(
        long,
        env = "BIZRQ_PUBLIC_URL",
        default_value = "http://127.0.0.1:3000"
    )]
    pub public_url: String,
    /// sqlite://FILE (created if missing) or postgres://USER@HOST/DB.
    #[arg(
        long,
        env = "DATABASE_URL",
        default_value = "sqlite://bizrq.db",
        hide_env_values = true
    )]
    pub database_url: String,
    /// Bearer token for the JSON API; generated and printed once if unset.
    #[arg(long, env = "BIZRQ_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// Password of the `admin` user created on first start (when there is
    /// no user yet); generated and printed once if unset. Ignored later.
    #[arg(long, env = "BIZRQ_ADMIN_PASSWORD", hide_env_values = true)]
    pub admin_password: Option<String>,
    /// Always mark the portal's session cookie Secure (TLS is terminated in
    /// front of bizrq). Without it, the cookie is Secure when the request
    /// carries `X-Forwarded-Proto: https`.
    #[arg(long, env = "BIZRQ_SECURE_COOKIES")]
    pub secure_cookies: bool,
    /// Rate-limit logins by the last `X-Forwarded-For` address (set by your
    /// ingress) instead of the peer address.
    #[arg(long, env = "BIZRQ_TRUST_FORWARDED_FOR")]
    pub trust_forwarded_for: bool,
    /// A portal session ends after this many minutes without activity.
    #[arg(long, env = "BIZRQ_SESSION_IDLE_MINUTES", default_value_t = 480)]
    pub session_idle_minutes: u64,
    /// Threads hashing and checking portal passwords (argon2, 19 MiB each);
    /// logins beyond them and a short queue are answered 503.
    #[arg(long, env = "BIZRQ_PASSWORD_HASH_THREADS", default_value_t = 2)]
    pub password_hash_threads: usize,
    /// Login and password-change attempts per client address and minute.
    #[arg(long, env = "BIZRQ_LOGIN_ATTEMPTS_PER_MINUTE", default_value_t = 30)]
    pub login_attempts_per_minute: u32,
    /// Heavy requests (quota pages with their charts, the samples API, the
    /// tree, reports, exports) running at once in all; one more is answered
    /// 429 with Retry-After (docs/limits.md).
    #[arg(long, env = "BIZRQ_HEAVY_REQUESTS", default_value_t = 8)]
    pub heavy_requests: usize,
    /// Heavy requests running at once for one person (a portal user or a
    /// token's user); one more is answered 429 with Retry-After.
    #[arg(long, env = "BIZRQ_HEAVY_REQUESTS_PER_USER", default_value_t = 2)]
    pub heavy_requests_per_user: usize,
    /// Threads rendering heavy requests' charts, pages and CSV, below the
    /// runtime's priority (0: half the CPUs, at least one).
    #[arg(long, env = "BIZRQ_RENDER_THREADS", default_value_t = 0)]
    pub render_threads: usize,
    /// CPUs kept free of the portal's work (its runtime, render and
    /// password threads, their SQLite connections) for the webhook, the
    /// probes and the background: the portal's threads are pinned to the
    /// others, at most (the CPUs the process may use − this) of them. 0
    /// leaves them unpinned; nothing is pinned on one CPU (docs/limits.md).
    #[arg(long, env = "BIZRQ_ADMISSION_CPUS", default_value_t = 1)]
    pub admission_cpus: usize,
    /// The portal's islands bundle: a directory holding `bizrq_islands.js`
    /// and `bizrq_islands_bg.wasm` (wasm-bindgen's output, docs/portal.md
    /// "Portal islands"). Unset: pages are server-rendered only, as with JavaScript off.
    #[arg(long, env = "BIZRQ_ISLANDS_DIR")]
    pub islands_dir: Option<PathBuf>,
    /// PEM certificate for the webhook; self-signed when absent.
    #[arg(long, env = "BIZRQ_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key for the webhook.
    #[arg(long, env = "BIZRQ_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// CA bundle (PEM) that signs the API server's client certificate: the
    /// webhook then requires and verifies a client certificate (mTLS).
    #[arg(long, env = "BIZRQ_WEBHOOK_CLIENT_CA")]
    pub webhook_client_ca: Option<PathBuf>,
    /// With --webhook-client-ca: DNS names (subjectAltName) of which the
    /// client certificate must carry one (a certificate with a wildcard
    /// name is refused); any certificate the CA signed when empty.
    #[arg(
        long,
        env = "BIZRQ_WEBHOOK_CLIENT_NAMES",
        value_delimiter = ',',
        requires = "webhook_client_ca"
    )]
    pub webhook_client_names: Vec<String>,
    /// Bearer token the webhook requires (`Authorization: Bearer …`), for
    /// callers that cannot present a client certificate. Surrounding
    /// whitespace is ignored.
    #[arg(
        long,
        env = "BIZRQ_WEBHOOK_TOKEN",
        hide_env_values = true,
        conflicts_with = "webhook_token_file"
    )]
    pub webhook_token: Option<String>,
    /// A file holding the webhook's bearer token (e.g. a mounted Secret),
    /// read at start; surrounding whitespace (a final newline) is ignored.
    #[arg(long, env = "BIZRQ_WEBHOOK_TOKEN_FILE")]
    pub webhook_token_file: Option<PathBuf>,
    /// A file of queue mark keys (a mounted Secret): one hex key of at least
    /// 32 random bytes a line, the first signing and any verifying, so a
    /// key is rotated by adding the new one first. With it, the mutating
    /// webhook queues a create by a signed mark on the object instead of a
    /// compare-and-swap of the quota, and the controller's rounds fold the
    /// marked, held objects into the queue (docs/queueing.md §12). Every
    /// replica must mount the same keys. Without it, queues are kept in
    /// the quota's status as before.
    #[arg(long, env = "BIZRQ_QUEUE_MARK_KEY_FILE")]
    pub queue_mark_key_file: Option<PathBuf>,
    /// The Secret in `--namespace` that holds the queue mark keys (its
    /// data key `keys`, as the key file holds them), cluster mode: read
    /// at start, and created with a fresh random key by the first replica
    /// that finds none, so every replica shares one key without anyone
    /// making it by hand. The shipped deployment sets it. A key file
    /// (`--queue-mark-key-file`), when given, is used instead.
    #[arg(long, env = "BIZRQ_QUEUE_MARK_KEY_SECRET")]
    pub queue_mark_key_secret: Option<String>,
    /// Drain queue marks before turning them off: marks already on held
    /// objects are still folded with the keys of `--queue-mark-key-file`
    /// or `--queue-mark-key-secret` (one is required), none is signed (a create that must wait is queued in
    /// the quota's status, as without marks), and a round writes its
    /// quota's whole queue into the status instead of its top. Once no
    /// quota's status counts more waiting than it lists, the keys can go
    /// (docs/queueing.md §12, "Turning marks off").
    #[arg(long, env = "BIZRQ_QUEUE_MARK_DRAIN")]
    pub queue_mark_drain: bool,
    /// With queue marks, a create of a queueing quota that fits now is
    /// held and marked all the same, and the controller's next round
    /// admits it: no review of the mutating webhook waits for a write of
    /// the quota (its p99 on the Kueue bench halved), at the cost of a
    /// round's wait before a fitting Job starts, and of the queue's order
    /// deciding what fitted (docs/queueing.md §10). Off: a create that fits
    /// is charged in its review and starts as written.
    #[arg(long, env = "BIZRQ_QUEUE_FITTING_CREATES")]
    pub queue_fitting_creates: bool,
    /// Serve the webhook on a non-loopback address without a client CA or a
    /// token (reviews change quotas: rely on a NetworkPolicy and the
    /// controller's re-checks; see docs/webhook-trust.md).
    #[arg(long, env = "BIZRQ_WEBHOOK_ALLOW_UNAUTHENTICATED")]
    pub webhook_allow_unauthenticated: bool,
    /// Open connections on the portal/API port; more are closed at accept.
    #[arg(long, env = "BIZRQ_MAX_CONNECTIONS", default_value_t = 512)]
    pub max_connections: usize,
    /// Open connections on the webhook port (counted apart from the
    /// portal's) past their TLS handshake; as many handshakes again may be
    /// in progress.
    #[arg(long, env = "BIZRQ_WEBHOOK_MAX_CONNECTIONS", default_value_t = 512)]
    pub webhook_max_connections: usize,
    /// Open portal/API connections from one address (0: no cap). Behind an
    /// ingress or a proxy every client comes from its few addresses: raise
    /// it or give 0 there.
    #[arg(long, env = "BIZRQ_MAX_CONNECTIONS_PER_IP", default_value_t = 64)]
    pub max_connections_per_ip: usize,
    /// Open webhook connections from one address, handshakes included (0:
    /// no cap). kube-apiserver calls webhooks over HTTP/1.1, one
    /// connection per review in flight, with a client per webhook path
    /// keeping up to 25 idle: bizrq's seven paths can hold 175 from one
    /// API server. A connection beyond it waits up to the TLS handshake
    /// timeout for one to close (at most as many as the webhook's
    /// connections wait).
    #[arg(
        long,
        env = "BIZRQ_WEBHOOK_MAX_CONNECTIONS_PER_IP",
        default_value_t = 256
    )]
    pub webhook_max_connections_per_ip: usize,
    /// MiB of request bodies the portal/API handlers may hold at once; a
    /// request beyond it is answered 503.
    #[arg(long, env = "BIZRQ_BODY_BUDGET_MIB", default_value_t = 64)]
    pub body_budget_mib: usize,
    /// MiB of AdmissionReview bodies the webhook may hold at once (its own
    /// budget, untouched by the portal's).
    #[arg(long, env = "BIZRQ_WEBHOOK_BODY_BUDGET_MIB", default_value_t = 64)]
    pub webhook_body_budget_mib: usize,
    /// Seconds a client has to send a request's headers (both ports; also
    /// how long an idle HTTP/1 keep-alive connection is kept).
    #[arg(long, env = "BIZRQ_HEADER_READ_TIMEOUT_SECONDS", default_value_t = 10)]
    pub header_read_timeout_seconds: u64,
    /// Seconds without a byte either way before a portal connection is closed.
    #[arg(long, env = "BIZRQ_IDLE_TIMEOUT_SECONDS", default_value_t = 60)]
    pub idle_timeout_seconds: u64,
    /// Seconds without a byte either way before a webhook connection is
    /// closed (longer than the API server's 90 s idle pool timeout).
    #[arg(
        long,
        env = "BIZRQ_WEBHOOK_IDLE_TIMEOUT_SECONDS",
        default_value_t = 120
    )]
    pub webhook_idle_timeout_seconds: u64,
    /// Seconds a client has to finish the webhook's TLS handshake (an API
    /// server's takes milliseconds).
    #[arg(long, env = "BIZRQ_TLS_HANDSHAKE_TIMEOUT_SECONDS", default_value_t = 2)]
    pub tls_handshake_timeout_seconds: u64,
    /// Seconds between full resyncs (carve-out repair, cash accrual).
    #[arg(long, env = "BIZRQ_RESYNC_SECONDS", default_value_t = 300)]
    pub resync_seconds: u64,
    /// Seconds between the alert engine's sweeps over every quota (writes
    /// are evaluated as they happen; the sweep is the net under them).
    #[arg(long, env = "BIZRQ_ALERT_SWEEP_SECONDS", default_value_t = 300)]
    pub alert_sweep_seconds: u64,
    /// Seconds between usage samples of every quota (the history charts).
    #[arg(long, env = "BIZRQ_SAMPLE_SECONDS", default_value_t = 60)]
    pub sample_seconds: u64,
    /// Cluster mode: seconds between restatements of parents' summaries
    /// (`kubectl get`'s columns) after their subtree changed: at most one
    /// summary write per quota in each.
    #[arg(long, env = "BIZRQ_SUMMARY_SECONDS", default_value_t = 10)]
    pub summary_seconds: u64,
    /// Extended resources that are GPUs (take the gpu-type model label).
    #[arg(
        long,
        env = "BIZRQ_GPU_RESOURCES",
        value_delimiter = ',',
        default_value = "nvidia.com/gpu,amd.com/gpu,gpu.intel.com/i915,habana.ai/gaudi,huawei.com/Ascend910"
    )]
    pub gpu_resources: Vec<String>,
    /// Namespaces bizrq never governs: their workloads are neither reviewed
    /// nor charged (keep deploy/base/webhook.yaml's namespaceSelector equal;
    /// an empty list governs every namespace).
    #[arg(
        long,
        env = "BIZRQ_EXCLUDED_NAMESPACES",
        default_value = "kube-system,bizrq-system",
        value_parser = quota::Namespaces::parse
    )]
    pub excluded_namespaces: quota::Namespaces,
    /// Cash price of Guaranteed pods, per mille (1000 = face value).
    #[arg(long, env = "BIZRQ_PRICE_GUARANTEED", default_value_t = 1000)]
    pub price_guaranteed: u32,
    /// Cash price of Burstable pods, per mille.
    #[arg(long, env = "BIZRQ_PRICE_BURSTABLE", default_value_t = 1000)]
    pub price_burstable: u32,
    /// Cash price of BestEffort pods, per mille.
    #[arg(long, env = "BIZRQ_PRICE_BEST_EFFORT", default_value_t = 1000)]
    pub price_best_effort: u32,
    /// Standalone: the price list per model (docs/budgets.md §3), a YAML or
    /// JSON file holding the same document as the cluster's PriceList
    /// object. Read at start (a bad one stops the start), then again when
    /// it changes (polled every --price-list-poll-seconds) or on SIGHUP; a
    /// reload that fails keeps the list in force and logs why. In cluster
    /// mode the PriceList object `default` is read instead.
    #[arg(long, env = "BIZRQ_PRICE_LIST")]
    pub price_list: Option<PathBuf>,
    /// How often the price list file is checked for a change.
    #[arg(long, env = "BIZRQ_PRICE_LIST_POLL_SECONDS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=86400))]
    pub price_list_poll_seconds: u64,
    /// Budget ledger roll-up (docs/budgets.md §6 "Roll-up"): entries older
    /// than this many days are summed into hourly rows (at least 1).
    #[arg(long, env = "BIZRQ_LEDGER_HOURLY_AFTER_DAYS", default_value_t = 7, value_parser = clap::value_parser!(u32).range(1..=36500))]
    pub ledger_hourly_after_days: u32,
    /// … and older than this many days into daily rows (at least the
    /// hourly age).
    #[arg(long, env = "BIZRQ_LEDGER_DAILY_AFTER_DAYS", default_value_t = 90, value_parser = clap::value_parser!(u32).range(1..=36500))]
    pub ledger_daily_after_days: u32,
    /// The local midnight of the ledger's daily rows, in minutes east of
    /// UTC (whole hours). Reports over daily rows cut at this offset.
    #[arg(
        long,
        env = "BIZRQ_LEDGER_DAY_UTC_OFFSET_MINUTES",
        default_value_t = 0,
        allow_negative_numbers = true
    )]
    pub ledger_day_utc_offset_minutes: i32,
    /// Real usage (cluster mode, docs/real-usage.md): the base URL of the
    /// Prometheus that scrapes the NVIDIA DCGM exporter and cAdvisor
    /// (`http://prometheus.monitoring:9090`). Without it bizrq shows what
    /// workloads were allocated only.
    #[arg(long, env = "BIZRQ_PROMETHEUS_URL")]
    pub prometheus_url: Option<String>,
    /// A file holding the bearer token sent to Prometheus (a mounted
    /// ServiceAccount token), read again for every reading.
    #[arg(long, env = "BIZRQ_PROMETHEUS_TOKEN_FILE")]
    pub prometheus_token_file: Option<PathBuf>,
    /// The CA bundle (PEM) that signs Prometheus's certificate; the
    /// system's roots without it.
    #[arg(long, env = "BIZRQ_PROMETHEUS_CA_FILE")]
    pub prometheus_ca_file: Option<PathBuf>,
    /// Seconds between readings (each one query per metric for every pod).
    #[arg(long, env = "BIZRQ_PROMETHEUS_EVERY_SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub prometheus_every_seconds: u64,
    /// The range queries' step: each point stands for this many seconds.
    #[arg(long, env = "BIZRQ_PROMETHEUS_STEP_SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub prometheus_step_seconds: u64,
    /// A step is read this many seconds after it ended (Prometheus has
    /// scraped it by then).
    #[arg(long, env = "BIZRQ_PROMETHEUS_DELAY_SECONDS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(0..=3600))]
    pub prometheus_delay_seconds: u64,
    /// The window of `rate()` in the CPU query (`${range}` in a template).
    #[arg(long, env = "BIZRQ_PROMETHEUS_RATE_RANGE_SECONDS", default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..=86400))]
    pub prometheus_rate_range_seconds: u64,
    /// Seconds a query may take, answer included; a slower Prometheus is
    /// taken as down for that reading.
    #[arg(long, env = "BIZRQ_PROMETHEUS_TIMEOUT_SECONDS", default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub prometheus_timeout_seconds: u64,
    /// Series one query may answer; beyond it the answer is refused.
    #[arg(long, env = "BIZRQ_PROMETHEUS_MAX_SERIES", default_value_t = 200_000)]
    pub prometheus_max_series: usize,
    /// MiB one answer may take; a larger one is refused unread.
    #[arg(long, env = "BIZRQ_PROMETHEUS_MAX_RESPONSE_MIB", default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub prometheus_max_response_mib: u64,
    /// Steps one reading covers at most: after an outage, bizrq catches
    /// up this many steps per reading.
    #[arg(long, env = "BIZRQ_PROMETHEUS_MAX_STEPS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=10000))]
    pub prometheus_max_steps: u64,
    /// How far back bizrq catches up after an outage; older is left
    /// unknown.
    #[arg(long, env = "BIZRQ_PROMETHEUS_CATCH_UP_HOURS", default_value_t = 24, value_parser = clap::value_parser!(u64).range(1..=720))]
    pub prometheus_catch_up_hours: u64,
    /// Admins are alerted once Prometheus has not answered for this long.
    #[arg(
        long,
        env = "BIZRQ_PROMETHEUS_ALERT_AFTER_SECONDS",
        default_value_t = 600
    )]
    pub prometheus_alert_after_seconds: u64,
    /// PromQL of busy GPU cards per pod (`namespace`, `pod` labels; a
    /// pod's busy cards, 0 to its cards).
    #[arg(long, env = "BIZRQ_PROMETHEUS_QUERY_GPU_BUSY", default_value = quota::real_usage::template::Metric::GpuBusy.default_template())]
    pub prometheus_query_gpu_busy: String,
    /// PromQL of GPU framebuffer memory in use per pod, in bytes.
    #[arg(long, env = "BIZRQ_PROMETHEUS_QUERY_GPU_MEMORY", default_value = quota::real_usage::template::Metric::GpuMemory.default_template())]
    pub prometheus_query_gpu_memory: String,
    /// PromQL of CPU in use per pod, in cores (`${range}`: the rate window).
    #[arg(long, env = "BIZRQ_PROMETHEUS_QUERY_CPU", default_value = quota::real_usage::template::Metric::Cpu.default_template())]
    pub prometheus_query_cpu: String,
    /// PromQL of memory in use per pod (the working set), in bytes.
    #[arg(long, env = "BIZRQ_PROMETHEUS_QUERY_MEMORY", default_value = quota::real_usage::template::Metric::Memory.default_template())]
    pub prometheus_query_memory: String,
    /// Kubeconfig of the cluster to run in. With it (or KUBECONFIG, or a
    /// service account inside a pod) quota objects are the cluster's CRD and
    /// the controller runs; without, bizrq is standalone on SQL.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Stay standalone even when a cluster is reachable.
    #[arg(long, env = "BIZRQ_STANDALONE")]
    pub standalone: bool,
    /// Namespace of the controller's Lease (cluster mode).
    #[arg(long, env = "POD_NAMESPACE", default_value = "bizrq-system")]
    pub namespace: String,
    /// bizrq's own identity as the API server authenticates its writes
    /// (`request.userInfo.username` in a review). Only a quota create sent
    /// by it may name a carve-out bizrq already made (the
    /// `bizrq.io/create-token` annotation); anyone else's carves anew.
    /// Default: `system:serviceaccount:<--namespace>:bizrq`, the
    /// ServiceAccount of `deploy/base/rbac.yaml`.
    #[arg(long, env = "BIZRQ_SERVICE_ACCOUNT")]
    pub service_account: Option<String>,
    /// This replica's identity in leader election and Events.
    #[arg(long, env = "POD_NAME")]
    pub pod_name: Option<String>,
    /// Name of the controller's Lease.
    #[arg(long, env = "BIZRQ_LEASE_NAME", default_value = "bizrq-controller")]
    pub lease_name: String,
    /// Seconds a leader may go without renewing its Lease before it stops
    /// running the controller; each renewal attempt is cut off at what is
    /// left of it. Must be above the 2 s between attempts and below the
    /// Lease's 15 s (checked when the flag is parsed), so a leader whose
    /// renewal stalls stops before another replica can take the Lease over.
    #[arg(
        long,
        env = "BIZRQ_LEASE_RENEW_DEADLINE_SECONDS",
        default_value_t = 10,
        value_parser = lease_renew_deadline
    )]
    pub lease_renew_deadline_seconds: u64,
    /// Controller workers reconciling quotas in parallel.
    #[arg(long, env = "BIZRQ_WORKERS", default_value_t = 5)]
    pub workers: usize,
    /// Grace period between marking a borrower's workload for reclaim and
    /// reclaiming it (unless the pressure goes away meanwhile).
    #[arg(long, env = "BIZRQ_RECLAIM_GRACE_SECONDS", default_value_t = 300)]
    pub reclaim_grace_seconds: u64,
    /// Seconds between API discoveries (workload CRDs installed later).
    #[arg(
        long,
        env = "BIZRQ_DISCOVERY_SECONDS",
        default_value_t = 60,
        hide = true
    )]
    pub discovery_seconds: u64,
    /// Standalone only: on a database without quotas, seed a sample
    /// organisation (quotas, workloads, users, a pending transfer and four
    /// weeks of usage history). Does nothing on a database with quotas.
    #[arg(long, env = "BIZRQ_DEMO")]
    pub demo: bool,
    /// Password of every demo user; generated and printed once if unset.
    #[arg(long, env = "BIZRQ_DEMO_PASSWORD", hide_env_values = true)]
    pub demo_password: Option<String>,
    /// SMTP server for alert email. Without it nothing is sent: messages
    /// wait in the outbox until a start with a host.
    #[arg(long, env = "BIZRQ_SMTP_HOST")]
    pub smtp_host: Option<String>,
    /// SMTP port.
    #[arg(long, env = "BIZRQ_SMTP_PORT", default_value_t = 587)]
    pub smtp_port: u16,
    /// starttls (required STARTTLS), tls (TLS from the start, e.g. port 465)
    /// or plain (no TLS: a local relay only).
    #[arg(long, env = "BIZRQ_SMTP_SECURITY", value_enum, default_value_t = SmtpSecurity::Starttls)]
    pub smtp_security: SmtpSecurity,
    /// SMTP user name (with --smtp-password); no authentication if unset.
    #[arg(long, env = "BIZRQ_SMTP_USERNAME", hide_env_values = true)]
    pub smtp_username: Option<String>,
    /// SMTP password.
    #[arg(long, env = "BIZRQ_SMTP_PASSWORD", hide_env_values = true)]
    pub smtp_password: Option<String>,
    /// The From of alert email.
    #[arg(
        long,
        env = "BIZRQ_SMTP_FROM",
        default_value = "bizrq <bizrq@localhost>"
    )]
    pub smtp_from: String,
    /// Hour of the day (UTC, 0-23) at which daily alert digests go out,
    /// with every alert of a digest kind opened since the last one.
    #[arg(long, env = "BIZRQ_DIGEST_HOUR", default_value_t = 8, value_parser = clap::value_parser!(u8).range(0..=23))]
    pub digest_hour: u8,
    /// Sign in with this OpenID Connect provider (its issuer exactly as
    /// it writes it in `iss`; https, or http to a loopback address).
    /// docs/oidc.md.
    #[arg(long, env = "BIZRQ_OIDC_ISSUER")]
    pub oidc_issuer: Option<String>,
    /// The client id bizrq is registered under at the provider.
    #[arg(long, env = "BIZRQ_OIDC_CLIENT_ID")]
    pub oidc_client_id: Option<String>,
    /// A file holding the client secret (a mounted Secret), read at start.
    /// Without it the secret is read from BIZRQ_OIDC_CLIENT_SECRET; there
    /// is no flag for the value, so it never shows in the process list.
    #[arg(long, env = "BIZRQ_OIDC_CLIENT_SECRET_FILE")]
    pub oidc_client_secret_file: Option<PathBuf>,
    /// How the client authenticates at the token endpoint.
    #[arg(long, env = "BIZRQ_OIDC_CLIENT_AUTH", value_enum, default_value_t = OidcClientAuth::Basic)]
    pub oidc_client_auth: OidcClientAuth,
    /// Scopes asked for (openid is always added). Add `groups` (Dex,
    /// Okta) or `offline_access` where the provider wants them for the
    /// groups claim or a refresh token.
    #[arg(
        long,
        env = "BIZRQ_OIDC_SCOPES",
        value_delimiter = ',',
        default_value = "openid,email,profile"
    )]
    pub oidc_scopes: Vec<String>,
    /// The ID token claim a new user's name comes from (a dotted path
    /// reaches into objects).
    #[arg(
        long,
        env = "BIZRQ_OIDC_USERNAME_CLAIM",
        default_value = "preferred_username"
    )]
    pub oidc_username_claim: String,
    /// The claim holding the person's email address.
    #[arg(long, env = "BIZRQ_OIDC_EMAIL_CLAIM", default_value = "email")]
    pub oidc_email_claim: String,
    /// The claim listing the person's groups (e.g. `groups`,
    /// `realm_access.roles`).
    #[arg(long, env = "BIZRQ_OIDC_GROUPS_CLAIM", default_value = "groups")]
    pub oidc_groups_claim: String,
    /// What the login page calls the provider ("Sign in with …").
    #[arg(
        long,
        env = "BIZRQ_OIDC_DISPLAY_NAME",
        default_value = "single sign-on"
    )]
    pub oidc_display_name: String,
    /// The redirect URI registered at the provider (default:
    /// `<--public-url>/login/oidc/callback`).
    #[arg(long, env = "BIZRQ_OIDC_REDIRECT_URL")]
    pub oidc_redirect_url: Option<String>,
    /// Where the provider sends the browser after logging out (default:
    /// `<--public-url>/login`); register it at the provider too.
    #[arg(long, env = "BIZRQ_OIDC_POST_LOGOUT_REDIRECT_URL")]
    pub oidc_post_logout_redirect_url: Option<String>,
    /// PEM CA certificates trusted for the provider besides the system's.
    #[arg(long, env = "BIZRQ_OIDC_CA_FILE")]
    pub oidc_ca_file: Option<PathBuf>,
    /// Seconds a request to the provider may take, answer read.
    #[arg(long, env = "BIZRQ_OIDC_TIMEOUT_SECONDS", default_value_t = 10)]
    pub oidc_timeout_seconds: u64,
    /// Clock skew allowed either way when checking exp, nbf and iat.
    #[arg(long, env = "BIZRQ_OIDC_CLOCK_SKEW_SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(0..=300))]
    pub oidc_clock_skew_seconds: u64,
    /// The least time between two reads of the provider's key set (a token
    /// naming an unknown key asks for it again, at most this often).
    #[arg(long, env = "BIZRQ_OIDC_JWKS_REFETCH_SECONDS", default_value_t = 10)]
    pub oidc_jwks_refetch_seconds: u64,
    /// How often the roles of signed-in people are refreshed from the
    /// provider (with their refresh token or userinfo): removal from a
    /// group takes effect within this.
    #[arg(long, env = "BIZRQ_OIDC_REFRESH_SECONDS", default_value_t = 300)]
    pub oidc_refresh_seconds: u64,
    /// For a person whose provider gave no refresh token, so whose groups
    /// cannot be asked about again: how long the roles a sign-in's groups
    /// gave last. After it, their sessions end and their API tokens carry
    /// only the roles given by hand, until they sign in again.
    #[arg(long, env = "BIZRQ_OIDC_UNREFRESHED_ROLES_SECONDS", default_value_t = 43_200, value_parser = clap::value_parser!(u64).range(1..=2_592_000))]
    pub oidc_unrefreshed_roles_seconds: u64,
    /// A file of rules from provider groups to roles (YAML or JSON,
    /// `groupRoles: [{group, role, quota}]`; a ConfigMap for GitOps),
    /// applied with the rules admins keep on /groups; read again when it
    /// changes.
    #[arg(long, env = "BIZRQ_OIDC_GROUP_ROLES")]
    pub oidc_group_roles: Option<PathBuf>,
    /// How often the group roles file is checked for a change.
    #[arg(
        long,
        env = "BIZRQ_OIDC_GROUP_ROLES_POLL_SECONDS",
        default_value_t = 10
    )]
    pub oidc_group_roles_poll_seconds: u64,
    /// The claim the Kubernetes API server names people by
    /// (`--oidc-username-claim` of kube-apiserver): with it, a person's
    /// Kubernetes username is linked to their portal user at sign-in.
    #[arg(long, env = "BIZRQ_OIDC_KUBE_USERNAME_CLAIM")]
    pub oidc_kube_username_claim: Option<String>,
    /// The API server's `--oidc-username-prefix` (default as the API
    /// server's: none for `email`, `<issuer>#` otherwise; `-` for none).
    #[arg(
        long,
        env = "BIZRQ_OIDC_KUBE_USERNAME_PREFIX",
        allow_hyphen_values = true
    )]
    pub oidc_kube_username_prefix: Option<String>,
    /// On a first sign-in whose username is a local account's that no
    /// provider person has yet, link the person to that account instead of
    /// refusing. Only with a username claim people cannot change.
    #[arg(long, env = "BIZRQ_OIDC_ADOPT_LOCAL_USERS")]
    pub oidc_adopt_local_users: bool,
    /// Who may sign in with a password: everyone (`all`), or only the
    /// break-glass accounts (`break-glass`, with --oidc-issuer).
    #[arg(long, env = "BIZRQ_LOCAL_LOGIN", value_enum, default_value_t = LocalLogin::All)]
    pub local_login: LocalLogin,
    /// The local accounts that may still sign in with a password under
    /// `--local-login break-glass`.
    #[arg(
        long,
        env = "BIZRQ_BREAK_GLASS_USERS",
        value_delimiter = ',',
        default_value = "admin"
    )]
    pub break_glass_users: Vec<String>,
    /// Log format.
    #[arg(long, env = "BIZRQ_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

impl ServeArgs {
    pub fn key_config(&self) -> KeyConfig {
        KeyConfig {
            gpu_resources: self
                .gpu_resources
                .iter()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect(),
            namespaces: self.excluded_namespaces.clone(),
        }
    }

    /// `--service-account`, or the default for `--namespace`.
    pub fn service_account(&self) -> String {
        self.service_account
            .clone()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| format!("system:serviceaccount:{}:bizrq", self.namespace))
    }

    /// Real usage's settings (`--prometheus-*`): None without
    /// `--prometheus-url`; an error for a URL or a template bizrq cannot
    /// use (the start stops, saying which).
    pub fn real_usage(&self) -> anyhow::Result<Option<RealUsageConfig>> {
        let args = self;
        let Some(url) = args
            .prometheus_url
            .as_deref()
            .map(str::trim)
            .filter(|u| !u.is_empty())
        else {
            return Ok(None);
        };
        if !(url.starts_with("http://") || url.starts_with("https://"))
            || url.contains(['?', '#'])
            || quota::text::hostile_char(url).is_some()
            || url.contains(' ')
        {
            anyhow::bail!(
                "--prometheus-url {url:?} is not a Prometheus base URL: write http(s)://HOST:PORT[/PATH]"
            );
        }
        let parse = |m: Metric, text: &str| -> Result<(Metric, Template), TemplateError> {
            Ok((m, Template::parse(m, text)?))
        };
        let queries = vec![
            parse(Metric::GpuBusy, &args.prometheus_query_gpu_busy)?,
            parse(Metric::GpuMemory, &args.prometheus_query_gpu_memory)?,
            parse(Metric::Cpu, &args.prometheus_query_cpu)?,
            parse(Metric::Memory, &args.prometheus_query_memory)?,
        ];
        Ok(Some(RealUsageConfig {
            url: url.to_string(),
            token_file: args.prometheus_token_file.clone(),
            ca_file: args.prometheus_ca_file.clone(),
            every: Duration::from_secs(args.prometheus_every_seconds.max(1)),
            step_ms: args.prometheus_step_seconds.max(1) as i64 * 1000,
            delay_ms: args.prometheus_delay_seconds as i64 * 1000,
            rate_range_seconds: args.prometheus_rate_range_seconds.max(1),
            timeout: Duration::from_secs(args.prometheus_timeout_seconds.max(1)),
            max_series: args.prometheus_max_series.max(1),
            max_bytes: (args.prometheus_max_response_mib as usize).saturating_mul(1 << 20),
            max_steps: args.prometheus_max_steps.max(1) as i64,
            catch_up_ms: args.prometheus_catch_up_hours.max(1) as i64 * 3_600_000,
            alert_after_ms: args.prometheus_alert_after_seconds as i64 * 1000,
            public_url: args.public_url.clone(),
            queries,
        }))
    }

    pub fn prices(&self) -> QosMultipliers {
        QosMultipliers {
            guaranteed: self.price_guaranteed as i128,
            burstable: self.price_burstable as i128,
            best_effort: self.price_best_effort as i128,
        }
    }

    /// Defaults for embedding (tests, benches): ephemeral ports.
    pub fn for_tests(database_url: &str) -> ServeArgs {
        let cli = Cli::parse_from([
            "bizrq",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--webhook-listen",
            "127.0.0.1:0",
            "--probe-listen",
            "127.0.0.1:0",
            "--database-url",
            database_url,
            "--admin-token",
            "test-token",
            "--standalone",
        ]);
        match cli.command {
            Command::Serve(a) => *a,
            Command::Crd | Command::Repair(_) => unreachable!("parsed a serve command"),
        }
    }
}

/// `--lease-renew-deadline-seconds`: a whole number of seconds above the
/// time between attempts and below the Lease's duration. Checked where the
/// flag is parsed; an embedder building [`ServeArgs`] itself (the tests)
/// sets the field as it means to.
fn lease_renew_deadline(s: &str) -> Result<u64, String> {
    use crate::cluster::leader::{LEASE_DURATION, RETRY};
    let secs: u64 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a whole number of seconds"))?;
    if secs >= LEASE_DURATION.as_secs() {
        return Err(format!(
            "{secs} s is not below the Lease's duration of {} s: a leader whose renewal stalls \
             would still run the controller after another replica took the Lease over",
            LEASE_DURATION.as_secs()
        ));
    }
    if secs <= RETRY.as_secs() {
        return Err(format!(
            "{secs} s is not above the {} s between renewal attempts: one slow answer would \
             stop the leader",
            RETRY.as_secs()
        ));
    }
    Ok(secs)
}

/// How the SMTP connection is secured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum SmtpSecurity {
    /// Plain connection upgraded with STARTTLS (required), usually port 587.
    #[default]
    Starttls,
    /// TLS from the first byte ("SMTPS"), usually port 465.
    Tls,
    /// No TLS at all: a relay on localhost or a test server only.
    Plain,
}

pub fn init_tracing(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("BIZRQ_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

#[cfg(test)]
mod redaction_tests {
    use crate::store::sql::redacted_url;

    #[test]
    fn a_database_password_never_reaches_the_log() {
        for (url, shown) in [
            (
                "postgres://bizrq:s3cr%40t@db:5432/bizrq?sslmode=require",
                "postgres://bizrq:***@db:5432/bizrq?sslmode=require",
            ),
            (
                "postgres://bizrq@db/bizrq?password=s3cret&sslmode=disable",
                "postgres://bizrq@db/bizrq?password=***&sslmode=disable",
            ),
            ("postgres://u:p:q@h/d", "postgres://u:***@h/d"),
            ("sqlite://bizrq.db", "sqlite://bizrq.db"),
        ] {
            assert_eq!(redacted_url(url), shown);
        }
    }

    #[test]
    fn a_key_value_dsn_shows_nothing_but_that_it_is_one() {
        assert_eq!(
            redacted_url("host=db user=bizrq password=s3cret dbname=bizrq"),
            "(unparsable URL)"
        );
        assert_eq!(redacted_url("sqlite::memory:"), "sqlite:(redacted)");
    }

    #[test]
    fn a_password_with_unencoded_separators_is_masked_whole() {
        for (url, shown) in [
            ("postgres://u:a?b@db/x", "postgres://u:***@db/x"),
            ("postgres://u:a#b@db/x", "postgres://u:***@db/x"),
            (
                "postgres://u:a/b@c@db/x?sslmode=require",
                "postgres://u:***@db/x?sslmode=require",
            ),
            (
                "postgres://db/x?password=p@ss",
                "postgres://db/x?password=***",
            ),
            (
                "postgres://db/x?password=a&b&sslmode=require",
                "postgres://db/x?password=***&sslmode=require",
            ),
        ] {
            assert_eq!(redacted_url(url), shown, "{url}");
        }
    }

    #[test]
    fn every_parameter_named_like_a_password_is_masked() {
        assert_eq!(
            redacted_url("postgres://u@db/x?sslpassword=k3y&sslmode=verify-full&PASSWORD=p"),
            "postgres://u@db/x?sslpassword=***&sslmode=verify-full&PASSWORD=***"
        );
    }

    #[test]
    fn help_does_not_show_the_database_url_from_the_environment() {
        use clap::CommandFactory;
        let cli = super::Cli::command();
        let serve = cli.find_subcommand("serve").expect("serve");
        let arg = serve
            .get_arguments()
            .find(|a| a.get_env() == Some(std::ffi::OsStr::new("DATABASE_URL")))
            .expect("--database-url reads DATABASE_URL");
        assert!(arg.is_hide_env_values_set());
    }
}

#[cfg(test)]
mod namespace_tests {
    use super::{Cli, Command, ServeArgs};
    use clap::Parser;

    fn serve(extra: &[&str]) -> Result<ServeArgs, clap::Error> {
        let mut argv = vec!["bizrq", "serve"];
        argv.extend_from_slice(extra);
        match Cli::try_parse_from(argv)?.command {
            Command::Serve(a) => Ok(*a),
            Command::Crd | Command::Repair(_) => unreachable!("parsed a serve command"),
        }
    }

    #[test]
    fn repair_takes_the_database_and_a_dry_run() {
        let argv = [
            "bizrq",
            "repair",
            "--database-url",
            "sqlite://x.db",
            "--dry-run",
        ];
        match Cli::try_parse_from(argv).unwrap().command {
            Command::Repair(a) => assert!(a.dry_run && a.database_url == "sqlite://x.db"),
            c => panic!("{c:?}"),
        }
        if std::env::var_os("DATABASE_URL").is_none() {
            assert!(
                Cli::try_parse_from(["bizrq", "repair"]).is_err(),
                "no default database: a repair names the one it repairs"
            );
        }
    }

    /// The namespaces the shipped webhook configuration keeps away from
    /// bizrq (`kubernetes.io/metadata.name NotIn [...]`), per namespaced
    /// webhook entry.
    fn shipped_exclusions() -> Vec<(String, Vec<String>)> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/base/webhook.yaml");
        let yaml = std::fs::read_to_string(path).expect("deploy/base/webhook.yaml");
        let config: serde_json::Value = serde_yaml_ng::from_str(&yaml).expect("YAML");
        let mut out = Vec::new();
        for hook in config["webhooks"].as_array().expect("webhooks") {
            let namespaced = hook["rules"]
                .as_array()
                .expect("rules")
                .iter()
                .any(|r| r["scope"] == "Namespaced");
            if !namespaced {
                continue;
            }
            let mut values: Vec<String> = hook["namespaceSelector"]["matchExpressions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|e| e["key"] == "kubernetes.io/metadata.name" && e["operator"] == "NotIn")
                .flat_map(|e| e["values"].as_array().cloned().unwrap_or_default())
                .map(|v| v.as_str().expect("a name").to_string())
                .collect();
            values.sort();
            out.push((hook["name"].as_str().unwrap().to_string(), values));
        }
        out
    }

    #[test]
    fn the_shipped_webhook_excludes_exactly_the_default_namespaces() {
        let default: Vec<String> = serve(&[])
            .unwrap()
            .key_config()
            .namespaces
            .excluded()
            .map(str::to_string)
            .collect();
        let shipped = shipped_exclusions();
        assert_eq!(shipped.len(), 6, "namespaced webhook entries: {shipped:?}");
        for (hook, excluded) in shipped {
            assert_eq!(excluded, default, "{hook}");
        }
    }

    #[test]
    fn excluded_namespaces_are_read_from_the_flag_and_checked() {
        let ns = serve(&["--excluded-namespaces", "kube-system, gpu-ops"])
            .unwrap()
            .key_config()
            .namespaces;
        assert!(!ns.governs("gpu-ops"));
        assert!(ns.governs("bizrq-system"));
        let e = serve(&["--excluded-namespaces", "Kube-System"]).unwrap_err();
        assert!(e.to_string().contains("is not a namespace name"), "{e}");
    }

    #[test]
    fn prometheus_settings_are_checked_when_read() {
        assert!(serve(&[]).unwrap().real_usage().unwrap().is_none());
        let ok = serve(&["--prometheus-url", "https://prom.monitoring:9090/"])
            .unwrap()
            .real_usage()
            .unwrap()
            .unwrap();
        assert_eq!(
            (ok.queries.len(), ok.step_ms, ok.delay_ms),
            (4, 60_000, 30_000)
        );
        for bad in [
            "prom:9090",
            "ftp://prom",
            "http://prom/?q=1",
            "http://pr om",
        ] {
            let e = serve(&["--prometheus-url", bad])
                .unwrap()
                .real_usage()
                .unwrap_err();
            assert!(
                e.to_string().contains("not a Prometheus base URL"),
                "{bad}: {e}"
            );
        }
        let e = serve(&[
            "--prometheus-url",
            "http://prom",
            "--prometheus-query-cpu",
            "rate(x[${window}])",
        ])
        .unwrap()
        .real_usage()
        .unwrap_err();
        assert!(e.to_string().contains("placeholder '${window'"), "{e}");
    }

    #[test]
    fn the_lease_renew_deadline_stays_below_the_lease_duration() {
        assert_eq!(serve(&[]).unwrap().lease_renew_deadline_seconds, 10);
        let a = serve(&["--lease-renew-deadline-seconds", "14"]).unwrap();
        assert_eq!(a.lease_renew_deadline_seconds, 14);
        for (bad, why) in [
            ("15", "not below the Lease's duration of 15 s"),
            ("600", "not below the Lease's duration of 15 s"),
            ("2", "not above the 2 s between renewal attempts"),
            ("0", "not above"),
            ("ten", "not a whole number"),
        ] {
            let e = serve(&["--lease-renew-deadline-seconds", bad]).unwrap_err();
            assert!(e.to_string().contains(why), "{bad}: {e}");
        }
    }
}
