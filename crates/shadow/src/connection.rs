//! The memcached side of a pipelined connection: the `version` handshake,
//! reply framing by [`ReplyShape`] (one unit, or units until `END`) and the
//! idle ping. Batching, FIFO slots, timeouts and reconnecting are the
//! shared engine's ([`memshift_pipeline`]).

use std::marker::PhantomData;

use bytes::BytesMut;
use memshift_pipeline::transport::{BackendAddr, ReadHalf, WriteHalf};
use memshift_pipeline::{
    BackendError, Codec, ConnectError, Connector, DecodeError, Delivery, Event,
};
use memshift_protocol::memcache::client::{parse_reply, Response};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::reply::{LegacyError, LegacyReply, ReplyShape, ReplyTo, Tagged};

/// Health check request: cheap, answered with one line.
const PING: &[u8] = b"version\r\n";

/// Opens connections to one memcached server.
pub(crate) struct MemcachedConnector<T> {
    pub addr: String,
    pub reply: PhantomData<fn() -> T>,
}

impl<T> Connector for MemcachedConnector<T>
where
    T: Tagged,
{
    type Codec = MemcachedCodec<T>;
    type Reader = ReadHalf;
    type Writer = WriteHalf;

    /// Connect and check that a memcached answers (`version`): a server that
    /// accepts connections but is hung (SIGSTOP, overload) stays down and
    /// its requests fail fast instead of each waiting for the timeout.
    async fn connect(&self) -> Result<(ReadHalf, WriteHalf), ConnectError> {
        // `"unix:/path"`: a memcached on this host (`memcached -s`).
        let mut stream = BackendAddr::parse(&self.addr).connect().await?;
        stream.write_all(PING).await.map_err(ConnectError::Write)?;
        let mut buf = BytesMut::with_capacity(64);
        loop {
            match parse_reply(&buf) {
                Ok(Some((Response::Version(_), used))) if used == buf.len() => {
                    return Ok(stream.into_split())
                }
                Ok(Some(_)) => {
                    return Err(ConnectError::Handshake(
                        "unexpected reply to version".to_string(),
                    ))
                }
                Ok(None) => {}
                Err(e) => return Err(ConnectError::Handshake(e.to_string())),
            }
            match stream.read_buf(&mut buf).await {
                Ok(0) => return Err(ConnectError::Closed),
                Ok(_) => {}
                Err(e) => return Err(ConnectError::Read(e)),
            }
        }
    }

    fn codec(&self) -> MemcachedCodec<T> {
        MemcachedCodec {
            parsed: 0,
            reply: PhantomData,
        }
    }

    fn event(&self, event: Event<'_>) {
        match event {
            Event::Connected { after_outage: true } => {
                tracing::info!(server = %self.addr, "memcached server reconnected")
            }
            Event::Unreachable { why, first: true } => {
                tracing::warn!(server = %self.addr, reason = %why, "memcached server unreachable")
            }
            Event::Lost { why, .. } => {
                tracing::warn!(server = %self.addr, reason = %why, "memcached connection lost")
            }
            _ => {}
        }
    }
}

/// Reply framing for the request at the front of the FIFO.
pub(crate) struct MemcachedCodec<T> {
    /// Bytes at the front of the read buffer already parsed as units of the
    /// front reply.
    parsed: usize,
    reply: PhantomData<fn() -> T>,
}

impl<T> Codec for MemcachedCodec<T>
where
    T: Tagged,
{
    type Expect = ReplyShape;
    type Caller = ReplyTo<T>;
    type Reply = LegacyReply;

    fn decode(
        &mut self,
        buf: &mut BytesMut,
        shape: ReplyShape,
    ) -> Result<Option<LegacyReply>, DecodeError> {
        loop {
            let rest = buf.get(self.parsed..).unwrap_or_default();
            if rest.is_empty() {
                return Ok(None);
            }
            let (is_item, used) = match parse_reply(rest) {
                Ok(Some((unit, used))) => (
                    matches!(
                        unit,
                        Response::Value { .. } | Response::Stat { .. } | Response::Metadump(_)
                    ),
                    used,
                ),
                Ok(None) => return Ok(None),
                Err(e) => return Err(DecodeError::Malformed(Box::new(e))),
            };
            let complete = match shape {
                ReplyShape::Single if is_item => {
                    return Err(DecodeError::Unexpected(
                        "multi-line reply to a single-reply request",
                    ))
                }
                ReplyShape::Single => true,
                // END, or an error line that cuts the reply short.
                ReplyShape::UntilEnd => !is_item,
            };
            self.parsed += used;
            if complete {
                let raw = buf.split_to(self.parsed).freeze();
                self.parsed = 0;
                return Ok(Some(LegacyReply::from_raw(raw)));
            }
        }
    }

    fn deliver(&mut self, caller: ReplyTo<T>, reply: LegacyReply) -> Delivery<ReplyTo<T>> {
        caller.send(Ok(reply));
        Delivery::Done
    }

    fn fail(caller: ReplyTo<T>, err: BackendError) {
        caller.send(Err(LegacyError::Backend(err)));
    }

    /// Never asked for: memcached replies never ask for a re-send.
    fn resend_preamble(&mut self, _out: &mut BytesMut) -> (usize, ReplyShape) {
        (0, ReplyShape::Single)
    }

    fn idle_ping(&self) -> Option<(&'static [u8], ReplyShape)> {
        Some((PING, ReplyShape::Single))
    }
}
