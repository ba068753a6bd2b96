//! Bounds on what anonymous clients can make the portal spend.
//!
//! - [`PasswordHasher`]: argon2 takes 19 MiB and tens of milliseconds per
//!   hash, so every hash and check runs on a few dedicated threads behind a
//!   short queue. When the queue is full the caller answers 503 with
//!   `Retry-After` instead of queueing without bound: memory stays at
//!   (threads × 19 MiB) whatever the number of logins in flight, and the
//!   admission webhook keeps its CPU and memory. Dedicated threads (not the
//!   blocking pool) also keep the allocator's per-thread arenas, each of
//!   which may keep a freed 19 MiB buffer, to that same count.
//! - [`AddressLimiter`]: a token bucket per client address (IPv6 by /64,
//!   and by /48), and one per username across all addresses, taken before
//!   anything is stored or hashed; the SQL failure limiter in `auth`, keyed
//!   by the same address key, stays behind it. When the table is full the
//!   least recently used buckets are forgotten: nobody gets through free.
//!   Which of them an attempt takes depends on its [`Standing`]: the
//!   username's bucket, which anyone can empty, never stands between a
//!   user's own browser or usual address and its account.
//! - Length caps on usernames and passwords, and [`control_char`], the
//!   check every text input passes at the edge.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, OnceLock};

/// A password is at most this many bytes (argon2 accepts any length; the
/// cap keeps a 1 MB "password" from being hashed or stored).
pub const MAX_PASSWORD_BYTES: usize = 1024;
/// Waiting hash jobs per hashing thread before new ones are refused.
pub const QUEUE_PER_THREAD: usize = 4;
/// What a refused (busy) hash job tells the client to wait.
pub const BUSY_RETRY_SECS: u64 = 2;

/// All hashing threads are busy and the queue is full.
#[derive(Debug, thiserror::Error)]
#[error("the server is busy checking passwords; try again in a few seconds")]
pub struct Busy;

enum Job {
    Hash {
        password: String,
        reply: tokio::sync::oneshot::Sender<String>,
    },
    Verify {
        password: String,
        hash: Option<String>,
        reply: tokio::sync::oneshot::Sender<bool>,
    },
}

impl Job {
    fn run(self, scratch: &mut Scratch) {
        match self {
            Job::Hash { password, reply } => {
                let hash = scratch.generate(password.as_bytes());
                if let Err(e) = &hash {
                    tracing::error!(error = %e, "could not hash a password");
                }
                let _ = reply.send(hash.unwrap_or_default());
            }
            Job::Verify {
                password,
                hash,
                reply,
            } => {
                // An unknown user is checked against a fixed dummy hash, so
                // it takes as long as a wrong password.
                static DUMMY: OnceLock<String> = OnceLock::new();
                let hash = hash.unwrap_or_else(|| {
                    DUMMY
                        .get_or_init(|| password_auth::generate_hash("bizrq: no such user"))
                        .clone()
                });
                let _ = reply.send(scratch.verify(password.as_bytes(), &hash));
            }
        }
    }
}

/// The most argon2 memory a stored hash may ask for, in 1 KiB blocks (the
/// default is 19,456).
const MAX_BLOCKS: usize = 64 * 1024;

/// A hashing thread's argon2 memory, allocated once and reused. Given a
/// fresh 19 MiB buffer per hash (as `password-auth` does), glibc's
/// allocator keeps several of them per thread, so resident memory grows
/// with each hash (docs/portal-accounts.md, "Passwords"); one buffer per
/// thread keeps it at 19 MiB.
/// The PHC strings are the same as `password-auth`'s (argon2id, v=19,
/// default parameters), so either verifies the other's.
#[derive(Default)]
struct Scratch(Vec<argon2::Block>);

impl Scratch {
    fn argon2(
        &mut self,
        algorithm: argon2::Algorithm,
        version: argon2::Version,
        params: argon2::Params,
        password: &[u8],
        salt: &[u8],
        out: &mut [u8],
    ) -> Result<(), argon2::Error> {
        let need = params.block_count();
        if need > MAX_BLOCKS {
            return Err(argon2::Error::MemoryTooMuch);
        }
        if self.0.len() < need {
            self.0.resize(need, argon2::Block::default());
        }
        argon2::Argon2::new(algorithm, version, params).hash_password_into_with_memory(
            password,
            salt,
            out,
            &mut self.0[..need],
        )
    }

    fn generate(&mut self, password: &[u8]) -> Result<String, argon2::password_hash::Error> {
        use argon2::password_hash::{Output, PasswordHash, SaltString};
        use argon2::{Algorithm, Params, Version};
        let salt = SaltString::encode_b64(&rand::random::<[u8; 16]>())?;
        let mut salt_buf = [0u8; 64];
        let salt_bytes = salt.as_salt().decode_b64(&mut salt_buf)?;
        let params = Params::default();
        let mut out = [0u8; Params::DEFAULT_OUTPUT_LEN];
        self.argon2(
            Algorithm::Argon2id,
            Version::V0x13,
            params.clone(),
            password,
            salt_bytes,
            &mut out,
        )?;
        Ok(PasswordHash {
            algorithm: Algorithm::Argon2id.ident(),
            version: Some(Version::V0x13.into()),
            params: (&params).try_into()?,
            salt: Some(salt.as_salt()),
            hash: Some(Output::new(&out)?),
        }
        .to_string())
    }

    fn verify(&mut self, password: &[u8], phc: &str) -> bool {
        use argon2::password_hash::{Output, PasswordHash};
        use argon2::{Algorithm, Params, Version};
        let Ok(hash) = PasswordHash::new(phc) else {
            return false;
        };
        let (Ok(algorithm), Ok(params)) =
            (Algorithm::try_from(hash.algorithm), Params::try_from(&hash))
        else {
            return false;
        };
        let version = match hash.version.map(Version::try_from) {
            None => Version::default(),
            Some(Ok(v)) => v,
            Some(Err(_)) => return false,
        };
        let (Some(salt), Some(expected)) = (hash.salt, hash.hash) else {
            return false;
        };
        let mut salt_buf = [0u8; 64];
        let Ok(salt) = salt.decode_b64(&mut salt_buf) else {
            return false;
        };
        let mut out = vec![0u8; expected.len()];
        // Output's equality is constant-time.
        self.argon2(algorithm, version, params, password, salt, &mut out)
            .is_ok()
            && Output::new(&out).is_ok_and(|o| o == expected)
    }
}

/// Argon2 hashing and checking on `threads` dedicated threads with a queue
/// of [`QUEUE_PER_THREAD`] jobs per thread.
pub struct PasswordHasher {
    jobs: SyncSender<Job>,
}

impl PasswordHasher {
    pub fn new(threads: usize) -> PasswordHasher {
        let threads = threads.max(1);
        let (jobs, rx) = sync_channel::<Job>(threads * QUEUE_PER_THREAD);
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..threads {
            let rx = rx.clone();
            std::thread::Builder::new()
                .name(format!("bizrq-hash-{i}"))
                .spawn(move || {
                    // A login flood waits for a CPU after admissions.
                    crate::heavy::lower_priority();
                    let mut scratch = Scratch::default();
                    loop {
                        // The lock is held only while waiting for the next
                        // job; the sender's drop ends every thread.
                        let job = match rx.lock() {
                            Ok(rx) => rx.recv(),
                            Err(_) => return,
                        };
                        match job {
                            Ok(job) => job.run(&mut scratch),
                            Err(_) => return,
                        }
                    }
                })
                .expect("spawn a password hashing thread");
        }
        PasswordHasher { jobs }
    }

    fn submit(&self, job: Job) -> Result<(), Busy> {
        match self.jobs.try_send(job) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_)) => Err(Busy),
            // The threads are gone (cannot happen while self lives).
            Err(TrySendError::Disconnected(_)) => Err(Busy),
        }
    }

    /// The argon2id PHC string of a password.
    pub async fn hash(&self, password: String) -> Result<String, Busy> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.submit(Job::Hash { password, reply })?;
        answer.await.map_err(|_| Busy)
    }

    /// Whether `password` matches `hash` (None: no such user, checked
    /// against a dummy hash all the same).
    pub async fn verify(&self, password: String, hash: Option<String>) -> Result<bool, Busy> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.submit(Job::Verify {
            password,
            hash,
            reply,
        })?;
        answer.await.map_err(|_| Busy)
    }
}

/// A token bucket in integer milli-tokens: `per_minute` attempts at once,
/// refilled at `per_minute` a minute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bucket {
    milli: i64,
    at_ms: i64,
}

impl Bucket {
    pub fn full(per_minute: u32, now_ms: i64) -> Bucket {
        Bucket {
            milli: per_minute as i64 * 1000,
            at_ms: now_ms,
        }
    }

    fn refill(&mut self, per_minute: u32, now_ms: i64) {
        let cap = per_minute as i64 * 1000;
        let elapsed = (now_ms - self.at_ms).max(0);
        // per_minute tokens per 60,000 ms = per_minute milli-tokens per 60 ms.
        self.milli = (self.milli + elapsed.saturating_mul(per_minute as i64) / 60).min(cap);
        self.at_ms = now_ms;
    }

    /// Takes one token, or says in how many seconds one will be there.
    pub fn take(&mut self, per_minute: u32, now_ms: i64) -> Result<(), u64> {
        self.refill(per_minute, now_ms);
        if self.milli >= 1000 {
            self.milli -= 1000;
            return Ok(());
        }
        let rate = (per_minute as i64).max(1);
        let missing_ms = ((1000 - self.milli) * 60 + rate - 1) / rate;
        Err(((missing_ms + 999) / 1000).max(1) as u64)
    }

    fn is_full(mut self, per_minute: u32, now_ms: i64) -> bool {
        self.refill(per_minute, now_ms);
        self.milli >= per_minute as i64 * 1000
    }
}

/// Buckets kept at most per kind; beyond, full buckets are forgotten
/// first, then the least recently used.
const MAX_BUCKETS: usize = 100_000;
/// Attempts a minute on one username, from all addresses together: spread
/// over many addresses, guesses at one account still go this slowly.
pub const USERNAME_PER_MINUTE: u32 = 10;
/// An IPv6 /48 (one site) may make this many times an address's attempts.
const V6_48_FACTOR: u32 = 8;

/// Token buckets by key, at most `cap` of them.
struct Buckets {
    per_minute: u32,
    cap: usize,
    map: Mutex<HashMap<String, Bucket>>,
}

impl Buckets {
    fn new(per_minute: u32, cap: usize) -> Buckets {
        Buckets {
            per_minute: per_minute.max(1),
            cap: cap.max(1),
            map: Mutex::new(HashMap::new()),
        }
    }

    fn take(&self, key: &str, now_ms: i64) -> Result<(), u64> {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= self.cap && !map.contains_key(key) {
            let per_minute = self.per_minute;
            map.retain(|_, b| !b.is_full(per_minute, now_ms));
            if map.len() >= self.cap {
                // Still full: forget the least recently used eighth (a
                // bucket's `at_ms` is its last use), so memory stays bounded
                // and every client is still limited; one pass serves many
                // new keys.
                tracing::warn!(
                    "login limiter full: {} keys active, forgetting the least recently used",
                    self.cap
                );
                let mut used: Vec<i64> = map.values().map(|b| b.at_ms).collect();
                let nth = (self.cap / 8).min(used.len() - 1);
                let (_, cutoff, _) = used.select_nth_unstable(nth);
                let cutoff = *cutoff;
                map.retain(|_, b| b.at_ms > cutoff);
            }
        }
        map.entry(key.to_string())
            .or_insert_with(|| Bucket::full(self.per_minute, now_ms))
            .take(self.per_minute, now_ms)
    }
}

/// Login (and password change) attempts per client address (IPv6 also per
/// /48), and per username across all addresses.
pub struct AddressLimiter {
    addresses: Buckets,
    sites: Buckets,
    usernames: Buckets,
}

impl AddressLimiter {
    pub fn new(per_minute: u32) -> AddressLimiter {
        AddressLimiter::with_capacity(per_minute, MAX_BUCKETS)
    }

    fn with_capacity(per_minute: u32, cap: usize) -> AddressLimiter {
        let per_minute = per_minute.max(1);
        AddressLimiter {
            addresses: Buckets::new(per_minute, cap),
            sites: Buckets::new(per_minute.saturating_mul(V6_48_FACTOR), cap),
            usernames: Buckets::new(USERNAME_PER_MINUTE, cap),
        }
    }

    /// One attempt from `client` (an address as `auth::client_addr` gives
    /// it); Err: retry after so many seconds.
    pub fn attempt(&self, client: &str, now_ms: i64) -> Result<(), u64> {
        self.addresses.take(&address_key(client), now_ms)?;
        match site_key(client) {
            Some(site) => self.sites.take(&site, now_ms),
            None => Ok(()),
        }
    }

    /// One attempt on `username`, whatever the address; taken before the
    /// password is hashed.
    pub fn attempt_username(&self, username: &str, now_ms: i64) -> Result<(), u64> {
        self.usernames.take(username, now_ms)
    }
}

/// How well a login attempt's client is known to the owner of the
/// username it tries. Decides which limits the attempt takes before its
/// password is checked: failures elsewhere must slow an attacker without
/// refusing the right password to the owner's own browser or address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Standing {
    /// The browser holds a device cookie it signed in as this user with,
    /// and has not failed [`super::auth::LOGIN_MAX_FAILURES`] times lately.
    /// Takes neither the address's bucket nor the username's: its
    /// failures are counted per device, and only its holder has it.
    Device,
    /// The address (its key: IPv6 by /64) is one this user signed in from
    /// lately. Takes the address's bucket and its failure count, not the
    /// username's bucket, which anyone anywhere can empty.
    UsualAddress,
    /// Anyone else, an attacker included: every limit, the username's
    /// bucket too.
    Stranger,
}

impl Standing {
    /// From what the attempt brought: a device cookie given to this very
    /// user (and whether it failed too often lately), and whether the
    /// user signed in from this address lately. A device that failed too
    /// often is not trusted; its holder still gets the address's standing.
    pub fn of(
        device_is_this_users: bool,
        device_failed_too_often: bool,
        usual_address: bool,
    ) -> Standing {
        if device_is_this_users && !device_failed_too_often {
            Standing::Device
        } else if usual_address {
            Standing::UsualAddress
        } else {
            Standing::Stranger
        }
    }

    /// Whether the attempt takes a token from its address's bucket.
    pub fn takes_address_bucket(self) -> bool {
        self != Standing::Device
    }

    /// Whether the attempt takes a token from its username's bucket.
    pub fn takes_username_bucket(self) -> bool {
        self == Standing::Stranger
    }
}

/// The key a client address is limited and its failed logins counted by:
/// IPv4 as is, IPv6 by /64 (one host usually holds a whole /64). A key
/// given back maps to itself.
pub fn address_key(client: &str) -> String {
    match client.parse::<IpAddr>() {
        Ok(IpAddr::V6(v6)) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => {
                let s = v6.segments();
                format!("{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
            }
        },
        _ => client.to_string(),
    }
}

/// The /48 of an IPv6 address (or of its /64 key): the coarser bucket
/// that rotating through /64s of one site does not escape.
fn site_key(client: &str) -> Option<String> {
    let ip = client.strip_suffix("/64").unwrap_or(client);
    match ip.parse::<IpAddr>() {
        Ok(IpAddr::V6(v6)) if v6.to_ipv4_mapped().is_none() => {
            let s = v6.segments();
            Some(format!("{:x}:{:x}:{:x}::/48", s[0], s[1], s[2]))
        }
        _ => None,
    }
}

/// The first character in `s` that text input may not hold: NUL and every
/// other C0/C1 control except tab, line feed and carriage return (text
/// areas send those), and the bidirectional embeddings, overrides and
/// isolates (U+202A–U+202E, U+2066–U+2069), which make a reason or a name
/// read otherwise than it is written, in a page or an email.
pub fn control_char(s: &str) -> Option<char> {
    // One rule with the webhook's review checks (`quota::text`).
    quota::text::control_char(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_allows_its_burst_then_refills_at_its_rate() {
        let mut b = Bucket::full(6, 0);
        for _ in 0..6 {
            assert_eq!(b.take(6, 0), Ok(()));
        }
        assert_eq!(b.take(6, 0), Err(10), "6 a minute: one every 10 s");
        assert_eq!(b.take(6, 9_000), Err(1));
        assert_eq!(b.take(6, 10_000), Ok(()));
        assert_eq!(b.take(6, 600_000), Ok(()), "refilled");
        assert!(b.is_full(6, 10_000_000));
    }

    #[test]
    fn addresses_are_limited_apart_and_ipv6_by_its_64() {
        let l = AddressLimiter::new(2);
        assert!(l.attempt("10.0.0.1", 0).is_ok());
        assert!(l.attempt("10.0.0.1", 0).is_ok());
        assert!(l.attempt("10.0.0.1", 0).is_err());
        assert!(l.attempt("10.0.0.2", 0).is_ok());
        assert!(l.attempt("2001:db8::1", 0).is_ok());
        assert!(l.attempt("2001:db8::2", 0).is_ok());
        assert!(l.attempt("2001:db8::ffff:3", 0).is_err(), "the same /64");
        assert!(l.attempt("2001:db8:0:1::1", 0).is_ok());
    }

    #[test]
    fn rotating_ipv6_64s_of_one_48_is_limited_by_the_48() {
        let l = AddressLimiter::new(2);
        let allowed = (0..100)
            .filter(|i| l.attempt(&format!("2001:db8:7:{i:x}::1"), 0).is_ok())
            .count();
        assert_eq!(allowed, 2 * V6_48_FACTOR as usize);
        assert!(l.attempt("2001:db8:8::1", 0).is_ok(), "another /48");
    }

    #[test]
    fn one_username_is_limited_across_all_addresses() {
        let l = AddressLimiter::new(100);
        for _ in 0..USERNAME_PER_MINUTE {
            assert!(l.attempt_username("alice", 0).is_ok());
        }
        assert!(l.attempt_username("alice", 0).is_err());
        assert!(l.attempt_username("bob", 0).is_ok());
    }

    #[test]
    fn a_full_table_forgets_the_least_recently_used_and_still_limits() {
        let l = AddressLimiter::with_capacity(1, 16);
        assert!(l.attempt("10.0.0.1", 1_000).is_ok());
        assert!(l.attempt("10.0.0.1", 1_000).is_err());
        for i in 0..64 {
            let _ = l.attempt(&format!("10.1.0.{i}"), 1_000 + i);
            assert!(l.addresses.map.lock().unwrap().len() <= 16);
        }
        assert!(
            l.attempt("10.1.0.63", 1_100).is_err(),
            "a recent client is still limited when the table is full"
        );
    }

    #[test]
    fn only_strangers_take_the_usernames_bucket_and_only_devices_skip_the_address() {
        use Standing::*;
        // (device is this user's, device failed too often, usual address)
        for (device, failed, usual, standing) in [
            (true, false, false, Device),
            (true, false, true, Device),
            (true, true, true, UsualAddress),
            (true, true, false, Stranger),
            (false, false, true, UsualAddress),
            (false, true, true, UsualAddress),
            (false, false, false, Stranger),
        ] {
            assert_eq!(Standing::of(device, failed, usual), standing);
        }
        assert_eq!(
            [Device, UsualAddress, Stranger]
                .map(|s| (s.takes_address_bucket(), s.takes_username_bucket())),
            [(false, false), (true, false), (true, true)]
        );
    }

    #[test]
    fn the_address_key_maps_to_itself() {
        for a in ["10.0.0.1", "2001:db8::1", "::ffff:10.0.0.1"] {
            let k = address_key(a);
            assert_eq!(address_key(&k), k);
            assert_eq!(site_key(&k), site_key(a));
        }
    }

    #[test]
    fn hashes_are_password_auth_compatible_and_reuse_one_buffer() {
        let mut scratch = Scratch::default();
        let ours = scratch.generate(b"correct horse").unwrap();
        assert!(
            ours.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"),
            "{ours}"
        );
        assert!(password_auth::verify_password("correct horse", &ours).is_ok());
        let theirs = password_auth::generate_hash("battery staple");
        assert!(scratch.verify(b"battery staple", &theirs));
        assert!(!scratch.verify(b"battery stapler", &theirs));
        assert!(!scratch.verify(b"correct horse", "not a hash"));
        assert_eq!(scratch.0.len(), 19 * 1024, "one buffer of the default size");
    }

    #[test]
    fn control_characters_but_tab_and_newlines_are_refused() {
        assert_eq!(control_char("a\0b"), Some('\0'));
        assert_eq!(control_char("a\u{1b}[31m"), Some('\u{1b}'));
        assert_eq!(control_char("x\u{85}"), Some('\u{85}'));
        assert_eq!(control_char("line one\r\nline\ttwo é"), None);
    }

    #[test]
    fn bidirectional_overrides_are_refused() {
        for c in ['\u{202A}', '\u{202E}', '\u{2066}', '\u{2069}'] {
            assert_eq!(control_char(&format!("ok{c}kay")), Some(c));
        }
        assert_eq!(
            control_char("שלום, hello \u{200F}"),
            None,
            "a right-to-left mark is text"
        );
    }
}
