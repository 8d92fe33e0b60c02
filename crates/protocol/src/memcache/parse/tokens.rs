//! Tokens and numbers exactly as memcached 1.6.18's text protocol sees them.
//!
//! memcached splits a command line on spaces only (a tab is part of a token)
//! and reads numbers with C's `strtol`/`strtoul`/`strtoull` (64-bit `long`)
//! through its `safe_strto*` wrappers. The quirks of those wrappers are
//! observable by clients, so they are reproduced here:
//! * leading C whitespace (`\t`, `\v`, `\f`, `\r`) and a `+` sign are accepted;
//! * a number may be followed by whitespace and then anything (`5\tjunk` is 5);
//! * 32-bit results are the low 32 bits of the 64-bit value (`4294967296` as
//!   flags is 0, as an exptime it is 0, `4294967297` as a length is 1);
//! * a `-` is rejected only when the 64-bit result looks negative
//!   (`-0` is 0 and `-18446744073709551615` is 1 for unsigned fields).

/// Most tokens memcached's tokenizer splits off a line (MAX_TOKENS minus the
/// terminal token). Later tokens stay unsplit in the final token.
pub(crate) const MAX_LINE_TOKENS: usize = 23;

/// Arguments kept for a fixed-arity command: cas has the most (6 + noreply).
const MAX_ARGS: usize = 8;

/// Splits off the first space-separated token; `None` when only spaces remain.
#[inline]
pub(crate) fn next_token(s: &[u8]) -> Option<(&[u8], &[u8])> {
    let start = s.iter().position(|&b| b != b' ')?;
    let s = s.get(start..)?;
    match memchr::memchr(b' ', s) {
        Some(end) => Some((s.get(..end)?, s.get(end..)?)),
        None => Some((s, &s[s.len()..])),
    }
}

/// `s` without leading and trailing spaces (a subslice of `s`).
pub(crate) fn trim_spaces(s: &[u8]) -> &[u8] {
    let start = s.iter().position(|&b| b != b' ').unwrap_or(s.len());
    let end = s.iter().rposition(|&b| b != b' ').map_or(start, |p| p + 1);
    // Never a detached empty slice: callers locate results inside `s`.
    s.get(start..end).unwrap_or(&s[s.len()..])
}

/// The arguments of a fixed-arity command (everything after the command).
pub(crate) struct Args<'a> {
    items: [&'a [u8]; MAX_ARGS],
    /// Number of arguments memcached counts (capped like its tokenizer).
    count: usize,
    /// The last counted argument, kept even past `MAX_ARGS`.
    last: &'a [u8],
}

impl<'a> Args<'a> {
    pub(crate) fn split(mut rest: &'a [u8]) -> Self {
        let mut items: [&'a [u8]; MAX_ARGS] = [&[]; MAX_ARGS];
        let mut count = 0;
        let mut last: &'a [u8] = &[];
        // The command itself is one of memcached's tokens.
        while count < MAX_LINE_TOKENS - 1 {
            let Some((token, after)) = next_token(rest) else {
                break;
            };
            if let Some(slot) = items.get_mut(count) {
                *slot = token;
            }
            last = token;
            count += 1;
            rest = after;
        }
        Args { items, count, last }
    }

    pub(crate) fn len(&self) -> usize {
        self.count
    }

    /// Argument `i` (0-based, after the command); empty when absent.
    pub(crate) fn get(&self, i: usize) -> &'a [u8] {
        self.items.get(i).copied().unwrap_or_default()
    }

    /// The last argument, where memcached looks for `noreply`.
    pub(crate) fn last(&self) -> &'a [u8] {
        self.last
    }

    /// memcached's `set_noreply_maybe`: the last token is exactly `noreply`.
    pub(crate) fn noreply(&self) -> bool {
        self.last() == b"noreply"
    }
}

/// C `isspace` in the "C" locale.
#[inline]
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// What C's `strto*` reads from a token: sign and magnitude, or `None` when
/// memcached's `safe_strto*` rejects it (no digits, junk after the digits,
/// or overflow of 64 bits, i.e. ERANGE).
#[inline]
fn c_number(token: &[u8]) -> Option<(bool, u64)> {
    let mut rest = token;
    while let Some((&b, tail)) = rest.split_first() {
        if !is_c_space(b) {
            break;
        }
        rest = tail;
    }
    let mut negative = false;
    if let Some((&sign, tail)) = rest.split_first() {
        if sign == b'+' || sign == b'-' {
            negative = sign == b'-';
            rest = tail;
        }
    }
    let mut magnitude: u64 = 0;
    let mut digits = 0usize;
    let mut overflow = false;
    for &b in rest {
        if !b.is_ascii_digit() {
            break;
        }
        digits += 1;
        match magnitude
            .checked_mul(10)
            .and_then(|m| m.checked_add(u64::from(b - b'0')))
        {
            Some(m) => magnitude = m,
            None => overflow = true,
        }
    }
    if digits == 0 || overflow {
        return None;
    }
    // After the digits: end of token, or whitespace (the rest is ignored).
    if let Some(&next) = rest.get(digits) {
        if !is_c_space(next) {
            return None;
        }
    }
    Some((negative, magnitude))
}

/// memcached `safe_strtoull`.
#[inline]
pub(crate) fn parse_u64(token: &[u8]) -> Option<u64> {
    let (negative, magnitude) = c_number(token)?;
    let value = if negative {
        magnitude.wrapping_neg()
    } else {
        magnitude
    };
    // strtoull negates "-N"; safe_strtoull only refuses it when the result
    // has the sign bit set.
    if negative && (value as i64) < 0 {
        return None;
    }
    Some(value)
}

/// memcached `safe_strtoul` into a `uint32_t`: the low 32 bits of
/// `safe_strtoull`'s value.
#[inline]
pub(crate) fn parse_u32(token: &[u8]) -> Option<u32> {
    parse_u64(token).map(|v| v as u32)
}

/// memcached `safe_strtol` into an `int32_t`: a 64-bit `strtol` (ERANGE
/// outside i64), then the low 32 bits.
#[inline]
pub(crate) fn parse_i32(token: &[u8]) -> Option<i32> {
    let (negative, magnitude) = c_number(token)?;
    let value: i64 = if negative {
        if magnitude > 1 << 63 {
            return None;
        }
        (magnitude as i64).wrapping_neg()
    } else {
        i64::try_from(magnitude).ok()?
    };
    Some(value as i32)
}

/// memcached `safe_strtod`: the whole token (up to whitespace) is a float,
/// and C's `strtod` does not report ERANGE. Hexadecimal floats, which C
/// reads, are refused here (no admin command needs them).
pub(crate) fn parse_f64(token: &[u8]) -> Option<f64> {
    let start = token.iter().position(|&b| !is_c_space(b))?;
    let rest = token.get(start..)?;
    let end = rest
        .iter()
        .position(|&b| is_c_space(b))
        .unwrap_or(rest.len());
    let text = std::str::from_utf8(rest.get(..end)?).ok()?;
    let value: f64 = text.parse().ok()?;
    let lower = text.to_ascii_lowercase();
    let named = lower.contains("inf") || lower.contains("nan");
    // strtod's ERANGE: overflow to infinity, or a non-zero value that
    // underflows to zero.
    let mantissa = lower.split('e').next().unwrap_or_default();
    let underflow = value == 0.0 && mantissa.bytes().any(|b| (b'1'..=b'9').contains(&b));
    if (value.is_infinite() && !named) || underflow {
        return None;
    }
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_follow_c_strto_rules() {
        assert_eq!(parse_u32(b"4294967295"), Some(u32::MAX));
        assert_eq!(parse_u32(b"4294967296"), Some(0));
        assert_eq!(parse_u32(b"-1"), None);
        assert_eq!(parse_u32(b"-0"), Some(0));
        assert_eq!(parse_u32(b"+5"), Some(5));
        assert_eq!(parse_u32(b"\t5"), Some(5));
        assert_eq!(parse_u32(b"5\tjunk"), Some(5));
        assert_eq!(parse_u32(b"5abc"), None);
        assert_eq!(parse_u32(b"0x10"), None);
        assert_eq!(parse_u32(b""), None);
        assert_eq!(parse_u32(b"+"), None);
        assert_eq!(parse_u32(b"-18446744073709551615"), Some(1));
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_f64(b"0.5"), Some(0.5));
        assert_eq!(parse_f64(b"2"), Some(2.0));
        assert_eq!(parse_f64(b"\t-1e3\tx"), Some(-1000.0));
        assert_eq!(parse_f64(b"x"), None);
        assert_eq!(parse_f64(b"0.5x"), None);
        assert_eq!(parse_f64(b"1e999"), None);
        assert_eq!(parse_f64(b"1e-999"), None);
        assert_eq!(parse_f64(b""), None);
        assert_eq!(parse_u64(b"18446744073709551616"), None);
        assert_eq!(parse_i32(b"4294967297"), Some(1));
        assert_eq!(parse_i32(b"2147483648"), Some(i32::MIN));
        assert_eq!(parse_i32(b"-2147483649"), Some(i32::MAX));
        assert_eq!(parse_i32(b"-9223372036854775808"), Some(0));
        assert_eq!(parse_i32(b"-9223372036854775809"), None);
        assert_eq!(parse_i32(b"9223372036854775808"), None);
    }

    #[test]
    fn tokens_split_on_spaces_only() {
        assert_eq!(next_token(b"  a\tb c"), Some((&b"a\tb"[..], &b" c"[..])));
        assert_eq!(next_token(b"   "), None);
        assert_eq!(trim_spaces(b"  a b  "), b"a b");
        let args = Args::split(b" k 0  0 5 noreply ");
        assert_eq!(args.len(), 5);
        assert!(args.noreply());
        assert_eq!(args.get(3), b"5");
        assert_eq!(args.get(9), b"");
    }
}
