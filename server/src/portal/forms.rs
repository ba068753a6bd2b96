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

/// An email address as typed: None for "" (no email), else it must look
/// like one.
pub fn parse_email(typed: &str) -> Result<Option<&str>, PageError> {
    let email = typed.trim();
    if email.is_empty() {
        return Ok(None);
    }
    if !crate::mail::deliverable(email) {
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
