//! TLS 1.3 with rustls (ring provider only), in both directions:
//!
//! * [`server`]: the client-facing listener (`server.tls_listen`, `[tls]`:
//!   optional mTLS, certificates reloaded on SIGHUP, handshake timeout);
//! * [`client`]: the connections to the Redis shards (`redis.tls*`).
//!
//! This module holds what both share: the provider, PEM loading and
//! [`TlsError`]. Certificates and keys are PEM, parsed with
//! rustls-pki-types' `PemObject`.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, InvalidDnsNameError, PrivateKeyDer};
use rustls::RootCertStore;

pub mod client;
pub mod server;

#[cfg(test)]
mod test_support;

pub use client::{connect_shard, connect_shard_blocking, RedisTls, ShardTls};
pub use server::{reload_server, server_config, ServerStream, ServerTls};

/// Why certificates or keys could not be used. `Display` is one line naming
/// the config key (`key`) and the file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{key}: cannot read {}: {source}", .path.display())]
    Read {
        key: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("{key}: {}: bad PEM: {source}", .path.display())]
    BadPem {
        key: &'static str,
        path: PathBuf,
        source: pem::Error,
    },
    #[error("{key}: {}: no CERTIFICATE in the file", .path.display())]
    NoCertificate { key: &'static str, path: PathBuf },
    #[error("{key}: {}: no usable PRIVATE KEY: {source}", .path.display())]
    BadKey {
        key: &'static str,
        path: PathBuf,
        source: pem::Error,
    },
    #[error("{key}: {}: unusable CA certificate: {source}", .path.display())]
    BadCa {
        key: &'static str,
        path: PathBuf,
        source: rustls::Error,
    },
    /// rustls refused the settings themselves (e.g. the protocol versions).
    #[error("{key}: {source}")]
    Settings {
        key: &'static str,
        source: rustls::Error,
    },
    #[error("tls.client_ca: {}: {source}", .path.display())]
    ClientVerifier {
        path: PathBuf,
        source: rustls::server::VerifierBuilderError,
    },
    /// The certificate and the key do not go together (or rustls rejects the pair).
    #[error("{keys}: {} with {}: {source}", .cert.display(), .key.display())]
    CertKeyPair {
        keys: &'static str,
        cert: PathBuf,
        key: PathBuf,
        /// Boxed: keeps `TlsError` (and every `Result` carrying it) small.
        source: Box<rustls::Error>,
    },
    #[error("redis.tls_ca: not set and {} holds no usable CA certificate", .path.display())]
    NoSystemCa { path: PathBuf },
    #[error(
        "redis.tls_ca: not set and no system CA bundle found (set redis.tls_ca or SSL_CERT_FILE)"
    )]
    NoSystemBundle,
    #[error("redis.tls_server_name: {name:?}: {source}")]
    ServerName {
        name: String,
        source: InvalidDnsNameError,
    },
    #[error("redis.shards: {addr:?}: {host:?} cannot be checked against a certificate ({source}); set redis.tls_server_name")]
    ShardHost {
        addr: String,
        host: String,
        source: InvalidDnsNameError,
    },
}

/// The only provider memshift uses (no aws-lc, no process-wide default).
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// TLS 1.3 only, on both sides: Redis 6+ speaks it too.
static VERSIONS: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS13];

fn read_file(key: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        key,
        path: path.to_owned(),
        source,
    })
}

fn parse_certs(
    key: &'static str,
    path: &Path,
    pem: &[u8],
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::BadPem {
            key,
            path: path.to_owned(),
            source,
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            key,
            path: path.to_owned(),
        });
    }
    Ok(certs)
}

fn parse_key(
    key: &'static str,
    path: &Path,
    pem: &[u8],
) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|source| TlsError::BadKey {
        key,
        path: path.to_owned(),
        source,
    })
}

fn load_certs(key: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    parse_certs(key, path, &read_file(key, path)?)
}

fn load_key(key: &'static str, path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    parse_key(key, path, &read_file(key, path)?)
}

fn roots(
    key: &'static str,
    path: &Path,
    certs: Vec<CertificateDer<'static>>,
) -> Result<RootCertStore, TlsError> {
    let mut store = RootCertStore::empty();
    for cert in certs {
        store.add(cert).map_err(|source| TlsError::BadCa {
            key,
            path: path.to_owned(),
            source,
        })?;
    }
    Ok(store)
}
