//! A Redis Cluster's topology: which master serves which slots, read from
//! `CLUSTER SHARDS` (Redis 7) or `CLUSTER SLOTS` (older), and the blocking
//! first read from the seed nodes at start.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};

use bytes::BytesMut;
use memshift_protocol::resp::{encode_command, Frame, ReplyParser};

use super::connection::ConnectionSettings;

/// Masters and the slot ranges they serve, and every node's address.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Topology {
    /// (first slot, last slot, master address).
    pub ranges: Vec<(u16, u16, String)>,
    /// Every node: masters first, then replicas (a replica may be promoted).
    pub nodes: Vec<String>,
}

impl Topology {
    fn add_node(&mut self, addr: &str) {
        if !self.nodes.iter().any(|n| n == addr) {
            self.nodes.push(addr.to_string());
        }
    }

    /// Parse a `CLUSTER SHARDS` reply (RESP2: each map a flat key/value array).
    pub fn from_shards(frame: &Frame) -> Option<Topology> {
        let Frame::Array(shards) = frame else {
            return None;
        };
        let mut t = Topology::default();
        let mut replicas = Vec::new();
        for shard in shards {
            let slots = field(shard, b"slots")?;
            let Frame::Array(nodes) = field(shard, b"nodes")? else {
                return None;
            };
            let mut master = None;
            for node in nodes {
                let addr = node_addr(node)?;
                let role = bulk(field(node, b"role")?)?;
                let online = field(node, b"health").and_then(bulk) != Some(b"fail");
                if role == b"master" && online {
                    master = Some(addr);
                } else {
                    replicas.push(addr);
                }
            }
            let (Some(master), Frame::Array(slots)) = (master, slots) else {
                continue;
            };
            for pair in slots.chunks(2) {
                if let [Frame::Integer(a), Frame::Integer(b)] = pair {
                    t.ranges.push((slot(*a)?, slot(*b)?, master.clone()));
                }
            }
            t.add_node(&master);
        }
        for r in replicas {
            t.add_node(&r);
        }
        (!t.ranges.is_empty()).then_some(t)
    }

    /// Parse a `CLUSTER SLOTS` reply: `[start, end, [ip, port, id], replicas…]`.
    pub fn from_slots(frame: &Frame) -> Option<Topology> {
        let Frame::Array(ranges) = frame else {
            return None;
        };
        let mut t = Topology::default();
        let mut replicas = Vec::new();
        for range in ranges {
            let Frame::Array(items) = range else {
                return None;
            };
            let [Frame::Integer(a), Frame::Integer(b), master, rest @ ..] = &items[..] else {
                return None;
            };
            let master = slots_node(master)?;
            t.ranges.push((slot(*a)?, slot(*b)?, master.clone()));
            t.add_node(&master);
            replicas.extend(rest.iter().filter_map(slots_node));
        }
        for r in replicas {
            t.add_node(&r);
        }
        (!t.ranges.is_empty()).then_some(t)
    }
}

fn slot(n: i64) -> Option<u16> {
    u16::try_from(n)
        .ok()
        .filter(|&s| s < memshift_ring::SLOT_COUNT)
}

fn bulk(f: &Frame) -> Option<&[u8]> {
    match f {
        Frame::Bulk(b) | Frame::Simple(b) => Some(b),
        _ => None,
    }
}

/// The value under `key` in a RESP2 map (a flat key/value array).
fn field<'f>(map: &'f Frame, key: &[u8]) -> Option<&'f Frame> {
    let Frame::Array(items) = map else {
        return None;
    };
    items
        .chunks(2)
        .find(|kv| bulk(&kv[0]) == Some(key))
        .and_then(|kv| kv.get(1))
}

/// `host:port` of a `CLUSTER SHARDS` node: its endpoint (what redirects
/// name), else its ip.
fn node_addr(node: &Frame) -> Option<String> {
    let port = match field(node, b"port")? {
        Frame::Integer(p) => *p,
        _ => return None,
    };
    let host = field(node, b"endpoint")
        .and_then(bulk)
        .filter(|h| !h.is_empty() && *h != b"?")
        .or_else(|| field(node, b"ip").and_then(bulk))?;
    Some(format!("{}:{port}", std::str::from_utf8(host).ok()?))
}

fn slots_node(node: &Frame) -> Option<String> {
    let Frame::Array(items) = node else {
        return None;
    };
    match &items[..] {
        [host, Frame::Integer(port), ..] => {
            Some(format!("{}:{port}", std::str::from_utf8(bulk(host)?).ok()?))
        }
        _ => None,
    }
}

/// Read the topology from the first seed that gives one. Blocking: run at
/// start and reload only (later refreshes go through the pipelines).
pub fn discover(seeds: &[String], settings: &ConnectionSettings) -> Result<Topology, String> {
    let mut why = Vec::new();
    for seed in seeds {
        match discover_from(seed, settings) {
            Ok(t) => return Ok(t),
            Err(e) => why.push(format!("{seed}: {e}")),
        }
    }
    Err(format!(
        "redis.cluster_nodes: no seed gave the cluster's slot map ({})",
        why.join("; ")
    ))
}

fn discover_from(seed: &str, settings: &ConnectionSettings) -> Result<Topology, String> {
    // Over TLS, `CLUSTER SHARDS` lists a node's plaintext `port` next to
    // its `tls-port`; `CLUSTER SLOTS` answers with the ports of the asking
    // connection's kind, as `-MOVED` does.
    if settings.tls.is_none() {
        let reply = query(seed, settings, &[b"CLUSTER", b"SHARDS"])?;
        if let Some(t) = Topology::from_shards(&reply) {
            return Ok(t);
        }
    }
    let reply = query(seed, settings, &[b"CLUSTER", b"SLOTS"])?;
    Topology::from_slots(&reply).ok_or_else(|| match reply {
        Frame::Error(e) => String::from_utf8_lossy(&e).into_owned(),
        _ => "no slots assigned".to_string(),
    })
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

/// One command on a fresh blocking connection (after `AUTH` when set).
pub(super) fn query(
    addr: &str,
    settings: &ConnectionSettings,
    cmd: &[&[u8]],
) -> Result<Frame, String> {
    let sock = addr
        .to_socket_addrs()
        .map_err(|e| e.to_string())?
        .next()
        .ok_or("no address")?;
    let tcp =
        TcpStream::connect_timeout(&sock, settings.connect_timeout).map_err(|e| e.to_string())?;
    tcp.set_read_timeout(Some(settings.connect_timeout + settings.timeout))
        .map_err(|e| e.to_string())?;
    // `redis.tls`: the same TLS as the nodes' pipelined connections.
    let mut tcp: Box<dyn ReadWrite> = match &settings.tls {
        None => Box::new(tcp),
        Some(tls) => Box::new(crate::tls::connect_shard_blocking(tls, tcp)?),
    };
    let mut out = BytesMut::new();
    let mut skip = 0;
    if let Some(password) = &settings.password {
        match &settings.username {
            Some(u) => encode_command(&mut out, &[b"AUTH", u.as_bytes(), password.as_bytes()]),
            None => encode_command(&mut out, &[b"AUTH", password.as_bytes()]),
        }
        skip = 1;
    }
    encode_command(&mut out, cmd);
    tcp.write_all(&out).map_err(|e| e.to_string())?;
    let mut parser = ReplyParser::new();
    let mut buf = BytesMut::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        match parser.parse(&mut buf).map_err(|e| e.to_string())? {
            Some(Frame::Error(e)) if skip > 0 => {
                return Err(format!("AUTH: {}", String::from_utf8_lossy(&e)))
            }
            Some(_) if skip > 0 => skip -= 1,
            Some(frame) => return Ok(frame),
            None => {
                let n = tcp.read(&mut chunk).map_err(|e| e.to_string())?;
                if n == 0 {
                    return Err("connection closed".into());
                }
                buf.extend_from_slice(&chunk[..n]);
            }
        }
    }
}
