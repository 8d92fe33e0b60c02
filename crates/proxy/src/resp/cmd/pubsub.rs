//! Pub/sub: SUBSCRIBE, PSUBSCRIBE, SSUBSCRIBE and their UNSUBSCRIBEs run
//! on the client's own subscriber connections (`redis::subscriber`,
//! state in `resp::subscriptions`); PUBLISH, SPUBLISH and PUBSUB go to the
//! node carrying the channel like any request.
//!
//! Where the channel space is: on the ring, one shard (`redis.pubsub_shard`,
//! default the first) carries every channel, pattern and shard channel;
//! in a cluster, channels and patterns go to the first master (Redis
//! Cluster propagates PUBLISH to every node), shard channels to their
//! slot's master. docs/resp.md says the same.

use bytes::Bytes;
use memshift_protocol::resp::reply::{self as out, Shape};
use memshift_protocol::resp::Frame;

use super::super::pending::Render;
use super::super::subscriptions::{Kind, Link, LinkRef};
use super::super::RespSession;
use crate::redis::subscriber::{Subscriber, SubscriberCommand};

/// Commands a RESP2 client in the subscribed state may send.
pub(super) fn allowed_subscribed(upper: &[u8]) -> bool {
    matches!(
        upper,
        b"SUBSCRIBE"
            | b"PSUBSCRIBE"
            | b"SSUBSCRIBE"
            | b"UNSUBSCRIBE"
            | b"PUNSUBSCRIBE"
            | b"SUNSUBSCRIBE"
            | b"PING"
            | b"QUIT"
            | b"RESET"
    )
}

impl RespSession {
    pub(super) fn pubsub(&mut self, upper: &[u8], raw: Option<Bytes>) {
        match upper {
            b"SUBSCRIBE" | b"PSUBSCRIBE" | b"SSUBSCRIBE" => self.subscribe(Kind::of(upper), raw),
            b"UNSUBSCRIBE" | b"PUNSUBSCRIBE" | b"SUNSUBSCRIBE" => {
                self.unsubscribe(Kind::of(upper), raw)
            }
            b"PUBLISH" | b"SPUBLISH" if self.args.len() != 3 => self.arity_error(),
            b"PUBLISH" | b"SPUBLISH" | b"PUBSUB" => self.publish(upper, raw),
            _ => self.arity_error(),
        }
    }

    /// RESP2's error for a command a subscribed client may not send.
    pub(super) fn refuse_subscribed(&mut self) {
        let mut text = Vec::with_capacity(128);
        text.extend_from_slice(b"ERR Can't execute '");
        let name = text.len();
        super::push_printable(&mut text, &self.args[0], 64);
        text[name..].make_ascii_lowercase();
        text.extend_from_slice(b"': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context");
        self.push_error(&text);
    }

    /// PING of a RESP2 subscriber: `*2 pong <arg or "">`, as Redis.
    pub(super) fn subscribed_ping(&mut self) {
        if self.args.len() > 2 {
            return self.arity_error();
        }
        let arg = self.args.get(1).cloned().unwrap_or_default();
        self.push_bytes(|b| {
            out::array(b, 2);
            out::bulk(b, b"pong");
            out::bulk(b, &arg);
        });
    }

    /// RESET: subscriptions go with the rest of the session's state.
    pub(super) fn reset_subscriptions(&mut self) {
        // Its connections end once what was sent to them is answered.
        self.subs = None;
        self.pushes.expecting = false;
    }

    /// The node carrying `kind`'s channel space (for shard channels, the
    /// slot of `channel`'s); `Err`: the error to answer.
    fn channel_node(&self, kind: Kind, channel: &[u8]) -> Result<usize, &'static [u8]> {
        let routes = self.proxy.router.load();
        let redis = routes.redis();
        if redis.cluster_slot(channel).is_none() {
            return Ok(self.proxy.settings.load().pubsub_shard);
        }
        if kind == Kind::Shard {
            return Ok(redis.locate(channel));
        }
        redis
            .flush_targets()
            .first()
            .copied()
            .ok_or(b"CLUSTERDOWN memshift: no cluster master known")
    }

    fn subscribe(&mut self, kind: Kind, raw: Option<Bytes>) {
        if self.args.len() < 2 {
            return self.arity_error();
        }
        if kind == Kind::Shard && !self.one_slot() {
            return self.push_error(b"CROSSSLOT Keys in request don't hash to the same slot");
        }
        let node = match self.channel_node(kind, &self.args[1]) {
            Ok(node) => node,
            Err(text) => return self.push_error(text),
        };
        let Some(link) = self.link_for(kind, node) else {
            return; // answered with why
        };
        let frames = self.args.len() - 1;
        let subs = self.subs.get_or_insert_with(Box::default);
        for channel in &self.args[1..] {
            subs.add(kind, channel, node);
        }
        self.pushes.expecting = true;
        let cmd = raw.unwrap_or_else(|| self.encode_args());
        let seq = self.push_waiting(Render::Frames, 1);
        let reply = self.reply_to(seq, 0);
        let conn = self.subs.as_deref().and_then(|s| s.conn(link));
        if let Some(conn) = conn {
            conn.send(SubscriberCommand { cmd, frames, reply });
        }
    }

    /// The subscriber connection for `kind` on `node`, opened if need be;
    /// `None` when it cannot be (answered with why).
    fn link_for(&mut self, kind: Kind, node: usize) -> Option<LinkRef> {
        let existing = self.subs.as_deref().and_then(|s| s.link_to(kind, node));
        if existing.is_some() {
            return existing;
        }
        let settings = {
            let routes = self.proxy.router.load();
            routes
                .redis()
                .shards
                .get(node)
                .map(|s| s.settings().clone())
        };
        let Some(settings) = settings else {
            self.push_error(
                b"CLUSTERDOWN memshift: the channel's node is not known yet; try again",
            );
            return None;
        };
        let max = self.proxy.settings.load().max_subscriber_connections;
        let pushes = self.pushes.sender();
        let opened = Subscriber::open(settings, pushes, self.proxy.metrics.clone(), max);
        let Some(conn) = opened else {
            let text = format!("ERR memshift: too many subscriber connections (redis.max_subscriber_connections = {max} are open); try again later");
            self.push_error(text.as_bytes());
            return None;
        };
        let subs = self.subs.get_or_insert_with(Box::default);
        Some(subs.add_link(kind, Link { node, conn }))
    }

    fn unsubscribe(&mut self, kind: Kind, raw: Option<Bytes>) {
        if kind == Kind::Shard && !self.one_slot() {
            return self.push_error(b"CROSSSLOT Keys in request don't hash to the same slot");
        }
        let node = match (kind, self.args.get(1)) {
            (Kind::Shard, Some(first)) => self.channel_node(kind, first).ok(),
            _ => None,
        };
        let Some(subs) = self.subs.as_deref_mut() else {
            return self.unsubscribed_from_nothing(kind);
        };
        // (link, frames) per connection the command goes to.
        let mut targets: Vec<(LinkRef, usize)> = Vec::new();
        let named = self.args.len() - 1;
        match kind {
            Kind::Shard => {
                for (i, link) in subs.shard_links.iter().enumerate() {
                    if node.is_none_or(|n| n == link.node) {
                        targets.push((LinkRef::Shard(i), named));
                    }
                }
            }
            _ if subs.main.is_some() => targets.push((LinkRef::Main, named)),
            _ => {}
        }
        if targets.is_empty() {
            return self.unsubscribed_from_nothing(kind);
        }
        for (link, frames) in targets.iter_mut() {
            let node = match link {
                LinkRef::Main => 0,
                LinkRef::Shard(i) => subs.shard_links.get(*i).map_or(0, |l| l.node),
            };
            if named == 0 {
                *frames = subs.remove_all(kind, node);
            }
        }
        for channel in &self.args[1..] {
            subs.remove(kind, channel);
        }
        let cmd = raw.unwrap_or_else(|| self.encode_args());
        let seq = self.push_waiting(Render::Frames, targets.len());
        for (part, (link, frames)) in targets.into_iter().enumerate() {
            let reply = self.reply_to(seq, part as u32);
            let conn = self.subs.as_deref().and_then(|s| s.conn(link));
            if let Some(conn) = conn {
                let cmd = cmd.clone();
                conn.send(SubscriberCommand { cmd, frames, reply });
            }
        }
        if let Some(subs) = self.subs.as_deref_mut() {
            subs.drop_unused(&mut self.pushes);
            if !subs.active() {
                self.subs = None;
            }
        }
    }

    /// UNSUBSCRIBE with no subscriber connection: Redis' answer, one
    /// confirmation per channel named (or one with a nil channel), count 0.
    fn unsubscribed_from_nothing(&mut self, kind: Kind) {
        let word = Frame::Bulk(Bytes::from_static(kind.unsubscribe_word()));
        let mut channels: Vec<Frame> = self.args[1..].iter().cloned().map(Frame::Bulk).collect();
        if channels.is_empty() {
            channels.push(Frame::Null);
        }
        let version = self.version;
        self.push_bytes(|b| {
            for channel in channels {
                // A push: an array in RESP2.
                let frame = Frame::Push(vec![word.clone(), channel, Frame::Integer(0)]);
                out::frame(b, &frame, version, Shape::Plain);
            }
        });
    }

    /// Whether the channels named hash to one slot (always, on the ring).
    fn one_slot(&self) -> bool {
        let routes = self.proxy.router.load();
        let redis = routes.redis();
        let mut slots = self.args[1..].iter().map(|c| redis.cluster_slot(c));
        let first = slots.next().flatten();
        slots.all(|s| s == first)
    }

    /// PUBLISH / SPUBLISH / PUBSUB: to the node carrying the channel space
    /// (SPUBLISH and PUBSUB SHARDNUMSUB: the channel's slot's).
    fn publish(&mut self, upper: &[u8], raw: Option<Bytes>) {
        let sub = self.args.get(1).map(|a| a.to_ascii_uppercase());
        let (kind, channel) = match (upper, sub.as_deref()) {
            (b"SPUBLISH", _) => (Kind::Shard, self.args.get(1)),
            (_, Some(b"SHARDNUMSUB")) => (Kind::Shard, self.args.get(2)),
            _ => (Kind::Channel, None),
        };
        let channel = channel.cloned().unwrap_or_default();
        let node = match self.channel_node(kind, &channel) {
            Ok(node) => node,
            Err(text) => return self.push_error(text),
        };
        let cmd = raw.unwrap_or_else(|| self.encode_args());
        if self.subs.as_deref().and_then(|s| s.conn_to(node)).is_some() {
            // On the session's own subscriber connection to that node, as
            // Redis orders it: a message this PUBLISH delivers to the
            // session comes before its reply.
            let seq = self.push_waiting(Render::Frames, 1);
            let reply = self.reply_to(seq, 0);
            if let Some(conn) = self.subs.as_deref().and_then(|s| s.conn_to(node)) {
                conn.send(SubscriberCommand {
                    cmd,
                    frames: 1,
                    reply,
                });
            }
            return;
        }
        let seq = self.push_waiting(Render::Relay(Shape::Plain), 1);
        let reply = self.reply_to(seq, 0);
        let routes = self.proxy.router.load();
        routes.redis().send(node, self.lane, cmd, reply);
    }
}
