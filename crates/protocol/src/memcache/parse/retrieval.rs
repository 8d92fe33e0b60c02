//! get / gets / gat / gats (and the legacy `bget`, an alias of get).

use super::tokens::{next_token, parse_i32, trim_spaces};
use super::{reply, Line, Parsed};
use crate::memcache::{Keys, Request, RetrievalCommand, MAX_KEY_LEN};

pub(super) fn parse<'a>(line: Line<'a>, rest: &'a [u8], command: RetrievalCommand) -> Parsed<'a> {
    let touches = matches!(command, RetrievalCommand::Gat | RetrievalCommand::Gats);
    let (exptime, keys) = if touches {
        let Some((token, after)) = next_token(rest) else {
            return line.reply(reply::ERROR);
        };
        let Some(exptime) = parse_i32(token) else {
            return line.reply(reply::CLIENT_ERROR_INVALID_EXPTIME);
        };
        (i64::from(exptime), after)
    } else {
        (0, rest)
    };
    let raw = trim_spaces(keys);
    let mut count = 0;
    let mut key_start = 0;
    let separators = memchr::memchr_iter(b' ', raw).chain(std::iter::once(raw.len()));
    for key_end in separators {
        let key_len = key_end.saturating_sub(key_start);
        key_start = key_end + 1;
        if key_len == 0 {
            continue; // repeated space
        }
        // memcached stops at the first bad key and answers only the error
        // (hits before it are dropped, confirmed against 1.6.18).
        if key_len > MAX_KEY_LEN {
            return line.reply(reply::CLIENT_ERROR_BAD_FORMAT);
        }
        count += 1;
    }
    // `get` needs a key; `gat <exptime>` with no key is a valid empty lookup
    // (memcached answers END).
    if count == 0 && !touches {
        return line.reply(reply::ERROR);
    }
    line.complete(Request::Retrieval {
        command,
        exptime,
        keys: Keys::new(raw, count),
    })
}
