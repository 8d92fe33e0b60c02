//! A fixed script of incr/decr edge cases, on fresh processes.

use super::runner::run_script;

/// Run in order on one connection of freshly started servers. Nothing is
/// deleted, so every item sits in never-used (zeroed) memory: that makes
/// memcached's incr/decr of values of 2^63 and more deterministic (see
/// `Gen::maybe_big`), which the random stream has to avoid.
pub(crate) const FIXED_SCRIPT: &[(&str, &[u8])] = &[
    (
        "decr 10 -> 9 pads in place",
        b"set fs:a 0 0 2\r\n10\r\ndecr fs:a 1\r\nget fs:a\r\n",
    ),
    (
        "decr 1000 -> 999 -> ... pads in place",
        b"set fs:b 0 0 4\r\n1000\r\ndecr fs:b 1\r\ndecr fs:b 990\r\ngets fs:b\r\nincr fs:b 5\r\nget fs:b\r\n",
    ),
    (
        "incr grows the value",
        b"set fs:c 5 0 1\r\n9\r\nincr fs:c 1\r\nget fs:c\r\nincr fs:c 990\r\nget fs:c\r\n",
    ),
    (
        "incr wraps at 2^64",
        b"set fs:d 0 0 20\r\n18446744073709551615\r\nincr fs:d 1\r\nget fs:d\r\n",
    ),
    (
        "incr near 2^64 wraps past 0",
        b"set fs:e 0 0 20\r\n18446744073709551614\r\nincr fs:e 5\r\nget fs:e\r\n",
    ),
    (
        "incr by 2^64-1 wraps",
        b"set fs:f 0 0 1\r\n5\r\nincr fs:f 18446744073709551615\r\nget fs:f\r\n",
    ),
    (
        "decr of a value over 2^63",
        b"set fs:g 0 0 19\r\n9223372036854775808\r\ndecr fs:g 1\r\nget fs:g\r\n",
    ),
    (
        "decr below 0 stops at 0",
        b"set fs:h 0 0 1\r\n3\r\ndecr fs:h 10\r\nget fs:h\r\ndecr fs:h 1\r\n",
    ),
    (
        "value of 2^64 is not a number",
        b"set fs:i 0 0 20\r\n18446744073709551616\r\nincr fs:i 1\r\n",
    ),
    (
        "leading and trailing spaces",
        b"set fs:j 0 0 4\r\n 12 \r\nincr fs:j 1\r\nget fs:j\r\n",
    ),
    (
        "number followed by text",
        b"set fs:k 0 0 6\r\n12 abc\r\nincr fs:k 1\r\nget fs:k\r\nset fs:k2 0 0 5\r\n12abc\r\nincr fs:k2 1\r\n",
    ),
    (
        "signs",
        b"set fs:l 0 0 2\r\n-5\r\nincr fs:l 1\r\nset fs:l2 0 0 2\r\n+5\r\nincr fs:l2 1\r\nset fs:l3 0 0 2\r\n-0\r\ndecr fs:l3 1\r\n",
    ),
    (
        "value of only whitespace",
        b"set fs:q 0 0 2\r\n  \r\nincr fs:q 1\r\nset fs:q2 0 0 2\r\n\r\n\r\ndecr fs:q2 1\r\n",
    ),
    (
        "empty value",
        b"set fs:m 0 0 0\r\n\r\nincr fs:m 1\r\ndecr fs:m 1\r\n",
    ),
    (
        "bad deltas",
        b"set fs:n 0 0 1\r\n1\r\nincr fs:n -1\r\nincr fs:n abc\r\nincr fs:n 18446744073709551616\r\nincr fs:n 1x\r\ndecr fs:n 0\r\n",
    ),
    (
        "missing key, noreply",
        b"incr fs:none 1\r\ndecr fs:none 1\r\nincr fs:none 1 noreply\r\nset fs:o 0 0 1\r\n7\r\nincr fs:o 3 noreply\r\nget fs:o\r\n",
    ),
    (
        "flags and cas survive incr",
        b"set fs:p 4294967295 0 2\r\n99\r\ngets fs:p\r\nincr fs:p 1\r\ngets fs:p\r\ndecr fs:p 100\r\ngets fs:p\r\n",
    ),
];

/// Largest data memcached 1.6.18 keeps in one slab chunk for a 6-byte key
/// and flags 0: past it the item is chunked (header + key + data over the
/// 512 KiB `slab_chunk_max`) and incr/decr/`ma` call it non-numeric.
/// Measured by bisection against memcached (4 bytes less with flags).
pub(super) const UNCHUNKED_MAX_K6: usize = 524_223;

/// A chunked-item case: `set <key> <flags> 0 <len>` of a counter `7`
/// padded with spaces, then `tail` with `KEY` standing for the key.
pub(super) fn padded_counter_case(
    name: &'static str,
    key: &str,
    flags: u32,
    len: usize,
    tail: &str,
) -> (&'static str, Vec<u8>) {
    let mut out = format!("set {key} {flags} 0 {len}\r\n7").into_bytes();
    out.resize(out.len() + len - 1, b' ');
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(tail.replace("KEY", key).as_bytes());
    (name, out)
}

/// incr/decr on items around the chunked-item size (far below `MAX_ITEM`).
fn chunked_cases() -> Vec<(&'static str, Vec<u8>)> {
    let max = UNCHUNKED_MAX_K6;
    vec![
        padded_counter_case(
            "incr on a 600,000-byte item",
            "fs:big",
            0,
            600_000,
            "incr KEY 1\r\ndecr KEY 1\r\n",
        ),
        padded_counter_case(
            "incr just under the chunk size",
            "fs:ch1",
            0,
            max - 1,
            "incr KEY 1\r\n",
        ),
        padded_counter_case(
            "incr at the chunk size",
            "fs:ch2",
            0,
            max,
            "incr KEY 1\r\nget KEY\r\n",
        ),
        padded_counter_case(
            "incr just over the chunk size",
            "fs:ch3",
            0,
            max + 1,
            "incr KEY 1\r\ndecr KEY 1\r\n",
        ),
        padded_counter_case(
            "incr at the chunk size with flags",
            "fs:ch4",
            5,
            max - 4,
            "incr KEY 1\r\n",
        ),
        padded_counter_case(
            "incr over the chunk size with flags",
            "fs:ch5",
            5,
            max - 3,
            "incr KEY 1\r\n",
        ),
        padded_counter_case(
            "incr after an append past the chunk size",
            "fs:ch6",
            0,
            max,
            "append KEY 0 0 1\r\n \r\nincr KEY 1\r\n",
        ),
    ]
}

#[test]
fn differential_fixed_script() {
    let mut script: Vec<(&str, Vec<u8>)> =
        FIXED_SCRIPT.iter().map(|(n, b)| (*n, b.to_vec())).collect();
    script.extend(chunked_cases());
    run_script("differential_fixed_script", &script);
}

/// The same script with the near cache on (every get admitted).
#[test]
fn differential_fixed_script_near_cache() {
    super::runner::run_script_with("differential_fixed_script_near_cache", FIXED_SCRIPT, true);
}

/// The same script against memshift with one worker thread.
#[test]
fn differential_fixed_script_one_worker() {
    super::runner::run_script_one_worker("differential_fixed_script_one_worker", FIXED_SCRIPT);
}
