//! A minimal blocking RESP2 client, enough to look inside the Redis shards.

use std::io::{self, BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A RESP2 reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resp {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Resp>>),
}

impl Resp {
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Resp::Int(i) => Some(*i),
            _ => None,
        }
    }

    /// The elements of an array of bulk strings (e.g. `KEYS *`).
    pub fn as_bulk_list(&self) -> Option<Vec<Vec<u8>>> {
        match self {
            Resp::Array(Some(items)) => items
                .iter()
                .map(|i| match i {
                    Resp::Bulk(Some(b)) => Some(b.clone()),
                    _ => None,
                })
                .collect(),
            _ => None,
        }
    }
}

fn encode(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// One blocking connection to a Redis server.
pub struct RedisClient {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl RedisClient {
    pub fn connect(addr: &str, timeout: Duration) -> io::Result<Self> {
        let sock: std::net::SocketAddr = addr
            .parse()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{addr}: {e}")))?;
        let stream = TcpStream::connect_timeout(&sock, timeout)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        stream.set_nodelay(true)?;
        let writer = stream.try_clone()?;
        Ok(RedisClient {
            reader: BufReader::new(stream),
            writer,
        })
    }

    /// Sends one command and reads its reply.
    pub fn cmd(&mut self, args: &[&[u8]]) -> io::Result<Resp> {
        let mut out = Vec::new();
        encode(&mut out, args);
        self.writer.write_all(&out)?;
        self.read_reply(0)
    }

    /// Sends several commands in one write, then reads their replies.
    pub fn pipeline(&mut self, cmds: &[&[&[u8]]]) -> io::Result<Vec<Resp>> {
        let mut out = Vec::new();
        for args in cmds {
            encode(&mut out, args);
        }
        self.writer.write_all(&out)?;
        cmds.iter().map(|_| self.read_reply(0)).collect()
    }

    fn read_line(&mut self) -> io::Result<Vec<u8>> {
        let mut line = Vec::new();
        let n = self.reader.read_until(b'\n', &mut line)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "redis closed the connection",
            ));
        }
        if !line.ends_with(b"\r\n") {
            return Err(bad("RESP line without CRLF"));
        }
        line.truncate(line.len() - 2);
        Ok(line)
    }

    fn read_reply(&mut self, depth: usize) -> io::Result<Resp> {
        if depth > 16 {
            return Err(bad("RESP nesting too deep"));
        }
        let line = self.read_line()?;
        let (kind, rest) = line.split_first().ok_or_else(|| bad("empty RESP line"))?;
        let text = String::from_utf8_lossy(rest).into_owned();
        match kind {
            b'+' => Ok(Resp::Simple(text)),
            b'-' => Ok(Resp::Error(text)),
            b':' => text.parse().map(Resp::Int).map_err(|_| bad("bad integer")),
            b'$' => {
                let len: i64 = text.parse().map_err(|_| bad("bad bulk length"))?;
                if len < 0 {
                    return Ok(Resp::Bulk(None));
                }
                let mut data = vec![0u8; len as usize + 2];
                io::Read::read_exact(&mut self.reader, &mut data)?;
                data.truncate(len as usize);
                Ok(Resp::Bulk(Some(data)))
            }
            b'*' => {
                let len: i64 = text.parse().map_err(|_| bad("bad array length"))?;
                if len < 0 {
                    return Ok(Resp::Array(None));
                }
                let mut items = Vec::with_capacity(len as usize);
                for _ in 0..len {
                    items.push(self.read_reply(depth + 1)?);
                }
                Ok(Resp::Array(Some(items)))
            }
            _ => Err(bad("unknown RESP type")),
        }
    }
}

fn bad(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_string())
}
