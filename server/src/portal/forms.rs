//! What a form's fields must be before anything is done with them:
//! usernames, new passwords and email addresses, checked the same way on
//! every page that takes one.

use super::PageError;
use crate::edge::limits::MAX_PASSWORD_BYTES;

/// Passwords set in the portal are at least this long.
pub const MIN_PASSWORD: usize = 12;

/// A new password's length: at least [`MIN_PASSWORD`] characters, at most
/// [`MAX_PASSWORD_BYTES`] bytes.
pub fn check_new_password(password: &str) -> Result<(), String> {
    if password.chars().count() < MIN_PASSWORD {
        return Err(format!(
            "the password must have at least {MIN_PASSWORD} characters"
        ));
    }
    if password.len() > MAX_PASSWORD_BYTES {
        return Err(format!(
            "the password may have at most {MAX_PASSWORD_BYTES} bytes"
        ));
    }
    Ok(())
}

/// Lower-case letters, digits, '.', '_' and '-', starting with a letter or
/// digit, at most 64.
pub fn valid_username(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 64
        && b[0].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"._-".contains(c))
}

/// An email address as typed: None for "" (no email), else it must look
/// like one.
pub fn parse_email(typed: &str) -> Result<Option<&str>, PageError> {
    let email = typed.trim();
    if email.is_empty() {
        return Ok(None);
    }
    // As the mailer will read it (`mail.rs`): an address it cannot parse
    // would wait in the outbox forever.
    if email.len() > 254 || email.parse::<lettre::Address>().is_err() {
        return Err(PageError::Invalid(format!(
            "'{email}' is not an email address"
        )));
    }
    Ok(Some(email))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usernames_are_plain_lower_case_names() {
        for ok in ["admin", "alice", "a.b-c_d", "7", "x".repeat(64).as_str()] {
            assert!(valid_username(ok), "{ok}");
        }
        for bad in [
            "",
            "Alice",
            "-x",
            ".x",
            "a b",
            "a/b",
            "é",
            "x".repeat(65).as_str(),
        ] {
            assert!(!valid_username(bad), "{bad}");
        }
    }

    #[test]
    fn an_email_is_read_as_the_mailer_reads_it() {
        assert_eq!(parse_email("").unwrap(), None);
        assert_eq!(parse_email("  ").unwrap(), None);
        assert_eq!(
            parse_email(" ada@example.org ").unwrap(),
            Some("ada@example.org")
        );
        for bad in ["ada", "a@b@c", "a b@c.org", "<a@b.org>", "a@", "@b.org"] {
            let e = parse_email(bad).unwrap_err().to_string();
            assert!(e.contains("is not an email address"), "{bad}: {e}");
        }
    }
}
