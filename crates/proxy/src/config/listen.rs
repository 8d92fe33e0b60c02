//! A listener address: `"ip:port"` or `"unix:/path/to.sock"` (a sidecar's
//! clients on the same host skip the TCP stack), and `server.unix_socket_mode`.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use memshift_pipeline::transport::UNIX_PREFIX;

/// Where a client listener binds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenAddr {
    Tcp(SocketAddr),
    /// A unix-domain socket path (the `unix:` prefix stripped).
    Unix(PathBuf),
}

impl ListenAddr {
    /// `"ip:port"` or `"unix:/absolute/path"`; the error says what is wrong
    /// (the caller prefixes the key).
    pub fn parse(s: &str) -> Result<ListenAddr, String> {
        if let Some(path) = s.strip_prefix(UNIX_PREFIX) {
            check_socket_path(path)?;
            return Ok(ListenAddr::Unix(PathBuf::from(path)));
        }
        s.parse::<SocketAddr>().map(ListenAddr::Tcp).map_err(|_| {
            format!(
                "{s:?} is not an IP:port address (like \"127.0.0.1:11211\" or \"[::1]:11211\") or a unix socket (like \"unix:/run/memshift/memshift.sock\")"
            )
        })
    }

    pub fn tcp(&self) -> Option<SocketAddr> {
        match self {
            ListenAddr::Tcp(a) => Some(*a),
            ListenAddr::Unix(_) => None,
        }
    }

    pub fn unix_path(&self) -> Option<&Path> {
        match self {
            ListenAddr::Unix(p) => Some(p),
            ListenAddr::Tcp(_) => None,
        }
    }
}

impl fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListenAddr::Tcp(a) => a.fmt(f),
            ListenAddr::Unix(p) => write!(f, "{UNIX_PREFIX}{}", p.display()),
        }
    }
}

/// Linux' `sun_path` is 108 bytes with the terminating NUL.
const MAX_SOCKET_PATH: usize = 107;

/// An absolute path that fits a `sockaddr_un`.
pub(crate) fn check_socket_path(path: &str) -> Result<(), String> {
    if !path.starts_with('/') {
        return Err(format!(
            "unix socket path {path:?} must be absolute (like \"unix:/run/memshift/memshift.sock\")"
        ));
    }
    if path.ends_with('/') {
        return Err(format!("unix socket path {path:?} names a directory"));
    }
    if path.len() > MAX_SOCKET_PATH || path.contains('\0') {
        return Err(format!(
            "unix socket path {path:?} is longer than {MAX_SOCKET_PATH} bytes (the kernel's limit)"
        ));
    }
    Ok(())
}

/// `server.unix_socket_mode`: an octal string like memcached's `-a`
/// (`"0700"`, `"660"`), at most `0777`.
pub fn parse_socket_mode(s: &str) -> Result<u32, String> {
    let valid = !s.is_empty() && s.len() <= 4 && s.bytes().all(|b| (b'0'..=b'7').contains(&b));
    match u32::from_str_radix(s, 8) {
        Ok(mode) if valid && mode <= 0o777 => Ok(mode),
        _ => Err(format!(
            "{s:?} is not an octal file mode like \"0700\" or \"0660\""
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_tcp_and_unix_and_says_what_is_wrong() {
        assert_eq!(
            ListenAddr::parse("127.0.0.1:11211").unwrap(),
            ListenAddr::Tcp("127.0.0.1:11211".parse().unwrap())
        );
        let unix = ListenAddr::parse("unix:/tmp/m.sock").unwrap();
        assert_eq!(unix, ListenAddr::Unix(PathBuf::from("/tmp/m.sock")));
        assert_eq!(unix.to_string(), "unix:/tmp/m.sock");
        assert!(ListenAddr::parse("unix:m.sock")
            .unwrap_err()
            .contains("absolute"));
        assert!(ListenAddr::parse("unix:").unwrap_err().contains("absolute"));
        let long = format!("unix:/{}", "a".repeat(120));
        assert!(ListenAddr::parse(&long).unwrap_err().contains("longer"));
        assert!(ListenAddr::parse("localhost").is_err());
    }

    #[test]
    fn socket_mode_is_octal_up_to_0777() {
        assert_eq!(parse_socket_mode("0700"), Ok(0o700));
        assert_eq!(parse_socket_mode("660"), Ok(0o660));
        for bad in ["", "0800", "rw", "07777", "1777", "-1"] {
            assert!(parse_socket_mode(bad).is_err(), "{bad}");
        }
    }

    fn load(toml: &str) -> Result<crate::config::Config, String> {
        crate::config::Config::from_toml_str(toml).map_err(|e| e.to_string())
    }

    #[test]
    fn listen_takes_tcp_and_unix_side_by_side_and_check_renders_them_back() {
        let c = load(
            "[server]\nlisten = [\"127.0.0.1:11211\", \"unix:/tmp/m.sock\"]\n\
             resp_listen = \"unix:/tmp/r.sock\"\nunix_socket_mode = \"0660\"\n\
             [redis]\nshards = [\"unix:/run/redis.sock\", \"10.0.0.1:6379\"]\n\
             [memcached]\nservers = [\"unix:/run/mc.sock\"]\n",
        )
        .unwrap();
        assert_eq!(c.server.listen.len(), 2);
        assert_eq!(c.server.listen[1], ListenAddr::Unix("/tmp/m.sock".into()));
        assert_eq!(c.server.socket_mode(), 0o660);
        let rendered = c.render_resolved();
        assert!(rendered.contains(r#"listen = ["127.0.0.1:11211", "unix:/tmp/m.sock"]"#));
        assert_eq!(load(&rendered).unwrap(), c, "check's output parses back");
    }

    #[test]
    fn bad_unix_settings_name_their_key() {
        let shard = "[redis]\nshards = [\"a:1\"]\n";
        for (toml, want) in [
            (
                format!("[server]\nlisten = \"unix:rel.sock\"\n{shard}"),
                "server.listen",
            ),
            (
                format!("[server]\nlisten = [\"unix:/a\", \"unix:/a\"]\n{shard}"),
                "listed twice",
            ),
            (
                format!("[server]\nlisten = \"unix:/a\"\nunix_socket_mode = \"999\"\n{shard}"),
                "server.unix_socket_mode",
            ),
            (
                "[server]\nlisten = \"unix:/a\"\n[redis]\nshards = [\"unix:x\"]\n".into(),
                "redis.shards[0]",
            ),
            (
                "[server]\nlisten = \"unix:/a\"\n[redis]\ntls = true\nshards = [\"unix:/r.sock\"]\n"
                    .into(),
                "unix socket",
            ),
            (
                format!("[server]\nlisten = \"unix:/a\"\n{shard}[memcached]\nservers = [\"unix:\"]\n"),
                "memcached.servers[0]",
            ),
        ] {
            let e = load(&toml).unwrap_err();
            assert!(e.contains(want), "{toml:?}: {e}");
        }
    }
}
