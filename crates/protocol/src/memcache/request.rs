//! The requests memcached 1.6 accepts in its text protocol.
//!
//! `B` is the byte type that keys and values are carried in: the parser hands
//! out `&[u8]` slices of the read buffer; a session maps them (with
//! [`Request::map`]) to `bytes::Bytes` of the same buffer to keep them past the
//! borrow, without copying.

use super::admin::{AdminCommand, StatsGroup};

/// Largest key memcached accepts (KEY_MAX_LENGTH).
pub const MAX_KEY_LEN: usize = 250;

/// get / gets / gat / gats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetrievalCommand {
    Get,
    Gets,
    Gat,
    Gats,
}

impl RetrievalCommand {
    /// gets and gats return CAS uniques.
    pub fn returns_cas(self) -> bool {
        matches!(self, Self::Gets | Self::Gats)
    }
}

/// set / add / replace / append / prepend / cas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StorageCommand {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    Cas,
}

/// incr / decr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArithCommand {
    Incr,
    Decr,
}

/// mg / ms / md / ma / me.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaCommand {
    Get,
    Set,
    Delete,
    Arith,
    /// `me <key> [b]`: memcached's item dump.
    Debug,
}

/// `ms` mode (`M<mode>`): which storage command the meta set is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MetaSetMode {
    /// `MS` (default).
    #[default]
    Set,
    /// `ME`: add.
    Add,
    /// `MR`: replace.
    Replace,
    /// `MA`: append.
    Append,
    /// `MP`: prepend.
    Prepend,
}

/// The flags of a meta command, as memcached 1.6.18 reads them. Flags that
/// only shape the reply (`s t c f k O`) are not kept here: the reply is built
/// by walking the raw flag tokens (`Meta::tokens`) in order, as memcached
/// does (see `reply::meta_flags`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MetaFlags {
    /// `b`: the key is base64 (`Meta::key` is still the encoded form; the
    /// parser checked that it decodes).
    pub base64: bool,
    /// `v`: return the value (mg, ma).
    pub value: bool,
    /// `q`: no reply for the nominal outcome (see `Request::Meta`).
    pub quiet: bool,
    /// `t`: the reply reports the TTL (mg, ma).
    pub return_ttl: bool,
    /// `T<exptime>`: new TTL (mg: touch; ms: the item's TTL; ma: on success).
    pub ttl: Option<i64>,
    /// `N<exptime>`: create on miss with this TTL (ma, mg).
    pub vivify: Option<i64>,
    /// `R<seconds>`: recache win token when less TTL remains (mg).
    pub recache: Option<i64>,
    /// `h` / `l`: hit-before / last-access (mg).
    pub access_info: bool,
    /// `u`: do not mark the item fetched (mg).
    pub no_update: bool,
    /// `F<flags>`: client flags (ms).
    pub client_flags: u32,
    /// `C<cas>`: compare CAS (ms, md, ma).
    pub compare_cas: Option<u64>,
    /// `I`: invalidate / mark stale.
    pub invalidate: bool,
    /// `M<mode>` for ms.
    pub set_mode: MetaSetMode,
    /// `M<mode>` for ma: true for decrement.
    pub decrement: bool,
    /// `J<n>`: initial value for an auto-created counter (ma).
    pub initial: u64,
    /// `D<n>`: delta (ma; 1 when absent).
    pub delta: u64,
}

/// One or more keys, kept as the raw space-separated region of the request
/// line so that a single get allocates nothing. Every key in it was already
/// validated by the parser.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys<B> {
    raw: B,
    count: usize,
}

impl<B: AsRef<[u8]>> Keys<B> {
    /// `raw` must be keys separated by single or repeated spaces, as validated
    /// by the parser.
    pub fn new(raw: B, count: usize) -> Self {
        Keys { raw, count }
    }

    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub fn raw(&self) -> &B {
        &self.raw
    }

    /// Keys in request order.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.raw
            .as_ref()
            .split(|&b| b == b' ')
            .filter(|k| !k.is_empty())
    }

    pub fn map<C>(self, f: impl FnOnce(B) -> C) -> Keys<C> {
        Keys {
            raw: f(self.raw),
            count: self.count,
        }
    }
}

/// A complete, validated request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request<B> {
    /// `get|gets <key>*`, `gat|gats <exptime> <key>*`. `exptime` is 0 for get/gets.
    Retrieval {
        command: RetrievalCommand,
        exptime: i64,
        keys: Keys<B>,
    },
    /// `<cmd> <key> <flags> <exptime> <bytes> [<cas unique>] [noreply]\r\n<data>\r\n`
    /// `data` excludes the trailing `\r\n`. `cas` is 0 unless command is Cas.
    Storage {
        command: StorageCommand,
        key: B,
        flags: u32,
        exptime: i64,
        cas: u64,
        data: B,
        noreply: bool,
    },
    /// `incr|decr <key> <delta> [noreply]`
    Arith {
        command: ArithCommand,
        key: B,
        delta: u64,
        noreply: bool,
    },
    /// `delete <key> [0] [noreply]`
    Delete { key: B, noreply: bool },
    /// `touch <key> <exptime> [noreply]`
    Touch { key: B, exptime: i64, noreply: bool },
    /// `flush_all [delay] [noreply]`; `delay` is 0 when absent.
    FlushAll { delay: i64, noreply: bool },
    /// version
    Version,
    /// `verbosity <level> [noreply]`
    Verbosity { noreply: bool },
    /// `stats [group ...]`.
    Stats(StatsGroup),
    /// `cache_memlimit`, `slabs`, `lru`, `lru_crawler`, `watch`; `noreply`
    /// where memcached reads it for that command.
    Admin {
        command: AdminCommand,
        noreply: bool,
    },
    /// quit: close the connection without a reply.
    Quit,
    /// `mn`: answered `MN`.
    MetaNoop,
    /// `mg|md|ma <key> <flags>*`, `ms <key> <datalen> <flags>*\r\n<data>\r\n`.
    /// `key` is as sent (base64 under `b`), `tokens` the flag tokens as sent
    /// (everything after the key, or after the length for ms), `data` the
    /// ms data block without its `\r\n` (empty otherwise).
    Meta {
        command: MetaCommand,
        key: B,
        tokens: B,
        data: B,
        flags: MetaFlags,
    },
}

impl<B> Request<B> {
    /// Replace every byte field through `f` (e.g. `&[u8]` → `Bytes`).
    pub fn map<C>(self, mut f: impl FnMut(B) -> C) -> Request<C> {
        match self {
            Request::Retrieval {
                command,
                exptime,
                keys,
            } => Request::Retrieval {
                command,
                exptime,
                keys: Keys {
                    raw: f(keys.raw),
                    count: keys.count,
                },
            },
            Request::Storage {
                command,
                key,
                flags,
                exptime,
                cas,
                data,
                noreply,
            } => Request::Storage {
                command,
                key: f(key),
                flags,
                exptime,
                cas,
                data: f(data),
                noreply,
            },
            Request::Arith {
                command,
                key,
                delta,
                noreply,
            } => Request::Arith {
                command,
                key: f(key),
                delta,
                noreply,
            },
            Request::Delete { key, noreply } => Request::Delete {
                key: f(key),
                noreply,
            },
            Request::Touch {
                key,
                exptime,
                noreply,
            } => Request::Touch {
                key: f(key),
                exptime,
                noreply,
            },
            Request::FlushAll { delay, noreply } => Request::FlushAll { delay, noreply },
            Request::Version => Request::Version,
            Request::Verbosity { noreply } => Request::Verbosity { noreply },
            Request::Stats(group) => Request::Stats(group),
            Request::Admin { command, noreply } => Request::Admin { command, noreply },
            Request::Quit => Request::Quit,
            Request::MetaNoop => Request::MetaNoop,
            Request::Meta {
                command,
                key,
                tokens,
                data,
                flags,
            } => Request::Meta {
                command,
                key: f(key),
                tokens: f(tokens),
                data: f(data),
                flags,
            },
        }
    }

    /// True when the client asked for no reply on success.
    pub fn noreply(&self) -> bool {
        match self {
            Request::Storage { noreply, .. }
            | Request::Arith { noreply, .. }
            | Request::Delete { noreply, .. }
            | Request::Touch { noreply, .. }
            | Request::FlushAll { noreply, .. }
            | Request::Verbosity { noreply }
            | Request::Admin { noreply, .. } => *noreply,
            // `q` hides only some outcomes: never the whole reply.
            _ => false,
        }
    }

    /// Short stable name, for metrics labels.
    pub fn command_name(&self) -> &'static str {
        match self {
            Request::Retrieval { command, .. } => match command {
                RetrievalCommand::Get => "get",
                RetrievalCommand::Gets => "gets",
                RetrievalCommand::Gat => "gat",
                RetrievalCommand::Gats => "gats",
            },
            Request::Storage { command, .. } => match command {
                StorageCommand::Set => "set",
                StorageCommand::Add => "add",
                StorageCommand::Replace => "replace",
                StorageCommand::Append => "append",
                StorageCommand::Prepend => "prepend",
                StorageCommand::Cas => "cas",
            },
            Request::Arith { command, .. } => match command {
                ArithCommand::Incr => "incr",
                ArithCommand::Decr => "decr",
            },
            Request::Delete { .. } => "delete",
            Request::Touch { .. } => "touch",
            Request::FlushAll { .. } => "flush_all",
            Request::Version => "version",
            Request::Verbosity { .. } => "verbosity",
            Request::Stats(_) => "stats",
            Request::Admin { command, .. } => match command {
                AdminCommand::CacheMemlimit { .. } => "cache_memlimit",
                AdminCommand::SlabsAutomove | AdminCommand::SlabsReassign { .. } => "slabs",
                AdminCommand::Lru => "lru",
                AdminCommand::LruCrawler(_) => "lru_crawler",
                AdminCommand::Watch { .. } => "watch",
            },
            Request::Quit => "quit",
            Request::MetaNoop => "mn",
            Request::Meta { command, .. } => match command {
                MetaCommand::Get => "mg",
                MetaCommand::Set => "ms",
                MetaCommand::Delete => "md",
                MetaCommand::Arith => "ma",
                MetaCommand::Debug => "me",
            },
        }
    }
}
