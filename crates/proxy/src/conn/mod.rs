//! The connection engine every front protocol runs on (memcached text and
//! meta, memcached binary, RESP): the read loop and its buffers, the
//! ordered queue of pending requests, deadlines, backpressure, slow-consumer
//! close, idle timeout and drain. A protocol (`session::Session`,
//! `resp::RespSession`) implements [`Protocol`]: it parses the read buffer,
//! dispatches requests, takes backend replies and renders finished requests;
//! the engine decides when each of those happens.
//!
//! * `queue`: the pending requests, in the client's order, and the counts
//!   backpressure needs.
//! * `pool`: buffers, queue storage and reply mailboxes shared by the
//!   thread's connections while they are busy (the mailboxes themselves:
//!   `backend::mailbox`).
//! * `deadline`: the one timer of a busy connection.
//! * `push`: unsolicited frames (pub/sub messages) and where they go among
//!   the replies.
//! * `serve`: the loop itself (idle wait, busy loop, drain).

pub mod deadline;
pub mod pool;
pub mod push;
pub mod queue;
mod serve;
mod shutdown;

use std::task::Context;

use bytes::BytesMut;
use tokio::io::AsyncRead;
use tokio::time::Instant;

use crate::backend::Mailbox;
use crate::metrics::Protocol as Front;
use crate::proxy::{Proxy, Settings};
use crate::redis::BackendReply;
pub use push::{Push, PushSender, Pushes};
pub use queue::{Entry, Queue};
pub use serve::{read_ready, run, FIRST_WRITE};

/// Why a connection ended.
#[derive(Debug)]
pub enum End {
    ClientClosed,
    Quit,
    IdleTimeout,
    SlowConsumer,
    Shutdown,
    Io(std::io::Error),
}

/// The engine's own state of a connection.
#[derive(Debug)]
pub struct State {
    /// Answer what was read, then close (quit, a fatal protocol error, end
    /// of input, the drain deadline): nothing more is read.
    pub closing: bool,
    /// The client has closed its side.
    pub read_closed: bool,
    /// SIGTERM: keep reading and answering until the client goes quiet
    /// (`server.drain_quiet_ms`) or the drain deadline.
    pub draining: bool,
    /// When the last input arrived (the idle timeout counts from it).
    pub last_input: Instant,
    /// `last_input` was read for input not yet parsed (see
    /// [`State::input_time`]).
    pub input_fresh: bool,
    /// Draining: when the drain deadline (`server.drain_timeout_ms` after
    /// SIGTERM) comes.
    pub drain_deadline: Option<Instant>,
    /// `server.max_pending_replies` as of the last input.
    pub max_pending_replies: usize,
    /// Reply bytes a client may have waiting (on top of the output buffer)
    /// before it is closed as a slow consumer: `server.max_pending_bytes`
    /// (at least 4 × `max_item_size`) as of the last input.
    pub max_pending_bytes: usize,
}

impl State {
    pub fn new(proxy: &Proxy) -> State {
        let mut state = State {
            closing: false,
            read_closed: false,
            draining: false,
            last_input: Instant::now(),
            input_fresh: false,
            drain_deadline: None,
            max_pending_replies: 0,
            max_pending_bytes: 0,
        };
        state.load_limits(&proxy.settings.load());
        state
    }

    /// Input arrived now: its clock reading serves the input's requests too.
    pub fn input_arrived(&mut self) {
        self.last_input = Instant::now();
        self.input_fresh = true;
    }

    /// When the requests about to be parsed started: the read's clock
    /// reading for input just read (not a second one per read), else now
    /// (input that waited in the buffer for room).
    pub fn input_time(&mut self) -> Instant {
        if std::mem::take(&mut self.input_fresh) {
            self.last_input
        } else {
            Instant::now()
        }
    }

    /// The live backpressure limits (a reload may have changed them),
    /// copied for a batch of input.
    pub fn load_limits(&mut self, settings: &Settings) {
        self.max_pending_replies = settings.max_pending_replies;
        // A client may always have a few of the largest items waiting.
        self.max_pending_bytes = settings
            .max_pending_bytes
            .max(4 * settings.limits.max_item_size);
    }
}

impl State {
    /// The client sent what can never become a request (larger than every
    /// limit, or a line memcached would not wait for): its input is
    /// dropped, and the connection closes once what came before is
    /// answered (no reply of its own, as the reference servers do).
    pub fn refuse_input(&mut self, rbuf: &mut BytesMut, why: &'static str) {
        tracing::info!(bytes = rbuf.len(), why, "closing a client on its input");
        rbuf.clear();
        self.closing = true;
    }
}

/// The parts of a connection the engine works on, borrowed apart so that
/// the loop can wait on the socket, the write buffer and the reply channel
/// at once.
pub struct Io<'a, E> {
    pub rbuf: &'a mut BytesMut,
    pub wbuf: &'a mut BytesMut,
    /// Scratch space backend commands are built in (pooled with the rest).
    pub cmd_buf: &'a mut BytesMut,
    pub queue: &'a mut Queue<E>,
    /// Where backends send their replies: a mailbox slot on the worker's
    /// table, opened with the first backend request and closed when the
    /// connection goes quiet (off the workers, a pooled channel, handed
    /// back unless a backend still holds a sender).
    pub replies: &'a mut Option<Mailbox>,
    pub state: &'a mut State,
    /// Unsolicited frames, for a protocol that has them (`push`).
    pub pushes: Option<&'a mut Pushes>,
}

/// The [`Protocol`] methods every protocol answers from the same fields
/// (`proxy`, `rbuf`, `wbuf`, `cmd_buf`, `pending`: its queue, `replies`,
/// `conn`: the engine's state) and the same inherent methods
/// (`process_input`, `complete`); `pushes: field` names the protocol's
/// [`Pushes`], if it has unsolicited frames.
#[macro_export]
macro_rules! protocol_basics {
    ($entry:ty) => {
        $crate::protocol_basics!(@common $entry);

        #[inline]
        fn io(&mut self) -> $crate::conn::Io<'_, $entry> {
            $crate::protocol_basics!(@io self, None)
        }
    };
    ($entry:ty, pushes: $field:ident) => {
        $crate::protocol_basics!(@common $entry);

        #[inline]
        fn io(&mut self) -> $crate::conn::Io<'_, $entry> {
            $crate::protocol_basics!(@io self, Some(&mut self.$field))
        }
    };
    (@io $self:ident, $pushes:expr) => {
        $crate::conn::Io {
            rbuf: &mut $self.rbuf,
            wbuf: &mut $self.wbuf,
            cmd_buf: &mut $self.cmd_buf,
            queue: &mut $self.pending,
            replies: &mut $self.replies,
            state: &mut $self.conn,
            pushes: $pushes,
        }
    };
    (@common $entry:ty) => {
        type Entry = $entry;

        fn proxy(&self) -> &$crate::proxy::Proxy {
            &self.proxy
        }

        fn parse_and_dispatch(&mut self) {
            self.process_input();
        }

        fn take_reply(&mut self, reply: $crate::redis::BackendReply) {
            self.complete(reply);
        }
    };
}

/// What a front protocol provides the engine. Called through generics (no
/// dynamic dispatch on the request path).
pub trait Protocol {
    type Entry: Entry;

    fn proxy(&self) -> &Proxy;

    fn io(&mut self) -> Io<'_, Self::Entry>;

    /// Parse and dispatch every complete request in the read buffer (as
    /// long as [`Protocol::room_to_dispatch`] and not closing).
    fn parse_and_dispatch(&mut self);

    /// A backend reply for the entry with its sequence number.
    fn take_reply(&mut self, reply: BackendReply);

    /// Render a finished entry into the write buffer (the engine has taken
    /// it off the queue and counted it; never a close). `latency`: from
    /// its start to now, when the engine read the clock for it (entries
    /// with a metrics command).
    fn write_reply(&mut self, entry: Self::Entry, latency: Option<std::time::Duration>);

    /// Room to dispatch another request (the queue's window, and whatever
    /// the protocol holds back on).
    fn room_to_dispatch(&self) -> bool;

    /// Read more input now (not closing). By default while there is room
    /// to dispatch; a protocol that holds dispatch back for a while (RESP
    /// waiting on a held connection) may go on reading a bounded amount,
    /// so that a client that leaves meanwhile is noticed.
    fn may_read(&self) -> bool {
        self.room_to_dispatch()
    }

    /// At the top of every turn of the busy loop, before finished replies
    /// are written: work the protocol does on its own schedule rather than
    /// on input (RESP: launching or cancelling a request held on a
    /// connection of its own, `resp::cmd::hold`). Its answers come on the
    /// reply channel, which wakes the loop.
    fn before_turn(&mut self) {}

    /// The `protocol` label of its request metrics.
    fn front(&self) -> Front;

    /// Input is being consumed that is not in the read buffer (a refused
    /// request's data still arriving): not quiet.
    fn mid_request(&self) -> bool {
        false
    }

    /// Hold finished replies back for now.
    fn hold_output(&self) -> bool {
        false
    }

    /// Before each turn of the busy loop: input the protocol held back
    /// (and may want to read more of, without waiting).
    fn settle_input<R: AsyncRead + Unpin>(&mut self, _rd: &mut R, _cx: &mut Context<'_>) {}

    /// Quiet: hand protocol-owned buffers back to the thread's pool.
    fn give_back(&mut self) {}

    /// The type byte of a push (a frame a source sends unasked, encoded
    /// with RESP3's `>`) in the protocol in effect now: RESP2 has no
    /// pushes and gets them as arrays. `None`: written as they came.
    fn push_type(&self) -> Option<u8> {
        None
    }
}
