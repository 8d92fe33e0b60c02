//! The one error type at the proxy boundary.

use crate::config::ConfigError;

#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("{0}")]
    Config(#[from] ConfigError),
    #[error("ring: {0}")]
    Ring(#[from] memshift_ring::RingError),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// `ip:port` or `unix:/path`.
        addr: String,
        source: std::io::Error,
    },
    /// The legacy memcached pool's settings (distribution, servers).
    #[error("memcached: {0}")]
    Legacy(#[from] memshift_ring::legacy::LegacyError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Tls(#[from] crate::tls::TlsError),
    #[error("{0}")]
    Sasl(#[from] crate::sasl::SaslError),
    #[error("{0}")]
    Other(String),
}
