//! A blocking client socket over TCP (`"ip:port"`) or a unix-domain socket
//! (`"unix:/path"`, memshift's listener spelling), so every test client can
//! run over either transport.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// A connected TCP or unix-domain stream.
#[derive(Debug)]
pub enum Socket {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Socket {
    /// Connects to `"ip:port"` or `"unix:/path"`; `timeout` bounds a TCP
    /// connect (a unix connect does not wait).
    pub fn connect(addr: &str, timeout: Duration) -> io::Result<Socket> {
        if let Some(path) = addr.strip_prefix("unix:") {
            return UnixStream::connect(path).map(Socket::Unix);
        }
        let sock: SocketAddr = addr
            .parse()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{addr}: {e}")))?;
        let tcp = TcpStream::connect_timeout(&sock, timeout)?;
        tcp.set_nodelay(true)?;
        Ok(Socket::Tcp(tcp))
    }

    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            Socket::Tcp(s) => s.set_read_timeout(timeout),
            Socket::Unix(s) => s.set_read_timeout(timeout),
        }
    }

    pub fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            Socket::Tcp(s) => s.set_write_timeout(timeout),
            Socket::Unix(s) => s.set_write_timeout(timeout),
        }
    }

    /// A second handle on the same socket (e.g. for a writer thread).
    pub fn try_clone(&self) -> io::Result<Socket> {
        Ok(match self {
            Socket::Tcp(s) => Socket::Tcp(s.try_clone()?),
            Socket::Unix(s) => Socket::Unix(s.try_clone()?),
        })
    }

    pub fn shutdown(&self, how: std::net::Shutdown) -> io::Result<()> {
        match self {
            Socket::Tcp(s) => s.shutdown(how),
            Socket::Unix(s) => s.shutdown(how),
        }
    }
}

impl Read for Socket {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Socket::Tcp(s) => s.read(buf),
            Socket::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Socket {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Socket::Tcp(s) => s.write(buf),
            Socket::Unix(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Socket::Tcp(s) => s.flush(),
            Socket::Unix(s) => s.flush(),
        }
    }
}

/// A TCP port on 127.0.0.1 that relays every connection to the unix socket
/// at `path`, byte for byte, with end-of-stream passed on both ways: for
/// clients that cannot speak to a unix socket (memccapable). The relay's
/// threads live as long as the test process.
pub fn tcp_relay_to(path: &std::path::Path) -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the relay");
    let port = listener.local_addr().expect("relay address").port();
    let path = path.to_owned();
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let Ok(server) = UnixStream::connect(&path) else {
                continue;
            };
            let _ = client.set_nodelay(true);
            let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) else {
                continue;
            };
            pipe(Socket::Tcp(client), Socket::Unix(s2));
            pipe(Socket::Unix(server), Socket::Tcp(c2));
        }
    });
    port
}

/// Copy `from` into `to` on a thread until end of stream, then shut `to`'s
/// write side.
fn pipe(mut from: Socket, mut to: Socket) {
    std::thread::spawn(move || {
        let _ = io::copy(&mut from, &mut to);
        let _ = to.shutdown(std::net::Shutdown::Write);
    });
}
