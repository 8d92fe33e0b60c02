//! One shard's invalidation connection: `HELLO 3` (with `AUTH`), then
//! `CLIENT TRACKING ON BCAST NOLOOP`; every `invalidate` push bumps the
//! epoch of each key it names. While the connection is down (and until it
//! is back and tracking again) nothing of the shard is cached or served,
//! and its generation moves on both edges so every entry filled before is
//! dropped. A `PING` every second detects a silently dead peer.
//!
//! It also carries this proxy's write-through `SET`s (see
//! `crate::near_cache::store::Through`): with `NOLOOP`, Redis leaves a key
//! out of the pushes to this connection when the last write to it in an
//! event-loop cycle was this connection's own; any other write to the key
//! (before it in another cycle, or after it in the same one: BCAST merges a
//! cycle's writes of one key into one push) is still pushed. Replies come
//! in order, between pushes; a write's reply goes to its session. Like the
//! data connections, it counts in the shard's `memshift_backend_errors_total`:
//! an error reply to a set (`server`), and a lost connection with sets
//! unanswered (`connection`).

use std::collections::VecDeque;
use std::time::Duration;

use bytes::BytesMut;
use memshift_protocol::resp::{encode_command, Frame, ReplyParser};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use super::connection::{open_stream, ConnectionSettings};
use super::{BackendError, ReplyTo};
use crate::metrics::{ErrorKind, ShardMetrics};
use crate::near_cache::tracking::ThroughWrite;
use crate::near_cache::Tracking;

/// Write-through sets written per batch before the connection reads again.
const WRITE_BATCH: usize = 64;

const PING_EVERY: Duration = Duration::from_secs(1);
/// PINGs unanswered before the connection counts as dead.
const MAX_UNANSWERED_PINGS: u32 = 3;
const RETRY_MIN: Duration = Duration::from_millis(50);
const RETRY_MAX: Duration = Duration::from_secs(1);

/// Keep the shard's invalidation connection up until the task is aborted
/// (when the shard is dropped).
pub async fn listen(
    settings: ConnectionSettings,
    tracking: std::sync::Arc<Tracking>,
    mut writes: Option<mpsc::UnboundedReceiver<ThroughWrite>>,
    metrics: ShardMetrics,
) {
    let mut retry = RETRY_MIN;
    let mut logged = false;
    loop {
        let (why, tracked) = session(&settings, &tracking, writes.as_mut(), &metrics).await;
        tracking.lost();
        // Sets queued while it was going down: not sent, answered now.
        fail_queued(writes.as_mut());
        if tracked {
            retry = RETRY_MIN;
            logged = false;
        }
        if let Some(near) = crate::near_cache::get() {
            near.metrics.near_cache.invalidation(true);
        }
        if !logged {
            tracing::warn!(shard = %settings.label(), reason = %why, "near cache: invalidation connection lost; shard not cached until it is back");
            logged = true;
        }
        // A Sentinel switch ends the wait: the new primary is tracked at once.
        let target = settings.target();
        tokio::select! {
            () = tokio::time::sleep(retry) => {}
            () = settings.moved_from(target) => retry = RETRY_MIN,
        }
        retry = (retry * 2).min(RETRY_MAX);
    }
}

/// One connection's life; returns why it ended, and whether it got as far
/// as tracking.
async fn session(
    settings: &ConnectionSettings,
    tracking: &Tracking,
    writes: Option<&mut mpsc::UnboundedReceiver<ThroughWrite>>,
    metrics: &ShardMetrics,
) -> (String, bool) {
    let mut tracked = false;
    // Sets sent and not answered yet (`None`: a PING), failed if it ends.
    let mut awaiting: VecDeque<Option<ReplyTo>> = VecDeque::new();
    let why = run(
        settings,
        tracking,
        &mut tracked,
        writes,
        &mut awaiting,
        metrics,
    )
    .await;
    let mut lost_sets = false;
    for reply in awaiting.into_iter().flatten() {
        reply.send(Err(BackendError::ConnectionLost));
        lost_sets = true;
    }
    if lost_sets {
        metrics.error(ErrorKind::Connection);
    }
    (why, tracked)
}

fn fail_queued(writes: Option<&mut mpsc::UnboundedReceiver<ThroughWrite>>) {
    if let Some(rx) = writes {
        while let Ok(w) = rx.try_recv() {
            w.reply.send(Err(BackendError::Unavailable));
        }
    }
}

async fn run(
    settings: &ConnectionSettings,
    tracking: &Tracking,
    tracked: &mut bool,
    mut writes: Option<&mut mpsc::UnboundedReceiver<ThroughWrite>>,
    awaiting: &mut VecDeque<Option<ReplyTo>>,
    metrics: &ShardMetrics,
) -> String {
    // Sentinel shards: the primary this connection tracks; when it moves,
    // the connection ends (and `listen` marks the shard untracked) before
    // any read of the new primary may fill the cache.
    let target = settings.target();
    let moved = settings.moved_from(target.clone());
    tokio::pin!(moved);
    let connect = open_stream(settings, &target);
    let stream = match tokio::time::timeout(settings.connect_timeout, connect).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return e.to_string(),
        Err(_) => return "connect timeout".into(),
    };
    let (mut rd, mut wr) = stream.into_split();
    let mut out = BytesMut::new();
    match &settings.password {
        Some(password) => {
            let user = settings.username.as_deref().unwrap_or("default");
            encode_command(
                &mut out,
                &[
                    b"HELLO",
                    b"3",
                    b"AUTH",
                    user.as_bytes(),
                    password.as_bytes(),
                ],
            );
        }
        None => encode_command(&mut out, &[b"HELLO", b"3"]),
    }
    encode_command(
        &mut out,
        &[b"CLIENT", b"TRACKING", b"ON", b"BCAST", b"NOLOOP"],
    );
    if let Err(e) = wr.write_all(&out).await {
        return e.to_string();
    }
    let mut parser = ReplyParser::new();
    let mut buf = BytesMut::with_capacity(4096);
    let mut handshake = 0;
    let mut unanswered = 0u32;
    let mut ping = tokio::time::interval(PING_EVERY);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        loop {
            let frame = match parser.parse(&mut buf) {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => return e.to_string(),
            };
            match frame {
                Frame::Push(items) => invalidated(&items, tracking),
                Frame::Error(e) if handshake < 2 => {
                    return String::from_utf8_lossy(&e).into_owned()
                }
                _ if handshake < 2 => {
                    handshake += 1;
                    if handshake == 2 {
                        tracking.tracking_again();
                        // Checked after: a switch published meanwhile (its
                        // watcher marked the shard untracked first) is
                        // undone by `listen` before this task waits again.
                        if *settings.target() != *target {
                            return "the primary moved (Sentinel)".into();
                        }
                        *tracked = true;
                        tracing::info!(shard = %settings.label(), addr = %target, "near cache: invalidation connection tracking");
                    }
                }
                frame => match awaiting.pop_front() {
                    Some(Some(reply)) => {
                        if matches!(frame, Frame::Error(_)) {
                            metrics.error(ErrorKind::Server);
                        }
                        reply.send(Ok(frame));
                    }
                    Some(None) => {
                        if let Frame::Error(e) = frame {
                            return String::from_utf8_lossy(&e).into_owned();
                        }
                        unanswered = unanswered.saturating_sub(1);
                    }
                    None => return "reply to no request".into(),
                },
            }
        }
        let writes_open = *tracked && writes.is_some();
        tokio::select! {
            () = &mut moved => return "the primary moved (Sentinel)".into(),
            read = rd.read_buf(&mut buf) => match read {
                Ok(0) => return "closed by the shard".into(),
                Ok(_) => {}
                Err(e) => return e.to_string(),
            },
            _ = ping.tick() => {
                if unanswered >= MAX_UNANSWERED_PINGS {
                    return "PINGs unanswered".into();
                }
                unanswered += 1;
                // Its reply comes after the handshake's, in write order.
                awaiting.push_back(None);
                if let Err(e) = wr.write_all(b"*1\r\n$4\r\nPING\r\n").await {
                    return e.to_string();
                }
            }
            first = recv(&mut writes), if writes_open => {
                let Some(first) = first else {
                    return "write queue closed".into();
                };
                out.clear();
                let mut next = Some(first);
                let mut n = 0;
                while let Some(w) = next.take() {
                    out.extend_from_slice(&w.cmd);
                    awaiting.push_back(Some(w.reply));
                    n += 1;
                    if n < WRITE_BATCH {
                        next = writes.as_mut().and_then(|rx| rx.try_recv().ok());
                    }
                }
                if let Err(e) = wr.write_all(&out).await {
                    return e.to_string();
                }
            }
        }
    }
}

async fn recv(
    writes: &mut Option<&mut mpsc::UnboundedReceiver<ThroughWrite>>,
) -> Option<ThroughWrite> {
    match writes {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// `>2 invalidate [keys…]` or `>2 invalidate _` (everything).
fn invalidated(items: &[Frame], tracking: &Tracking) {
    let (Some(Frame::Bulk(kind)), Some(what), Some(near)) =
        (items.first(), items.get(1), crate::near_cache::get())
    else {
        return;
    };
    if kind.as_ref() != b"invalidate" {
        return;
    }
    match what {
        Frame::Array(keys) => {
            for key in keys {
                if let Frame::Bulk(key) = key {
                    near.invalidate(key);
                    near.metrics.near_cache.invalidation(false);
                }
            }
        }
        _ => {
            tracking.drop_all();
            near.metrics.near_cache.invalidation(true);
        }
    }
}
