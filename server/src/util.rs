//! Small helpers for the imperative shell: the clock and identifiers.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A random RFC 4122 version-4 UUID.
pub fn new_uid() -> String {
    uuid::Uuid::new_v4().to_string()
}

pub fn hex(bytes: &[u8]) -> String {
    hex::encode(bytes)
}

pub fn sha256_hex(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

/// Equality that takes the same time whatever the inputs share.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.ct_eq(b).into()
}

/// One CSV field (RFC 4180): quoted when it holds a comma, quote or line
/// break, quotes doubled. A field a spreadsheet would run as a formula is
/// prefixed with `'`: one starting with `=`, `+`, `-`, `@`, `|` (DDE) or
/// their full-width forms (`＝` and the rest, which spreadsheets in East
/// Asian locales read as the ASCII ones), also after leading whitespace or
/// line breaks (LibreOffice and Excel skip them before a formula), and one
/// starting with a tab or carriage return.
pub fn csv_field(s: &str) -> String {
    // A plain negative number (`-5`, `-0.25`) stays a number a spreadsheet sums.
    let digits = |d: &str| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit());
    let number = s
        .strip_prefix('-')
        .is_some_and(|n| match n.split_once('.') {
            Some((w, f)) => digits(w) && digits(f),
            None => digits(n),
        });
    let s = if !number && formula_like(s) {
        format!("'{s}")
    } else {
        s.to_string()
    };
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s
    }
}

/// Whether a spreadsheet could take a cell for a formula: its first
/// character that is not whitespace or invisible (zero-width spaces and
/// joiners, the byte order mark) starts one, or it starts with a tab or
/// carriage return.
fn formula_like(s: &str) -> bool {
    const STARTS: [char; 9] = ['=', '+', '-', '@', '|', '＝', '＋', '－', '＠'];
    let invisible = |c: char| {
        c.is_whitespace() || matches!(c, '\u{200B}'..='\u{200D}' | '\u{2060}' | '\u{FEFF}')
    };
    s.starts_with(['\t', '\r'])
        || s.chars()
            .find(|c| !invisible(*c))
            .is_some_and(|c| STARTS.contains(&c))
}

/// Paces background work done in chunks (the usage sampler, the alert
/// sweep) so it leaves the cores to admissions: `rest`, after a chunk,
/// sleeps `RATIO` times as long as the chunk took, so the work uses at most
/// a quarter of the time while it runs — the cost-based delay PostgreSQL's
/// autovacuum paces itself with (`vacuum_cost_delay`). Only yielding is not
/// enough on two cores: a sample of a large forest keeps a core busy for a
/// long stretch, and every admission arriving meanwhile waits behind it,
/// enough of them to make a minute's p99 alone (docs/benchmarks.md, "No stalls").
pub struct Pace {
    since: std::time::Instant,
}

impl Pace {
    /// Sleep this many times as long as the chunk before it ran.
    pub const RATIO: u32 = 3;
    /// The longest single rest.
    pub const MAX_REST: std::time::Duration = std::time::Duration::from_millis(50);

    pub fn start() -> Pace {
        Pace {
            since: std::time::Instant::now(),
        }
    }

    /// After a chunk: the rest it earned (at least a yield to the runtime).
    pub async fn rest(&mut self) {
        let rest = (self.since.elapsed() * Self::RATIO).min(Self::MAX_REST);
        if rest >= std::time::Duration::from_millis(1) {
            tokio::time::sleep(rest).await;
        } else {
            tokio::task::yield_now().await;
        }
        self.since = std::time::Instant::now();
    }
}

/// The names in `timers` whose time is `now` or before, taken out.
pub fn take_due<T: PartialOrd + Copy>(
    timers: &mut std::collections::HashMap<String, T>,
    now: T,
) -> Vec<String> {
    let due: Vec<String> = timers
        .iter()
        .filter(|(_, at)| **at <= now)
        .map(|(n, _)| n.clone())
        .collect();
    for n in &due {
        timers.remove(n);
    }
    due
}

/// Two ascending iterators as one ascending iterator (an item in both
/// comes twice).
pub fn merge_sorted<T: Ord, A, B>(a: A, b: B) -> impl Iterator<Item = T>
where
    A: Iterator<Item = T>,
    B: Iterator<Item = T>,
{
    let (mut a, mut b) = (a.peekable(), b.peekable());
    std::iter::from_fn(move || match (a.peek(), b.peek()) {
        (Some(x), Some(y)) if y < x => b.next(),
        (Some(_), _) => a.next(),
        (None, _) => b.next(),
    })
}

/// Run `work` in one of `places`' places, held for `at_most`: past it,
/// `work` goes on without its place, so one that stalls holds the others
/// back `at_most` at most. Never cancelled: work dropped midway could
/// leave a write it started to land later.
pub async fn in_place<F: std::future::Future>(
    places: &tokio::sync::Semaphore,
    at_most: std::time::Duration,
    work: F,
) -> F::Output {
    let place = places.acquire().await;
    tokio::pin!(work);
    tokio::select! {
        out = &mut work => return out,
        _ = tokio::time::sleep(at_most) => {}
    }
    drop(place);
    work.await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stalled work gives up its place after `at_most` and still ends
    /// with its own result; work that ends gives its place back at once.
    #[tokio::test]
    async fn a_stalled_work_holds_its_place_for_a_while_and_is_never_dropped() {
        use std::time::{Duration, Instant};
        let places = std::sync::Arc::new(tokio::sync::Semaphore::new(1));
        let at_most = Duration::from_millis(100);
        // Quick works, one after the other in the one place, each giving
        // it back as it ends.
        for i in 0..3 {
            assert_eq!(in_place(&places, at_most, async { i }).await, i);
            assert_eq!(places.available_permits(), 1);
        }
        // A work that stalls until told.
        let (go, wait) = tokio::sync::oneshot::channel::<u32>();
        let stalled = tokio::spawn({
            let places = places.clone();
            async move { in_place(&places, at_most, async { wait.await.unwrap() + 1 }).await }
        });
        tokio::task::yield_now().await;
        let t = Instant::now();
        assert_eq!(in_place(&places, at_most, async { 7 }).await, 7);
        let waited = t.elapsed();
        assert!(
            waited >= at_most / 2 && waited < Duration::from_secs(5),
            "{waited:?}"
        );
        go.send(41).unwrap();
        assert_eq!(stalled.await.unwrap(), 42);
        assert_eq!(places.available_permits(), 1);
    }

    #[test]
    fn two_sorted_lists_merge_in_order() {
        let merged: Vec<i32> =
            merge_sorted([1, 4, 6].into_iter(), [2, 3, 7, 9].into_iter()).collect();
        assert_eq!(merged, vec![1, 2, 3, 4, 6, 7, 9]);
        assert_eq!(merge_sorted(0..0, 0..3).collect::<Vec<_>>(), vec![0, 1, 2]);
        assert_eq!(merge_sorted(0..3, 0..0).collect::<Vec<_>>(), vec![0, 1, 2]);
    }

    /// A chunk of work earns a rest `RATIO` times as long (a lower bound:
    /// a sleep never ends early), capped at `MAX_REST`.
    #[tokio::test]
    async fn a_chunk_earns_a_rest_three_times_as_long() {
        let mut pace = Pace::start();
        let t = std::time::Instant::now();
        while t.elapsed() < std::time::Duration::from_millis(6) {
            std::hint::spin_loop();
        }
        let before_rest = std::time::Instant::now();
        pace.rest().await;
        assert!(before_rest.elapsed() >= std::time::Duration::from_millis(18));
        // A long chunk rests MAX_REST, not three times its length.
        let mut pace = Pace {
            since: std::time::Instant::now() - std::time::Duration::from_secs(10),
        };
        let before_rest = std::time::Instant::now();
        pace.rest().await;
        let rested = before_rest.elapsed();
        assert!(rested >= Pace::MAX_REST && rested < std::time::Duration::from_secs(10));
    }

    #[test]
    fn new_uid_is_a_version_4_uuid() {
        let u = new_uid();
        let parsed = uuid::Uuid::parse_str(&u).unwrap();
        assert_eq!(parsed.get_version_num(), 4);
        assert_eq!(u, u.to_lowercase());
        assert_ne!(u, new_uid());
    }

    #[test]
    fn hex_and_constant_time_eq() {
        assert_eq!(hex(&[0x00, 0xab, 0xff]), "00abff");
        assert_eq!(
            sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(constant_time_eq(b"same", b"same"));
        assert!(!constant_time_eq(b"same", b"sane"));
        assert!(!constant_time_eq(b"same", b"same-longer"));
    }
}
