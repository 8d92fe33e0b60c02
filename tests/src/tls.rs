//! TLS helpers for the integration tests: a throwaway PKI generated with
//! rcgen (no private key is ever committed), a blocking rustls client, and
//! `redis-server` serving TLS only (`--port 0 --tls-port N`).

use std::fs::{self, OpenOptions};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::thread::sleep;
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};
use tempfile::TempDir;

use crate::env::free_port;
use crate::socket::Socket;

/// A certificate and key written as PEM files.
#[derive(Debug, Clone)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// The certificate's DER bytes (what a peer presents).
    pub der: Vec<u8>,
}

/// A test certificate authority whose files live in a temp dir.
pub struct Pki {
    dir: TempDir,
    name: String,
    ca: CertifiedIssuer<'static, KeyPair>,
}

impl Pki {
    /// A new CA called `name` (also the file-name prefix).
    pub fn new(name: &str) -> Pki {
        let dir = tempfile::Builder::new()
            .prefix("memshift-pki-")
            .tempdir()
            .expect("create a temp dir");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params
            .distinguished_name
            .push(DnType::CommonName, format!("{name} test CA"));
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().expect("CA key");
        let ca = CertifiedIssuer::self_signed(params, key).expect("self-sign the CA");
        fs::write(dir.path().join(format!("{name}-ca.crt")), ca.pem()).expect("write CA");
        Pki {
            dir,
            name: name.to_string(),
            ca,
        }
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The CA certificate (PEM file).
    pub fn ca_cert(&self) -> PathBuf {
        self.dir.path().join(format!("{}-ca.crt", self.name))
    }

    pub fn ca_der(&self) -> Vec<u8> {
        self.ca.der().to_vec()
    }

    /// Issues a leaf certificate for `sans` (DNS names or IP addresses) and
    /// writes `<file>.crt` / `<file>.key`.
    pub fn issue(&self, file: &str, sans: &[&str]) -> CertFiles {
        let sans: Vec<String> = sans.iter().map(|s| s.to_string()).collect();
        let mut params = CertificateParams::new(sans).expect("leaf params");
        params.distinguished_name.push(DnType::CommonName, file);
        let key = KeyPair::generate().expect("leaf key");
        let cert = params.signed_by(&key, &*self.ca).expect("sign the leaf");
        let files = CertFiles {
            cert: self.dir.path().join(format!("{file}.crt")),
            key: self.dir.path().join(format!("{file}.key")),
            der: cert.der().to_vec(),
        };
        fs::write(&files.cert, cert.pem()).expect("write cert");
        fs::write(&files.key, key.serialize_pem()).expect("write key");
        files
    }
}

/// How a test client connects.
#[derive(Default, Clone)]
pub struct ClientOpts<'a> {
    /// Trusted CA (PEM file).
    pub ca: Option<&'a Path>,
    /// Client certificate to present.
    pub client: Option<&'a CertFiles>,
    /// Name to verify; default `127.0.0.1`.
    pub server_name: Option<&'a str>,
}

/// A blocking TLS 1.3 connection (rustls, ring provider).
pub struct TlsConn {
    stream: StreamOwned<ClientConnection, Socket>,
}

impl TlsConn {
    /// Connects and completes the handshake (a server refusing the client
    /// shows up here or on the first read, as TLS 1.3 reports client
    /// certificate errors after the client's handshake finishes).
    pub fn connect(addr: &str, opts: &ClientOpts<'_>) -> io::Result<TlsConn> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = RootCertStore::empty();
        if let Some(ca) = opts.ca {
            for cert in CertificateDer::pem_file_iter(ca).map_err(io::Error::other)? {
                roots
                    .add(cert.map_err(io::Error::other)?)
                    .map_err(io::Error::other)?;
            }
        }
        let builder = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(io::Error::other)?
            .with_root_certificates(roots);
        let config = match opts.client {
            Some(files) => {
                let certs = CertificateDer::pem_file_iter(&files.cert)
                    .map_err(io::Error::other)?
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(io::Error::other)?;
                let key = PrivateKeyDer::from_pem_file(&files.key).map_err(io::Error::other)?;
                builder
                    .with_client_auth_cert(certs, key)
                    .map_err(io::Error::other)?
            }
            None => builder.with_no_client_auth(),
        };
        let name = ServerName::try_from(opts.server_name.unwrap_or("127.0.0.1").to_string())
            .map_err(io::Error::other)?;
        let conn = ClientConnection::new(Arc::new(config), name).map_err(io::Error::other)?;
        // `ip:port` or `unix:/path` (TLS over a unix-socket listener).
        let sock = Socket::connect(addr, Duration::from_secs(5))?;
        sock.set_read_timeout(Some(Duration::from_secs(5)))?;
        sock.set_write_timeout(Some(Duration::from_secs(5)))?;
        let mut stream = StreamOwned::new(conn, sock);
        while stream.conn.is_handshaking() {
            stream.conn.complete_io(&mut stream.sock)?;
        }
        Ok(TlsConn { stream })
    }

    /// The certificate the server presented (DER).
    pub fn peer_cert(&self) -> Option<Vec<u8>> {
        self.stream
            .conn
            .peer_certificates()
            .and_then(|c| c.first())
            .map(|c| c.as_ref().to_vec())
    }

    /// Sends `req` and reads until the reply ends with `until` (e.g.
    /// `b"END\r\n"`, `b"STORED\r\n"`).
    pub fn request(&mut self, req: &[u8], until: &[u8]) -> io::Result<Vec<u8>> {
        self.send(req)?;
        self.read_until(|got| got.ends_with(until))
    }

    pub fn send(&mut self, req: &[u8]) -> io::Result<()> {
        self.stream.write_all(req)?;
        self.stream.flush()
    }

    /// Reads until `done(everything read so far)`; at most 10 s.
    pub fn read_until(&mut self, done: impl Fn(&[u8]) -> bool) -> io::Result<Vec<u8>> {
        self.read_paced(done, Duration::ZERO)
    }

    /// Like `read_until`, sleeping `pause` after each read: a slow reader,
    /// which keeps the server's socket buffer full.
    pub fn read_paced(
        &mut self,
        done: impl Fn(&[u8]) -> bool,
        pause: Duration,
    ) -> io::Result<Vec<u8>> {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut out = Vec::new();
        let mut chunk = [0u8; 64 * 1024];
        while !done(&out) {
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no complete reply after {} bytes", out.len()),
                ));
            }
            match self.stream.read(&mut chunk) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("closed after {} bytes", out.len()),
                    ))
                }
                Ok(n) => {
                    out.extend_from_slice(&chunk[..n]);
                    if !pause.is_zero() {
                        sleep(pause);
                    }
                }
                Err(e)
                    if e.kind() == io::ErrorKind::WouldBlock
                        || e.kind() == io::ErrorKind::TimedOut =>
                {
                    continue
                }
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// `request` as a lossy string.
    pub fn request_str(&mut self, req: &[u8], until: &[u8]) -> io::Result<String> {
        self.request(req, until)
            .map(|r| String::from_utf8_lossy(&r).into_owned())
    }
}

/// Waits until something accepts TCP connections on `addr`.
pub fn wait_for_port(addr: &str, timeout: Duration) -> bool {
    let Ok(sock) = addr.parse::<SocketAddr>() else {
        return false;
    };
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if TcpStream::connect_timeout(&sock, Duration::from_millis(200)).is_ok() {
            return true;
        }
        sleep(Duration::from_millis(20));
    }
    false
}

// ---------------------------------------------------------------------------
// redis-server over TLS

/// A `redis-server` that only speaks TLS (`--port 0 --tls-port N`).
pub struct TlsRedis {
    port: u16,
    dir: TempDir,
    child: Option<Child>,
    /// A client certificate the server accepts (from its CA).
    pub client: CertFiles,
    ca: PathBuf,
}

impl TlsRedis {
    /// Starts with a server certificate for `127.0.0.1`/`localhost` from
    /// `pki`; `auth_clients` is `yes`, `optional` or `no`.
    pub fn start(pki: &Pki, auth_clients: &str) -> TlsRedis {
        let server = pki.issue(
            &format!("redis-{}", free_port()),
            &["127.0.0.1", "localhost"],
        );
        let client = pki.issue(&format!("redis-client-{}", free_port()), &["memshift"]);
        let mut last = String::new();
        for _ in 0..5 {
            match Self::try_start(free_port(), pki, &server, &client, auth_clients) {
                Ok(r) => return r,
                Err(e) => last = e,
            }
        }
        panic!("could not start redis-server with TLS: {last}");
    }

    fn try_start(
        port: u16,
        pki: &Pki,
        server: &CertFiles,
        client: &CertFiles,
        auth_clients: &str,
    ) -> Result<TlsRedis, String> {
        let dir = tempfile::Builder::new()
            .prefix("memshift-redis-tls-")
            .tempdir()
            .map_err(|e| e.to_string())?;
        let log = dir.path().join("redis.log");
        let out = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(|e| e.to_string())?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let mut cmd = Command::new("redis-server");
        cmd.args(["--port", "0"])
            .args(["--tls-port", &port.to_string()])
            .arg("--tls-cert-file")
            .arg(&server.cert)
            .arg("--tls-key-file")
            .arg(&server.key)
            .arg("--tls-ca-cert-file")
            .arg(pki.ca_cert())
            .args(["--tls-auth-clients", auth_clients])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(["--daemonize", "no"])
            .arg("--dir")
            .arg(dir.path())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        #[cfg(target_os = "linux")]
        {
            use std::os::unix::process::CommandExt;
            // SAFETY: prctl is async-signal-safe; nothing else runs in pre_exec.
            unsafe {
                cmd.pre_exec(|| {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                    Ok(())
                });
            }
        }
        let child = cmd
            .spawn()
            .map_err(|e| format!("spawn redis-server: {e}"))?;
        let mut redis = TlsRedis {
            port,
            dir,
            child: Some(child),
            client: client.clone(),
            ca: pki.ca_cert(),
        };
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(c) = redis.child.as_mut() {
                if let Ok(Some(status)) = c.try_wait() {
                    redis.child = None;
                    return Err(format!(
                        "redis-server exited with {status}:\n{}",
                        redis.log()
                    ));
                }
            }
            if redis.ping().is_ok() {
                return Ok(redis);
            }
            if Instant::now() >= deadline {
                return Err(format!("redis-server (TLS) not ready:\n{}", redis.log()));
            }
            sleep(Duration::from_millis(50));
        }
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn log(&self) -> String {
        fs::read(self.dir.path().join("redis.log"))
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    fn connect(&self) -> io::Result<TlsConn> {
        TlsConn::connect(
            &self.addr(),
            &ClientOpts {
                ca: Some(&self.ca),
                client: Some(&self.client),
                server_name: None,
            },
        )
    }

    fn ping(&self) -> io::Result<()> {
        let reply = self.connect()?.request(b"*1\r\n$4\r\nPING\r\n", b"\r\n")?;
        if reply == b"+PONG\r\n" {
            Ok(())
        } else {
            Err(io::Error::other(format!("PING: {reply:?}")))
        }
    }

    /// `DBSIZE` over TLS.
    pub fn dbsize(&self) -> i64 {
        let reply = self
            .connect()
            .and_then(|mut c| c.request(b"*1\r\n$6\r\nDBSIZE\r\n", b"\r\n"))
            .unwrap_or_else(|e| panic!("DBSIZE on {}: {e}", self.addr()));
        let text = String::from_utf8_lossy(&reply);
        text.trim()
            .strip_prefix(':')
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("DBSIZE answered {text:?}"))
    }
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
