//! Pub/sub over a real 6-node Redis Cluster (3 masters): SSUBSCRIBE and
//! SPUBLISH by slot (each slot's master, a subscriber connection per node),
//! CROSSSLOT refused; SUBSCRIBE on one node and PUBLISH on any node (the
//! cluster propagates it).

use std::net::TcpStream;
use std::time::Duration;

use memshift_tests::ops_support::{metric, wait_until};
use memshift_tests::redis_cluster::RedisClusterNodes;
use memshift_tests::resp_proxy::send_and_read;
use memshift_tests::{require_tools, Resp};

use super::cluster::start;

const IDLE: Duration = Duration::from_millis(1500);

/// `*3 <kind> <channel> <n>` as a RESP2 client gets it.
fn frame(kind: &str, channel: &str, tail: &str) -> String {
    format!(
        "*3\r\n${}\r\n{kind}\r\n${}\r\n{channel}\r\n{tail}",
        kind.len(),
        channel.len()
    )
}

/// Read from `sub` until `want`'s length has come; it must be `want`.
fn expect(sub: &mut TcpStream, want: &str) {
    let mut got = Vec::new();
    wait_until(
        Duration::from_secs(10),
        Duration::from_millis(20),
        want,
        || {
            let (more, _) = send_and_read(sub, b"", Duration::from_millis(100));
            got.extend_from_slice(&more);
            (got.len() >= want.len()).then_some(())
        },
    );
    assert_eq!(text(&got), want);
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn pubsub_over_redis_cluster() {
    if !require_tools("pubsub_over_redis_cluster", &["redis-server", "redis-cli"]) {
        return;
    }
    let nodes = RedisClusterNodes::start();
    let (memshift, resp_port, admin_port) = start(&nodes, "");
    // Two shard channels whose slots have different masters.
    let mut channels: Vec<(String, usize)> = Vec::new();
    for i in 0.. {
        let c = format!("orders:{i}");
        let master = nodes.master_of(nodes.keyslot(&c));
        if channels.iter().all(|&(_, m)| m != master) {
            channels.push((c, master));
        }
        if channels.len() == 2 {
            break;
        }
    }
    let (a, master_a) = channels[0].clone();
    let (b, master_b) = channels[1].clone();

    let mut sub = TcpStream::connect(("127.0.0.1", resp_port)).expect("connect");
    let (got, _) = send_and_read(&mut sub, format!("SSUBSCRIBE {a} {b}\r\n").as_bytes(), IDLE);
    assert_eq!(
        text(&got),
        "-CROSSSLOT Keys in request don't hash to the same slot\r\n"
    );
    // Each node counts its own shard channels, as a cluster client
    // connected to each node sees them.
    let cmd = format!("SSUBSCRIBE {a}\r\nSSUBSCRIBE {b}\r\nSUBSCRIBE news\r\n");
    let (got, _) = send_and_read(&mut sub, cmd.as_bytes(), IDLE);
    let want = frame("ssubscribe", &a, ":1\r\n")
        + &frame("ssubscribe", &b, ":1\r\n")
        + &frame("subscribe", "news", ":1\r\n");
    assert_eq!(text(&got), want, "{}", memshift.stderr());
    assert_eq!(
        metric(admin_port, "memshift_resp_subscriber_connections"),
        3.0
    );

    // SPUBLISH through memshift reaches the slot's master; SPUBLISH on the
    // master itself reaches memshift's subscriber. (Each message is awaited
    // before the next publish: they come on different connections.)
    let mut publisher = TcpStream::connect(("127.0.0.1", resp_port)).expect("connect");
    let (got, _) = send_and_read(
        &mut publisher,
        format!("SPUBLISH {a} one\r\n").as_bytes(),
        IDLE,
    );
    assert_eq!(text(&got), ":1\r\n");
    expect(&mut sub, &frame("smessage", &a, "$3\r\none\r\n"));
    assert_eq!(
        nodes.cmd(master_b, &[b"SPUBLISH", b.as_bytes(), b"two"]),
        Resp::Int(1)
    );
    expect(&mut sub, &frame("smessage", &b, "$3\r\ntwo\r\n"));
    // PUBLISH through memshift, and on every master directly.
    let (got, _) = send_and_read(&mut publisher, b"PUBLISH news three\r\n", IDLE);
    assert_eq!(text(&got), ":1\r\n");
    expect(&mut sub, &frame("message", "news", "$5\r\nthree\r\n"));
    for m in nodes.masters() {
        assert!(matches!(
            nodes.cmd(m, &[b"PUBLISH", b"news", b"direct"]),
            Resp::Int(_)
        ));
        expect(&mut sub, &frame("message", "news", "$6\r\ndirect\r\n"));
    }

    // SUNSUBSCRIBE without channels: each node confirms its own.
    let (got, _) = send_and_read(&mut sub, b"SUNSUBSCRIBE\r\nUNSUBSCRIBE\r\n", IDLE);
    let want = frame("sunsubscribe", &a, ":0\r\n")
        + &frame("sunsubscribe", &b, ":0\r\n")
        + &frame("unsubscribe", "news", ":0\r\n");
    assert_eq!(text(&got), want);
    wait_until(
        Duration::from_secs(10),
        Duration::from_millis(50),
        "subscriber connections closed",
        || (metric(admin_port, "memshift_resp_subscriber_connections") == 0.0).then_some(()),
    );
    assert_ne!(master_a, master_b);
}
