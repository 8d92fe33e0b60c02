//! Test harness: starts real redis-server / memcached / memshift processes.
