//! Shared helpers for the memcache tests: replay a byte stream through the
//! parser the way a session does (honouring `skip`), and render the replies
//! memcached would send for requests run against an empty cache.
#![allow(dead_code)]

use memshift_protocol::memcache::{
    parse_request, ParseLimits, Parsed, ProtocolError, Request, StorageCommand,
};

/// What the parser made of one request in a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Request(Request<Vec<u8>>),
    /// An error reply (empty when memcached stays silent).
    Reply(Vec<u8>),
    Close,
}

/// Parse every request in `input`, like a session loop: errors skip bytes,
/// a close stops. Returns the events and the bytes left unparsed (an
/// incomplete request, or data still to be skipped, counted as negative).
pub fn run(input: &[u8], limits: &ParseLimits) -> (Vec<Event>, isize) {
    let mut events = Vec::new();
    let mut pos = 0usize;
    while pos < input.len() {
        let rest = &input[pos..];
        match parse_request(rest, limits) {
            Parsed::Complete { request, consumed } => {
                assert!(consumed > 0 && consumed <= rest.len());
                events.push(Event::Request(request.map(|b| b.to_vec())));
                pos += consumed;
            }
            Parsed::Incomplete => return (events, rest.len() as isize),
            Parsed::Invalid(ProtocolError::Reply { reply, skip }) => {
                assert!(skip > 0);
                events.push(Event::Reply(reply.to_vec()));
                if skip > rest.len() {
                    return (events, rest.len() as isize - skip as isize);
                }
                pos += skip;
            }
            Parsed::Invalid(ProtocolError::Close { reply }) => {
                if !reply.is_empty() {
                    events.push(Event::Reply(reply.to_vec()));
                }
                events.push(Event::Close);
                return (events, 0);
            }
        }
    }
    (events, 0)
}

/// The bytes memcached 1.6.18 answers to `events` on a freshly flushed
/// server, for streams whose requests do not depend on earlier stores
/// (no key is read back or modified after being set), and whether the
/// connection was closed.
pub fn render_on_empty_cache(events: &[Event]) -> (Vec<u8>, bool) {
    let mut out = Vec::new();
    for event in events {
        match event {
            Event::Reply(reply) => out.extend_from_slice(reply),
            Event::Close => return (out, true),
            Event::Request(request) => {
                if request.noreply() {
                    continue;
                }
                let line: &[u8] = match request {
                    Request::Retrieval { .. } => b"END\r\n",
                    Request::Storage { command, .. } => match command {
                        StorageCommand::Set | StorageCommand::Add => b"STORED\r\n",
                        StorageCommand::Replace
                        | StorageCommand::Append
                        | StorageCommand::Prepend => b"NOT_STORED\r\n",
                        StorageCommand::Cas => b"NOT_FOUND\r\n",
                    },
                    Request::Arith { .. } | Request::Delete { .. } | Request::Touch { .. } => {
                        b"NOT_FOUND\r\n"
                    }
                    Request::FlushAll { .. } | Request::Verbosity { .. } => b"OK\r\n",
                    Request::Version => b"VERSION 1.6.18\r\n",
                    Request::Stats { group } => match group.as_deref() {
                        Some(b"reset") => b"RESET\r\n",
                        _ => panic!("stats output depends on the server"),
                    },
                    Request::Quit => return (out, true),
                };
                out.extend_from_slice(line);
            }
        }
    }
    (out, false)
}
