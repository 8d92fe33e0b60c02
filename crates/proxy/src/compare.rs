//! `compare_percent`: a sampled read is also sent to the other backend, off
//! the request path, and the two answers are compared and counted.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use memshift_protocol::memcache::client::{self, Response};
use memshift_shadow::compare::{compare, CompareResult};
use tokio::sync::mpsc;

use crate::legacy::ReplyShape;
use crate::metrics::CompareResult as MetricResult;
use crate::migration::Side;
use crate::proxy::Proxy;
use crate::redis::{encoding, translate, BackendRequest, Reply, ReplyTo};

/// Compare `primary` (what `primary_side` answered for `key`) with the
/// other backend, in the background.
pub fn spawn(proxy: Arc<Proxy>, key: Bytes, primary_side: Side, primary: Option<(u32, Bytes)>) {
    tokio::spawn(async move {
        let Some(other) = read(&proxy, &key, primary_side.other()).await else {
            return; // the other side failed: nothing to compare
        };
        let result = compare(
            primary.as_ref().map(|(f, d)| (*f, &d[..])),
            other.as_ref().map(|(f, d)| (*f, &d[..])),
        );
        proxy.metrics.compare(match result {
            CompareResult::Match => MetricResult::Match,
            CompareResult::ValueMismatch => MetricResult::ValueMismatch,
            CompareResult::PrimaryMiss => MetricResult::PrimaryMiss,
            CompareResult::ShadowMiss => MetricResult::ShadowMiss,
        });
        proxy.migration.load().mismatches.record(&key, result);
    });
}

/// One key from one backend: `Some(None)` is a miss, `None` a failure.
async fn read(proxy: &Proxy, key: &[u8], side: Side) -> Option<Option<(u32, Bytes)>> {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let reply = ReplyTo {
        tx,
        seq: 0,
        part: 0,
    };
    let mut buf = BytesMut::new();
    match side {
        Side::Redis => {
            let backends = proxy.backends.load();
            translate::get(&mut buf, key);
            let shard = backends.locate(key);
            backends.shards[shard].send(
                0,
                BackendRequest {
                    cmd: buf.freeze(),
                    reply,
                },
            );
        }
        Side::Memcached => {
            let migration = proxy.migration.load();
            let legacy = migration.legacy.as_ref()?;
            client::get(&mut buf, [key]).ok()?;
            legacy.send(
                legacy.locate(key),
                0,
                buf.freeze(),
                ReplyShape::Values,
                reply,
            );
        }
    }
    let answer = tokio::time::timeout(proxy.backends.load().request_timeout, rx.recv())
        .await
        .ok()??;
    match answer.result.ok()? {
        Reply::Redis(memshift_protocol::resp::Frame::Bulk(v)) => {
            Some(encoding::decode(&v).map(|item| (item.flags, item.data)))
        }
        Reply::Redis(memshift_protocol::resp::Frame::Null) => Some(None),
        Reply::Redis(_) => None,
        Reply::Memcached(raw) => match client::parse_reply(&raw) {
            Ok(Some((Response::Value { flags, data, .. }, _))) => {
                Some(Some((flags, raw.slice_ref(data))))
            }
            Ok(Some((Response::End, _))) => Some(None),
            _ => None,
        },
    }
}
