//! A RESP client's subscriber connection to one node: its own connection
//! (`HELLO 3`, with `AUTH`), on which the client's SUBSCRIBE / PSUBSCRIBE /
//! SSUBSCRIBE and their UNSUBSCRIBEs run. Replies (one frame per channel
//! named, as Redis confirms each) go to the client's request; messages
//! (`message`, `pmessage`, `smessage`, and anything Redis pushes while no
//! request waits, such as a `sunsubscribe` when a slot moves) become the
//! client's pushes (`conn::push`), encoded in the client's protocol, placed
//! after the reply read before them.
//!
//! The connection failing (the shard down, killed, unreachable, or silent:
//! a `PING` every second, three unanswered end it) is never silent: requests waiting are answered with the error, and a last push
//! carries it and closes the client (its subscriptions are gone). Counted
//! in `memshift_resp_subscriber_connections_lost_total`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use memshift_protocol::resp::reply::{self as out, RespVersion, Shape};
use memshift_protocol::resp::{encode_command, Frame, ReplyParser};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use super::connection::{open_stream, ConnectionSettings};
use super::ReplyTo;
use crate::conn::{Push, PushSender};
use crate::metrics::Metrics;

const PING_EVERY: Duration = Duration::from_secs(1);
/// PINGs unanswered before the connection counts as dead.
const MAX_UNANSWERED_PINGS: usize = 3;

/// Why a connection ends when its client's session is gone.
const CLIENT_GONE: &str = "client gone";

/// Subscriber connections open in this process (`redis.max_subscriber_connections`).
static OPEN: AtomicUsize = AtomicUsize::new(0);

/// One command for the subscriber connection.
#[derive(Debug)]
pub struct SubscriberCommand {
    pub cmd: Bytes,
    /// Frames Redis answers it with (one per channel, or one).
    pub frames: usize,
    /// Gets `Frame::Array` of those frames, or the error.
    pub reply: ReplyTo,
}

/// The session's handle: dropping it ends the connection once the commands
/// sent are answered.
#[derive(Debug)]
pub struct Subscriber {
    tx: mpsc::UnboundedSender<SubscriberCommand>,
    pub addr: String,
}

impl Subscriber {
    /// Open a subscriber connection to the node `settings` names, unless
    /// `max` are open already (`None`).
    pub fn open(
        settings: ConnectionSettings,
        pushes: PushSender,
        metrics: Arc<Metrics>,
        max: usize,
    ) -> Option<Subscriber> {
        let taken = OPEN.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
            (n < max).then_some(n + 1)
        });
        if taken.is_err() {
            metrics.subscriber_refused();
            return None;
        }
        metrics.subscriber_connections(1.0);
        let (tx, rx) = mpsc::unbounded_channel();
        let addr = settings.addr.clone();
        let link = Link {
            settings,
            pushes,
            awaiting: VecDeque::new(),
            after: 0,
        };
        tokio::spawn(link.run(rx, metrics));
        Some(Subscriber { tx, addr })
    }

    pub fn send(&self, command: SubscriberCommand) {
        if let Err(mpsc::error::SendError(c)) = self.tx.send(command) {
            // The connection has failed (its close push is on its way).
            c.reply
                .send(Ok(lost_error(&self.addr, "connection closed")));
        }
    }
}

/// A command sent, and the frames of its answer so far (`reply` `None`:
/// memshift's own PING).
struct Awaiting {
    frames: usize,
    got: Vec<Frame>,
    reply: Option<ReplyTo>,
}

struct Link {
    settings: ConnectionSettings,
    pushes: PushSender,
    awaiting: VecDeque<Awaiting>,
    /// Sequence number a push read now is written after (the request
    /// after the last one answered).
    after: u64,
}

impl Link {
    async fn run(mut self, rx: mpsc::UnboundedReceiver<SubscriberCommand>, metrics: Arc<Metrics>) {
        let failed = self.serve(rx).await;
        OPEN.fetch_sub(1, Ordering::Relaxed);
        metrics.subscriber_connections(-1.0);
        // The client gone (its session dropped the channel) is no failure.
        let Err(why) = failed.or_else(|why| if why == CLIENT_GONE { Ok(()) } else { Err(why) })
        else {
            return;
        };
        metrics.subscriber_lost();
        let addr = &self.settings.addr;
        tracing::warn!(shard = %addr, reason = %why, "RESP subscriber connection lost; closing its client");
        let error = lost_error(addr, &why);
        for reply in self.awaiting.drain(..).filter_map(|w| w.reply) {
            reply.send(Ok(error.clone()));
        }
        let mut frame = BytesMut::new();
        // An error reads the same in RESP2 and RESP3.
        out::frame(&mut frame, &error, RespVersion::Resp3, Shape::Plain);
        let close = Push {
            after: self.after,
            frame: frame.freeze(),
            close: true,
        };
        let _ = self.pushes.send(close).await;
    }

    /// Until the session drops its handle with everything answered (`Ok`),
    /// or the connection fails (`Err`: why).
    async fn serve(
        &mut self,
        mut rx: mpsc::UnboundedReceiver<SubscriberCommand>,
    ) -> Result<(), String> {
        let settings = &self.settings;
        // A Sentinel shard's current primary (else the configured address).
        let target = settings.target();
        let stream =
            match tokio::time::timeout(settings.connect_timeout, open_stream(settings, &target))
                .await
            {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => return Err(e.to_string()),
                Err(_) => return Err("connect timeout".into()),
            };
        let (mut rd, mut wr) = stream.into_split();
        let mut out = BytesMut::new();
        hello(&mut out, settings);
        wr.write_all(&out).await.map_err(|e| e.to_string())?;
        let mut parser = ReplyParser::new();
        let mut buf = BytesMut::with_capacity(4096);
        let mut greeted = false;
        let mut open = true;
        let mut ping = tokio::time::interval(PING_EVERY);
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            while let Some(frame) = parser.parse(&mut buf).map_err(|e| e.to_string())? {
                if !greeted {
                    if let Frame::Error(e) = frame {
                        return Err(String::from_utf8_lossy(&e).into_owned());
                    }
                    greeted = true;
                    continue;
                }
                self.take(frame).await?;
            }
            if !open && self.awaiting.iter().all(|w| w.reply.is_none()) {
                return Ok(());
            }
            tokio::select! {
                command = rx.recv(), if open => match command {
                    Some(c) => {
                        wr.write_all(&c.cmd).await.map_err(|e| e.to_string())?;
                        let reply = Some(c.reply);
                        self.awaiting.push_back(Awaiting { frames: c.frames, got: Vec::new(), reply });
                    }
                    None => open = false,
                },
                read = rd.read_buf(&mut buf) => match read {
                    Ok(0) => return Err("closed by the shard".into()),
                    Ok(_) => {}
                    Err(e) => return Err(e.to_string()),
                },
                _ = ping.tick(), if greeted => {
                    let pings = self.awaiting.iter().filter(|w| w.reply.is_none()).count();
                    if pings >= MAX_UNANSWERED_PINGS {
                        return Err("PINGs unanswered".into());
                    }
                    wr.write_all(b"*1\r\n$4\r\nPING\r\n").await.map_err(|e| e.to_string())?;
                    self.awaiting.push_back(Awaiting { frames: 1, got: Vec::new(), reply: None });
                }
            }
        }
    }

    /// A frame from Redis: part of the oldest command's answer, or a push.
    async fn take(&mut self, frame: Frame) -> Result<(), String> {
        // A push while memshift's PING (or nothing) is awaited is Redis'
        // own (a `sunsubscribe` when a slot moves away).
        let front_is_ping = self.awaiting.front().map(|w| w.reply.is_none());
        let unsolicited = matches!(frame, Frame::Push(_)) && front_is_ping != Some(false);
        if is_message(&frame) || unsolicited || front_is_ping.is_none() {
            let mut encoded = BytesMut::new();
            // Encoded as the link reads it (RESP3): the client's session
            // gives it the form of the protocol in effect when it writes it
            // (`Protocol::push_type`), which HELLO may have changed since.
            out::frame(&mut encoded, &frame, RespVersion::Resp3, Shape::Plain);
            let push = Push {
                after: self.after,
                frame: encoded.freeze(),
                close: false,
            };
            // Waits while the client's connection holds `CHANNEL_CAPACITY`
            // pushes: this connection stops reading its shard.
            return self.pushes.send(push).await.map_err(|_| CLIENT_GONE.into());
        }
        let Some(waiting) = self.awaiting.front_mut() else {
            return Ok(());
        };
        let error = matches!(frame, Frame::Error(_));
        // Kept as read: rendered in the client's protocol with the reply.
        waiting.got.push(frame);
        if !error && waiting.got.len() < waiting.frames {
            return Ok(());
        }
        let Some(done) = self.awaiting.pop_front() else {
            return Ok(());
        };
        let Some(reply) = done.reply else {
            return match error {
                true => Err(format!("PING answered {:?}", done.got.last())),
                false => Ok(()),
            };
        };
        self.after = reply.seq + 1;
        let answer = match error {
            true => done.got.into_iter().next_back().unwrap_or(Frame::Null),
            false => Frame::Array(done.got),
        };
        reply.send(Ok(answer));
        Ok(())
    }
}

/// `HELLO 3` (with `AUTH` when the shards need it).
fn hello(out: &mut BytesMut, settings: &ConnectionSettings) {
    match &settings.password {
        Some(password) => {
            let user = settings.username.as_deref().unwrap_or("default");
            let auth = [
                b"HELLO".as_slice(),
                b"3",
                b"AUTH",
                user.as_bytes(),
                password.as_bytes(),
            ];
            encode_command(out, &auth);
        }
        None => encode_command(out, &[b"HELLO", b"3"]),
    }
}

/// A published message (not a reply to the client's request).
fn is_message(frame: &Frame) -> bool {
    let Frame::Push(items) = frame else {
        return false;
    };
    matches!(items.first(), Some(Frame::Bulk(kind))
        if matches!(kind.as_ref(), b"message" | b"pmessage" | b"smessage"))
}

fn lost_error(addr: &str, why: &str) -> Frame {
    let text = format!("ERR memshift: pub/sub connection to {addr} lost ({why}); subscriptions dropped, subscribe again");
    Frame::Error(Bytes::from(text.replace(['\r', '\n'], " ")))
}
