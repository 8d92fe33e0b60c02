//! memcached's binary protocol (deprecated by memcached in 1.6, still served
//! by 1.6.18 on the same port: a connection whose first byte is `0x80`
//! speaks it for its whole life).
//!
//! Server side only: [`parse`] turns a client's bytes into a [`Request`]
//! (or the [`Error`] memcached answers), [`response`] encodes the replies.
//! The checks and the bytes they consume follow memcached 1.6.18
//! (`proto_bin.c`), confirmed against a live 1.6.18:
//!
//! * the 24-byte header must start with `0x80`, else the connection closes
//!   without a reply;
//! * memcached waits for the header, extras and key (never more than
//!   24 + 255 + 65535 bytes) before any other check;
//! * key + extras longer than the body: `Unknown command`, then close;
//! * a key over 250 bytes, or extras/key/body lengths an opcode does not
//!   take: `Invalid arguments`, then close;
//! * an unknown opcode (Verbosity 0x1b among them: 1.6.18 does not serve
//!   it): `Unknown command`, and the body length is discarded *after* the
//!   extras and key (memcached's own accounting, reproduced);
//! * a value too large for an item: `Too large.`, the value discarded;
//! * body bytes an opcode does not read (Stat, Touch, GAT take any body
//!   length) are read as the next request, as memcached does.

mod header;
mod opcode;
mod request;
pub mod response;

pub use header::{Header, HEADER_LEN, REQUEST_MAGIC, RESPONSE_MAGIC};
pub use opcode::Opcode;
pub use request::{parse, read_header, Command, Error, Parsed, Request, StoreMode};
pub use response::Status;
