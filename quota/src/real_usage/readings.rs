//! Where the readings of real usage stand: known up to when, or failing
//! since when and why — what "real usage unknown since …" says, on every
//! page and in the admins' alert.

/// Where the readings stand, for "real usage unknown since …".
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Readings {
    /// The end of the last window read (figures are known up to it).
    pub known_to_ms: Option<i64>,
    /// Since when readings have failed, and why (None: they succeed).
    pub down_since_ms: Option<i64>,
    pub error: Option<String>,
}

impl Readings {
    /// Since when real usage is unknown as of `now_ms`, if it is: the last
    /// window's end, when readings fail or have fallen `stale_ms` behind.
    pub fn unknown_since(&self, now_ms: i64, stale_ms: i64) -> Option<i64> {
        match (self.known_to_ms, self.down_since_ms) {
            (known, Some(down)) => Some(known.unwrap_or(down).min(down)),
            (Some(k), None) if now_ms - k > stale_ms => Some(k),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_usage_is_unknown_when_readings_fail_or_fall_behind() {
        let ok = Readings {
            known_to_ms: Some(1_000),
            ..Readings::default()
        };
        assert_eq!(ok.unknown_since(2_000, 5_000), None);
        assert_eq!(ok.unknown_since(9_000, 5_000), Some(1_000), "fallen behind");
        let down = Readings {
            down_since_ms: Some(3_000),
            ..ok.clone()
        };
        assert_eq!(
            down.unknown_since(3_500, 5_000),
            Some(1_000),
            "since the last window"
        );
        let never = Readings {
            down_since_ms: Some(3_000),
            ..Readings::default()
        };
        assert_eq!(never.unknown_since(3_500, 5_000), Some(3_000));
        assert_eq!(
            Readings::default().unknown_since(9_000, 5_000),
            None,
            "never read: nothing to say"
        );
    }
}
