//! Reading a memcached reply, one unit at a time from the front of a
//! buffer (see [`parse_reply`]).

/// Why a reply could not be parsed. The connection is out of sync after any
/// of these and should be closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ReplyError {
    #[error("reply line longer than {MAX_REPLY_LINE} bytes")]
    LineTooLong,
    #[error("unrecognized reply line")]
    Unrecognized,
    #[error("malformed {0} reply")]
    Malformed(&'static str),
    #[error("data block not followed by \\r\\n")]
    BadDataTerminator,
    #[error("bad percent-encoding in a metadump key")]
    BadKeyEncoding,
}

/// Longest reply line accepted before giving up on finding its end. Real
/// lines are far shorter (a `VALUE` line is at most ~300 bytes, a metadump
/// line with a fully escaped 250-byte key under 1 KiB).
pub const MAX_REPLY_LINE: usize = 8 * 1024;

/// One reply unit. `B` is a byte slice of the parsed buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response<B> {
    /// `VALUE <key> <flags> <bytes> [<cas>]\r\n<data>\r\n`
    Value {
        key: B,
        flags: u32,
        data: B,
        cas: Option<u64>,
    },
    End,
    Stored,
    NotStored,
    Exists,
    NotFound,
    Deleted,
    Touched,
    Ok,
    Reset,
    /// incr/decr result.
    Number(u64),
    /// `VERSION <version>`
    Version(B),
    /// `STAT <name> <value>` (value: the rest of the line).
    Stat {
        name: B,
        value: B,
    },
    /// `ERROR`, or `ERROR <message>` (e.g. `ERROR cannot pipeline other
    /// commands before metadump`).
    Error {
        message: Option<B>,
    },
    ClientError(B),
    ServerError(B),
    /// `BUSY <message>` (lru_crawler already running).
    Busy(B),
    /// `VA <len> <flags>*\r\n<data>\r\n`
    MetaValue {
        flags: MetaFlags<B>,
        data: B,
    },
    /// `HD`, `EN`, `NF`, `NS`, `EX` or `MN`, with return flags if any.
    Meta {
        status: MetaStatus,
        flags: MetaFlags<B>,
    },
    /// One `lru_crawler metadump` line.
    Metadump(MetadumpEntry<B>),
}

impl<B> Response<B> {
    /// Replace every byte field through `f` (e.g. `&[u8]` → `Bytes`).
    pub fn map<C>(self, mut f: impl FnMut(B) -> C) -> Response<C> {
        match self {
            Response::Value {
                key,
                flags,
                data,
                cas,
            } => Response::Value {
                key: f(key),
                flags,
                data: f(data),
                cas,
            },
            Response::End => Response::End,
            Response::Stored => Response::Stored,
            Response::NotStored => Response::NotStored,
            Response::Exists => Response::Exists,
            Response::NotFound => Response::NotFound,
            Response::Deleted => Response::Deleted,
            Response::Touched => Response::Touched,
            Response::Ok => Response::Ok,
            Response::Reset => Response::Reset,
            Response::Number(n) => Response::Number(n),
            Response::Version(v) => Response::Version(f(v)),
            Response::Stat { name, value } => Response::Stat {
                name: f(name),
                value: f(value),
            },
            Response::Error { message } => Response::Error {
                message: message.map(f),
            },
            Response::ClientError(m) => Response::ClientError(f(m)),
            Response::ServerError(m) => Response::ServerError(f(m)),
            Response::Busy(m) => Response::Busy(f(m)),
            Response::MetaValue { flags, data } => Response::MetaValue {
                flags: MetaFlags(f(flags.0)),
                data: f(data),
            },
            Response::Meta { status, flags } => Response::Meta {
                status,
                flags: MetaFlags(f(flags.0)),
            },
            Response::Metadump(entry) => Response::Metadump(MetadumpEntry {
                key: f(entry.key),
                exp: entry.exp,
                last_access: entry.last_access,
                cas: entry.cas,
                fetched: entry.fetched,
                class: entry.class,
                size: entry.size,
                flags: entry.flags,
            }),
        }
    }
}

/// Status of a meta reply without a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaStatus {
    /// `HD`: success, no value.
    Hit,
    /// `EN`: miss (mg).
    Miss,
    /// `NF`: not found (md, ma).
    NotFound,
    /// `NS`: not stored (ms).
    NotStored,
    /// `EX`: CAS mismatch.
    Exists,
    /// `MN`: no-op marker.
    Noop,
}

/// Return flags of a meta reply, e.g. `f7 t98 c265`: one letter then the
/// value, space separated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaFlags<B>(pub B);

impl<B: AsRef<[u8]>> MetaFlags<B> {
    /// `(flag letter, value)` pairs in reply order.
    pub fn iter(&self) -> impl Iterator<Item = (u8, &[u8])> + '_ {
        self.0
            .as_ref()
            .split(|&b| b == b' ')
            .filter_map(|token| token.split_first().map(|(&flag, value)| (flag, value)))
    }

    /// Value of flag `flag`, if returned.
    pub fn get(&self, flag: u8) -> Option<&[u8]> {
        self.iter().find(|&(f, _)| f == flag).map(|(_, v)| v)
    }

    /// `f`: client flags.
    pub fn client_flags(&self) -> Option<u32> {
        parse_decimal_u64(self.get(b'f')?).and_then(|v| u32::try_from(v).ok())
    }

    /// `t`: remaining TTL in seconds; `-1` when the item never expires.
    pub fn ttl(&self) -> Option<i64> {
        parse_decimal_i64(self.get(b't')?)
    }

    /// `c`: CAS unique.
    pub fn cas(&self) -> Option<u64> {
        parse_decimal_u64(self.get(b'c')?)
    }
}

/// One item from `lru_crawler metadump`, e.g. memcached 1.6.18's
/// `key=sp%2520x exp=-1 la=1795303043 cas=266 fetch=no cls=1 size=66`.
/// Fields a server does not report are `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadumpEntry<B> {
    /// The key, percent-encoded as sent; see [`decode_key`].
    pub key: B,
    /// Absolute expiry (Unix time), `-1` for never.
    pub exp: i64,
    /// Last access (Unix time).
    pub last_access: Option<u64>,
    pub cas: Option<u64>,
    /// Fetched since it was stored.
    pub fetched: Option<bool>,
    /// Slab class.
    pub class: Option<u32>,
    /// Item size in memory (header, key and data).
    pub size: Option<u64>,
    /// Client flags (not reported by 1.6.18; later versions add `flags=`).
    pub flags: Option<u32>,
}

impl<B: AsRef<[u8]>> MetadumpEntry<B> {
    /// The key as stored, decoded into `out` (cleared first).
    pub fn decoded_key(&self, out: &mut Vec<u8>) -> Result<(), ReplyError> {
        out.clear();
        decode_key(self.key.as_ref(), out)
    }
}

/// Percent-decode a metadump key (memcached escapes every byte outside
/// `A-Z a-z 0-9 - . _ ~` as `%XX`), appending to `out`.
pub fn decode_key(encoded: &[u8], out: &mut Vec<u8>) -> Result<(), ReplyError> {
    out.reserve(encoded.len());
    let mut rest = encoded;
    while let Some((&b, tail)) = rest.split_first() {
        if b == b'%' {
            let (Some(hi), Some(lo)) = (
                tail.first().and_then(|&h| hex_value(h)),
                tail.get(1).and_then(|&l| hex_value(l)),
            ) else {
                return Err(ReplyError::BadKeyEncoding);
            };
            out.push(hi << 4 | lo);
            rest = tail.get(2..).unwrap_or_default();
        } else {
            out.push(b);
            rest = tail;
        }
    }
    Ok(())
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Plain decimal, as memcached writes numbers (no sign, no spaces).
fn parse_decimal_u64(s: &[u8]) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    s.iter().try_fold(0u64, |acc, &b| {
        if !b.is_ascii_digit() {
            return None;
        }
        acc.checked_mul(10)?.checked_add(u64::from(b - b'0'))
    })
}

fn parse_decimal_i64(s: &[u8]) -> Option<i64> {
    match s.strip_prefix(b"-") {
        Some(digits) => {
            let magnitude = parse_decimal_u64(digits)?;
            0i64.checked_sub_unsigned(magnitude)
        }
        None => i64::try_from(parse_decimal_u64(s)?).ok(),
    }
}

/// What [`parse_reply`] returns: `Ok(None)` while incomplete, else one reply
/// and the bytes it used.
pub type ReplyResult<'a> = Result<Option<(Response<&'a [u8]>, usize)>, ReplyError>;

/// Parse one reply unit from the front of `buf`: `Ok(None)` until it is
/// complete, then the reply and the bytes it used.
pub fn parse_reply(buf: &[u8]) -> ReplyResult<'_> {
    let Some(newline) = memchr::memchr(b'\n', buf) else {
        if buf.len() > MAX_REPLY_LINE {
            return Err(ReplyError::LineTooLong);
        }
        return Ok(None);
    };
    if newline > MAX_REPLY_LINE {
        return Err(ReplyError::LineTooLong);
    }
    let Some(mut line) = buf.get(..newline) else {
        return Ok(None);
    };
    // memcached ends lines with \r\n, except metadump lines (\n alone).
    if let Some(stripped) = line.strip_suffix(b"\r") {
        line = stripped;
    }
    let line_len = newline + 1;
    let (word, rest) = match memchr::memchr(b' ', line) {
        Some(space) => (
            line.get(..space).unwrap_or_default(),
            line.get(space + 1..).unwrap_or_default(),
        ),
        None => (line, &line[line.len()..]),
    };
    let simple = |response| Ok(Some((response, line_len)));
    let bare = rest.is_empty() && word.len() == line.len();
    match word {
        b"VALUE" => parse_value(buf, rest, line_len),
        b"VA" => parse_meta_value(buf, rest, line_len),
        b"END" if bare => simple(Response::End),
        b"STORED" if bare => simple(Response::Stored),
        b"NOT_STORED" if bare => simple(Response::NotStored),
        b"EXISTS" if bare => simple(Response::Exists),
        b"NOT_FOUND" if bare => simple(Response::NotFound),
        b"DELETED" if bare => simple(Response::Deleted),
        b"TOUCHED" if bare => simple(Response::Touched),
        b"OK" if bare => simple(Response::Ok),
        b"RESET" if bare => simple(Response::Reset),
        b"ERROR" => simple(Response::Error {
            message: (!bare).then_some(rest),
        }),
        b"CLIENT_ERROR" => simple(Response::ClientError(rest)),
        b"SERVER_ERROR" => simple(Response::ServerError(rest)),
        b"BUSY" => simple(Response::Busy(rest)),
        b"VERSION" => simple(Response::Version(rest)),
        b"STAT" => {
            let Some(space) = memchr::memchr(b' ', rest) else {
                return Err(ReplyError::Malformed("STAT"));
            };
            simple(Response::Stat {
                name: rest.get(..space).unwrap_or_default(),
                value: rest.get(space + 1..).unwrap_or_default(),
            })
        }
        b"HD" => simple(meta(MetaStatus::Hit, rest)),
        b"EN" => simple(meta(MetaStatus::Miss, rest)),
        b"NF" => simple(meta(MetaStatus::NotFound, rest)),
        b"NS" => simple(meta(MetaStatus::NotStored, rest)),
        b"EX" => simple(meta(MetaStatus::Exists, rest)),
        b"MN" => simple(meta(MetaStatus::Noop, rest)),
        _ if word.starts_with(b"key=") => simple(Response::Metadump(parse_metadump(line)?)),
        _ if bare && !word.is_empty() => match parse_decimal_u64(word) {
            Some(n) => simple(Response::Number(n)),
            None => Err(ReplyError::Unrecognized),
        },
        _ => Err(ReplyError::Unrecognized),
    }
}

fn meta(status: MetaStatus, flags: &[u8]) -> Response<&[u8]> {
    Response::Meta {
        status,
        flags: MetaFlags(flags),
    }
}

/// The data block after a header line: `len` bytes then `\r\n`.
fn data_block(buf: &[u8], start: usize, len: usize) -> Result<Option<(&[u8], usize)>, ReplyError> {
    let end = start.saturating_add(len);
    let (Some(data), Some(terminator)) = (buf.get(start..end), buf.get(end..end.saturating_add(2)))
    else {
        return Ok(None);
    };
    if terminator != b"\r\n" {
        return Err(ReplyError::BadDataTerminator);
    }
    Ok(Some((data, end + 2)))
}

fn parse_value<'a>(buf: &'a [u8], header: &'a [u8], line_len: usize) -> ReplyResult<'a> {
    let malformed = ReplyError::Malformed("VALUE");
    let mut fields = header.split(|&b| b == b' ');
    let key = fields.next().filter(|k| !k.is_empty()).ok_or(malformed)?;
    let flags = fields
        .next()
        .and_then(parse_decimal_u64)
        .and_then(|f| u32::try_from(f).ok())
        .ok_or(malformed)?;
    let len = fields
        .next()
        .and_then(parse_decimal_u64)
        .and_then(|l| usize::try_from(l).ok())
        .ok_or(malformed)?;
    let cas = match fields.next() {
        Some(cas) => Some(parse_decimal_u64(cas).ok_or(malformed)?),
        None => None,
    };
    if fields.next().is_some() {
        return Err(malformed);
    }
    Ok(data_block(buf, line_len, len)?.map(|(data, consumed)| {
        (
            Response::Value {
                key,
                flags,
                data,
                cas,
            },
            consumed,
        )
    }))
}

fn parse_meta_value<'a>(buf: &'a [u8], header: &'a [u8], line_len: usize) -> ReplyResult<'a> {
    let (len, flags) = match memchr::memchr(b' ', header) {
        Some(space) => (
            header.get(..space).unwrap_or_default(),
            header.get(space + 1..).unwrap_or_default(),
        ),
        None => (header, &header[header.len()..]),
    };
    let len = parse_decimal_u64(len)
        .and_then(|l| usize::try_from(l).ok())
        .ok_or(ReplyError::Malformed("VA"))?;
    Ok(data_block(buf, line_len, len)?.map(|(data, consumed)| {
        (
            Response::MetaValue {
                flags: MetaFlags(flags),
                data,
            },
            consumed,
        )
    }))
}

fn parse_metadump(line: &[u8]) -> Result<MetadumpEntry<&[u8]>, ReplyError> {
    let malformed = ReplyError::Malformed("metadump");
    let mut key = None;
    let mut exp = None;
    let mut entry = MetadumpEntry {
        key: &line[..0],
        exp: 0,
        last_access: None,
        cas: None,
        fetched: None,
        class: None,
        size: None,
        flags: None,
    };
    for field in line.split(|&b| b == b' ').filter(|f| !f.is_empty()) {
        let Some(eq) = memchr::memchr(b'=', field) else {
            return Err(malformed);
        };
        let name = field.get(..eq).unwrap_or_default();
        let value = field.get(eq + 1..).unwrap_or_default();
        let number = || parse_decimal_u64(value).ok_or(malformed);
        match name {
            b"key" => key = Some(value),
            b"exp" => exp = Some(parse_decimal_i64(value).ok_or(malformed)?),
            b"la" => entry.last_access = Some(number()?),
            b"cas" => entry.cas = Some(number()?),
            b"fetch" => {
                entry.fetched = Some(match value {
                    b"yes" => true,
                    b"no" => false,
                    _ => return Err(malformed),
                })
            }
            b"cls" => entry.class = Some(u32::try_from(number()?).map_err(|_| malformed)?),
            b"size" => entry.size = Some(number()?),
            b"flags" => entry.flags = Some(u32::try_from(number()?).map_err(|_| malformed)?),
            // Fields added by later versions.
            _ => {}
        }
    }
    entry.key = key.filter(|k| !k.is_empty()).ok_or(malformed)?;
    entry.exp = exp.ok_or(malformed)?;
    Ok(entry)
}
