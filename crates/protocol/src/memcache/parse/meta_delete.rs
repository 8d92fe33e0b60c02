//! `md <key> <flags>*`.
//!
//! Not served: `I` (mark the item stale instead of deleting it), answered
//! `CLIENT_ERROR invalid flag`.

use super::meta::{self, MetaArgs, Verb};
use super::{reply, Line, Parsed};
use crate::memcache::{MetaCommand, Request};

pub(super) fn parse<'a>(line: Line<'a>, rest: &'a [u8]) -> Parsed<'a> {
    let args = MetaArgs::split(rest);
    if args.len() == 0 {
        return line.reply(reply::ERROR);
    }
    let key = args.get(0);
    if meta::key_too_long(key) {
        return line.reply(reply::CLIENT_ERROR_BAD_FORMAT);
    }
    if args.too_many() {
        return line.reply(meta::OPTIONS_TOO_LONG);
    }
    let pre = match meta::preparse(key, args.flags(1), Verb::Delete) {
        Ok(pre) => pre,
        Err(msg) => return line.reply(msg),
    };
    if pre.opaque_too_long {
        return line.reply(meta::OPAQUE_TOO_LONG);
    }
    if pre.flags.invalidate {
        return line.reply(meta::INVALID_FLAG);
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
