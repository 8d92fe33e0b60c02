//! `md <key> <flags>*`; with `I` the item is marked stale instead of
//! deleted (with `T`, its TTL changes).

use super::meta::{self, Verb};
use super::{Line, Parsed};
use crate::memcache::{MetaCommand, Request};

pub(super) fn parse<'a>(line: Line<'a>, rest: &'a [u8]) -> Parsed<'a> {
    let (args, key, pre) = match meta::key_and_flags(rest, Verb::Delete, meta::OPTIONS_TOO_LONG) {
        Ok(parts) => parts,
        Err(answer) => return line.reply(answer),
    };
    if pre.opaque_too_long {
        return line.reply(meta::OPAQUE_TOO_LONG);
    }
    let tokens = args.flag_text(1);
    line.complete(Request::Meta {
        command: MetaCommand::Delete,
        key,
        tokens,
        data: tokens.get(tokens.len()..).unwrap_or_default(),
        flags: pre.flags,
    })
}
