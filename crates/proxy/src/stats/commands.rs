//! RESP `INFO commandstats` and `INFO errorstats`: per-command calls, time,
//! rejections and failures, and error replies by code, as Redis 7.0 keeps
//! them for what its clients sent.
//!
//! A command is a row (its index in the RESP command table, subcommands
//! after it: `resp::cmd::table`); each row's four counters are per-thread
//! ([`PerThreadCounters`]), so counting writes no line another core
//! writes. Error codes are few and only error replies touch them: a map
//! under a lock, bounded as Redis bounds it (128 codes; later ones count
//! in `total_error_replies` only).

use std::sync::{Mutex, PoisonError};

use super::latency::Latencies;
use crate::per_thread::{PerThreadCounter, PerThreadCounters};

/// Rows a table may have (commands and subcommands).
pub const MAX_ROWS: usize = 384;
const FIELDS: usize = 4;
const CALLS: usize = 0;
const USEC: usize = 1;
const REJECTED: usize = 2;
const FAILED: usize = 3;
/// Distinct error codes kept (Redis' `ERROR_STATS_NUMBER`).
pub const MAX_ERROR_CODES: usize = 128;

/// How a command ended, as Redis counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Ran and answered (`calls`).
    Done,
    /// Ran and answered an error (`calls` and `failed_calls`).
    Failed,
    /// Refused before it ran: arity, authentication, context
    /// (`rejected_calls` only).
    Rejected,
}

/// One row's totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Row {
    pub calls: u64,
    pub usec: u64,
    pub rejected: u64,
    pub failed: u64,
}

#[derive(Debug, Default)]
pub struct CommandStats {
    rows: PerThreadCounters<{ MAX_ROWS * FIELDS }>,
    /// `INFO latencystats`.
    latencies: Latencies,
    error_replies: PerThreadCounter,
    /// (code, count) in first-seen order.
    errors: Mutex<Vec<(Box<[u8]>, u64)>>,
}

impl CommandStats {
    /// Row `row` ended as `outcome` after `nanos` (a row past
    /// [`MAX_ROWS`] is ignored; `None`: the call has no time of its own,
    /// as a command queued by MULTI, which Redis times inside EXEC).
    #[inline]
    pub fn record(&self, row: usize, outcome: Outcome, nanos: Option<u64>) {
        if row >= MAX_ROWS {
            return;
        }
        let at = row * FIELDS;
        if outcome == Outcome::Rejected {
            return self.rows.add_at(at + REJECTED, 1);
        }
        self.rows.add_at(at + CALLS, 1);
        if outcome == Outcome::Failed {
            self.rows.add_at(at + FAILED, 1);
        }
        if let Some(nanos) = nanos {
            self.rows.add_at(at + USEC, nanos / 1000);
            self.latencies.record(row, nanos);
        }
    }

    /// `row`'s p50, p99 and p99.9 in µs (`None`: no call timed).
    pub fn percentiles(&self, row: usize) -> Option<[f64; 3]> {
        self.latencies.percentiles(row)
    }

    pub fn row(&self, row: usize) -> Row {
        let at = row * FIELDS;
        Row {
            calls: self.rows.get_at(at + CALLS),
            usec: self.rows.get_at(at + USEC),
            rejected: self.rows.get_at(at + REJECTED),
            failed: self.rows.get_at(at + FAILED),
        }
    }

    /// An error reply whose code (its first word) is `code`.
    pub fn error(&self, code: &[u8]) {
        self.error_replies.add(1);
        let mut errors = self.errors.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, n)) = errors.iter_mut().find(|(c, _)| **c == *code) {
            *n += 1;
        } else if errors.len() < MAX_ERROR_CODES {
            errors.push((code.into(), 1));
        }
    }

    /// Every count back to 0 (`stats reset`, `CONFIG RESETSTAT`).
    pub fn reset(&self) {
        self.rows.reset();
        self.latencies.reset();
        self.error_replies.reset();
        self.errors
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// Error replies sent (`total_error_replies`).
    pub fn error_replies(&self) -> u64 {
        self.error_replies.get()
    }

    /// Each code's count, in first-seen order.
    pub fn errors(&self) -> Vec<(Box<[u8]>, u64)> {
        self.errors
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// The code of an error reply's text (after `-`): its first word.
pub fn error_code(text: &[u8]) -> &[u8] {
    let end = memchr::memchr2(b' ', b'\r', text).unwrap_or(text.len());
    text.get(..end).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_count_as_redis_counts_them() {
        let s = CommandStats::default();
        s.record(3, Outcome::Done, Some(5_000));
        s.record(3, Outcome::Failed, Some(2_999));
        // Run inside EXEC: a call, no time of its own.
        s.record(3, Outcome::Failed, None);
        s.record(3, Outcome::Rejected, Some(9_000));
        s.record(MAX_ROWS, Outcome::Done, Some(1_000));
        let row = s.row(3);
        assert_eq!(
            row,
            Row {
                calls: 3,
                usec: 7,
                rejected: 1,
                failed: 2
            }
        );
        assert_eq!(s.row(4), Row::default());
        // The two timed calls: 3 and 5 µs.
        let [p50, _, p999] = s.percentiles(3).unwrap();
        assert!((2.999..3.2).contains(&p50), "{p50}");
        assert!((5.0..5.4).contains(&p999), "{p999}");
        assert_eq!(s.percentiles(4), None);
        s.error(b"ERR");
        s.reset();
        assert_eq!(s.row(3), Row::default());
        assert_eq!(s.percentiles(3), None);
        assert_eq!((s.error_replies(), s.errors().len()), (0, 0));
    }

    #[test]
    fn error_codes_are_the_first_word_and_bounded() {
        assert_eq!(error_code(b"ERR wrong number"), b"ERR");
        assert_eq!(error_code(b"WRONGTYPE\r\n"), b"WRONGTYPE");
        assert_eq!(error_code(b""), b"");
        let s = CommandStats::default();
        s.error(b"ERR");
        s.error(b"ERR");
        for i in 0..MAX_ERROR_CODES + 5 {
            s.error(format!("E{i}").as_bytes());
        }
        let errors = s.errors();
        assert_eq!(errors.len(), MAX_ERROR_CODES);
        assert_eq!(errors[0], (b"ERR".to_vec().into_boxed_slice(), 2));
        assert_eq!(s.error_replies(), 2 + MAX_ERROR_CODES as u64 + 5);
    }
}
