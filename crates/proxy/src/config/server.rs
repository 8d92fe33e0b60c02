//! `[server]`, `[log]`, `[admin]` and `[tls]`: the listeners and what
//! they serve.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::PathBuf;

use serde::de;
use serde::{Deserialize, Deserializer};

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Plaintext memcached protocol listener.
    #[serde(deserialize_with = "de_server_listen")]
    pub listen: Option<SocketAddr>,
    /// Memcached protocol over TLS 1.3.
    #[serde(deserialize_with = "de_server_tls_listen")]
    pub tls_listen: Option<SocketAddr>,
    pub max_connections: usize,
    /// Largest value accepted by a storage command, in bytes (memcached -I).
    pub max_item_size: usize,
    /// Close client connections idle this long; 0 = never.
    pub idle_timeout_ms: u64,
    /// Worker threads; 0 = one per core.
    pub threads: usize,
    /// On SIGTERM, how long in-flight requests may take to finish.
    pub drain_timeout_ms: u64,
    /// Draining: a connection with everything answered closes once its
    /// client has sent nothing this long.
    pub drain_quiet_ms: u64,
    /// false: `flush_all` is refused.
    pub allow_flush_all: bool,
    /// Replies a client may have queued before it is closed as a slow consumer.
    pub max_pending_replies: usize,
    /// Reply bytes a client may have queued (received from backends, not
    /// yet written to it) before it is closed as a slow consumer.
    pub max_pending_bytes: usize,
    /// Longest command line (without data block) accepted, in bytes.
    pub max_line_length: usize,
    /// Binary connections must authenticate (SASL PLAIN) first, as
    /// memcached with `-S`. See docs/binary.md.
    pub sasl: bool,
    /// `user:password` lines; required when `sasl` is on. Never logged.
    pub sasl_credentials_file: Option<PathBuf>,
    /// RESP (Redis protocol) listener over the same items; off when unset.
    #[serde(deserialize_with = "de_server_resp_listen")]
    pub resp_listen: Option<SocketAddr>,
    /// RESP over TLS 1.3, with `[tls]` (client_ca: mTLS).
    #[serde(deserialize_with = "de_server_resp_tls_listen")]
    pub resp_tls_listen: Option<SocketAddr>,
    /// When set, RESP clients must `AUTH` (or `HELLO ... AUTH`) first.
    pub resp_password: Option<String>,
    /// Largest bulk string a RESP request may declare (Redis'
    /// `proto-max-bulk-len`); bytes are kept as they arrive, never reserved.
    pub resp_max_bulk_len: usize,
}

impl ServerConfig {
    /// The worker thread count `threads` resolves to (0: one per core).
    pub fn worker_threads(&self) -> usize {
        if self.threads == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            self.threads
        }
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: None,
            tls_listen: None,
            max_connections: 100_000,
            max_item_size: 1024 * 1024,
            idle_timeout_ms: 0,
            threads: 0,
            drain_timeout_ms: 10_000,
            drain_quiet_ms: 100,
            allow_flush_all: true,
            max_pending_replies: 10_000,
            max_pending_bytes: 64 * 1024 * 1024,
            max_line_length: 2048,
            sasl: false,
            sasl_credentials_file: None,
            resp_listen: None,
            resp_tls_listen: None,
            resp_password: None,
            resp_max_bulk_len: 512 * 1024 * 1024,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// A level (`info`) or a tracing filter (`info,memshift_proxy=debug`).
    pub level: String,
    pub format: LogFormat,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            level: "info".to_owned(),
            format: LogFormat::Text,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

impl LogFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdminConfig {
    /// HTTP endpoint for /metrics, /health, /ready; `listen = ""` disables it.
    #[serde(deserialize_with = "de_admin_listen")]
    pub listen: Option<SocketAddr>,
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            listen: Some(SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9121))),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM certificate chain.
    pub cert: PathBuf,
    /// PEM private key.
    pub key: PathBuf,
    /// When set, clients must present a certificate signed by this CA.
    #[serde(default)]
    pub client_ca: Option<PathBuf>,
    #[serde(default = "default_handshake_timeout_ms")]
    pub handshake_timeout_ms: u64,
}

fn default_handshake_timeout_ms() -> u64 {
    5000
}

/// `"ip:port"` → Some, `""` → None (disables the listener).
fn parse_listen<E: de::Error>(key: &str, s: &str) -> Result<Option<SocketAddr>, E> {
    if s.is_empty() {
        return Ok(None);
    }
    s.parse::<SocketAddr>().map(Some).map_err(|_| {
        E::custom(format!(
            "{key}: {s:?} is not an IP:port address (like \"127.0.0.1:11211\" or \"[::1]:11211\")"
        ))
    })
}

// One deserializer per listen key so the error names the key.
macro_rules! listen_fields {
    ($($f:ident => $key:literal),* $(,)?) => {$(
        fn $f<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SocketAddr>, D::Error> {
            parse_listen($key, &String::deserialize(d)?)
        }
    )*};
}
listen_fields!(
    de_server_listen => "server.listen",
    de_server_tls_listen => "server.tls_listen",
    de_server_resp_listen => "server.resp_listen",
    de_server_resp_tls_listen => "server.resp_tls_listen",
    de_admin_listen => "admin.listen",
);
