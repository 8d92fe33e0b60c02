//! incr / decr `<key> <delta> [noreply]`.

use super::tokens::{parse_u64, Args};
use super::{reply, Line, Parsed};
use crate::memcache::{ArithCommand, Request, MAX_KEY_LEN};

pub(super) fn parse<'a>(line: Line<'a>, rest: &'a [u8], command: ArithCommand) -> Parsed<'a> {
    let args = Args::split(rest);
    if args.len() != 2 && args.len() != 3 {
        return line.reply(reply::ERROR);
    }
    let noreply = args.noreply();
    let key = args.get(0);
    if key.len() > MAX_KEY_LEN {
        return line.reply_unless(noreply, reply::CLIENT_ERROR_BAD_FORMAT);
    }
    let Some(delta) = parse_u64(args.get(1)) else {
        return line.reply_unless(noreply, reply::CLIENT_ERROR_INVALID_DELTA);
    };
    line.complete(Request::Arith {
        command,
        key,
        delta,
        noreply,
    })
}
