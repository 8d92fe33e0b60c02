//! What a backend plugs into the engine.

use std::future::Future;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::error::{BackendError, Broken, ConnectError, DecodeError};

/// One request: bytes the caller encoded (exactly one command, one reply),
/// how its reply is framed, and where the reply goes.
pub struct Request<C: Codec> {
    pub bytes: Bytes,
    pub expect: C::Expect,
    pub caller: C::Caller,
}

impl<C: Codec> std::fmt::Debug for Request<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request")
            .field("bytes", &self.bytes.len())
            .finish_non_exhaustive()
    }
}

/// What the engine does with a request once its reply was handed over.
pub enum Delivery<Caller> {
    Done,
    /// Send the request again, after [`Codec::resend_preamble`] (Redis'
    /// `NOSCRIPT`: load the scripts, then retry).
    Resend(Caller),
}

/// A backend's reply framing and delivery. One value per connection
/// ([`Connector::codec`]), so decode state never outlives a connection.
pub trait Codec: Send + 'static {
    /// How to find the end of a request's reply (memcached: one unit or
    /// until `END`; Redis: one frame, `()`).
    type Expect: Copy + Send + 'static;
    /// Where a reply goes.
    type Caller: Send + 'static;
    type Reply;

    /// Take the front request's reply off `buf` once it is complete.
    fn decode(
        &mut self,
        buf: &mut BytesMut,
        expect: Self::Expect,
    ) -> Result<Option<Self::Reply>, DecodeError>;

    /// Hand a reply to its caller, or ask for a re-send.
    fn deliver(&mut self, caller: Self::Caller, reply: Self::Reply) -> Delivery<Self::Caller>;

    /// `deliver`, for a codec that needs the request's bytes to act on its
    /// reply (Redis Cluster: re-send a redirected request to another node).
    fn deliver_request(
        &mut self,
        caller: Self::Caller,
        reply: Self::Reply,
        _bytes: &Bytes,
    ) -> Delivery<Self::Caller> {
        self.deliver(caller, reply)
    }

    /// Answer a caller with no reply.
    fn fail(caller: Self::Caller, err: BackendError);

    /// Write what goes before a re-sent request; returns how many replies
    /// it asks for (they are discarded) and how they are framed.
    fn resend_preamble(&mut self, out: &mut BytesMut) -> (usize, Self::Expect);

    /// A cheap request an idle connection sends now and then to notice a
    /// server that hung or vanished silently; `None`: never.
    fn idle_ping(&self) -> Option<(&'static [u8], Self::Expect)> {
        None
    }
}

/// Opens a backend's connections and hears what happens to them.
pub trait Connector: Send + Sync + 'static {
    type Codec: Codec;
    type Reader: AsyncRead + Unpin + Send + 'static;
    type Writer: AsyncWrite + Unpin + Send + 'static;

    /// Open a connection and run its handshake; the engine bounds it with
    /// the connect timeout.
    fn connect(
        &self,
    ) -> impl Future<Output = Result<(Self::Reader, Self::Writer), ConnectError>> + Send;

    /// Decode state for a new connection.
    fn codec(&self) -> Self::Codec;

    /// For logs and metrics.
    fn event(&self, event: Event<'_>);

    /// Resolves once the backend moved away from where the last connect
    /// attempt went (a Sentinel failover): the connection is closed (its
    /// requests in flight fail, none is re-sent) and the next attempt is
    /// made at once. Default: never.
    fn moved(&self) -> impl Future<Output = ()> + Send {
        std::future::pending()
    }
}

/// What happened to a connection.
#[derive(Debug)]
pub enum Event<'a> {
    /// Connected; `after_outage` when an earlier attempt failed or an
    /// earlier connection broke.
    Connected { after_outage: bool },
    /// A connect attempt failed; `first` for the first since the last
    /// connection.
    Unreachable { why: &'a ConnectError, first: bool },
    /// The connection broke; `failed` requests in flight got an error.
    Lost { why: &'a Broken, failed: usize },
    /// A request was refused because the connection is down.
    RefusedWhileDown,
    /// Every sender is gone and everything in flight was answered.
    Stopped,
}
