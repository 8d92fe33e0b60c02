//! `compare_percent`: a sampled read is also sent to the other backend, off
//! the request path, and the two answers are compared and counted.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use memshift_protocol::memcache::client::{self, Response};
use memshift_shadow::compare::compare;
use tokio::sync::mpsc;

use crate::legacy::ReplyShape;
use crate::migration::Side;
use crate::proxy::Proxy;
use crate::redis::{encoding, translate, Reply, ReplyTo};
use memshift_protocol::resp::Frame;

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
        proxy.metrics.compare(result);
        proxy.migration.load().mismatches.record(&key, result);
    });
}

/// One key from one backend: `Some(None)` is a miss, `None` a failure.
async fn read(proxy: &Proxy, key: &[u8], side: Side) -> Option<Option<(u32, Bytes)>> {
    let mut buf = BytesMut::new();
    let timeout = proxy.backends.load().request_timeout;
    match side {
        Side::Redis => {
            let backends = proxy.backends.load();
            translate::get(&mut buf, key);
            let answer = backends.call(backends.locate_read(key), buf.freeze());
            match tokio::time::timeout(timeout, answer).await.ok()?.ok()? {
                Frame::Bulk(v) => Some(encoding::decode(&v).map(|item| (item.flags, item.data))),
                Frame::Null => Some(None),
                _ => None,
            }
        }
        Side::Memcached => {
            let migration = proxy.migration.load();
            let legacy = migration.legacy.as_ref()?;
            client::get(&mut buf, [key]).ok()?;
            let (tx, mut rx) = mpsc::unbounded_channel();
            let reply = ReplyTo {
                tx,
                seq: 0,
                part: 0,
            };
            legacy.send(
                legacy.locate(key),
                0,
                buf.freeze(),
                ReplyShape::Values,
                reply,
            );
            let answer = tokio::time::timeout(timeout, rx.recv()).await.ok()??;
            let Reply::Memcached(raw) = answer.result.ok()? else {
                return None;
            };
            match client::parse_reply(&raw) {
                Ok(Some((Response::Value { flags, data, .. }, _))) => {
                    Some(Some((flags, raw.slice_ref(data))))
                }
                Ok(Some((Response::End, _))) => Some(None),
                _ => None,
            }
        }
    }
}
