//! Shared helpers for the memcache tests: replay a byte stream through the
//! parser the way a session does (honouring `skip`), and render the replies
//! memcached would send for requests run against an empty cache.
#![allow(dead_code)]

use bytes::BytesMut;
use memshift_protocol::memcache::{
    base64, parse_request, reply, MetaCommand, MetaSetMode, ParseLimits, Parsed, ProtocolError,
    Request, StatsGroup, StorageCommand,
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
            Parsed::Invalid(ProtocolError::Reply { reply, skip, .. }) => {
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
                    Request::Stats(StatsGroup::Reset) => b"RESET\r\n",
                    Request::Stats(_) | Request::Admin { .. } => {
                        panic!("admin replies depend on the server")
                    }
                    Request::Quit => return (out, true),
                    Request::MetaNoop => b"MN\r\n",
                    Request::Meta {
                        command,
                        key,
                        tokens,
                        flags,
                        ..
                    } => {
                        let code: &[u8] = match command {
                            MetaCommand::Get if flags.vivify.is_some() => {
                                panic!("a created item's reply depends on the server")
                            }
                            MetaCommand::Debug => {
                                out.extend_from_slice(b"EN\r\n");
                                continue;
                            }
                            MetaCommand::Get if flags.quiet => continue,
                            MetaCommand::Get => b"EN",
                            MetaCommand::Delete => b"NF",
                            MetaCommand::Arith if flags.vivify.is_some() => {
                                panic!("a created counter's reply depends on the server")
                            }
                            MetaCommand::Arith => b"NF",
                            MetaCommand::Set => {
                                if tokens
                                    .split(|&b| b == b' ')
                                    .any(|t| t.first() == Some(&b'c'))
                                {
                                    panic!("CAS uniques depend on the server");
                                }
                                match (flags.set_mode, flags.compare_cas) {
                                    (MetaSetMode::Set | MetaSetMode::Replace, Some(_)) => b"NF",
                                    (MetaSetMode::Set | MetaSetMode::Add, None) if flags.quiet => {
                                        continue
                                    }
                                    (MetaSetMode::Set | MetaSetMode::Add, _) => b"HD",
                                    _ => b"NS",
                                }
                            }
                        };
                        let decoded;
                        let key: &[u8] = if flags.base64 {
                            decoded = base64::decode(key).unwrap_or_default();
                            &decoded
                        } else {
                            key
                        };
                        let mut line = BytesMut::new();
                        line.extend_from_slice(code);
                        reply::meta_flags(
                            &mut line,
                            tokens,
                            key,
                            flags.base64,
                            &reply::MetaReturn::default(),
                        );
                        line.extend_from_slice(b"\r\n");
                        out.extend_from_slice(&line);
                        continue;
                    }
                };
                out.extend_from_slice(line);
            }
        }
    }
    (out, false)
}

/// A memcached process on a free local port, killed on drop.
pub struct Memcached {
    child: std::process::Child,
    pub port: u16,
}

impl Memcached {
    /// Start `memcached` (or `$MEMCACHED_BIN`) with `extra` arguments.
    /// `None`, after saying so on stderr, when the binary is not installed.
    pub fn start(extra: &[&str]) -> Option<Memcached> {
        let bin = std::env::var("MEMCACHED_BIN").unwrap_or_else(|_| "memcached".to_string());
        let found = std::process::Command::new(&bin)
            .arg("-V")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok();
        if !found {
            eprintln!("memcached binary `{bin}` not found: skipping live test");
            return None;
        }
        for _ in 0..10 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map(|a| a.port())
                .expect("free port");
            let mut command = std::process::Command::new(&bin);
            command.args(["-l", "127.0.0.1", "-p", &port.to_string(), "-U", "0"]);
            // memcached refuses to run as root without -u.
            if running_as_root() {
                command.args(["-u", "root"]);
            }
            command.args(extra);
            command.stdout(std::process::Stdio::null());
            command.stderr(std::process::Stdio::null());
            let mut child = command.spawn().expect("spawn memcached");
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            while std::time::Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break; // port taken meanwhile: try another
                }
                // Ours (its `stats` pid), not another run's server that
                // took the port first (ours then fails to bind, but may
                // not have exited yet).
                if answers_as(port, child.id()) {
                    return Some(Memcached { child, port });
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("memcached did not start");
    }

    pub fn connect(&self) -> std::net::TcpStream {
        let stream = std::net::TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        stream.set_nodelay(true).ok();
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .ok();
        stream
    }
}

impl Drop for Memcached {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The memcached answering on `port` is process `pid` (from its `stats`).
fn answers_as(port: u16, pid: u32) -> bool {
    use std::io::{Read, Write};
    let Ok(mut conn) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let timeout = Some(std::time::Duration::from_millis(500));
    if conn.set_read_timeout(timeout).is_err() || conn.write_all(b"stats\r\n").is_err() {
        return false;
    }
    let mut reply = Vec::new();
    let mut chunk = [0u8; 4096];
    while !reply.ends_with(b"END\r\n") {
        match conn.read(&mut chunk) {
            Ok(n) if n > 0 => reply.extend_from_slice(&chunk[..n]),
            _ => return false,
        }
    }
    String::from_utf8_lossy(&reply).contains(&format!("STAT pid {pid}\r\n"))
}

fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).map(|uid| uid == "0"))
        })
        .unwrap_or(false)
}

pub mod invariants;

/// One parse of `input` with the default limits.
pub fn parse(input: &[u8]) -> Parsed<'_> {
    parse_request(input, &ParseLimits::default())
}

/// The request `input` holds, which must be exactly one complete request.
pub fn complete(input: &[u8]) -> Request<&[u8]> {
    match parse(input) {
        Parsed::Complete { request, consumed } => {
            assert_eq!(consumed, input.len(), "consumed for {input:?}");
            request
        }
        other => panic!("{input:?}: expected a request, got {other:?}"),
    }
}

/// The error reply for the first request in `input` and the bytes skipped.
pub fn rejected(input: &[u8]) -> (&'static [u8], usize) {
    match parse(input) {
        Parsed::Invalid(ProtocolError::Reply { reply, skip, .. }) => (reply, skip),
        other => panic!("{input:?}: expected an error reply, got {other:?}"),
    }
}
