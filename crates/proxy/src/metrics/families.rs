//! The catalogue of what is exported: family names with their type and
//! HELP text, and the fixed label values (commands, phases, buckets).

/// Every command the proxy counts, in the order [`command_index`] numbers
/// them. The strings are the `command` label values.
pub const COMMANDS: [&str; 36] = [
    "get",
    "gets",
    "gat",
    "gats",
    "set",
    "add",
    "replace",
    "append",
    "prepend",
    "cas",
    "incr",
    "decr",
    "delete",
    "touch",
    "flush_all",
    "version",
    "verbosity",
    "stats",
    "quit",
    "mn",
    "mg",
    "ms",
    "md",
    "ma",
    // RESP command groups (GET/SET/DEL/INCR/... count as the memcached
    // names above, with protocol="resp").
    "strings",
    "hashes",
    "lists",
    "sets",
    "zsets",
    "keys",
    "scripts",
    "connection",
    "server",
    "refused",
    "transactions",
    "pubsub",
];

/// Position of a command in [`COMMANDS`]; resolve once, then pass the index
/// to [`Metrics::request`].
pub fn command_index(name: &str) -> Option<usize> {
    COMMANDS.iter().position(|c| *c == name)
}

/// The migration phases, as `phase` label values of `memshift_migration_phase`.
pub const PHASES: [&str; 5] = ["memcached", "warmup", "canary", "cutover", "redis"];

/// Upper bounds (seconds) of `memshift_request_duration_seconds`: 50µs to 1s,
/// dense below 10ms where a healthy proxy in front of local Redis lives.
pub const DURATION_BUCKETS: [f64; 14] = [
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
];

// Family names, shared by registration, describe() and the tests.
pub const REQUESTS_TOTAL: &str = "memshift_requests_total";
pub const REQUEST_DURATION: &str = "memshift_request_duration_seconds";
pub const GET_HITS: &str = "memshift_get_hits_total";
pub const GET_MISSES: &str = "memshift_get_misses_total";
pub const BACKEND_ERRORS: &str = "memshift_backend_errors_total";
pub const BACKEND_UP: &str = "memshift_backend_up";
pub const READ_ERRORS_AS_MISSES: &str = "memshift_read_errors_as_misses_total";
pub const BACKEND_PRIMARY_CHANGES: &str = "memshift_backend_primary_changes_total";
pub const BACKEND_PRIMARY: &str = "memshift_backend_primary";
pub const REPLICA_READS: &str = "memshift_replica_reads_total";
pub const CLIENT_CONNECTIONS: &str = "memshift_client_connections";
pub const CLIENT_CONNECTIONS_TOTAL: &str = "memshift_client_connections_total";
pub const TRANSPORT_CONNECTIONS: &str = "memshift_transport_connections";
pub const TRANSPORT_CONNECTIONS_TOTAL: &str = "memshift_transport_connections_total";
pub const REJECTED_CONNECTIONS: &str = "memshift_rejected_connections_total";
pub const SLOW_CONSUMERS: &str = "memshift_slow_consumers_total";
pub const DEDICATED_CONNECTIONS: &str = "memshift_redis_dedicated_connections";
pub const DEDICATED_REFUSED: &str = "memshift_redis_dedicated_refused_total";
pub const DRAIN_ABORTED: &str = "memshift_drain_aborted_connections_total";
pub const DRAIN_DROPPED: &str = "memshift_drain_dropped_total";
pub const SHADOW_WRITES: &str = "memshift_shadow_writes_total";
pub const SHADOW_BREAKER_OPEN: &str = "memshift_shadow_breaker_open";
pub const COMPARE: &str = "memshift_compare_total";
pub const MIGRATION_PHASE: &str = "memshift_migration_phase";
pub const ROLLBACKS: &str = "memshift_rollbacks_total";
pub const TLS_HANDSHAKES: &str = "memshift_tls_handshakes_total";
pub const CONFIG_RELOADS: &str = "memshift_config_reloads_total";
pub const BUILD_INFO: &str = "memshift_build_info";
pub const SUBSCRIBERS: &str = "memshift_resp_subscriber_connections";
pub const SUBSCRIBERS_REFUSED: &str = "memshift_resp_subscribers_refused_total";
pub const SUBSCRIBERS_LOST: &str = "memshift_resp_subscriber_connections_lost_total";

/// The HELP text of a family in [`FAMILIES`] ("" for another name).
pub fn help(name: &str) -> &'static str {
    FAMILIES
        .iter()
        .find(|(family, _, _)| *family == name)
        .map_or("", |(_, _, help)| *help)
}

/// Every family `Metrics::new()` exposes: name, Prometheus type, HELP text.
/// `memshift_backend_*` only get series once a shard is registered.
pub const FAMILIES: [(&str, &str, &str); 31] = [
    (
        REQUESTS_TOTAL,
        "counter",
        "Client requests handled, by protocol (text, binary, resp) and command.",
    ),
    (
        REQUEST_DURATION,
        "histogram",
        "Time from a parsed request to its encoded reply, by command.",
    ),
    (
        GET_HITS,
        "counter",
        "Keys found by get/gets/gat/gats, by the backend that answered.",
    ),
    (
        GET_MISSES,
        "counter",
        "Keys not found by get/gets/gat/gats, by the backend that answered.",
    ),
    (
        BACKEND_ERRORS,
        "counter",
        "Failed backend requests, by backend, shard and kind.",
    ),
    (
        BACKEND_UP,
        "gauge",
        "1 while the shard or server answers, 0 while it is down.",
    ),
    (
        READ_ERRORS_AS_MISSES,
        "counter",
        "Keys of memcached reads answered as misses because their Redis shard failed (redis.read_errors_as_misses), by shard.",
    ),
    (
        REPLICA_READS,
        "counter",
        "Reads sent to a replica of a Sentinel shard (redis.read_from = replica_preferred), by shard.",
    ),
    (
        BACKEND_PRIMARY_CHANGES,
        "counter",
        "Sentinel-managed shards: primary switches followed, by shard (master name).",
    ),
    (
        BACKEND_PRIMARY,
        "gauge",
        "Sentinel-managed shards: 1 for the shard's current primary address, 0 for earlier ones.",
    ),
    (CLIENT_CONNECTIONS, "gauge", "Open client connections."),
    (
        CLIENT_CONNECTIONS_TOTAL,
        "counter",
        "Client connections accepted since start.",
    ),
    (
        TRANSPORT_CONNECTIONS,
        "gauge",
        "Open client connections, by transport (tcp, unix).",
    ),
    (
        TRANSPORT_CONNECTIONS_TOTAL,
        "counter",
        "Client connections accepted since start, by transport (tcp, unix).",
    ),
    (
        REJECTED_CONNECTIONS,
        "counter",
        "Client connections refused because max_connections was reached.",
    ),
    (
        SLOW_CONSUMERS,
        "counter",
        "Client connections closed because they did not read their replies.",
    ),
    (
        DEDICATED_CONNECTIONS,
        "gauge",
        "Redis connections held by one RESP session (WATCH, a transaction, a blocking call).",
    ),
    (
        DEDICATED_REFUSED,
        "counter",
        "RESP transactions and blocking calls refused because redis.max_dedicated_connections were in use.",
    ),
    (
        DRAIN_ABORTED,
        "counter",
        "Client connections closed at shutdown because drain_timeout_ms ran out before they finished.",
    ),
    (
        DRAIN_DROPPED,
        "counter",
        "Requests read from clients but left unanswered when drain_timeout_ms ran out.",
    ),
    (
        SHADOW_WRITES,
        "counter",
        "Shadow writes to the non-primary backend, by result.",
    ),
    (
        SHADOW_BREAKER_OPEN,
        "gauge",
        "1 while the shadow circuit breaker for the backend is open.",
    ),
    (
        COMPARE,
        "counter",
        "Sampled reads compared across both backends, by result.",
    ),
    (
        MIGRATION_PHASE,
        "gauge",
        "1 for the current migration phase, 0 for the others.",
    ),
    (
        ROLLBACKS,
        "counter",
        "Automatic canary rollbacks to warmup.",
    ),
    (
        TLS_HANDSHAKES,
        "counter",
        "Client TLS handshakes, by result.",
    ),
    (
        CONFIG_RELOADS,
        "counter",
        "Config reloads (SIGHUP), by result.",
    ),
    (
        BUILD_INFO,
        "gauge",
        "Always 1; the version label carries the build.",
    ),
    (
        SUBSCRIBERS,
        "gauge",
        "RESP pub/sub: subscriber connections open to the shards (one per subscribed client and node).",
    ),
    (
        SUBSCRIBERS_REFUSED,
        "counter",
        "RESP pub/sub: SUBSCRIBE/PSUBSCRIBE/SSUBSCRIBE refused because redis.max_subscriber_connections were open.",
    ),
    (
        SUBSCRIBERS_LOST,
        "counter",
        "RESP pub/sub: subscriber connections that failed (shard down, connection lost); each closed its client with an error.",
    ),
];
