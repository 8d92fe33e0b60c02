//! Meta commands: `mn`, `mg`, `ms`, `md`, `ma` (and `me`, not served).
//!
//! memcached 1.6.18 reads a meta command as the command, a key, and flag
//! tokens (for `ms`, the data length comes between the key and the flags).
//! Each flag token is one letter, sometimes followed by a value (`T30`,
//! `Oabc`); only the first byte of a token says which flag it is, so `vv` is
//! `v`. The checks, in memcached's order (see `tests/memcache_parse.rs`):
//!
//! * no key → `ERROR`;
//! * a key over 250 bytes → `CLIENT_ERROR bad command line format`;
//! * 19 or more tokens after the command → `CLIENT_ERROR options flags are
//!   too long` (mg) / `CLIENT_ERROR options flags too long` (ms, md, ma);
//! * the flags, left to right: a letter seen twice (or a byte >= 127) →
//!   `CLIENT_ERROR duplicate flag`, an unknown letter → `CLIENT_ERROR invalid
//!   flag`, both at once; a bad value (`Tx`, `M` of the wrong length, base64
//!   that does not decode...) → its own message, reported after all flags
//!   were read (the last one wins). md and ma answer every one of these with
//!   `CLIENT_ERROR invalid or duplicate flag`.
//! * an opaque (`O...`) longer than 32 bytes → `CLIENT_ERROR opaque token
//!   too long`.
//!
//! Errors are answered even under `q`. `ms` swallows its data block after
//! errors found once the length is known (like a too-large `set`).
//!
//! `me <key> [b]` (memcached's item dump) takes no flags: a missing or
//! over-long key, or a `b` key that does not decode, is `CLIENT_ERROR bad
//! command line format`; other tokens are ignored.

use super::tokens::{next_token, parse_i32, parse_u32, parse_u64, trim_spaces};
use super::{meta_arith, meta_delete, meta_get, meta_set, reply, Line, ParseLimits, Parsed};
use crate::memcache::{base64, MetaFlags, MAX_KEY_LEN};

/// Most tokens after the command memcached accepts in a meta command (its
/// limit is 20 tokens counting the command and its terminal token).
const MAX_META_ARGS: usize = 18;
/// Longest opaque token, `O` included.
const MAX_OPAQUE_LEN: usize = 32;

pub(super) const DUPLICATE_FLAG: &[u8] = b"CLIENT_ERROR duplicate flag\r\n";
pub(super) const INVALID_FLAG: &[u8] = b"CLIENT_ERROR invalid flag\r\n";
pub(super) const INVALID_OR_DUPLICATE: &[u8] = b"CLIENT_ERROR invalid or duplicate flag\r\n";
pub(super) const OPAQUE_TOO_LONG: &[u8] = b"CLIENT_ERROR opaque token too long\r\n";
pub(super) const OPTIONS_TOO_LONG: &[u8] = b"CLIENT_ERROR options flags too long\r\n";
const BAD_TOKEN: &[u8] = b"CLIENT_ERROR bad token in command line format\r\n";
const DECODING_KEY: &[u8] = b"CLIENT_ERROR error decoding key\r\n";
const M_LENGTH: &[u8] = b"CLIENT_ERROR incorrect length for M token\r\n";
const BAD_INITIAL: &[u8] = b"CLIENT_ERROR invalid numeric initial value\r\n";
const BAD_DELTA: &[u8] = b"CLIENT_ERROR invalid numeric delta value\r\n";

pub(super) fn parse<'a>(
    buf: &'a [u8],
    line: Line<'a>,
    command: &'a [u8],
    rest: &'a [u8],
    limits: &ParseLimits,
) -> Parsed<'a> {
    match command {
        b"mn" => line.complete(crate::memcache::Request::MetaNoop),
        b"mg" => meta_get::parse(line, rest),
        b"ms" => meta_set::parse(buf, line, rest, limits),
        b"md" => meta_delete::parse(line, rest),
        b"ma" => meta_arith::parse(line, rest),
        b"me" => meta_debug(line, rest),
        // Two-letter m commands memcached does not have.
        _ => line.reply(reply::ERROR),
    }
}

/// `me <key> [b]`.
fn meta_debug<'a>(line: Line<'a>, rest: &'a [u8]) -> Parsed<'a> {
    let args = MetaArgs::split(rest);
    let key = args.get(0);
    if args.len() == 0 || key_too_long(key) {
        return line.reply(reply::CLIENT_ERROR_BAD_FORMAT);
    }
    let base64 = args.get(1) == b"b";
    if base64 && base64::decode(key).is_none() {
        return line.reply(reply::CLIENT_ERROR_BAD_FORMAT);
    }
    let tokens = args.flag_text(1);
    line.complete(crate::memcache::Request::Meta {
        command: crate::memcache::MetaCommand::Debug,
        key,
        tokens,
        data: tokens.get(tokens.len()..).unwrap_or_default(),
        flags: MetaFlags {
            base64,
            ..MetaFlags::default()
        },
    })
}

/// The start that `mg`, `md` and `ma` share, `<verb> <key> <flags>*`,
/// checked in memcached's order: no key (`ERROR`), key too long, too many
/// tokens (answered `too_many`, whose wording differs by verb), then the
/// flags. Gives the tokens, the key and the pre-parsed flags, or the line
/// to answer.
pub(super) fn key_and_flags<'a>(
    rest: &'a [u8],
    verb: Verb,
    too_many: &'static [u8],
) -> Result<(MetaArgs<'a>, &'a [u8], Preparsed), &'static [u8]> {
    let args = MetaArgs::split(rest);
    if args.len() == 0 {
        return Err(reply::ERROR);
    }
    let key = args.get(0);
    if key_too_long(key) {
        return Err(reply::CLIENT_ERROR_BAD_FORMAT);
    }
    if args.too_many() {
        return Err(too_many);
    }
    let pre = preparse(key, args.flags(1), verb)?;
    Ok((args, key, pre))
}

/// The tokens of a meta command line after the command.
pub(super) struct MetaArgs<'a> {
    items: [&'a [u8]; MAX_META_ARGS + 1],
    /// Tokens counted (capped at `MAX_META_ARGS + 1`: more is an error).
    count: usize,
    /// What follows each token (to locate the flag region).
    after: [&'a [u8]; MAX_META_ARGS + 1],
}

impl<'a> MetaArgs<'a> {
    pub(super) fn split(mut rest: &'a [u8]) -> Self {
        let mut items: [&'a [u8]; MAX_META_ARGS + 1] = [&[]; MAX_META_ARGS + 1];
        let mut after: [&'a [u8]; MAX_META_ARGS + 1] = [&[]; MAX_META_ARGS + 1];
        let mut count = 0;
        while count <= MAX_META_ARGS {
            let Some((token, tail)) = next_token(rest) else {
                break;
            };
            if let (Some(slot), Some(a)) = (items.get_mut(count), after.get_mut(count)) {
                *slot = token;
                *a = tail;
            }
            count += 1;
            rest = tail;
        }
        MetaArgs {
            items,
            count,
            after,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.count
    }

    pub(super) fn too_many(&self) -> bool {
        self.count > MAX_META_ARGS
    }

    pub(super) fn get(&self, i: usize) -> &'a [u8] {
        self.items.get(i).copied().unwrap_or_default()
    }

    /// The flag tokens starting at token `first`.
    pub(super) fn flags(&self, first: usize) -> &[&'a [u8]] {
        self.items
            .get(first..self.count.min(MAX_META_ARGS + 1))
            .unwrap_or_default()
    }

    /// The raw text of the flags from token `first` on (a subslice of the
    /// line, empty at the end of token `first - 1` when there are none).
    pub(super) fn flag_text(&self, first: usize) -> &'a [u8] {
        let prev = first.saturating_sub(1);
        let tail = self.after.get(prev).copied().unwrap_or_default();
        trim_spaces(tail)
    }
}

/// Which command the flags belong to (they share one parser in memcached,
/// but errors are reported differently).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Verb {
    Get,
    Set,
    Delete,
    Arith,
}

/// Flags read by [`preparse`], before the verb interprets the mode.
pub(super) struct Preparsed {
    pub flags: MetaFlags,
    /// The byte after `M`, if any.
    pub mode: Option<u8>,
    /// Some opaque token is longer than memcached allows.
    pub opaque_too_long: bool,
    /// The decoded key's length (the key's own length without `b`).
    pub key_len: usize,
}

/// memcached's flag pre-parse: every flag token left to right.
pub(super) fn preparse(
    key: &[u8],
    tokens: &[&[u8]],
    verb: Verb,
) -> Result<Preparsed, &'static [u8]> {
    let mut flags = MetaFlags {
        delta: 1,
        ..MetaFlags::default()
    };
    let mut seen = [false; 128];
    let mut error: Option<&'static [u8]> = None;
    let mut failed = false;
    let mut mode = None;
    let mut opaque_too_long = false;
    let mut key_len = key.len();
    let collapse = |msg: &'static [u8]| match verb {
        Verb::Delete | Verb::Arith => INVALID_OR_DUPLICATE,
        Verb::Get | Verb::Set => msg,
    };
    for &token in tokens {
        let Some(&letter) = token.first() else {
            continue;
        };
        let value = token.get(1..).unwrap_or_default();
        match seen.get_mut(usize::from(letter)) {
            Some(s) if !*s && letter < 127 => *s = true,
            _ => return Err(collapse(DUPLICATE_FLAG)),
        }
        let mut fail = |msg: Option<&'static [u8]>| {
            failed = true;
            if let Some(msg) = msg {
                error = Some(msg);
            }
        };
        match letter {
            b'b' => {
                flags.base64 = true;
                match base64::decode(key) {
                    Some(decoded) => key_len = decoded.len(),
                    None => fail(Some(DECODING_KEY)),
                }
            }
            b'N' => match parse_i32(value) {
                Some(t) => flags.vivify = Some(i64::from(t)),
                None => fail(Some(BAD_TOKEN)),
            },
            b'T' => match parse_i32(value) {
                Some(t) => flags.ttl = Some(i64::from(t)),
                None => fail(Some(BAD_TOKEN)),
            },
            b'R' => match parse_i32(value) {
                Some(r) => flags.recache = Some(i64::from(r)),
                None => fail(Some(BAD_TOKEN)),
            },
            b'l' | b'h' => flags.access_info = true,
            b'O' => opaque_too_long |= token.len() > MAX_OPAQUE_LEN,
            b'P' | b'L' | b'k' | b's' | b'c' | b'f' => {}
            b'u' => flags.no_update = true,
            b't' => flags.return_ttl = true,
            b'v' => flags.value = true,
            b'q' => flags.quiet = true,
            b'F' => match parse_u32(value) {
                Some(f) => flags.client_flags = f,
                // memcached sets no message of its own here.
                None => fail(None),
            },
            b'C' => match parse_u64(value) {
                Some(c) => flags.compare_cas = Some(c),
                None => fail(Some(BAD_TOKEN)),
            },
            b'M' => match token {
                [_, m] => mode = Some(*m),
                _ => fail(Some(M_LENGTH)),
            },
            b'J' => match parse_u64(value) {
                Some(j) => flags.initial = j,
                None => fail(Some(BAD_INITIAL)),
            },
            b'D' => match parse_u64(value) {
                Some(d) => flags.delta = d,
                None => fail(Some(BAD_DELTA)),
            },
            b'I' => flags.invalidate = true,
            _ => return Err(collapse(INVALID_FLAG)),
        }
    }
    if failed {
        return Err(collapse(error.unwrap_or(reply::CLIENT_ERROR_BAD_FORMAT)));
    }
    Ok(Preparsed {
        flags,
        mode,
        opaque_too_long,
        key_len,
    })
}

/// A key memcached accepts in a meta command (before any base64 decoding).
pub(super) fn key_too_long(key: &[u8]) -> bool {
    key.len() > MAX_KEY_LEN
}
