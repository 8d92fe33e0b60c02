//! delete `<key> [0] [noreply]`.
//!
//! memcached 1.6 still accepts the legacy hold time, but only `0`; any other
//! time is a usage error (silent when the line ends in `noreply`).

use super::tokens::Args;
use super::{reply, Line, Parsed};
use crate::memcache::{Request, MAX_KEY_LEN};

pub(super) fn parse<'a>(line: Line<'a>, rest: &'a [u8]) -> Parsed<'a> {
    let args = Args::split(rest);
    if !(1..=3).contains(&args.len()) {
        return line.reply(reply::ERROR);
    }
    let mut noreply = false;
    if args.len() > 1 {
        let hold_is_zero = args.get(1) == b"0";
        noreply = args.noreply();
        let valid = match args.len() {
            2 => hold_is_zero || noreply,
            _ => hold_is_zero && noreply,
        };
        if !valid {
            return line.reply_unless(noreply, reply::CLIENT_ERROR_DELETE_USAGE);
        }
    }
    let key = args.get(0);
    if key.len() > MAX_KEY_LEN {
        return line.reply_unless(noreply, reply::CLIENT_ERROR_BAD_FORMAT);
    }
    line.complete(Request::Delete { key, noreply })
}
