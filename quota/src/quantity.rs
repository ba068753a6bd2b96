//! Kubernetes quantities (`500m`, `16Gi`, `1e3`, `.5`) held exactly as
//! integer nano-units. Parsing follows apimachinery's grammar; values finer
//! than a nano-unit round up, as the API server does.

use std::fmt;
use std::str::FromStr;

/// 10^9: one unit in nano-units.
pub const NANO: i128 = 1_000_000_000;

/// The largest magnitude accepted: 2^63 − 1 whole units. Anything larger is
/// not a resource amount anyone owns, and the cap keeps every sum of a few
/// billion such values inside `i128`.
pub const MAX_NANOS: i128 = (i64::MAX as i128) * NANO;

/// How a quantity was written, so it prints back in the same family.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    #[default]
    DecimalSi,
    BinarySi,
    DecimalExponent,
}

/// An exact quantity. Equality and order look at the value only, never at
/// the format it was written in.
#[derive(Clone, Copy, Debug, Default)]
pub struct Quantity {
    nanos: i128,
    format: Format,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error("quantity is empty")]
    Empty,
    #[error("'{0}' is not a quantity: expected a number with an optional suffix (m, k, M, G, Ki, Mi, Gi, e3, ...)")]
    Syntax(String),
    #[error("'{0}' is out of range: quantities are limited to 9223372036854775807 units")]
    OutOfRange(String),
}

impl Quantity {
    pub const ZERO: Quantity = Quantity {
        nanos: 0,
        format: Format::DecimalSi,
    };

    pub const fn from_nanos(nanos: i128) -> Self {
        Quantity {
            nanos,
            format: Format::DecimalSi,
        }
    }

    pub const fn from_units(units: i64) -> Self {
        Self::from_nanos(units as i128 * NANO)
    }

    pub const fn nanos(&self) -> i128 {
        self.nanos
    }

    pub const fn format(&self) -> Format {
        self.format
    }

    pub fn with_format(mut self, format: Format) -> Self {
        self.format = format;
        self
    }

    pub fn is_zero(&self) -> bool {
        self.nanos == 0
    }

    pub fn is_negative(&self) -> bool {
        self.nanos < 0
    }

    pub fn saturating_add(self, other: Quantity) -> Quantity {
        Quantity {
            nanos: self.nanos.saturating_add(other.nanos),
            format: pick_format(self, other),
        }
    }

    pub fn saturating_sub(self, other: Quantity) -> Quantity {
        Quantity {
            nanos: self.nanos.saturating_sub(other.nanos),
            format: pick_format(self, other),
        }
    }

    pub fn saturating_mul(self, n: i128) -> Quantity {
        Quantity {
            nanos: self.nanos.saturating_mul(n),
            format: self.format,
        }
    }
}

fn pick_format(a: Quantity, b: Quantity) -> Format {
    if a.nanos == 0 {
        b.format
    } else {
        a.format
    }
}

/// Ceiling division for a positive divisor.
pub fn div_ceil(n: i128, d: i128) -> i128 {
    let q = n / d;
    if n % d > 0 {
        q + 1
    } else {
        q
    }
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        self.nanos == other.nanos
    }
}
impl Eq for Quantity {}
impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Quantity {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.nanos.cmp(&other.nanos)
    }
}
impl std::hash::Hash for Quantity {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.nanos.hash(state)
    }
}

const DECIMAL_SUFFIXES: [(&str, i32); 10] = [
    ("n", -9),
    ("u", -6),
    ("m", -3),
    ("", 0),
    ("k", 3),
    ("M", 6),
    ("G", 9),
    ("T", 12),
    ("P", 15),
    ("E", 18),
];
const BINARY_SUFFIXES: [(&str, u32); 6] = [
    ("Ki", 1),
    ("Mi", 2),
    ("Gi", 3),
    ("Ti", 4),
    ("Pi", 5),
    ("Ei", 6),
];

impl FromStr for Quantity {
    type Err = QuantityError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        // Every quantity of every status read goes through here (a watch
        // event of a busy quota holds hundreds): the common forms first,
        // without allocating.
        if let Some(q) = parse_plain(input) {
            return Ok(q);
        }
        parse_general(input)
    }
}

/// An unsigned integer of up to 18 digits with no point or exponent and
/// an SI suffix (`4`, `500m`, `16Gi`), or None (`parse_general` decides,
/// errors included). The same value and format as `parse_general` gives.
fn parse_plain(s: &str) -> Option<Quantity> {
    let b = s.as_bytes();
    let end = b
        .iter()
        .position(|c| !c.is_ascii_digit())
        .unwrap_or(b.len());
    if end == 0 || end > 18 {
        return None;
    }
    let mantissa = b[..end]
        .iter()
        .fold(0i128, |v, c| v * 10 + (c - b'0') as i128);
    let suffix = &s[end..];
    let (scale, format) = match DECIMAL_SUFFIXES.iter().find(|(x, _)| *x == suffix) {
        Some(&(_, e)) => (10i128.pow((e + 9) as u32), Format::DecimalSi),
        None => {
            let &(_, p) = BINARY_SUFFIXES.iter().find(|(x, _)| *x == suffix)?;
            (1024i128.pow(p) * NANO, Format::BinarySi)
        }
    };
    let nanos = mantissa.checked_mul(scale).filter(|n| *n <= MAX_NANOS)?;
    Some(Quantity { nanos, format })
}

/// Apimachinery's whole grammar: signs, fractions, exponents, rounding.
fn parse_general(input: &str) -> Result<Quantity, QuantityError> {
    let s = input.trim();
    if s.is_empty() {
        return Err(QuantityError::Empty);
    }
    let syntax = || QuantityError::Syntax(input.to_string());
    let range = || QuantityError::OutOfRange(input.to_string());

    let (negative, rest) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let num_end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(num_end);
    let (int_part, frac_part) = match number.split_once('.') {
        Some((i, f)) => (i, f),
        None => (number, ""),
    };
    if (int_part.is_empty() && frac_part.is_empty()) || frac_part.contains('.') {
        return Err(syntax());
    }

    let (mut exp10, binary_pow, format) = parse_suffix(suffix).ok_or_else(syntax)?;

    // Mantissa digits as one integer; leading zeros carry no value and
    // trailing fractional zeros none either, so drop them before sizing.
    let frac_trimmed = frac_part.trim_end_matches('0');
    let digits: String = format!("{int_part}{frac_trimmed}");
    let digits = digits.trim_start_matches('0');
    exp10 -= frac_trimmed.len() as i64;
    if digits.is_empty() {
        return Ok(Quantity { nanos: 0, format });
    }
    if digits.len() > 36 {
        return Err(range());
    }
    let mantissa: i128 = digits.parse().map_err(|_| syntax())?;

    // nanos = mantissa * 10^(exp10 + 9) * 1024^binary_pow, rounded up.
    let mut value = mantissa;
    for _ in 0..binary_pow {
        value = value.checked_mul(1024).ok_or_else(range)?;
    }
    let scale = exp10 + 9;
    if scale >= 0 {
        if scale > 38 {
            return Err(range());
        }
        value = value
            .checked_mul(10i128.checked_pow(scale as u32).ok_or_else(range)?)
            .ok_or_else(range)?;
    } else {
        let shift = (-scale) as u32;
        value = if shift > 38 {
            1 // a positive amount finer than i128 can hold rounds up to 1n
        } else {
            div_ceil(value, 10i128.pow(shift))
        };
    }
    if value > MAX_NANOS {
        return Err(range());
    }
    Ok(Quantity {
        nanos: if negative { -value } else { value },
        format,
    })
}

/// Returns (decimal exponent, power of 1024, format) of a suffix.
fn parse_suffix(suffix: &str) -> Option<(i64, u32, Format)> {
    if let Some(&(_, e)) = DECIMAL_SUFFIXES.iter().find(|(s, _)| *s == suffix) {
        return Some((e as i64, 0, Format::DecimalSi));
    }
    if let Some(&(_, p)) = BINARY_SUFFIXES.iter().find(|(s, _)| *s == suffix) {
        return Some((0, p, Format::BinarySi));
    }
    let exp = suffix.strip_prefix(['e', 'E'])?;
    let digits = exp.strip_prefix(['+', '-']).unwrap_or(exp);
    if digits.is_empty() || digits.len() > 4 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let e: i64 = exp.parse().ok()?;
    Some((e, 0, Format::DecimalExponent))
}

impl fmt::Display for Quantity {
    /// The largest suffix of the quantity's family that divides it exactly
    /// (`1536Mi`, `1500m`, `1e3`), found from its trailing zeros: a status
    /// write prints every quantity it holds, so this does at most two
    /// 128-bit divisions (values up to 2^64 nano-units need none) instead
    /// of one per suffix tried. `display_by_trying_suffixes` in the tests is
    /// the definition it is checked against.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.nanos == 0 {
            return f.write_str("0");
        }
        let sign = if self.nanos < 0 { "-" } else { "" };
        let abs = self.nanos.unsigned_abs();
        if self.format == Format::BinarySi {
            if let Some(units) = whole_units(abs) {
                // 1024^p divides `units` exactly when its 10p lowest bits are 0.
                let pow = (units.trailing_zeros() / 10).min(6);
                if pow > 0 {
                    let suffix = BINARY_SUFFIXES[pow as usize - 1].0;
                    return write!(f, "{sign}{}{suffix}", units >> (10 * pow));
                }
            }
        }
        // Largest decimal exponent that divides the value exactly: the
        // trailing zeros rounded down to a multiple of 3 (10^27 at most, E).
        let (zeros, mantissa) = strip_decimal_zeros(abs);
        let k = (zeros / 3 * 3).min(27);
        let (suffix, e) = DECIMAL_SUFFIXES[(k / 3) as usize];
        // What `strip_decimal_zeros` took beyond k goes back (at most 10^2,
        // or the zeros past E's 27).
        let mantissa = mantissa * 10u128.pow(zeros - k);
        if self.format == Format::DecimalExponent && e != 0 {
            write!(f, "{sign}{mantissa}e{e}")
        } else {
            write!(f, "{sign}{mantissa}{suffix}")
        }
    }
}

/// `nanos` in whole units, if it is a whole number of them (64-bit
/// arithmetic below 2^64 nano-units, one 128-bit division above).
fn whole_units(nanos: u128) -> Option<u128> {
    if let Ok(small) = u64::try_from(nanos) {
        return small
            .is_multiple_of(NANO as u64)
            .then_some((small / NANO as u64) as u128);
    }
    let units = nanos / NANO as u128;
    (units * NANO as u128 == nanos).then_some(units)
}

/// (n, m) with `x = m · 10^n` and m not a multiple of 10 (x > 0).
fn strip_decimal_zeros(x: u128) -> (u32, u128) {
    let (mut zeros, mut m) = (0u32, x);
    // Beyond 64 bits, a nano-unit remainder first: one 128-bit division
    // either finds the value fractional (fewer than 9 zeros, found in the
    // 64-bit remainder) or takes away nine zeros at once.
    if u64::try_from(m).is_err() {
        let units = m / NANO as u128;
        let frac = (m - units * NANO as u128) as u64;
        if frac != 0 {
            let z = strip_zeros_u64(frac).0;
            return (z, m / 10u128.pow(z));
        }
        zeros = 9;
        m = units;
        if u64::try_from(m).is_err() {
            // ≥ 2^64 units is past MAX_NANOS; kept exact all the same.
            while m.is_multiple_of(10) {
                m /= 10;
                zeros += 1;
            }
            return (zeros, m);
        }
    }
    let (z, small) = strip_zeros_u64(m as u64);
    (zeros + z, small as u128)
}

fn strip_zeros_u64(mut x: u64) -> (u32, u64) {
    let mut zeros = 0;
    while x.is_multiple_of(10) {
        x /= 10;
        zeros += 1;
    }
    (zeros, x)
}

impl serde::Serialize for Quantity {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Quantity {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Quantity;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a Kubernetes quantity such as \"500m\", \"16Gi\" or 4")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Quantity, E> {
                v.parse().map_err(E::custom)
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Quantity, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Quantity, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Quantity, E> {
                // JSON numbers with a fraction: go through their shortest
                // decimal form, which is what the user wrote.
                self.visit_str(&v.to_string())
            }
        }
        d.deserialize_any(V)
    }
}

/// Serde helper for plain data: accumulators as decimal strings (JSON
/// numbers lose precision beyond 2^53).
pub(crate) mod serde_acc {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &i128, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(v)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<i128, D::Error> {
        let s = String::deserialize(d)?;
        s.trim()
            .parse()
            .map_err(|_| serde::de::Error::custom(format!("'{s}' is not an integer amount")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        s.parse().unwrap()
    }

    #[test]
    fn parses_every_form() {
        assert_eq!(q("100m").nanos(), 100_000_000);
        assert_eq!(q("1.5").nanos(), 1_500_000_000);
        assert_eq!(q("2Gi").nanos(), 2 * 1024i128.pow(3) * NANO);
        assert_eq!(q("1e3").nanos(), 1000 * NANO);
        assert_eq!(q("1E3").nanos(), 1000 * NANO);
        assert_eq!(q("500Ki").nanos(), 500 * 1024 * NANO);
        assert_eq!(q(".5").nanos(), NANO / 2);
        assert_eq!(q("5.").nanos(), 5 * NANO);
        assert_eq!(q("+7").nanos(), 7 * NANO);
        assert_eq!(q("-7m").nanos(), -7_000_000);
        assert_eq!(q("1.5Gi").nanos(), 1536 * 1024 * 1024 * NANO);
        assert_eq!(q("12e-3").nanos(), 12_000_000);
        assert_eq!(q("3n").nanos(), 3);
        assert_eq!(q("0.0000000001").nanos(), 1, "finer than 1n rounds up");
        assert_eq!(q("0").nanos(), 0);
        assert_eq!(q("000.000").nanos(), 0);
        assert_eq!(q("16").nanos(), 16 * NANO);
    }

    #[test]
    fn rejects_invalid() {
        for bad in [
            "", "abc", "1.2.3", "1Gb", "1 Gi", "--1", "1e", "1e+", ".", "Gi", "1ki", "1e99999",
        ] {
            assert!(
                bad.parse::<Quantity>().is_err(),
                "{bad:?} should be rejected"
            );
        }
        let err = "1e30".parse::<Quantity>().unwrap_err();
        assert!(matches!(err, QuantityError::OutOfRange(_)), "{err}");
        assert!("99999999999999999999Ei".parse::<Quantity>().is_err());
    }

    #[test]
    fn prints_canonically() {
        assert_eq!(q("100m").to_string(), "100m");
        assert_eq!(q("1.5").to_string(), "1500m");
        assert_eq!(q("2Gi").to_string(), "2Gi");
        assert_eq!(q("1536Mi").to_string(), "1536Mi");
        assert_eq!(q("1024Mi").to_string(), "1Gi");
        assert_eq!(q("1e3").to_string(), "1e3");
        assert_eq!(q("1000").to_string(), "1k");
        assert_eq!(q("0.5Ki").to_string(), "512");
        assert_eq!(q("-3").to_string(), "-3");
        assert_eq!(q("0Gi").to_string(), "0");
    }

    /// What `Display` printed before it counted zeros: every suffix tried
    /// from the largest, with a 128-bit division or two each. The
    /// definition the fast one is held to.
    fn display_by_trying_suffixes(q: Quantity) -> String {
        if q.nanos == 0 {
            return "0".into();
        }
        let sign = if q.nanos < 0 { "-" } else { "" };
        let abs = q.nanos.unsigned_abs() as i128;
        if q.format == Format::BinarySi && abs % NANO == 0 {
            let units = abs / NANO;
            for &(suffix, pow) in BINARY_SUFFIXES.iter().rev() {
                let base = 1024i128.pow(pow);
                if units % base == 0 {
                    return format!("{sign}{}{suffix}", units / base);
                }
            }
        }
        for &(suffix, e) in DECIMAL_SUFFIXES.iter().rev() {
            let base = 10i128.pow((e + 9) as u32);
            if abs % base == 0 {
                let mantissa = abs / base;
                return if q.format == Format::DecimalExponent && e != 0 {
                    format!("{sign}{mantissa}e{e}")
                } else {
                    format!("{sign}{mantissa}{suffix}")
                };
            }
        }
        unreachable!()
    }

    #[test]
    fn prints_the_edges_as_before() {
        let edges = [
            1,
            -1,
            999,
            1000,
            NANO,
            NANO - 1,
            NANO + 1,
            1024 * NANO,
            1024i128.pow(6) * NANO,
            1024i128.pow(7) * NANO,
            10i128.pow(27),
            10i128.pow(28),
            10i128.pow(30) * 7,
            MAX_NANOS,
            -MAX_NANOS,
            u64::MAX as i128,
            u64::MAX as i128 + 1,
            (u64::MAX as i128 + 1) * NANO,
            i128::MAX,
            -i128::MAX,
        ];
        for nanos in edges {
            for format in [Format::DecimalSi, Format::BinarySi, Format::DecimalExponent] {
                let q = Quantity::from_nanos(nanos).with_format(format);
                assert_eq!(
                    q.to_string(),
                    display_by_trying_suffixes(q),
                    "{nanos} {format:?}"
                );
            }
        }
    }

    proptest::proptest! {
        /// The same text as the suffix-by-suffix definition, for values
        /// of every shape: a mantissa times a power of ten or of 1024,
        /// both sides of 2^64 nano-units, in each format.
        #[test]
        fn display_prints_what_trying_each_suffix_printed(
            mantissa in proptest::prop_oneof![1i128..1000, 1i128..i64::MAX as i128, 1i128..i128::MAX / 10i128.pow(9)],
            ten in 0u32..30,
            kibi in 0u32..8,
            negative: bool,
            format in proptest::sample::select(vec![Format::DecimalSi, Format::BinarySi, Format::DecimalExponent]),
        ) {
            let scaled = mantissa
                .checked_mul(10i128.pow(ten))
                .and_then(|v| v.checked_mul(1024i128.pow(kibi)))
                .unwrap_or(mantissa);
            let nanos = if negative { -scaled } else { scaled };
            let q = Quantity::from_nanos(nanos).with_format(format);
            proptest::prop_assert_eq!(q.to_string(), display_by_trying_suffixes(q));
        }
    }

    proptest::proptest! {
        /// The allocation-free path reads what the whole grammar reads,
        /// value and format, and leaves everything else to it.
        #[test]
        fn plain_parsing_agrees_with_the_grammar(
            digits in "[0-9]{0,20}",
            suffix in proptest::sample::select(vec!["", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "e3", "Gb", ".5", " "]),
            sign in proptest::sample::select(vec!["", "+", "-", " "]),
        ) {
            let text = format!("{sign}{digits}{suffix}");
            let general = parse_general(&text);
            match parse_plain(&text) {
                Some(q) => {
                    let g = general.expect("the grammar reads what the plain path reads");
                    proptest::prop_assert_eq!((q.nanos, q.format), (g.nanos, g.format));
                }
                None => {
                    // Left to the grammar: so is every error.
                    let parsed: Result<Quantity, _> = text.parse();
                    proptest::prop_assert_eq!(
                        parsed.map(|q| (q.nanos, q.format)),
                        general.map(|q| (q.nanos, q.format))
                    );
                }
            }
        }
    }

    #[test]
    fn equality_ignores_format() {
        assert_eq!(q("1Ki"), q("1024"));
        assert_eq!(q("1k"), q("1e3"));
        assert!(q("1Gi") > q("1G"));
    }

    #[test]
    fn serde_accepts_strings_and_numbers() {
        let v: Vec<Quantity> = serde_json::from_str(r#"["4", 4, 0.5, "16Gi"]"#).unwrap();
        assert_eq!(v[0], v[1]);
        assert_eq!(v[2].nanos(), NANO / 2);
        assert_eq!(serde_json::to_string(&v[3]).unwrap(), "\"16Gi\"");
    }
}
