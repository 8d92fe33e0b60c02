//! Redis commands memshift knows and refuses at once, with the reason the
//! client sees (`-ERR <COMMAND> is not supported by memshift: <why>`).
//! Commands in no list get Redis' own "unknown command" error.

const CROSS_SHARD: &str =
    "its keys may live on different shards (memshift spreads keys over several Redis servers) and it would have to read or write them together";
const BLOCKING: &str =
    "a blocking command would hold a backend connection that other clients' requests share";
const ADMIN: &str =
    "it administers one Redis server and memshift fronts several (run it on each Redis server directly)";
const ONE_DB: &str =
    "memshift serves database 0 only (one keyspace, shared with memcached clients)";
const CLUSTER_CONN: &str =
    "memshift follows the cluster's slots itself; its clients see one server, not a cluster";
const HEADER: &str = "string values shared with memcached clients start with memshift's item header, so bit offsets would point into it";
const DUMP: &str = "a dump holds the stored bytes, memshift's item header included, not the value clients see (copy keys with GET and SET, or memshift copy)";
const OTHER_TYPE: &str = "streams, HyperLogLog and geo commands are not proxied yet (strings, hashes, lists, sets and sorted sets are)";
const TRACKING: &str = "client-side caching would need invalidations from every shard on this connection (memshift's near cache does this for it, see docs/near-cache.md)";

/// Every refused command (upper case) and why: its position is its
/// `INFO commandstats` row after the served ones (`table::stats_row`).
pub(super) static REFUSED: &[(&str, &str)] = &[
    ("WAIT", BLOCKING),
    ("WAITAOF", BLOCKING),
    ("XREAD", BLOCKING),
    ("XREADGROUP", BLOCKING),
    ("MOVE", ONE_DB),
    ("SWAPDB", ONE_DB),
    ("READONLY", CLUSTER_CONN),
    ("READWRITE", CLUSTER_CONN),
    ("ASKING", CLUSTER_CONN),
    ("RENAME", CROSS_SHARD),
    ("RENAMENX", CROSS_SHARD),
    ("COPY", CROSS_SHARD),
    ("SMOVE", CROSS_SHARD),
    ("SINTER", CROSS_SHARD),
    ("SINTERSTORE", CROSS_SHARD),
    ("SINTERCARD", CROSS_SHARD),
    ("SUNION", CROSS_SHARD),
    ("SUNIONSTORE", CROSS_SHARD),
    ("SDIFF", CROSS_SHARD),
    ("SDIFFSTORE", CROSS_SHARD),
    ("LMOVE", CROSS_SHARD),
    ("RPOPLPUSH", CROSS_SHARD),
    ("LMPOP", CROSS_SHARD),
    ("ZUNION", CROSS_SHARD),
    ("ZUNIONSTORE", CROSS_SHARD),
    ("ZINTER", CROSS_SHARD),
    ("ZINTERSTORE", CROSS_SHARD),
    ("ZINTERCARD", CROSS_SHARD),
    ("ZDIFF", CROSS_SHARD),
    ("ZDIFFSTORE", CROSS_SHARD),
    ("ZRANGESTORE", CROSS_SHARD),
    ("ZMPOP", CROSS_SHARD),
    ("LCS", CROSS_SHARD),
    ("BITOP", CROSS_SHARD),
    ("PFMERGE", CROSS_SHARD),
    ("SORT", CROSS_SHARD),
    ("SORT_RO", CROSS_SHARD),
    ("FCALL", CROSS_SHARD),
    ("FCALL_RO", CROSS_SHARD),
    ("GETBIT", HEADER),
    ("SETBIT", HEADER),
    ("BITCOUNT", HEADER),
    ("BITPOS", HEADER),
    ("BITFIELD", HEADER),
    ("BITFIELD_RO", HEADER),
    ("DUMP", DUMP),
    ("RESTORE", DUMP),
    ("XADD", OTHER_TYPE),
    ("XRANGE", OTHER_TYPE),
    ("XREVRANGE", OTHER_TYPE),
    ("XLEN", OTHER_TYPE),
    ("XDEL", OTHER_TYPE),
    ("XTRIM", OTHER_TYPE),
    ("XGROUP", OTHER_TYPE),
    ("XACK", OTHER_TYPE),
    ("XPENDING", OTHER_TYPE),
    ("XCLAIM", OTHER_TYPE),
    ("XAUTOCLAIM", OTHER_TYPE),
    ("XINFO", OTHER_TYPE),
    ("XSETID", OTHER_TYPE),
    ("PFADD", OTHER_TYPE),
    ("PFCOUNT", OTHER_TYPE),
    ("GEOADD", OTHER_TYPE),
    ("GEODIST", OTHER_TYPE),
    ("GEOHASH", OTHER_TYPE),
    ("GEOPOS", OTHER_TYPE),
    ("GEORADIUS", OTHER_TYPE),
    ("GEORADIUSBYMEMBER", OTHER_TYPE),
    ("GEOSEARCH", OTHER_TYPE),
    ("GEOSEARCHSTORE", OTHER_TYPE),
    ("CLUSTER", ADMIN),
    ("MIGRATE", ADMIN),
    ("DEBUG", ADMIN),
    ("SAVE", ADMIN),
    ("BGSAVE", ADMIN),
    ("BGREWRITEAOF", ADMIN),
    ("LASTSAVE", ADMIN),
    ("SHUTDOWN", ADMIN),
    ("SLAVEOF", ADMIN),
    ("REPLICAOF", ADMIN),
    ("REPLCONF", ADMIN),
    ("SYNC", ADMIN),
    ("PSYNC", ADMIN),
    ("MONITOR", ADMIN),
    ("SLOWLOG", ADMIN),
    ("LATENCY", ADMIN),
    ("MEMORY", ADMIN),
    ("MODULE", ADMIN),
    ("ACL", ADMIN),
    ("FUNCTION", ADMIN),
    ("FAILOVER", ADMIN),
    ("LOLWUT", ADMIN),
    ("ROLE", ADMIN),
];

/// The position in [`REFUSED`] of `upper` (an upper-case name).
pub(super) fn position(upper: &[u8]) -> Option<usize> {
    REFUSED
        .iter()
        .position(|(name, _)| name.as_bytes() == upper)
}

pub(super) fn reason(upper: &[u8]) -> Option<&'static str> {
    REFUSED.get(position(upper)?).map(|(_, why)| *why)
}

/// CLIENT subcommands other than SETNAME/GETNAME/SETINFO/ID.
pub(super) const CLIENT_OTHER: &str =
    "only CLIENT SETNAME, GETNAME, SETINFO and ID are answered (the shards' connections are memshift's own, not this client's)";
pub(super) const CLIENT_TRACKING: &str = TRACKING;
