//! The keys and MAC of a queue mark (docs/queueing.md §12, "the second
//! attempt", constraint 1): HMAC-SHA256 (RFC 2104) over
//! `quota::queue::mark::signed_bytes`, with keys every replica mounts
//! (one a line, hex; the first signs, any verifies, so a key is rotated by
//! adding the new one first and removing the old one once no mark of it
//! is queued). Loaded from `--queue-mark-key-file`.

use sha2::{Digest, Sha256};

/// The shortest key accepted (bytes): a key is a random secret, never a
/// password.
pub const MIN_KEY: usize = 32;

const BLOCK: usize = 64;

/// HMAC-SHA256 of `msg` under `key`.
pub fn hmac_sha256(key: &[u8], msg: &[u8]) -> [u8; 32] {
    let mut k = [0u8; BLOCK];
    if key.len() > BLOCK {
        k[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let pad = |x: u8| -> [u8; BLOCK] { k.map(|b| b ^ x) };
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(msg)
        .finalize();
    Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .into()
}

/// The keys a replica signs and verifies marks with.
#[derive(Clone)]
pub struct MarkKeys {
    keys: Vec<Vec<u8>>,
}

impl std::fmt::Debug for MarkKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the keys themselves.
        write!(f, "MarkKeys({} keys)", self.keys.len())
    }
}

impl MarkKeys {
    /// From a key file's text: one hex key a line (blank lines and `#`
    /// comments skipped), each at least `MIN_KEY` bytes; at least one.
    pub fn parse(text: &str) -> Result<MarkKeys, String> {
        let mut keys = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let key = hex::decode(line)
                .map_err(|_| format!("queue mark key on line {} is not hex", i + 1))?;
            if key.len() < MIN_KEY {
                return Err(format!(
                    "queue mark key on line {} has {} bytes; at least {MIN_KEY} random bytes are needed",
                    i + 1,
                    key.len()
                ));
            }
            keys.push(key);
        }
        if keys.is_empty() {
            return Err("the queue mark key file holds no key".into());
        }
        Ok(MarkKeys { keys })
    }

    /// The MAC of `bytes` under the first key, hex.
    pub fn sign(&self, bytes: &[u8]) -> String {
        hex::encode(hmac_sha256(&self.keys[0], bytes))
    }

    /// Whether `mac` (hex) is the MAC of `bytes` under any of the keys,
    /// compared in constant time.
    pub fn verify(&self, bytes: &[u8], mac: &str) -> bool {
        let Ok(mac) = hex::decode(mac) else {
            return false;
        };
        self.keys
            .iter()
            .any(|k| crate::util::constant_time_eq(&hmac_sha256(k, bytes), &mac))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quota::queue::mark::{self, Binding, Refused};

    #[test]
    fn hmac_sha256_matches_rfc_4231() {
        let cases: [(&[u8], &[u8], &str); 4] = [
            (&[0x0b; 20], b"Hi There", "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"),
            (b"Jefe", b"what do ya want for nothing?", "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"),
            (&[0xaa; 131], b"Test Using Larger Than Block-Size Key - Hash Key First", "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"),
            (&[0xaa; 131], b"This is a test using a larger than block-size key and a larger than block-size data. The key needs to be hashed before being used by the HMAC algorithm.", "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"),
        ];
        for (key, msg, want) in cases {
            assert_eq!(hex::encode(hmac_sha256(key, msg)), want);
        }
    }

    #[test]
    fn keys_are_random_secrets_and_rotate() {
        assert!(MarkKeys::parse("").is_err());
        assert!(MarkKeys::parse("not hex").is_err());
        assert!(MarkKeys::parse(&"ab".repeat(16 - 1)).is_err(), "15 bytes");
        let old = "11".repeat(32);
        let new = "22".repeat(32);
        let before = MarkKeys::parse(&format!("# the key\n{old}\n")).unwrap();
        let during = MarkKeys::parse(&format!("{new}\n\n{old}\n")).unwrap();
        let after = MarkKeys::parse(&new).unwrap();
        assert_eq!(format!("{during:?}"), "MarkKeys(2 keys)");
        let mac = before.sign(b"entry");
        assert!(
            during.verify(b"entry", &mac),
            "a mark of the old key stays valid"
        );
        assert!(!after.verify(b"entry", &mac));
        assert!(after.verify(b"entry", &during.sign(b"entry")));
        assert!(!during.verify(b"other", &mac));
        assert!(!during.verify(b"entry", "zz"));
        assert!(!during.verify(b"entry", ""));
    }

    #[test]
    fn a_mark_signed_by_one_replica_is_accepted_by_another_and_not_by_a_stranger() {
        let key = "5a".repeat(32);
        let (one, two) = (
            MarkKeys::parse(&key).unwrap(),
            MarkKeys::parse(&key).unwrap(),
        );
        let stranger = MarkKeys::parse(&"5b".repeat(32)).unwrap();
        let t = 1_800_000_000_000;
        let m = mark::sign("ml", "batch/Job/ml/j", t + 1, 7, "alice", |b| one.sign(b));
        let text = serde_json::to_string(&m).unwrap();
        let at = Binding {
            quota: "ml",
            workload_ref: "batch/Job/ml/j",
            created_ms: t,
            now_ms: t + 1_000,
        };
        assert_eq!(mark::accept(&text, &at, |b, mac| two.verify(b, mac)), Ok(m));
        assert_eq!(
            mark::accept(&text, &at, |b, mac| stranger.verify(b, mac)),
            Err(Refused::Mac)
        );
    }
}
