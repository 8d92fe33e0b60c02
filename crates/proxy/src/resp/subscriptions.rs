//! A RESP session's pub/sub state: what it is subscribed to, and its
//! subscriber connections (`redis::subscriber`): one to the node carrying
//! the channel space (channels and patterns), and one per node its shard
//! channels live on (SSUBSCRIBE, by slot in a cluster).
//!
//! The sets mirror the subscriber connections' own, updated as each
//! command is sent (in the order the connection runs them), so the session
//! knows how many frames Redis answers each UNSUBSCRIBE with and whether
//! the client is in the subscribed state (RESP2 then allows only the
//! pub/sub commands, PING, QUIT and RESET).

use std::collections::HashSet;

use bytes::Bytes;

use crate::conn::Pushes;
use crate::redis::subscriber::Subscriber;

/// Which subscription commands a command is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Channel,
    Pattern,
    Shard,
}

impl Kind {
    /// The kind of (UN)SUBSCRIBE `upper` is (`P`: patterns, `S`: shard).
    pub fn of(upper: &[u8]) -> Kind {
        match upper {
            b"PSUBSCRIBE" | b"PUNSUBSCRIBE" => Kind::Pattern,
            b"SSUBSCRIBE" | b"SUNSUBSCRIBE" => Kind::Shard,
            _ => Kind::Channel,
        }
    }

    /// The word Redis' (un)subscribe confirmations carry.
    pub fn unsubscribe_word(self) -> &'static [u8] {
        match self {
            Kind::Channel => b"unsubscribe",
            Kind::Pattern => b"punsubscribe",
            Kind::Shard => b"sunsubscribe",
        }
    }
}

/// A subscriber connection and the node it goes to (an index into the
/// Redis backends' shards).
#[derive(Debug)]
pub(super) struct Link {
    pub node: usize,
    pub conn: Subscriber,
}

/// Which of the session's subscriber connections.
#[derive(Debug, Clone, Copy)]
pub(super) enum LinkRef {
    Main,
    Shard(usize),
}

#[derive(Debug, Default)]
pub(super) struct Subscriptions {
    pub channels: HashSet<Bytes>,
    pub patterns: HashSet<Bytes>,
    /// Shard channels, with the node each is on.
    pub shard_channels: Vec<(Bytes, usize)>,
    /// Channels and patterns.
    pub main: Option<Link>,
    /// Shard channels' nodes.
    pub shard_links: Vec<Link>,
}

impl Subscriptions {
    /// Subscribed to anything (Redis' subscribed state).
    pub fn active(&self) -> bool {
        !self.channels.is_empty() || !self.patterns.is_empty() || !self.shard_channels.is_empty()
    }

    /// Subscribed to `name` of `kind` on `node`.
    pub fn add(&mut self, kind: Kind, name: &Bytes, node: usize) {
        match kind {
            Kind::Channel => {
                self.channels.insert(name.clone());
            }
            Kind::Pattern => {
                self.patterns.insert(name.clone());
            }
            Kind::Shard => {
                if !self.shard_channels.iter().any(|(c, _)| c == name) {
                    self.shard_channels.push((name.clone(), node));
                }
            }
        }
    }

    pub fn remove(&mut self, kind: Kind, name: &[u8]) {
        match kind {
            Kind::Channel => {
                self.channels.remove(name);
            }
            Kind::Pattern => {
                self.patterns.remove(name);
            }
            Kind::Shard => self.shard_channels.retain(|(c, _)| c.as_ref() != name),
        }
    }

    /// Frames Redis answers an UNSUBSCRIBE of `kind` without arguments with
    /// on `node` (one per subscription, or one saying there was none), and
    /// forget those subscriptions.
    pub fn remove_all(&mut self, kind: Kind, node: usize) -> usize {
        let n = match kind {
            Kind::Channel => std::mem::take(&mut self.channels).len(),
            Kind::Pattern => std::mem::take(&mut self.patterns).len(),
            Kind::Shard => {
                let before = self.shard_channels.len();
                self.shard_channels.retain(|&(_, n)| n != node);
                before - self.shard_channels.len()
            }
        };
        n.max(1)
    }

    /// The session's subscriber connection to `node`, if it has one.
    pub fn conn_to(&self, node: usize) -> Option<&Subscriber> {
        let main = self.main.iter().filter(|l| l.node == node);
        let mut links = main.chain(self.shard_links.iter().filter(|l| l.node == node));
        links.next().map(|l| &l.conn)
    }

    /// Close the connections nothing is subscribed on any more (each ends
    /// once what was sent to it is answered).
    pub fn drop_unused(&mut self, pushes: &mut Pushes) {
        if self.channels.is_empty() && self.patterns.is_empty() {
            self.main = None;
        }
        let used = &self.shard_channels;
        self.shard_links
            .retain(|link| used.iter().any(|&(_, node)| node == link.node));
        pushes.expecting = self.active();
    }

    /// The connection for `kind` on `node`, if open.
    pub fn link_to(&self, kind: Kind, node: usize) -> Option<LinkRef> {
        match kind {
            Kind::Shard => self
                .shard_links
                .iter()
                .position(|l| l.node == node)
                .map(LinkRef::Shard),
            _ => self.main.as_ref().map(|_| LinkRef::Main),
        }
    }

    pub fn add_link(&mut self, kind: Kind, link: Link) -> LinkRef {
        match kind {
            Kind::Shard => {
                self.shard_links.push(link);
                LinkRef::Shard(self.shard_links.len() - 1)
            }
            _ => {
                self.main = Some(link);
                LinkRef::Main
            }
        }
    }

    pub fn conn(&self, link: LinkRef) -> Option<&Subscriber> {
        match link {
            LinkRef::Main => self.main.as_ref().map(|l| &l.conn),
            LinkRef::Shard(i) => self.shard_links.get(i).map(|l| &l.conn),
        }
    }
}
