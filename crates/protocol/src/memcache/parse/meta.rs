//! Meta commands (mg ms md ma mn me): not served by this proxy.
//!
//! memcached 1.6.18 serves them, but our server side does not translate
//! them, so they get memcached's answer to a command it does not know:
//! `ERROR`. For `ms <key> <datalen> ...` the data block that follows is
//! swallowed too, so that it is not run as a command line of its own (a
//! client expects one reply per request, and a data block could read as a
//! valid command).

use super::tokens::{parse_i32, Args};
use super::{reply, Line, Parsed, ProtocolError};

pub(super) fn parse<'a>(line: Line<'a>, command: &'a [u8], rest: &'a [u8]) -> Parsed<'a> {
    if command == b"ms" {
        let args = Args::split(rest);
        if let Some(length) = parse_i32(args.get(1)) {
            if let Ok(length) = usize::try_from(length) {
                if length <= (i32::MAX - 2) as usize {
                    return Parsed::Invalid(ProtocolError::Reply {
                        reply: reply::ERROR,
                        skip: line.len.saturating_add(length).saturating_add(2),
                    });
                }
            }
        }
    }
    line.reply(reply::ERROR)
}
