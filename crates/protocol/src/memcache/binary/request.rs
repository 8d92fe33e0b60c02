//! Binary requests: parse and validate as memcached 1.6.18 does.

use super::header::{Header, HEADER_LEN, REQUEST_MAGIC};
use super::opcode::Opcode;
use super::response::Status;
use crate::memcache::{ParseLimits, MAX_KEY_LEN};

/// Which store a Set/Add/Replace is (a non-zero header CAS makes any of
/// them a compare-and-swap, as in memcached).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreMode {
    Set,
    Add,
    Replace,
}

/// What a request asks, with its extras decoded. `B` carries keys and
/// values (`&[u8]` from [`parse`]; a session maps them with
/// [`Request::map`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command<B> {
    /// Get/GetQ/GetK/GetKQ, and with `touch` GAT/GATQ/GATK/GATKQ.
    Get {
        /// GetK/GetKQ/GATK/GATKQ: the response carries the key.
        with_key: bool,
        /// GAT family: the new expiration.
        touch: Option<u32>,
    },
    /// Touch: the response carries the flags but no value.
    Touch {
        exptime: u32,
    },
    Store {
        mode: StoreMode,
        flags: u32,
        exptime: u32,
        value: B,
    },
    /// Append/Prepend (no extras).
    Concat {
        append: bool,
        value: B,
    },
    Delete,
    Arith {
        decrement: bool,
        delta: u64,
        initial: u64,
        /// `0xffffffff`: do not create a missing counter.
        exptime: u32,
    },
    /// Flush, with its delay (0 without extras).
    Flush {
        delay: u32,
    },
    Noop,
    Version,
    /// Stat: the group is the key (empty: the general stats).
    Stat,
    Quit,
    SaslListMechs,
    /// SASL Auth: the mechanism is the key.
    SaslAuth {
        data: B,
    },
    SaslStep {
        data: B,
    },
}

/// A complete, validated request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request<B> {
    pub header: Header,
    pub opcode: Opcode,
    /// The key (Stat: the group; SASL: the mechanism); empty when none.
    pub key: B,
    pub command: Command<B>,
}

impl<B> Request<B> {
    /// Replace every byte field through `f` (e.g. `&[u8]` → `Bytes`).
    pub fn map<C>(self, mut f: impl FnMut(B) -> C) -> Request<C> {
        let command = match self.command {
            Command::Get { with_key, touch } => Command::Get { with_key, touch },
            Command::Touch { exptime } => Command::Touch { exptime },
            Command::Store {
                mode,
                flags,
                exptime,
                value,
            } => Command::Store {
                mode,
                flags,
                exptime,
                value: f(value),
            },
            Command::Concat { append, value } => Command::Concat {
                append,
                value: f(value),
            },
            Command::Delete => Command::Delete,
            Command::Arith {
                decrement,
                delta,
                initial,
                exptime,
            } => Command::Arith {
                decrement,
                delta,
                initial,
                exptime,
            },
            Command::Flush { delay } => Command::Flush { delay },
            Command::Noop => Command::Noop,
            Command::Version => Command::Version,
            Command::Stat => Command::Stat,
            Command::Quit => Command::Quit,
            Command::SaslListMechs => Command::SaslListMechs,
            Command::SaslAuth { data } => Command::SaslAuth { data: f(data) },
            Command::SaslStep { data } => Command::SaslStep { data: f(data) },
        };
        Request {
            header: self.header,
            opcode: self.opcode,
            key: f(self.key),
            command,
        }
    }

    /// Quiet opcode: success (a get's miss) is not answered.
    pub fn quiet(&self) -> bool {
        self.opcode.is_quiet()
    }
}

/// Input memcached rejects, with what it answers and how much it discards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Not a request header: memcached closes without a reply.
    #[error("bad magic byte {0:#04x}")]
    BadMagic(u8),
    /// Key and extras longer than the body: `Unknown command`, then close.
    #[error("key and extras longer than the body")]
    BodyTooShort(Header),
    /// Key over 250 bytes: `Invalid arguments`, then close.
    #[error("key longer than {MAX_KEY_LEN} bytes")]
    KeyTooLong(Header),
    /// Extras, key or body length the opcode does not take:
    /// `Invalid arguments`, then close.
    #[error("lengths opcode {:#04x} does not take", .0.opcode)]
    InvalidArguments(Header),
    /// `Unknown command`; the body length is discarded after the extras
    /// and key.
    #[error("unknown opcode {:#04x}", .0.opcode)]
    UnknownCommand(Header),
    /// Value over the item size limit: `Too large.`, the value discarded.
    /// A Set(Q) also drops the key's current item.
    #[error("value too large")]
    TooLarge(Header),
    /// SASL data over the item size limit: `Out of memory`, discarded.
    #[error("SASL data too large")]
    OutOfMemory(Header),
}

impl Error {
    /// The request header, unless the magic was wrong.
    pub fn header(&self) -> Option<&Header> {
        match self {
            Error::BadMagic(_) => None,
            Error::BodyTooShort(h)
            | Error::KeyTooLong(h)
            | Error::InvalidArguments(h)
            | Error::UnknownCommand(h)
            | Error::TooLarge(h)
            | Error::OutOfMemory(h) => Some(h),
        }
    }

    /// The error response's status; `None`: no response.
    pub fn status(&self) -> Option<Status> {
        match self {
            Error::BadMagic(_) => None,
            Error::BodyTooShort(_) | Error::UnknownCommand(_) => Some(Status::UnknownCommand),
            Error::KeyTooLong(_) | Error::InvalidArguments(_) => Some(Status::InvalidArguments),
            Error::TooLarge(_) => Some(Status::TooLarge),
            Error::OutOfMemory(_) => Some(Status::OutOfMemory),
        }
    }

    /// The connection closes after the response.
    pub fn closes(&self) -> bool {
        matches!(
            self,
            Error::BadMagic(_)
                | Error::BodyTooShort(_)
                | Error::KeyTooLong(_)
                | Error::InvalidArguments(_)
        )
    }

    /// Bytes to drop now (all of them are in the buffer that was parsed).
    pub fn consumed(&self) -> usize {
        self.header().map_or(0, Header::fixed_len)
    }

    /// Further bytes to discard as they arrive (after `consumed`).
    pub fn swallow(&self) -> usize {
        match self {
            Error::UnknownCommand(h) => h.body_len as usize,
            Error::TooLarge(h) | Error::OutOfMemory(h) => h.value_len(),
            _ => 0,
        }
    }

    /// The key whose item memcached drops (a too-large Set/SetQ), as a
    /// range of the parsed buffer.
    pub fn stale_key(&self) -> Option<std::ops::Range<usize>> {
        match self {
            Error::TooLarge(h)
                if matches!(Opcode::from_u8(h.opcode), Some(Opcode::Set | Opcode::SetQ)) =>
            {
                let start = HEADER_LEN + usize::from(h.extras_len);
                Some(start..start + usize::from(h.key_len))
            }
            _ => None,
        }
    }
}

/// A complete request and the bytes it used.
pub type Parsed<'a> = (Request<&'a [u8]>, usize);

/// The header at the start of `buf` once memcached would look at it:
/// 24 bytes with the right magic, and its extras and key arrived.
/// `Ok(None)`: more bytes are needed.
pub fn read_header(buf: &[u8]) -> Result<Option<Header>, Error> {
    let Some(header) = Header::decode(buf) else {
        return Ok(None);
    };
    if header.magic != REQUEST_MAGIC {
        return Err(Error::BadMagic(header.magic));
    }
    if buf.len() < header.fixed_len() {
        return Ok(None);
    }
    let key_and_extras = u32::from(header.key_len) + u32::from(header.extras_len);
    if key_and_extras > header.body_len {
        return Err(Error::BodyTooShort(header));
    }
    Ok(Some(header))
}

/// The request at the start of `buf` and the bytes it used; `Ok(None)`
/// when more bytes are needed (nothing consumed).
pub fn parse<'a>(buf: &'a [u8], limits: &ParseLimits) -> Result<Option<Parsed<'a>>, Error> {
    let Some(header) = read_header(buf)? else {
        return Ok(None);
    };
    if usize::from(header.key_len) > MAX_KEY_LEN {
        return Err(Error::KeyTooLong(header));
    }
    let Some(opcode) = Opcode::from_u8(header.opcode) else {
        return Err(Error::UnknownCommand(header));
    };
    let ext_start = HEADER_LEN;
    let key_start = ext_start + usize::from(header.extras_len);
    let fixed = header.fixed_len();
    let extras = buf.get(ext_start..key_start).unwrap_or_default();
    let key = buf.get(key_start..fixed).unwrap_or_default();
    let (ext, klen, body) = (header.extras_len, header.key_len, header.body_len);
    let invalid = Err(Error::InvalidArguments(header));
    use Opcode::*;
    // The value (stores, SASL data) follows the key; `None`: not yet here.
    let value_end = fixed + header.value_len();
    let value = buf.get(fixed..value_end);
    let (command, consumed) = match opcode {
        Get | GetQ | GetK | GetKQ => {
            if ext != 0 || body != u32::from(klen) || klen == 0 {
                return invalid;
            }
            let with_key = matches!(opcode, GetK | GetKQ);
            (
                Command::Get {
                    with_key,
                    touch: None,
                },
                fixed,
            )
        }
        Touch | Gat | GatQ | GatK | GatKQ => {
            if ext != 4 || klen == 0 {
                return invalid;
            }
            let exptime = be_u32(extras, 0);
            let command = if opcode == Touch {
                Command::Touch { exptime }
            } else {
                Command::Get {
                    with_key: matches!(opcode, GatK | GatKQ),
                    touch: Some(exptime),
                }
            };
            (command, fixed)
        }
        Set | SetQ | Add | AddQ | Replace | ReplaceQ => {
            if ext != 8 || klen == 0 || body < u32::from(klen) + 8 {
                return invalid;
            }
            let flags = be_u32(extras, 0);
            if header.value_len() > limits.max_data_len(key.len(), flags) {
                return Err(Error::TooLarge(header));
            }
            let Some(value) = value else {
                return Ok(None);
            };
            let mode = match opcode {
                Set | SetQ => StoreMode::Set,
                Add | AddQ => StoreMode::Add,
                _ => StoreMode::Replace,
            };
            let command = Command::Store {
                mode,
                flags,
                exptime: be_u32(extras, 4),
                value,
            };
            (command, value_end)
        }
        Append | AppendQ | Prepend | PrependQ => {
            if ext != 0 || klen == 0 {
                return invalid;
            }
            if header.value_len() > limits.max_data_len(key.len(), 0) {
                return Err(Error::TooLarge(header));
            }
            let Some(value) = value else {
                return Ok(None);
            };
            let append = matches!(opcode, Append | AppendQ);
            (Command::Concat { append, value }, value_end)
        }
        Delete | DeleteQ => {
            if ext != 0 || klen == 0 || body != u32::from(klen) {
                return invalid;
            }
            (Command::Delete, fixed)
        }
        Increment | IncrementQ | Decrement | DecrementQ => {
            if ext != 20 || klen == 0 || body != u32::from(klen) + 20 {
                return invalid;
            }
            let command = Command::Arith {
                decrement: matches!(opcode, Decrement | DecrementQ),
                delta: be_u64(extras, 0),
                initial: be_u64(extras, 8),
                exptime: be_u32(extras, 16),
            };
            (command, fixed)
        }
        Flush | FlushQ => {
            if klen != 0 || body != u32::from(ext) || (ext != 0 && ext != 4) {
                return invalid;
            }
            let delay = if ext == 4 { be_u32(extras, 0) } else { 0 };
            (Command::Flush { delay }, fixed)
        }
        Noop | Version | Quit | QuitQ | SaslListMechs => {
            if ext != 0 || klen != 0 || body != 0 {
                return invalid;
            }
            let command = match opcode {
                Noop => Command::Noop,
                Version => Command::Version,
                SaslListMechs => Command::SaslListMechs,
                _ => Command::Quit,
            };
            (command, fixed)
        }
        Stat => {
            if ext != 0 {
                return invalid;
            }
            (Command::Stat, fixed)
        }
        SaslAuth | SaslStep => {
            if ext != 0 || klen == 0 {
                return invalid;
            }
            if header.value_len() > limits.max_data_len(key.len(), 0) {
                return Err(Error::OutOfMemory(header));
            }
            let Some(data) = value else {
                return Ok(None);
            };
            let command = if opcode == SaslAuth {
                Command::SaslAuth { data }
            } else {
                Command::SaslStep { data }
            };
            (command, value_end)
        }
    };
    let request = Request {
        header,
        opcode,
        key,
        command,
    };
    Ok(Some((request, consumed)))
}

fn be_u32(bytes: &[u8], at: usize) -> u32 {
    let mut out = [0u8; 4];
    if let Some(src) = bytes.get(at..at + 4) {
        out.copy_from_slice(src);
    }
    u32::from_be_bytes(out)
}

fn be_u64(bytes: &[u8], at: usize) -> u64 {
    let mut out = [0u8; 8];
    if let Some(src) = bytes.get(at..at + 8) {
        out.copy_from_slice(src);
    }
    u64::from_be_bytes(out)
}
