//! One engine for every pipelined backend connection: the Redis shards'
//! and the legacy memcached servers'.
//!
//! Callers queue a [`Request`] (bytes they encoded, what reply to expect,
//! where it goes) on a [`Pipeline`]; the engine owns the rest: batching what
//! is queued into one write, FIFO reply slots, stuck-request timeouts,
//! reconnecting with backoff, failing fast while down, the up flag, and a
//! clean stop (what is in flight is answered first) once every sender is
//! gone. What differs between backends plugs in through two traits:
//!
//! * [`Codec`]: reply framing, delivery (and a re-send with a preamble, for
//!   Redis' `NOSCRIPT`), failing a caller, the idle ping.
//! * [`Connector`]: open a connection and run its handshake (TLS, `AUTH`,
//!   `SCRIPT LOAD`, memcached's `version`), and hear what happened to it
//!   (logs, metrics).
//!
//! # Decisions worth knowing
//!
//! * A crate of its own, not a module of `memshift-shadow`: the Redis side
//!   is the proxy's core and should not reach into the migration crate for
//!   its connections; this crate knows neither protocol (only tokio, bytes).
//! * One task per connection, with one `select!` over reading, writing,
//!   queued requests and a timer (the legacy side's design), kept over a
//!   writer task plus a reader task sharing a `Mutex<VecDeque>` (the Redis
//!   side's): no lock and no second task or channel for `NOSCRIPT` re-sends,
//!   every slot is touched by one task, and a large pipeline cannot deadlock
//!   with a server that stops reading until we read. Both designs cost a
//!   client request the same two hand-offs (session → connection task →
//!   session).
//! * Adaptive coalescing: a request that finds the connection busy (replies
//!   outstanding, or the previous request less than 1 ms ago) makes the
//!   task `yield_now` before it drains the queue, so the other sessions
//!   ready in that scheduler pass join the same write (the cross-session
//!   batching the Redis side measured at 1.77x for unpipelined clients); a
//!   lone request on an idle connection is written at once. The
//!   unconditional yield cost every request at low load a scheduler pass
//!   and an extra `epoll_wait` (docs/benchmarks-history.md, "Issue 14");
//!   yielding only with replies outstanding batched less under a closed
//!   loop, where a fast Redis has often answered everything when the next
//!   request comes (BENCHMARKS.md, "Engine: when to wait for company").
//! * The `select!` stays: written as a hand-written `poll` (as the proxy's
//!   own connection loop is) it measured the same (its share of the
//!   proxy's user-space time 16.0 % against 15.8 %: the task runs once per
//!   batch, not per request; BENCHMARKS.md, "Session driver: a table").
//! * The request queue is a `VecDeque` under a mutex that the connection
//!   task takes whole per batch ([`queue`]): one uncontended lock per
//!   request, where tokio's unbounded channel and a depth counter cost
//!   about eight atomic read-modify-writes and its bounded channel locked
//!   a mutex on every receive.
//! * A connection that served for a while and then broke (idle drop,
//!   restart) is retried at once; a flapping one waits the backoff.
//! * A backend that moves (a Redis Sentinel failover: [`Connector::moved`])
//!   closes the connection at once, even mid-traffic (that branch is
//!   polled first), and skips the backoff: its requests in flight fail like
//!   on any lost connection and are never re-sent to the new address.

mod codec;
mod engine;
mod error;
mod queue;
pub mod transport;

pub use codec::{Codec, Connector, Delivery, Event, Request};
pub use engine::{Pipeline, Settings, BACKOFF_MAX, BACKOFF_MIN, MAX_BATCH_BYTES};
pub use error::{BackendError, Broken, ConnectError, DecodeError};
