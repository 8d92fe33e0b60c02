//! The RESP listener (`server.resp_listen`): real Redis clients through
//! memshift compared with one plain Redis, the same items through both
//! protocols, hostile input, refused commands and authentication.

mod clients;
mod cluster;
mod cross_protocol;
mod eject;
mod hostile;
mod info_stats;
mod keyspace;
mod near_cache;
mod pubsub;
mod pubsub_cluster;
mod refused;
mod transactions;
