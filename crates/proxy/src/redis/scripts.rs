//! Server-side Lua for the memcached commands that one Redis command cannot
//! do atomically. Loaded on every connection (SCRIPT LOAD) and called by
//! EVALSHA; a NOSCRIPT reply (scripts flushed) makes the connection reload
//! them and retry.
//!
//! Every script sees the value layout of `encoding.rs`: byte 1 = format
//! version, bytes 2..5 = flags, 6..13 = CAS, 14.. = data (Lua is 1-based);
//! version 2 has the meta state in byte 14 and the data from 15 on. Every
//! script reads both versions ([`hlen`](HLEN_FN)).

/// `hlen(v)`: the header length of a memshift value (13 or 14), nil for a
/// missing or foreign value.
macro_rules! hlen_fn {
    () => {
        r#"
local function hlen(v)
  if not v or #v < 13 then return nil end
  local b = string.byte(v, 1)
  if b == 1 then return 13 end
  if b == 2 and #v >= 14 then return 14 end
  return nil
end
"#
    };
}
#[allow(dead_code)]
const HLEN_FN: &str = hlen_fn!();

/// A script and its SHA1 (what EVALSHA names it by).
#[derive(Debug)]
pub struct Script {
    pub name: &'static str,
    pub body: &'static str,
    pub sha: String,
}

/// `cas`: `KEYS[1]`; `ARGV[1]` = expected CAS (8 bytes), `ARGV[2]` = new value
/// (header + data), `ARGV[3]` = expiry option ("" | "EX" | "EXAT" | "PXAT"),
/// `ARGV[4]` = its argument, `ARGV[5]` (optional, `ms ... I`) = "1": on a
/// CAS mismatch the value is stored anyway, marked stale, with the old TTL
/// and win token (memcached: when the CAS is older than the item's;
/// memshift's uniques are not ordered, so on any mismatch). Returns
/// 0 NOT_FOUND, 1 EXISTS, 2 STORED.
pub const CAS: &str = concat!(
    hlen_fn!(),
    r#"
local v = redis.call('GET', KEYS[1])
local hl = hlen(v)
if not hl then return 0 end
if string.sub(v, 6, 13) ~= ARGV[1] then
  if ARGV[5] ~= '1' then return 1 end
  local nh, nst = 13, 1
  if string.byte(ARGV[2], 1) == 2 then nh = 14; nst = bit.bor(1, string.byte(ARGV[2], 14)) end
  if hl == 14 then nst = bit.bor(nst, bit.band(string.byte(v, 14), 2)) end
  redis.call('SET', KEYS[1], '\2' .. string.sub(ARGV[2], 2, 13) .. string.char(nst) .. string.sub(ARGV[2], nh + 1), 'KEEPTTL')
  return 2
end
if ARGV[3] == '' then
  redis.call('SET', KEYS[1], ARGV[2])
else
  redis.call('SET', KEYS[1], ARGV[2], ARGV[3], ARGV[4])
end
return 2
"#
);

/// `append`/`prepend`: `KEYS[1]`; `ARGV[1]` = new CAS (8 bytes), `ARGV[2]` = data,
/// `ARGV[3]` = "a" (append) or "p" (prepend), `ARGV[4]` = largest data memcached
/// would store for this key with flags 0 (4 bytes less with other flags, as
/// memcached stores non-zero flags in the item), `ARGV[5]` (optional, `ms`
/// MA/MP with `C`) = expected CAS (8 bytes). Keeps flags and TTL.
/// Returns 0 NOT_STORED, 1 STORED, 2 too large (memcached: NOT_STORED),
/// 3 CAS mismatch (EXISTS). A version 2 item is rewritten as version 1:
/// memcached's append makes a new item, without the stale, token, fetched
/// or base64-key marks.
pub const CONCAT: &str = concat!(
    hlen_fn!(),
    r#"
local head = redis.call('GETRANGE', KEYS[1], 0, 13)
local hl = hlen(head)
if not hl then return 0 end
if ARGV[5] and string.sub(head, 6, 13) ~= ARGV[5] then return 3 end
local limit = tonumber(ARGV[4])
if string.sub(head, 2, 5) ~= '\0\0\0\0' then limit = limit - 4 end
local len = redis.call('STRLEN', KEYS[1])
if len - hl + #ARGV[2] > limit then return 2 end
if hl == 14 then
  local v = redis.call('GET', KEYS[1])
  local old = string.sub(v, 15)
  local data = ARGV[2] .. old
  if ARGV[3] == 'a' then data = old .. ARGV[2] end
  redis.call('SET', KEYS[1], '\1' .. string.sub(v, 2, 5) .. ARGV[1] .. data, 'KEEPTTL')
  return 1
end
if ARGV[3] == 'a' then
  redis.call('SETRANGE', KEYS[1], 5, ARGV[1])
  redis.call('APPEND', KEYS[1], ARGV[2])
else
  local v = redis.call('GET', KEYS[1])
  redis.call('SET', KEYS[1], string.sub(v, 1, 5) .. ARGV[1] .. ARGV[2] .. string.sub(v, 14), 'KEEPTTL')
end
return 1
"#
);

/// `incr`/`decr` on an unsigned 64-bit decimal value, with memcached 1.6's
/// rules: the value is read like C's strtoull (leading white space, optional
/// sign, digits, then white space or the end; out of range is an error), incr
/// wraps at 2^64, decr stops at 0, and a result no longer than the old value
/// is written in place padded with spaces (as memcached does), otherwise the
/// value becomes the new number. Flags and TTL are kept; the CAS changes.
/// Lua numbers are doubles, so the arithmetic is on two 32-bit halves.
/// `KEYS[1]`; `ARGV[1]` = "i" | "d", `ARGV[2]` = delta high 32 bits, `ARGV[3]` = delta
/// low 32 bits, `ARGV[4]` = new CAS (8 bytes). Returns the new value as a bulk
/// string, 0 NOT_FOUND, -1 non-numeric.
/// The heart of `incr`/`decr`, shared by [`ARITH`] and [`META_ARITH`]: with
/// the stored value in `v` (header of `hl` bytes included, `n = #v`), parse the number
/// (returning -1 when it is not one), apply the delta in `ARGV[1..3]` and
/// leave the result's digits in `s` and the bytes to store in `data`
/// (padded in place when no longer than the old value).
macro_rules! arith_core {
    () => {
        r#"local B = 4294967296
local n = #v
local i = hl + 1
local function space(c) return c == 32 or (c >= 9 and c <= 13) end
while i <= n and space(string.byte(v, i)) do i = i + 1 end
local neg = false
if i <= n then
  local c = string.byte(v, i)
  if c == 45 then neg = true; i = i + 1 elseif c == 43 then i = i + 1 end
end
local start = i
local hi, lo = 0, 0
while i <= n do
  local c = string.byte(v, i)
  if c < 48 or c > 57 then break end
  lo = lo * 10 + (c - 48)
  local carry = math.floor(lo / B)
  lo = lo - carry * B
  hi = hi * 10 + carry
  if hi >= B then return -1 end
  i = i + 1
end
if i == start then return -1 end
if i <= n then
  local c = string.byte(v, i)
  if not (space(c) or c == 0) then return -1 end
end
if neg and (hi > 0 or lo > 0) then
  -- strtoull negates modulo 2^64; memcached rejects results with the top bit set
  hi = B - 1 - hi
  lo = B - lo
  if lo == B then lo = 0; hi = hi + 1 end
  if hi >= B then hi = hi - B end
  if hi >= B / 2 then return -1 end
end
local dhi, dlo = tonumber(ARGV[2]), tonumber(ARGV[3])
if ARGV[1] == 'i' then
  lo = lo + dlo
  local carry = 0
  if lo >= B then lo = lo - B; carry = 1 end
  hi = (hi + dhi + carry) % B
else
  if hi < dhi or (hi == dhi and lo < dlo) then
    hi, lo = 0, 0
  else
    hi = hi - dhi
    lo = lo - dlo
    if lo < 0 then lo = lo + B; hi = hi - 1 end
  end
end
local s
if hi == 0 then
  s = string.format('%d', lo)
else
  local digits = {}
  while hi > 0 or lo > 0 do
    local rh = hi % 10
    hi = (hi - rh) / 10
    local cur = rh * B + lo
    local rl = cur % 10
    lo = (cur - rl) / 10
    digits[#digits + 1] = string.char(48 + rl)
  end
  local out = {}
  for j = #digits, 1, -1 do out[#out + 1] = digits[j] end
  s = table.concat(out)
end
local old = n - hl
local data = s
if #s <= old then data = s .. string.rep(' ', old - #s) end
-- a version 2 item keeps its state byte
data = string.sub(v, 14, hl) .. data
"#
    };
}

/// memcached 1.6.18 refuses incr/decr/`ma` on a chunked item (one whose
/// size with its header, `ITEM_OVERHEAD` + key + data + 4 for non-zero flags,
/// exceeds the 512 KiB `slab_chunk_max`) as non-numeric, whatever it holds.
/// Expects the stored value in `v` and its header length in `hl`; returns
/// -1 for such an item.
macro_rules! arith_chunked {
    () => {
        r#"local suffix = 0
if string.sub(v, 2, 5) ~= '\0\0\0\0' then suffix = 4 end
if #v - hl + #KEYS[1] + 59 + suffix > 524288 then return -1 end
"#
    };
}

pub const ARITH: &str = concat!(
    hlen_fn!(),
    r#"
local v = redis.call('GET', KEYS[1])
local hl = hlen(v)
if not hl then return 0 end
"#,
    arith_chunked!(),
    arith_core!(),
    r#"redis.call('SET', KEYS[1], string.sub(v, 1, 5) .. ARGV[4] .. data, 'KEEPTTL')
return s
"#
);

/// `touch <key> 0`: make the item permanent. PERSIST alone cannot tell a
/// missing key from one without a TTL. `KEYS[1]`. Returns 1 TOUCHED, 0 NOT_FOUND.
pub const TOUCH_PERSIST: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('PERSIST', KEYS[1])
return 1
"#;

/// Apply the expiry option `opt` ("" keeps the TTL, "PERSIST" removes it,
/// "EX"/"EXAT"/"PXAT" set it) with argument `n` to `KEYS[1]`.
macro_rules! set_expiry_fn {
    () => {
        r#"
local function set_expiry(opt, n)
  if opt == 'PERSIST' then redis.call('PERSIST', KEYS[1])
  elseif opt == 'EX' then redis.call('EXPIRE', KEYS[1], n)
  elseif opt == 'EXAT' then redis.call('EXPIREAT', KEYS[1], n)
  elseif opt == 'PXAT' then redis.call('PEXPIREAT', KEYS[1], n)
  end
end
"#
    };
}

/// `mg` (and `me`): the value, its TTL and idle time, memcached's win
/// tokens, the fetched mark. `KEYS[1]`; `ARGV[1]`/`ARGV[2]` = expiry for
/// `T` ("" for none); `ARGV[3]`/`ARGV[4]` = expiry of an item `N` creates;
/// `ARGV[5]` = its CAS (8 bytes; "" without `N`); `ARGV[6]` = the `R`
/// threshold in seconds ("" for none); `ARGV[7]` = the TTL in seconds `R`
/// compares with when a `T` came before it (-1: none; "" to use the
/// item's); `ARGV[8]` = "1" to read the idle time; `ARGV[9]` = "1" to only
/// look (`me`: no token, no mark, no touch); `ARGV[10]` = "1" not to mark
/// the item fetched (`u`).
///
/// A hit marks the item fetched (`h`): the first `mg` rewrites a version 1
/// item as version 2, later ones write nothing unless they win a token.
/// The win token (`W`) goes to the client that creates the item with `N`,
/// the first to read a stale item, or (`R`) the first to see less TTL than
/// its threshold; then the item is marked token-sent (others get `Z`).
/// Returns nil on a miss (a foreign value is a miss and is left alone),
/// else `{value as it was, PTTL before, idle seconds (-1 unknown),
/// 1 won | 2 created}`.
pub const META_GET: &str = concat!(
    set_expiry_fn!(),
    hlen_fn!(),
    r#"
local idle = -1
if ARGV[8] == '1' then
  local r = redis.pcall('OBJECT', 'IDLETIME', KEYS[1])
  if type(r) == 'number' then idle = r end
end
local v = redis.call('GET', KEYS[1])
local hl = hlen(v)
if not hl then
  if v or ARGV[5] == '' then return false end
  redis.call('SET', KEYS[1], '\2\0\0\0\0' .. ARGV[5] .. '\6')
  set_expiry(ARGV[3], ARGV[4])
  return {'\2\0\0\0\0' .. ARGV[5] .. '\0', -1, idle, 3}
end
local p = redis.call('PTTL', KEYS[1])
if ARGV[9] == '1' then return {v, p, idle, 0} end
local st = 0
if hl == 14 then st = string.byte(v, 14) end
local won = false
if bit.band(st, 2) == 0 then
  if bit.band(st, 1) ~= 0 then
    won = true
  elseif ARGV[6] ~= '' then
    local ttl = -1
    if p >= 0 then ttl = math.ceil(p / 1000) end
    if ARGV[7] ~= '' then ttl = tonumber(ARGV[7]) end
    if ttl >= 0 and ttl < tonumber(ARGV[6]) then won = true end
  end
end
local nst = st
if ARGV[10] ~= '1' then nst = bit.bor(st, 4) end
if won then nst = bit.bor(nst, 2) end
if nst ~= st then
  if hl == 14 then
    redis.call('SETRANGE', KEYS[1], 13, string.char(nst))
  else
    redis.call('SET', KEYS[1], '\2' .. string.sub(v, 2, 13) .. string.char(nst) .. string.sub(v, 14), 'KEEPTTL')
  end
end
set_expiry(ARGV[1], ARGV[2])
local code = 0
if won then code = 1 end
return {v, p, idle, code}
"#
);

/// `md ... I`: mark the item stale instead of deleting it (memcached: a new
/// CAS, the win token free again, the TTL changed with `T`). `KEYS[1]`;
/// `ARGV[1]` = expected CAS (8 bytes, "" for none); `ARGV[2]` = new CAS;
/// `ARGV[3]`/`ARGV[4]` = expiry ("" keeps the TTL). Returns 0 NF, 1 EX,
/// 2 done.
pub const META_INVALIDATE: &str = concat!(
    set_expiry_fn!(),
    hlen_fn!(),
    r#"
local v = redis.call('GET', KEYS[1])
local hl = hlen(v)
if not hl then return 0 end
if ARGV[1] ~= '' and string.sub(v, 6, 13) ~= ARGV[1] then return 1 end
local st = 0
if hl == 14 then st = string.byte(v, 14) end
st = bit.band(bit.bor(st, 1), 253)
redis.call('SET', KEYS[1], '\2' .. string.sub(v, 2, 5) .. ARGV[2] .. string.char(st) .. string.sub(v, hl + 1), 'KEEPTTL')
set_expiry(ARGV[3], ARGV[4])
return 2
"#
);

/// `md` with `C<cas>`: `KEYS[1]`; `ARGV[1]` = expected CAS (8 bytes).
/// Returns 0 NF (missing, or not a memshift item), 1 EX, 2 deleted.
pub const META_DELETE: &str = r#"
local v = redis.call('GETRANGE', KEYS[1], 0, 12)
if #v < 13 or (string.byte(v, 1) ~= 1 and string.byte(v, 1) ~= 2) then return 0 end
if string.sub(v, 6, 13) ~= ARGV[1] then return 1 end
redis.call('DEL', KEYS[1])
return 2
"#;

/// `ma`: [`ARITH`] plus memcached's meta arithmetic. `KEYS[1]`; `ARGV[1..4]`
/// as for `ARITH`; `ARGV[5]` = expected CAS (8 bytes, "" for none); `ARGV[6]`
/// = "1" to create a missing counter with the digits `ARGV[7]` (flags 0) and
/// expiry `ARGV[8]`/`ARGV[9]`; `ARGV[10]`/`ARGV[11]` = expiry for an updated
/// counter ("" keeps its TTL), applied only when the result fits in the old
/// value's length (memcached 1.6.18 sets it on the item it rewrote in place;
/// a longer number is a new item and the new TTL is lost). Returns 0 NF, 1 EX, -1 non-numeric, or
/// `{2 (updated) | 3 (created), digits, PTTL before}`.
pub const META_ARITH: &str = concat!(
    set_expiry_fn!(),
    hlen_fn!(),
    r#"
local v = redis.call('GET', KEYS[1])
local hl = hlen(v)
if not hl then
  if ARGV[6] ~= '1' then return 0 end
  redis.call('SET', KEYS[1], '\1\0\0\0\0' .. ARGV[4] .. ARGV[7])
  set_expiry(ARGV[8], ARGV[9])
  return {3, ARGV[7], -1}
end
-- memcached refuses an empty value, or one it stores in chunks (item over
-- 512 KB: 48-byte header, key and NUL, data and CRLF, CAS, flags), before
-- it compares the CAS
if #v == hl then return -1 end
local total = 48 + #KEYS[1] + 1 + #v - hl + 2 + 8
if string.sub(v, 2, 5) ~= '\0\0\0\0' then total = total + 4 end
if total > 524288 then return -1 end
if ARGV[5] ~= '' and string.sub(v, 6, 13) ~= ARGV[5] then return 1 end
"#,
    arith_core!(),
    r#"local p = redis.call('PTTL', KEYS[1])
redis.call('SET', KEYS[1], string.sub(v, 1, 5) .. ARGV[4] .. data, 'KEEPTTL')
-- memcached applies T to the item it updated in place; a longer result is
-- a new item that keeps the old TTL (T then only shows in the reply's t)
if #s <= old then set_expiry(ARGV[10], ARGV[11]) end
return {2, s, p}
"#
);

/// Indexes into [`all`].
pub const CAS_SCRIPT: usize = 0;
pub const CONCAT_SCRIPT: usize = 1;
pub const ARITH_SCRIPT: usize = 2;
pub const TOUCH_PERSIST_SCRIPT: usize = 3;
pub const META_GET_SCRIPT: usize = 4;
pub const META_DELETE_SCRIPT: usize = 5;
pub const META_ARITH_SCRIPT: usize = 6;
pub const META_INVALIDATE_SCRIPT: usize = 7;

/// All scripts, with SHA1s computed once.
pub fn all() -> &'static [Script] {
    static SCRIPTS: std::sync::OnceLock<Vec<Script>> = std::sync::OnceLock::new();
    SCRIPTS.get_or_init(|| {
        [
            ("cas", CAS),
            ("concat", CONCAT),
            ("arith", ARITH),
            ("touch_persist", TOUCH_PERSIST),
            ("meta_get", META_GET),
            ("meta_delete", META_DELETE),
            ("meta_arith", META_ARITH),
            ("meta_invalidate", META_INVALIDATE),
        ]
        .into_iter()
        .map(|(name, body)| Script {
            name,
            body,
            sha: sha1_smol::Sha1::from(body).digest().to_string(),
        })
        .collect()
    })
}

/// SHA1 of script `index` (one of the `*_SCRIPT` constants).
pub fn sha(index: usize) -> &'static [u8] {
    all()[index].sha.as_bytes()
}
