//! `memshift-floor`: the least a memcached → Redis hop costs on this
//! machine, to compare memshift's proxy CPU with (issue 27; BENCHMARKS.md,
//! "The floor of a hop").
//!
//! One thread and one epoll loop: no runtime, no tasks, no timers, no
//! metrics, no clock read but the one a `set` makes for its exptime, as
//! memshift's does. It uses memshift's own parser, ring, and translation
//! to Redis and its item layout (`memshift_proxy::redis::translate` and
//! `encoding`, docs/storage.md): a text `get <key>` becomes `GET key`, a
//! `set` becomes `SET key <header+data>` (with a CAS of 0: memshift's own
//! comes from a per-session counter).
//! The requests read in one loop turn go to each shard in one write (the
//! batching memshift's connection task gets by yielding a scheduler pass),
//! and each client's replies go out in one write per turn, in order.
//!
//! It is an instrument, not a proxy: it serves single-key `get` and `set`
//! (what `memshift-load` sends), answers any other command `ERROR`, closes
//! a client on a protocol error, has no timeouts, and stops when a shard
//! closes its connection.

use std::collections::VecDeque;
use std::io::{self, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

use bytes::{Buf, BytesMut};
use memshift_protocol::memcache::{
    reply, unix_now, ParseLimits, Parsed, Request, RetrievalCommand, StorageCommand,
};
use memshift_protocol::resp::{Frame, ReplyParser};
use memshift_proxy::redis::encoding;
use memshift_proxy::redis::translate::{self, Expiry};
use memshift_ring::{Ring, RingConfig, ShardSpec};

use crate::epoll::Epoll;

const LISTENER: u64 = u64::MAX;
/// Tokens with this bit are shards; the others index `clients`.
const SHARD: u64 = 1 << 62;
const READ_CHUNK: usize = 16 * 1024;
const EVENTS: usize = 256;

/// A request sent to a shard, waiting for its reply.
struct InFlight {
    client: usize,
    generation: u32,
    /// The request's place in its client's reply order.
    seq: u64,
    kind: Kind,
}

enum Kind {
    /// The key's bytes are next in the shard's `keys`.
    Get {
        key_len: usize,
    },
    Set {
        noreply: bool,
    },
}

struct Shard {
    sock: TcpStream,
    rbuf: BytesMut,
    wbuf: BytesMut,
    parser: ReplyParser,
    in_flight: VecDeque<InFlight>,
    /// The keys of the gets in `in_flight`, back to back (a `get` reply names its
    /// key); `keys_read` bytes of it are answered.
    keys: Vec<u8>,
    keys_read: usize,
}

struct Client {
    sock: TcpStream,
    rbuf: BytesMut,
    wbuf: BytesMut,
    /// Replies not yet in `wbuf`, in request order: `None` waits for its
    /// shard, `Some` arrived before a reply ahead of it.
    waiting: VecDeque<Option<BytesMut>>,
    /// Sequence number of `waiting`'s front.
    head: u64,
    generation: u32,
    dirty: bool,
}

impl Client {
    /// Put client `i` (this one) on the turn's flush list, once.
    fn flush_this_turn(&mut self, i: usize, dirty_clients: &mut Vec<usize>) {
        if !self.dirty {
            self.dirty = true;
            dirty_clients.push(i);
        }
    }
}

/// The loop's state.
pub struct Floor {
    epoll: Epoll,
    listener: TcpListener,
    ring: Ring,
    shards: Vec<Shard>,
    clients: Vec<Option<Client>>,
    /// Bumped when a client slot is reused, so replies for a closed client
    /// are dropped.
    generations: Vec<u32>,
    free: Vec<usize>,
    dirty_clients: Vec<usize>,
    limits: ParseLimits,
    /// After a turn that had work, sleep this long before the next
    /// `epoll_wait`, so that one wake-up finds many requests (an experiment:
    /// fewer context switches per request for added latency).
    coalesce: Option<Duration>,
}

impl Floor {
    /// Listen on `listener` and connect to `shards` (placed on memshift's
    /// ring with its default settings).
    /// `coalesce`: see [`Floor::run`].
    pub fn new(
        listener: TcpListener,
        shards: &[SocketAddr],
        coalesce: Option<Duration>,
    ) -> io::Result<Floor> {
        let specs: Vec<ShardSpec> = shards
            .iter()
            .map(|a| ShardSpec::new(a.to_string(), 1))
            .collect();
        let ring = Ring::new(&specs, RingConfig::default())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        let epoll = Epoll::new()?;
        listener.set_nonblocking(true)?;
        epoll.add(listener.as_raw_fd(), LISTENER as usize)?;
        let mut connected = Vec::with_capacity(shards.len());
        for (i, addr) in shards.iter().enumerate() {
            let sock = TcpStream::connect(addr)?;
            sock.set_nodelay(true)?;
            sock.set_nonblocking(true)?;
            epoll.add(sock.as_raw_fd(), (SHARD | i as u64) as usize)?;
            connected.push(Shard {
                sock,
                rbuf: BytesMut::with_capacity(READ_CHUNK),
                wbuf: BytesMut::with_capacity(READ_CHUNK),
                parser: ReplyParser::new(),
                in_flight: VecDeque::with_capacity(256),
                keys: Vec::with_capacity(4096),
                keys_read: 0,
            });
        }
        Ok(Floor {
            epoll,
            listener,
            ring,
            shards: connected,
            clients: Vec::new(),
            generations: Vec::new(),
            free: Vec::new(),
            dirty_clients: Vec::new(),
            limits: ParseLimits::default(),
            coalesce,
        })
    }

    /// Serve until a shard fails. With `coalesce`, each turn that had work
    /// ends with a sleep of that long.
    pub fn run(mut self) -> io::Result<()> {
        let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; EVENTS];
        loop {
            let ready = match self.epoll.wait(&mut events, Duration::from_secs(1)) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => 0,
                Err(e) => return Err(e),
            };
            for ev in &events[..ready] {
                let token = ev.u64;
                if token == LISTENER {
                    self.accept()?;
                } else if token & SHARD != 0 {
                    self.on_shard((token & !SHARD) as usize)?;
                } else {
                    self.on_client(token as usize);
                }
            }
            self.flush()?;
            if let Some(pause) = self.coalesce.filter(|_| ready > 0) {
                std::thread::sleep(pause);
            }
        }
    }

    fn accept(&mut self) -> io::Result<()> {
        loop {
            let sock = match self.listener.accept() {
                Ok((sock, _)) => sock,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // Out of fds and the like: the client sees its connection closed.
                Err(_) => return Ok(()),
            };
            sock.set_nodelay(true)?;
            sock.set_nonblocking(true)?;
            let i = match self.free.pop() {
                Some(i) => i,
                None => {
                    self.clients.push(None);
                    self.generations.push(0);
                    self.clients.len() - 1
                }
            };
            self.epoll.add(sock.as_raw_fd(), i)?;
            self.clients[i] = Some(Client {
                sock,
                rbuf: BytesMut::with_capacity(READ_CHUNK),
                wbuf: BytesMut::with_capacity(READ_CHUNK),
                waiting: VecDeque::with_capacity(16),
                head: 0,
                generation: self.generations[i],
                dirty: false,
            });
        }
    }

    /// Readiness on a client: read what is there, send its requests on.
    /// (Writability needs nothing here: every turn ends with a flush.)
    fn on_client(&mut self, i: usize) {
        let Some(Some(c)) = self.clients.get_mut(i) else {
            return;
        };
        // A read error closes the client like its end of stream.
        let open = read_all(c.sock.as_raw_fd(), &mut c.rbuf).unwrap_or_default();
        let ok = self.dispatch(i);
        if !open || !ok {
            self.close(i);
        } else if let Some(Some(c)) = self.clients.get_mut(i) {
            if !c.wbuf.is_empty() {
                c.flush_this_turn(i, &mut self.dirty_clients);
            }
        }
    }

    /// Every complete request in client `i`'s buffer, in order; `false` on
    /// input to close the connection for.
    fn dispatch(&mut self, i: usize) -> bool {
        let Some(Some(c)) = self.clients.get_mut(i) else {
            return false;
        };
        loop {
            let (request, consumed) =
                match memshift_protocol::memcache::parse_request(&c.rbuf, &self.limits) {
                    Parsed::Complete { request, consumed } => (request, consumed),
                    Parsed::Incomplete => return true,
                    Parsed::Invalid(_) => return false,
                };
            let seq = c.head + c.waiting.len() as u64;
            let sent = match request {
                Request::Retrieval {
                    command: RetrievalCommand::Get,
                    keys,
                    ..
                } if keys.len() == 1 => keys.iter().next().map(|key| {
                    let shard = &mut self.shards[self.ring.locate(key)];
                    translate::get(&mut shard.wbuf, key);
                    shard.keys.extend_from_slice(key);
                    (shard, Kind::Get { key_len: key.len() })
                }),
                Request::Storage {
                    command: StorageCommand::Set,
                    key,
                    flags,
                    exptime,
                    data,
                    noreply,
                    ..
                } => {
                    let shard = &mut self.shards[self.ring.locate(key)];
                    let expiry = Expiry::from_exptime(exptime, unix_now());
                    let set = StorageCommand::Set;
                    translate::store(&mut shard.wbuf, set, key, flags, 0, data, expiry);
                    Some((shard, Kind::Set { noreply }))
                }
                _ => None,
            };
            c.waiting.push_back(None);
            match sent {
                Some((shard, kind)) => {
                    shard.in_flight.push_back(InFlight {
                        client: i,
                        generation: c.generation,
                        seq,
                        kind,
                    });
                }
                None => answer(c, seq, |buf| buf.extend_from_slice(b"ERROR\r\n")),
            }
            c.rbuf.advance(consumed);
        }
    }

    /// Readiness on a shard: read its replies and hand each to its client.
    fn on_shard(&mut self, s: usize) -> io::Result<()> {
        let shard = &mut self.shards[s];
        if !read_all(shard.sock.as_raw_fd(), &mut shard.rbuf)? {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "a shard closed",
            ));
        }
        loop {
            let frame = match shard.parser.parse(&mut shard.rbuf) {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e.to_string())),
            };
            let Some(sent) = shard.in_flight.pop_front() else {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "a reply without a request",
                ));
            };
            let key = match sent.kind {
                Kind::Get { key_len } => {
                    let key = shard
                        .keys
                        .get(shard.keys_read..shard.keys_read + key_len)
                        .unwrap_or_default();
                    shard.keys_read += key_len;
                    key
                }
                Kind::Set { .. } => &[],
            };
            let client = match self.clients.get_mut(sent.client) {
                Some(Some(c)) if c.generation == sent.generation => c,
                _ => continue,
            };
            answer(client, sent.seq, |buf| render(buf, &sent.kind, key, &frame));
            client.flush_this_turn(sent.client, &mut self.dirty_clients);
        }
        if shard.in_flight.is_empty() {
            shard.keys.clear();
            shard.keys_read = 0;
        }
        Ok(())
    }

    /// End of a turn: one write per shard and per client with something to send.
    fn flush(&mut self) -> io::Result<()> {
        for shard in &mut self.shards {
            write_some(&mut shard.sock, &mut shard.wbuf)?;
        }
        let mut dirty = std::mem::take(&mut self.dirty_clients);
        for &i in &dirty {
            let Some(Some(c)) = self.clients.get_mut(i) else {
                continue;
            };
            c.dirty = false;
            if write_some(&mut c.sock, &mut c.wbuf).is_err() {
                self.close(i);
            }
        }
        dirty.clear();
        self.dirty_clients = dirty;
        Ok(())
    }

    fn close(&mut self, i: usize) {
        if let Some(c) = self.clients.get_mut(i).and_then(Option::take) {
            self.epoll.remove(c.sock.as_raw_fd());
            self.generations[i] = self.generations[i].wrapping_add(1);
            self.free.push(i);
        }
    }
}

/// Put the reply for request `seq` in order: straight into the write buffer
/// when every reply before it is there, else held until they are.
fn answer(c: &mut Client, seq: u64, render: impl FnOnce(&mut BytesMut)) {
    let Some(at) = seq.checked_sub(c.head).map(|d| d as usize) else {
        return;
    };
    if at != 0 {
        let mut held = BytesMut::new();
        render(&mut held);
        if let Some(slot) = c.waiting.get_mut(at) {
            *slot = Some(held);
        }
        return;
    }
    render(&mut c.wbuf);
    c.waiting.pop_front();
    c.head += 1;
    while let Some(Some(_)) = c.waiting.front() {
        if let Some(Some(held)) = c.waiting.pop_front() {
            c.wbuf.extend_from_slice(&held);
        }
        c.head += 1;
    }
}

/// The memcached reply for a Redis reply.
fn render(buf: &mut BytesMut, kind: &Kind, key: &[u8], frame: &Frame) {
    match (kind, frame) {
        (Kind::Set { noreply: true }, _) => {}
        (Kind::Set { .. }, Frame::Simple(_)) => buf.extend_from_slice(b"STORED\r\n"),
        (Kind::Get { .. }, Frame::Bulk(v)) => {
            // Not memshift's layout: a miss, as memshift answers it.
            if let Some(item) = encoding::decode(v) {
                reply::value(buf, key, item.flags, &item.data, None);
            }
            buf.extend_from_slice(b"END\r\n");
        }
        (Kind::Get { .. }, Frame::Null) => buf.extend_from_slice(b"END\r\n"),
        _ => buf.extend_from_slice(b"SERVER_ERROR backend error\r\n"),
    }
}

/// Read until the socket has nothing more (a short read means drained: the
/// next arrival raises a new edge). `Ok(false)`: the peer closed.
fn read_all(fd: RawFd, buf: &mut BytesMut) -> io::Result<bool> {
    loop {
        if buf.capacity() - buf.len() < READ_CHUNK / 4 {
            buf.reserve(READ_CHUNK);
        }
        let spare = buf.spare_capacity_mut();
        let room = spare.len();
        // SAFETY: `spare` is writable memory of `room` bytes owned by `buf`.
        let n = unsafe { libc::recv(fd, spare.as_mut_ptr().cast(), room, 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock => Ok(true),
                io::ErrorKind::Interrupted => continue,
                _ => Err(e),
            };
        }
        if n == 0 {
            return Ok(false);
        }
        // SAFETY: the kernel initialised the first `n` bytes of `spare`.
        unsafe { buf.set_len(buf.len() + n as usize) };
        if (n as usize) < room {
            return Ok(true);
        }
    }
}

/// Write what fits now; the rest waits for the next turn (an `EPOLLOUT`
/// edge starts one).
fn write_some(sock: &mut TcpStream, buf: &mut BytesMut) -> io::Result<()> {
    while !buf.is_empty() {
        match sock.write(buf) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => buf.advance(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::{SocketAddr, TcpListener, TcpStream};
    use std::time::Duration;

    use super::Floor;
    use crate::harness::{exchange, start_redis};

    /// The floor over two real shards: a pipeline of sets, gets and a
    /// command it does not serve, answered in order (replies from the two
    /// shards interleave), in memshift's item layout on the shard.
    #[test]
    fn answers_a_pipeline_in_order_over_two_shards() {
        let dir = tempfile::tempdir().expect("tempdir");
        let shards = [start_redis(dir.path()), start_redis(dir.path())];
        let shards: Vec<_> = match shards {
            [Ok(a), Ok(b)] => vec![a, b],
            [a, b] => {
                eprintln!("skipped: no redis-server ({:?})", a.err().or(b.err()));
                return;
            }
        };
        let addrs: Vec<SocketAddr> = shards.iter().map(|p| p.addr).collect();
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let floor = Floor::new(listener, &addrs, None).expect("floor");
        std::thread::spawn(move || floor.run());

        let mut request = Vec::new();
        let mut expected = Vec::new();
        for i in 0..40u32 {
            let key = format!("k{i}");
            request.extend_from_slice(format!("set {key} {i} 0 2\r\nv{}\r\n", i % 10).as_bytes());
            request.extend_from_slice(format!("get {key}\r\nget missing{i}\r\n").as_bytes());
            expected.extend_from_slice(b"STORED\r\n");
            expected.extend_from_slice(
                format!("VALUE {key} {i} 2\r\nv{}\r\nEND\r\n", i % 10).as_bytes(),
            );
            expected.extend_from_slice(b"END\r\n");
        }
        request.extend_from_slice(b"version\r\nset q 0 0 1 noreply\r\nq\r\nget q\r\n");
        expected.extend_from_slice(b"ERROR\r\nVALUE q 0 1\r\nq\r\nEND\r\n");

        let mut client = TcpStream::connect(addr).expect("connect");
        client
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        client.write_all(&request).expect("write");
        let mut got = vec![0u8; expected.len()];
        client.read_exact(&mut got).expect("read the replies");
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(&expected)
        );

        // Both shards got keys, each in memshift's layout: version 1,
        // flags, a zero CAS, the data.
        for shard in &shards {
            let keys = exchange(shard.addr, b"DBSIZE\r\n", b"\r\n").expect("DBSIZE");
            assert_ne!(keys, b":0\r\n", "a shard got no key");
        }
        let mut stored = Vec::new();
        for shard in &shards {
            if let Some(v) = exchange(shard.addr, b"GET k7\r\n", b"\r\n") {
                if v != b"$-1\r\n" {
                    stored = exchange(shard.addr, b"GET k7\r\n", b"v7\r\n").expect("GET k7");
                }
            }
        }
        let mut want = b"$15\r\n\x01\0\0\0\x07".to_vec();
        want.extend_from_slice(&[0; 8]);
        want.extend_from_slice(b"v7\r\n");
        assert_eq!(stored, want);
    }
}
