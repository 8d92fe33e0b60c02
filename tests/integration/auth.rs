//! Redis AUTH: memshift authenticates its shard connections with a password
//! (default user) or an ACL username and password.

use std::time::Duration;

use memshift_tests::env::{free_port, require_tools};
use memshift_tests::ops_support::wait_until;
use memshift_tests::process::{Memshift, RedisServer};
use memshift_tests::resp::{RedisClient, Resp};

fn config(shard: &str, auth: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:{}\"\n[admin]\nlisten = \"127.0.0.1:{}\"\n\
         [redis]\nshards = [\"{shard}\"]\ntimeout_ms = 500\n{auth}\n",
        free_port(),
        free_port()
    )
}

/// Lock the shard: a password for the default user and an ACL user `app`.
fn protect(redis: &RedisServer) -> RedisClient {
    let mut c = RedisClient::connect(&redis.addr(), Duration::from_secs(2)).expect("connect");
    let ok = Resp::Simple("OK".into());
    assert_eq!(
        c.cmd(&[b"ACL", b"SETUSER", b"app", b"on", b">app-pw", b"~*", b"+@all"])
            .expect("acl"),
        ok
    );
    assert_eq!(
        c.cmd(&[b"CONFIG", b"SET", b"requirepass", b"default-pw"])
            .expect("requirepass"),
        ok
    );
    c
}

#[test]
fn shard_connections_authenticate_with_password_or_acl_user() {
    if !require_tools("redis_auth", &["redis-server"]) {
        return;
    }
    let redis = RedisServer::start();
    let mut admin = protect(&redis);
    for auth in [
        "password = \"default-pw\"",
        "username = \"app\"\npassword = \"app-pw\"",
    ] {
        let memshift = Memshift::start(&config(&redis.addr(), auth));
        let mut c = memshift.client();
        // Connections authenticate in the background: poll.
        wait_until(
            Duration::from_secs(5),
            Duration::from_millis(50),
            "an authenticated set",
            || {
                let reply = c.request_str(b"set auth:k 3 0 2\r\nok\r\n").ok()?;
                (reply == "STORED\r\n").then_some(())
            },
        );
        assert_eq!(
            c.request_str(b"get auth:k\r\n").expect("get"),
            "VALUE auth:k 3 2\r\nok\r\nEND\r\n",
            "{auth}"
        );
    }
    // The item really is in the protected Redis.
    assert_eq!(
        admin.cmd(&[b"AUTH", b"default-pw"]).expect("auth"),
        Resp::Simple("OK".into())
    );
    assert!(matches!(
        admin.cmd(&[b"EXISTS", b"auth:k"]).expect("exists"),
        Resp::Int(1)
    ));
}

#[test]
fn a_wrong_password_fails_requests_and_says_why() {
    if !require_tools("redis_auth_wrong", &["redis-server"]) {
        return;
    }
    let redis = RedisServer::start();
    let _admin = protect(&redis);
    let memshift = Memshift::start(&config(&redis.addr(), "password = \"wrong\""));
    let mut c = memshift.client();
    // A write (a read would be a miss: redis.read_errors_as_misses).
    let reply = c.request_str(b"set auth:k 0 0 1\r\nx\r\n").expect("set");
    assert!(reply.starts_with("SERVER_ERROR"), "{reply}");
    wait_until(
        Duration::from_secs(5),
        Duration::from_millis(50),
        "the auth failure in the log",
        || memshift.stderr().contains("WRONGPASS").then_some(()),
    );
}
