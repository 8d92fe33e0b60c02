//! Calibration against a live Redis: a few hundred items shaped like the
//! sample are written under a scratch prefix the way `memshift copy` writes
//! (same encoding, same pipelined shard connections, many in flight),
//! measured with `MEMORY USAGE key SAMPLES 0`, and deleted.
//!
//! `MEMORY USAGE` sees the allocations Redis really made for the value and
//! the key (the jemalloc class each landed in, a big value kept in the
//! query buffer's allocation); it counts the dict entry unrounded and not
//! the expires entry, which [`estimate::memory_usage_blind_spot`] adds back.
//! The result is the ratio measured / formula over the calibration items,
//! which scales the formula's per-item sum.

use std::sync::Arc;

use bytes::BytesMut;
use memshift_protocol::memcache::StorageCommand;
use memshift_protocol::resp::{encode_command, Frame};

use super::estimate::{self, ItemShape, Topology};
use crate::redis::translate::{self, Expiry};
use crate::router::RedisBackends;

/// Items written to calibrate.
pub const CALIBRATION_ITEMS: usize = 400;
/// Writes in flight at once (as `memshift copy`).
const IN_FLIGHT: usize = 128;

/// What calibration measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Calibration {
    pub items: usize,
    /// Σ measured / Σ formula over the calibration items.
    pub ratio: f64,
}

/// Writes, measures and deletes the calibration items (one per shape).
/// `Err` with a one-line reason when Redis refused or did not answer; the
/// scratch keys are deleted in any case.
pub async fn calibrate(
    backends: &Arc<RedisBackends>,
    shapes: &[ItemShape],
    topology: Topology,
    nonce: u64,
) -> Result<Calibration, String> {
    let keys: Vec<Vec<u8>> = shapes
        .iter()
        .enumerate()
        .map(|(i, shape)| scratch_key(nonce, i, shape.key_len))
        .collect();
    let measured = write_and_measure(backends, shapes, &keys).await;
    delete_all(backends, &keys).await;
    let usages = measured?;
    let mut formula = 0u64;
    let mut real = 0u64;
    for ((shape, key), usage) in shapes.iter().zip(&keys).zip(usages) {
        let shape = ItemShape {
            key_len: key.len() as u64,
            ..*shape
        };
        formula += estimate::item_bytes(&shape, topology);
        real += usage + estimate::memory_usage_blind_spot(shape.has_ttl, topology);
    }
    if formula == 0 {
        return Err("nothing to calibrate".into());
    }
    Ok(Calibration {
        items: shapes.len(),
        ratio: real as f64 / formula as f64,
    })
}

/// `memshift-plan:<nonce>:<i>:`, padded with `x` to the sampled key's
/// length when that is longer.
fn scratch_key(nonce: u64, i: usize, key_len: u64) -> Vec<u8> {
    let mut key = format!("memshift-plan:{nonce:016x}:{i}:").into_bytes();
    while (key.len() as u64) < key_len {
        key.push(b'x');
    }
    key
}

async fn call(backends: &RedisBackends, key: &[u8], cmd: BytesMut) -> Result<Frame, String> {
    match backends.call_for_key(key, cmd.freeze()).await {
        Ok(Frame::Error(e)) => Err(String::from_utf8_lossy(&e).into_owned()),
        Ok(frame) => Ok(frame),
        Err(e) => Err(format!("{e:?}")),
    }
}

async fn write_and_measure(
    backends: &Arc<RedisBackends>,
    shapes: &[ItemShape],
    keys: &[Vec<u8>],
) -> Result<Vec<u64>, String> {
    let largest = shapes.iter().map(|s| s.data_len).max().unwrap_or(0);
    let data: Arc<Vec<u8>> = Arc::new(vec![b'x'; usize::try_from(largest).unwrap_or(0)]);
    for (chunk_shapes, chunk_keys) in shapes.chunks(IN_FLIGHT).zip(keys.chunks(IN_FLIGHT)) {
        let mut writes = tokio::task::JoinSet::new();
        for (shape, key) in chunk_shapes.iter().zip(chunk_keys) {
            let (backends, data, key, shape) =
                (backends.clone(), data.clone(), key.clone(), *shape);
            writes.spawn(async move {
                let len = usize::try_from(shape.data_len).unwrap_or(0).min(data.len());
                let expiry = if shape.has_ttl {
                    Expiry::In(3_600)
                } else {
                    Expiry::Never
                };
                let mut buf = BytesMut::new();
                translate::store(
                    &mut buf,
                    StorageCommand::Set,
                    &key,
                    0,
                    1,
                    &data[..len],
                    expiry,
                );
                call(&backends, &key, buf).await
            });
        }
        while let Some(done) = writes.join_next().await {
            match done {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return Err(e),
                Err(e) => return Err(e.to_string()),
            }
        }
    }
    let mut usages = Vec::with_capacity(keys.len());
    for key in keys {
        let mut buf = BytesMut::new();
        encode_command(&mut buf, &[b"MEMORY", b"USAGE", key, b"SAMPLES", b"0"]);
        match call(backends, key, buf).await? {
            Frame::Integer(n) => usages.push(u64::try_from(n).unwrap_or(0)),
            other => return Err(format!("MEMORY USAGE answered {other:?}")),
        }
    }
    Ok(usages)
}

async fn delete_all(backends: &RedisBackends, keys: &[Vec<u8>]) {
    for key in keys {
        let mut buf = BytesMut::new();
        translate::delete(&mut buf, key);
        let _ = call(backends, key, buf).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scratch_keys_are_unique_and_padded() {
        let a = scratch_key(7, 1, 5);
        let b = scratch_key(7, 2, 60);
        assert!(a.starts_with(b"memshift-plan:0000000000000007:1:"));
        assert_eq!(b.len(), 60);
        assert_ne!(a, b[..a.len()].to_vec());
    }
}
