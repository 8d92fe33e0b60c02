//! `compare_percent`: a sampled read is also sent to the other backend, off
//! the request path, and the two answers are compared and counted.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use memshift_protocol::memcache::client::{self, Response};
use memshift_protocol::resp::Frame;
use memshift_shadow::compare::compare;

use crate::proxy::Proxy;
use crate::redis::{encoding, translate, Reply};
use crate::router::{Access, Backend, ReplyShape};

/// Compare `primary` (what `primary_side` answered for `key`) with the
/// other backend, in the background.
pub fn spawn(proxy: Arc<Proxy>, key: Bytes, primary_side: Backend, primary: Option<(u32, Bytes)>) {
    tokio::spawn(async move {
        let Some(other) = read(&proxy, &key, primary_side.other()).await else {
            return; // the other side failed: nothing to compare
        };
        let result = compare(
            primary.as_ref().map(|(f, d)| (*f, &d[..])),
            other.as_ref().map(|(f, d)| (*f, &d[..])),
        );
        proxy.metrics.compare(result);
        proxy.router.migration().mismatches.record(&key, result);
    });
}

/// One key from one backend: `Some(None)` is a miss, `None` a failure.
async fn read(proxy: &Proxy, key: &[u8], side: Backend) -> Option<Option<(u32, Bytes)>> {
    let mut buf = BytesMut::new();
    let (answer, timeout) = {
        let routes = proxy.router.load();
        let target = routes.target_on(side, key, Access::Read)?;
        let shape = match side {
            Backend::Redis => {
                translate::get(&mut buf, key);
                ReplyShape::Line
            }
            Backend::Memcached => {
                client::get(&mut buf, [key]).ok()?;
                ReplyShape::Values
            }
        };
        (
            routes.call(target, buf.freeze(), shape),
            routes.redis().request_timeout,
        )
    };
    match tokio::time::timeout(timeout, answer).await.ok()?.ok()? {
        Reply::Redis(Frame::Bulk(v)) => {
            Some(encoding::decode(&v).map(|item| (item.flags, item.data)))
        }
        Reply::Redis(Frame::Null) => Some(None),
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
