//! Administrative commands on fresh servers: the fixed script of every
//! command's valid and invalid forms, and the two sequences whose values
//! matter (`stats reset`, `stats detail`), compared with memcached 1.6.18.
//!
//! The reference runs with `-o no_lru_maintainer,no_lru_crawler` (see
//! `runner`), while memshift answers as a memcached with default settings:
//! the script leaves out `lru mode` and `lru temp_ttl` (ERROR without the
//! maintainer thread) and starts the crawler commands with
//! `lru_crawler disable`, which puts both sides in the same state.

use std::collections::BTreeMap;

use memshift_tests::Unit;

use super::runner::{run_script, start_sides, Side};

pub(super) const ADMIN_SCRIPT: &[(&str, &[u8])] = &[
    (
        "stats groups",
        b"stats reset x y\r\nstats foo\r\nstats proxy\r\nstats items\r\nstats slabs\r\nstats extstore\r\nstats settings x\r\n",
    ),
    (
        "stats sizes",
        b"stats sizes\r\nstats sizes_enable\r\nstats sizes\r\nstats sizes_disable x\r\nstats sizes\r\n",
    ),
    (
        "stats detail",
        b"stats detail\r\nstats detail foo\r\nstats detail dump\r\nstats detail on x\r\nstats detail off\r\nstats detail dump\r\n",
    ),
    (
        "stats cachedump",
        b"stats cachedump\r\nstats cachedump 1\r\nstats cachedump x y\r\nstats cachedump -1 1\r\nstats cachedump 64 1\r\nstats cachedump 1 1\r\nstats cachedump 63 0 x\r\n",
    ),
    (
        "cache_memlimit",
        b"cache_memlimit 100\r\ncache_memlimit 100 noreply\r\ncache_memlimit 8 x\r\ncache_memlimit 1\r\ncache_memlimit 1 noreply\r\ncache_memlimit 0\r\ncache_memlimit 4294967296\r\ncache_memlimit 1000000001\r\ncache_memlimit\r\ncache_memlimit x\r\ncache_memlimit -5\r\ncache_memlimit 100 noreply x\r\ncache_memlimit 64\r\n",
    ),
    (
        "slabs automove",
        b"slabs\r\nslabs foo\r\nslabs automove\r\nslabs automove 0\r\nslabs automove 1\r\nslabs automove 2\r\nslabs automove 3\r\nslabs automove 3 noreply\r\nslabs automove x\r\nslabs automove -1\r\nslabs automove 0 noreply\r\nslabs automove 1 x\r\nslabs automove ratio\r\nslabs automove ratio 0.5\r\nslabs automove ratio x\r\nslabs automove 1\r\n",
    ),
    (
        "slabs reassign",
        b"slabs reassign\r\nslabs reassign 1\r\nslabs reassign 1 2\r\nslabs reassign x y\r\nslabs reassign 1 1\r\nslabs reassign -1 -1\r\nslabs reassign -1 2\r\nslabs reassign 0 2\r\nslabs reassign 39 2\r\nslabs reassign 40 2\r\nslabs reassign 2 100\r\nslabs reassign 1 2 3\r\nslabs reassign 1 2 noreply\r\n",
    ),
    (
        "lru",
        b"lru\r\nlru foo\r\nlru mode\r\nlru mode foo\r\nlru tune 10 40 0.1 2\r\nlru tune 10 40 0.1 2 noreply\r\nlru tune 50 40 0.1 2\r\nlru tune 10 40 0 2\r\nlru tune x 40 0.1 2\r\nlru tune 10 40\r\nlru temp_ttl\r\nlru tune 20 40 0.2 2\r\n",
    ),
    (
        "lru_crawler",
        b"lru_crawler\r\nlru_crawler foo\r\nlru_crawler crawl\r\nlru_crawler crawl all x\r\nlru_crawler sleep 10\r\nlru_crawler sleep x\r\nlru_crawler sleep 2000000\r\nlru_crawler sleep 10 noreply\r\nlru_crawler tocrawl 10\r\nlru_crawler tocrawl x\r\nlru_crawler tocrawl\r\nlru_crawler enable x\r\nlru_crawler sleep 100\r\nlru_crawler tocrawl 0\r\n",
    ),
    (
        "lru_crawler disabled, then enabled",
        b"lru_crawler disable\r\nlru_crawler disable\r\nlru_crawler crawl all\r\nlru_crawler metadump all\r\nlru_crawler crawl x\r\nlru_crawler enable\r\nlru_crawler enable\r\nlru_crawler crawl 0\r\nlru_crawler crawl 64\r\nlru_crawler crawl 1,x\r\nlru_crawler metadump 64\r\nlru_crawler metadump x\r\nlru_crawler metadump all\r\nlru_crawler metadump hash\r\n",
    ),
    (
        "watch, misbehave, debugtime, shutdown",
        b"watch foo\r\nwatch\r\nwatch fetchers mutations\r\nwatch foo fetchers\r\nwatch fetchers noreply\r\nmisbehave\r\ndebugtime\r\ndebugtime 10\r\nshutdown\r\nshutdown graceful\r\nshutdown foo\r\n",
    ),
];

#[test]
fn differential_admin_script() {
    run_script("differential_admin_script", ADMIN_SCRIPT);
}

/// Sends `bytes` and a `version` sentinel; the reply lines before it.
fn lines(side: &mut Side, bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut req = bytes.to_vec();
    req.extend_from_slice(b"version\r\n");
    side.conn.send(&req).expect("send");
    let mut units = side
        .read_batch(false)
        .unwrap_or_else(|(_, e)| panic!("{}: {e}", side.name));
    units.pop();
    units
        .into_iter()
        .map(|u| match u {
            Unit::Line(l) => l,
            other => other.raw(),
        })
        .collect()
}

/// The `STAT name value` lines of a reply.
fn stat_map(lines: &[Vec<u8>]) -> BTreeMap<String, String> {
    lines
        .iter()
        .filter_map(|l| {
            let text = String::from_utf8_lossy(l);
            let rest = text.strip_prefix("STAT ")?.trim_end().to_string();
            let (name, value) = rest.split_once(' ')?;
            Some((name.to_string(), value.to_string()))
        })
        .collect()
}

/// Counters memshift reports that memcached's `stats reset` zeroes and that
/// the same traffic moves the same way on both sides.
const RESETTABLE: &[&str] = &[
    "total_connections",
    "rejected_connections",
    "cmd_get",
    "cmd_set",
    "cmd_flush",
    "cmd_touch",
    "get_hits",
    "get_misses",
    "get_expired",
    "delete_misses",
    "delete_hits",
    "incr_misses",
    "incr_hits",
    "decr_misses",
    "decr_hits",
    "cas_misses",
    "cas_hits",
    "cas_badval",
    "touch_hits",
    "touch_misses",
];

fn counters(side: &mut Side, bytes: &[u8]) -> BTreeMap<String, String> {
    let all = stat_map(&lines(side, bytes));
    RESETTABLE
        .iter()
        .map(|&name| {
            let value = all
                .get(name)
                .unwrap_or_else(|| panic!("{}: no STAT {name}", side.name));
            (name.to_string(), value.clone())
        })
        .collect()
}

const TRAFFIC: &[u8] = b"set r:a 0 0 1\r\n1\r\nget r:a r:none\r\ngets r:a\r\ntouch r:a 0\r\ntouch r:none 0\r\nincr r:a 2\r\ndecr r:none 1\r\ndelete r:none\r\ncas r:a 0 0 1 123456789\r\nx\r\nflush_all\r\n";

#[test]
fn differential_stats_reset() {
    let Some((reference, target)) = start_sides("differential_stats_reset") else {
        return;
    };
    let mut r = Side::connect("reference memcached", &reference.addr());
    let mut t = Side::connect(target.name(), &target.addr());
    for side in [&mut r, &mut t] {
        lines(side, TRAFFIC);
    }
    // Right after the reset every counter is 0 on both sides, and the same
    // traffic then counts the same again.
    let probe = b"stats reset\r\nstats\r\n";
    let (rc, tc) = (counters(&mut r, probe), counters(&mut t, probe));
    assert!(
        rc.values().all(|v| v == "0"),
        "reference after reset: {rc:?}"
    );
    assert_eq!(tc, rc, "{} counters after stats reset", target.name());
    for side in [&mut r, &mut t] {
        lines(side, TRAFFIC);
    }
    let (rc, tc) = (
        counters(&mut r, b"stats\r\n"),
        counters(&mut t, b"stats\r\n"),
    );
    assert_eq!(tc, rc, "{} counters after reset and traffic", target.name());
    assert_ne!(rc.get("cmd_get").map(String::as_str), Some("0"));
}

/// memcached lists prefixes in its hash order; compare them sorted.
fn sorted_prefixes(mut lines: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    lines.sort_by_key(|l| (!l.starts_with(b"PREFIX "), l.clone()));
    lines
}

#[test]
fn differential_stats_detail() {
    let Some((reference, target)) = start_sides("differential_stats_detail") else {
        return;
    };
    let mut r = Side::connect("reference memcached", &reference.addr());
    let mut t = Side::connect(target.name(), &target.addr());
    let mut too_large = b"set h:1 0 0 2000000\r\n".to_vec();
    too_large.extend(std::iter::repeat_n(b'x', 2_000_000));
    too_large.extend_from_slice(b"\r\nset h:2 0 0 2000000 noreply\r\n");
    too_large.extend(std::iter::repeat_n(b'x', 2_000_000));
    too_large.extend_from_slice(b"\r\nstats detail dump\r\n");
    let steps: &[(&str, &[u8])] = &[
        ("off: nothing counted", b"set a:0 0 0 1\r\nx\r\nstats detail dump\r\n"),
        ("on", b"stats detail on\r\n"),
        (
            "traffic",
            b"set a:1 0 0 1\r\nx\r\nadd a:1 0 0 1\r\nx\r\nreplace b:2 0 0 1\r\nx\r\nget a:1 b:2 nokey\r\nget a:1\r\ngat 0 a:1 c:1\r\ntouch a:1 0\r\nincr a:1 1\r\ndelete a:1\r\ndelete d:1\r\nmg e:1 v\r\nset :x 0 0 1\r\nx\r\nset a:b:c 0 0 1\r\nx\r\nset ab:1 0 0 1\r\nx\r\nset plain 0 0 1\r\nx\r\n",
        ),
        ("dump", b"stats detail dump\r\n"),
        // memcached counts the set of a storage line it parsed, even when
        // it then refuses the data (bad chunk, too large; noreply too), not
        // of a bad line, nor of `ms`.
        (
            "refused stores",
            b"set f:a 0 0 1\r\nxx\r\nadd f:b 0 0 1\r\nxx\r\ncas f:c 0 0 1 5\r\nxx\r\nappend f:d 0 0 1 noreply\r\nxx\r\nset g:e abc 0 1\r\nx\r\nset g:f 0 0 -1\r\nms g:g 2\r\nxxx\r\nstats detail dump\r\n",
        ),
        ("too large", &too_large),
        ("off keeps the counts", b"stats detail off\r\nget a:1\r\nstats detail dump\r\n"),
        ("reset clears them", b"stats reset\r\nstats detail dump\r\n"),
        ("on again", b"stats detail on\r\nset z:1 0 0 1\r\nx\r\nstats detail dump\r\nstats detail off\r\n"),
    ];
    for (name, bytes) in steps {
        let rl = sorted_prefixes(lines(&mut r, bytes));
        let tl = sorted_prefixes(lines(&mut t, bytes));
        let show = |ls: &[Vec<u8>]| {
            ls.iter()
                .map(|l| String::from_utf8_lossy(l).into_owned())
                .collect::<String>()
        };
        assert_eq!(
            show(&tl),
            show(&rl),
            "step {name:?}: {} differs from the reference",
            target.name()
        );
    }
}
