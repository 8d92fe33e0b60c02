//! The client-facing TLS listener: the acceptor built from `[tls]`,
//! optional mTLS, certificates reloaded on SIGHUP, and the handshake under a
//! timeout, counted in `memshift_tls_handshakes_total`.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use arc_swap::ArcSwap;
use memshift_pipeline::transport::Stream;
use rustls::pki_types::CertificateDer;
use rustls::server::WebPkiClientVerifier;
use rustls::ServerConfig;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_rustls::TlsAcceptor;

use super::{load_certs, load_key, provider, roots, TlsError, VERSIONS};
use crate::config::TlsConfig;
use crate::metrics::{Metrics, TlsResult};

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
        .map_err(|source| TlsError::Settings { key: "tls", source })?;
    let builder = match &cfg.client_ca {
        Some(ca) => {
            let store = roots("tls.client_ca", ca, load_certs("tls.client_ca", ca)?)?;
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(store), provider)
                .build()
                .map_err(|source| TlsError::ClientVerifier {
                    path: ca.clone(),
                    source,
                })?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let config = builder
        .with_single_cert(certs, key)
        .map_err(|source| TlsError::CertKeyPair {
            keys: "tls.cert/tls.key",
            cert: cfg.cert.clone(),
            key: cfg.key.clone(),
            source: Box::new(source),
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
    pub async fn accept(&self, stream: Stream, metrics: &Metrics) -> Option<ServerStream> {
        let current = self.current.load_full();
        let work = async {
            // A TCP connection closed before its first byte is a port probe
            // (a load balancer's TCP check), not a failed handshake.
            if let Stream::Tcp(tcp) = &stream {
                let mut first = [0u8; 1];
                if tcp.peek(&mut first).await? == 0 {
                    return Ok(None);
                }
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
    inner: tokio_rustls::server::TlsStream<Stream>,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::test_support::{write, Ca};
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{PrivateKeyDer, ServerName};
    use rustls::ClientConfig;
    use std::path::PathBuf;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;
    use tokio_rustls::TlsConnector;

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
                    if let Some(mut s) = srv.accept(Stream::Tcp(tcp), &m).await {
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
