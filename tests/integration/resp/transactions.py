"""redis-py transactions and blocking pops, run against memshift (3 shards,
hash tag "{}") and against one plain Redis by transactions.rs.

usage: transactions.py HOST PORT PROTO MODE
  MODE same:  prints one line per result; both servers must print the same.
  MODE cross: memshift only: a transactional pipeline whose keys span
              shards fails with EXECABORT and changes no key.
"""
import sys
import threading
import time

import redis

host, port, proto, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]


def client():
    return redis.Redis(host=host, port=port, protocol=proto, socket_timeout=30)


r = client()
other = client()


def show(label, value):
    print(f"{label}: {value!r}")


def outcome(label, f):
    try:
        show(label, f())
    except redis.exceptions.WatchError as e:
        show(label, f"WatchError {e}")
    except redis.exceptions.ResponseError as e:
        show(label, f"ResponseError {e}")


def same():
    r.flushall()
    r.set("{t}counter", 10)
    # The default pipeline is a transaction (MULTI ... EXEC).
    for transaction in (True, False):
        p = r.pipeline(transaction=transaction)
        for i in range(20):
            p.set(f"{{t}}k{i}", f"v{i}")
        p.incr("{t}counter")
        p.get("{t}k3")
        p.mget("{t}k1", "{t}k2", "{t}absent")
        p.getset("{t}k4", "new")
        p.setnx("{t}k5", "x")
        p.getrange("{t}k6", 0, 0)
        p.hset("{t}h", mapping={"a": 1, "b": 2})
        p.hgetall("{t}h")
        p.rpush("{t}list", "a", "b")
        p.lrange("{t}list", 0, -1)
        p.zadd("{t}z", {"m": 1.5})
        p.zscore("{t}z", "m")
        p.delete("{t}k7", "{t}k8")
        p.exists("{t}k7", "{t}k9")
        p.expire("{t}k9", 100)
        p.ttl("{t}k9")
        p.ping()
        show(f"pipeline transaction={transaction}", p.execute())
    show("counter after", r.get("{t}counter"))

    # A queued command refused by the server (wrong type): EXEC runs the
    # rest; redis-py raises the first error.
    p = r.pipeline()
    p.set("{t}s", "1")
    p.lpush("{t}s", "x")
    p.incr("{t}s")
    outcome("exec with a wrong-type command", p.execute)
    show("after wrong-type", r.get("{t}s"))

    # transaction() with WATCH: a clean run, then a conflicting write from
    # another client between WATCH and EXEC.
    def double(pipe):
        v = int(pipe.get("{t}counter"))
        pipe.multi()
        pipe.set("{t}counter", v * 2)

    show("transaction()", r.transaction(double, "{t}counter"))
    show("counter doubled", r.get("{t}counter"))

    with r.pipeline() as pipe:
        pipe.watch("{t}counter", "{t}k1")
        v = int(pipe.get("{t}counter"))
        other.set("{t}counter", 1000)
        pipe.multi()
        pipe.set("{t}counter", v + 1)
        outcome("watched key changed", pipe.execute)
    show("counter kept the other write", r.get("{t}counter"))

    with r.pipeline() as pipe:
        pipe.watch("{t}counter")
        pipe.unwatch()
        other.set("{t}counter", 7)
        pipe.multi()
        pipe.incr("{t}counter")
        outcome("after unwatch", pipe.execute)

    # An empty transaction, and DISCARD.
    show("empty", r.pipeline().execute())
    p = r.pipeline()
    p.set("{t}discarded", 1)
    p.reset()
    show("discarded", r.get("{t}discarded"))

    # Blocking pops: a timeout answers nil; a push from another connection
    # wakes a waiting pop.
    t0 = time.monotonic()
    show("blpop timeout", r.blpop(["{t}q1", "{t}q2"], timeout=0.3))
    show("brpop timeout", r.brpop(["{t}q1"], timeout=0.3))
    show("blpop waited", time.monotonic() - t0 >= 0.5)
    r.rpush("{t}q2", "ready")
    show("blpop ready", r.blpop(["{t}q1", "{t}q2"], timeout=1))

    def push_later():
        time.sleep(0.5)
        other.rpush("{t}q1", "pushed")

    for timeout in (0, 10):
        th = threading.Thread(target=push_later)
        th.start()
        show(f"blpop woken (timeout {timeout})", r.blpop(["{t}q1"], timeout=timeout))
        th.join()
    th = threading.Thread(target=push_later)
    th.start()
    show("blmove woken", r.blmove("{t}q1", "{t}q3", 0, "LEFT", "RIGHT"))
    th.join()
    show("brpoplpush timeout", r.brpoplpush("{t}q1", "{t}q3", timeout=0.2))
    r.zadd("{t}zq", {"a": 1, "b": 2})
    show("bzpopmin", r.bzpopmin(["{t}zq"], timeout=1))
    show("lrange q3", r.lrange("{t}q3", 0, -1))


def cross():
    r.flushall()
    keys = [f"cross:{i}" for i in range(12)]
    for k in keys:
        r.set(k, "before")
    before = [r.get(k) for k in keys]
    p = r.pipeline()
    for k in keys:
        p.set(k, "after")
        p.incr(k + ":n")
    try:
        p.execute()
        print("CROSS EXECUTED")
    except redis.exceptions.ExecAbortError as e:
        print(f"EXECABORT: {e}")
    except redis.exceptions.ResponseError as e:
        print(f"ResponseError: {type(e).__name__} {e}")
    after = [r.get(k) for k in keys]
    counters = [r.get(k + ":n") for k in keys]
    print(f"unchanged: {before == after}")
    print(f"counters: {counters}")


{"same": same, "cross": cross}[mode]()
print("TRANSACTIONS DONE")
