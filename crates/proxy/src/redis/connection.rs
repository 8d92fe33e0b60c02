//! The Redis side of a pipelined shard connection: connecting (TLS,
//! `AUTH`, `SCRIPT LOAD`), reply framing (one RESP frame per request),
//! `NOSCRIPT` (load the scripts, re-send), and the shard's logs and metrics.
//! Batching, FIFO slots, timeouts and reconnecting are the shared engine's
//! ([`memshift_pipeline`]).

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use memshift_pipeline::transport::{self, BackendAddr};
use memshift_pipeline::{
    BackendError, Broken, Codec, ConnectError, Connector, DecodeError, Delivery, Event,
};
use memshift_protocol::resp::{encode_command, Frame, ReplyParser};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

use super::primary::Primary;
use super::redirect::{Hook, Redirect};
use super::{scripts, translate, Routed};
use crate::metrics::{ErrorKind, ShardMetrics};
use crate::tls::ShardTls;

/// What a connection needs to know about its shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionSettings {
    pub addr: String,
    pub username: Option<String>,
    pub password: Option<String>,
    pub timeout: Duration,
    pub connect_timeout: Duration,
    /// `redis.tls`: the client config and the name the shard's certificate
    /// must carry; `None` is plaintext.
    pub tls: Option<ShardTls>,
    /// A Sentinel master: connections go to its current primary (`addr`
    /// is empty), and a connect confirms the `ROLE` is master.
    pub primary: Option<Arc<Primary>>,
}

impl ConnectionSettings {
    /// Where a connection goes now: the current primary, else `addr`.
    pub fn target(&self) -> Arc<str> {
        match &self.primary {
            Some(p) => p.current(),
            None => Arc::from(self.addr.as_str()),
        }
    }

    /// The shard in logs: its master name, else its address.
    pub fn label(&self) -> &str {
        match &self.primary {
            Some(p) => p.master(),
            None => &self.addr,
        }
    }

    /// Resolves once a connection to `target` is one to the wrong server
    /// (the master's primary moved); never for a fixed address.
    pub fn moved_from(&self, target: Arc<str>) -> impl std::future::Future<Output = ()> + Send {
        let primary = self.primary.clone();
        async move {
            match primary {
                Some(p) => p.moved_from(&target).await,
                None => std::future::pending().await,
            }
        }
    }

    pub(super) fn engine(&self) -> memshift_pipeline::Settings {
        memshift_pipeline::Settings {
            timeout: self.timeout,
            connect_timeout: self.connect_timeout,
        }
    }
}

/// Opens connections to one shard.
pub(super) struct RedisConnector {
    pub settings: ConnectionSettings,
    pub metrics: ShardMetrics,
    /// Cluster mode: where redirected requests go.
    pub cluster: Hook,
    /// Where the last connect attempt went (a Sentinel primary may move).
    pub last_target: Mutex<Arc<str>>,
    /// A replica connection (`super::replica`): reads only, no `ROLE` check.
    pub replica: bool,
}

impl Connector for RedisConnector {
    type Codec = RedisCodec;
    type Reader = ShardReader;
    type Writer = ShardWriter;

    /// Open, authenticate and load the scripts. A Sentinel primary that
    /// moves meanwhile (a handshake stuck on a paused primary) ends the
    /// attempt at once: the next one goes to the new primary.
    async fn connect(&self) -> Result<(ShardReader, ShardWriter), ConnectError> {
        let target = self.settings.target();
        *self
            .last_target
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = target.clone();
        tokio::select! {
            connected = self.handshake(&target) => connected,
            () = self.settings.moved_from(target.clone()) => {
                Err(ConnectError::Handshake(format!("{target}: the primary moved (Sentinel)")))
            }
        }
    }
    fn codec(&self) -> RedisCodec {
        RedisCodec {
            parser: ReplyParser::new(),
            metrics: self.metrics.clone(),
            cluster: self.cluster.clone(),
            addr: self.settings.addr.clone(),
            before: 0,
            refused: None,
        }
    }

    fn moved(&self) -> impl std::future::Future<Output = ()> + Send {
        let target = self
            .last_target
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        self.settings.moved_from(target)
    }

    fn event(&self, event: Event<'_>) {
        let addr = self.settings.label();
        match event {
            Event::Connected { .. } => {
                self.metrics.set_up(true);
                let target = self
                    .last_target
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clone();
                tracing::info!(shard = %addr, addr = %target, "redis shard connected");
            }
            Event::Unreachable { why, first } => {
                self.cluster_node_down();
                self.metrics.set_up(false);
                self.metrics.error(ErrorKind::Connection);
                if first {
                    tracing::warn!(shard = %addr, reason = %why, "redis shard unreachable");
                }
            }
            Event::Lost { why, failed } => {
                self.cluster_node_down();
                self.metrics.set_up(false);
                if let Broken::Protocol(_) = why {
                    self.metrics.error(ErrorKind::Protocol);
                }
                if failed > 0 {
                    self.metrics.error(match why.request_error() {
                        BackendError::Timeout => ErrorKind::Timeout,
                        _ => ErrorKind::Connection,
                    });
                }
                tracing::warn!(shard = %addr, reason = %why, "redis shard connection lost");
            }
            Event::RefusedWhileDown => self.metrics.error(ErrorKind::Connection),
            Event::Stopped => self.metrics.set_up(false),
        }
    }
}

impl RedisConnector {
    /// Connect to `target`, authenticate, load the scripts, and check a
    /// Sentinel primary's `ROLE`.
    async fn handshake(&self, target: &str) -> Result<(ShardReader, ShardWriter), ConnectError> {
        let settings = &self.settings;
        let mut stream = open_stream(settings, target).await?;
        let mut out = BytesMut::new();
        let mut expected = 0usize;
        if let Some(password) = &settings.password {
            match &settings.username {
                Some(user) => {
                    encode_command(&mut out, &[b"AUTH", user.as_bytes(), password.as_bytes()])
                }
                None => encode_command(&mut out, &[b"AUTH", password.as_bytes()]),
            }
            expected += 1;
        }
        expected += load_scripts(&mut out);
        // Last, so its reply is the last one read: never serve a replica.
        let check_role = settings.primary.is_some() && !self.replica;
        if check_role {
            encode_command(&mut out, &[b"ROLE"]);
            expected += 1;
        }
        stream.write_all(&out).await.map_err(ConnectError::Write)?;
        stream.flush().await.map_err(ConnectError::Write)?;
        let mut parser = ReplyParser::new();
        let mut buf = BytesMut::with_capacity(4096);
        let mut answered = 0;
        let mut refused = None;
        let mut last = None;
        while answered < expected {
            match parser.parse(&mut buf) {
                Ok(Some(frame)) => {
                    answered += 1;
                    if let (Frame::Error(e), None) = (&frame, &refused) {
                        refused = Some(String::from_utf8_lossy(e).into_owned());
                    }
                    last = Some(frame);
                }
                Ok(None) => {
                    let n = stream
                        .read_buf(&mut buf)
                        .await
                        .map_err(ConnectError::Read)?;
                    if n == 0 {
                        return Err(ConnectError::Closed);
                    }
                }
                Err(e) => return Err(ConnectError::Handshake(e.to_string())),
            }
        }
        if let Some(e) = refused {
            return Err(ConnectError::Handshake(e));
        }
        if check_role && !last.as_ref().is_some_and(is_master_role) {
            // Sentinel has not switched yet (or we asked too early): the
            // address is re-read from the sentinels within a second.
            return Err(ConnectError::Handshake(format!(
                "{target} is not a primary (ROLE); waiting for Sentinel's switch"
            )));
        }
        Ok(stream.into_split())
    }
    /// Cluster mode: a node's connection failed; it may have failed over,
    /// so the map is read again soon (not only at the next period).
    fn cluster_node_down(&self) {
        if let Some(cluster) = self.cluster.as_ref().and_then(std::sync::Weak::upgrade) {
            cluster.node_down();
        }
    }
}

/// `ROLE`'s reply names a master: `*3 $6 master …`.
fn is_master_role(frame: &Frame) -> bool {
    matches!(frame, Frame::Array(items) if matches!(items.first(), Some(Frame::Bulk(r)) if &r[..] == b"master"))
}

/// A connected socket to the shard at `addr` (TLS handshake done, nothing sent).
pub(crate) async fn open_stream(
    settings: &ConnectionSettings,
    addr: &str,
) -> Result<ShardStream, ConnectError> {
    // `"unix:/path"`: a Redis on this host (`unixsocket` in redis.conf).
    let stream = BackendAddr::parse(addr).connect().await?;
    Ok(match (&settings.tls, stream) {
        (None, stream) => ShardStream::Plain(stream),
        (Some(tls), transport::Stream::Tcp(tcp)) => ShardStream::Tls(Box::new(
            crate::tls::connect_shard(tls, tcp)
                .await
                .map_err(ConnectError::Tls)?,
        )),
        // Refused by config validation; kept as an error, not a panic.
        (Some(_), transport::Stream::Unix(_)) => {
            return Err(ConnectError::Tls(
                "redis.tls: not supported for a unix: shard".into(),
            ))
        }
    })
}

/// `SCRIPT LOAD` of every script; returns how many replies that asks for.
fn load_scripts(out: &mut BytesMut) -> usize {
    for script in scripts::all() {
        encode_command(out, &[b"SCRIPT", b"LOAD", script.body.as_bytes()]);
    }
    scripts::all().len()
}

/// One RESP frame per request (two for a request sent after a cluster's
/// `-ASK`: the `ASKING` reply first, dropped).
pub(super) struct RedisCodec {
    parser: ReplyParser,
    metrics: ShardMetrics,
    cluster: Hook,
    /// This connection's node, for retries on it.
    addr: String,
    /// Replies of the front request read before its answer.
    before: u8,
    /// The first of them that was an error (a transaction's refused step).
    refused: Option<Frame>,
}

/// What comes back for one request: its answer, after the replies
/// [`RedisCodec::decode`] reads and drops first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Expect {
    /// `ASKING`'s reply comes first (a request sent after a cluster's
    /// `-ASK`).
    asking: bool,
    /// Then a transaction's status replies (`translate::fill_read`).
    statuses: u8,
}

impl Expect {
    pub(crate) const PLAIN: Expect = Expect {
        asking: false,
        statuses: 0,
    };

    /// For `request` (its bytes start with `ASKING` when `asking`).
    pub(crate) fn of(request: &[u8], asking: bool) -> Expect {
        let command = match asking {
            true => request
                .get(super::cluster::ASKING.len()..)
                .unwrap_or_default(),
            false => request,
        };
        Expect {
            asking,
            statuses: translate::statuses_before_answer(command),
        }
    }
}

impl Codec for RedisCodec {
    type Expect = Expect;
    type Caller = Routed;
    type Reply = Frame;

    /// A request's answer is its last reply. `ASKING`'s reply before it is
    /// dropped; a transaction answers as one command would: with its first
    /// refused step (a status reply that is an error: `-MOVED` in a
    /// cluster, say, before EXEC's `-EXECABORT`), else with the first error
    /// EXEC's array holds (GET's `-WRONGTYPE`), else with that array.
    fn decode(&mut self, buf: &mut BytesMut, expect: Expect) -> Result<Option<Frame>, DecodeError> {
        let asking = u8::from(expect.asking);
        loop {
            let frame = self
                .parser
                .parse(buf)
                .map_err(|e| DecodeError::Malformed(Box::new(e)))?;
            let Some(frame) = frame else {
                return Ok(None);
            };
            if self.before < asking + expect.statuses {
                let status = self.before >= asking;
                if status && self.refused.is_none() && matches!(frame, Frame::Error(_)) {
                    self.refused = Some(frame);
                }
                self.before += 1;
                continue;
            }
            self.before = 0;
            return Ok(Some(match self.refused.take() {
                Some(refused) => refused,
                None if expect.statuses > 0 => transaction_answer(frame),
                None => frame,
            }));
        }
    }

    fn deliver(&mut self, mut caller: Routed, frame: Frame) -> Delivery<Routed> {
        // The shard lost its scripts (restart, SCRIPT FLUSH): load them and
        // send the command again.
        if matches!(&frame, Frame::Error(e) if e.starts_with(b"NOSCRIPT")) {
            return Delivery::Resend(caller);
        }
        // A replica refused a read (`-LOADING`, `-MASTERDOWN`…): the primary.
        if let (Frame::Error(_), Some(retry)) = (&frame, caller.retry.take()) {
            retry.send(caller);
            return Delivery::Done;
        }
        if matches!(frame, Frame::Error(_)) {
            self.metrics.error(ErrorKind::Server);
        }
        caller.reply.send(Ok(frame));
        Delivery::Done
    }

    fn deliver_request(&mut self, caller: Routed, frame: Frame, bytes: &Bytes) -> Delivery<Routed> {
        if let (Frame::Error(e), Some(cluster)) = (&frame, &self.cluster) {
            if let Some(redirect) = Redirect::parse(e) {
                match cluster.upgrade() {
                    Some(cluster) => cluster.forward(redirect, caller, bytes.clone(), &self.addr),
                    None => caller.reply.send(Err(BackendError::Unavailable)),
                }
                return Delivery::Done;
            }
        }
        self.deliver(caller, frame)
    }

    fn fail(mut caller: Routed, err: BackendError) {
        match caller.retry.take() {
            Some(retry) => retry.send(caller),
            None => caller.reply.send(Err(err)),
        }
    }

    fn resend_preamble(&mut self, out: &mut BytesMut) -> (usize, Expect) {
        (load_scripts(out), Expect::PLAIN)
    }
}

/// EXEC's answer as one command's: the first error among its replies, or
/// the whole array.
fn transaction_answer(exec: Frame) -> Frame {
    let Frame::Array(mut replies) = exec else {
        return exec;
    };
    match replies.iter().position(|r| matches!(r, Frame::Error(_))) {
        Some(i) => replies.swap_remove(i),
        None => Frame::Array(replies),
    }
}

// ---------------------------------------------------------------------------
// the socket: plain TCP or unix (split into owned halves) or TLS (split through
// tokio's lock, uncontended: one task owns both halves)

type TlsStream = tokio_rustls::client::TlsStream<TcpStream>;

/// A plaintext or a TLS stream (or one half of either): the I/O calls are
/// passed to whichever it is.
pub(crate) enum Either<P, T> {
    Plain(P),
    Tls(T),
}

pub(crate) type ShardStream = Either<transport::Stream, Box<TlsStream>>;
pub(crate) type ShardReader = Either<transport::ReadHalf, tokio::io::ReadHalf<TlsStream>>;
pub(crate) type ShardWriter = Either<transport::WriteHalf, tokio::io::WriteHalf<TlsStream>>;

impl ShardStream {
    pub(crate) fn into_split(self) -> (ShardReader, ShardWriter) {
        match self {
            Either::Plain(s) => {
                let (r, w) = s.into_split();
                (Either::Plain(r), Either::Plain(w))
            }
            Either::Tls(s) => {
                let (r, w) = tokio::io::split(*s);
                (Either::Tls(r), Either::Tls(w))
            }
        }
    }
}

impl<P, T> AsyncRead for Either<P, T>
where
    P: AsyncRead + Unpin,
    T: AsyncRead + Unpin,
{
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Either::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Either::Tls(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl<P, T> AsyncWrite for Either<P, T>
where
    P: AsyncWrite + Unpin,
    T: AsyncWrite + Unpin,
{
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Either::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Either::Tls(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Either::Plain(s) => Pin::new(s).poll_flush(cx),
            Either::Tls(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Either::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Either::Tls(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{Backend, Metrics};

    fn codec() -> RedisCodec {
        RedisCodec {
            parser: ReplyParser::new(),
            metrics: Metrics::new().shard(Backend::Redis, "test"),
            cluster: None,
            addr: "127.0.0.1:6379".into(),
            before: 0,
            refused: None,
        }
    }

    fn fill(asking: bool) -> (Bytes, Expect) {
        let mut buf = BytesMut::new();
        if asking {
            buf.extend_from_slice(super::super::cluster::ASKING);
        }
        translate::fill_read(&mut buf, b"k");
        let bytes = buf.freeze();
        let expect = Expect::of(&bytes, asking);
        (bytes, expect)
    }

    /// Every answer `replies` holds for requests expecting `expects`, fed
    /// one byte at a time (a reply split across reads).
    fn answers(replies: &[u8], expects: &[Expect]) -> Vec<Frame> {
        let mut codec = codec();
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        for &b in replies {
            buf.extend_from_slice(&[b]);
            while let Some(&expect) = expects.get(out.len()) {
                match codec.decode(&mut buf, expect).expect("well-formed") {
                    Some(frame) => out.push(frame),
                    None => break,
                }
            }
        }
        assert!(buf.is_empty());
        out
    }

    #[test]
    fn a_fill_is_a_transaction_and_other_requests_are_plain() {
        let (bytes, expect) = fill(false);
        assert_eq!(
            &bytes[..],
            b"*1\r\n$5\r\nMULTI\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*2\r\n$4\r\nPTTL\r\n$1\r\nk\r\n*1\r\n$4\r\nEXEC\r\n"
        );
        assert_eq!(
            expect,
            Expect {
                asking: false,
                statuses: 3
            }
        );
        assert_eq!(
            fill(true).1,
            Expect {
                asking: true,
                statuses: 3
            }
        );
        let mut get = BytesMut::new();
        translate::get(&mut get, b"MULTI");
        assert_eq!(Expect::of(&get, false), Expect::PLAIN);
    }

    #[test]
    fn a_fill_answers_with_execs_array_between_plain_replies() {
        let (_, fill) = fill(false);
        let got = answers(
            b"$1\r\na\r\n+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n$2\r\nvv\r\n:1500\r\n:7\r\n",
            &[Expect::PLAIN, fill, Expect::PLAIN],
        );
        assert_eq!(
            got,
            vec![
                Frame::Bulk(Bytes::from_static(b"a")),
                Frame::Array(vec![
                    Frame::Bulk(Bytes::from_static(b"vv")),
                    Frame::Integer(1500)
                ]),
                Frame::Integer(7),
            ]
        );
        // A missing key: EXEC's [nil, -2].
        let got = answers(
            b"+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n$-1\r\n:-2\r\n",
            &[fill],
        );
        assert_eq!(
            got,
            vec![Frame::Array(vec![Frame::Null, Frame::Integer(-2)])]
        );
    }

    #[test]
    fn a_fill_answers_as_one_command_when_a_step_fails() {
        let (_, fill) = fill(false);
        let (_, asked) = fill_asking();
        // GET of a list: EXEC's array holds GET's error.
        let got = answers(
            b"+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n-WRONGTYPE Operation against a key holding the wrong kind of value\r\n:-1\r\n",
            &[fill],
        );
        assert_eq!(
            got,
            vec![Frame::Error(Bytes::from_static(
                b"WRONGTYPE Operation against a key holding the wrong kind of value"
            ))]
        );
        // A cluster node that does not own the key: the first refusal, not
        // EXEC's -EXECABORT, so the redirect is followed.
        let moved = b"+OK\r\n-MOVED 12539 127.0.0.1:7001\r\n-MOVED 12539 127.0.0.1:7001\r\n-EXECABORT Transaction discarded because of previous errors.\r\n";
        let want = vec![Frame::Error(Bytes::from_static(
            b"MOVED 12539 127.0.0.1:7001",
        ))];
        assert_eq!(answers(moved, &[fill]), want);
        // After ASKING: its +OK is dropped too.
        let mut asked_replies = b"+OK\r\n".to_vec();
        asked_replies.extend_from_slice(b"+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n$1\r\nv\r\n:-1\r\n");
        assert_eq!(
            answers(&asked_replies, &[asked]),
            vec![Frame::Array(vec![
                Frame::Bulk(Bytes::from_static(b"v")),
                Frame::Integer(-1)
            ])]
        );
        // A refusal of MULTI itself (a replica still loading).
        let loading = b"-LOADING Redis is loading the dataset in memory\r\n-LOADING x\r\n-LOADING x\r\n-LOADING x\r\n";
        assert_eq!(
            answers(loading, &[fill]),
            vec![Frame::Error(Bytes::from_static(
                b"LOADING Redis is loading the dataset in memory"
            ))]
        );
    }

    fn fill_asking() -> (Bytes, Expect) {
        fill(true)
    }
}
