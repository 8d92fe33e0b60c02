//! `stats [group ...]`, as memcached 1.6.18's `process_stat` reads it: the
//! group is picked by the first token alone (`stats reset x y` resets), and
//! `detail` and `cachedump` check their arguments here.

use super::tokens::{parse_u32, Args};
use super::{reply, Line, Parsed};
use crate::memcache::{Request, StatsDetail, StatsGroup, MAX_SLAB_CLASS};

const DETAIL_USAGE: &[u8] = b"CLIENT_ERROR usage: stats detail on|off|dump\r\n";
const BAD_COMMAND_LINE: &[u8] = b"CLIENT_ERROR bad command line\r\n";
const ILLEGAL_SLAB_ID: &[u8] = b"CLIENT_ERROR Illegal slab id\r\n";

pub(super) fn parse_stats<'a>(line: Line<'a>, rest: &'a [u8]) -> Parsed<'a> {
    let args = Args::split(rest);
    if args.len() == 0 {
        return line.complete(Request::Stats(StatsGroup::General));
    }
    let group = match args.get(0) {
        b"reset" => StatsGroup::Reset,
        b"detail" => match args.get(1) {
            b"on" => StatsGroup::Detail(StatsDetail::On),
            b"off" => StatsGroup::Detail(StatsDetail::Off),
            b"dump" => StatsGroup::Detail(StatsDetail::Dump),
            _ => return line.reply(DETAIL_USAGE),
        },
        b"settings" => StatsGroup::Settings,
        b"cachedump" => {
            if args.len() < 3 {
                return line.reply(BAD_COMMAND_LINE);
            }
            let (Some(class), Some(limit)) = (parse_u32(args.get(1)), parse_u32(args.get(2)))
            else {
                return line.reply(reply::CLIENT_ERROR_BAD_FORMAT);
            };
            if class > MAX_SLAB_CLASS {
                return line.reply(ILLEGAL_SLAB_ID);
            }
            StatsGroup::CacheDump { class, limit }
        }
        b"conns" => StatsGroup::Conns,
        b"extstore" => StatsGroup::Extstore,
        b"items" => StatsGroup::Items,
        b"slabs" => StatsGroup::Slabs,
        b"sizes" => StatsGroup::Sizes,
        b"sizes_enable" => StatsGroup::SizesEnable,
        b"sizes_disable" => StatsGroup::SizesDisable,
        _ => return line.reply(reply::ERROR),
    };
    line.complete(Request::Stats(group))
}
