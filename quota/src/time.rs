//! RFC 3339 timestamps (UTC, milliseconds) without a clock: the caller says
//! what time it is.

/// Milliseconds since the Unix epoch → `2026-11-21T21:26:44.123Z`.
pub fn format_rfc3339(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let milli = ms.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{milli:03}Z",
        sod / 3600,
        (sod / 60) % 60,
        sod % 60
    )
}

/// `YYYY-MM-DD HH:MM` (UTC), for people: pages and email.
pub fn format_minute(ms: i64) -> String {
    format_rfc3339(ms)[..16].replace('T', " ")
}

/// `2026-11-23 12:28 UTC`: the one way pages, forms and email show a time.
pub fn format_when(ms: i64) -> String {
    format!("{} UTC", format_minute(ms))
}

/// A stored RFC 3339 stamp (`status.children[].since`, a loan's start) as
/// [`format_when`] shows it; kept as it is when it does not parse.
pub fn format_stamp(s: &str) -> String {
    parse_rfc3339(s)
        .map(format_when)
        .unwrap_or_else(|| s.to_string())
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.fff…](Z|±HH:MM)` into epoch milliseconds.
/// Calendar-correct: the day must exist in its month (no `2026-02-31`,
/// `2023-02-29`). A leap second is accepted only where one can fall, at
/// 23:59:60 UTC, and counts as the next day's first second (as Unix time
/// does); digits beyond milliseconds are cut, not rounded.
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let t = s.get(r)?;
        t.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| t.parse().ok())?
    };
    let (y, mo, d, h, mi, se) = (
        num(0..4)?,
        num(5..7)?,
        num(8..10)?,
        num(11..13)?,
        num(14..16)?,
        num(17..19)?,
    );
    if !(1..=12).contains(&mo) || d < 1 || d > days_in_month(y, mo) || h > 23 || mi > 59 || se > 60
    {
        return None;
    }
    let mut rest = &s[19..];
    let mut ms = 0;
    if let Some(frac) = rest.strip_prefix('.') {
        let n = frac.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return None;
        }
        let digits = &frac[..n];
        ms = format!("{:0<3}", &digits[..n.min(3)]).parse::<i64>().ok()?;
        rest = &frac[n..];
    }
    let offset_min = match rest.as_bytes() {
        b"Z" | b"z" => 0,
        [sign @ (b'+' | b'-'), _, _, b':', _, _] => {
            let (oh, om) = (num_in(rest, 1..3)?, num_in(rest, 4..6)?);
            if oh > 23 || om > 59 {
                return None;
            }
            if *sign == b'-' {
                -(oh * 60 + om)
            } else {
                oh * 60 + om
            }
        }
        _ => return None,
    };
    let days = days_from_civil(y, mo, d);
    let local_s = days * 86_400 + h * 3600 + mi * 60 + se;
    let utc_s = local_s - offset_min * 60;
    // 23:59:60 UTC reads as the next day's 00:00:00.
    if se == 60 && utc_s.rem_euclid(86_400) != 0 {
        return None;
    }
    Some(utc_s * 1000 + ms)
}

/// Two or more ASCII digits of `s` at `r`, as a number.
fn num_in(s: &str, r: std::ops::Range<usize>) -> Option<i64> {
    let t = s.get(r)?;
    (t.bytes().all(|c| c.is_ascii_digit()) && !t.is_empty()).then(|| t.parse().ok())?
}

/// Days in month `m` (1-12) of year `y`, proleptic Gregorian.
pub fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        4 | 6 | 9 | 11 => 30,
        2 if y % 4 == 0 && (y % 100 != 0 || y % 400 == 0) => 29,
        2 => 28,
        _ => 31,
    }
}

// Howard Hinnant's civil-date algorithms (proleptic Gregorian, UTC).

/// Days since 1970-01-01 of year `y`, month `m` (1-12), day `d`.
pub fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// (year, month 1-12, day) of `z` days since 1970-01-01.
pub fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Serde helper for plain data: an instant (ms since the epoch) as RFC 3339.
pub(crate) mod serde_stamp {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &i64, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&super::format_rfc3339(*v))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
        let s = String::deserialize(d)?;
        super::parse_rfc3339(&s).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "'{s}' is not an RFC 3339 time such as 2026-12-01T00:00:00Z"
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn people_read_times_to_the_minute_in_utc() {
        assert_eq!(
            super::format_when(1_800_000_000_000),
            "2027-01-15 08:00 UTC"
        );
        assert_eq!(
            super::format_stamp("2026-11-21T10:00:00.123Z"),
            "2026-11-21 10:00 UTC"
        );
        assert_eq!(super::format_stamp("whenever"), "whenever");
    }

    use super::*;

    #[test]
    fn round_trip_and_known_values() {
        assert_eq!(format_rfc3339(0), "1970-01-01T00:00:00.000Z");
        let t = parse_rfc3339("2026-11-21T21:26:44.123Z").unwrap();
        assert_eq!(format_rfc3339(t), "2026-11-21T21:26:44.123Z");
        assert_eq!(
            parse_rfc3339("2024-02-29T00:00:00Z").unwrap() % 86_400_000,
            0
        );
        assert_eq!(
            parse_rfc3339("2026-01-01T02:00:00+02:00"),
            parse_rfc3339("2026-01-01T00:00:00Z")
        );
        assert_eq!(parse_rfc3339("not a time"), None);
        for ms in [-1, 1, 951_782_400_000, 4_102_444_800_999] {
            assert_eq!(parse_rfc3339(&format_rfc3339(ms)), Some(ms));
        }
    }

    #[test]
    fn a_day_that_does_not_exist_is_refused() {
        assert_eq!(parse_rfc3339("2026-02-31T00:00:00Z"), None);
        assert_eq!(parse_rfc3339("2026-04-31T12:00:00Z"), None);
        assert_eq!(parse_rfc3339("2026-02-29T00:00:00Z"), None);
        assert_eq!(parse_rfc3339("2026-01-00T00:00:00Z"), None);
    }

    #[test]
    fn february_29_only_in_leap_years() {
        assert_eq!(
            parse_rfc3339("2024-02-29T00:00:00Z"),
            Some(days_from_civil(2024, 2, 29) * 86_400_000)
        );
        assert_eq!(parse_rfc3339("2023-02-29T00:00:00Z"), None);
        assert_eq!(parse_rfc3339("1900-02-29T00:00:00Z"), None, "century");
        assert!(
            parse_rfc3339("2000-02-29T00:00:00Z").is_some(),
            "400th year"
        );
    }

    #[test]
    fn a_leap_second_only_at_the_end_of_a_utc_day() {
        let next_day = parse_rfc3339("2017-01-01T00:00:00Z").unwrap();
        assert_eq!(parse_rfc3339("2016-12-31T23:59:60Z"), Some(next_day));
        assert_eq!(
            parse_rfc3339("2016-12-31T23:59:60.5Z"),
            Some(next_day + 500)
        );
        assert_eq!(
            parse_rfc3339("2017-01-01T00:59:60+01:00"),
            Some(next_day),
            "23:59:60 UTC written in +01:00"
        );
        assert_eq!(parse_rfc3339("2016-12-31T12:30:60Z"), None);
        assert_eq!(parse_rfc3339("2016-12-31T23:59:61Z"), None);
    }

    #[test]
    fn offsets_are_checked_and_applied() {
        let utc = parse_rfc3339("2026-01-01T00:00:00Z").unwrap();
        assert_eq!(parse_rfc3339("2025-12-31T19:30:00-04:30"), Some(utc));
        assert_eq!(parse_rfc3339("2026-01-01T00:00:00+00:00"), Some(utc));
        assert_eq!(parse_rfc3339("2026-01-01T00:00:00-00:00"), Some(utc));
        for bad in [
            "2026-01-01T00:00:00+24:00",
            "2026-01-01T00:00:00+01:60",
            "2026-01-01T00:00:00-+1:00",
            "2026-01-01T00:00:00+0100",
            "2026-01-01T00:00:00+01:00junk",
            "2026-01-01T00:00:00",
            // A multi-byte character where the offset's colon should be.
            "2026-01-01T00:00:00+1\u{e9}00",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }
}
