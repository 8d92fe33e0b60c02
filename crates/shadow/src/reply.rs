//! Requests to and replies from the legacy pool, and its errors.

use bytes::Bytes;
use memshift_pipeline::BackendError;
use memshift_protocol::memcache::client::{parse_reply, EncodeError, ReplyError, Response};
use tokio::sync::{mpsc, oneshot};

/// How the connection knows where a reply ends (replies carry no request
/// id: they are matched to requests in FIFO order, so framing must be
/// exact).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyShape {
    /// One reply unit: a status or error line, a number, `VERSION ...`, or a
    /// meta reply (`VA <len> ...` with its data block, `HD`, `EN`, `NF`...).
    /// Storage, delete, touch, incr/decr, flush_all, version, `mg`/`ms`/`md`.
    Single,
    /// Item units (`VALUE` + data, `STAT`, metadump lines) until `END`, or an
    /// error line that ends the reply early. get/gets/gat/gats, stats,
    /// `lru_crawler metadump`.
    UntilEnd,
}

/// The names the proxy's sessions use for the same two shapes.
#[allow(non_upper_case_globals)]
impl ReplyShape {
    /// One line (STORED, DELETED, a number, an error…).
    pub const Line: ReplyShape = ReplyShape::Single;
    /// A meta reply (`VA` + data, `EN`, `HD`…).
    pub const Meta: ReplyShape = ReplyShape::Single;
    /// VALUE blocks until END (get/gets/gat/gats).
    pub const Values: ReplyShape = ReplyShape::UntilEnd;
}

/// Why a request got no reply from the legacy pool.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LegacyError {
    /// No reply from the server: unavailable, timed out, connection lost
    /// or busy (the same errors, reply lines and labels as the Redis side).
    #[error("memcached {0}")]
    Backend(#[from] BackendError),
    #[error("no memcached server #{0}")]
    NoSuchServer(usize),
    /// The request would not be understood as meant (bad key, `noreply`).
    #[error("bad request: {0}")]
    BadRequest(&'static str),
    #[error("bad key: {0}")]
    BadKey(#[from] EncodeError),
    /// The server sent something the parser rejects, or a reply that does
    /// not fit the request.
    #[error("memcached protocol error: {0}")]
    Protocol(String),
    /// The server answered with an error or an unexpected status (the line,
    /// lossily decoded), to one of the typed helpers.
    #[error("memcached answered: {0}")]
    Server(String),
    /// lru_crawler is busy (another metadump is running).
    #[error("memcached lru_crawler busy")]
    CrawlerBusy,
}

impl LegacyError {
    /// Label for `memshift_backend_errors_total{kind}`.
    pub fn kind(&self) -> &'static str {
        match self {
            LegacyError::Backend(e) => e.kind(),
            LegacyError::CrawlerBusy => "busy",
            LegacyError::NoSuchServer(_) | LegacyError::BadRequest(_) | LegacyError::BadKey(_) => {
                "request"
            }
            LegacyError::Protocol(_) => "protocol",
            LegacyError::Server(_) => "server",
        }
    }

    /// The line a client gets for this error.
    pub fn reply_line(&self) -> &'static [u8] {
        match self {
            LegacyError::Backend(e) => e.reply_line(),
            LegacyError::CrawlerBusy => b"SERVER_ERROR backend busy\r\n",
            LegacyError::BadKey(_) | LegacyError::BadRequest(_) => {
                b"CLIENT_ERROR bad command line format\r\n"
            }
            LegacyError::Protocol(_) | LegacyError::Server(_) => b"SERVER_ERROR backend error\r\n",
            LegacyError::NoSuchServer(_) => b"SERVER_ERROR backend unavailable\r\n",
        }
    }
}

impl From<ReplyError> for LegacyError {
    fn from(e: ReplyError) -> Self {
        LegacyError::Protocol(e.to_string())
    }
}

/// One complete reply, exactly as the server sent it (e.g.
/// `VALUE k 0 1\r\na\r\nEND\r\n`): pass it through to a client byte for
/// byte, or read it with the helpers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LegacyReply {
    raw: Bytes,
}

/// An item of a retrieval reply. Fields share the reply's buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueItem {
    pub key: Bytes,
    pub flags: u32,
    pub cas: Option<u64>,
    pub data: Bytes,
}

impl LegacyReply {
    /// Wrap raw reply bytes (tests, or replies built elsewhere).
    pub fn from_raw(raw: Bytes) -> LegacyReply {
        LegacyReply { raw }
    }

    pub fn raw(&self) -> &Bytes {
        &self.raw
    }

    pub fn into_bytes(self) -> Bytes {
        self.raw
    }

    /// The reply's units in order (for a retrieval: each `VALUE`, then
    /// `END`).
    pub fn units(&self) -> Units<'_> {
        Units {
            rest: &self.raw,
            failed: false,
        }
    }

    /// The first unit: the whole reply of a [`ReplyShape::Single`] request.
    pub fn first(&self) -> Result<Response<&[u8]>, LegacyError> {
        match self.units().next() {
            Some(unit) => unit,
            None => Err(LegacyError::Protocol("empty reply".to_string())),
        }
    }

    /// The `VALUE` items of a retrieval reply. Stops at the first unit that
    /// does not parse.
    pub fn items(&self) -> impl Iterator<Item = ValueItem> + '_ {
        self.units()
            .map_while(|unit| unit.ok())
            .filter_map(|unit| match unit {
                Response::Value {
                    key,
                    flags,
                    data,
                    cas,
                } => Some(ValueItem {
                    key: self.raw.slice_ref(key),
                    flags,
                    cas,
                    data: self.raw.slice_ref(data),
                }),
                _ => None,
            })
    }

    /// Error reply (`ERROR`, `CLIENT_ERROR ...`, `SERVER_ERROR ...`) as a
    /// [`LegacyError::Server`], anything else `Ok`.
    pub fn check_error(&self) -> Result<(), LegacyError> {
        let line_end = memchr::memchr(b'\n', &self.raw).unwrap_or(self.raw.len());
        let line = &self.raw[..line_end];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.starts_with(b"ERROR")
            || line.starts_with(b"CLIENT_ERROR")
            || line.starts_with(b"SERVER_ERROR")
        {
            return Err(LegacyError::Server(
                String::from_utf8_lossy(line).into_owned(),
            ));
        }
        Ok(())
    }

    /// The first line, lossily decoded, for error messages.
    pub fn first_line(&self) -> String {
        let line_end = memchr::memchr(b'\n', &self.raw).unwrap_or(self.raw.len());
        let line = &self.raw[..line_end.min(256)];
        String::from_utf8_lossy(line.strip_suffix(b"\r").unwrap_or(line)).into_owned()
    }
}

/// Iterator over the units of a [`LegacyReply`].
#[derive(Debug, Clone)]
pub struct Units<'a> {
    rest: &'a [u8],
    failed: bool,
}

impl<'a> Iterator for Units<'a> {
    type Item = Result<Response<&'a [u8]>, LegacyError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.rest.is_empty() {
            return None;
        }
        match parse_reply(self.rest) {
            Ok(Some((unit, used))) => {
                self.rest = self.rest.get(used..).unwrap_or_default();
                Some(Ok(unit))
            }
            Ok(None) => {
                self.failed = true;
                Some(Err(LegacyError::Protocol("truncated reply".to_string())))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e.into()))
            }
        }
    }
}

/// A reply delivered to a session's channel, tagged like the Redis side's
/// replies: `seq` is the client request, `part` which of its backend
/// requests this answers.
#[derive(Debug)]
pub struct TaggedReply {
    pub seq: u64,
    pub part: u32,
    pub result: Result<LegacyReply, LegacyError>,
}

/// What a session's replies are delivered as (any message type built from
/// a [`TaggedReply`]), and how: into a channel for [`TaggedReply`] itself;
/// the proxy puts them straight into its sessions' mailboxes.
pub trait Tagged: From<TaggedReply> + Send + 'static {
    type Sender: Send + std::fmt::Debug + 'static;
    fn deliver(to: &Self::Sender, reply: Self);
}

impl Tagged for TaggedReply {
    type Sender = mpsc::UnboundedSender<TaggedReply>;

    fn deliver(to: &Self::Sender, reply: Self) {
        let _ = to.send(reply);
    }
}

/// Where a reply goes.
#[derive(Debug)]
pub enum ReplyTo<T: Tagged = TaggedReply> {
    /// A single waiting caller.
    Oneshot(oneshot::Sender<Result<LegacyReply, LegacyError>>),
    /// A session's replies.
    Tagged { tx: T::Sender, seq: u64, part: u32 },
}

impl<T: Tagged> ReplyTo<T> {
    pub fn send(self, result: Result<LegacyReply, LegacyError>) {
        // The receiver may be gone (client disconnected, caller timed out):
        // nothing to do then.
        match self {
            ReplyTo::Oneshot(tx) => {
                let _ = tx.send(result);
            }
            ReplyTo::Tagged { tx, seq, part } => {
                T::deliver(&tx, T::from(TaggedReply { seq, part, result }));
            }
        }
    }
}

/// One request for the legacy pool: its encoded bytes (exactly one command,
/// never `noreply`: its reply could not be matched), the shape of its reply,
/// and where the reply goes.
#[derive(Debug)]
pub struct LegacyRequest<T: Tagged = TaggedReply> {
    pub bytes: Bytes,
    pub shape: ReplyShape,
    pub reply: ReplyTo<T>,
}

impl<T: Tagged> LegacyRequest<T> {
    /// Refuse a request whose first line ends in `noreply` (the server
    /// would not answer it, shifting every later reply onto the wrong
    /// request).
    pub(crate) fn check(&self) -> Result<(), LegacyError> {
        let Some(end) = memchr::memchr(b'\n', &self.bytes) else {
            return Err(LegacyError::BadRequest("request without a line end"));
        };
        let line = &self.bytes[..end];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if is_noreply(line) || is_meta_quiet(line) {
            return Err(LegacyError::BadRequest(
                "noreply requests cannot be pipelined",
            ));
        }
        Ok(())
    }
}

/// A classic command with the optional trailing `noreply`: the last token
/// is `noreply` and there are more tokens than the command needs (so a key
/// named `noreply` is not mistaken for it).
fn is_noreply(line: &[u8]) -> bool {
    if !line.ends_with(b" noreply") {
        return false;
    }
    let mut tokens = line.split(|&b| b == b' ').filter(|t| !t.is_empty());
    let Some(cmd) = tokens.next() else {
        return false;
    };
    // Tokens after the command word when there is no noreply.
    let required = match cmd {
        b"set" | b"add" | b"replace" | b"append" | b"prepend" => 4,
        b"cas" => 5,
        b"incr" | b"decr" | b"touch" => 2,
        b"delete" | b"verbosity" => 1,
        b"flush_all" => 0,
        _ => return false,
    };
    tokens.count() > required
}

/// Meta commands with the `q` (quiet) flag anywhere in their flags.
fn is_meta_quiet(line: &[u8]) -> bool {
    let mut words = line.split(|&b| b == b' ');
    let Some(cmd) = words.next() else {
        return false;
    };
    // Skip the key (and for ms the size); quiet is the bare flag `q`.
    let skip = match cmd {
        b"mg" | b"md" | b"ma" => 1,
        b"ms" => 2,
        b"mn" => 0,
        _ => return false,
    };
    words.skip(skip).any(|w| w == b"q")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(bytes: &'static [u8]) -> LegacyRequest {
        let (tx, _rx) = oneshot::channel();
        LegacyRequest {
            bytes: Bytes::from_static(bytes),
            shape: ReplyShape::Single,
            reply: ReplyTo::Oneshot(tx),
        }
    }

    #[test]
    fn refuses_noreply_and_quiet() {
        assert!(req(b"set k 0 0 1 noreply\r\na\r\n").check().is_err());
        assert!(req(b"delete k noreply\r\n").check().is_err());
        assert!(req(b"mg k v q\r\n").check().is_err());
        assert!(req(b"md k q\r\n").check().is_err());
        assert!(req(b"delete k").check().is_err());
        assert!(req(b"set k 0 0 7\r\nnoreply\r\n").check().is_ok());
        assert!(req(b"get noreply\r\n").check().is_ok());
        assert!(req(b"get a noreply\r\n").check().is_ok());
        assert!(req(b"delete noreply\r\n").check().is_ok());
        assert!(req(b"delete noreply noreply\r\n").check().is_err());
        assert!(req(b"touch k 10 noreply\r\n").check().is_err());
        assert!(req(b"touch noreply 10\r\n").check().is_ok());
        assert!(req(b"incr k 1 noreply\r\n").check().is_err());
        assert!(req(b"flush_all noreply\r\n").check().is_err());
        assert!(req(b"flush_all 0 noreply\r\n").check().is_err());
        assert!(req(b"cas k 0 0 1 noreply\r\nv\r\n").check().is_ok());
        assert!(req(b"cas k 0 0 1 5 noreply\r\nv\r\n").check().is_err());
        assert!(req(b"mg q v\r\n").check().is_ok());
        assert!(req(b"version\r\n").check().is_ok());
    }

    #[test]
    fn items_and_units() {
        let reply = LegacyReply::from_raw(Bytes::from_static(
            b"VALUE a 4294967295 1 7\r\nx\r\nVALUE b 0 0\r\n\r\nEND\r\n",
        ));
        let items: Vec<_> = reply.items().collect();
        assert_eq!(items.len(), 2);
        assert_eq!(items[0].key, Bytes::from_static(b"a"));
        assert_eq!(items[0].flags, u32::MAX);
        assert_eq!(items[0].cas, Some(7));
        assert_eq!(items[0].data, Bytes::from_static(b"x"));
        assert_eq!(items[1].data, Bytes::new());
        assert_eq!(reply.units().count(), 3);
        assert!(reply.check_error().is_ok());

        let err = LegacyReply::from_raw(Bytes::from_static(b"SERVER_ERROR out of memory\r\n"));
        assert_eq!(
            err.check_error(),
            Err(LegacyError::Server("SERVER_ERROR out of memory".into()))
        );
        let bad = LegacyReply::from_raw(Bytes::from_static(b"VALUE a 0 5\r\nab"));
        assert!(matches!(bad.first(), Err(LegacyError::Protocol(_))));
        assert_eq!(bad.items().count(), 0);
    }
}
