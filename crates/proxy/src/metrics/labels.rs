//! Label values the proxy owns. The shadow crate's outcomes are labelled by
//! its own types ([`Backend`], [`CompareResult`], [`ShadowResult`]), re-exported
//! here so callers find every label type under `metrics`.

pub use memshift_shadow::{Backend, CompareResult, ShadowResult};

/// The protocol a client request arrived in: the `protocol` label of
/// `memshift_requests_total`. `text` covers memcached's classic and meta
/// commands (one listener, one parser); `binary` is memcached's binary
/// protocol; `resp` is the Redis protocol listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Text,
    Binary,
    Resp,
}

impl Protocol {
    pub const ALL: [Protocol; 3] = [Protocol::Text, Protocol::Binary, Protocol::Resp];

    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Text => "text",
            Protocol::Binary => "binary",
            Protocol::Resp => "resp",
        }
    }
}

/// How a client reached a listener: the `transport` label of
/// `memshift_transport_connections*`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Tcp,
    /// A unix-domain socket (`unix:/path` listeners).
    Unix,
}

impl Transport {
    pub const ALL: [Transport; 2] = [Transport::Tcp, Transport::Unix];

    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Unix => "unix",
        }
    }
}

/// Outcome of one client TLS handshake.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsResult {
    /// Handshake completed.
    Ok,
    /// Any other failure: protocol error, bad or untrusted client certificate,
    /// connection reset mid-handshake.
    Error,
    /// The client did not finish the handshake in time.
    Timeout,
    /// mTLS is on and the client presented no certificate.
    NoClientCert,
}

impl TlsResult {
    pub const ALL: [TlsResult; 4] = [
        TlsResult::Ok,
        TlsResult::Error,
        TlsResult::Timeout,
        TlsResult::NoClientCert,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TlsResult::Ok => "ok",
            TlsResult::Error => "error",
            TlsResult::Timeout => "timeout",
            TlsResult::NoClientCert => "no_client_cert",
        }
    }
}

/// Why a backend request failed. Label values of `memshift_backend_errors_total{kind}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// No reply within the backend timeout.
    Timeout,
    /// Connect failed or the connection broke.
    Connection,
    /// The reply could not be parsed.
    Protocol,
    /// The backend answered with an error (Redis `-ERR`, memcached `SERVER_ERROR`).
    Server,
    /// Refused locally: the shard's queue is full or it is marked down.
    Busy,
}

impl ErrorKind {
    pub const ALL: [ErrorKind; 5] = [
        ErrorKind::Timeout,
        ErrorKind::Connection,
        ErrorKind::Protocol,
        ErrorKind::Server,
        ErrorKind::Busy,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Timeout => "timeout",
            ErrorKind::Connection => "connection",
            ErrorKind::Protocol => "protocol",
            ErrorKind::Server => "server",
            ErrorKind::Busy => "busy",
        }
    }
}
