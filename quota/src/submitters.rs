//! Fairness between the submitters of one quota (docs/queueing.md §11,
//! "Between the submitters of one quota"), as SLURM's FairShare and
//! Kueue's Admission Fair Sharing weigh them: each submitter's spending,
//! decayed with a half-life, orders the queue's entries of equal
//! priority (lowest first), and an `sshare`-like table shows it.
//!
//! **The usage** is what the budget ledger bills (docs/budgets.md §6): per
//! cash key, the acc of every accrual less every refund, each row weighed
//! by 2^(−age ÷ half-life), its age taken from the middle of its span. It
//! is therefore priced resource-hours (card-hours of a GPU key at the
//! price list's weights, as SLURM's billing weights price TRES), and a
//! quota without a cash key has none. Rows older than
//! `HORIZON_HALF_LIVES` half-lives weigh less than 2^−16 and are not read.
//!
//! **The order** compares submitters by their normalised usage: over the
//! cash keys, the largest of (their decayed usage) ÷ (everyone's), an
//! exact ratio compared by cross-multiplication (`fair::Share`); no float
//! takes part. Every submitter has the same share (1 ÷ the submitters
//! with usage), so this is SLURM's order by fair-share factor.
//!
//! **The factor** shown is SLURM's 2^(−U ÷ S): U the normalised usage, S
//! the submitter's normalised shares. It is 1 for no usage, ½ exactly at
//! the fair line and falls towards 0 above it, so a person reads it
//! without knowing the other submitters; Kueue's ratio (usage ÷ weight)
//! is unbounded and says nothing without the rest of the table.

use crate::fair::Share;
use std::collections::BTreeMap;

/// The longest `submittedBy` kept: a Kubernetes username has no length
/// limit of its own, and every entry is written with the quota.
pub const MAX_SUBMITTER: usize = 128;

/// The one canonical key of a submitter (docs/queueing.md §11): what an
/// entry's `submittedBy`, `status.users` and the budget ledger's username
/// all hold, so a submitter's usage is always found under the name its
/// entries carry. None when empty; otherwise `username` with every
/// hostile character replaced by U+FFFD (`text::scrub`, as the ledger
/// stores it), cut at `MAX_SUBMITTER` bytes on a character boundary.
/// Applying it twice changes nothing.
pub fn submitter(username: &str) -> Option<String> {
    if username.is_empty() {
        return None;
    }
    let clean = crate::text::scrub(username);
    let mut end = clean.len().min(MAX_SUBMITTER);
    while !clean.is_char_boundary(end) {
        end -= 1;
    }
    Some(clean[..end].to_string())
}

/// Rows older than this many half-lives weigh less than 2^−16 of what
/// they billed and are left out of the read.
pub const HORIZON_HALF_LIVES: i64 = 16;

/// Buckets per half-life the ledger is summed in before it is folded: a
/// bucket's rows are aged from the middle of its span, so an amount's
/// weight is off by at most 2^(1/64), about 1 %.
pub const BUCKETS_PER_HALF_LIFE: i64 = 32;

/// The most submitters a table lists (the busiest; the rest are counted).
pub const MAX_ROWS: usize = 500;

/// What one submitter spent on one cash key over `[start_ms, end_ms)`: a
/// ledger row, or the sum of rows within one hour (signed: refunds are
/// negative).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spent {
    /// The username the ledger recorded; empty when none.
    pub user: String,
    pub key: String,
    pub start_ms: i64,
    pub end_ms: i64,
    pub amount: i128,
}

/// `amount` weighed by 2^(−age ÷ half-life): exact for whole half-lives
/// (a shift, rounded towards zero), otherwise to a part in 10^15. An age
/// of 0 or less (a row in the future of a skewed clock) weighs 1.
pub fn decay(amount: i128, age_ms: i64, half_life_ms: i64) -> i128 {
    let half_life_ms = half_life_ms.max(1);
    if amount == 0 || age_ms <= 0 {
        return amount;
    }
    let halvings = age_ms / half_life_ms;
    if halvings >= 127 {
        return 0;
    }
    let magnitude = amount.unsigned_abs() >> halvings;
    let rest = age_ms % half_life_ms;
    let magnitude = if rest == 0 {
        magnitude
    } else {
        let f = (-(rest as f64) / half_life_ms as f64).exp2();
        (magnitude as f64 * f) as u128
    };
    let m = magnitude.min(i128::MAX as u128) as i128;
    if amount < 0 {
        -m
    } else {
        m
    }
}

/// One submitter's usage of one cash key, in acc.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// What the rows read add up to (their span: the horizon).
    pub raw: i128,
    /// The same, each row decayed to now.
    pub decayed: i128,
}

/// Usage per submitter (empty: unknown), per cash key.
pub type Tally = BTreeMap<String, BTreeMap<String, Usage>>;

/// The first instant whose rows still count at `now_ms` (rows ending
/// before it are left out).
pub fn horizon(now_ms: i64, half_life_ms: i64) -> i64 {
    now_ms.saturating_sub(half_life_ms.max(1).saturating_mul(HORIZON_HALF_LIVES))
}

/// The key a username is tallied and looked up under: the canonical
/// submitter (`submitter`), empty for none. Rows the ledger
/// recorded under an older, longer or unscrubbed form of a name fold into
/// the one key its queue entries carry.
pub fn key(username: &str) -> String {
    submitter(username).unwrap_or_default()
}

/// Every submitter's usage at `now_ms` from the ledger's `rows`, per
/// canonical submitter (`key`).
pub fn tally(rows: &[Spent], now_ms: i64, half_life_ms: i64) -> Tally {
    let mut f = Folder::new(now_ms, half_life_ms, usize::MAX);
    for r in rows {
        let _ = f.add(r);
    }
    f.into_tally()
}

/// The most (submitter, cash key) pairs one read folds: its memory. A
/// ledger row is folded as it is read, so the read holds pairs, never
/// rows or buckets.
pub const MAX_PAIRS: usize = 20_000;

/// More (submitter, cash key) pairs than a read may fold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooManyPairs {
    pub limit: usize,
}

/// A tally built row by row as the ledger streams them: memory bounded by
/// the (submitter, cash key) pairs, at most `limit` of them.
#[derive(Clone, Debug)]
pub struct Folder {
    now_ms: i64,
    half_life_ms: i64,
    limit: usize,
    pairs: usize,
    tally: Tally,
}

impl Folder {
    pub fn new(now_ms: i64, half_life_ms: i64, limit: usize) -> Folder {
        Folder {
            now_ms,
            half_life_ms,
            limit,
            pairs: 0,
            tally: Tally::new(),
        }
    }

    /// Folds one row (or one bucket's sum), decayed from the middle of
    /// its span. A row that would make a pair past `limit` is refused
    /// and changes nothing.
    pub fn add(&mut self, r: &Spent) -> Result<(), TooManyPairs> {
        let user = key(&r.user);
        let known = self
            .tally
            .get(&user)
            .is_some_and(|keys| keys.contains_key(&r.key));
        if !known {
            if self.pairs >= self.limit {
                return Err(TooManyPairs { limit: self.limit });
            }
            self.pairs += 1;
        }
        let middle = r.start_ms / 2 + r.end_ms.max(r.start_ms) / 2;
        let u = self
            .tally
            .entry(user)
            .or_default()
            .entry(r.key.clone())
            .or_default();
        u.raw = u.raw.saturating_add(r.amount);
        u.decayed = u.decayed.saturating_add(decay(
            r.amount,
            self.now_ms.saturating_sub(middle),
            self.half_life_ms,
        ));
        Ok(())
    }

    /// How many (submitter, cash key) pairs it holds.
    pub fn pairs(&self) -> usize {
        self.pairs
    }

    pub fn into_tally(self) -> Tally {
        self.tally
    }
}

/// The decayed usage the queue's order compares: per submitter and cash
/// key (never below zero), and everyone's per key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Usages {
    by_user: BTreeMap<String, BTreeMap<String, u128>>,
    totals: BTreeMap<String, u128>,
    /// The lower median of the known submitters' normalised usage: where
    /// a submitter without recorded usage ranks (`share`).
    median: Share,
}

impl Default for Usages {
    fn default() -> Usages {
        Usages::from_decayed(BTreeMap::new())
    }
}

impl Usages {
    /// From a tally: each submitter's decayed usage, a refund-heavy
    /// negative one counted as none.
    pub fn of(tally: &Tally) -> Usages {
        let mut by_user = BTreeMap::new();
        for (user, keys) in tally {
            let keys: BTreeMap<String, u128> = keys
                .iter()
                .filter(|(_, u)| u.decayed > 0)
                .map(|(k, u)| (k.clone(), u.decayed as u128))
                .collect();
            if !keys.is_empty() {
                by_user.insert(user.clone(), keys);
            }
        }
        Usages::from_decayed(by_user)
    }

    /// From decayed usage per submitter and key; names are folded into
    /// their canonical key (`key`).
    pub fn from_decayed(raw: BTreeMap<String, BTreeMap<String, u128>>) -> Usages {
        let mut by_user: BTreeMap<String, BTreeMap<String, u128>> = BTreeMap::new();
        for (user, keys) in raw {
            let mine = by_user.entry(key(&user)).or_default();
            for (k, v) in keys {
                let t = mine.entry(k).or_default();
                *t = t.saturating_add(v);
            }
        }
        let mut totals: BTreeMap<String, u128> = BTreeMap::new();
        for keys in by_user.values() {
            for (k, v) in keys {
                let t = totals.entry(k.clone()).or_default();
                *t = t.saturating_add(*v);
            }
        }
        let mut u = Usages {
            by_user,
            totals,
            median: Share::ZERO,
        };
        let mut known: Vec<Share> = u.by_user.keys().map(|n| u.known(n)).collect();
        known.sort();
        if let Some(m) = known.get(known.len().saturating_sub(1) / 2) {
            u.median = *m;
        }
        u
    }

    pub fn is_empty(&self) -> bool {
        self.by_user.is_empty()
    }

    /// How many submitters have usage.
    pub fn len(&self) -> usize {
        self.by_user.len()
    }

    /// A submitter's normalised usage: over the keys, the largest of its
    /// decayed usage ÷ everyone's. A submitter without recorded usage (a
    /// new identity, or none: `None` is the unknown submitter) ranks at
    /// the lower median of the known ones, never ahead of them all: a
    /// fresh ServiceAccount gains nothing over the people it would pass.
    /// Without any known usage, zero.
    pub fn share(&self, user: Option<&str>) -> Share {
        let name = key(user.unwrap_or(""));
        if self.by_user.contains_key(&name) {
            self.known(&name)
        } else {
            self.median
        }
    }

    /// Whether `user` has recorded usage (otherwise `share` is the median).
    pub fn has_usage(&self, user: Option<&str>) -> bool {
        self.by_user.contains_key(&key(user.unwrap_or("")))
    }

    /// Where a submitter without recorded usage ranks.
    pub fn median(&self) -> Share {
        self.median
    }

    fn known(&self, name: &str) -> Share {
        let Some(keys) = self.by_user.get(name) else {
            return Share::ZERO;
        };
        keys.iter()
            .filter_map(|(k, v)| {
                let den = *self.totals.get(k)?;
                (den > 0).then_some(Share::Ratio { num: *v, den })
            })
            .max()
            .unwrap_or(Share::ZERO)
    }
}

/// One line of the `sshare`-like table.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// The username; None where the ledger recorded none (shown apart,
    /// so no username can pass for it).
    pub user: Option<String>,
    /// Per cash key, acc over the horizon, and the same decayed.
    pub usage: BTreeMap<String, Usage>,
    /// Normalised usage U as the queue ranks it (`Usages::share`): for a
    /// submitter without recorded usage, the median of those with.
    pub normalised: Share,
    /// No recorded usage: ranked at the median (`Usages::share`).
    pub at_median: bool,
    /// The factor SLURM's `sshare` shows: 2^(−U ÷ S), with S = 1 ÷ the
    /// number of submitters with usage (`Shares::with_usage`). For people
    /// only.
    pub factor: f64,
}

/// The `sshare`-like table of a tally.
#[derive(Clone, Debug, PartialEq)]
pub struct Shares {
    /// In the order the queue takes equals (lowest normalised usage
    /// first, then name); at most `MAX_ROWS`, the busiest kept.
    pub rows: Vec<Row>,
    /// Submitters past `MAX_ROWS`, not listed.
    pub left_out: usize,
    /// Submitters with usage: each one's normalised shares S is 1 ÷ this.
    pub with_usage: usize,
}

/// The table of `tally`.
pub fn table(tally: &Tally) -> Shares {
    let usages = Usages::of(tally);
    let mut rows: Vec<Row> = tally
        .iter()
        .map(|(user, usage)| Row {
            user: (!user.is_empty()).then(|| user.clone()),
            usage: usage.clone(),
            normalised: usages.share(Some(user)),
            at_median: !usages.has_usage(Some(user)),
            factor: 0.0,
        })
        .collect();
    // Busiest first to cut, then back to the queue's order.
    rows.sort_by(|a, b| b.normalised.cmp(&a.normalised).then(a.user.cmp(&b.user)));
    let left_out = rows.len().saturating_sub(MAX_ROWS);
    rows.truncate(MAX_ROWS);
    let with_usage = usages.len();
    for r in &mut rows {
        r.factor = factor(&r.normalised, with_usage.max(1) as f64);
    }
    rows.sort_by(|a, b| a.normalised.cmp(&b.normalised).then(a.user.cmp(&b.user)));
    Shares {
        rows,
        left_out,
        with_usage,
    }
}

/// SLURM's fair-share factor 2^(−U ÷ S) for normalised usage `u` and
/// shares S = 1 ÷ `submitters`. For people only.
pub fn factor(u: &Share, submitters: f64) -> f64 {
    match *u {
        Share::Infinite => 0.0,
        Share::Ratio { num, den } => {
            let u = num as f64 / den.max(1) as f64;
            (-u * submitters).exp2()
        }
    }
}

/// Three decimals, for people (`0.500`).
pub fn factor_display(f: f64) -> String {
    format!("{:.3}", f.clamp(0.0, 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: i64 = 7 * 86_400_000;

    fn spent(user: &str, key: &str, at: i64, amount: i128) -> Spent {
        Spent {
            user: user.into(),
            key: key.into(),
            start_ms: at,
            end_ms: at,
            amount,
        }
    }

    #[test]
    fn decay_halves_per_half_life_and_keeps_the_sign() {
        assert_eq!(decay(1000, 0, H), 1000);
        assert_eq!(decay(1000, -5, H), 1000, "a row from the future weighs 1");
        assert_eq!(decay(1000, H, H), 500);
        assert_eq!(decay(1000, 2 * H, H), 250);
        assert_eq!(decay(-1000, H, H), -500);
        assert_eq!(decay(i128::MAX, 200 * H, H), 0);
        let half = decay(1_000_000, H / 2, H);
        assert!((707_106..=707_107).contains(&half), "{half}");
        assert_eq!(decay(8, 3, 0), 1, "a zero half-life is one millisecond");
    }

    #[test]
    fn tally_reads_each_row_from_its_middle_and_sums_per_user_and_key() {
        let rows = [
            Spent {
                user: "alice".into(),
                key: "cash/gpu".into(),
                start_ms: 0,
                end_ms: 2 * H,
                amount: 800,
            },
            spent("alice", "cash/gpu", 2 * H, -200),
            spent("", "cash/gpu", 2 * H, 10),
        ];
        let t = tally(&rows, 2 * H, H);
        let a = t["alice"]["cash/gpu"];
        assert_eq!(a.raw, 600);
        assert_eq!(a.decayed, 400 - 200);
        assert_eq!(t[""]["cash/gpu"].decayed, 10);
    }

    #[test]
    fn one_key_for_the_queue_the_users_and_the_ledger() {
        // A long username with a bidi override and a control character:
        // the webhook refuses those, but a stored name may hold one; older
        // writes kept 256 bytes in `status.users`, the ledger scrubbed it.
        let raw = format!("\u{202E}evil\u{7}{}", "é".repeat(200));
        let canonical = submitter(&raw).unwrap();
        assert!(canonical.len() <= MAX_SUBMITTER);
        assert!(crate::text::hostile_char(&canonical).is_none());
        assert_eq!(submitter(&canonical).as_deref(), Some(&*canonical));
        let mut end = 256;
        while !raw.is_char_boundary(end) {
            end -= 1;
        }
        let as_ledger_had_it = crate::text::scrub(&raw[..end]).into_owned();
        let rows = [
            spent(&as_ledger_had_it, "cash/gpu", 0, 300),
            spent(&canonical, "cash/gpu", 0, 100),
            spent("bob", "cash/gpu", 0, 100),
        ];
        let t = tally(&rows, 0, H);
        assert_eq!(t.len(), 2, "both forms are one submitter: {t:?}");
        assert_eq!(t[&canonical]["cash/gpu"].raw, 400);
        let u = Usages::of(&t);
        // The entry's `submittedBy`, in any form, finds that usage.
        for by in [raw.as_str(), canonical.as_str(), as_ledger_had_it.as_str()] {
            assert_eq!(u.share(Some(by)), Share::Ratio { num: 400, den: 500 });
        }
        let t = table(&t);
        assert_eq!(t.rows.len(), 2);
        assert!(t
            .rows
            .iter()
            .any(|r| r.user.as_deref() == Some(&*canonical)));
    }

    #[test]
    fn the_folder_holds_pairs_not_buckets_and_refuses_past_its_bound() {
        // 200 submitters × 512 buckets of one key: 102,400 sums (past the
        // 50,000 groups a bucketed read once refused) fold into 200 pairs.
        let mut f = Folder::new(512 * H, H, 200);
        let mut rows = Vec::new();
        for u in 0..200 {
            for b in 0..512 {
                rows.push(spent(&format!("u{u:03}"), "cash/gpu", b * H, 1_000_000));
            }
        }
        for r in &rows {
            f.add(r).unwrap();
        }
        assert_eq!(f.pairs(), 200);
        assert_eq!(f.clone().into_tally(), tally(&rows, 512 * H, H));
        // A new pair past the bound is refused and changes nothing; a
        // known one still folds.
        let before = f.clone().into_tally();
        assert_eq!(
            f.add(&spent("newcomer", "cash/gpu", 0, 5)),
            Err(TooManyPairs { limit: 200 })
        );
        assert_eq!(
            f.add(&spent("u000", "cash/cpu", 0, 5)),
            Err(TooManyPairs { limit: 200 })
        );
        assert_eq!(f.clone().into_tally(), before);
        f.add(&spent("u000", "cash/gpu", 512 * H, 5)).unwrap();
        assert_eq!(f.pairs(), 200);
    }

    #[test]
    fn the_share_is_the_dominant_fraction_of_everyones_usage() {
        let u = Usages::from_decayed(
            [
                (
                    "a".to_string(),
                    [("x".to_string(), 30u128), ("y".to_string(), 1)].into(),
                ),
                (
                    "b".to_string(),
                    [("x".to_string(), 10u128), ("y".to_string(), 9)].into(),
                ),
            ]
            .into(),
        );
        assert_eq!(u.share(Some("a")), Share::Ratio { num: 30, den: 40 });
        assert_eq!(u.share(Some("b")), Share::Ratio { num: 9, den: 10 });
        // Without recorded usage: the lower median of the known, a and b
        // (9/10 and 3/4): 3/4. Never ahead of every known submitter.
        assert_eq!(u.median(), Share::Ratio { num: 30, den: 40 });
        assert_eq!(u.share(Some("nobody")), Share::Ratio { num: 30, den: 40 });
        assert_eq!(u.share(None), Share::Ratio { num: 30, den: 40 });
        assert!(!u.has_usage(Some("nobody")) && u.has_usage(Some("a")));
        assert_eq!(Usages::default().share(Some("nobody")), Share::ZERO);
    }

    #[test]
    fn a_fresh_identity_ranks_at_the_median_never_first() {
        // Five known submitters: 10, 20, 30, 40, 100 of 200.
        let u = Usages::from_decayed(
            [("a", 10u128), ("b", 20), ("c", 30), ("d", 40), ("e", 100)]
                .into_iter()
                .map(|(n, v)| (n.to_string(), [("x".to_string(), v)].into()))
                .collect(),
        );
        let fresh = u.share(Some("system:serviceaccount:ml:fresh-1"));
        assert_eq!(fresh, Share::Ratio { num: 30, den: 200 });
        assert!(fresh > u.share(Some("a")) && fresh > u.share(Some("b")));
        assert!(fresh < u.share(Some("d")));
        // An even count takes the lower of the two middle ones.
        let u = Usages::from_decayed(
            [("a", 10u128), ("b", 30)]
                .into_iter()
                .map(|(n, v)| (n.to_string(), [("x".to_string(), v)].into()))
                .collect(),
        );
        assert_eq!(u.share(Some("new")), u.share(Some("a")));
    }

    #[test]
    fn the_table_puts_the_least_used_first_with_slurms_factor() {
        let rows = [
            spent("alice", "cash/gpu", 0, 300),
            spent("bob", "cash/gpu", 0, 100),
            spent("", "cash/gpu", 0, 0),
            spent("(unknown)", "cash/gpu", 0, 0),
        ];
        let t = table(&tally(&rows, 0, H));
        assert_eq!((t.left_out, t.with_usage), (0, 2));
        let names: Vec<Option<&str>> = t.rows.iter().map(|r| r.user.as_deref()).collect();
        // Those without usage rank at the median (bob's); the one without
        // a username is None, apart from anyone named "(unknown)".
        assert_eq!(names, [None, Some("(unknown)"), Some("bob"), Some("alice")]);
        assert_eq!(
            t.rows.iter().map(|r| r.at_median).collect::<Vec<_>>(),
            [true, true, false, false]
        );
        // S = 1/2 (two submitters with usage): bob U = 1/4: 2^(-1/2).
        assert_eq!(factor_display(t.rows[0].factor), "0.707");
        assert_eq!(factor_display(t.rows[2].factor), "0.707");
        assert_eq!(factor_display(t.rows[3].factor), "0.354");
        // At the fair line (U = S) the factor is one half.
        assert_eq!(factor(&Share::Ratio { num: 1, den: 2 }, 2.0), 0.5);
    }

    #[test]
    fn the_table_is_bounded() {
        let rows: Vec<Spent> = (0..MAX_ROWS + 7)
            .map(|i| spent(&format!("u{i:04}"), "cash/gpu", 0, i as i128 + 1))
            .collect();
        let t = table(&tally(&rows, 0, H));
        assert_eq!((t.rows.len(), t.left_out), (MAX_ROWS, 7));
        assert!(
            t.rows.iter().all(|r| r.user.as_deref() >= Some("u0007")),
            "the busiest kept"
        );
    }
}
