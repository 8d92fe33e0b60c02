//! `me <key>`: memcached's item dump, `ME <key> exp=… la=… cas=… fetch=…
//! cls=… size=…`, from what Redis knows. `exp` is memcached 1.6.18's
//! (minus the remaining TTL, `-1` without one), `la` is Redis' idle time
//! (its LRU clock, one-second resolution; 0 under an LFU policy), `fetch`
//! is the mark meta gets leave, and `cls`/`size` are what memcached with
//! its default slab settings would use for an item of this key, data and
//! flags (the memory Redis uses is not reported).

use bytes::BytesMut;
use memshift_protocol::memcache::{base64, reply};
use memshift_protocol::resp::Frame;

use super::{MetaOp, Outcome};
use crate::redis::encoding::{self, STATE_FETCHED, STATE_KEY_BINARY};

/// memcached 1.6.18's item header (`sizeof(item)` on 64-bit) and CAS.
const ITEM_HEADER: u64 = 48;
const CAS_SIZE: u64 = 8;
/// Default slab settings: `-n 48`, `-f 1.25`, 512 KB largest chunk.
const FIRST_CHUNK: u64 = ITEM_HEADER + 48;
const FACTOR: f64 = 1.25;
const CHUNK_MAX: u64 = 512 * 1024;

/// The slab class memcached's defaults put an item of `size` bytes in (the
/// largest one for chunked items).
fn slab_class(size: u64) -> u64 {
    let mut chunk = FIRST_CHUNK;
    let mut class = 1;
    loop {
        // memcached aligns every chunk size to 8 bytes.
        chunk = chunk.next_multiple_of(8);
        if size <= chunk {
            return class;
        }
        let next = (chunk as f64 * FACTOR) as u64;
        class += 1;
        if next as f64 >= CHUNK_MAX as f64 / FACTOR {
            return class;
        }
        chunk = next;
    }
}

/// memcached's `ITEM_ntotal`: header, key and its NUL, data and `\r\n`,
/// CAS, and the flags when they are not 0.
fn item_size(key_len: usize, data_len: usize, flags: u32) -> u64 {
    ITEM_HEADER
        + key_len as u64
        + 1
        + data_len as u64
        + 2
        + CAS_SIZE
        + if flags != 0 { 4 } else { 0 }
}

pub(super) fn render(op: &MetaOp, frame: &Frame, out: &mut BytesMut) -> Outcome {
    let parts = match frame {
        Frame::Array(items) => match (items.first(), items.get(1), items.get(2)) {
            (Some(Frame::Bulk(v)), Some(Frame::Integer(p)), Some(Frame::Integer(idle))) => {
                encoding::decode(v).map(|item| (item, *p, *idle))
            }
            _ => None,
        },
        _ => None,
    };
    let Some((item, pttl, idle)) = parts else {
        out.extend_from_slice(b"EN\r\n");
        return Outcome::Miss;
    };
    out.extend_from_slice(b"ME ");
    if item.state & STATE_KEY_BINARY != 0 {
        let mut encoded = Vec::with_capacity(op.key.len() * 4 / 3 + 4);
        base64::encode_into(&mut encoded, &op.key);
        out.extend_from_slice(&encoded);
    } else {
        out.extend_from_slice(&op.key);
    }
    out.extend_from_slice(b" exp=");
    if pttl < 0 {
        out.extend_from_slice(b"-1");
    } else {
        out.extend_from_slice(b"-");
        reply::put_u64(out, ((pttl + 999) / 1000) as u64);
    }
    out.extend_from_slice(b" la=");
    reply::put_u64(out, u64::try_from(idle).unwrap_or(0));
    out.extend_from_slice(b" cas=");
    reply::put_u64(out, item.cas);
    out.extend_from_slice(if item.state & STATE_FETCHED != 0 {
        b" fetch=yes"
    } else {
        b" fetch=no"
    });
    let size = item_size(op.key.len(), item.data.len(), item.flags);
    out.extend_from_slice(b" cls=");
    reply::put_u64(out, slab_class(size));
    out.extend_from_slice(b" size=");
    reply::put_u64(out, size);
    out.extend_from_slice(b"\r\n");
    Outcome::Hit
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_classes_match_memcached_defaults() {
        // Measured on memcached 1.6.18: key "b2", data "xy" → 63, class 1;
        // flags 5 → 67.
        assert_eq!(item_size(2, 2, 0), 63);
        assert_eq!(item_size(2, 2, 5), 67);
        assert_eq!(slab_class(63), 1);
        assert_eq!(slab_class(96), 1);
        assert_eq!(slab_class(97), 2);
        assert_eq!(slab_class(120), 2);
        assert_eq!(slab_class(121), 3);
    }
}
