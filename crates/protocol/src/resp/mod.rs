//! RESP2, client side: command encoding and resumable reply parsing;
//! server side: request parsing ([`request`]) and replies in RESP2 or
//! RESP3 ([`reply`]).

mod encode;
mod frame;
mod parse;
pub mod reply;
pub mod request;

pub use encode::{encode_command, CommandWriter};
pub use frame::Frame;
pub use parse::{ReplyParser, RespError, MAX_ARRAY_LEN, MAX_BULK_LEN, MAX_DEPTH, MAX_LINE_LEN};
