//! SASL credentials for binary connections (`[server] sasl`,
//! `sasl_credentials_file`): `user:password` lines, checked for the PLAIN
//! mechanism. The passwords are never logged or rendered.

use std::path::Path;

/// Why a credentials file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SaslError {
    #[error("server.sasl_credentials_file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("server.sasl_credentials_file {path}: line {line} is not `user:password`")]
    BadLine { path: String, line: usize },
    #[error("server.sasl_credentials_file {path}: no credentials")]
    Empty { path: String },
}

/// The accepted `user:password` pairs.
pub struct Credentials {
    users: Vec<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credentials({} users)", self.users.len())
    }
}

impl Credentials {
    pub fn load(path: &Path) -> Result<Credentials, SaslError> {
        let shown = path.display().to_string();
        let text = std::fs::read(path).map_err(|source| SaslError::Read {
            path: shown.clone(),
            source,
        })?;
        Credentials::parse(&text).map_err(|line| match line {
            0 => SaslError::Empty { path: shown },
            line => SaslError::BadLine { path: shown, line },
        })
    }

    /// `user:password` lines (blank lines and `#` comments skipped); the
    /// line number of a bad line, or 0 when there is none.
    pub fn parse(text: &[u8]) -> Result<Credentials, usize> {
        let mut users = Vec::new();
        for (i, line) in text.split(|&b| b == b'\n').enumerate() {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.is_empty() || line.first() == Some(&b'#') {
                continue;
            }
            let colon = memchr::memchr(b':', line).ok_or(i + 1)?;
            let (user, password) = (&line[..colon], &line[colon + 1..]);
            if user.is_empty() {
                return Err(i + 1);
            }
            users.push((user.to_vec(), password.to_vec()));
        }
        if users.is_empty() {
            return Err(0);
        }
        Ok(Credentials { users })
    }

    /// A PLAIN message (`[authzid] NUL authcid NUL password`, RFC 4616)
    /// names a known user with the right password. An authzid other than
    /// empty or the user itself is refused.
    pub fn check_plain(&self, message: &[u8]) -> bool {
        let mut parts = message.splitn(3, |&b| b == 0);
        let (Some(authz), Some(user), Some(password)) = (parts.next(), parts.next(), parts.next())
        else {
            return false;
        };
        if !authz.is_empty() && authz != user {
            return false;
        }
        self.users
            .iter()
            .any(|(u, p)| u == user && constant_time_eq(p, password))
    }
}

/// Equal bytes, in time independent of where they differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_checks_user_and_password() {
        let c = Credentials::parse(b"# users\nalice:s3cret\nbob:pa:ss\n").unwrap();
        assert!(c.check_plain(b"\0alice\0s3cret"));
        assert!(c.check_plain(b"alice\0alice\0s3cret"));
        assert!(c.check_plain(b"\0bob\0pa:ss"));
        assert!(!c.check_plain(b"\0alice\0wrong"));
        assert!(!c.check_plain(b"\0alice\0s3cre"));
        assert!(!c.check_plain(b"bob\0alice\0s3cret"));
        assert!(!c.check_plain(b"\0carol\0s3cret"));
        assert!(!c.check_plain(b"alice s3cret"));
    }

    #[test]
    fn bad_files_name_the_line() {
        assert_eq!(Credentials::parse(b"alice:x\nnocolon\n").unwrap_err(), 2);
        assert_eq!(Credentials::parse(b":x\n").unwrap_err(), 1);
        assert_eq!(Credentials::parse(b"\n# nothing\n").unwrap_err(), 0);
    }
}
