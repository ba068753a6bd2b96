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

#[cfg(test)]
mod tests {
    use super::*;

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
