//! The legacy memcached pool: servers as the legacy clients placed keys on
//! them, each with long-lived pipelined connections.
//!
//! Two ways in:
//!
//! * [`LegacyPool::send`] / [`LegacyPool::send_for_key`]: queue an encoded
//!   request; the reply goes to a [`ReplyTo`] (a session's tagged channel, or
//!   a oneshot). Never waits.
//! * Typed async helpers for shadow writes, compare, backfill and bulk copy:
//!   [`LegacyPool::get`], [`LegacyPool::set`], [`LegacyPool::meta_get_with_ttl`],
//!   [`LegacyPool::metadump_all`]...
//!
//! A key always goes to the same connection of its server (chosen by a hash
//! of the key), so requests for one key from one caller stay in order.
//! `metadump` reads every key of a server (`lru_crawler metadump all`).

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use memshift_protocol::memcache::client::{self as enc, MetaStatus, Response};
use tokio::sync::oneshot;

use memshift_pipeline::{BackendError, Pipeline, Request};

use crate::connection::{MemcachedCodec, MemcachedConnector};
use crate::op::{unix_now, ShadowOp};
use crate::queue::{ApplyFuture, ShadowSink};
use crate::reply::{
    LegacyError, LegacyReply, LegacyRequest, ReplyShape, ReplyTo, Tagged, TaggedReply, ValueItem,
};
use crate::ShadowError;

mod metadump;
pub use metadump::metadump_paced;

/// Which server of the pool a key lives on (an index into the server list).
/// Out-of-range answers are taken modulo the server count.
pub type Placement = Box<dyn Fn(&[u8]) -> usize + Send + Sync>;

/// Seed of the hash that picks a key's connection within its server (not the
/// placement hash: that one is the legacy clients').
const LANE_SEED: u64 = 0x6c61_6e65;
/// Keys per `get` line in [`LegacyPool::get_many`] (memcached reads long
/// lines, but short ones keep a slow reply from holding many keys).
const GET_BATCH_KEYS: usize = 100;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolSettings {
    pub connections_per_server: usize,
    /// Per request: the oldest request on a connection waiting longer than
    /// this resets the connection (`[memcached] timeout_ms`).
    pub timeout: Duration,
    pub connect_timeout: Duration,
    /// Requests a connection queues before new ones fail with `Busy`.
    pub queue_depth: usize,
}

impl PoolSettings {
    pub fn new(timeout: Duration) -> PoolSettings {
        PoolSettings {
            connections_per_server: 2,
            timeout,
            connect_timeout: timeout.max(Duration::from_millis(100)),
            queue_depth: 10_000,
        }
    }
}

/// A value read with `get`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub flags: u32,
    pub cas: Option<u64>,
    pub data: Bytes,
}

/// A value read with `mg <key> v f t`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaItem {
    pub data: Bytes,
    pub flags: u32,
    /// Seconds left; `None` when the item never expires.
    pub ttl_remaining: Option<i64>,
}

/// One item of `lru_crawler metadump all`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpEntry {
    /// The key as stored (decoded from the dump's URI encoding).
    pub key: Bytes,
    /// Absolute expiry (unix seconds), `-1` for never.
    pub exp: i64,
    /// Size in memory (header, key and data), if reported.
    pub size: Option<u64>,
    /// Client flags, if the server reports them (1.6.18 does not).
    pub flags: Option<u32>,
    pub last_access: Option<u64>,
    pub cas: Option<u64>,
}

/// How to address a request: by key (placement picks the server and the
/// key's connection) or by server index.
#[derive(Debug, Clone, Copy)]
pub enum Route<'a> {
    Key(&'a [u8]),
    Server(usize),
}

struct Server<T: Tagged> {
    addr: String,
    conns: Vec<Pipeline<MemcachedCodec<T>>>,
}

/// The legacy pool. Dropping it stops its connection tasks. Share it as
/// `Arc<LegacyPool<T>>`; `T` is the message type of sessions' reply
/// channels (see [`ReplyTo::Tagged`]).
pub struct LegacyPool<T: Tagged = TaggedReply> {
    servers: Vec<Server<T>>,
    placement: Placement,
    settings: PoolSettings,
}

impl<T: Tagged> std::fmt::Debug for LegacyPool<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LegacyPool")
            .field(
                "servers",
                &self.servers.iter().map(|s| &s.addr).collect::<Vec<_>>(),
            )
            .field("settings", &self.settings)
            .finish()
    }
}

impl<T> LegacyPool<T>
where
    T: Tagged,
{
    /// Start the connection tasks (on the current tokio runtime). Servers are
    /// `host:port`; connections come up in the background.
    pub fn start(servers: Vec<String>, placement: Placement, settings: PoolSettings) -> Self {
        Self::start_placed(servers, placement, settings, |_| None)
    }

    /// [`LegacyPool::start`], each server's connection `j` spawned inside
    /// the runtime context `place(j)` returns (the current one for `None`):
    /// the proxy puts connection `j` on its worker thread `j % threads`.
    pub fn start_placed(
        servers: Vec<String>,
        placement: Placement,
        settings: PoolSettings,
        place: impl Fn(usize) -> Option<tokio::runtime::EnterGuard<'static>>,
    ) -> Self {
        let per_server = settings.connections_per_server.max(1);
        let servers = servers
            .into_iter()
            .map(|addr| {
                let engine = memshift_pipeline::Settings {
                    timeout: settings.timeout,
                    connect_timeout: settings.connect_timeout,
                };
                let conns = (0..per_server)
                    .map(|j| {
                        let _placed = place(j);
                        let connector = MemcachedConnector {
                            addr: addr.clone(),
                            reply: PhantomData,
                        };
                        Pipeline::start(connector, engine, settings.queue_depth)
                    })
                    .collect();
                Server { addr, conns }
            })
            .collect();
        LegacyPool {
            servers,
            placement,
            settings,
        }
    }

    pub fn settings(&self) -> PoolSettings {
        self.settings
    }

    pub fn server_count(&self) -> usize {
        self.servers.len()
    }

    pub fn server_addrs(&self) -> impl Iterator<Item = &str> {
        self.servers.iter().map(|s| s.addr.as_str())
    }

    /// The server `key` lives on.
    pub fn server_for_key(&self, key: &[u8]) -> usize {
        match self.servers.len() {
            0 => 0,
            n => (self.placement)(key) % n,
        }
    }

    /// The connection of its server that `key` uses.
    pub fn lane_for_key(&self, key: &[u8]) -> usize {
        memshift_ring::xxh3(LANE_SEED, key) as usize
    }

    /// True while at least one connection to `server` is established.
    pub fn is_up(&self, server: usize) -> bool {
        self.servers
            .get(server)
            .is_some_and(|s| s.conns.iter().any(Pipeline::is_up))
    }

    /// True when every server is up (an empty pool is not).
    pub fn all_up(&self) -> bool {
        !self.servers.is_empty() && (0..self.servers.len()).all(|i| self.is_up(i))
    }

    /// Queue `req` on connection `lane` (modulo the count) of `server`. Never
    /// waits: a full queue, a stopped connection or an unknown server answers
    /// the request at once.
    pub fn send(&self, server: usize, lane: usize, req: LegacyRequest<T>) {
        let Some(s) = self.servers.get(server) else {
            req.reply.send(Err(LegacyError::NoSuchServer(server)));
            return;
        };
        let Some(conn) = s.conns.get(lane % s.conns.len().max(1)) else {
            req.reply.send(Err(LegacyError::NoSuchServer(server)));
            return;
        };
        // A noreply request would shift every later reply onto the wrong
        // request: refuse it before it is queued.
        if let Err(e) = req.check() {
            req.reply.send(Err(e));
            return;
        }
        // A refusal (full queue, stopped connection) was answered already.
        let _ = conn.send(Request {
            bytes: req.bytes,
            expect: req.shape,
            caller: req.reply,
        });
    }

    /// Queue `req` on the server and connection of `key`.
    pub fn send_for_key(&self, key: &[u8], req: LegacyRequest<T>) {
        self.send(self.server_for_key(key), self.lane_for_key(key), req);
    }

    fn route(&self, route: Route<'_>) -> (usize, usize) {
        match route {
            Route::Key(key) => (self.server_for_key(key), self.lane_for_key(key)),
            Route::Server(server) => (server, 0),
        }
    }

    /// Queue a request and return a future for its reply: the request is on
    /// its connection's queue when this returns (order is kept even if the
    /// future is polled later).
    pub fn enqueue(
        &self,
        route: Route<'_>,
        bytes: Bytes,
        shape: ReplyShape,
    ) -> impl std::future::Future<Output = Result<LegacyReply, LegacyError>> + Send + 'static {
        let (tx, rx) = oneshot::channel();
        let (server, lane) = self.route(route);
        self.send(
            server,
            lane,
            LegacyRequest {
                bytes,
                shape,
                reply: ReplyTo::Oneshot(tx),
            },
        );
        // Backstop only: the connection answers every request (a reply, a
        // timeout, or a connection error) well before this.
        let backstop = self.settings.timeout * 2 + self.settings.connect_timeout;
        async move {
            match tokio::time::timeout(backstop, rx).await {
                Ok(Ok(result)) => result,
                Ok(Err(_)) => Err(BackendError::ConnectionLost.into()),
                Err(_) => Err(BackendError::Timeout.into()),
            }
        }
    }

    /// Send one request and wait for its reply.
    pub async fn call(
        &self,
        route: Route<'_>,
        bytes: Bytes,
        shape: ReplyShape,
    ) -> Result<LegacyReply, LegacyError> {
        self.enqueue(route, bytes, shape).await
    }

    /// `get <key>`.
    pub async fn get(&self, key: &[u8]) -> Result<Option<Item>, LegacyError> {
        let mut buf = BytesMut::new();
        enc::get(&mut buf, [key])?;
        let reply = self
            .call(Route::Key(key), buf.freeze(), ReplyShape::UntilEnd)
            .await?;
        reply.check_error()?;
        let item = reply.items().find(|item| item.key.as_ref() == key);
        Ok(item.map(|item| Item {
            flags: item.flags,
            cas: item.cas,
            data: item.data,
        }))
    }

    /// `get` many keys: one request per server (in batches of 100 keys), all
    /// in flight at once. Returns the hits, in no particular order.
    pub async fn get_many<K: AsRef<[u8]>>(
        &self,
        keys: &[K],
    ) -> Result<Vec<ValueItem>, LegacyError> {
        let mut by_server: BTreeMap<usize, Vec<&[u8]>> = BTreeMap::new();
        for key in keys {
            let key = key.as_ref();
            by_server
                .entry(self.server_for_key(key))
                .or_default()
                .push(key);
        }
        let mut pending = Vec::new();
        for (server, keys) in by_server {
            for batch in keys.chunks(GET_BATCH_KEYS) {
                let mut buf = BytesMut::new();
                enc::get(&mut buf, batch.iter())?;
                let lane = batch.first().map_or(0, |k| self.lane_for_key(k));
                let (tx, rx) = oneshot::channel();
                self.send(
                    server,
                    lane,
                    LegacyRequest {
                        bytes: buf.freeze(),
                        shape: ReplyShape::UntilEnd,
                        reply: ReplyTo::Oneshot(tx),
                    },
                );
                pending.push(rx);
            }
        }
        let backstop = self.settings.timeout * 2 + self.settings.connect_timeout;
        let mut items = Vec::with_capacity(keys.len());
        for rx in pending {
            let reply = match tokio::time::timeout(backstop, rx).await {
                Ok(Ok(result)) => result?,
                Ok(Err(_)) => return Err(BackendError::ConnectionLost.into()),
                Err(_) => return Err(BackendError::Timeout.into()),
            };
            reply.check_error()?;
            items.extend(reply.items());
        }
        Ok(items)
    }

    /// `set <key> <flags> <exptime> <len>`; `Ok` on `STORED`. `exptime` has
    /// memcached's meaning (relative up to 30 days, else absolute).
    pub async fn set(
        &self,
        key: &[u8],
        flags: u32,
        exptime: i64,
        data: &[u8],
    ) -> Result<(), LegacyError> {
        self.set_queued(key, flags, exptime, data)?.await
    }

    fn set_queued(
        &self,
        key: &[u8],
        flags: u32,
        exptime: i64,
        data: &[u8],
    ) -> Result<
        impl std::future::Future<Output = Result<(), LegacyError>> + Send + 'static,
        LegacyError,
    > {
        let mut buf = BytesMut::new();
        enc::storage(
            &mut buf,
            memshift_protocol::memcache::StorageCommand::Set,
            key,
            flags,
            exptime,
            data,
            false,
        )?;
        let reply = self.enqueue(Route::Key(key), buf.freeze(), ReplyShape::Single);
        Ok(async move {
            let reply = reply.await?;
            match reply.first()? {
                Response::Stored => Ok(()),
                _ => Err(LegacyError::Server(reply.first_line())),
            }
        })
    }

    /// `delete <key>`: `true` if it existed.
    pub async fn delete(&self, key: &[u8]) -> Result<bool, LegacyError> {
        self.delete_queued(key)?.await
    }

    fn delete_queued(
        &self,
        key: &[u8],
    ) -> Result<
        impl std::future::Future<Output = Result<bool, LegacyError>> + Send + 'static,
        LegacyError,
    > {
        let mut buf = BytesMut::new();
        enc::delete(&mut buf, key, false)?;
        let reply = self.enqueue(Route::Key(key), buf.freeze(), ReplyShape::Single);
        Ok(async move {
            let reply = reply.await?;
            match reply.first()? {
                Response::Deleted => Ok(true),
                Response::NotFound => Ok(false),
                _ => Err(LegacyError::Server(reply.first_line())),
            }
        })
    }

    /// `touch <key> <exptime>`: `true` if it existed.
    pub async fn touch(&self, key: &[u8], exptime: i64) -> Result<bool, LegacyError> {
        self.touch_queued(key, exptime)?.await
    }

    fn touch_queued(
        &self,
        key: &[u8],
        exptime: i64,
    ) -> Result<
        impl std::future::Future<Output = Result<bool, LegacyError>> + Send + 'static,
        LegacyError,
    > {
        let mut buf = BytesMut::new();
        enc::touch(&mut buf, key, exptime, false)?;
        let reply = self.enqueue(Route::Key(key), buf.freeze(), ReplyShape::Single);
        Ok(async move {
            let reply = reply.await?;
            match reply.first()? {
                Response::Touched => Ok(true),
                Response::NotFound => Ok(false),
                _ => Err(LegacyError::Server(reply.first_line())),
            }
        })
    }

    /// `mg <key> v f t`: value, flags and remaining TTL in one round trip.
    pub async fn meta_get_with_ttl(&self, key: &[u8]) -> Result<Option<MetaItem>, LegacyError> {
        let mut buf = BytesMut::new();
        enc::meta_get(&mut buf, key)?;
        let reply = self
            .call(Route::Key(key), buf.freeze(), ReplyShape::Single)
            .await?;
        match reply.first()? {
            Response::MetaValue { flags, data } => {
                let client_flags = flags.client_flags().ok_or_else(|| {
                    LegacyError::Protocol("mg reply without client flags".to_string())
                })?;
                let ttl = flags
                    .ttl()
                    .ok_or_else(|| LegacyError::Protocol("mg reply without ttl".to_string()))?;
                Ok(Some(MetaItem {
                    data: reply.raw().slice_ref(data),
                    flags: client_flags,
                    ttl_remaining: (ttl >= 0).then_some(ttl),
                }))
            }
            Response::Meta {
                status: MetaStatus::Miss,
                ..
            } => Ok(None),
            _ => Err(LegacyError::Server(reply.first_line())),
        }
    }

    /// `flush_all` on every server (all queued before any is awaited).
    pub async fn flush_all(&self) -> Result<(), LegacyError> {
        self.flush_all_queued().await
    }

    fn flush_all_queued(
        &self,
    ) -> impl std::future::Future<Output = Result<(), LegacyError>> + Send + 'static {
        let mut buf = BytesMut::new();
        enc::flush_all(&mut buf, None, false);
        let bytes = buf.freeze();
        let replies: Vec<_> = (0..self.servers.len())
            .map(|server| self.enqueue(Route::Server(server), bytes.clone(), ReplyShape::Single))
            .collect();
        async move {
            for reply in replies {
                let reply = reply.await?;
                match reply.first()? {
                    Response::Ok => {}
                    _ => return Err(LegacyError::Server(reply.first_line())),
                }
            }
            Ok(())
        }
    }

    /// `version` of one server (e.g. `1.6.18`).
    pub async fn version(&self, server: usize) -> Result<String, LegacyError> {
        let mut buf = BytesMut::new();
        enc::version(&mut buf);
        let reply = self
            .call(Route::Server(server), buf.freeze(), ReplyShape::Single)
            .await?;
        match reply.first()? {
            Response::Version(v) => Ok(String::from_utf8_lossy(v).into_owned()),
            _ => Err(LegacyError::Server(reply.first_line())),
        }
    }
}

fn shadow_error(e: LegacyError) -> ShadowError {
    match e {
        LegacyError::Backend(BackendError::Unavailable) | LegacyError::NoSuchServer(_) => {
            ShadowError::Unavailable
        }
        LegacyError::Backend(BackendError::Timeout) => ShadowError::Timeout,
        LegacyError::Backend(BackendError::ConnectionLost) => ShadowError::ConnectionLost,
        LegacyError::Backend(BackendError::Busy) | LegacyError::CrawlerBusy => ShadowError::Busy,
        LegacyError::Protocol(p) => ShadowError::Protocol(p),
        LegacyError::BadKey(_) | LegacyError::BadRequest(_) | LegacyError::Server(_) => {
            ShadowError::Rejected(e.to_string())
        }
    }
}

/// memcached as the shadow backend (phase `cutover`, and the Redis-primary
/// keys of `canary`). Each operation is queued on its key's connection
/// inside `apply`, so per-key order is the queue's order. An expiry already
/// in the past becomes a delete.
impl<T> ShadowSink for LegacyPool<T>
where
    T: Tagged,
{
    fn apply(&self, op: ShadowOp) -> ApplyFuture {
        let now = unix_now();
        let queued: Result<UnitFuture, LegacyError> = match op {
            ShadowOp::Set {
                key,
                flags,
                expiry,
                data,
            } => match expiry.to_memcached(now) {
                Some(exptime) => self
                    .set_queued(&key, flags, i64::from(exptime), &data)
                    .map(|f| Box::pin(f) as UnitFuture),
                None => self.delete_queued(&key).map(into_unit),
            },
            ShadowOp::Delete { key } => self.delete_queued(&key).map(into_unit),
            ShadowOp::Touch { key, expiry } => match expiry.to_memcached(now) {
                Some(exptime) => self.touch_queued(&key, i64::from(exptime)).map(into_unit),
                None => self.delete_queued(&key).map(into_unit),
            },
            ShadowOp::FlushAll => Ok(Box::pin(self.flush_all_queued()) as UnitFuture),
        };
        match queued {
            Ok(fut) => Box::pin(async move { fut.await.map_err(shadow_error) }),
            Err(e) => Box::pin(std::future::ready(Err(shadow_error(e)))),
        }
    }
}

type UnitFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), LegacyError>> + Send + 'static>>;

/// Deleting a key that is not there, or touching one, is still success.
fn into_unit(
    fut: impl std::future::Future<Output = Result<bool, LegacyError>> + Send + 'static,
) -> UnitFuture {
    Box::pin(async move { fut.await.map(|_| ()) })
}
