//! TCP or unix-domain sockets, behind one type: where a backend is
//! ([`BackendAddr`]: `"host:port"` or `"unix:/path"`) and a connected
//! [`Stream`] (also what the proxy's listeners accept from clients).
//!
//! An enum rather than a trait object: the I/O calls cost one `match`, no
//! allocation, and the halves of a split stream stay owned (no lock).

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{tcp, unix, TcpStream, UnixStream};

use crate::ConnectError;

/// The prefix that makes an address a unix-domain socket path.
pub const UNIX_PREFIX: &str = "unix:";

/// Where a backend listens: `"host:port"` or `"unix:/path/to.sock"`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum BackendAddr {
    /// `host:port`, resolved at each connect.
    Tcp(String),
    /// A unix-domain socket path (the `unix:` prefix stripped).
    Unix(PathBuf),
}

impl BackendAddr {
    /// `"unix:/path"` is a socket path; anything else is `host:port`
    /// (checked by whoever validates the config).
    pub fn parse(s: &str) -> BackendAddr {
        match s.strip_prefix(UNIX_PREFIX) {
            Some(path) => BackendAddr::Unix(PathBuf::from(path)),
            None => BackendAddr::Tcp(s.to_owned()),
        }
    }

    /// The socket path of a unix address.
    pub fn unix_path(&self) -> Option<&Path> {
        match self {
            BackendAddr::Unix(p) => Some(p),
            BackendAddr::Tcp(_) => None,
        }
    }

    /// Connect; TCP connections get `TCP_NODELAY` (requests are small and
    /// already batched by the engine).
    pub async fn connect(&self) -> Result<Stream, ConnectError> {
        match self {
            BackendAddr::Tcp(addr) => {
                let tcp = TcpStream::connect(addr)
                    .await
                    .map_err(ConnectError::Connect)?;
                tcp.set_nodelay(true).map_err(ConnectError::NoDelay)?;
                Ok(Stream::Tcp(tcp))
            }
            BackendAddr::Unix(path) => UnixStream::connect(path)
                .await
                .map(Stream::Unix)
                .map_err(ConnectError::Connect),
        }
    }
}

impl fmt::Display for BackendAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackendAddr::Tcp(a) => f.write_str(a),
            BackendAddr::Unix(p) => write!(f, "{UNIX_PREFIX}{}", p.display()),
        }
    }
}

/// A connected TCP or unix-domain stream.
#[derive(Debug)]
pub enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

/// A connected, non-blocking socket not yet registered with any runtime's
/// I/O driver: the proxy's listeners accept these and the worker thread
/// that serves one [`attach`](Detached::attach)es it to its own runtime.
#[derive(Debug)]
pub enum Detached {
    Tcp(std::net::TcpStream),
    Unix(std::os::unix::net::UnixStream),
}

impl Detached {
    /// Register with the current runtime's I/O driver (call it on the
    /// runtime that will poll the stream).
    pub fn attach(self) -> io::Result<Stream> {
        match self {
            Detached::Tcp(s) => TcpStream::from_std(s).map(Stream::Tcp),
            Detached::Unix(s) => UnixStream::from_std(s).map(Stream::Unix),
        }
    }
}

/// The read half of a split [`Stream`].
#[derive(Debug)]
pub enum ReadHalf {
    Tcp(tcp::OwnedReadHalf),
    Unix(unix::OwnedReadHalf),
}

/// The write half of a split [`Stream`].
#[derive(Debug)]
pub enum WriteHalf {
    Tcp(tcp::OwnedWriteHalf),
    Unix(unix::OwnedWriteHalf),
}

impl Stream {
    /// Owned halves, for a task that reads and writes independently.
    pub fn into_split(self) -> (ReadHalf, WriteHalf) {
        match self {
            Stream::Tcp(s) => {
                let (r, w) = s.into_split();
                (ReadHalf::Tcp(r), WriteHalf::Tcp(w))
            }
            Stream::Unix(s) => {
                let (r, w) = s.into_split();
                (ReadHalf::Unix(r), WriteHalf::Unix(w))
            }
        }
    }
}

/// `AsyncRead`, passed to whichever socket the enum holds.
macro_rules! delegate_read {
    ($ty:ident) => {
        impl AsyncRead for $ty {
            fn poll_read(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &mut ReadBuf<'_>,
            ) -> Poll<io::Result<()>> {
                match self.get_mut() {
                    $ty::Tcp(s) => Pin::new(s).poll_read(cx, buf),
                    $ty::Unix(s) => Pin::new(s).poll_read(cx, buf),
                }
            }
        }
    };
}

/// `AsyncWrite`, passed to whichever socket the enum holds.
macro_rules! delegate_write {
    ($ty:ident) => {
        impl AsyncWrite for $ty {
            fn poll_write(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &[u8],
            ) -> Poll<io::Result<usize>> {
                match self.get_mut() {
                    $ty::Tcp(s) => Pin::new(s).poll_write(cx, buf),
                    $ty::Unix(s) => Pin::new(s).poll_write(cx, buf),
                }
            }

            fn poll_write_vectored(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                bufs: &[io::IoSlice<'_>],
            ) -> Poll<io::Result<usize>> {
                match self.get_mut() {
                    $ty::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
                    $ty::Unix(s) => Pin::new(s).poll_write_vectored(cx, bufs),
                }
            }

            fn is_write_vectored(&self) -> bool {
                match self {
                    $ty::Tcp(s) => s.is_write_vectored(),
                    $ty::Unix(s) => s.is_write_vectored(),
                }
            }

            fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                match self.get_mut() {
                    $ty::Tcp(s) => Pin::new(s).poll_flush(cx),
                    $ty::Unix(s) => Pin::new(s).poll_flush(cx),
                }
            }

            fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                match self.get_mut() {
                    $ty::Tcp(s) => Pin::new(s).poll_shutdown(cx),
                    $ty::Unix(s) => Pin::new(s).poll_shutdown(cx),
                }
            }
        }
    };
}

delegate_read!(Stream);
delegate_write!(Stream);
delegate_read!(ReadHalf);
delegate_write!(WriteHalf);

#[cfg(test)]
mod tests {
    use super::*;

    /// Accepted without a runtime, attached on one: it carries bytes both
    /// ways.
    #[test]
    fn an_attached_stream_reads_and_writes() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let mut peer =
            std::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (accepted, _) = listener.accept().expect("accept");
        accepted.set_nonblocking(true).expect("non-blocking");
        let detached = Detached::Tcp(accepted);
        std::io::Write::write_all(&mut peer, b"ping").expect("write");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let mut stream = detached.attach().expect("attach");
            let mut buf = [0u8; 4];
            stream.read_exact(&mut buf).await.expect("read");
            assert_eq!(&buf, b"ping");
            stream.write_all(b"pong").await.expect("write");
        });
        let mut buf = [0u8; 4];
        std::io::Read::read_exact(&mut peer, &mut buf).expect("read");
        assert_eq!(&buf, b"pong");
    }

    #[test]
    fn unix_prefix_makes_a_path_anything_else_is_host_port() {
        assert_eq!(
            BackendAddr::parse("unix:/run/redis.sock"),
            BackendAddr::Unix(PathBuf::from("/run/redis.sock"))
        );
        assert_eq!(
            BackendAddr::parse("127.0.0.1:6379"),
            BackendAddr::Tcp("127.0.0.1:6379".into())
        );
        assert_eq!(
            BackendAddr::parse("unix:/run/redis.sock").to_string(),
            "unix:/run/redis.sock"
        );
    }
}
