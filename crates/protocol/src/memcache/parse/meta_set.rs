//! `ms <key> <datalen> <flags>*\r\n<data>\r\n`.
//!
//! Errors found before the length is known leave the data block to be read
//! as a command line (as memcached does); later ones swallow it. `I` only
//! matters with a CAS compare (a stale item takes the value); without `C`
//! memcached ignores it, and so does this.

use super::meta::{self, MetaArgs, Verb};
use super::tokens::parse_i32;
use super::{reply, Line, ParseLimits, Parsed, ProtocolError, StaleKey};
use crate::memcache::{MetaCommand, MetaSetMode, Request};

const INVALID_MODE: &[u8] = b"CLIENT_ERROR invalid mode for ms M token\r\n";

pub(super) fn parse<'a>(
    buf: &'a [u8],
    line: Line<'a>,
    rest: &'a [u8],
    limits: &ParseLimits,
) -> Parsed<'a> {
    let args = MetaArgs::split(rest);
    if args.len() == 0 {
        return line.reply(reply::ERROR);
    }
    let key = args.get(0);
    if meta::key_too_long(key) || args.len() == 1 {
        return line.reply(reply::CLIENT_ERROR_BAD_FORMAT);
    }
    if args.too_many() {
        return line.reply(meta::OPTIONS_TOO_LONG);
    }
    let Some(length) = parse_i32(args.get(1)) else {
        return line.reply(reply::CLIENT_ERROR_BAD_FORMAT);
    };
    let Ok(length) = usize::try_from(length) else {
        return line.reply(reply::CLIENT_ERROR_BAD_FORMAT);
    };
    if length > (i32::MAX - 2) as usize {
        return line.reply(reply::CLIENT_ERROR_BAD_FORMAT);
    }
    let data_start = line.len;
    let data_end = data_start.saturating_add(length);
    let block_end = data_end.saturating_add(2);
    let swallow = |reply: &'static [u8]| {
        Parsed::Invalid(ProtocolError::Reply {
            reply,
            skip: block_end,
            delete: None,
            counted_set: None,
        })
    };

    let pre = match meta::preparse(key, args.flags(2), Verb::Set) {
        Ok(pre) => pre,
        Err(msg) => return swallow(msg),
    };
    let mut flags = pre.flags;
    flags.set_mode = match pre.mode {
        None | Some(b'S') => MetaSetMode::Set,
        Some(b'E') => MetaSetMode::Add,
        Some(b'R') => MetaSetMode::Replace,
        Some(b'A') => MetaSetMode::Append,
        Some(b'P') => MetaSetMode::Prepend,
        Some(_) => return swallow(INVALID_MODE),
    };
    if pre.opaque_too_long {
        return swallow(meta::OPAQUE_TOO_LONG);
    }
    // memcached sizes the item before it looks at `I`; refusing it drops
    // the key's old item, whatever the mode.
    if length > limits.max_data_len(pre.key_len, flags.client_flags) {
        return Parsed::Invalid(ProtocolError::Reply {
            reply: reply::SERVER_ERROR_TOO_LARGE,
            skip: block_end,
            delete: Some(StaleKey {
                key,
                base64: flags.base64,
            }),
            counted_set: None,
        });
    }
    let (Some(data), Some(terminator)) =
        (buf.get(data_start..data_end), buf.get(data_end..block_end))
    else {
        return Parsed::Incomplete;
    };
    if terminator != b"\r\n" {
        return swallow(reply::CLIENT_ERROR_BAD_DATA_CHUNK);
    }
    Parsed::Complete {
        request: Request::Meta {
            command: MetaCommand::Set,
            key,
            tokens: args.flag_text(2),
            data,
            flags,
        },
        consumed: block_end,
    }
}
