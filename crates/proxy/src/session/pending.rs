//! A client request waiting for its reply, in the session's order.

use bytes::Bytes;
use memshift_protocol::memcache::{ArithCommand, Keys, MetaCommand, MetaFlags, StorageCommand};
use tokio::time::Instant;

use crate::redis::{BackendError, Reply};
use crate::router::Backend;

pub(super) type PartResult = Result<Reply, BackendError>;

/// `Pending::command` for input the parser rejected (no command to count).
pub(super) const NO_COMMAND: u8 = u8::MAX;
/// `Slot::index` for a key answered by a reply of its own (GET, GETEX, mg).
pub(super) const OWN_REPLY: u32 = u32::MAX;
/// `Slot::part` of a key the near cache answered (no backend part).
pub(super) const NEAR_HIT: u32 = u32::MAX;

#[derive(Debug)]
pub struct Pending {
    pub(super) op: Op,
    /// Index into `metrics::COMMANDS`, or `NO_COMMAND`.
    pub(super) command: u8,
    pub(super) started: Instant,
    pub(super) deadline: Instant,
    /// Backend replies still to come.
    pub(super) waiting: u32,
    /// Bytes of the replies received so far (for the slow-consumer limit).
    pub(super) bytes: usize,
    pub(super) results: Results,
    /// Near cache: hash of the key this request writes, invalidated again
    /// just before its reply is written (read-your-writes).
    pub(super) near_written: Option<u64>,
}

#[derive(Debug)]
pub(super) enum Op {
    /// Reply already known.
    Ready(&'static [u8]),
    ReadyBytes(Bytes),
    /// Nothing to write (noreply, or an error memcached stays silent on).
    Silent,
    /// Write everything before it, then close (quit, or a fatal parse error).
    Close,
    Retrieval(Retrieval),
    Write(Write),
    FlushAll {
        noreply: bool,
    },
    /// mg / ms / md / ma.
    Meta(Box<MetaOp>),
    /// get/gets of one key answered by the near cache.
    NearHit {
        keys: Keys<Bytes>,
        hit: crate::near_cache::store::Cached,
        with_cas: bool,
    },
}

/// A meta command waiting for its backend.
#[derive(Debug)]
pub(super) struct MetaOp {
    pub(super) command: MetaCommand,
    /// The key (decoded under `b`).
    pub(super) key: Bytes,
    /// The flag tokens as sent.
    pub(super) tokens: Bytes,
    pub(super) flags: MetaFlags,
    pub(super) side: Backend,
    /// How the Redis reply reads.
    pub(super) kind: Kind,
    /// The CAS unique a successful write stores.
    pub(super) new_cas: u64,
    /// `ms`: the item as written (for the shadow).
    pub(super) data: Bytes,
    /// Where the write's result is replicated.
    pub(super) shadow: Option<Backend>,
    /// When the request was dispatched (for `t` after `T`).
    pub(super) now: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// The meta get script: `{value, pttl, idle, won | created}`.
    Get,
    /// `me`: the meta get script, looking only.
    Debug,
    Store(StorageCommand),
    /// `DEL`.
    Delete,
    /// The meta delete script.
    DeleteCas,
    /// `md ... I`: the meta invalidate script.
    Invalidate,
    Arith,
    /// Forwarded to memcached: its reply is passed through.
    Forwarded,
}

/// get / gets / gat / gats.
#[derive(Debug)]
pub(super) struct Retrieval {
    pub keys: Keys<Bytes>,
    pub with_cas: bool,
    pub plan: Plan,
    /// Keys whose Redis miss is looked up in memcached (canary/cutover).
    pub backfill: Option<Backfill>,
    /// Also read the other backend and compare (single-key reads only).
    pub compare: bool,
    /// Canary: feed hits and misses to the rollback detector.
    pub sample_miss_rate: bool,
    /// gat/gats: the new exptime, replicated to the shadow of each hit.
    pub touch: Option<i64>,
    /// Near cache: (key index, ticket) of the keys read with their TTL to
    /// fill it with their reply, in key order.
    pub near_fill: Vec<(u32, crate::near_cache::store::Ticket)>,
    /// Near cache: (key index, item) of the keys it answered (multi-key
    /// get/gets; their slot's part is `NEAR_HIT`), in key order.
    pub near_hits: Vec<(u32, crate::near_cache::store::Cached)>,
    /// Near cache, single-key get/gets: other misses of the key wait for
    /// this read (see `near_cache::coalesce`).
    pub near_lead: Option<crate::near_cache::coalesce::Lead>,
    /// Near cache, single-key get/gets: this read waits for another one's
    /// answer instead of being sent.
    pub near_join: Option<crate::near_cache::coalesce::Joined>,
    /// The answer already went through the near cache (a leader fills
    /// before handing it to its waiters): not again when rendered.
    pub near_observed: bool,
}

/// Where each key's answer is.
#[derive(Debug)]
pub(super) enum Plan {
    /// One key, one backend request (part 0).
    Single(Backend),
    /// Key i is answered by `slots[i]`.
    Slots(Vec<Slot>),
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Slot {
    pub side: Backend,
    pub part: u32,
    /// Element of an MGET reply, or `OWN_REPLY`. For memcached parts the
    /// keys of a part are answered in order (misses skipped).
    pub index: u32,
}

impl Plan {
    pub fn slot(&self, key_index: usize) -> Option<Slot> {
        match self {
            Plan::Single(side) => Some(Slot {
                side: *side,
                part: 0,
                index: OWN_REPLY,
            }),
            Plan::Slots(slots) => slots.get(key_index).copied(),
        }
    }
}

#[derive(Debug, Default)]
pub(super) struct Backfill {
    /// The memcached lookups were sent.
    pub started: bool,
    /// (key index, part of its `mg` reply)
    pub lookups: Vec<(u32, u32)>,
}

impl crate::conn::Entry for Pending {
    crate::entry_basics!(Pending);

    fn expire(&mut self) {
        self.results.fill_missing(BackendError::Timeout);
        self.waiting = 0;
    }

    #[inline]
    fn is_close(&self) -> bool {
        matches!(self.op, Op::Close)
    }

    #[inline]
    fn command(&self) -> Option<usize> {
        (self.command != NO_COMMAND).then_some(usize::from(self.command))
    }
}

/// A single-key write (storage, arith, delete, touch).
#[derive(Debug)]
pub(super) struct Write {
    pub kind: WriteKind,
    pub side: Backend,
    pub noreply: bool,
    /// The shadow write to derive from the outcome.
    pub shadow: Option<Box<ShadowPlan>>,
    /// Near cache: a `set` sent write-through, settled by its outcome.
    pub near_through: Option<crate::near_cache::store::Through>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum WriteKind {
    Storage(StorageCommand),
    Arith(ArithCommand),
    Delete,
    Touch,
}

/// What a write needs to replicate its result on the shadow backend.
#[derive(Debug)]
pub(super) struct ShadowPlan {
    pub side: Backend,
    pub key: Bytes,
    pub flags: u32,
    pub exptime: i64,
    pub data: Bytes,
}

/// Backend replies, by part.
#[derive(Debug)]
pub(super) enum Results {
    None,
    One(Option<PartResult>),
    Many(Vec<Option<PartResult>>),
}

impl Results {
    pub fn with_parts(parts: u32) -> Results {
        match parts {
            0 => Results::None,
            1 => Results::One(None),
            n => Results::Many((0..n).map(|_| None).collect()),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Results::None => 0,
            Results::One(_) => 1,
            Results::Many(v) => v.len(),
        }
    }

    /// Add a part; returns its number.
    pub fn push(&mut self) -> u32 {
        let taken = std::mem::replace(self, Results::None);
        let mut parts = match taken {
            Results::None => Vec::new(),
            Results::One(slot) => vec![slot],
            Results::Many(v) => v,
        };
        parts.push(None);
        let n = parts.len() as u32 - 1;
        *self = Results::Many(parts);
        n
    }

    /// Record a part's result; false if unknown or already recorded.
    pub fn set(&mut self, part: u32, result: PartResult) -> bool {
        let slot = match self {
            Results::None => return false,
            Results::One(slot) if part == 0 => slot,
            Results::One(_) => return false,
            Results::Many(v) => match v.get_mut(part as usize) {
                Some(slot) => slot,
                None => return false,
            },
        };
        if slot.is_some() {
            return false;
        }
        *slot = Some(result);
        true
    }

    pub fn fill_missing(&mut self, err: BackendError) {
        match self {
            Results::None => {}
            Results::One(slot) => {
                slot.get_or_insert(Err(err));
            }
            Results::Many(v) => {
                for slot in v.iter_mut() {
                    slot.get_or_insert(Err(err));
                }
            }
        }
    }

    pub fn get(&self, part: u32) -> Option<&PartResult> {
        match self {
            Results::None => None,
            Results::One(slot) => slot.as_ref().filter(|_| part == 0),
            Results::Many(v) => v.get(part as usize).and_then(|s| s.as_ref()),
        }
    }
}
