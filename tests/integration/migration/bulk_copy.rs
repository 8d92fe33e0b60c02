//! `memshift copy`: 100,000 items with mixed TTLs and flags on two memcached
//! servers are copied into Redis (progress lines while it runs, a summary at
//! the end); `--verify` then finds 0 mismatches; flags and TTLs spot-checked
//! in Redis. A changed key makes `--verify` exit 1 and name it.

use std::fs::File;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use memshift_tests::memshift_bin;
use memshift_tests::migration_support::{
    mc_get_item, mc_load, mc_settle, redis_put, LoadItem, MigrationOptions, MigrationSetup,
};

use super::*;

const ITEMS: usize = 100_000;
const FLAGS: [u32; 5] = [0, 1, 7, 65_535, u32::MAX];

/// A child process killed on drop.
struct Running(Option<Child>);

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Runs `memshift copy --config <config> <args>` with stdout in a file;
/// returns (status, stdout, whether a progress line appeared while it was
/// still running).
fn copy(config: &Path, args: &[&str], dir: &Path, timeout: Duration) -> (ExitStatus, String, bool) {
    let out_path = dir.join(format!("copy{}.out", args.join("")));
    let err_path = dir.join(format!("copy{}.err", args.join("")));
    let mut cmd = Command::new(memshift_bin());
    cmd.arg("copy")
        .arg("--config")
        .arg(config)
        .args(args)
        .stdin(Stdio::null())
        .stdout(File::create(&out_path).expect("stdout file"))
        .stderr(File::create(&err_path).expect("stderr file"));
    let mut child = Running(Some(cmd.spawn().expect("spawn memshift copy")));
    let deadline = Instant::now() + timeout;
    let mut progress_while_running = false;
    loop {
        let c = child.0.as_mut().expect("child");
        let status = c.try_wait().expect("try_wait");
        let out = std::fs::read_to_string(&out_path).unwrap_or_default();
        if status.is_none() && out.lines().any(|l| l.starts_with("progress:")) {
            progress_while_running = true;
        }
        if let Some(status) = status {
            child.0 = None;
            return (status, out, progress_while_running);
        }
        if Instant::now() >= deadline {
            panic!(
                "memshift copy {args:?} still running after {timeout:?}; stdout:\n{out}\nstderr:\n{}",
                std::fs::read_to_string(&err_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn item(i: usize, now: i64) -> LoadItem {
    let exptime = match i % 4 {
        0 => 0,
        1 => 600,
        2 => 3600,
        // More than 30 days: an absolute unix time for memcached.
        _ => now + 40 * 86_400,
    };
    // Some keys with bytes metadump URL-encodes.
    let key = if i % 10_000 == 1 {
        format!("bulk:{i}:%41+ü/é?&=")
    } else {
        format!("bulk:{i}")
    };
    LoadItem {
        key,
        flags: FLAGS[i % FLAGS.len()],
        exptime,
        data: format!("value-{i}-{}", "x".repeat(i % 50)).into_bytes(),
    }
}

#[test]
fn bulk_copy_100k_items_then_verify() {
    if !tools("bulk_copy_100k_items_then_verify") {
        return;
    }
    let setup = MigrationSetup::start(MigrationOptions {
        phase: "cutover".into(),
        memcached_servers: 2,
        memcached_args: vec!["-m".into(), "256".into()],
        ..MigrationOptions::default()
    });
    let now = unix_now();
    let items: Vec<LoadItem> = (0..ITEMS).map(|i| item(i, now)).collect();
    let (even, odd): (Vec<LoadItem>, Vec<LoadItem>) =
        items.iter().cloned().partition(|it| it.key.len() & 1 == 0);
    let started = Instant::now();
    mc_load(&setup.memcached[0].addr(), &even);
    mc_load(&setup.memcached[1].addr(), &odd);
    assert_eq!(
        setup.mc_curr_items(),
        ITEMS as u64,
        "items loaded into memcached"
    );
    // A crawl passes over items the LRU maintainer moves meanwhile (see
    // `bulk_copy_under_live_reads_copies_every_item`): let the HOT→COLD
    // moves that follow the load finish first.
    for m in &setup.memcached {
        mc_settle(&m.addr());
    }
    eprintln!("bulk copy: {ITEMS} items loaded in {:?}", started.elapsed());

    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("copy.toml");
    std::fs::write(&config, &setup.proxy.config).expect("write config");

    // Rate-limited to make sure the run lasts a few progress intervals.
    let started = Instant::now();
    let (status, out, progress) = copy(
        &config,
        &["--rate", "40000"],
        dir.path(),
        Duration::from_secs(240),
    );
    eprintln!("bulk copy: copied in {:?}", started.elapsed());
    assert!(status.success(), "memshift copy failed ({status}):\n{out}");
    assert!(progress, "no progress line while the copy ran:\n{out}");
    let progress_lines: Vec<&str> = out.lines().filter(|l| l.starts_with("progress:")).collect();
    assert!(
        progress_lines
            .iter()
            .all(|l| l.contains("items") && l.contains("bytes") && l.contains("ETA")),
        "progress lines without items/bytes/rate/ETA:\n{out}"
    );
    assert!(
        out.contains(&format!("{ITEMS} copied")) && out.contains(" 0 failed"),
        "copy summary:\n{out}"
    );
    assert_eq!(
        setup.redis_dbsize(),
        ITEMS as i64,
        "keys in Redis after the copy"
    );

    // Spot checks: value, flags and TTL against memcached's.
    let mut mcs: Vec<_> = setup.memcached.iter().map(|m| m.client()).collect();
    for i in (0..ITEMS)
        .step_by(9_973)
        .chain(0..8)
        .chain((1..ITEMS).step_by(10_000))
    {
        let it = &items[i];
        let got = setup
            .redis_item(&it.key)
            .unwrap_or_else(|| panic!("{} not in Redis after the copy", it.key));
        let server = it.key.len() & 1;
        let mc = mc_get_item(&mut mcs[server], &it.key)
            .expect("mg")
            .expect("in memcached");
        assert_eq!(
            (got.data.as_slice(), got.flags),
            (it.data.as_slice(), it.flags),
            "{}",
            it.key
        );
        assert_eq!(mc.flags, it.flags);
        if it.exptime == 0 {
            assert_eq!(got.ttl, -1, "{}: no expiry", it.key);
        } else {
            assert!(
                (got.ttl - mc.ttl).abs() <= 2 && got.ttl > 0,
                "{}: Redis TTL {} vs memcached's {}",
                it.key,
                got.ttl,
                mc.ttl
            );
        }
    }

    // The copy's own reads made items active: the LRU maintainer moves
    // them again, and the verify crawl would pass over some.
    for m in &setup.memcached {
        mc_settle(&m.addr());
    }
    let started = Instant::now();
    let (status, out, _) = copy(&config, &["--verify"], dir.path(), Duration::from_secs(240));
    eprintln!("bulk copy: verified in {:?}", started.elapsed());
    assert!(
        status.success(),
        "memshift copy --verify exited {status}:\n{out}"
    );
    assert!(
        out.contains(&format!("{ITEMS} match")) && out.contains(" 0 mismatches"),
        "verify summary:\n{out}"
    );

    // A changed value and a missing key: --verify names them, exits 1.
    let shard = setup.redis_item("bulk:5").expect("bulk:5").shard;
    redis_put(&setup.redis[shard], "bulk:5", items[5].flags, b"changed", 0);
    let shard = setup.redis_item("bulk:6").expect("bulk:6").shard;
    setup.redis[shard].cmd(&[b"DEL", b"bulk:6"]);
    for m in &setup.memcached {
        mc_settle(&m.addr());
    }
    let (status, out, _) = copy(&config, &["--verify"], dir.path(), Duration::from_secs(240));
    assert_eq!(status.code(), Some(1), "--verify with 2 mismatches:\n{out}");
    assert!(
        out.contains("mismatch: bulk:5 ")
            && out.contains("mismatch: bulk:6 ")
            && out.contains(" 2 mismatches"),
        "--verify output:\n{out}"
    );
}

/// The copy runs while applications still read the pool (the point of a
/// live migration): every item must be copied all the same. memcached's
/// crawler passes over items that reads move between LRU segments while
/// it walks, so a single `lru_crawler metadump all` pass lists only part of
/// them, and `--verify`, walking the same way, does not notice.
#[test]
fn bulk_copy_under_live_reads_copies_every_item() {
    if !tools("bulk_copy_under_live_reads_copies_every_item") {
        return;
    }
    const N: usize = 50_000;
    let setup = MigrationSetup::start(MigrationOptions {
        phase: "warmup".into(),
        memcached_args: vec!["-m".into(), "256".into()],
        ..MigrationOptions::default()
    });
    let now = unix_now();
    let items: Vec<LoadItem> = (0..N).map(|i| item(i, now)).collect();
    let addr = setup.memcached[0].addr();
    mc_load(&addr, &items);
    mc_settle(&addr);

    // The application: multi-gets of pseudo-random keys, straight to
    // memcached, for as long as the copy runs.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let stop = stop.clone();
        let addr = addr.clone();
        std::thread::spawn(move || {
            let mut c = memshift_tests::McClient::connect(&addr).expect("connect");
            let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let keys: Vec<String> = (0..100)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        format!("bulk:{}", x % N as u64)
                    })
                    .collect();
                c.request(format!("get {}\r\n", keys.join(" ")).as_bytes())
                    .expect("app get");
            }
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("copy.toml");
    std::fs::write(&config, &setup.proxy.config).expect("write config");
    let (status, out, _) = copy(&config, &[], dir.path(), Duration::from_secs(240));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    reader.join().expect("reader thread");
    assert!(status.success(), "memshift copy failed ({status}):\n{out}");
    assert_eq!(
        setup.mc_curr_items(),
        N as u64,
        "nothing was evicted or expired"
    );
    assert_eq!(
        setup.redis_dbsize(),
        N as i64,
        "items in Redis after copying {N} live items; copy said:\n{out}"
    );
}
