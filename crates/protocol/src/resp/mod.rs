//! RESP2, client side: command encoding and resumable reply parsing.

mod encode;
mod frame;
mod parse;

pub use encode::{encode_command, CommandWriter};
pub use frame::Frame;
pub use parse::{ReplyParser, RespError, MAX_ARRAY_LEN, MAX_BULK_LEN, MAX_DEPTH, MAX_LINE_LEN};
