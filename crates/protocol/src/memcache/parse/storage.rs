//! set / add / replace / append / prepend / cas.
//!
//! `<cmd> <key> <flags> <exptime> <bytes> [<cas unique>] [noreply]\r\n`
//! followed by exactly `<bytes>` bytes and `\r\n`.

use super::tokens::{parse_i32, parse_u32, parse_u64, Args};
use super::{reply, Line, ParseLimits, Parsed, ProtocolError, StaleKey};
use crate::memcache::{Request, StorageCommand, MAX_KEY_LEN};

pub(super) fn parse<'a>(
    buf: &'a [u8],
    line: Line<'a>,
    rest: &'a [u8],
    command: StorageCommand,
    limits: &ParseLimits,
) -> Parsed<'a> {
    let args = Args::split(rest);
    let required = if command == StorageCommand::Cas { 5 } else { 4 };
    // One optional token after the required ones: memcached takes anything
    // there and only acts on `noreply`.
    if args.len() != required && args.len() != required + 1 {
        return line.reply(reply::ERROR);
    }
    let noreply = args.noreply();
    let bad_format = line.reply_unless(noreply, reply::CLIENT_ERROR_BAD_FORMAT);

    let key = args.get(0);
    if key.len() > MAX_KEY_LEN {
        return bad_format;
    }
    let (Some(flags), Some(exptime), Some(length)) = (
        parse_u32(args.get(1)),
        parse_i32(args.get(2)),
        parse_i32(args.get(3)),
    ) else {
        return bad_format;
    };
    let cas = if command == StorageCommand::Cas {
        match parse_u64(args.get(4)) {
            Some(cas) => cas,
            None => return bad_format,
        }
    } else {
        0
    };
    // memcached adds 2 for the `\r\n` to an int, hence the upper bound.
    let Ok(length) = usize::try_from(length) else {
        return bad_format;
    };
    if length > (i32::MAX - 2) as usize {
        return bad_format;
    }

    let data_start = line.len;
    let data_end = data_start.saturating_add(length);
    let block_end = data_end.saturating_add(2);
    if length > limits.max_data_len(key.len(), flags) {
        // memcached swallows the data block, even before it has arrived,
        // and a refused `set` drops the key's old item.
        return Parsed::Invalid(ProtocolError::Reply {
            reply: if noreply {
                b""
            } else {
                reply::SERVER_ERROR_TOO_LARGE
            },
            skip: block_end,
            delete: (command == StorageCommand::Set).then_some(StaleKey { key, base64: false }),
            counted_set: Some(key),
        });
    }
    let (Some(data), Some(terminator)) =
        (buf.get(data_start..data_end), buf.get(data_end..block_end))
    else {
        return Parsed::Incomplete;
    };
    // memcached reads exactly <bytes> + 2 and then checks the last two.
    if terminator != b"\r\n" {
        return Parsed::Invalid(ProtocolError::Reply {
            reply: if noreply {
                b""
            } else {
                reply::CLIENT_ERROR_BAD_DATA_CHUNK
            },
            skip: block_end,
            delete: None,
            counted_set: Some(key),
        });
    }
    Parsed::Complete {
        request: Request::Storage {
            command,
            key,
            flags,
            exptime: i64::from(exptime),
            cas,
            data,
            noreply,
        },
        consumed: block_end,
    }
}
