//! One shard's invalidation connection: `HELLO 3` (with `AUTH`), then
//! `CLIENT TRACKING ON BCAST`; every `invalidate` push bumps the epoch of
//! each key it names. While the connection is down (and until it is back
//! and tracking again) nothing of the shard is cached or served, and its
//! generation moves on both edges so every entry filled before is dropped.
//! A `PING` every second detects a silently dead peer.

use std::time::Duration;

use bytes::BytesMut;
use memshift_protocol::resp::{encode_command, Frame, ReplyParser};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::connection::{open_stream, ConnectionSettings};
use crate::near_cache::Tracking;

const PING_EVERY: Duration = Duration::from_secs(1);
/// PINGs unanswered before the connection counts as dead.
const MAX_UNANSWERED_PINGS: u32 = 3;
const RETRY_MIN: Duration = Duration::from_millis(50);
const RETRY_MAX: Duration = Duration::from_secs(1);

/// Keep the shard's invalidation connection up until the task is aborted
/// (when the shard is dropped).
pub async fn listen(settings: ConnectionSettings, tracking: std::sync::Arc<Tracking>) {
    let mut retry = RETRY_MIN;
    let mut logged = false;
    loop {
        let (why, tracked) = session(&settings, &tracking).await;
        tracking.lost();
        if tracked {
            retry = RETRY_MIN;
            logged = false;
        }
        if let Some(near) = crate::near_cache::get() {
            near.metrics.near_cache.invalidation(true);
        }
        if !logged {
            tracing::warn!(shard = %settings.addr, reason = %why, "near cache: invalidation connection lost; shard not cached until it is back");
            logged = true;
        }
        tokio::time::sleep(retry).await;
        retry = (retry * 2).min(RETRY_MAX);
    }
}

/// One connection's life; returns why it ended, and whether it got as far
/// as tracking.
async fn session(settings: &ConnectionSettings, tracking: &Tracking) -> (String, bool) {
    let mut tracked = false;
    let why = run(settings, tracking, &mut tracked).await;
    (why, tracked)
}

async fn run(settings: &ConnectionSettings, tracking: &Tracking, tracked: &mut bool) -> String {
    let stream = match tokio::time::timeout(settings.connect_timeout, open_stream(settings)).await {
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
    encode_command(&mut out, &[b"CLIENT", b"TRACKING", b"ON", b"BCAST"]);
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
                Frame::Error(e) => return String::from_utf8_lossy(&e).into_owned(),
                _ if handshake < 2 => {
                    handshake += 1;
                    if handshake == 2 {
                        tracking.tracking_again();
                        *tracked = true;
                        tracing::info!(shard = %settings.addr, "near cache: invalidation connection tracking");
                    }
                }
                _ => unanswered = unanswered.saturating_sub(1),
            }
        }
        tokio::select! {
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
                if let Err(e) = wr.write_all(b"*1\r\n$4\r\nPING\r\n").await {
                    return e.to_string();
                }
            }
        }
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
