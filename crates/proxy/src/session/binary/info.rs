//! Stat and Flush, through the text commands (`stats <group>`,
//! `flush_all <delay>`) whose replies `reply` re-encodes.

use bytes::Bytes;
use memshift_protocol::memcache::binary::Status;
use memshift_protocol::memcache::{parse_request, Parsed, Request};
use tokio::time::Instant;

use super::super::Session;
use super::Answer;

impl Session {
    pub(super) fn binary_flush(&mut self, delay: u32, now: Instant) {
        self.dispatch(
            Request::FlushAll {
                delay: i64::from(delay),
                noreply: false,
            },
            now,
        );
    }

    /// Stat: the key is the group (`items`, `slabs`, `settings`, ...).
    pub(super) fn binary_stat(&mut self, opcode: u8, opaque: u32, group: &[u8], now: Instant) {
        self.reserve_scratch();
        let scratch = &mut self.binary.scratch;
        scratch.extend_from_slice(b"stats");
        let printable = group.iter().all(|&b| b.is_ascii_graphic() || b == b' ');
        if !group.is_empty() {
            scratch.extend_from_slice(b" ");
            scratch.extend_from_slice(group);
        }
        scratch.extend_from_slice(b"\r\n");
        let line = scratch.split();
        let limits = self.proxy.settings.load().limits;
        let stats = match parse_request(&line, &limits) {
            Parsed::Complete {
                request: Request::Stats(group),
                ..
            } if printable => Some(group),
            _ => None,
        };
        match stats {
            Some(group) => {
                self.push_frame(opcode, opaque, false, Bytes::new(), Answer::Stat);
                self.dispatch(Request::Stats(group), now);
            }
            None => self.push_local(opcode, opaque, Answer::Error(Status::KeyNotFound)),
        }
    }
}
