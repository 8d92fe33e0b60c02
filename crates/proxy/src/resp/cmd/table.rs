//! The one list of RESP commands memshift serves: who serves each, its
//! metrics group, and whether it only reads. `dispatch` (who serves it),
//! COMMAND COUNT / COMMAND LIST / the narrowed COMMAND table (what is
//! served) and the near cache (what must invalidate) all read this table;
//! a new command is one row here plus its handler in its family's file.
//! Commands memshift knows and refuses are in `refused`.

use std::sync::OnceLock;

use memshift_protocol::resp::reply::Shape;

/// Who serves a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Family {
    Connection,
    Server,
    Strings,
    /// Sent to the shard of the key in `args[1]`.
    Relay(Shape),
    /// EVAL/EVALSHA: the key in `args[3]` (exactly one key).
    Script,
    Multi,
    /// MULTI EXEC DISCARD WATCH UNWATCH (`transaction`).
    Transaction,
    /// BLPOP & co. (`blocking`).
    Blocking,
    /// SUBSCRIBE & co., PUBLISH, PUBSUB (`pubsub`).
    PubSub,
    /// SCAN, KEYS, RANDOMKEY over every shard; OBJECT on its key's.
    Keyspace,
    Refused(&'static str),
}

/// One served command.
#[derive(Debug)]
pub(super) struct Command {
    /// Lower case, as COMMAND LIST shows it.
    pub name: &'static str,
    pub family: Family,
    /// Its group in `memshift_commands_total` (metrics::families).
    pub group: &'static str,
    /// Never changes a string key (the near cache keeps only memcached
    /// items, which are strings): no invalidation.
    pub read: bool,
}

const READ: bool = true;
const WRITE: bool = false;

const fn row(name: &'static str, family: Family, group: &'static str, read: bool) -> Command {
    Command {
        name,
        family,
        group,
        read,
    }
}

use Family::*;

/// Every command memshift serves, in COMMAND LIST's order.
pub(super) static COMMANDS: &[Command] = &[
    row("hello", Connection, "connection", WRITE),
    row("auth", Connection, "connection", WRITE),
    row("ping", Connection, "connection", WRITE),
    row("echo", Connection, "connection", WRITE),
    row("quit", Connection, "connection", WRITE),
    row("select", Connection, "connection", WRITE),
    row("client", Connection, "connection", WRITE),
    row("command", Connection, "connection", WRITE),
    row("reset", Connection, "connection", WRITE),
    row("info", Server, "server", WRITE),
    row("dbsize", Server, "server", WRITE),
    row("flushdb", Server, "server", WRITE),
    row("flushall", Server, "server", WRITE),
    row("script", Server, "server", WRITE),
    row("config", Server, "server", READ),
    row("time", Server, "server", READ),
    row("scan", Keyspace, "keys", READ),
    row("keys", Keyspace, "keys", READ),
    row("randomkey", Keyspace, "keys", READ),
    row("object", Keyspace, "keys", READ),
    row("get", Strings, "get", READ),
    row("getex", Strings, "get", WRITE),
    row("getdel", Strings, "get", WRITE),
    row("set", Strings, "set", WRITE),
    row("setnx", Strings, "set", WRITE),
    row("setex", Strings, "set", WRITE),
    row("psetex", Strings, "set", WRITE),
    row("getset", Strings, "set", WRITE),
    row("incr", Strings, "incr", WRITE),
    row("incrby", Strings, "incr", WRITE),
    row("incrbyfloat", Strings, "incr", WRITE),
    row("decr", Strings, "decr", WRITE),
    row("decrby", Strings, "decr", WRITE),
    row("append", Strings, "append", WRITE),
    row("strlen", Strings, "strings", READ),
    row("getrange", Strings, "strings", READ),
    row("substr", Strings, "strings", READ),
    row("setrange", Strings, "strings", WRITE),
    row("mget", Multi, "get", READ),
    row("mset", Multi, "set", WRITE),
    row("msetnx", Multi, "set", WRITE),
    row("del", Multi, "delete", WRITE),
    row("unlink", Multi, "delete", WRITE),
    row("exists", Multi, "keys", READ),
    row("touch", Multi, "touch", WRITE),
    row("hgetall", Relay(Shape::Map), "hashes", WRITE),
    row("hset", Relay(Shape::Plain), "hashes", WRITE),
    row("hsetnx", Relay(Shape::Plain), "hashes", WRITE),
    row("hget", Relay(Shape::Plain), "hashes", WRITE),
    row("hmget", Relay(Shape::Plain), "hashes", WRITE),
    row("hmset", Relay(Shape::Plain), "hashes", WRITE),
    row("hdel", Relay(Shape::Plain), "hashes", WRITE),
    row("hlen", Relay(Shape::Plain), "hashes", WRITE),
    row("hstrlen", Relay(Shape::Plain), "hashes", WRITE),
    row("hincrby", Relay(Shape::Plain), "hashes", WRITE),
    row("hincrbyfloat", Relay(Shape::Plain), "hashes", WRITE),
    row("hkeys", Relay(Shape::Plain), "hashes", WRITE),
    row("hvals", Relay(Shape::Plain), "hashes", WRITE),
    row("hexists", Relay(Shape::Plain), "hashes", WRITE),
    row("hrandfield", Relay(Shape::Plain), "hashes", WRITE),
    row("hscan", Relay(Shape::Plain), "hashes", WRITE),
    row("lpush", Relay(Shape::Plain), "lists", WRITE),
    row("rpush", Relay(Shape::Plain), "lists", WRITE),
    row("lpushx", Relay(Shape::Plain), "lists", WRITE),
    row("rpushx", Relay(Shape::Plain), "lists", WRITE),
    row("lpop", Relay(Shape::Plain), "lists", WRITE),
    row("rpop", Relay(Shape::Plain), "lists", WRITE),
    row("llen", Relay(Shape::Plain), "lists", WRITE),
    row("lrange", Relay(Shape::Plain), "lists", WRITE),
    row("lindex", Relay(Shape::Plain), "lists", WRITE),
    row("lset", Relay(Shape::Plain), "lists", WRITE),
    row("linsert", Relay(Shape::Plain), "lists", WRITE),
    row("lrem", Relay(Shape::Plain), "lists", WRITE),
    row("ltrim", Relay(Shape::Plain), "lists", WRITE),
    row("lpos", Relay(Shape::Plain), "lists", WRITE),
    row("smembers", Relay(Shape::Set), "sets", WRITE),
    row("sadd", Relay(Shape::Plain), "sets", WRITE),
    row("srem", Relay(Shape::Plain), "sets", WRITE),
    row("sismember", Relay(Shape::Plain), "sets", WRITE),
    row("smismember", Relay(Shape::Plain), "sets", WRITE),
    row("scard", Relay(Shape::Plain), "sets", WRITE),
    row("spop", Relay(Shape::Plain), "sets", WRITE),
    row("srandmember", Relay(Shape::Plain), "sets", WRITE),
    row("sscan", Relay(Shape::Plain), "sets", WRITE),
    row("zscore", Relay(Shape::Double), "zsets", WRITE),
    row("zincrby", Relay(Shape::Double), "zsets", WRITE),
    row("zmscore", Relay(Shape::Doubles), "zsets", WRITE),
    row("zrange", Relay(Shape::ScorePairs), "zsets", WRITE),
    row("zrevrange", Relay(Shape::ScorePairs), "zsets", WRITE),
    row("zrangebyscore", Relay(Shape::ScorePairs), "zsets", WRITE),
    row("zrevrangebyscore", Relay(Shape::ScorePairs), "zsets", WRITE),
    row("zadd", Relay(Shape::Plain), "zsets", WRITE),
    row("zrem", Relay(Shape::Plain), "zsets", WRITE),
    row("zcard", Relay(Shape::Plain), "zsets", WRITE),
    row("zcount", Relay(Shape::Plain), "zsets", WRITE),
    row("zrangebylex", Relay(Shape::Plain), "zsets", WRITE),
    row("zrevrangebylex", Relay(Shape::Plain), "zsets", WRITE),
    row("zrank", Relay(Shape::Plain), "zsets", WRITE),
    row("zrevrank", Relay(Shape::Plain), "zsets", WRITE),
    row("zremrangebyrank", Relay(Shape::Plain), "zsets", WRITE),
    row("zremrangebyscore", Relay(Shape::Plain), "zsets", WRITE),
    row("zremrangebylex", Relay(Shape::Plain), "zsets", WRITE),
    row("zlexcount", Relay(Shape::Plain), "zsets", WRITE),
    row("zpopmin", Relay(Shape::Plain), "zsets", WRITE),
    row("zpopmax", Relay(Shape::Plain), "zsets", WRITE),
    row("zrandmember", Relay(Shape::Plain), "zsets", WRITE),
    row("zscan", Relay(Shape::Plain), "zsets", WRITE),
    row("expire", Relay(Shape::Plain), "touch", WRITE),
    row("pexpire", Relay(Shape::Plain), "touch", WRITE),
    row("expireat", Relay(Shape::Plain), "touch", WRITE),
    row("pexpireat", Relay(Shape::Plain), "touch", WRITE),
    row("persist", Relay(Shape::Plain), "touch", WRITE),
    row("ttl", Relay(Shape::Plain), "keys", READ),
    row("pttl", Relay(Shape::Plain), "keys", READ),
    row("expiretime", Relay(Shape::Plain), "keys", READ),
    row("pexpiretime", Relay(Shape::Plain), "keys", READ),
    row("type", Relay(Shape::Plain), "keys", READ),
    row("eval", Script, "scripts", WRITE),
    row("evalsha", Script, "scripts", WRITE),
    row("eval_ro", Script, "scripts", WRITE),
    row("evalsha_ro", Script, "scripts", WRITE),
    row("multi", Transaction, "transactions", WRITE),
    row("exec", Transaction, "transactions", WRITE),
    row("discard", Transaction, "transactions", WRITE),
    row("watch", Transaction, "transactions", WRITE),
    row("unwatch", Transaction, "transactions", WRITE),
    row("blpop", Blocking, "lists", WRITE),
    row("brpop", Blocking, "lists", WRITE),
    row("blmove", Blocking, "lists", WRITE),
    row("brpoplpush", Blocking, "lists", WRITE),
    row("blmpop", Blocking, "lists", WRITE),
    row("bzpopmin", Blocking, "zsets", WRITE),
    row("bzpopmax", Blocking, "zsets", WRITE),
    row("bzmpop", Blocking, "zsets", WRITE),
    row("subscribe", PubSub, "pubsub", READ),
    row("psubscribe", PubSub, "pubsub", READ),
    row("ssubscribe", PubSub, "pubsub", READ),
    row("unsubscribe", PubSub, "pubsub", READ),
    row("punsubscribe", PubSub, "pubsub", READ),
    row("sunsubscribe", PubSub, "pubsub", READ),
    row("publish", PubSub, "pubsub", READ),
    row("spublish", PubSub, "pubsub", READ),
    row("pubsub", PubSub, "pubsub", READ),
];

/// The served command named `upper` (upper case).
pub(super) fn find(upper: &[u8]) -> Option<&'static Command> {
    COMMANDS.get(position(upper)?)
}

/// The index in [`COMMANDS`] of the served command named `upper`.
pub(super) fn position(upper: &[u8]) -> Option<usize> {
    let index = by_name();
    let at = index
        .binary_search_by(|&i| upper_name(&COMMANDS[i]).cmp(upper.iter().copied()))
        .ok()?;
    index.get(at).copied()
}

/// Subcommands counted apart in `INFO commandstats`, as Redis 7.0 names
/// its container commands' subcommands (`cmdstat_config|get`): their rows
/// follow [`COMMANDS`]'.
static SUBCOMMANDS: &[&str] = &[
    "client|setname",
    "client|getname",
    "client|id",
    "client|setinfo",
    "client|tracking",
    "client|caching",
    "client|trackinginfo",
    "client|getredir",
    "client|info",
    "client|list",
    "client|kill",
    "client|reply",
    "client|no-evict",
    "client|pause",
    "client|unpause",
    "client|unblock",
    "client|help",
    "command|count",
    "command|docs",
    "command|info",
    "command|list",
    "command|getkeys",
    "command|getkeysandflags",
    "command|help",
    "config|get",
    "config|set",
    "config|resetstat",
    "config|rewrite",
    "config|help",
    "script|load",
    "script|exists",
    "script|flush",
    "script|kill",
    "script|help",
    "object|encoding",
    "object|freq",
    "object|idletime",
    "object|refcount",
    "object|help",
    "pubsub|channels",
    "pubsub|numsub",
    "pubsub|numpat",
    "pubsub|shardchannels",
    "pubsub|shardnumsub",
    "pubsub|help",
];

/// The `INFO commandstats` row of a request (`args`, `args[0]` its name,
/// `upper` that name in upper case) for a command memshift serves (its
/// index in [`COMMANDS`], `served`) or refuses.
pub(super) fn stats_row(served: Option<usize>, upper: &[u8], args: &[bytes::Bytes]) -> Option<u16> {
    match served {
        Some(own) => served_row(own, args),
        None => refused_row(upper),
    }
}

/// The row of served command `own`: its own, or its subcommand's for a
/// container command (none for a subcommand Redis does not know: it
/// counts no call, only the error).
fn served_row(own: usize, args: &[bytes::Bytes]) -> Option<u16> {
    let command = COMMANDS.get(own)?;
    let container = matches!(
        command.name,
        "client" | "command" | "config" | "script" | "object" | "pubsub"
    );
    let sub = match args.get(1) {
        Some(sub) if container => sub,
        // No subcommand: Redis rejects the container itself (arity).
        _ => return u16::try_from(own).ok(),
    };
    let name = command.name.as_bytes();
    let j = SUBCOMMANDS.iter().position(|s| {
        s.len() == name.len() + 1 + sub.len()
            && s.as_bytes().starts_with(name)
            && s.as_bytes()[name.len() + 1..].eq_ignore_ascii_case(sub)
    })?;
    u16::try_from(COMMANDS.len() + j).ok()
}

/// The row of a command memshift refuses (`upper`, upper case): every
/// call is a rejected one, so that what an application still sends that
/// memshift cannot serve shows there by name.
fn refused_row(upper: &[u8]) -> Option<u16> {
    let k = super::refused::position(upper)?;
    u16::try_from(COMMANDS.len() + SUBCOMMANDS.len() + k).ok()
}

/// The name `INFO commandstats` shows for `row`.
pub(super) fn stats_name(row: usize) -> Option<std::borrow::Cow<'static, str>> {
    if let Some(c) = COMMANDS.get(row) {
        return Some(c.name.into());
    }
    let row = row - COMMANDS.len();
    if let Some(s) = SUBCOMMANDS.get(row) {
        return Some((*s).into());
    }
    let (name, _) = super::refused::REFUSED.get(row - SUBCOMMANDS.len())?;
    Some(name.to_ascii_lowercase().into())
}

/// Rows in use (commands, subcommands, refused commands).
pub(super) fn stats_rows() -> usize {
    COMMANDS.len() + SUBCOMMANDS.len() + super::refused::REFUSED.len()
}

/// Indices into `COMMANDS`, sorted by name, built once.
fn by_name() -> &'static [usize] {
    static INDEX: OnceLock<Vec<usize>> = OnceLock::new();
    INDEX.get_or_init(|| {
        let mut index: Vec<usize> = (0..COMMANDS.len()).collect();
        // Upper-case order: `_` sorts between upper and lower case letters.
        index.sort_by(|&a, &b| upper_name(&COMMANDS[a]).cmp(upper_name(&COMMANDS[b])));
        index
    })
}

fn upper_name(c: &Command) -> impl Iterator<Item = u8> + '_ {
    c.name.bytes().map(|b| b.to_ascii_uppercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_is_found_and_names_are_unique_lower_case() {
        for c in COMMANDS {
            assert_eq!(c.name, c.name.to_ascii_lowercase(), "{}", c.name);
            let found = find(c.name.to_ascii_uppercase().as_bytes()).unwrap();
            assert!(std::ptr::eq(found, c), "{} listed twice", c.name);
            assert!(
                crate::metrics::command_index(c.group).is_some(),
                "{}",
                c.group
            );
            assert!(!matches!(c.family, Refused(_)), "{}", c.name);
        }
        assert!(find(b"NOSUCH").is_none());
        assert!(find(b"").is_none());
        assert!(find(b"get").is_none(), "callers pass upper case");
    }

    #[test]
    fn every_command_and_subcommand_has_a_stats_row() {
        use bytes::Bytes;
        // The row of a request: its name upper-cased, then looked up.
        let row_of = |args: &[Bytes]| {
            let upper = args[0].to_ascii_uppercase();
            stats_row(position(&upper), &upper, args)
        };
        assert!(stats_rows() <= crate::stats::COMMAND_ROWS);
        for (i, c) in COMMANDS.iter().enumerate() {
            let row = row_of(&[Bytes::from_static(c.name.as_bytes())]);
            assert_eq!(row, Some(i as u16));
            assert_eq!(stats_name(i).as_deref(), Some(c.name));
        }
        for (j, s) in SUBCOMMANDS.iter().enumerate() {
            let (name, sub) = s.split_once('|').unwrap();
            let args = [
                Bytes::from_static(name.as_bytes()),
                Bytes::from(sub.to_ascii_uppercase()),
            ];
            let row = row_of(&args).unwrap() as usize;
            assert_eq!(row, COMMANDS.len() + j);
            assert_eq!(stats_name(row).as_deref(), Some(*s));
        }
        let unknown = [Bytes::from_static(b"client"), Bytes::from_static(b"nosuch")];
        assert_eq!(row_of(&unknown), None);
        let args = [Bytes::from_static(b"get"), Bytes::from_static(b"client")];
        let row = row_of(&args).unwrap() as usize;
        assert_eq!(stats_name(row).as_deref(), Some("get"));
        for (name, _) in super::super::refused::REFUSED {
            let row = row_of(&[Bytes::from_static(name.as_bytes())]).unwrap() as usize;
            assert_eq!(stats_name(row), Some(name.to_ascii_lowercase().into()));
        }
        assert_eq!(refused_row(b"GET"), None);
        assert_eq!(row_of(&[Bytes::from_static(b"nosuch")]), None);
        assert_eq!(stats_name(stats_rows()), None);
    }

    #[test]
    fn served_commands_are_never_refused() {
        for c in COMMANDS {
            let upper = c.name.to_ascii_uppercase();
            assert!(
                super::super::refused::reason(upper.as_bytes()).is_none(),
                "{}",
                c.name
            );
        }
    }
}
