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

pub(super) fn reason(upper: &[u8]) -> Option<&'static str> {
    Some(match upper {
        b"WAIT" | b"WAITAOF" | b"XREAD" | b"XREADGROUP" => BLOCKING,
        b"MOVE" | b"SWAPDB" => ONE_DB,
        b"READONLY" | b"READWRITE" | b"ASKING" => CLUSTER_CONN,
        b"RENAME" | b"RENAMENX" | b"COPY" | b"SMOVE" | b"SINTER" | b"SINTERSTORE"
        | b"SINTERCARD" | b"SUNION" | b"SUNIONSTORE" | b"SDIFF" | b"SDIFFSTORE" | b"LMOVE"
        | b"RPOPLPUSH" | b"LMPOP" | b"ZUNION" | b"ZUNIONSTORE" | b"ZINTER" | b"ZINTERSTORE"
        | b"ZINTERCARD" | b"ZDIFF" | b"ZDIFFSTORE" | b"ZRANGESTORE" | b"ZMPOP" | b"LCS"
        | b"BITOP" | b"PFMERGE" | b"SORT" | b"SORT_RO" | b"FCALL" | b"FCALL_RO" => CROSS_SHARD,
        b"GETBIT" | b"SETBIT" | b"BITCOUNT" | b"BITPOS" | b"BITFIELD" | b"BITFIELD_RO" => HEADER,
        b"DUMP" | b"RESTORE" => DUMP,
        b"XADD" | b"XRANGE" | b"XREVRANGE" | b"XLEN" | b"XDEL" | b"XTRIM" | b"XGROUP" | b"XACK"
        | b"XPENDING" | b"XCLAIM" | b"XAUTOCLAIM" | b"XINFO" | b"XSETID" | b"PFADD"
        | b"PFCOUNT" | b"GEOADD" | b"GEODIST" | b"GEOHASH" | b"GEOPOS" | b"GEORADIUS"
        | b"GEORADIUSBYMEMBER" | b"GEOSEARCH" | b"GEOSEARCHSTORE" => OTHER_TYPE,
        b"CLUSTER" | b"MIGRATE" | b"DEBUG" | b"SAVE" | b"BGSAVE" | b"BGREWRITEAOF"
        | b"LASTSAVE" | b"SHUTDOWN" | b"SLAVEOF" | b"REPLICAOF" | b"REPLCONF" | b"SYNC"
        | b"PSYNC" | b"MONITOR" | b"SLOWLOG" | b"LATENCY" | b"MEMORY" | b"MODULE" | b"ACL"
        | b"FUNCTION" | b"FAILOVER" | b"LOLWUT" | b"ROLE" => ADMIN,
        _ => return None,
    })
}

/// CLIENT subcommands other than SETNAME/GETNAME/SETINFO/ID.
pub(super) const CLIENT_OTHER: &str =
    "only CLIENT SETNAME, GETNAME, SETINFO and ID are answered (the shards' connections are memshift's own, not this client's)";
pub(super) const CLIENT_TRACKING: &str = TRACKING;
