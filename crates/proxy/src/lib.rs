//! memshift: a memcached text-protocol proxy onto sharded Redis.
//!
//! Flow: [`server`] accepts, [`session`] parses and orders, [`router`] says
//! where each key goes and sends it there, [`redis`] translates and
//! pipelines.

pub mod admin;
pub mod backend;
pub mod cli;
pub mod compare;
pub mod config;
pub mod conn;
pub mod copy;
mod driver;
pub mod error;
pub mod fd_limit;
pub mod flush;
pub mod health;
pub mod listener;
pub mod metrics;
pub mod near_cache;
pub mod per_thread;
pub mod plan;
pub mod proxy;
pub mod read_errors;
pub mod redis;
pub mod resp;
pub mod ring_plan;
pub mod router;
pub mod run;
pub mod sasl;
pub mod server;
pub mod session;
pub mod stats;
pub mod tls;
pub mod trim;
pub mod workers;
