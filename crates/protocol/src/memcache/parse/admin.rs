//! flush_all, verbosity, cache_memlimit, slabs, lru, lru_crawler and watch
//! (stats is in `stats.rs`; version and quit take no parsing). Token counts
//! follow memcached's `ntokens`, which is `args.len() + 2` (the command and
//! a terminal token).

use super::tokens::{parse_f64, parse_i32, parse_u32, Args};
use super::{reply, Line, Parsed};
use crate::memcache::{AdminCommand, CrawlClasses, LruCrawler, Request, MAX_SLAB_CLASS};

/// flush_all `[delay] [noreply]`. A negative delay means "now", like 0.
pub(super) fn parse_flush_all<'a>(line: Line<'a>, rest: &'a [u8]) -> Parsed<'a> {
    let args = Args::split(rest);
    if args.len() > 2 {
        return line.reply(reply::ERROR);
    }
    let noreply = args.noreply();
    // memcached reads a delay whenever the line is not just `[noreply]`, and
    // ignores a second token that is not `noreply` (`flush_all 0 junk` is OK).
    let delay_given = args.len() != usize::from(noreply);
    let delay = if delay_given {
        match parse_i32(args.get(0)) {
            Some(delay) => i64::from(delay),
            None => return line.reply_unless(noreply, reply::CLIENT_ERROR_INVALID_EXPTIME),
        }
    } else {
        0
    };
    line.complete(Request::FlushAll { delay, noreply })
}

/// verbosity `<level> [noreply]`. The level must parse but is not kept.
pub(super) fn parse_verbosity<'a>(line: Line<'a>, rest: &'a [u8]) -> Parsed<'a> {
    let args = Args::split(rest);
    if args.len() != 1 && args.len() != 2 {
        return line.reply(reply::ERROR);
    }
    let noreply = args.noreply();
    if parse_u32(args.get(0)).is_none() {
        return line.reply_unless(noreply, reply::CLIENT_ERROR_BAD_FORMAT);
    }
    line.complete(Request::Verbosity { noreply })
}

/// `cache_memlimit <megabytes> [noreply]`.
pub(super) fn parse_cache_memlimit<'a>(line: Line<'a>, rest: &'a [u8]) -> Parsed<'a> {
    let args = Args::split(rest);
    if args.len() != 1 && args.len() != 2 {
        return line.reply(reply::ERROR);
    }
    let noreply = args.noreply();
    let Some(megabytes) = parse_u32(args.get(0)) else {
        return line.reply_unless(noreply, reply::ERROR);
    };
    if megabytes < 8 {
        return line.reply_unless(noreply, MEMLIMIT_TOO_SMALL);
    }
    if megabytes > 1_000_000_000 {
        return line.reply_unless(noreply, MEMLIMIT_NOT_BYTES);
    }
    line.complete(Request::Admin {
        command: AdminCommand::CacheMemlimit { megabytes },
        noreply,
    })
}

const MEMLIMIT_TOO_SMALL: &[u8] = b"MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m\r\n";
const MEMLIMIT_NOT_BYTES: &[u8] = b"MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes\r\n";

/// `slabs reassign <src> <dst>` (no noreply) and
/// `slabs automove <0|1|2> [noreply]` / `slabs automove ratio <r> [noreply]`.
pub(super) fn parse_slabs<'a>(line: Line<'a>, rest: &'a [u8]) -> Parsed<'a> {
    let args = Args::split(rest);
    match args.get(0) {
        b"reassign" if args.len() == 3 => match (parse_i32(args.get(1)), parse_i32(args.get(2))) {
            (Some(src), Some(dst)) => line.complete(Request::Admin {
                command: AdminCommand::SlabsReassign { src, dst },
                noreply: false,
            }),
            _ => line.reply(reply::CLIENT_ERROR_BAD_FORMAT),
        },
        b"automove" if args.len() >= 2 => {
            let noreply = args.noreply();
            let valid = if args.get(1) == b"ratio" {
                if args.len() < 3 || parse_f64(args.get(2)).is_none() {
                    return line.reply_unless(noreply, reply::ERROR);
                }
                true
            } else {
                match parse_u32(args.get(1)) {
                    None => return line.reply_unless(noreply, reply::CLIENT_ERROR_BAD_FORMAT),
                    Some(level) => level <= 2,
                }
            };
            if !valid {
                return line.reply_unless(noreply, reply::ERROR);
            }
            line.complete(Request::Admin {
                command: AdminCommand::SlabsAutomove,
                noreply,
            })
        }
        _ => line.reply(reply::ERROR),
    }
}

/// `lru tune <hot%> <warm%> <hot factor> <warm factor>`, `lru mode
/// flat|segmented`, `lru temp_ttl <ttl>`, each with `[noreply]`. memcached
/// accepts `mode` and `temp_ttl` only with its LRU maintainer thread, which
/// is on by default.
pub(super) fn parse_lru<'a>(line: Line<'a>, rest: &'a [u8]) -> Parsed<'a> {
    let args = Args::split(rest);
    if args.len() == 0 {
        return line.reply(reply::ERROR);
    }
    let noreply = args.noreply();
    let error = match args.get(0) {
        b"tune" if args.len() >= 5 => lru_tune_error(&args),
        b"mode" if args.len() >= 2 => match args.get(1) {
            b"flat" | b"segmented" => None,
            _ => Some(reply::ERROR),
        },
        b"temp_ttl" if args.len() >= 2 => parse_i32(args.get(1)).is_none().then_some(reply::ERROR),
        _ => Some(reply::ERROR),
    };
    match error {
        Some(error) => line.reply_unless(noreply, error),
        None => line.complete(Request::Admin {
            command: AdminCommand::Lru,
            noreply,
        }),
    }
}

fn lru_tune_error(args: &Args<'_>) -> Option<&'static [u8]> {
    let (Some(hot), Some(warm), Some(hot_factor), Some(factor)) = (
        parse_u32(args.get(1)),
        parse_u32(args.get(2)),
        parse_f64(args.get(3)),
        parse_f64(args.get(4)),
    ) else {
        return Some(reply::ERROR);
    };
    // C adds the two unsigned percentages with wraparound.
    if hot.wrapping_add(warm) > 80 {
        return Some(b"ERROR hot and warm pcts must not exceed 80\r\n");
    }
    if factor <= 0.0 || hot_factor <= 0.0 {
        return Some(b"ERROR hot/warm age factors must be greater than 0\r\n");
    }
    None
}

/// `lru_crawler crawl|metadump <classes>`, `tocrawl <n>`, `sleep <µs>`,
/// `enable`, `disable`. memcached reads no noreply here.
pub(super) fn parse_lru_crawler<'a>(line: Line<'a>, rest: &'a [u8]) -> Parsed<'a> {
    let args = Args::split(rest);
    let command = match (args.len(), args.get(0)) {
        (2, b"crawl") => LruCrawler::Crawl(crawl_classes(args.get(1))),
        (2, b"metadump") => LruCrawler::Metadump(crawl_classes(args.get(1))),
        (2, b"tocrawl") => match parse_u32(args.get(1)) {
            Some(_) => LruCrawler::Tune,
            None => return line.reply(reply::CLIENT_ERROR_BAD_FORMAT),
        },
        (2, b"sleep") => match parse_u32(args.get(1)) {
            Some(micros) if micros > 1_000_000 => {
                return line.reply(b"CLIENT_ERROR sleep must be one second or less\r\n")
            }
            Some(_) => LruCrawler::Tune,
            None => return line.reply(reply::CLIENT_ERROR_BAD_FORMAT),
        },
        (1, b"enable") => LruCrawler::Enable,
        (1, b"disable") => LruCrawler::Disable,
        _ => return line.reply(reply::ERROR),
    };
    line.complete(Request::Admin {
        command: AdminCommand::LruCrawler(command),
        noreply: false,
    })
}

/// memcached's class list: `all`, `hash`, or ids in 1..=63 separated by
/// commas (empty items skipped, like `strtok`).
fn crawl_classes(token: &[u8]) -> CrawlClasses {
    match token {
        b"all" => CrawlClasses::All,
        b"hash" => CrawlClasses::Hash,
        _ => {
            let mut ids = token.split(|&b| b == b',').filter(|id| !id.is_empty());
            let mut any = false;
            let bad = ids.any(|id| {
                any = true;
                !matches!(parse_u32(id), Some(class) if (1..=MAX_SLAB_CLASS).contains(&class))
            });
            match (bad, any) {
                (true, _) => CrawlClasses::Bad,
                (false, true) => CrawlClasses::Listed,
                (false, false) => CrawlClasses::Empty,
            }
        }
    }
}

/// `watch [rawcmds|evictions|fetchers|mutations|sysevents|connevents|
/// proxyreqs|proxyevents|proxyuser ...] [noreply]`. Every argument must name
/// a log stream; `noreply` does not, so `watch ... noreply` is a silent
/// ERROR, as in memcached.
pub(super) fn parse_watch<'a>(line: Line<'a>, rest: &'a [u8]) -> Parsed<'a> {
    let args = Args::split(rest);
    let streams_known = (0..args.len()).all(|i| {
        matches!(
            args.get(i),
            b"rawcmds"
                | b"evictions"
                | b"fetchers"
                | b"mutations"
                | b"sysevents"
                | b"connevents"
                | b"proxyreqs"
                | b"proxyevents"
                | b"proxyuser"
        )
    });
    line.complete(Request::Admin {
        command: AdminCommand::Watch { streams_known },
        noreply: args.noreply(),
    })
}
