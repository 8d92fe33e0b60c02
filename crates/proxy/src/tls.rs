//! TLS 1.3 with rustls (ring provider only): the client-facing listener
//! (`server.tls_listen`, `[tls]`: optional mTLS, certificates reloaded on
//! SIGHUP) and the connections to the Redis shards (`redis.tls*`).
//!
//! Certificates and keys are PEM, parsed with rustls-pki-types' `PemObject`.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::{TlsAcceptor, TlsConnector};

use crate::config::{RedisConfig, TlsConfig};
use crate::error::ProxyError;
use crate::metrics::{Metrics, TlsResult};

/// Why certificates or keys could not be used; one line naming the key and
/// the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsError(String);

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TlsError {}

impl From<TlsError> for ProxyError {
    fn from(e: TlsError) -> ProxyError {
        ProxyError::Other(e.0)
    }
}

/// The only provider memshift uses (no aws-lc, no process-wide default).
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// TLS 1.3 only, on both sides: Redis 6+ speaks it too.
static VERSIONS: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS13];

fn read_file(key: &str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|e| TlsError(format!("{key}: cannot read {}: {e}", path.display())))
}

fn parse_certs(
    key: &str,
    path: &Path,
    pem: &[u8],
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError(format!("{key}: {}: bad PEM: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(TlsError(format!(
            "{key}: {}: no CERTIFICATE in the file",
            path.display()
        )));
    }
    Ok(certs)
}

fn parse_key(key: &str, path: &Path, pem: &[u8]) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| {
        TlsError(format!(
            "{key}: {}: no usable PRIVATE KEY: {e}",
            path.display()
        ))
    })
}

fn load_certs(key: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    parse_certs(key, path, &read_file(key, path)?)
}

fn load_key(key: &str, path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    parse_key(key, path, &read_file(key, path)?)
}

fn roots(
    key: &str,
    path: &Path,
    certs: Vec<CertificateDer<'static>>,
) -> Result<RootCertStore, TlsError> {
    let mut store = RootCertStore::empty();
    for cert in certs {
        store.add(cert).map_err(|e| {
            TlsError(format!(
                "{key}: {}: unusable CA certificate: {e}",
                path.display()
            ))
        })?;
    }
    Ok(store)
}

/// SHA-1 of the leaf certificate, as `openssl x509 -fingerprint` prints it:
/// lets an operator see which certificate a reload put in service.
fn fingerprint(cert: &CertificateDer<'_>) -> String {
    let digest = sha1_smol::Sha1::from(cert.as_ref()).digest().bytes();
    digest
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

// ---------------------------------------------------------------------------
// client-facing side

/// Builds the listener's rustls config from `[tls]`: TLS 1.3 only, and with
/// `client_ca` a mandatory, verified client certificate. Returns it with the
/// leaf certificate's fingerprint.
pub fn server_config(cfg: &TlsConfig) -> Result<(Arc<ServerConfig>, String), TlsError> {
    let certs = load_certs("tls.cert", &cfg.cert)?;
    let key = load_key("tls.key", &cfg.key)?;
    let leaf = certs.first().map(fingerprint).unwrap_or_default();
    let provider = provider();
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(VERSIONS)
        .map_err(|e| TlsError(format!("tls: {e}")))?;
    let builder = match &cfg.client_ca {
        Some(ca) => {
            let store = roots("tls.client_ca", ca, load_certs("tls.client_ca", ca)?)?;
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(store), provider)
                .build()
                .map_err(|e| TlsError(format!("tls.client_ca: {}: {e}", ca.display())))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let config = builder.with_single_cert(certs, key).map_err(|e| {
        TlsError(format!(
            "tls.cert/tls.key: {} with {}: {e}",
            cfg.cert.display(),
            cfg.key.display()
        ))
    })?;
    Ok((Arc::new(config), leaf))
}

/// What a handshake starts from; swapped whole by a reload.
struct Current {
    acceptor: TlsAcceptor,
    handshake_timeout: Duration,
    fingerprint: String,
}

/// The TLS listener's state. Each handshake takes the config in service when
/// it starts, so a reload affects new connections only.
pub struct ServerTls {
    current: ArcSwap<Current>,
}

impl ServerTls {
    pub fn load(cfg: &TlsConfig) -> Result<ServerTls, TlsError> {
        let current = Self::build(cfg)?;
        tracing::info!(cert = %cfg.cert.display(), sha1 = %current.fingerprint, mtls = cfg.client_ca.is_some(), "TLS certificate loaded");
        Ok(ServerTls {
            current: ArcSwap::from_pointee(current),
        })
    }

    fn build(cfg: &TlsConfig) -> Result<Current, TlsError> {
        let (config, fingerprint) = server_config(cfg)?;
        Ok(Current {
            acceptor: TlsAcceptor::from(config),
            handshake_timeout: Duration::from_millis(cfg.handshake_timeout_ms.max(1)),
            fingerprint,
        })
    }

    /// SIGHUP: read the files again. On any error the running certificate
    /// stays in service and the error is returned for the log.
    pub fn reload(&self, cfg: &TlsConfig) -> Result<(), TlsError> {
        let next = Self::build(cfg)?;
        let changed = next.fingerprint != self.current.load().fingerprint;
        tracing::info!(cert = %cfg.cert.display(), sha1 = %next.fingerprint, changed, "TLS certificates reloaded");
        self.current.store(Arc::new(next));
        Ok(())
    }

    /// SHA-1 fingerprint of the certificate new handshakes get.
    pub fn fingerprint(&self) -> String {
        self.current.load().fingerprint.clone()
    }

    /// Runs the server handshake under the handshake timeout and counts its
    /// result. `None`: the connection is to be closed (already counted).
    pub async fn accept(&self, stream: TcpStream, metrics: &Metrics) -> Option<ServerStream> {
        let current = self.current.load_full();
        let work = async {
            // A connection closed before its first byte is a port probe (a
            // load balancer's TCP check), not a failed handshake.
            let mut first = [0u8; 1];
            if stream.peek(&mut first).await? == 0 {
                return Ok(None);
            }
            current.acceptor.accept(stream).await.map(Some)
        };
        let outcome = match tokio::time::timeout(current.handshake_timeout, work).await {
            Ok(Ok(Some(tls))) => {
                metrics.tls_handshake(TlsResult::Ok);
                return Some(ServerStream { inner: tls });
            }
            Ok(Ok(None)) => return None,
            Ok(Err(e)) => classify(&e),
            Err(_) => TlsResult::Timeout,
        };
        metrics.tls_handshake(outcome);
        // Debug only: scanners and port probes would otherwise flood the log.
        tracing::debug!(result = outcome.as_str(), "TLS handshake failed");
        None
    }
}

/// SIGHUP: reload the listener's certificates from the new config. A bad
/// certificate is refused with a log line and the running one stays.
pub fn reload_server(tls: Option<&ServerTls>, config: &crate::config::Config) {
    let (Some(tls), Some(cfg)) = (tls, &config.tls) else {
        return;
    };
    if let Err(e) = tls.reload(cfg) {
        tracing::error!(error = %e, running_sha1 = %tls.fingerprint(), "TLS reload refused: keeping the running certificate");
    }
}

/// Maps a failed handshake to its metric label.
fn classify(e: &io::Error) -> TlsResult {
    match e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(rustls::Error::NoCertificatesPresented) => TlsResult::NoClientCert,
        _ => TlsResult::Error,
    }
}

/// A server-side TLS stream that never leaves reply bytes queued inside
/// rustls. tokio-rustls' `poll_write` may accept data it could not yet put on
/// the socket; a caller that writes its last reply and then only reads (the
/// session never calls `flush`) would leave that reply unsent. So writes
/// first push out what is still queued (backpressure), and reads push it out
/// too, which also arms the wakeup for when the socket drains.
pub struct ServerStream {
    inner: tokio_rustls::server::TlsStream<TcpStream>,
}

impl AsyncRead for ServerStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // Errors surface on the next write; pending just means later.
        let _ = Pin::new(&mut this.inner).poll_flush(cx);
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for ServerStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(Pin::new(&mut this.inner).poll_flush(cx))?;
        let n = ready!(Pin::new(&mut this.inner).poll_write(cx, buf))?;
        let _ = Pin::new(&mut this.inner).poll_flush(cx);
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

// ---------------------------------------------------------------------------
// Redis side

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
                    return Err(TlsError(format!(
                        "redis.tls_ca: not set and {} holds no usable CA certificate",
                        path.display()
                    )));
                }
                (store, path)
            }
        };
        let builder = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(VERSIONS)
            .map_err(|e| TlsError(format!("redis.tls: {e}")))?
            .with_root_certificates(store);
        let config = match (&redis.tls_cert, &redis.tls_key) {
            (Some(cert_path), Some(key_path)) => {
                let cert_pem = read_file("redis.tls_cert", cert_path)?;
                let key_pem = read_file("redis.tls_key", key_path)?;
                digest_input.extend_from_slice(&cert_pem);
                digest_input.extend_from_slice(&key_pem);
                let certs = parse_certs("redis.tls_cert", cert_path, &cert_pem)?;
                let key = parse_key("redis.tls_key", key_path, &key_pem)?;
                builder.with_client_auth_cert(certs, key).map_err(|e| {
                    TlsError(format!(
                        "redis.tls_cert/redis.tls_key: {} with {}: {e}",
                        cert_path.display(),
                        key_path.display()
                    ))
                })?
            }
            // Validation guarantees both or neither.
            _ => builder.with_no_client_auth(),
        };
        if let Some(name) = &redis.tls_server_name {
            ServerName::try_from(name.as_str())
                .map_err(|e| TlsError(format!("redis.tls_server_name: {name:?}: {e}")))?;
        } else {
            for shard in &redis.shards {
                let host = host_of(&shard.addr);
                ServerName::try_from(host).map_err(|e| {
                    TlsError(format!(
                        "redis.shards: {:?}: {host:?} cannot be checked against a certificate ({e}); set redis.tls_server_name",
                        shard.addr
                    ))
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
    Err(TlsError(
        "redis.tls_ca: not set and no system CA bundle found (set redis.tls_ca or SSL_CERT_FILE)"
            .to_string(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ShardConfig;
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    struct Ca {
        issuer: CertifiedIssuer<'static, KeyPair>,
    }

    impl Ca {
        fn new() -> Ca {
            let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            let issuer =
                CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
            Ca { issuer }
        }

        /// (cert PEM, key PEM, cert DER)
        fn leaf(&self, san: &str) -> (String, String, Vec<u8>) {
            let key = KeyPair::generate().unwrap();
            let cert = CertificateParams::new(vec![san.to_string()])
                .unwrap()
                .signed_by(&key, &*self.issuer)
                .unwrap();
            (cert.pem(), key.serialize_pem(), cert.der().to_vec())
        }
    }

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    fn tls_config(cert: PathBuf, key: PathBuf, client_ca: Option<PathBuf>) -> TlsConfig {
        TlsConfig {
            cert,
            key,
            client_ca,
            handshake_timeout_ms: 2000,
        }
    }

    #[test]
    fn loads_a_pair_and_names_the_key_of_a_bad_file() {
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::new();
        let (c1, k1, der1) = ca.leaf("127.0.0.1");
        let (_, k2, _) = ca.leaf("127.0.0.1");
        let cert = write(dir.path(), "c.pem", &c1);
        let key = write(dir.path(), "k.pem", &k1);
        let (_, fp) = server_config(&tls_config(cert.clone(), key.clone(), None)).unwrap();
        assert_eq!(fp, fingerprint(&CertificateDer::from(der1)));

        let other_key = write(dir.path(), "k2.pem", &k2);
        let e = server_config(&tls_config(cert.clone(), other_key, None)).unwrap_err();
        assert!(e.to_string().starts_with("tls.cert/tls.key:"), "{e}");

        let garbage = write(dir.path(), "g.pem", "not a certificate\n");
        let e = server_config(&tls_config(garbage.clone(), key.clone(), None)).unwrap_err();
        assert!(
            e.to_string().contains("tls.cert") && e.to_string().contains("no CERTIFICATE"),
            "{e}"
        );
        let e = server_config(&tls_config(cert.clone(), garbage, None)).unwrap_err();
        assert!(e.to_string().contains("tls.key"), "{e}");

        let missing = dir.path().join("missing.pem");
        let e = server_config(&tls_config(cert.clone(), key.clone(), Some(missing))).unwrap_err();
        assert!(
            e.to_string().starts_with("tls.client_ca: cannot read"),
            "{e}"
        );

        let ca_file = write(dir.path(), "ca.pem", &ca.issuer.pem());
        server_config(&tls_config(cert, key, Some(ca_file))).unwrap();
    }

    #[test]
    fn reload_swaps_only_a_good_certificate() {
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::new();
        let (c1, k1, _) = ca.leaf("a");
        let (c2, k2, der2) = ca.leaf("b");
        let cert = write(dir.path(), "c.pem", &c1);
        let key = write(dir.path(), "k.pem", &k1);
        let cfg = tls_config(cert.clone(), key.clone(), None);
        let tls = ServerTls::load(&cfg).unwrap();
        let first = tls.fingerprint();

        // New cert with the old key: refused, the first stays.
        std::fs::write(&cert, &c2).unwrap();
        assert!(tls.reload(&cfg).is_err());
        assert_eq!(tls.fingerprint(), first);

        std::fs::write(&key, &k2).unwrap();
        tls.reload(&cfg).unwrap();
        assert_eq!(tls.fingerprint(), fingerprint(&CertificateDer::from(der2)));
    }

    #[test]
    fn classifies_handshake_errors() {
        let no_cert = io::Error::new(
            io::ErrorKind::InvalidData,
            rustls::Error::NoCertificatesPresented,
        );
        assert_eq!(classify(&no_cert), TlsResult::NoClientCert);
        let bad = io::Error::new(
            io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
        );
        assert_eq!(classify(&bad), TlsResult::Error);
        assert_eq!(
            classify(&io::ErrorKind::UnexpectedEof.into()),
            TlsResult::Error
        );
    }

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

    /// A real handshake over loopback: TLS 1.3 served, counted; mTLS without
    /// a client certificate counted as `no_client_cert`.
    #[tokio::test]
    async fn handshakes_over_loopback_are_counted() {
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::new();
        let (c, k, _) = ca.leaf("127.0.0.1");
        let ca_file = write(dir.path(), "ca.pem", &ca.issuer.pem());
        let cfg = tls_config(
            write(dir.path(), "c.pem", &c),
            write(dir.path(), "k.pem", &k),
            Some(ca_file.clone()),
        );
        let server = Arc::new(ServerTls::load(&cfg).unwrap());
        let metrics = Arc::new(Metrics::new());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (srv, m) = (server.clone(), metrics.clone());
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (srv, m) = (srv.clone(), m.clone());
                tokio::spawn(async move {
                    if let Some(mut s) = srv.accept(tcp, &m).await {
                        let mut buf = [0u8; 5];
                        if s.read_exact(&mut buf).await.is_ok() {
                            let _ = s.write_all(&buf).await;
                        }
                    }
                });
            }
        });

        let roots = roots("ca", &ca_file, load_certs("ca", &ca_file).unwrap()).unwrap();
        let client = |with_cert: bool| {
            let b = ClientConfig::builder_with_provider(provider())
                .with_protocol_versions(VERSIONS)
                .unwrap()
                .with_root_certificates(roots.clone());
            let config = if with_cert {
                let (cc, ck, _) = ca.leaf("client");
                b.with_client_auth_cert(
                    CertificateDer::pem_slice_iter(cc.as_bytes())
                        .collect::<Result<Vec<_>, _>>()
                        .unwrap(),
                    PrivateKeyDer::from_pem_slice(ck.as_bytes()).unwrap(),
                )
                .unwrap()
            } else {
                b.with_no_client_auth()
            };
            TlsConnector::from(Arc::new(config))
        };
        let name = ServerName::try_from("127.0.0.1").unwrap();

        let tcp = TcpStream::connect(addr).await.unwrap();
        let mut ok = client(true).connect(name.clone(), tcp).await.unwrap();
        ok.write_all(b"hello").await.unwrap();
        let mut echo = [0u8; 5];
        ok.read_exact(&mut echo).await.unwrap();
        assert_eq!(&echo, b"hello");

        let tcp = TcpStream::connect(addr).await.unwrap();
        // TLS 1.3: the client learns of the rejection on its first read.
        if let Ok(mut refused) = client(false).connect(name, tcp).await {
            let _ = refused.write_all(b"hello").await;
            let mut buf = [0u8; 5];
            assert!(refused.read_exact(&mut buf).await.is_err());
        }
        // A probe that closes before its first byte is not a handshake.
        drop(TcpStream::connect(addr).await.unwrap());
        tokio::time::sleep(Duration::from_millis(100)).await;
        let text = metrics.render();
        for (result, n) in [
            ("ok", 1),
            ("no_client_cert", 1),
            ("error", 0),
            ("timeout", 0),
        ] {
            let line = format!("memshift_tls_handshakes_total{{result=\"{result}\"}} {n}");
            assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
        }
    }
}
