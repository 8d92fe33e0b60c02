//! Multi-key commands split by shard (by hash slot on a Redis Cluster),
//! one command per group on all groups at once, merged in the client's
//! order: MGET, MSET, DEL, UNLINK, EXISTS, TOUCH; MSETNX only when its
//! keys share one group (it is atomic).

use bytes::Bytes;
use memshift_protocol::resp::CommandWriter;

use super::super::pending::{NearAfter, Render};
use super::super::RespSession;
use super::Placed;
use crate::redis::encoding;

/// Keys of one shard (and slot), as indexes into the request's keys.
struct Group {
    shard: usize,
    slot: Option<u16>,
    keys: Vec<u32>,
}

impl RespSession {
    pub(super) fn multi(&mut self, upper: &[u8], raw: Option<Bytes>) {
        let n = self.args.len();
        // Inside MULTI, or WATCHing, reads skip the near cache (`transaction`).
        if upper == b"MGET"
            && n >= 2
            && crate::near_cache::get().is_some()
            && !self.txn.bypass_near_cache()
        {
            return self.mget_near();
        }
        let (step, render) = match upper {
            b"MGET" if n >= 2 => (
                1,
                Render::Mget {
                    slots: Vec::new(),
                    hits: Vec::new(),
                },
            ),
            b"MSET" if n >= 3 && n % 2 == 1 => (2, Render::AllOk),
            b"MSETNX" if n >= 3 && n % 2 == 1 => (2, Render::Relay(Default::default())),
            b"DEL" | b"UNLINK" | b"EXISTS" | b"TOUCH" if n >= 2 => (1, Render::Sum),
            _ => return self.arity_error(),
        };
        let mut written = Vec::new();
        let Some(groups) = self.group(step, &mut written) else {
            return;
        };
        let with_values = step == 2;
        if upper == b"MSETNX" && groups.len() > 1 {
            return self.refuse(
                "its keys live on different shards and MSETNX is all-or-nothing (use a hash tag to keep them together)",
            );
        }
        let render = match render {
            Render::Mget { .. } => {
                let mut slots = vec![(0u32, 0u32); n - 1];
                for (part, g) in groups.iter().enumerate() {
                    for (index, &k) in g.keys.iter().enumerate() {
                        slots[k as usize] = (part as u32, index as u32);
                    }
                }
                Render::Mget {
                    slots,
                    hits: Vec::new(),
                }
            }
            other => other,
        };
        let routes = self.proxy.router.load();
        let seq = self.push_waiting(render, groups.len());
        if let (false, Some(p)) = (written.is_empty(), self.pending.back_mut()) {
            // Invalidated again before the reply (read-your-writes).
            p.near = NearAfter::WrittenMany(written);
        }
        if groups.len() == 1 && !with_values {
            if let Some(raw) = raw {
                // Inside MULTI (`transaction`): queued for EXEC, not sent.
                let (shard, slot) = (groups[0].shard, groups[0].slot);
                let Some(raw) = self.captured(shard, || slot, raw) else {
                    return;
                };
                self.send_keyed(&routes, shard, raw, seq, 0);
                return;
            }
        }
        for (part, g) in groups.iter().enumerate() {
            self.cmd_buf.clear();
            let argc = 1 + g.keys.len() * step;
            let mut w = CommandWriter::new(&mut self.cmd_buf, argc);
            w.arg(&self.args[0]);
            for &k in &g.keys {
                let at = 1 + k as usize * step;
                w.arg(&self.args[at]);
                if with_values {
                    let header = encoding::header(0, self.cas.next_cas());
                    w.arg_parts(&[&header, &self.args[at + 1]]);
                }
            }
            drop(w);
            let cmd = self.cmd_buf.split().freeze();
            let Some(cmd) = self.captured(g.shard, || g.slot, cmd) else {
                continue;
            };
            self.send_keyed(&routes, g.shard, cmd, seq, part as u32);
        }
    }

    /// The request's keys (every `step`-th argument from 1) by shard, in
    /// the order their groups first appear; `None` when a key cannot be
    /// served (the error is queued). Near cache: the keys a write changes
    /// are invalidated and their hashes added to `written`.
    fn group(&mut self, step: usize, written: &mut Vec<u64>) -> Option<Vec<Group>> {
        let routes = self.proxy.router.load();
        let redis = routes.redis();
        let mut groups: Vec<Group> = Vec::new();
        for (i, key) in self.args[1..].iter().step_by(step).enumerate() {
            let shard = match Self::place(&routes, key) {
                Placed::Shard(s) => s,
                Placed::Refused(text) => {
                    self.push_error(text);
                    return None;
                }
            };
            written.extend(self.invalidate_near(key));
            let slot = redis.cluster_slot(key);
            match groups
                .iter_mut()
                .find(|g| g.shard == shard && g.slot == slot)
            {
                Some(g) => g.keys.push(i as u32),
                None => groups.push(Group {
                    shard,
                    slot,
                    keys: vec![i as u32],
                }),
            }
        }
        Some(groups)
    }
}
