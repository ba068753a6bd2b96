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
/// break, quotes doubled. A field a spreadsheet would run as a formula
/// (starting with `=`, `+`, `-`, `@`, tab or CR) is prefixed with `'`.
pub fn csv_field(s: &str) -> String {
    // A plain negative number (`-5`, `-0.25`) stays a number a spreadsheet sums.
    let digits = |d: &str| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit());
    let number = s
        .strip_prefix('-')
        .is_some_and(|n| match n.split_once('.') {
            Some((w, f)) => digits(w) && digits(f),
            None => digits(n),
        });
    let s = if !number && s.starts_with(['=', '+', '-', '@', '\t', '\r']) {
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
