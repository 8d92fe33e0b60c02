//! Redis misses looked up in memcached during a migration (canary,
//! cutover): a value found there answers the key and is copied into Redis.

use memshift_protocol::memcache::client::{self, Response};
use memshift_protocol::memcache::StorageCommand;

use super::super::super::pending::{Op, Results, Retrieval};
use super::super::super::Session;
use super::render::{redis_item, Found};
use crate::read_errors::ReadFailure;
use crate::redis::translate::{self, Expiry};
use crate::redis::Reply;
use crate::router::{Access, Backend, ReplyShape};

impl Session {
    /// A retrieval's Redis replies are in: look up its Redis misses in
    /// memcached (backfill). True if lookups were sent (still waiting).
    pub(in crate::session) fn start_backfill(&mut self, index: usize) -> bool {
        let routes = self.proxy.router.load();
        let migration = routes.migration();
        if routes.legacy().is_none() {
            return false;
        }
        let seq = self.pending.seq_of(index);
        let reply_to = self.reply_to(seq, 0);
        let Some(pending) = self.pending.get_mut(index) else {
            return false;
        };
        let Op::Retrieval(retrieval) = &mut pending.op else {
            return false;
        };
        let Some(backfill) = retrieval.backfill.as_mut() else {
            return false;
        };
        if backfill.started {
            return false;
        }
        backfill.started = true;
        let mut lookups = Vec::new();
        for (i, key) in retrieval.keys.iter().enumerate() {
            let Some(slot) = retrieval.plan.slot(i) else {
                continue;
            };
            if slot.side != Backend::Redis || !migration.backfills(migration.sides(key)) {
                continue;
            }
            let result = pending.results.get(slot.part);
            let hit = match result {
                // A failed Redis read is not a miss: no value from memcached
                // for it (nor a copy into the failed shard).
                _ if ReadFailure::of(result).is_some() => true,
                Some(Ok(Reply::Redis(frame))) => redis_item(frame, slot.index).is_some(),
                _ => true,
            };
            if let (false, Some(target)) =
                (hit, routes.target_on(Backend::Memcached, key, Access::Read))
            {
                let part = pending.results.push();
                let _ = client::meta_get(&mut self.cmd_buf, key);
                let cmd = self.cmd_buf.split().freeze();
                lookups.push((i as u32, part, target, cmd));
            }
        }
        if lookups.is_empty() {
            return false;
        }
        pending.waiting += lookups.len() as u32;
        let lane = self.lane;
        for (key_index, part, target, cmd) in lookups {
            backfill.lookups.push((key_index, part));
            let reply = crate::redis::ReplyTo {
                part,
                ..reply_to.clone()
            };
            routes.send(target, lane, cmd, ReplyShape::Meta, reply);
        }
        true
    }

    /// A Redis miss that the backfill found in memcached: answer with it and
    /// copy it into Redis (same flags, remaining TTL; only if Redis still has
    /// no value, so a newer write is never overwritten).
    pub(super) fn backfilled(
        &mut self,
        r: &Retrieval,
        key_index: usize,
        key: &[u8],
        results: &Results,
    ) -> Option<Found> {
        let backfill = r.backfill.as_ref()?;
        let &(_, part) = backfill
            .lookups
            .iter()
            .find(|(k, _)| *k as usize == key_index)?;
        let Some(Ok(Reply::Memcached(raw))) = results.get(part) else {
            return None;
        };
        let Ok(Some((Response::MetaValue { flags, data }, _))) = client::parse_reply(raw) else {
            return None;
        };
        let item_flags = flags.client_flags().unwrap_or(0);
        let ttl = flags.ttl();
        let data = raw.slice_ref(data);
        let expiry = match ttl {
            None | Some(-1) => Expiry::Never,
            Some(t) if t <= 0 => Expiry::Past,
            Some(t) => Expiry::In(t),
        };
        let cas = self.cas.next_cas();
        let routes = self.proxy.router.load();
        translate::store(
            &mut self.cmd_buf,
            StorageCommand::Add,
            key,
            item_flags,
            cas,
            &data,
            expiry,
        );
        let target = routes.target_on(Backend::Redis, key, Access::Write)?;
        // The copy's reply is not awaited: a sequence number no request has.
        self.near_unordered = true;
        self.send(&routes, target, ReplyShape::Line, u64::MAX, 0);
        Some(Found {
            flags: item_flags,
            cas,
            data,
        })
    }
}
