//! `ma <key> <flags>*`: incr/decr with `D<delta>` (default 1), `MI`/`M+`
//! (incr, default) or `MD`/`M-` (decr), `N<ttl>` + `J<initial>` to create a
//! missing counter, `C<cas>`, `T<ttl>` on success.
//!
//! memcached checks an over-long opaque only after the arithmetic is done
//! (the counter changes and the client gets the error); here it is refused
//! before anything changes.

use super::meta::{self, Verb};
use super::{Line, Parsed};
use crate::memcache::{MetaCommand, Request};

const INVALID_MODE: &[u8] = b"CLIENT_ERROR invalid mode for ma M token\r\n";

pub(super) fn parse<'a>(line: Line<'a>, rest: &'a [u8]) -> Parsed<'a> {
    let (args, key, pre) = match meta::key_and_flags(rest, Verb::Arith, meta::OPTIONS_TOO_LONG) {
        Ok(parts) => parts,
        Err(answer) => return line.reply(answer),
    };
    let mut flags = pre.flags;
    match pre.mode {
        None | Some(b'I' | b'+') => {}
        Some(b'D' | b'-') => flags.decrement = true,
        Some(_) => return line.reply(INVALID_MODE),
    }
    if pre.opaque_too_long {
        return line.reply(meta::OPAQUE_TOO_LONG);
    }
    let tokens = args.flag_text(1);
    line.complete(Request::Meta {
        command: MetaCommand::Arith,
        key,
        tokens,
        data: tokens.get(tokens.len()..).unwrap_or_default(),
        flags,
    })
}
