//! `spec.fairSharing` and `status.fairSharing` as plain data: a quota's
//! weight among its siblings when they share their parent's idle capacity,
//! and the share it holds now (docs/queueing.md, "Fair sharing"). The
//! rules that read them are `crate::fair`.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// The largest weight a quota may have: weights are relative, and a bound
/// keeps every product of the share arithmetic inside 256 bits.
pub const MAX_WEIGHT_MILLI: u32 = 1_000_000;

/// A weight in thousandths: `1` is 1000. Written as an integer (`2`) or a
/// decimal string of at most three places (`"0.5"`, `"1.25"`), 0 to 1000.
/// 0 means "always last": such a quota borrows only what no sibling with
/// a positive weight wants.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Weight(u32);

impl Weight {
    pub const ONE: Weight = Weight(1000);
    pub const ZERO: Weight = Weight(0);

    /// A weight of `milli` thousandths, if within 0 to 1000.
    pub fn from_milli(milli: u32) -> Option<Weight> {
        (milli <= MAX_WEIGHT_MILLI).then_some(Weight(milli))
    }

    pub fn milli(self) -> u32 {
        self.0
    }

    pub fn is_zero(self) -> bool {
        self.0 == 0
    }
}

impl Default for Weight {
    fn default() -> Self {
        Weight::ONE
    }
}

impl fmt::Display for Weight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (whole, frac) = (self.0 / 1000, self.0 % 1000);
        if frac == 0 {
            return write!(f, "{whole}");
        }
        let digits = format!("{frac:03}");
        write!(f, "{whole}.{}", digits.trim_end_matches('0'))
    }
}

/// Why a written weight is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("fairSharing.weight '{0}' is not a weight: write a number from 0 to 1000 with at most three decimals (1, 2, \"0.5\"); 0 borrows last")]
pub struct WeightError(pub String);

impl std::str::FromStr for Weight {
    type Err = WeightError;

    /// Exact: digits, an optional point and at most three decimals.
    fn from_str(s: &str) -> Result<Weight, WeightError> {
        let bad = || WeightError(s.chars().take(32).collect());
        let (whole, frac) = s.split_once('.').unwrap_or((s, ""));
        let digits = |t: &str| t.bytes().all(|b| b.is_ascii_digit());
        if whole.is_empty() && frac.is_empty()
            || !digits(whole)
            || !digits(frac)
            || frac.len() > 3
            || whole.len() > 4
            || s.ends_with('.') && frac.is_empty()
        {
            return Err(bad());
        }
        let w: u32 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| bad())?
        };
        let f: u32 = if frac.is_empty() {
            0
        } else {
            format!("{frac:0<3}").parse().map_err(|_| bad())?
        };
        Weight::from_milli(w * 1000 + f).ok_or_else(bad)
    }
}

impl Serialize for Weight {
    /// An integer when whole (`2`), else the decimal string (`"0.5"`).
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.0.is_multiple_of(1000) {
            s.serialize_u32(self.0 / 1000)
        } else {
            s.serialize_str(&self.to_string())
        }
    }
}

impl<'de> Deserialize<'de> for Weight {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            Int(u64),
            Text(String),
            Other(serde_json::Value),
        }
        let err = |t: String| serde::de::Error::custom(WeightError(t));
        match Form::deserialize(d)? {
            Form::Int(n) => u32::try_from(n)
                .ok()
                .and_then(|n| n.checked_mul(1000))
                .and_then(Weight::from_milli)
                .ok_or_else(|| err(n.to_string())),
            Form::Text(t) => t.parse().map_err(serde::de::Error::custom),
            // A float would be rounded on its way in: decimals are strings.
            Form::Other(v) => Err(err(v.to_string())),
        }
    }
}

/// When a taker may take capacity from a victim that borrows (Kueue's
/// fair-sharing preemption strategies).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Strategy {
    /// The taker's share after taking is at most the victim's share after
    /// losing it (the default): the two end no further apart than before.
    #[default]
    LessThanOrEqualToFinalShare,
    /// The taker's share after taking is below the victim's share before:
    /// more preemption, faster convergence, more churn.
    LessThanInitialShare,
}

/// `spec.fairSharing` of a quota: its weight among its siblings. Left out,
/// the weight is 1.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FairSharing {
    #[serde(default)]
    pub weight: Weight,
}

impl FairSharing {
    pub fn is_default(&self) -> bool {
        *self == FairSharing::default()
    }
}

/// `status.fairSharing` of a quota that may borrow, for people (derived by
/// the controller at each round of its queue; never read back for a
/// decision): its weight, its dominant share of what its parent can lend
/// (`0.42`, `∞` for a weight of 0 that borrows), on which key, and what it
/// borrows.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FairStatus {
    pub weight: Weight,
    pub share: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub dominant: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_read_and_write_as_people_write_them() {
        for (json, milli, back) in [
            ("1", 1000, "1"),
            ("0", 0, "0"),
            ("1000", 1_000_000, "1000"),
            ("\"0.5\"", 500, "\"0.5\""),
            ("\"2\"", 2000, "2"),
            ("\"1.25\"", 1250, "\"1.25\""),
            ("\".125\"", 125, "\"0.125\""),
        ] {
            let w: Weight = serde_json::from_str(json).unwrap();
            assert_eq!(w.milli(), milli, "{json}");
            assert_eq!(serde_json::to_string(&w).unwrap(), back);
        }
        for bad in [
            "1001",
            "-1",
            "0.5",
            "\"0.0001\"",
            "\"1e3\"",
            "\"\"",
            "\".\"",
            "\"1.\"",
            "\"1000.001\"",
            "\"99999\"",
            "true",
            "\"x\"",
            "4294967297",
        ] {
            let e = serde_json::from_str::<Weight>(bad).unwrap_err().to_string();
            assert!(e.contains("from 0 to 1000"), "{bad}: {e}");
        }
    }

    #[test]
    fn the_spec_defaults_to_weight_one_and_refuses_unknown_fields() {
        let f: FairSharing = serde_json::from_str("{}").unwrap();
        assert_eq!(f.weight, Weight::ONE);
        assert!(f.is_default());
        assert!(serde_json::from_str::<FairSharing>(r#"{"wieght":2}"#).is_err());
    }
}
