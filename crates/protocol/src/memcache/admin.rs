//! Typed forms of memcached's administrative commands (`stats <group>`,
//! `cache_memlimit`, `slabs`, `lru`, `lru_crawler`, `watch`). The parser has
//! already answered every malformed one the way memcached 1.6.18 does; what
//! reaches a server is valid, and the server picks the reply that depends on
//! its state.

/// `stats [group ...]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatsGroup {
    /// `stats`: the general counters.
    General,
    /// `stats reset [...]`: zero the resettable counters.
    Reset,
    Settings,
    Items,
    Slabs,
    Sizes,
    SizesEnable,
    SizesDisable,
    Conns,
    Extstore,
    /// `stats detail on|off|dump`.
    Detail(StatsDetail),
    /// `stats cachedump <class> <limit>`; `class` is below 64.
    CacheDump {
        class: u32,
        limit: u32,
    },
}

/// The argument of `stats detail`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatsDetail {
    On,
    Off,
    Dump,
}

/// Largest slab class id memcached accepts anywhere (MAX_NUMBER_OF_SLAB_CLASSES - 1).
pub const MAX_SLAB_CLASS: u32 = 63;

/// The class list of `lru_crawler crawl|metadump <classes>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrawlClasses {
    /// `all`.
    All,
    /// `hash`: walk the hash table (metadump only; crawl refuses it).
    Hash,
    /// A comma list of class ids, each in 1..=63.
    Listed,
    /// A comma list with nothing in it (`,`).
    Empty,
    /// A list with a bad or out-of-range id.
    Bad,
}

/// `lru_crawler <subcommand>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LruCrawler {
    Crawl(CrawlClasses),
    Metadump(CrawlClasses),
    /// `tocrawl <n>` and `sleep <µs>`: crawler tuning.
    Tune,
    Enable,
    Disable,
}

/// Administrative commands other than `stats`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdminCommand {
    /// `cache_memlimit <megabytes>`, 8..=1000000000.
    CacheMemlimit {
        megabytes: u32,
    },
    /// `slabs automove <0|1|2>` or `slabs automove ratio <r>`.
    SlabsAutomove,
    /// `slabs reassign <src> <dst>`.
    SlabsReassign {
        src: i32,
        dst: i32,
    },
    /// `lru tune|mode|temp_ttl ...`.
    Lru,
    LruCrawler(LruCrawler),
    /// `watch [streams...]`: turn the connection into a log stream.
    /// memcached refuses a pipelined `watch` before it looks at the stream
    /// names, so an unknown name is the server's to answer (`ERROR`).
    Watch {
        streams_known: bool,
    },
}
