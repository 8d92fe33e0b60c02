//! A fixed script of meta commands, on fresh processes.

use super::classic_script::{padded_counter_case, UNCHUNKED_MAX_K6};
use super::runner::run_script;

/// Meta commands: every reply kind (`HD`, `VA`, `EN`, `NS`, `EX`, `NF`,
/// `MN`, `ME`), the return flags, the anti-stampede flags and tokens, `q`, modes, base64 keys, and the error lines,
/// each checked against memcached on one connection of fresh servers.
pub(crate) const META_SCRIPT: &[(&str, &[u8])] = &[
    ("mn", b"mn\r\nmn x\r\n"),
    (
        "mg miss, hit, flags in request order",
        b"mg ms:a v\r\nmg ms:a k O1 v\r\nms ms:a 2 T0 F5\r\nhi\r\nmg ms:a\r\nmg ms:a v\r\n\
          mg ms:a s v f t c k O123\r\nmg ms:a O9 k c f s t v\r\nmg ms:a vv kk\r\n",
    ),
    (
        "mg q hides only the miss",
        b"mg ms:nope q v\r\nmg ms:nope q k O1\r\nmn\r\nms ms:b 1\r\nx\r\nmg ms:b q\r\nmg ms:b q v k\r\nmn\r\n",
    ),
    (
        "mg T touches, t before and after it",
        b"ms ms:c 2\r\nhi\r\nmg ms:c t\r\nmg ms:c T3600 t\r\nmg ms:c t T0\r\nmg ms:c t\r\n\
          mg ms:c T-1 v\r\nmg ms:c v\r\n",
    ),
    (
        "mg and classic commands see the same items",
        b"set ms:d 7 0 3\r\nabc\r\nmg ms:d v f s\r\nms ms:e 3 F9\r\nxyz\r\ngets ms:e\r\n\
          append ms:e 0 0 1\r\n!\r\nmg ms:e v f\r\nincr ms:e 1\r\n",
    ),
    (
        "ms modes",
        b"ms ms:f 2 MR\r\nhi\r\nms ms:f 2 ME k O1 c\r\nhi\r\nms ms:f 2 ME c k\r\nzz\r\n\
          ms ms:f 2 MA\r\n!!\r\nms ms:f 2 MP\r\n<<\r\nmg ms:f v\r\nms ms:g 1 MA\r\nx\r\n\
          ms ms:g 1 MP\r\nx\r\nms ms:f 1 MR T0 F3\r\nr\r\nmg ms:f v f\r\nms ms:f 1 MS\r\ns\r\nmg ms:f v\r\n",
    ),
    (
        "ms q hides only HD",
        b"ms ms:h 1 q\r\nx\r\nms ms:h 1 ME q\r\nx\r\nms ms:i 1 MR q\r\nx\r\nmn\r\n",
    ),
    (
        "ms CAS",
        b"ms ms:j 2 c k\r\nhi\r\nms ms:j 2 C1\r\nzz\r\nms ms:j 2 C0 c k\r\nzz\r\nms ms:none 2 C1 c k\r\nzz\r\n\
          ms ms:none 2 MR C1\r\nzz\r\nms ms:j 2 MA C1\r\nzz\r\nms ms:none 2 MA C1\r\nzz\r\n\
          ms ms:none2 2 ME C1\r\nzz\r\nmg ms:none2 v\r\nmg ms:j v\r\n",
    ),
    (
        "ms TTL and flags",
        b"ms ms:k 2 T-1\r\nhi\r\nmg ms:k v\r\nms ms:k 2 F4294967295 T0\r\nhi\r\nmg ms:k f\r\n\
          ms ms:k 2 F4294967296\r\nhi\r\nmg ms:k f\r\nms ms:k 0\r\n\r\nmg ms:k v s f\r\nms ms:k 1 I s S\r\nx\r\n",
    ),
    (
        "ms errors and what they swallow",
        b"ms ms:l\r\nAB\r\nms ms:l x\r\nAB\r\nms ms:l -1\r\nAB\r\nms ms:l 2 X\r\nmn\r\nms ms:l 2 Mx\r\nAB\r\n\
          ms ms:l 2 Ma\r\nAB\r\nms ms:l 2 MEE\r\nAB\r\nms ms:l 2 F\r\nAB\r\nms ms:l 2 Tx\r\nAB\r\nms ms:l 2 C\r\nAB\r\n\
          ms ms:l 2 MS MS\r\nAB\r\nms ms:l 2\r\nABCD\r\nms ms:l 2 q\r\nABCD\r\nms ms:l 2 E1\r\nAB\r\n\
          ms ms:l 2 O12345678901234567890123456789012\r\nAB\r\nmg ms:l v\r\n",
    ),
    (
        "md",
        b"md ms:m\r\nmd ms:m q\r\nmd ms:m k O1 q\r\nms ms:m 1\r\nx\r\nmd ms:m q\r\nmn\r\nmg ms:m v\r\n\
          ms ms:m 1 c k\r\nx\r\nmd ms:m C1 k\r\nmd ms:m C0\r\nmd ms:m O5 k\r\nmd ms:m T30\r\n",
    ),
    (
        "md errors",
        b"md\r\nmd ms:n x\r\nmd ms:n Cx\r\nmd ms:n q q\r\nmd ms:n 1 2\r\nmd ms:n O12345678901234567890123456789012\r\n",
    ),
    (
        "ma",
        b"ma ms:o\r\nma ms:o q\r\nma ms:o N0\r\nma ms:o\r\nma ms:o v\r\nma ms:o v t c k O1\r\n\
          ma ms:o MD v\r\nma ms:o M- D5 v\r\nma ms:o MI D100 v\r\nma ms:o M+ v\r\nma ms:o q\r\nma ms:o v q\r\n\
          mn\r\nmg ms:o v\r\n",
    ),
    (
        "ma create, CAS, TTL",
        b"ma ms:p N0 J42 v\r\nma ms:q N3600 J7 v t\r\nma ms:r q N0\r\nma ms:s N0 v q\r\nma ms:t O1 k v\r\n\
          ma ms:p C1\r\nma ms:p C0 v c k\r\nma ms:p T3600 t v\r\nma ms:p t\r\nma ms:u T50 N0 t\r\nma ms:v t N0 T3600\r\n\
          mg ms:v t v\r\nma ms:w N0 J18446744073709551615 v\r\nma ms:w v\r\n",
    ),
    (
        "ma on classic items",
        b"set ms:x 3 0 3\r\n100\r\nma ms:x MD v\r\nmg ms:x v f\r\nincr ms:x 1\r\nma ms:x D18446744073709551615 v\r\n\
          set ms:y 0 0 2\r\nhi\r\nma ms:y\r\nma ms:y q\r\n",
    ),
    (
        // memcached sets T's TTL on the item it updated; a result longer
        // than the old value is a new item, which keeps the old TTL.
        "ma T only sticks when the number is rewritten in place",
        b"set ms:yb 0 0 1\r\n5\r\nma ms:yb T-1 v\r\nmg ms:yb v\r\nset ms:yc 0 0 1\r\n9\r\nma ms:yc T-1 v\r\n\
          mg ms:yc v t\r\nset ms:yd 0 0 1\r\n5\r\nma ms:yd T0 t\r\nmg ms:yd t\r\n",
    ),
    (
        // memcached refuses an empty value before it compares the CAS, and
        // an append with C0 does not compare at all.
        "ma on an empty value, append with C0",
        b"set ms:ya 0 0 0\r\n\r\nma ms:ya C1 v\r\nma ms:ya C0\r\nms ms:ya 2 MA C0 k\r\n12\r\nms ms:ya 1 MP C1\r\n0\r\n\
          mg ms:ya v\r\n",
    ),
    (
        "ma errors",
        b"ma\r\nma ms:z Mi\r\nma ms:z Mx\r\nma ms:z D\r\nma ms:z Dx\r\nma ms:z J\r\nma ms:z D18446744073709551616\r\n\
          ma ms:z X\r\nma ms:z 5\r\n",
    ),
    (
        "base64 keys",
        b"ms YWJj 2 b\r\nhi\r\nmg YWJj b v\r\nmg YWI= b k\r\nmg YW=j b k\r\nmg YWJjZA=x b k O1\r\n\
          mg YWI b k\r\nmg YW*j b\r\nmg ==== b\r\nmd YWJj b k\r\nmd YWJj b k\r\nma YWJj b k N0\r\nma YWJj b k v\r\n\
          ms YWJj 2 b k c O1\r\nhi\r\nms AA== 1 b\r\nz\r\nmg AA== b k v\r\n",
    ),
    (
        // The anti-stampede tokens: N creates the item on a miss and wins
        // (W); later readers get Z until an ms replaces it.
        "mg N: vivify on miss, W then Z",
        b"mg ms:sa N30 v c t k\r\nmg ms:sa N30 v c t\r\nmg ms:sa v s\r\nms ms:sa 3 T60\r\nabc\r\n\
          mg ms:sa v t\r\nmg ms:sa N30 v\r\nmg ms:sb N0 v t q\r\nmg ms:sb q s\r\nmg ms:sc N30 T60 t\r\n\
          mg ms:sc t\r\nmg ms:sd T60 N30 t\r\nmg ms:sd t\r\nget ms:sa ms:sb\r\n",
    ),
    (
        "md I marks stale: X W, then Z X, until ms",
        b"ms ms:se 2 T100\r\nhi\r\nmd ms:se I T30\r\nmg ms:se v t c k\r\nmg ms:se v t\r\nmg ms:se h\r\n\
          get ms:se\r\nms ms:se 2\r\nho\r\nmg ms:se v\r\nmd ms:sf I\r\nmd ms:sf I q\r\nmn\r\n\
          md ms:se I C1\r\nmd ms:se I q\r\nmg ms:se t\r\nmd ms:se I T0\r\nmg ms:se t\r\nmd ms:se\r\nmg ms:se v\r\n",
    ),
    (
        // memcached takes an older CAS on a stale item: the item stays
        // stale, keeps its TTL and token; without C, I is ignored.
        "ms I with C on a stale item",
        b"ms ms:sg 2 T100\r\nhi\r\nms ms:sg 2 I C0\r\nno\r\nms ms:sg 2 I C1\r\nno\r\nmd ms:sg I\r\nms ms:sg 2 I C1 c k\r\nzz\r\n\
          mg ms:sg v t\r\nms ms:sg 2 I C1\r\nyy\r\nmg ms:sg v\r\nms ms:sg 2 I\r\nqq\r\nmg ms:sg v t\r\n",
    ),
    (
        "mg R: a win token when less TTL remains",
        b"ms ms:sh 2 T10\r\nhi\r\nmg ms:sh R30 v t\r\nmg ms:sh R30 v t\r\nmg ms:sh R5 t\r\n\
          ms ms:si 2 T100\r\nhi\r\nmg ms:si R30 t\r\nms ms:sj 2\r\nhi\r\nmg ms:sj R30 t\r\n\
          mg ms:si T5 R30 t\r\nmg ms:si R30 t\r\nmg ms:sj R0\r\nmg ms:sk R30 v\r\n",
    ),
    (
        "mg h and l",
        b"ms ms:sl 2\r\nhi\r\nmg ms:sl h l\r\nmg ms:sl l h v\r\nmg ms:sm N30 h l\r\nmg ms:sm h\r\n\
          mg ms:none h l\r\nma ms:sl h l\r\nms ms:sr 2\r\nhi\r\nmg ms:sr u v\r\nmg ms:sr h\r\n\
          md ms:sr I\r\nmg ms:sr u v h\r\nmg ms:sr h\r\n",
    ),
    (
        // exp is minus the remaining TTL in memcached 1.6.18; cls and size
        // are memcached's default slab classes and item sizes.
        "me",
        b"me ms:sn\r\nms ms:sn 2 T100\r\nhi\r\nme ms:sn\r\nmg ms:sn v\r\nme ms:sn\r\nms ms:so 5 F7\r\nhello\r\n\
          me ms:so\r\nme\r\nme ms:sn x\r\nme ms:sn q k\r\nme bm9uZQ== b\r\nme ==== b\r\n",
    ),
    (
        // memcached remembers that an item came through a base64 key.
        "mg k prints the key as stored",
        b"ms bXM6Ymlu 2 b\r\nxy\r\nmg bXM6Ymlu b k v\r\nmg ms:bin k v\r\nme ms:bin\r\nme bXM6Ymlu b\r\n\
          ms ms:bin2 2\r\nxy\r\nmg bXM6YmluMg== b k\r\nms bXM6Ymlu 1 b MA\r\nz\r\nmg ms:bin k v\r\n",
    ),
    (
        "classic commands on stale and vivified items",
        b"ms ms:sp 3\r\n100\r\nmd ms:sp I\r\nget ms:sp\r\nincr ms:sp 5\r\nmg ms:sp v\r\nmd ms:sp I\r\n\
          append ms:sp 0 0 2\r\nxx\r\nmg ms:sp v\r\nmd ms:sp I\r\nprepend ms:sp 0 0 2\r\nyy\r\nmg ms:sp v\r\n\
          md ms:sp I\r\ntouch ms:sp 100\r\nmg ms:sp v t\r\nset ms:sp 0 0 1\r\nz\r\nmg ms:sp v\r\n\
          mg ms:sq N0\r\nget ms:sq\r\ndelete ms:sq\r\nmg ms:sq v\r\n",
    ),
    (
        "general flag errors",
        b"mg\r\nmg ms:e X\r\nmg ms:e v v\r\nmg ms:e E5\r\nmg ms:e Tx\r\nmg ms:e Tx X\r\nmg ms:e Tx Jx\r\n\
          mg ms:e Fx\r\nmg ms:e MEE\r\nmg ms:e Mx C5 D9 J1 I F1 T0 u\r\nmg ms:e O12345678901234567890123456789012\r\n\
          mg ms:e 1 2 3 4 5 6 7 8 9 0 A B G H K L Q W\r\nmx ms:e\r\nmgx ms:e\r\n",
    ),
];

/// `ma` on items around the chunked-item size (see `UNCHUNKED_MAX_K6`):
/// memcached refuses a chunked item before it compares the CAS.
fn chunked_cases() -> Vec<(&'static str, Vec<u8>)> {
    let max = UNCHUNKED_MAX_K6;
    vec![
        padded_counter_case(
            "ma on a 600,000-byte item",
            "ms:big",
            0,
            600_000,
            "ma KEY v\r\nma KEY C1 v\r\nma KEY q\r\nmn\r\n",
        ),
        padded_counter_case(
            "ma just under the chunk size",
            "ms:ch1",
            0,
            max - 1,
            "ma KEY v\r\n",
        ),
        padded_counter_case(
            "ma at the chunk size",
            "ms:ch2",
            0,
            max,
            "ma KEY MD v\r\nmg KEY s\r\n",
        ),
        padded_counter_case(
            "ma just over the chunk size",
            "ms:ch3",
            0,
            max + 1,
            "ma KEY v\r\n",
        ),
        padded_counter_case(
            "ma at the chunk size with flags",
            "ms:ch4",
            5,
            max - 4,
            "ma KEY v\r\n",
        ),
        padded_counter_case(
            "ma over the chunk size with flags",
            "ms:ch5",
            5,
            max - 3,
            "ma KEY v C1\r\n",
        ),
    ]
}

#[test]
fn differential_meta_script() {
    let mut script: Vec<(&str, Vec<u8>)> =
        META_SCRIPT.iter().map(|(n, b)| (*n, b.to_vec())).collect();
    script.extend(chunked_cases());
    run_script("differential_meta_script", &script);
}

/// The same script with the near cache on (every get admitted).
#[test]
fn differential_meta_script_near_cache() {
    super::runner::run_script_with("differential_meta_script_near_cache", META_SCRIPT, true);
}

/// The same script against memshift with one worker thread.
#[test]
fn differential_meta_script_one_worker() {
    super::runner::run_script_one_worker("differential_meta_script_one_worker", META_SCRIPT);
}
