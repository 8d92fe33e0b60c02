//! memcached text protocol (and, in [`binary`], its binary protocol).
//!
//! Server side: [`parse_request`] turns bytes from a client into a
//! [`Request`]; [`reply`] encodes the answers. Client side (for talking to a
//! legacy memcached pool): [`client`] encodes requests and parses replies.

mod admin;
pub mod base64;
pub mod binary;
pub mod client;
mod exptime;
mod parse;
pub mod reply;
mod request;

pub use admin::{AdminCommand, CrawlClasses, LruCrawler, StatsDetail, StatsGroup, MAX_SLAB_CLASS};
pub use exptime::{unix_now, Exptime, REALTIME_MAXDELTA};
pub use parse::{
    parse_request, unterminated_line_closes, ParseLimits, Parsed, ProtocolError, StaleKey,
    ITEM_OVERHEAD, MAX_LINE_LEN, READ_BUFFER_SIZE,
};
pub use request::{
    ArithCommand, Keys, MetaCommand, MetaFlags, MetaSetMode, Request, RetrievalCommand,
    StorageCommand, MAX_KEY_LEN,
};
