//! Client side of the text protocol, for talking to a legacy memcached pool.
//!
//! * Request encoders write one command into a `BytesMut`. Keys are checked
//!   first (1..=250 bytes, no space, `\n` or NUL, which would split or cut
//!   the line on the server); on error nothing is written.
//! * [`parse_reply`] reads one reply unit at a time from the front of a
//!   buffer: a `VALUE` item with its data, `END`, a status line, a number, a
//!   `STAT` line, a meta reply, or a `lru_crawler metadump` line.
//!
//! Formats as memcached 1.6.18 sends them (checked against a live server in
//! `tests/memcache_client.rs`).
//!
//! * here: the request encoders;
//! * `reply`: [`parse_reply`] and what it returns.

mod reply;

pub use reply::{
    decode_key, parse_reply, MetaFlags, MetaStatus, MetadumpEntry, ReplyError, ReplyResult,
    Response, MAX_REPLY_LINE,
};

use bytes::BytesMut;

use super::reply::put_u64;
use super::{ArithCommand, RetrievalCommand, StorageCommand, MAX_KEY_LEN};

/// A key the server would not read back as the same key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error("empty key")]
    EmptyKey,
    #[error("key longer than {MAX_KEY_LEN} bytes")]
    KeyTooLong,
    #[error("key contains a space, newline or NUL byte")]
    KeyHasSeparator,
    #[error("retrieval without keys")]
    NoKeys,
}

// ------------------------------------------------------------------ requests

fn check_key(key: &[u8]) -> Result<(), EncodeError> {
    if key.is_empty() {
        return Err(EncodeError::EmptyKey);
    }
    if key.len() > MAX_KEY_LEN {
        return Err(EncodeError::KeyTooLong);
    }
    if key.iter().any(|&b| b == b' ' || b == b'\n' || b == 0) {
        return Err(EncodeError::KeyHasSeparator);
    }
    Ok(())
}

fn put_i64(buf: &mut BytesMut, n: i64) {
    if n < 0 {
        buf.extend_from_slice(b"-");
    }
    put_u64(buf, n.unsigned_abs());
}

fn put_noreply(buf: &mut BytesMut, noreply: bool) {
    if noreply {
        buf.extend_from_slice(b" noreply");
    }
    buf.extend_from_slice(b"\r\n");
}

/// `get|gets|gat|gats [<exptime>] <key>+\r\n`. `exptime` is only written for
/// gat/gats. memcached reads exptimes as 32-bit: keep them within `i32`.
pub fn retrieval<K: AsRef<[u8]>>(
    buf: &mut BytesMut,
    command: RetrievalCommand,
    exptime: i64,
    keys: impl IntoIterator<Item = K>,
) -> Result<(), EncodeError> {
    let start = buf.len();
    buf.extend_from_slice(match command {
        RetrievalCommand::Get => b"get",
        RetrievalCommand::Gets => b"gets",
        RetrievalCommand::Gat => b"gat ",
        RetrievalCommand::Gats => b"gats ",
    });
    if matches!(command, RetrievalCommand::Gat | RetrievalCommand::Gats) {
        put_i64(buf, exptime);
    }
    let mut count = 0;
    for key in keys {
        let key = key.as_ref();
        if let Err(e) = check_key(key) {
            buf.truncate(start);
            return Err(e);
        }
        buf.extend_from_slice(b" ");
        buf.extend_from_slice(key);
        count += 1;
    }
    if count == 0 {
        buf.truncate(start);
        return Err(EncodeError::NoKeys);
    }
    buf.extend_from_slice(b"\r\n");
    Ok(())
}

/// `get <key>+\r\n`
pub fn get<K: AsRef<[u8]>>(
    buf: &mut BytesMut,
    keys: impl IntoIterator<Item = K>,
) -> Result<(), EncodeError> {
    retrieval(buf, RetrievalCommand::Get, 0, keys)
}

/// `gets <key>+\r\n`
pub fn gets<K: AsRef<[u8]>>(
    buf: &mut BytesMut,
    keys: impl IntoIterator<Item = K>,
) -> Result<(), EncodeError> {
    retrieval(buf, RetrievalCommand::Gets, 0, keys)
}

/// `gat <exptime> <key>+\r\n`
pub fn gat<K: AsRef<[u8]>>(
    buf: &mut BytesMut,
    exptime: i64,
    keys: impl IntoIterator<Item = K>,
) -> Result<(), EncodeError> {
    retrieval(buf, RetrievalCommand::Gat, exptime, keys)
}

/// `gats <exptime> <key>+\r\n`
pub fn gats<K: AsRef<[u8]>>(
    buf: &mut BytesMut,
    exptime: i64,
    keys: impl IntoIterator<Item = K>,
) -> Result<(), EncodeError> {
    retrieval(buf, RetrievalCommand::Gats, exptime, keys)
}

/// `set|add|replace|append|prepend <key> <flags> <exptime> <bytes> [noreply]\r\n<data>\r\n`.
/// For `StorageCommand::Cas` use [`cas`] (this writes a unique of 0).
pub fn storage(
    buf: &mut BytesMut,
    command: StorageCommand,
    key: &[u8],
    flags: u32,
    exptime: i64,
    data: &[u8],
    noreply: bool,
) -> Result<(), EncodeError> {
    put_storage(buf, command, key, flags, exptime, data, 0, noreply)
}

/// `cas <key> <flags> <exptime> <bytes> <cas unique> [noreply]\r\n<data>\r\n`
pub fn cas(
    buf: &mut BytesMut,
    key: &[u8],
    flags: u32,
    exptime: i64,
    data: &[u8],
    unique: u64,
    noreply: bool,
) -> Result<(), EncodeError> {
    put_storage(
        buf,
        StorageCommand::Cas,
        key,
        flags,
        exptime,
        data,
        unique,
        noreply,
    )
}

#[allow(clippy::too_many_arguments)]
fn put_storage(
    buf: &mut BytesMut,
    command: StorageCommand,
    key: &[u8],
    flags: u32,
    exptime: i64,
    data: &[u8],
    unique: u64,
    noreply: bool,
) -> Result<(), EncodeError> {
    check_key(key)?;
    buf.reserve(key.len() + data.len() + 80);
    buf.extend_from_slice(match command {
        StorageCommand::Set => b"set ",
        StorageCommand::Add => b"add ",
        StorageCommand::Replace => b"replace ",
        StorageCommand::Append => b"append ",
        StorageCommand::Prepend => b"prepend ",
        StorageCommand::Cas => b"cas ",
    });
    buf.extend_from_slice(key);
    buf.extend_from_slice(b" ");
    put_u64(buf, u64::from(flags));
    buf.extend_from_slice(b" ");
    put_i64(buf, exptime);
    buf.extend_from_slice(b" ");
    put_u64(buf, data.len() as u64);
    if command == StorageCommand::Cas {
        buf.extend_from_slice(b" ");
        put_u64(buf, unique);
    }
    put_noreply(buf, noreply);
    buf.extend_from_slice(data);
    buf.extend_from_slice(b"\r\n");
    Ok(())
}

/// `incr|decr <key> <delta> [noreply]\r\n`
pub fn arith(
    buf: &mut BytesMut,
    command: ArithCommand,
    key: &[u8],
    delta: u64,
    noreply: bool,
) -> Result<(), EncodeError> {
    check_key(key)?;
    buf.extend_from_slice(match command {
        ArithCommand::Incr => b"incr ",
        ArithCommand::Decr => b"decr ",
    });
    buf.extend_from_slice(key);
    buf.extend_from_slice(b" ");
    put_u64(buf, delta);
    put_noreply(buf, noreply);
    Ok(())
}

/// `delete <key> [noreply]\r\n`
pub fn delete(buf: &mut BytesMut, key: &[u8], noreply: bool) -> Result<(), EncodeError> {
    check_key(key)?;
    buf.extend_from_slice(b"delete ");
    buf.extend_from_slice(key);
    put_noreply(buf, noreply);
    Ok(())
}

/// `touch <key> <exptime> [noreply]\r\n`
pub fn touch(
    buf: &mut BytesMut,
    key: &[u8],
    exptime: i64,
    noreply: bool,
) -> Result<(), EncodeError> {
    check_key(key)?;
    buf.extend_from_slice(b"touch ");
    buf.extend_from_slice(key);
    buf.extend_from_slice(b" ");
    put_i64(buf, exptime);
    put_noreply(buf, noreply);
    Ok(())
}

/// `flush_all [<delay>] [noreply]\r\n`
pub fn flush_all(buf: &mut BytesMut, delay: Option<i64>, noreply: bool) {
    buf.extend_from_slice(b"flush_all");
    if let Some(delay) = delay {
        buf.extend_from_slice(b" ");
        put_i64(buf, delay);
    }
    put_noreply(buf, noreply);
}

/// `version\r\n`
pub fn version(buf: &mut BytesMut) {
    buf.extend_from_slice(b"version\r\n");
}

/// `mg <key> v f t\r\n`: value, client flags and remaining TTL in one round
/// trip. Answered by `VA <len> f<flags> t<ttl>` + data, or `EN` on a miss;
/// `t-1` means no expiry.
pub fn meta_get(buf: &mut BytesMut, key: &[u8]) -> Result<(), EncodeError> {
    check_key(key)?;
    buf.extend_from_slice(b"mg ");
    buf.extend_from_slice(key);
    buf.extend_from_slice(b" v f t\r\n");
    Ok(())
}

/// `mn\r\n`: answered by `MN`, marks the end of a pipeline.
pub fn meta_noop(buf: &mut BytesMut) {
    buf.extend_from_slice(b"mn\r\n");
}

/// `lru_crawler metadump all\r\n`: one `key=...` line per item, then `END`.
/// memcached refuses it (`ERROR cannot pipeline ...`) when other commands
/// are still pending on the connection: send it alone.
pub fn lru_crawler_metadump_all(buf: &mut BytesMut) {
    buf.extend_from_slice(b"lru_crawler metadump all\r\n");
}
