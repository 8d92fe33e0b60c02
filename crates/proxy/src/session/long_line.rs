//! memcached's verdict on a long line still missing its `\n`.
//!
//! memcached reads all that is ready into its 16 KiB buffer and then closes
//! a connection whose buffer holds more than 2048 bytes of a line that is
//! not a multi-get and has no `\n` yet. A read here may return less than
//! memcached's would (less room in the buffer), so before closing, the
//! session reads what else is ready, up to memcached's buffer size.

use std::task::Context;

use tokio::io::AsyncRead;

use super::Session;
use crate::conn::read_ready;

impl Session {
    /// Settle a line `process_input` left stalled (`line_stalled`): read what
    /// is ready and parse again; close when nothing more is ready and the
    /// line is still unterminated.
    pub(super) fn settle_stalled_line<R: AsyncRead + Unpin>(
        &mut self,
        rd: &mut R,
        cx: &mut Context<'_>,
    ) {
        while self.line_stalled && !self.conn.closing {
            self.line_stalled = false;
            let whole = self.proxy.settings.load().limits.max_whole_line();
            self.rbuf.reserve(whole.saturating_sub(self.rbuf.len()));
            let n = read_ready(rd, &mut self.rbuf, cx);
            if n == 0 {
                let why = "a line past max_line_length without a newline";
                self.conn.refuse_input(&mut self.rbuf, why);
                return;
            }
            self.proxy.stats.bytes_read.add(n as u64);
            // Completes the line, closes (no `\n` within memcached's
            // buffer), or leaves it stalled again.
            self.process_input();
        }
        self.line_stalled = false;
    }
}
