//! `mg <key> <flags>*`, with the anti-stampede flags `N` (create on miss),
//! `R` (recache token), `h` and `l` (see docs/meta.md).

use super::meta::{self, Verb};
use super::{Line, Parsed};
use crate::memcache::{MetaCommand, Request};

const OPTIONS_TOO_LONG: &[u8] = b"CLIENT_ERROR options flags are too long\r\n";

pub(super) fn parse<'a>(line: Line<'a>, rest: &'a [u8]) -> Parsed<'a> {
    let (args, key, pre) = match meta::key_and_flags(rest, Verb::Get, OPTIONS_TOO_LONG) {
        Ok(parts) => parts,
        Err(answer) => return line.reply(answer),
    };
    if pre.opaque_too_long {
        return line.reply(meta::OPAQUE_TOO_LONG);
    }
    let flags = pre.flags;
    let tokens = args.flag_text(1);
    line.complete(Request::Meta {
        command: MetaCommand::Get,
        key,
        tokens,
        data: tokens.get(tokens.len()..).unwrap_or_default(),
        flags,
    })
}
