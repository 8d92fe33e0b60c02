//! `mg <key> <flags>*`.
//!
//! Not served (answered `CLIENT_ERROR invalid flag`, see docs/meta.md): `N`
//! (create on miss, with win/stale tokens), `R` (recache token), `h` and `l`
//! (hit-before and last-access, which Redis does not keep per item).

use super::meta::{self, MetaArgs, Verb};
use super::{reply, Line, Parsed};
use crate::memcache::{MetaCommand, Request};

const OPTIONS_TOO_LONG: &[u8] = b"CLIENT_ERROR options flags are too long\r\n";

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
        return line.reply(OPTIONS_TOO_LONG);
    }
    let pre = match meta::preparse(key, args.flags(1), Verb::Get) {
        Ok(pre) => pre,
        Err(msg) => return line.reply(msg),
    };
    if pre.opaque_too_long {
        return line.reply(meta::OPAQUE_TOO_LONG);
    }
    let flags = pre.flags;
    if flags.vivify.is_some() || flags.recache || flags.access_info {
        return line.reply(meta::INVALID_FLAG);
    }
    let tokens = args.flag_text(1);
    line.complete(Request::Meta {
        command: MetaCommand::Get,
        key,
        tokens,
        data: tokens.get(tokens.len()..).unwrap_or_default(),
        flags,
    })
}
