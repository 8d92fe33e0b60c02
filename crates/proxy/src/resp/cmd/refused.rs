//! Redis commands memshift knows and refuses at once, with the reason the
//! client sees (`-ERR <COMMAND> is not supported by memshift: <why>`).
//! Commands in no list get Redis' own "unknown command" error.

const CROSS_SHARD: &str =
    "its keys may live on different shards (memshift spreads keys over a ring of Redis servers)";
const TRANSACTION: &str = "transactions cannot span the shards of a ring";
const BLOCKING: &str = "blocking commands would hold a shared backend connection";
const KEYSPACE: &str = "walking the keyspace of every shard is not proxied";
const ADMIN: &str = "server and cluster administration go to each Redis server directly";
const HEADER: &str = "string values shared with memcached clients carry memshift's item header, so bit offsets would be wrong";
const OTHER_TYPE: &str = "this data type is not proxied yet";
const TRACKING: &str = "client-side caching is not proxied";

pub(super) fn reason(upper: &[u8]) -> Option<&'static str> {
    Some(match upper {
        b"MULTI" | b"EXEC" | b"DISCARD" | b"WATCH" | b"UNWATCH" => TRANSACTION,
        b"BLPOP" | b"BRPOP" | b"BLMOVE" | b"BRPOPLPUSH" | b"BLMPOP" | b"BZPOPMIN" | b"BZPOPMAX"
        | b"BZMPOP" | b"WAIT" | b"WAITAOF" | b"XREAD" | b"XREADGROUP" => BLOCKING,
        b"SCAN" | b"KEYS" | b"RANDOMKEY" => KEYSPACE,
        b"RENAME" | b"RENAMENX" | b"COPY" | b"MOVE" | b"SMOVE" | b"SINTER" | b"SINTERSTORE"
        | b"SINTERCARD" | b"SUNION" | b"SUNIONSTORE" | b"SDIFF" | b"SDIFFSTORE" | b"LMOVE"
        | b"RPOPLPUSH" | b"LMPOP" | b"ZUNION" | b"ZUNIONSTORE" | b"ZINTER" | b"ZINTERSTORE"
        | b"ZINTERCARD" | b"ZDIFF" | b"ZDIFFSTORE" | b"ZRANGESTORE" | b"ZMPOP" | b"LCS"
        | b"BITOP" | b"PFMERGE" | b"SORT" | b"SORT_RO" | b"FCALL" | b"FCALL_RO" => CROSS_SHARD,
        b"GETBIT" | b"SETBIT" | b"BITCOUNT" | b"BITPOS" | b"BITFIELD" | b"BITFIELD_RO" => HEADER,
        b"DUMP" | b"RESTORE" | b"OBJECT" | b"MIGRATE" => HEADER,
        b"XADD" | b"XRANGE" | b"XREVRANGE" | b"XLEN" | b"XDEL" | b"XTRIM" | b"XGROUP" | b"XACK"
        | b"XPENDING" | b"XCLAIM" | b"XAUTOCLAIM" | b"XINFO" | b"XSETID" | b"PFADD"
        | b"PFCOUNT" | b"GEOADD" | b"GEODIST" | b"GEOHASH" | b"GEOPOS" | b"GEORADIUS"
        | b"GEORADIUSBYMEMBER" | b"GEOSEARCH" | b"GEOSEARCHSTORE" => OTHER_TYPE,
        b"CLUSTER" | b"CONFIG" | b"DEBUG" | b"SAVE" | b"BGSAVE" | b"BGREWRITEAOF" | b"LASTSAVE"
        | b"SHUTDOWN" | b"SLAVEOF" | b"REPLICAOF" | b"REPLCONF" | b"SYNC" | b"PSYNC"
        | b"MONITOR" | b"SLOWLOG" | b"LATENCY" | b"MEMORY" | b"MODULE" | b"ACL" | b"FUNCTION"
        | b"FAILOVER" | b"SWAPDB" | b"LOLWUT" | b"TIME" | b"ROLE" | b"READONLY" | b"READWRITE"
        | b"ASKING" => ADMIN,
        _ => return None,
    })
}

/// CLIENT subcommands other than SETNAME/GETNAME/SETINFO/ID.
pub(super) const CLIENT_OTHER: &str =
    "only CLIENT SETNAME, GETNAME, SETINFO and ID are answered (connections to the shards are memshift's own)";
pub(super) const CLIENT_TRACKING: &str = TRACKING;
