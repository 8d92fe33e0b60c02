//! Which reply differences are allowed: CAS uniques mapped per key, the
//! contents of VERSION and STAT lines, remaining TTLs in meta replies.

use std::collections::HashMap;

use memshift_tests::{escape, Unit};

/// A reply unit with the parts that may legitimately differ abstracted.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Norm {
    Line(Vec<u8>),
    Version,
    /// A run of `STAT name value` lines.
    Stats,
    Value {
        header_without_cas: Vec<u8>,
        has_cas: bool,
        block: Vec<u8>,
    },
}

fn is_stat_line(l: &[u8]) -> bool {
    l.starts_with(b"STAT ")
        && l.ends_with(b"\r\n")
        && l[5..l.len() - 2].split(|&b| b == b' ').count() >= 2
}

pub(super) fn normalize(units: &[Unit]) -> Vec<Norm> {
    let mut out = Vec::new();
    for u in units {
        match u {
            Unit::Line(l) if l.starts_with(b"VERSION ") && l.ends_with(b"\r\n") && l.len() > 10 => {
                out.push(Norm::Version)
            }
            Unit::Line(l) if is_stat_line(l) => {
                if out.last() != Some(&Norm::Stats) {
                    out.push(Norm::Stats);
                }
            }
            Unit::Line(l) if is_meta_line(l) => out.push(Norm::Line(meta_normalized(l))),
            Unit::Line(l) if l.starts_with(b"ME ") => out.push(Norm::Line(debug_normalized(l))),
            Unit::Line(l) => out.push(Norm::Line(l.clone())),
            Unit::Value { header, block, .. } if header.starts_with(b"VA ") => {
                out.push(Norm::Value {
                    header_without_cas: meta_normalized(header),
                    has_cas: false,
                    block: block.clone(),
                });
            }
            Unit::Value {
                header, cas, block, ..
            } => {
                let header_without_cas = match cas {
                    Some(_) => {
                        let cut = header
                            .iter()
                            .rposition(|&b| b == b' ')
                            .unwrap_or(header.len());
                        header[..cut].to_vec()
                    }
                    None => header.clone(),
                };
                out.push(Norm::Value {
                    header_without_cas,
                    has_cas: cas.is_some(),
                    block: block.clone(),
                });
            }
        }
    }
    out
}

/// A meta reply line (`HD`, `EN`, `NS`, `EX`, `NF`, `MN`, with flags).
fn is_meta_line(l: &[u8]) -> bool {
    let code = l.get(..2).unwrap_or_default();
    matches!(code, b"HD" | b"EN" | b"NS" | b"EX" | b"NF" | b"MN")
        && matches!(l.get(2), Some(b' ' | b'\r'))
}

/// The tokens of a meta reply line (without its `\r\n`).
fn meta_tokens(l: &[u8]) -> Vec<&[u8]> {
    let l = l.strip_suffix(b"\r\n").unwrap_or(l);
    l.split(|&b| b == b' ').collect()
}

/// A meta reply line with what may differ abstracted: a CAS unique (`c<n>`,
/// n > 0: checked per key with `meta_cas` instead), a remaining TTL
/// (`t<n>`, n > 0: memcached counts whole seconds on its own clock) and the
/// seconds since the last access (`l<n>`: memcached's clock against Redis'
/// LRU clock, both one-second resolution, so 0 and 1 both occur).
fn meta_normalized(l: &[u8]) -> Vec<u8> {
    let toks = meta_tokens(l);
    let mut out = Vec::with_capacity(l.len());
    for (i, t) in toks.iter().enumerate() {
        if i > 0 {
            out.push(b' ');
        }
        let digits = |rest: &[u8]| !rest.is_empty() && rest.iter().all(u8::is_ascii_digit);
        let positive = |rest: &[u8]| {
            !rest.is_empty() && rest.iter().all(u8::is_ascii_digit) && rest[0] != b'0'
        };
        match t.split_first() {
            Some((b'c', rest)) if i > 0 && positive(rest) => out.extend_from_slice(b"c#"),
            Some((b't', rest)) if i > 0 && positive(rest) => out.extend_from_slice(b"t#"),
            Some((b'l', rest)) if i > 0 && digits(rest) => out.extend_from_slice(b"l#"),
            _ => out.extend_from_slice(t),
        }
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// An `me` line (`ME <key> exp=… la=… cas=… fetch=… cls=… size=…`) with
/// what may differ abstracted, as for [`meta_normalized`]: `exp=` when not
/// `-1` (minus the remaining TTL), `la=` (seconds since the last access)
/// and `cas=`.
fn debug_normalized(l: &[u8]) -> Vec<u8> {
    let toks = meta_tokens(l);
    let mut out = Vec::with_capacity(l.len());
    for (i, t) in toks.iter().enumerate() {
        if i > 0 {
            out.push(b' ');
        }
        match t {
            t if t.starts_with(b"exp=") && *t != b"exp=-1" => out.extend_from_slice(b"exp=#"),
            t if t.starts_with(b"la=") => out.extend_from_slice(b"la=#"),
            t if t.starts_with(b"cas=") => out.extend_from_slice(b"cas=#"),
            _ => out.extend_from_slice(t),
        }
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// The (key, CAS unique) a meta reply reports with `k` and `c` (not for
/// base64 keys).
pub(super) fn meta_cas(u: &Unit) -> Option<(Vec<u8>, u64)> {
    let l = match u {
        Unit::Line(l) if is_meta_line(l) => l,
        Unit::Value { header, .. } if header.starts_with(b"VA ") => header,
        _ => return None,
    };
    let toks = meta_tokens(l);
    if toks.iter().skip(1).any(|t| *t == b"b") {
        return None;
    }
    let key = toks.iter().skip(1).find_map(|t| t.strip_prefix(b"k"))?;
    let cas = toks
        .iter()
        .skip(1)
        .find_map(|t| t.strip_prefix(b"c"))
        .and_then(|c| std::str::from_utf8(c).ok()?.parse::<u64>().ok())
        .filter(|&c| c > 0)?;
    Some((key.to_vec(), cas))
}

/// Per key, a bijection between reference and target CAS uniques.
#[derive(Default)]
pub(super) struct CasMap {
    ref_to_tgt: HashMap<(Vec<u8>, u64), u64>,
    tgt_to_ref: HashMap<(Vec<u8>, u64), u64>,
}

impl CasMap {
    fn check(&mut self, key: &[u8], r: u64, t: u64) -> Result<(), String> {
        let fwd = *self.ref_to_tgt.entry((key.to_vec(), r)).or_insert(t);
        let back = *self.tgt_to_ref.entry((key.to_vec(), t)).or_insert(r);
        if fwd != t || back != r {
            return Err(format!(
                "CAS uniques of key {} do not map consistently: reference {r} was seen with target {fwd}, \
                 target {t} with reference {back} (now reference {r} ↔ target {t})",
                escape(key, 60)
            ));
        }
        Ok(())
    }
}

/// Compares one batch; on a difference returns (index of the first
/// differing unit, explanation).
pub(super) fn compare(cas: &mut CasMap, r: &[Unit], t: &[Unit]) -> Result<(), (usize, String)> {
    let (nr, nt) = (normalize(r), normalize(t));
    for (i, (a, b)) in nr.iter().zip(nt.iter()).enumerate() {
        if a != b {
            return Err((i, "replies differ".into()));
        }
    }
    if nr.len() != nt.len() {
        return Err((
            nr.len().min(nt.len()),
            format!(
                "reference has {} reply units, target {}",
                nr.len(),
                nt.len()
            ),
        ));
    }
    // Same shape: now the CAS uniques.
    let rv = r.iter().filter(|u| matches!(u, Unit::Value { .. }));
    let tv = t.iter().filter(|u| matches!(u, Unit::Value { .. }));
    for (i, (a, b)) in rv.zip(tv).enumerate() {
        if let (
            Unit::Value {
                key, cas: Some(x), ..
            },
            Unit::Value { cas: Some(y), .. },
        ) = (a, b)
        {
            cas.check(key, *x, *y).map_err(|e| (i, e))?;
        }
    }
    // Meta replies with `k` and `c`, as for gets.
    let rm = r.iter().filter_map(meta_cas);
    let tm = t.iter().filter_map(meta_cas);
    for (i, ((key, x), (_, y))) in rm.zip(tm).enumerate() {
        cas.check(&key, x, y).map_err(|e| (i, e))?;
    }
    Ok(())
}
