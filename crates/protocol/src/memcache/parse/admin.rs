//! flush_all, verbosity and stats (version and quit take no parsing).

use super::tokens::{next_token, parse_i32, parse_u32, Args};
use super::{reply, Line, Parsed};
use crate::memcache::Request;

/// flush_all `[delay] [noreply]`. A negative delay means "now", like 0.
pub(super) fn parse_flush_all<'a>(line: Line<'a>, rest: &'a [u8]) -> Parsed<'a> {
    let args = Args::split(rest);
    if args.len() > 2 {
        return line.reply(reply::ERROR);
    }
    let noreply = args.noreply();
    // memcached reads a delay whenever the line is not just `[noreply]`, and
    // ignores a second token that is not `noreply` (`flush_all 0 junk` is OK).
    let delay_given = args.len() != usize::from(noreply);
    let delay = if delay_given {
        match parse_i32(args.get(0)) {
            Some(delay) => i64::from(delay),
            None => return line.reply_unless(noreply, reply::CLIENT_ERROR_INVALID_EXPTIME),
        }
    } else {
        0
    };
    line.complete(Request::FlushAll { delay, noreply })
}

/// verbosity `<level> [noreply]`. The level must parse but is not kept.
pub(super) fn parse_verbosity<'a>(line: Line<'a>, rest: &'a [u8]) -> Parsed<'a> {
    let args = Args::split(rest);
    if args.len() != 1 && args.len() != 2 {
        return line.reply(reply::ERROR);
    }
    let noreply = args.noreply();
    if parse_u32(args.get(0)).is_none() {
        return line.reply_unless(noreply, reply::CLIENT_ERROR_BAD_FORMAT);
    }
    line.complete(Request::Verbosity { noreply })
}

/// stats `[group [args...]]`. memcached picks the group by the first token
/// only (`stats reset x y` resets); the arguments that `detail` and
/// `cachedump` take are not kept. Which groups exist is the server's call
/// (memcached answers `ERROR` to an unknown one).
pub(super) fn parse_stats<'a>(line: Line<'a>, rest: &'a [u8]) -> Parsed<'a> {
    let group = next_token(rest).map(|(group, _)| group);
    line.complete(Request::Stats { group })
}
