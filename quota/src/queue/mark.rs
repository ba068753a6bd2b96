//! A held workload's own queue entry, as a mark on the object
//! (docs/queueing.md §12, "the second attempt", constraint 1): what the
//! mutating webhook would write in the annotation `queue.bizrq.io/entry`
//! instead of appending to the quota's `status.queue`, and the rule by
//! which a fold accepts one. Only the pure parts: the canonical bytes a
//! MAC is computed over and the acceptance of a mark read back. The MAC
//! itself (HMAC-SHA256 with a key every replica mounts) is the caller's,
//! passed in as a function, so this crate stays free of keys and crypto.
//!
//! Wired with `--queue-mark-key-file`: the webhook signs, the round's
//! fold accepts.

use crate::submitters::MAX_SUBMITTER;
use serde::{Deserialize, Serialize};

/// The annotation a mark is written in.
pub const ANNOTATION: &str = "queue.bizrq.io/entry";

/// The only version of the mark's encoding.
pub const VERSION: u32 = 1;

/// How far a mark's `since` may lie before the object's
/// `creationTimestamp` (or after the fold's now): the two clocks (the API
/// server's and the replica's that wrote the mark) may disagree by that.
pub const SKEW_MS: i64 = 5_000;

/// Longest field a mark may carry (a quota name and a reference are
/// Kubernetes names, far shorter): an annotation is bounded, and so is
/// the work of checking one.
pub const MAX_FIELD: usize = 512;

/// A mark as stored in the annotation (JSON).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mark {
    /// `VERSION`.
    pub v: u32,
    /// The quota the entry was queued in.
    pub quota: String,
    /// The object's `group/Kind/namespace/name`.
    #[serde(rename = "ref")]
    pub workload_ref: String,
    /// When it joined the queue (ms since the epoch).
    pub since: i64,
    /// Its priority when queued (read again from the object each round).
    pub priority: i32,
    /// Who created it (at most `MAX_SUBMITTER` bytes; empty when unknown).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub by: String,
    /// The MAC over `signed_bytes`, hex.
    pub mac: String,
}

/// What a fold needs to know of the object a mark was read on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binding<'a> {
    /// The quota the object is bound to now (its label).
    pub quota: &'a str,
    /// The object's own reference.
    pub workload_ref: &'a str,
    /// Its `creationTimestamp` (ms).
    pub created_ms: i64,
    /// The fold's now (ms).
    pub now_ms: i64,
}

/// Why a mark is not accepted; the object is then judged as a new create.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refused {
    /// Not JSON of a mark, or of another version.
    Unreadable,
    /// A field holds a character no identifier may hold, or is too long.
    Text(&'static str),
    /// Written for another quota than the object is bound to.
    OtherQuota,
    /// Written for another object.
    OtherObject,
    /// Its place is older than the object (copied from an earlier one) or
    /// in the future.
    Since,
    /// Not signed with a key of ours.
    Mac,
}

/// The bytes a mark's MAC covers: a domain prefix, then every field but
/// the MAC, each as a 4-byte big-endian length and its bytes, so no two
/// marks that differ in any field encode alike, whatever the fields hold.
pub fn signed_bytes(m: &Mark) -> Vec<u8> {
    let since = m.since.to_string();
    let priority = m.priority.to_string();
    let v = m.v.to_string();
    let fields: [&[u8]; 6] = [
        v.as_bytes(),
        m.quota.as_bytes(),
        m.workload_ref.as_bytes(),
        since.as_bytes(),
        priority.as_bytes(),
        m.by.as_bytes(),
    ];
    let mut out = b"bizrq queue mark\0".to_vec();
    for f in fields {
        out.extend_from_slice(&(f.len() as u32).to_be_bytes());
        out.extend_from_slice(f);
    }
    out
}

/// A mark for `workload_ref` queued in `quota` at `since`, signed by
/// `mac` (the MAC of `signed_bytes`, hex). `by` is cut to
/// `MAX_SUBMITTER` bytes on a character boundary, as an entry's
/// `submittedBy` is.
pub fn sign(
    quota: &str,
    workload_ref: &str,
    since: i64,
    priority: i32,
    by: &str,
    mac: impl Fn(&[u8]) -> String,
) -> Mark {
    let mut cut = by.len().min(MAX_SUBMITTER);
    while !by.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut m = Mark {
        v: VERSION,
        quota: quota.to_string(),
        workload_ref: workload_ref.to_string(),
        since,
        priority,
        by: by[..cut].to_string(),
        mac: String::new(),
    };
    m.mac = mac(&signed_bytes(&m));
    m
}

/// Read the annotation's value and accept it for the object `at`, or say
/// why not. `verify(bytes, mac)` says whether `mac` is a MAC of `bytes`
/// under one of our keys (compared in constant time by the caller).
pub fn accept(
    annotation: &str,
    at: &Binding<'_>,
    verify: impl Fn(&[u8], &str) -> bool,
) -> Result<Mark, Refused> {
    if annotation.len() > 4 * MAX_FIELD {
        return Err(Refused::Unreadable);
    }
    let m: Mark = serde_json::from_str(annotation).map_err(|_| Refused::Unreadable)?;
    if m.v != VERSION {
        return Err(Refused::Unreadable);
    }
    for (name, s, max) in [
        ("quota", &m.quota, MAX_FIELD),
        ("ref", &m.workload_ref, MAX_FIELD),
        ("by", &m.by, MAX_SUBMITTER),
        ("mac", &m.mac, MAX_FIELD),
    ] {
        if s.len() > max || crate::text::hostile_char(s).is_some() {
            return Err(Refused::Text(name));
        }
    }
    bound_to(&m, at)?;
    if !verify(&signed_bytes(&m), &m.mac) {
        return Err(Refused::Mac);
    }
    Ok(m)
}

/// Whether a readable mark binds the object `at`: its quota, its
/// reference, and a place neither before the object nor in the future.
fn bound_to(m: &Mark, at: &Binding<'_>) -> Result<(), Refused> {
    if m.quota != at.quota {
        return Err(Refused::OtherQuota);
    }
    if m.workload_ref != at.workload_ref {
        return Err(Refused::OtherObject);
    }
    if m.since < at.created_ms.saturating_sub(SKEW_MS)
        || m.since > at.now_ms.saturating_add(SKEW_MS)
    {
        return Err(Refused::Since);
    }
    Ok(())
}

/// The marks accepted by the last fold of one quota and the one running,
/// by the annotation's text, so that a round reads and verifies each
/// held object's mark once, not once a round (a quota holds hundreds,
/// and their parse and MAC were a tenth of a round's CPU). What a text
/// says and whether its MAC is one of ours cannot change while the keys
/// stay (the server reads them once, at start, and must drop its memos
/// if it ever reads them again); what can — the object it
/// is read on, the quota it is bound to, the object's creation and the
/// fold's now — is checked again at every use. So `Memo::accept` answers
/// exactly as `accept` does.
///
/// Bounded: `turn`, at the end of each fold, forgets every mark that
/// fold did not accept. Only accepted marks are kept; a refused text is
/// judged again each time (refusals are remembered by the server per
/// object, `bad_marks`). The texts are looked up in a map with a hasher
/// keyed at random per process, and a hit only returns a mark the
/// caller's own object carries.
#[derive(Debug, Default)]
pub struct Memo {
    last: std::collections::HashMap<String, std::sync::Arc<Mark>>,
    this: std::collections::HashMap<String, std::sync::Arc<Mark>>,
}

impl Memo {
    /// `accept`, the text read and verified only if no fold since the
    /// last `turn` but one accepted it.
    pub fn accept(
        &mut self,
        annotation: &str,
        at: &Binding<'_>,
        verify: impl Fn(&[u8], &str) -> bool,
    ) -> Result<std::sync::Arc<Mark>, Refused> {
        // Refused before it is hashed, as `accept` refuses it first.
        if annotation.len() > 4 * MAX_FIELD {
            return Err(Refused::Unreadable);
        }
        if let Some(m) = self.this.get(annotation) {
            bound_to(m, at)?;
            return Ok(m.clone());
        }
        if let Some((text, m)) = self.last.remove_entry(annotation) {
            let bound = bound_to(&m, at);
            self.this.insert(text, m.clone());
            bound?;
            return Ok(m);
        }
        let m = std::sync::Arc::new(accept(annotation, at, verify)?);
        self.this.insert(annotation.to_string(), m.clone());
        Ok(m)
    }

    /// The end of a fold: what it did not use is forgotten.
    pub fn turn(&mut self) {
        self.last = std::mem::take(&mut self.this);
    }

    /// How many texts it keeps (what the tests bound).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.last.len() + self.this.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // A stand-in keyed MAC for the rules here (the real one is HMAC-SHA256
    // in the server): any change of bytes or key changes it.
    fn toy_mac(key: u64) -> impl Fn(&[u8]) -> String {
        move |b: &[u8]| {
            let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ key;
            for x in b {
                h = (h ^ u64::from(*x)).wrapping_mul(0x0100_0000_01b3);
            }
            format!("{h:016x}")
        }
    }

    fn verify_with(key: u64) -> impl Fn(&[u8], &str) -> bool {
        move |b: &[u8], mac: &str| toy_mac(key)(b) == mac
    }

    const REF: &str = "batch/Job/ml/train";
    const T: i64 = 1_800_000_000_000;

    fn at(quota: &'static str) -> Binding<'static> {
        Binding {
            quota,
            workload_ref: REF,
            created_ms: T,
            now_ms: T + 60_000,
        }
    }

    fn json(m: &Mark) -> String {
        serde_json::to_string(m).unwrap()
    }

    #[test]
    fn a_mark_of_ours_for_this_quota_and_object_is_accepted() {
        let m = sign("ml", REF, T + 10, 100, "alice", toy_mac(7));
        assert_eq!(accept(&json(&m), &at("ml"), verify_with(7)), Ok(m));
    }

    #[test]
    fn a_forged_or_misbound_mark_is_refused() {
        let m = sign("ml", REF, T + 10, 100, "alice", toy_mac(7));
        // Another key (not bizrq's): refused.
        assert_eq!(
            accept(&json(&m), &at("ml"), verify_with(8)),
            Err(Refused::Mac)
        );
        // An object moved to another quota keeps no place.
        assert_eq!(
            accept(&json(&m), &at("web"), verify_with(7)),
            Err(Refused::OtherQuota)
        );
        // Copied onto another object.
        let other = Binding {
            workload_ref: "batch/Job/ml/other",
            ..at("ml")
        };
        assert_eq!(
            accept(&json(&m), &other, verify_with(7)),
            Err(Refused::OtherObject)
        );
        // Copied onto the same name created again later: its place is
        // older than the object.
        let later = Binding {
            created_ms: T + 3_600_000,
            now_ms: T + 3_700_000,
            ..at("ml")
        };
        assert_eq!(
            accept(&json(&m), &later, verify_with(7)),
            Err(Refused::Since)
        );
        // A field changed after signing (an earlier place, a higher
        // priority, another submitter): the MAC no longer verifies.
        for change in [
            |m: &mut Mark| m.since -= 1,
            |m: &mut Mark| m.priority += 1,
            |m: &mut Mark| m.by = "mallory".into(),
        ] {
            let mut forged = m.clone();
            change(&mut forged);
            assert_eq!(
                accept(&json(&forged), &at("ml"), verify_with(7)),
                Err(Refused::Mac)
            );
        }
        // From the future.
        let ahead = sign("ml", REF, T + 3_600_000, 100, "alice", toy_mac(7));
        assert_eq!(
            accept(&json(&ahead), &at("ml"), verify_with(7)),
            Err(Refused::Since)
        );
    }

    #[test]
    fn hostile_or_unreadable_marks_are_refused_before_any_mac() {
        let never = |_: &[u8], _: &str| -> bool { panic!("no MAC is checked") };
        for bad in ["", "{", "[]", "{\"v\":2}", &"x".repeat(10_000)] {
            assert_eq!(accept(bad, &at("ml"), never), Err(Refused::Unreadable));
        }
        let mut m = sign("ml", REF, T + 10, 100, "alice", toy_mac(7));
        m.v = 2;
        assert_eq!(
            accept(&json(&m), &at("ml"), never),
            Err(Refused::Unreadable)
        );
        for by in ["al\u{202E}ice", "al\u{0}ice", "a\nb"] {
            let m = sign("ml", REF, T + 10, 100, by, toy_mac(7));
            assert_eq!(
                accept(&json(&m), &at("ml"), never),
                Err(Refused::Text("by"))
            );
        }
        let m = sign("m\u{2066}l", REF, T + 10, 100, "alice", toy_mac(7));
        assert_eq!(
            accept(&json(&m), &at("ml"), never),
            Err(Refused::Text("quota"))
        );
    }

    #[test]
    fn a_long_submitter_is_cut_on_a_character_boundary_and_still_verifies() {
        let by = "é".repeat(MAX_SUBMITTER);
        let m = sign("ml", REF, T + 10, 0, &by, toy_mac(7));
        assert!(m.by.len() <= MAX_SUBMITTER && by.starts_with(&m.by));
        assert_eq!(accept(&json(&m), &at("ml"), verify_with(7)), Ok(m));
    }

    proptest! {
        /// No two marks that differ in a signed field have the same signed
        /// bytes, whatever their strings hold (separators included).
        #[test]
        fn signed_bytes_never_collide(
            a in ("[a-z/|:\\x00]{0,6}", "[a-z/|:\\x00]{0,6}", -3i64..3, -2i32..2, "[a-z/|:\\x00]{0,6}"),
            b in ("[a-z/|:\\x00]{0,6}", "[a-z/|:\\x00]{0,6}", -3i64..3, -2i32..2, "[a-z/|:\\x00]{0,6}"),
        ) {
            let mark = |(q, r, s, p, by): &(String, String, i64, i32, String)| Mark {
                v: VERSION,
                quota: q.clone(),
                workload_ref: r.clone(),
                since: *s,
                priority: *p,
                by: by.clone(),
                mac: String::new(),
            };
            let (ma, mb) = (mark(&a), mark(&b));
            prop_assert_eq!(signed_bytes(&ma) == signed_bytes(&mb), ma == mb);
        }

        /// The memo answers every mark, bound to every object at every
        /// instant, exactly as `accept` does, over several folds; past a
        /// fold it keeps only texts that fold used and once accepted.
        #[test]
        fn the_memo_accepts_exactly_as_accept(
            folds in proptest::collection::vec(
                proptest::collection::vec(
                    (0usize..6, 0usize..2, 0usize..2, -8_000i64..70_000, 0i64..20_000),
                    0..12,
                ),
                1..6,
            ),
        ) {
            let quotas = ["ml", "web"];
            let refs = [REF, "batch/Job/ml/other"];
            // Marks of ours, for both quotas and objects and two places, a
            // forged one (another key), and text that is no mark.
            let mut texts: Vec<String> = Vec::new();
            for (q, r, since) in [("ml", REF, T + 10), ("web", REF, T + 30_000), ("ml", refs[1], T - 6_000)] {
                texts.push(json(&sign(q, r, since, 1, "alice", toy_mac(7))));
            }
            texts.push(json(&sign("ml", REF, T + 10, 1, "mallory", toy_mac(8))));
            texts.push("{not a mark".to_string());
            texts.push(json(&sign("web", refs[1], T, 2, "bob", toy_mac(7))));
            let mut memo = Memo::default();
            for fold in folds {
                let mut used = std::collections::HashSet::new();
                for (t, q, r, created, later) in fold {
                    used.insert(t);
                    let b = Binding {
                        quota: quotas[q],
                        workload_ref: refs[r],
                        created_ms: T + created,
                        now_ms: T + created + later,
                    };
                    let want = accept(&texts[t], &b, verify_with(7));
                    let got = memo.accept(&texts[t], &b, verify_with(7)).map(|m| (*m).clone());
                    prop_assert_eq!(&got, &want);
                }
                memo.turn();
                // Kept past a fold: only texts it used, and never one
                // refused by its MAC or unreadable.
                for k in memo.last.keys() {
                    let i = texts.iter().position(|t| t == k).unwrap();
                    prop_assert!(used.contains(&i) && i != 3 && i != 4, "kept {}", k);
                }
            }
        }
    }

    #[test]
    fn a_memo_forgets_what_a_fold_did_not_use() {
        let m = json(&sign("ml", REF, T + 10, 100, "alice", toy_mac(7)));
        let mut memo = Memo::default();
        assert!(memo.accept(&m, &at("ml"), verify_with(7)).is_ok());
        // A forged mark is never kept.
        let f = json(&sign("ml", REF, T + 10, 100, "alice", toy_mac(8)));
        assert_eq!(
            memo.accept(&f, &at("ml"), verify_with(7)),
            Err(Refused::Mac)
        );
        assert_eq!(memo.len(), 1);
        memo.turn();
        // Used again: kept by this fold; its MAC is not checked again.
        assert!(memo.accept(&m, &at("ml"), |_, _| false).is_ok());
        // Bound elsewhere: refused as `accept` refuses it.
        assert_eq!(
            memo.accept(&m, &at("web"), |_, _| false),
            Err(Refused::OtherQuota)
        );
        memo.turn();
        assert_eq!(memo.len(), 1);
        memo.turn();
        memo.turn();
        assert_eq!(memo.len(), 0);
    }
}
