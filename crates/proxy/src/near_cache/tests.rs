use std::sync::atomic::{AtomicU32, AtomicU64};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use bytes::Bytes;

use super::store::{
    answered, fill, lookup, write_through, Cached, Hit, Limits, Lookup, Ticket, ENTRY_OVERHEAD,
};
use super::{NearCache, Tracking, BUCKETS, SEEN_SLOTS};
use crate::metrics::Metrics;

fn near() -> NearCache {
    NearCache {
        epochs: (0..BUCKETS).map(|_| AtomicU32::new(0)).collect(),
        seen: (0..SEEN_SLOTS).map(|_| AtomicU64::new(0)).collect(),
        metrics: Arc::new(Metrics::new()),
        threads: 1,
    }
}

fn limits(admit_reads: u32) -> Limits {
    Limits {
        max_bytes: 1 << 20,
        max_ttl: Duration::from_secs(60),
        admit_reads,
        admit_window: Duration::from_secs(60),
        coalesce: true,
    }
}

fn live() -> Arc<Tracking> {
    let t = Arc::new(Tracking::default());
    t.tracking_again();
    t
}

fn hit(data: &'static [u8]) -> Hit {
    Hit {
        flags: 7,
        cas: 42,
        data: Bytes::from_static(data),
    }
}

fn ticket(n: &NearCache, t: &Arc<Tracking>, key: &[u8], l: &Limits) -> Ticket {
    match lookup(n, t, key, l, Instant::now()) {
        Lookup::Miss(Some(ticket)) => ticket,
        Lookup::Miss(None) => panic!("not admitted"),
        Lookup::Hit(_) => panic!("unexpected hit"),
    }
}

fn served(n: &NearCache, t: &Arc<Tracking>, key: &[u8], l: &Limits) -> Option<Cached> {
    match lookup(n, t, key, l, Instant::now()) {
        Lookup::Hit(h) => Some(h),
        Lookup::Miss(_) => None,
    }
}

#[test]
fn second_read_is_admitted_then_served_with_flags_and_cas() {
    let (n, t, l) = (near(), live(), limits(2));
    assert!(matches!(
        lookup(&n, &t, b"adm", &l, Instant::now()),
        Lookup::Miss(None)
    ));
    let tk = ticket(&n, &t, b"adm", &l);
    fill(&n, tk, b"adm", &hit(b"v"), -1, &l);
    let h = served(&n, &t, b"adm", &l).expect("served");
    assert_eq!((h.flags(), h.cas(), h.data()), (7, 42, &b"v"[..]));
    assert_eq!(h.into_data(), Bytes::from_static(b"v"));
}

#[test]
fn invalidation_drops_an_entry_and_a_fill_in_flight() {
    let (n, t, l) = (near(), live(), limits(1));
    let tk = ticket(&n, &t, b"k", &l);
    fill(&n, tk, b"k", &hit(b"v"), -1, &l);
    n.invalidate(b"k");
    assert!(served(&n, &t, b"k", &l).is_none());
    // Invalidated while the read was in flight: the fill is refused.
    let tk = ticket(&n, &t, b"k", &l);
    n.invalidate(b"k");
    fill(&n, tk, b"k", &hit(b"old"), -1, &l);
    assert!(served(&n, &t, b"k", &l).is_none());
}

#[test]
fn a_lost_or_dropped_shard_serves_nothing_it_had() {
    let (n, t, l) = (near(), live(), limits(1));
    let tk = ticket(&n, &t, b"a", &l);
    fill(&n, tk, b"a", &hit(b"v"), -1, &l);
    t.lost();
    assert!(matches!(
        lookup(&n, &t, b"a", &l, Instant::now()),
        Lookup::Miss(None)
    ));
    t.tracking_again();
    assert!(served(&n, &t, b"a", &l).is_none());
    // A fill whose read was sent before a drop is refused.
    let tk = ticket(&n, &t, b"a", &l);
    t.drop_all();
    fill(&n, tk, b"a", &hit(b"v"), -1, &l);
    assert!(served(&n, &t, b"a", &l).is_none());
    // Another shard's tracking never serves this shard's entry.
    let tk = ticket(&n, &t, b"a", &l);
    fill(&n, tk, b"a", &hit(b"v"), -1, &l);
    assert!(served(&n, &live(), b"a", &l).is_none());
}

#[test]
fn never_served_past_the_items_ttl_and_missing_items_are_not_cached() {
    let (n, t, l) = (near(), live(), limits(1));
    let tk = ticket(&n, &t, b"ttl", &l);
    fill(&n, tk, b"ttl", &hit(b"v"), 1, &l);
    // Expired one millisecond after the read was sent.
    std::thread::sleep(Duration::from_millis(5));
    assert!(served(&n, &t, b"ttl", &l).is_none());
    for pttl in [0, -2] {
        let tk = ticket(&n, &t, b"gone", &l);
        fill(&n, tk, b"gone", &hit(b"v"), pttl, &l);
        assert!(served(&n, &t, b"gone", &l).is_none(), "pttl {pttl}");
    }
}

#[test]
fn bounded_by_max_bytes_oldest_fill_evicted_first() {
    let n = near();
    let t = live();
    let l = Limits {
        max_bytes: 3 * (ENTRY_OVERHEAD + 2 + 4),
        ..limits(1)
    };
    for key in [b"k1", b"k2", b"k3", b"k4"] {
        let tk = ticket(&n, &t, key, &l);
        fill(&n, tk, key, &hit(b"data"), -1, &l);
    }
    assert!(served(&n, &t, b"k1", &l).is_none(), "oldest evicted");
    for key in [b"k2", b"k3", b"k4"] {
        assert!(served(&n, &t, key, &l).is_some());
    }
    // An item larger than the whole bound is not cached at all.
    let big: &'static [u8] = &[b'x'; 4096];
    let tk = ticket(&n, &t, b"big", &l);
    fill(&n, tk, b"big", &hit(big), -1, &l);
    assert!(served(&n, &t, b"big", &l).is_none());
}

/// `answered` for a get/gets of `key` read from Redis on another thread.
fn read_elsewhere(n: &NearCache, key: &[u8], item: Option<Hit>, l: &Limits) {
    std::thread::scope(|s| {
        s.spawn(|| answered(n, None, key, item.as_ref(), None, l));
    });
}

#[test]
fn a_newer_item_read_on_another_thread_drops_this_threads_copy() {
    let (n, t, l) = (near(), live(), limits(1));
    let tk = ticket(&n, &t, b"mono", &l);
    fill(&n, tk, b"mono", &hit(b"v4"), -1, &l);
    // The same item read elsewhere: this thread's copy stays.
    read_elsewhere(&n, b"mono", Some(hit(b"v4")), &l);
    assert!(served(&n, &t, b"mono", &l).is_some());
    // A newer one: never served the older copy again.
    read_elsewhere(&n, b"mono", Some(hit(b"v5")), &l);
    assert!(served(&n, &t, b"mono", &l).is_none());
    // Nor after the item was found gone elsewhere.
    let tk = ticket(&n, &t, b"mono", &l);
    fill(&n, tk, b"mono", &hit(b"v5"), -1, &l);
    assert_eq!(&served(&n, &t, b"mono", &l).expect("v5").data(), b"v5");
    read_elsewhere(&n, b"mono", None, &l);
    assert!(served(&n, &t, b"mono", &l).is_none());
    // A read in flight while a newer item was read elsewhere fills nothing.
    let tk = ticket(&n, &t, b"mono", &l);
    read_elsewhere(&n, b"mono", Some(hit(b"v6")), &l);
    fill(&n, tk, b"mono", &hit(b"v5"), -1, &l);
    assert!(served(&n, &t, b"mono", &l).is_none());
    // Its own newer item: filled, at the epoch its own read moved to.
    let tk = ticket(&n, &t, b"mono", &l);
    fill(&n, tk, b"mono", &hit(b"v7"), -1, &l);
    assert_eq!(&served(&n, &t, b"mono", &l).expect("v7").data(), b"v7");
}

#[test]
fn a_stored_write_through_set_is_served_and_drops_older_copies() {
    let (n, t, l) = (near(), live(), limits(2));
    let tk = ticket_after_admission(&n, &t, b"wt", &l);
    fill(&n, tk, b"wt", &hit(b"old"), -1, &l);
    let through = write_through(&n, &t, Bytes::from_static(b"wt"), hit(b"new"), None)
        .expect("tracking is live");
    // In flight: readers of other sessions, concurrent with the set, still
    // get the older copy.
    assert_eq!(&served(&n, &t, b"wt", &l).expect("old").data(), b"old");
    through.stored(&n, &l);
    let h = served(&n, &t, b"wt", &l).expect("the stored item, no read needed");
    assert_eq!((h.flags(), h.cas(), h.data()), (7, 42, &b"new"[..]));
    // Reading that same item elsewhere does not drop it.
    read_elsewhere(&n, b"wt", Some(hit(b"new")), &l);
    assert!(served(&n, &t, b"wt", &l).is_some());
}

#[test]
fn a_write_through_set_fills_nothing_if_anything_moved_meanwhile() {
    let (n, t, l) = (near(), live(), limits(1));
    // A push for the key while the set was in flight.
    let through = write_through(&n, &t, Bytes::from_static(b"wt"), hit(b"mine"), None).unwrap();
    n.invalidate(b"wt");
    through.stored(&n, &l);
    assert!(served(&n, &t, b"wt", &l).is_none());
    // Another item read elsewhere meanwhile.
    let through = write_through(&n, &t, Bytes::from_static(b"wt"), hit(b"mine"), None).unwrap();
    read_elsewhere(&n, b"wt", Some(hit(b"theirs")), &l);
    through.stored(&n, &l);
    assert!(served(&n, &t, b"wt", &l).is_none());
    // The shard's tracking dropped meanwhile.
    let through = write_through(&n, &t, Bytes::from_static(b"wt"), hit(b"mine"), None).unwrap();
    t.drop_all();
    through.stored(&n, &l);
    assert!(served(&n, &t, b"wt", &l).is_none());
    // Not tracking: no write-through at all.
    t.lost();
    assert!(write_through(&n, &t, Bytes::from_static(b"wt"), hit(b"x"), None).is_none());
}

#[test]
fn a_failed_write_through_set_drops_the_key_everywhere() {
    let (n, t, l) = (near(), live(), limits(1));
    let tk = ticket(&n, &t, b"wf", &l);
    fill(&n, tk, b"wf", &hit(b"old"), -1, &l);
    let epoch = n.epoch(super::hash(b"wf"));
    let through = write_through(&n, &t, Bytes::from_static(b"wf"), hit(b"new"), None).unwrap();
    through.failed(&n);
    assert!(served(&n, &t, b"wf", &l).is_none());
    assert_eq!(n.epoch(super::hash(b"wf")), epoch.wrapping_add(1));
}

#[test]
fn a_write_through_entry_lives_no_longer_than_its_exptime() {
    let (n, t, l) = (near(), live(), limits(1));
    let ttl = Some(Duration::from_millis(1));
    let through = write_through(&n, &t, Bytes::from_static(b"we"), hit(b"v"), ttl).unwrap();
    through.stored(&n, &l);
    std::thread::sleep(Duration::from_millis(5));
    assert!(served(&n, &t, b"we", &l).is_none());
}

fn ticket_after_admission(n: &NearCache, t: &Arc<Tracking>, key: &[u8], l: &Limits) -> Ticket {
    assert!(matches!(
        lookup(n, t, key, l, Instant::now()),
        Lookup::Miss(None)
    ));
    ticket(n, t, key, l)
}

mod coalescing {
    use tokio::sync::mpsc;

    use super::super::coalesce::{self, indexed, join, lead, leave, REDISPATCH};
    use super::*;
    use crate::backend::{BackendReply, Reply, ReplyTo};

    fn to(tx: &mpsc::UnboundedSender<BackendReply>, seq: u64) -> ReplyTo {
        ReplyTo {
            tx: tx.clone().into(),
            seq,
            part: 0,
        }
    }

    #[test]
    fn waiters_get_the_leaders_answer_once_each_and_the_flight_closes() {
        let (n, t, l) = (near(), live(), limits(1));
        let (tx, mut rx) = mpsc::unbounded_channel();
        let tk = ticket(&n, &t, b"hot", &l);
        let lead = lead(&tk, Bytes::from_static(b"hot")).expect("leads");
        for seq in 1..=3 {
            assert!(join(&n, &t, b"hot", || to(&tx, seq)).is_some());
        }
        // Another key, another shard: never joined.
        assert!(join(&n, &t, b"cold", || to(&tx, 9)).is_none());
        assert!(join(&n, &live(), b"hot", || to(&tx, 9)).is_none());
        let answer = Ok(Reply::Memcached(Bytes::from_static(b"x")));
        for w in lead.land() {
            coalesce::answer(w, &answer);
        }
        let mut seqs: Vec<u64> = std::iter::from_fn(|| rx.try_recv().ok())
            .map(|r| {
                assert_eq!((r.part, &r.result), (0, &answer));
                r.seq
            })
            .collect();
        seqs.sort_unstable();
        assert_eq!(seqs, [1, 2, 3]);
        assert_eq!(indexed(), 0);
        assert!(join(&n, &t, b"hot", || to(&tx, 4)).is_none(), "closed");
    }

    #[test]
    fn nothing_joins_a_read_sent_before_an_invalidation() {
        let (n, t, l) = (near(), live(), limits(1));
        let (tx, mut rx) = mpsc::unbounded_channel();
        let tk = ticket(&n, &t, b"k", &l);
        let old = lead(&tk, Bytes::from_static(b"k")).expect("leads");
        assert!(join(&n, &t, b"k", || to(&tx, 1)).is_some());
        n.invalidate(b"k");
        assert!(join(&n, &t, b"k", || to(&tx, 2)).is_none(), "epoch moved");
        // A newer read opens its own flight; the old one still owes seq 1.
        let tk = ticket(&n, &t, b"k", &l);
        let new = lead(&tk, Bytes::from_static(b"k")).expect("leads");
        assert!(join(&n, &t, b"k", || to(&tx, 3)).is_some());
        assert_eq!(indexed(), 1);
        t.drop_all();
        assert!(
            join(&n, &t, b"k", || to(&tx, 4)).is_none(),
            "generation moved"
        );
        assert_eq!(old.land().iter().map(|w| w.seq).collect::<Vec<_>>(), [1]);
        assert_eq!(new.land().iter().map(|w| w.seq).collect::<Vec<_>>(), [3]);
        assert_eq!(indexed(), 0);
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn a_lost_leader_sends_its_waiters_to_read_for_themselves() {
        let (n, t, l) = (near(), live(), limits(1));
        let (tx, mut rx) = mpsc::unbounded_channel();
        let tk = ticket(&n, &t, b"k", &l);
        let lead = lead(&tk, Bytes::from_static(b"k")).expect("leads");
        let gone = join(&n, &t, b"k", || to(&tx, 1)).expect("joins");
        let stays = join(&n, &t, b"k", || to(&tx, 2)).expect("joins");
        assert!(leave(&gone, &tx.clone().into(), 1), "taken out");
        assert!(!leave(&gone, &tx.clone().into(), 1), "only once");
        drop(lead);
        let r = rx.try_recv().expect("told");
        assert_eq!((r.seq, r.part), (2, REDISPATCH));
        assert!(rx.try_recv().is_err(), "seq 1 left: told nothing");
        assert!(!leave(&stays, &tx.clone().into(), 2), "flight gone");
        assert_eq!(indexed(), 0);
    }

    #[test]
    fn a_full_flight_is_not_joined_and_another_key_with_its_hash_never_is() {
        let (n, t, l) = (near(), live(), limits(1));
        let (tx, _rx) = mpsc::unbounded_channel();
        let tk = ticket(&n, &t, b"k", &l);
        let _lead = lead(&tk, Bytes::from_static(b"k")).expect("leads");
        for seq in 0..coalesce::MAX_WAITERS as u64 {
            assert!(join(&n, &t, b"k", || to(&tx, seq)).is_some());
        }
        assert!(join(&n, &t, b"k", || to(&tx, 0)).is_none(), "full");
        // Keys are compared, not just hashes: a different key's ticket
        // with the same hash does not take over the flight.
        assert!(lead(&tk, Bytes::from_static(b"other")).is_none());
    }

    #[test]
    fn a_leader_landing_on_another_thread_still_answers_and_the_index_is_swept() {
        let (n, t, l) = (near(), live(), limits(1));
        let (tx, mut rx) = mpsc::unbounded_channel();
        let tk = ticket(&n, &t, b"k", &l);
        let first = lead(&tk, Bytes::from_static(b"k")).expect("leads");
        assert!(join(&n, &t, b"k", || to(&tx, 1)).is_some());
        // The leader's task moved: it lands (or is dropped) elsewhere.
        std::thread::spawn(move || drop(first))
            .join()
            .expect("thread");
        assert_eq!(rx.try_recv().expect("told").part, REDISPATCH);
        assert_eq!(indexed(), 1, "left in this thread's index");
        assert!(join(&n, &t, b"k", || to(&tx, 2)).is_none(), "landed");
        assert_eq!(indexed(), 0, "dropped by the join");
        // Landed entries never pile up: swept as the index doubles.
        for i in 0..5_000u32 {
            let key = format!("s{i}");
            let tk = ticket(&n, &t, key.as_bytes(), &l);
            let moved = lead(&tk, Bytes::from(key)).expect("leads");
            let waiters = std::thread::spawn(move || moved.land())
                .join()
                .expect("thread");
            assert!(waiters.is_empty());
        }
        assert!(indexed() <= 2_100, "{} entries", indexed());
    }
}

#[test]
fn an_entry_counts_its_header_slot_and_queue_record() {
    // docs/config.md (`max_bytes`), docs/near-cache.md and docs/metrics.md
    // state this figure.
    assert_eq!(ENTRY_OVERHEAD, 130);
}

#[test]
fn a_large_item_is_served_whole() {
    let (n, t, l) = (near(), live(), limits(1));
    let data: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8).collect();
    let item = Hit {
        flags: 3,
        cas: 9,
        data: Bytes::from(data.clone()),
    };
    let l = Limits {
        max_bytes: 4 << 20,
        ..l
    };
    let tk = ticket(&n, &t, b"large", &l);
    fill(&n, tk, b"large", &item, -1, &l);
    let h = served(&n, &t, b"large", &l).expect("served");
    assert_eq!((h.flags(), h.cas()), (3, 9));
    assert!(h.data() == &data[..], "the data, byte for byte");
    assert_eq!(h.into_data(), Bytes::from(data));
}
