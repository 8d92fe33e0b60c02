//! Administrative commands (`stats <group>`, `cache_memlimit`, `slabs`,
//! `lru`, `lru_crawler`, `watch`): every reply below was recorded from a live
//! memcached 1.6.18 started with its default options
//! (`memcached -u root -p PORT -U 0 -l 127.0.0.1`).

mod memcache_support;

use memcache_support::{complete, parse, rejected};
use memshift_protocol::memcache::{
    AdminCommand, CrawlClasses, LruCrawler, Parsed, ProtocolError, Request, StatsDetail, StatsGroup,
};

const ERROR: &[u8] = b"ERROR\r\n";
const BAD_FORMAT: &[u8] = b"CLIENT_ERROR bad command line format\r\n";
const SILENT: &[u8] = b"";

fn assert_reply(input: &[u8], expected: &[u8]) {
    let (reply, skip) = rejected(input);
    assert_eq!(
        String::from_utf8_lossy(reply),
        String::from_utf8_lossy(expected),
        "reply to {:?}",
        String::from_utf8_lossy(input)
    );
    assert_eq!(skip, input.len());
}

fn admin(input: &[u8]) -> (AdminCommand, bool) {
    match complete(input) {
        Request::Admin { command, noreply } => (command, noreply),
        other => panic!("{input:?}: expected an admin command, got {other:?}"),
    }
}

fn stats(input: &[u8]) -> StatsGroup {
    match complete(input) {
        Request::Stats(group) => group,
        other => panic!("{input:?}: expected stats, got {other:?}"),
    }
}

#[test]
fn stats_groups_and_their_errors() {
    assert_eq!(stats(b"stats reset x y\r\n"), StatsGroup::Reset);
    assert_eq!(stats(b"stats settings x\r\n"), StatsGroup::Settings);
    assert_eq!(stats(b"stats slabs\r\n"), StatsGroup::Slabs);
    assert_eq!(stats(b"stats sizes\r\n"), StatsGroup::Sizes);
    assert_eq!(stats(b"stats sizes_enable\r\n"), StatsGroup::SizesEnable);
    assert_eq!(
        stats(b"stats sizes_disable x\r\n"),
        StatsGroup::SizesDisable
    );
    assert_eq!(stats(b"stats conns\r\n"), StatsGroup::Conns);
    // `END` from 1.6.18 (built with extstore, none configured).
    assert_eq!(stats(b"stats extstore\r\n"), StatsGroup::Extstore);
    assert_reply(b"stats proxy\r\n", ERROR);
    assert_reply(b"stats foo\r\n", ERROR);
}

#[test]
fn stats_detail() {
    const USAGE: &[u8] = b"CLIENT_ERROR usage: stats detail on|off|dump\r\n";
    assert_eq!(
        stats(b"stats detail on\r\n"),
        StatsGroup::Detail(StatsDetail::On)
    );
    // Only the first argument counts.
    assert_eq!(
        stats(b"stats detail on x\r\n"),
        StatsGroup::Detail(StatsDetail::On)
    );
    assert_eq!(
        stats(b"stats detail off\r\n"),
        StatsGroup::Detail(StatsDetail::Off)
    );
    assert_eq!(
        stats(b"stats detail dump\r\n"),
        StatsGroup::Detail(StatsDetail::Dump)
    );
    assert_reply(b"stats detail\r\n", USAGE);
    assert_reply(b"stats detail foo\r\n", USAGE);
    assert_reply(b"stats detail ON\r\n", USAGE);
}

#[test]
fn stats_cachedump() {
    assert_eq!(
        stats(b"stats cachedump 1 1\r\n"),
        StatsGroup::CacheDump { class: 1, limit: 1 }
    );
    assert_eq!(
        stats(b"stats cachedump 63 0 x\r\n"),
        StatsGroup::CacheDump {
            class: 63,
            limit: 0
        }
    );
    assert_reply(b"stats cachedump\r\n", b"CLIENT_ERROR bad command line\r\n");
    assert_reply(
        b"stats cachedump 1\r\n",
        b"CLIENT_ERROR bad command line\r\n",
    );
    assert_reply(b"stats cachedump x y\r\n", BAD_FORMAT);
    assert_reply(b"stats cachedump -1 1\r\n", BAD_FORMAT);
    assert_reply(
        b"stats cachedump 64 1\r\n",
        b"CLIENT_ERROR Illegal slab id\r\n",
    );
}

#[test]
fn cache_memlimit() {
    assert_eq!(
        admin(b"cache_memlimit 100\r\n"),
        (AdminCommand::CacheMemlimit { megabytes: 100 }, false)
    );
    assert_eq!(
        admin(b"cache_memlimit 100 noreply\r\n"),
        (AdminCommand::CacheMemlimit { megabytes: 100 }, true)
    );
    // A second token that is not noreply is ignored.
    assert_eq!(
        admin(b"cache_memlimit 8 x\r\n"),
        (AdminCommand::CacheMemlimit { megabytes: 8 }, false)
    );
    const TOO_SMALL: &[u8] = b"MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m\r\n";
    assert_reply(b"cache_memlimit 1\r\n", TOO_SMALL);
    assert_reply(b"cache_memlimit 0\r\n", TOO_SMALL);
    // strtoul into a uint32_t: 2^32 is 0.
    assert_reply(b"cache_memlimit 4294967296\r\n", TOO_SMALL);
    assert_reply(b"cache_memlimit 1 noreply\r\n", SILENT);
    assert_reply(
        b"cache_memlimit 1000000001\r\n",
        b"MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes\r\n",
    );
    assert_reply(b"cache_memlimit\r\n", ERROR);
    assert_reply(b"cache_memlimit x\r\n", ERROR);
    assert_reply(b"cache_memlimit -5\r\n", ERROR);
    assert_reply(b"cache_memlimit 100 noreply x\r\n", ERROR);
}

#[test]
fn slabs() {
    for line in [
        &b"slabs automove 0\r\n"[..],
        b"slabs automove 1\r\n",
        b"slabs automove 2\r\n",
        b"slabs automove 0 x\r\n",
        b"slabs automove ratio 0.5\r\n",
        b"slabs automove ratio 0.5 x\r\n",
    ] {
        assert_eq!(admin(line), (AdminCommand::SlabsAutomove, false));
    }
    assert_eq!(
        admin(b"slabs automove 0 noreply\r\n"),
        (AdminCommand::SlabsAutomove, true)
    );
    assert_reply(b"slabs automove 3\r\n", ERROR);
    assert_reply(b"slabs automove 3 noreply\r\n", SILENT);
    assert_reply(b"slabs automove x\r\n", BAD_FORMAT);
    assert_reply(b"slabs automove -1\r\n", BAD_FORMAT);
    assert_reply(b"slabs automove ratio\r\n", ERROR);
    assert_reply(b"slabs automove ratio x\r\n", ERROR);
    assert_eq!(
        admin(b"slabs reassign 1 2\r\n"),
        (AdminCommand::SlabsReassign { src: 1, dst: 2 }, false)
    );
    assert_eq!(
        admin(b"slabs reassign -1 -1\r\n"),
        (AdminCommand::SlabsReassign { src: -1, dst: -1 }, false)
    );
    assert_reply(b"slabs reassign x y\r\n", BAD_FORMAT);
    assert_reply(b"slabs reassign 1\r\n", ERROR);
    assert_reply(b"slabs reassign 1 2 3\r\n", ERROR);
    assert_reply(b"slabs reassign 1 2 noreply\r\n", ERROR);
}

#[test]
fn lru() {
    for line in [
        &b"lru tune 10 40 0.1 2\r\n"[..],
        b"lru mode flat\r\n",
        b"lru mode segmented\r\n",
        b"lru temp_ttl 10\r\n",
        b"lru temp_ttl -1\r\n",
    ] {
        assert_eq!(admin(line), (AdminCommand::Lru, false));
    }
    assert_eq!(
        admin(b"lru tune 10 40 0.1 2 noreply\r\n"),
        (AdminCommand::Lru, true)
    );
    assert_reply(
        b"lru tune 50 40 0.1 2\r\n",
        b"ERROR hot and warm pcts must not exceed 80\r\n",
    );
    assert_reply(
        b"lru tune 10 40 0 2\r\n",
        b"ERROR hot/warm age factors must be greater than 0\r\n",
    );
    assert_reply(b"lru tune x 40 0.1 2\r\n", ERROR);
    assert_reply(b"lru tune 10 40\r\n", ERROR);
    assert_reply(b"lru tune 10 40 0.1\r\n", ERROR);
    assert_reply(b"lru mode\r\n", ERROR);
    assert_reply(b"lru mode foo\r\n", ERROR);
    assert_reply(b"lru mode foo noreply\r\n", SILENT);
    assert_reply(b"lru temp_ttl x\r\n", ERROR);
    assert_reply(b"lru temp_ttl\r\n", ERROR);
}

#[test]
fn lru_crawler() {
    let crawler = |line: &[u8]| match admin(line) {
        (AdminCommand::LruCrawler(c), false) => c,
        other => panic!("{line:?}: {other:?}"),
    };
    use CrawlClasses::*;
    assert_eq!(
        crawler(b"lru_crawler crawl all\r\n"),
        LruCrawler::Crawl(All)
    );
    assert_eq!(
        crawler(b"lru_crawler crawl 1\r\n"),
        LruCrawler::Crawl(Listed)
    );
    assert_eq!(
        crawler(b"lru_crawler crawl 1,,2\r\n"),
        LruCrawler::Crawl(Listed)
    );
    assert_eq!(
        crawler(b"lru_crawler crawl 63\r\n"),
        LruCrawler::Crawl(Listed)
    );
    assert_eq!(crawler(b"lru_crawler crawl 0\r\n"), LruCrawler::Crawl(Bad));
    assert_eq!(crawler(b"lru_crawler crawl 64\r\n"), LruCrawler::Crawl(Bad));
    assert_eq!(
        crawler(b"lru_crawler crawl 1,x\r\n"),
        LruCrawler::Crawl(Bad)
    );
    assert_eq!(
        crawler(b"lru_crawler crawl ,\r\n"),
        LruCrawler::Crawl(Empty)
    );
    assert_eq!(
        crawler(b"lru_crawler crawl hash\r\n"),
        LruCrawler::Crawl(Hash)
    );
    assert_eq!(
        crawler(b"lru_crawler metadump all\r\n"),
        LruCrawler::Metadump(All)
    );
    assert_eq!(crawler(b"lru_crawler sleep 10\r\n"), LruCrawler::Tune);
    assert_eq!(crawler(b"lru_crawler sleep 1000000\r\n"), LruCrawler::Tune);
    assert_eq!(crawler(b"lru_crawler tocrawl 10\r\n"), LruCrawler::Tune);
    assert_eq!(crawler(b"lru_crawler enable\r\n"), LruCrawler::Enable);
    assert_eq!(crawler(b"lru_crawler disable\r\n"), LruCrawler::Disable);
    assert_reply(b"lru_crawler sleep x\r\n", BAD_FORMAT);
    assert_reply(
        b"lru_crawler sleep 2000000\r\n",
        b"CLIENT_ERROR sleep must be one second or less\r\n",
    );
    assert_reply(b"lru_crawler tocrawl x\r\n", BAD_FORMAT);
    assert_reply(b"lru_crawler tocrawl -1\r\n", BAD_FORMAT);
    assert_reply(b"lru_crawler tocrawl\r\n", ERROR);
    assert_reply(b"lru_crawler crawl\r\n", ERROR);
    assert_reply(b"lru_crawler crawl all x\r\n", ERROR);
    // No noreply for lru_crawler: it is one token too many.
    assert_reply(b"lru_crawler sleep 10 noreply\r\n", ERROR);
    assert_reply(b"lru_crawler enable x\r\n", ERROR);
}

#[test]
fn watch_misbehave_debugtime_shutdown() {
    let watch = |streams_known| AdminCommand::Watch { streams_known };
    assert_eq!(admin(b"watch\r\n"), (watch(true), false));
    assert_eq!(admin(b"watch fetchers\r\n"), (watch(true), false));
    assert_eq!(admin(b"watch rawcmds mutations\r\n"), (watch(true), false));
    // memcached: ERROR (after its pipelining check).
    assert_eq!(admin(b"watch foo\r\n"), (watch(false), false));
    assert_eq!(admin(b"watch foo fetchers\r\n"), (watch(false), false));
    // `noreply` is not a stream name, and it silences the ERROR.
    assert_eq!(admin(b"watch fetchers noreply\r\n"), (watch(false), true));
    // Debug-build commands: unknown to a release memcached, so an HTTP-looking
    // `misbehave` line closes the connection.
    assert_reply(b"misbehave\r\n", ERROR);
    assert_reply(b"debugtime 10\r\n", ERROR);
    assert_eq!(
        parse(b"misbehave HTTP/1.1\r\n"),
        Parsed::Invalid(ProtocolError::Close { reply: b"" })
    );
    assert_reply(b"shutdown foo\r\n", b"ERROR: shutdown not enabled\r\n");
}
