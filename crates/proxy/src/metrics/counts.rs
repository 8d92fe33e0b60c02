//! `memshift_requests_total`, `memshift_get_hits_total` and
//! `memshift_get_misses_total`, kept outside the recorder.
//!
//! Every request adds to these; a recorder counter is a process-wide atomic
//! whose every add is two writes (value and generation) to a line all worker
//! threads write. Here each thread adds to its own slot
//! ([`PerThreadCounters`]); the families render as the recorder rendered
//! them (same names, labels, HELP and TYPE).

use std::fmt::Write as _;

use super::families::{help, COMMANDS, GET_HITS, GET_MISSES, REQUESTS_TOTAL};
use super::labels::{Backend, Protocol};
use crate::per_thread::PerThreadCounters;

/// The families rendered here, which the recorder must not describe.
pub(super) const OWN_FAMILIES: [&str; 3] = [REQUESTS_TOTAL, GET_HITS, GET_MISSES];

const REQUEST_SERIES: usize = Protocol::ALL.len() * COMMANDS.len();
const BACKENDS: usize = Backend::ALL.len();

#[derive(Debug, Default)]
pub(super) struct RequestCounts {
    /// `[protocol * COMMANDS.len() + command]`
    requests: PerThreadCounters<REQUEST_SERIES>,
    /// `[backend]`
    get_hits: PerThreadCounters<BACKENDS>,
    get_misses: PerThreadCounters<BACKENDS>,
    /// Off: nothing is counted (`Metrics::without_request_metrics`); the
    /// series still render, at 0.
    pub(super) disabled: bool,
}

impl RequestCounts {
    /// One request of `COMMANDS[command]` (in range: the caller checks).
    #[inline]
    pub(super) fn request(&self, protocol: Protocol, command: usize) {
        if !self.disabled {
            let series = protocol as usize * COMMANDS.len() + command;
            self.requests.add_at(series, 1);
        }
    }

    #[inline]
    pub(super) fn get(&self, backend: Backend, hit: bool) {
        if !self.disabled {
            let family = if hit {
                &self.get_hits
            } else {
                &self.get_misses
            };
            family.add_at(backend as usize, 1);
        }
    }

    /// Append the families in Prometheus text format.
    pub(super) fn render(&self, out: &mut String) {
        header(out, REQUESTS_TOTAL);
        for p in Protocol::ALL {
            for (c, command) in COMMANDS.iter().enumerate() {
                let n = self.requests.get_at(p as usize * COMMANDS.len() + c);
                let protocol = p.as_str();
                let _ = writeln!(
                    out,
                    "{REQUESTS_TOTAL}{{protocol=\"{protocol}\",command=\"{command}\"}} {n}"
                );
            }
        }
        for (name, family) in [(GET_HITS, &self.get_hits), (GET_MISSES, &self.get_misses)] {
            header(out, name);
            for b in Backend::ALL {
                let n = family.get_at(b as usize);
                let _ = writeln!(out, "{name}{{backend=\"{}\"}} {n}", b.label());
            }
        }
    }
}

fn header(out: &mut String, name: &str) {
    let _ = writeln!(out, "# HELP {name} {}", help(name));
    let _ = writeln!(out, "# TYPE {name} counter");
}
