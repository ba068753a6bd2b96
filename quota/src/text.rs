//! Characters no name, label, uid or username may hold: NUL and every other
//! C0/C1 control; the bidirectional embeddings, overrides and isolates
//! (U+202A–U+202E, U+2066–U+2069) and marks (U+200E, U+200F, U+061C),
//! which make a name read otherwise than it is written in a page, an email
//! or a log; and the invisible line and paragraph separators and the
//! byte-order mark (U+2028, U+2029, U+FEFF). PostgreSQL refuses NUL in any
//! text it stores, so one such string kept in a status fails every later
//! write that carries it; refusing them where they come in is what keeps a
//! quota writable. Free text (a reason, a note) may also hold tab, the
//! line breaks and the directional marks that order mixed-direction prose
//! (`control_char`).

use std::borrow::Cow;

/// Whether `c` may appear in no identifier.
pub fn is_hostile(c: char) -> bool {
    c.is_control() || is_direction(c) || is_invisible(c)
}

fn is_direction(c: char) -> bool {
    matches!(
        c,
        '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}' | '\u{061C}'
    )
}

fn is_invisible(c: char) -> bool {
    matches!(c, '\u{2028}' | '\u{2029}' | '\u{FEFF}')
}

/// The first character of `s` no identifier may hold.
pub fn hostile_char(s: &str) -> Option<char> {
    s.chars().find(|&c| is_hostile(c))
}

/// The first character of `s` that free text (a text area: a reason, a
/// note) may not hold: as `hostile_char`, but tab, line feed and carriage
/// return pass.
pub fn control_char(s: &str) -> Option<char> {
    s.chars().find(|&c| {
        is_hostile(c)
            && !matches!(c, '\t' | '\n' | '\r')
            // The directional marks order mixed right-to-left and
            // left-to-right prose as written; they override nothing.
            && !matches!(c, '\u{200E}' | '\u{200F}' | '\u{061C}')
    })
}

/// What a refused character is, for a message a person can act on.
pub fn describe(c: char) -> String {
    if c.is_control() {
        format!("a control character (U+{:04X})", c as u32)
    } else if is_direction(c) {
        format!("a bidirectional override character (U+{:04X})", c as u32)
    } else {
        format!("an invisible separator (U+{:04X})", c as u32)
    }
}

/// `s` with every hostile character replaced by U+FFFD: for values already
/// stored by an older version, which are kept readable rather than lost.
pub fn scrub(s: &str) -> Cow<'_, str> {
    if hostile_char(s).is_none() {
        return Cow::Borrowed(s);
    }
    Cow::Owned(
        s.chars()
            .map(|c| if is_hostile(c) { '\u{FFFD}' } else { c })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_hold_no_control_nor_bidi_but_text_keeps_its_line_breaks() {
        for bad in [
            "a\0b",
            "a\u{1b}[31m",
            "x\u{7f}",
            "\u{85}",
            "evil\u{202E}gnp",
            "\u{2066}",
            "one\u{2028}two",
            "\u{2029}",
            "\u{FEFF}bom",
        ] {
            assert!(hostile_char(bad).is_some(), "{bad:?}");
            assert!(control_char(bad).is_some(), "{bad:?}");
        }
        for line in [
            "a\tb",
            "a\nb",
            "a\r\n",
            "ab\u{200F}c",
            "\u{200E}x",
            "x\u{061C}",
        ] {
            assert!(hostile_char(line).is_some(), "{line:?} is no name");
            assert_eq!(control_char(line), None, "{line:?} is text");
        }
        for ok in [
            "train-7d9f",
            "A100",
            "system:serviceaccount:ns:sa",
            "名前",
            "😀",
            "a\u{200B}b",
        ] {
            assert_eq!(hostile_char(ok), None, "{ok:?}");
        }
        assert_eq!(describe('\0'), "a control character (U+0000)");
        assert_eq!(
            describe('\u{200F}'),
            "a bidirectional override character (U+200F)"
        );
        assert_eq!(describe('\u{2028}'), "an invisible separator (U+2028)");
        assert_eq!(
            describe('\u{202E}'),
            "a bidirectional override character (U+202E)"
        );
    }

    #[test]
    fn scrub_replaces_only_what_is_hostile() {
        assert!(matches!(scrub("alice"), Cow::Borrowed("alice")));
        assert_eq!(scrub("al\0ice\u{202E}"), "al\u{FFFD}ice\u{FFFD}");
        assert_eq!(hostile_char(&scrub("\0\u{1}\u{9f}")), None);
    }
}
