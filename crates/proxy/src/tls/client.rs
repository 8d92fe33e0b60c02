//! TLS to the Redis shards (`redis.tls*`): one rustls client config shared
//! by every shard, the name each shard's certificate must carry, and the
//! client handshake.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::{parse_certs, parse_key, provider, read_file, roots, TlsError, VERSIONS};
use crate::config::RedisConfig;

/// `redis.tls*` turned into one rustls client config, shared by every shard.
#[derive(Clone)]
pub struct RedisTls {
    config: Arc<ClientConfig>,
    server_name: Option<String>,
    /// Identifies the inputs (file contents, not just paths): a reload with
    /// the same files keeps the shard connections, new files replace them.
    digest: u64,
}

impl RedisTls {
    /// `None` when `redis.tls` is off.
    pub fn from_config(redis: &RedisConfig) -> Result<Option<RedisTls>, TlsError> {
        if !redis.tls {
            return Ok(None);
        }
        let mut digest_input: Vec<u8> = Vec::new();
        let (store, ca_path) = match &redis.tls_ca {
            Some(path) => {
                let pem = read_file("redis.tls_ca", path)?;
                digest_input.extend_from_slice(&pem);
                let certs = parse_certs("redis.tls_ca", path, &pem)?;
                (roots("redis.tls_ca", path, certs)?, path.clone())
            }
            None => {
                let (path, pem) = system_roots()?;
                digest_input.extend_from_slice(&pem);
                let mut store = RootCertStore::empty();
                let certs = CertificateDer::pem_slice_iter(&pem).filter_map(Result::ok);
                // A system bundle can hold a few certificates webpki rejects.
                let (added, _ignored) = store.add_parsable_certificates(certs);
                if added == 0 {
                    return Err(TlsError::NoSystemCa { path });
                }
                (store, path)
            }
        };
        let builder = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(VERSIONS)
            .map_err(|source| TlsError::Settings {
                key: "redis.tls",
                source,
            })?
            .with_root_certificates(store);
        let config = match (&redis.tls_cert, &redis.tls_key) {
            (Some(cert_path), Some(key_path)) => {
                let cert_pem = read_file("redis.tls_cert", cert_path)?;
                let key_pem = read_file("redis.tls_key", key_path)?;
                digest_input.extend_from_slice(&cert_pem);
                digest_input.extend_from_slice(&key_pem);
                let certs = parse_certs("redis.tls_cert", cert_path, &cert_pem)?;
                let key = parse_key("redis.tls_key", key_path, &key_pem)?;
                builder
                    .with_client_auth_cert(certs, key)
                    .map_err(|source| TlsError::CertKeyPair {
                        keys: "redis.tls_cert/redis.tls_key",
                        cert: cert_path.clone(),
                        key: key_path.clone(),
                        source: Box::new(source),
                    })?
            }
            // Validation guarantees both or neither.
            _ => builder.with_no_client_auth(),
        };
        if let Some(name) = &redis.tls_server_name {
            ServerName::try_from(name.as_str()).map_err(|source| TlsError::ServerName {
                name: name.clone(),
                source,
            })?;
        } else {
            for shard in &redis.shards {
                let host = host_of(&shard.addr);
                ServerName::try_from(host).map_err(|source| TlsError::ShardHost {
                    addr: shard.addr.clone(),
                    host: host.to_owned(),
                    source,
                })?;
            }
        }
        tracing::debug!(ca = %ca_path.display(), "redis TLS client config built");
        Ok(Some(RedisTls {
            config: Arc::new(config),
            server_name: redis.tls_server_name.clone(),
            digest: twox_hash::XxHash3_64::oneshot(&digest_input),
        }))
    }

    /// The settings one shard's connections use.
    pub fn for_shard(&self, addr: &str) -> ShardTls {
        ShardTls {
            config: self.config.clone(),
            server_name: self
                .server_name
                .clone()
                .unwrap_or_else(|| host_of(addr).to_string()),
            digest: self.digest,
        }
    }
}

/// TLS settings of one shard connection: the shared client config and the
/// name its certificate must carry.
#[derive(Clone)]
pub struct ShardTls {
    pub config: Arc<ClientConfig>,
    pub server_name: String,
    digest: u64,
}

// Equal when built from the same files for the same name: lets a reload
// keep connections whose TLS settings did not change.
impl PartialEq for ShardTls {
    fn eq(&self, other: &ShardTls) -> bool {
        self.digest == other.digest && self.server_name == other.server_name
    }
}

impl Eq for ShardTls {}

impl fmt::Debug for ShardTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShardTls")
            .field("server_name", &self.server_name)
            .field("digest", &format_args!("{:016x}", self.digest))
            .finish()
    }
}

/// Client handshake with a shard over an open TCP connection.
pub async fn connect_shard(
    tls: &ShardTls,
    tcp: TcpStream,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, String> {
    let name = ServerName::try_from(tls.server_name.clone())
        .map_err(|e| format!("tls server name {:?}: {e}", tls.server_name))?;
    TlsConnector::from(tls.config.clone())
        .connect(name, tcp)
        .await
        .map_err(|e| format!("tls handshake: {e}"))
}

/// Blocking client handshake (the cluster topology's first read, before
/// the runtime's connections exist): the stream, not yet handshaken; the
/// handshake runs on its first read or write.
pub fn connect_shard_blocking(
    tls: &ShardTls,
    tcp: std::net::TcpStream,
) -> Result<rustls::StreamOwned<rustls::ClientConnection, std::net::TcpStream>, String> {
    let name = ServerName::try_from(tls.server_name.clone())
        .map_err(|e| format!("tls server name {:?}: {e}", tls.server_name))?;
    let conn =
        rustls::ClientConnection::new(tls.config.clone(), name).map_err(|e| format!("tls: {e}"))?;
    Ok(rustls::StreamOwned::new(conn, tcp))
}

/// `host:port` → host, without IPv6 brackets.
fn host_of(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

/// The system CA bundle, OpenSSL-style: `SSL_CERT_FILE`, else the usual
/// distribution paths.
fn system_roots() -> Result<(PathBuf, Vec<u8>), TlsError> {
    const BUNDLES: [&str; 4] = [
        "/etc/ssl/certs/ca-certificates.crt",
        "/etc/pki/tls/certs/ca-bundle.crt",
        "/etc/ssl/ca-bundle.pem",
        "/etc/ssl/cert.pem",
    ];
    let candidates = std::env::var_os("SSL_CERT_FILE")
        .map(PathBuf::from)
        .into_iter()
        .chain(BUNDLES.iter().map(PathBuf::from));
    for path in candidates {
        if let Ok(pem) = std::fs::read(&path) {
            return Ok((path, pem));
        }
    }
    Err(TlsError::NoSystemBundle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ShardConfig;
    use crate::tls::test_support::{write, Ca};
    use std::path::Path;

    #[test]
    fn host_of_strips_port_and_brackets() {
        assert_eq!(host_of("redis.internal:6379"), "redis.internal");
        assert_eq!(host_of("10.0.0.1:6380"), "10.0.0.1");
        assert_eq!(host_of("[::1]:6381"), "::1");
    }

    fn redis_config(dir: &Path, ca: &Ca) -> RedisConfig {
        let (c, k, _) = ca.leaf("memshift");
        RedisConfig {
            shards: vec![ShardConfig {
                addr: "127.0.0.1:6379".into(),
                weight: 1,
                name: None,
                master: None,
            }],
            tls: true,
            tls_ca: Some(write(dir, "ca.pem", &ca.issuer.pem())),
            tls_cert: Some(write(dir, "client.pem", &c)),
            tls_key: Some(write(dir, "client.key", &k)),
            ..RedisConfig::default()
        }
    }

    #[test]
    fn redis_settings_compare_by_file_contents() {
        assert!(RedisTls::from_config(&RedisConfig::default())
            .unwrap()
            .is_none());
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::new();
        let redis = redis_config(dir.path(), &ca);
        let a = RedisTls::from_config(&redis).unwrap().unwrap();
        let b = RedisTls::from_config(&redis).unwrap().unwrap();
        assert_eq!(a.for_shard("127.0.0.1:6379"), b.for_shard("127.0.0.1:6379"));
        assert_eq!(a.for_shard("127.0.0.1:6379").server_name, "127.0.0.1");
        assert_ne!(a.for_shard("127.0.0.1:6379"), a.for_shard("10.0.0.2:6379"));

        // A rotated client certificate makes different settings (new
        // connections on reload).
        let (c, k, _) = ca.leaf("memshift");
        std::fs::write(redis.tls_cert.as_ref().unwrap(), c).unwrap();
        std::fs::write(redis.tls_key.as_ref().unwrap(), k).unwrap();
        let rotated = RedisTls::from_config(&redis).unwrap().unwrap();
        assert_ne!(
            a.for_shard("127.0.0.1:6379"),
            rotated.for_shard("127.0.0.1:6379")
        );

        let mut named = redis.clone();
        named.tls_server_name = Some("redis.internal".into());
        let n = RedisTls::from_config(&named).unwrap().unwrap();
        assert_eq!(n.for_shard("127.0.0.1:6379").server_name, "redis.internal");

        let mut bad = redis.clone();
        bad.tls_ca = Some(dir.path().join("nope.pem"));
        let e = RedisTls::from_config(&bad).err().unwrap();
        assert!(
            e.to_string().starts_with("redis.tls_ca: cannot read"),
            "{e}"
        );
    }
}
