//! Pure wire codecs for memshift: no sockets, no tokio.
//!
//! * [`memcache`]: the memcached text protocol, both sides: parsing client
//!   requests and encoding replies (server side), encoding requests and parsing
//!   replies (client side, for the legacy pool).
//! * [`resp`]: RESP2, client side: encoding Redis commands, parsing replies.

pub mod memcache;
pub mod resp;
