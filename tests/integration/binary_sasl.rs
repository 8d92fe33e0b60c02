//! SASL PLAIN on binary connections (`[server] sasl = true`), plain TCP and
//! TLS: memcached's rules (`-S`): before authenticating, only the SASL
//! opcodes and Version are served, anything else gets `Auth failure.`
//! (0x20) and the connection closes; a wrong password gets `Auth
//! failure.`; text connections are closed unanswered (memcached with `-S`
//! binds the binary protocol only). With python-binary-memcached too.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use memshift_tests::process::start_memshift_on_free_ports;
use memshift_tests::tls::{wait_for_port, ClientOpts, Pki, TlsConn};
use memshift_tests::{
    binary_memcached_python, free_port, require_tools, run_with_timeout, Memshift, RedisServer,
};

const USER: &str = "app";
const PASSWORD: &str = "s3cret-pass";

struct SaslProxy {
    _memshift: Memshift,
    addr: String,
    tls_addr: String,
}

fn start(redis: &RedisServer, pki: &Pki) -> SaslProxy {
    let creds = pki.dir().join("sasl.txt");
    std::fs::write(
        &creds,
        format!("# test users\n{USER}:{PASSWORD}\nother:x\n"),
    )
    .unwrap();
    let cert = pki.issue("memshift", &["127.0.0.1"]);
    let mut tls_port = 0;
    let (memshift, _, _) = start_memshift_on_free_ports(|port, admin_port| {
        tls_port = free_port();
        format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\ntls_listen = \"127.0.0.1:{tls_port}\"\n\
             sasl = true\nsasl_credentials_file = \"{}\"\n\n\
             [admin]\nlisten = \"127.0.0.1:{admin_port}\"\n\n\
             [tls]\ncert = \"{}\"\nkey = \"{}\"\n\n\
             [redis]\nshards = [\"{}\"]\n",
            creds.display(),
            cert.cert.display(),
            cert.key.display(),
            redis.addr()
        )
    });
    let tls_addr = format!("127.0.0.1:{tls_port}");
    assert!(
        wait_for_port(&tls_addr, Duration::from_secs(10)),
        "TLS listener never came up"
    );
    assert!(
        !memshift.stderr().contains(PASSWORD),
        "the password shows in memshift's log"
    );
    SaslProxy {
        addr: memshift.addr().to_string(),
        _memshift: memshift,
        tls_addr,
    }
}

fn req(opcode: u8, key: &[u8], extras: &[u8], value: &[u8]) -> Vec<u8> {
    let body = (key.len() + extras.len() + value.len()) as u32;
    let mut out = vec![0x80, opcode];
    out.extend_from_slice(&(key.len() as u16).to_be_bytes());
    out.push(extras.len() as u8);
    out.extend_from_slice(&[0, 0, 0]);
    out.extend_from_slice(&body.to_be_bytes());
    out.extend_from_slice(&0x1234_5678u32.to_be_bytes());
    out.extend_from_slice(&[0; 8]);
    out.extend_from_slice(extras);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
    out
}

fn plain(user: &str, password: &str) -> Vec<u8> {
    req(
        0x21,
        b"PLAIN",
        b"",
        format!("\0{user}\0{password}").as_bytes(),
    )
}

/// A byte stream to memshift (plain or TLS).
trait Wire {
    fn send(&mut self, bytes: &[u8]);
    /// One response: (opcode, status, body); None when the server closed.
    fn response(&mut self) -> Option<(u8, u16, Vec<u8>)>;
}

struct Plain(TcpStream, Vec<u8>);
struct Tls(TlsConn, Vec<u8>);

impl Wire for Plain {
    fn send(&mut self, bytes: &[u8]) {
        self.0.write_all(bytes).unwrap();
    }
    fn response(&mut self) -> Option<(u8, u16, Vec<u8>)> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(r) = take(&mut self.1) {
                return Some(r);
            }
            let mut chunk = [0u8; 4096];
            match self.0.read(&mut chunk) {
                Ok(0) => return None,
                Ok(n) => self.1.extend_from_slice(&chunk[..n]),
                Err(_) if Instant::now() < deadline => {}
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return None,
                Err(e) => panic!("read: {e}"),
            }
        }
    }
}

impl Wire for Tls {
    fn send(&mut self, bytes: &[u8]) {
        self.0.send(bytes).unwrap();
    }
    fn response(&mut self) -> Option<(u8, u16, Vec<u8>)> {
        if let Some(r) = take(&mut self.1) {
            return Some(r);
        }
        let got = self.0.read_until(complete).ok()?;
        self.1.extend_from_slice(&got);
        take(&mut self.1)
    }
}

fn complete(b: &[u8]) -> bool {
    b.len() >= 24 && b.len() >= 24 + u32::from_be_bytes([b[8], b[9], b[10], b[11]]) as usize
}

fn take(buf: &mut Vec<u8>) -> Option<(u8, u16, Vec<u8>)> {
    if !complete(buf) {
        return None;
    }
    let len = 24 + u32::from_be_bytes([buf[8], buf[9], buf[10], buf[11]]) as usize;
    let r = (
        buf[1],
        u16::from_be_bytes([buf[6], buf[7]]),
        buf[24..len].to_vec(),
    );
    buf.drain(..len);
    Some(r)
}

fn plain_conn(addr: &str) -> Plain {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    Plain(s, Vec::new())
}

fn tls_conn(addr: &str, ca: &Path) -> Tls {
    let opts = ClientOpts {
        ca: Some(ca),
        ..ClientOpts::default()
    };
    Tls(
        TlsConn::connect(addr, &opts).expect("TLS handshake"),
        Vec::new(),
    )
}

/// The whole SASL story on one kind of connection.
fn check_sasl(mut connect: impl FnMut() -> Box<dyn Wire>) {
    // Unauthenticated: Version is served, a get is refused and closes.
    let mut c = connect();
    c.send(&req(0x0b, b"", b"", b""));
    let (op, status, _) = c.response().expect("version answered");
    assert_eq!((op, status), (0x0b, 0));
    c.send(&req(0x00, b"k", b"", b""));
    assert_eq!(c.response(), Some((0x00, 0x20, b"Auth failure.".to_vec())));
    assert_eq!(c.response(), None, "connection closed after the auth error");

    // List mechanisms, then a wrong password: Auth failure, still open,
    // still refusing.
    let mut c = connect();
    c.send(&req(0x20, b"", b"", b""));
    assert_eq!(c.response(), Some((0x20, 0, b"PLAIN".to_vec())));
    c.send(&plain(USER, "wrong"));
    assert_eq!(c.response(), Some((0x21, 0x20, b"Auth failure.".to_vec())));
    c.send(&plain("nobody", PASSWORD));
    assert_eq!(c.response(), Some((0x21, 0x20, b"Auth failure.".to_vec())));
    c.send(&req(0x01, b"k", &[0; 8], b"v"));
    assert_eq!(c.response(), Some((0x01, 0x20, b"Auth failure.".to_vec())));
    assert_eq!(c.response(), None);

    // The right password: served.
    let mut c = connect();
    c.send(&plain(USER, PASSWORD));
    assert_eq!(c.response(), Some((0x21, 0, b"Authenticated".to_vec())));
    c.send(&req(0x01, b"sasl:k", &[0, 0, 0, 9, 0, 0, 0, 0], b"hello"));
    let (_, status, _) = c.response().expect("set answered");
    assert_eq!(status, 0);
    c.send(&req(0x00, b"sasl:k", b"", b""));
    assert_eq!(
        c.response(),
        Some((0x00, 0, [&[0, 0, 0, 9][..], b"hello"].concat()))
    );
}

#[test]
fn sasl_plain_and_tls() {
    if !require_tools("sasl_plain_and_tls", &["redis-server"]) {
        return;
    }
    let redis = RedisServer::start();
    let pki = Pki::new("sasl");
    let proxy = start(&redis, &pki);
    let addr = proxy.addr.clone();
    check_sasl(|| Box::new(plain_conn(&addr)));
    let (tls_addr, ca) = (proxy.tls_addr.clone(), pki.ca_cert());
    check_sasl(|| Box::new(tls_conn(&tls_addr, &ca)));

    // A text connection is closed unanswered (memcached -S: binary only).
    let mut c = plain_conn(&addr);
    c.send(b"get k\r\n");
    assert_eq!(c.response(), None);
    assert!(c.1.is_empty(), "text connection got {:?}", c.1);
}

#[test]
fn sasl_with_python_binary_memcached() {
    if !require_tools(
        "sasl_with_python_binary_memcached",
        &["python3", "redis-server"],
    ) {
        return;
    }
    let python = binary_memcached_python();
    let redis = RedisServer::start();
    let pki = Pki::new("sasl-py");
    let proxy = start(&redis, &pki);
    let script = r#"
import sys, bmemcached
from bmemcached.exceptions import MemcachedException
addr, user, password = sys.argv[1], sys.argv[2], sys.argv[3]
c = bmemcached.Client((addr,), user, password, socket_timeout=5)
print("set", c.set("py:k", "v"))
print("get", c.get("py:k"))
bad = bmemcached.Client((addr,), user, "wrong", socket_timeout=5)
try:
    bad.get("py:k")
    print("wrong password: served")
except MemcachedException as e:
    # memcached's Auth Error is 0x20 (python-binary-memcached expects 0x08
    # for InvalidCredentials, so it reports the raw code).
    print("wrong password:", e.args[1], e.args[0])
"#;
    let mut cmd = Command::new(python);
    cmd.args(["-c", script, &proxy.addr, USER, PASSWORD]);
    let out = run_with_timeout(cmd, Duration::from_secs(60)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        out.stdout, "set True\nget v\nwrong password: 32 Code: 32 Message: b'Auth failure.'\n",
        "stderr:\n{}",
        out.stderr
    );
}
