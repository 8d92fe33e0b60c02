# One item, two protocols: pymemcache and redis-py on the same memshift.
# usage: cross_protocol.py MEMCACHED_PORT RESP_PORT SHARD_PORT...
import socket
import sys
import time

import redis
from pymemcache.client.base import Client

mc_port, resp_port = int(sys.argv[1]), int(sys.argv[2])
shard_ports = [int(p) for p in sys.argv[3:]]
mc = Client(("127.0.0.1", mc_port), connect_timeout=10, timeout=10, default_noreply=False)
r = redis.Redis(host="127.0.0.1", port=resp_port, socket_timeout=20)


def check(cond, what):
    if not cond:
        print("FAIL:", what, flush=True)
        sys.exit(1)
    print("ok:", what, flush=True)


def mc_gets(key):
    """(flags, data, cas) from a raw memcached `gets`, None on a miss."""
    s = socket.create_connection(("127.0.0.1", mc_port), timeout=10)
    s.sendall(b"gets " + key.encode() + b"\r\n")
    buf = b""
    while not buf.endswith(b"END\r\n"):
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
    s.close()
    if buf == b"END\r\n":
        return None
    head, rest = buf.split(b"\r\n", 1)
    _, _, flags, n, cas = head.split(b" ")
    return int(flags), rest[: int(n)], int(cas)


# memcached writes, Redis clients read the data (no header)
check(mc.set("x:str", b"hello", expire=1000, flags=7) is True, "mc set with flags 7")
check(r.get("x:str") == b"hello", "redis GET reads the data")
check(990 <= r.ttl("x:str") <= 1000, "redis TTL sees memcached's exptime")
check(r.strlen("x:str") == 5, "STRLEN counts the data")
check(r.getrange("x:str", 1, 3) == b"ell", "GETRANGE on the data")
check(r.mget(["x:str", "x:none"]) == [b"hello", None], "MGET reads the data")
check(r.exists("x:str") == 1, "EXISTS")

# a Redis read-modify-write keeps flags and TTL, changes the CAS
f0, d0, cas0 = mc_gets("x:str")
check(r.append("x:str", " world") == 11, "APPEND returns the data length")
f1, d1, cas1 = mc_gets("x:str")
check((f1, d1) == (7, b"hello world"), "memcached sees the append, flags kept")
check(cas1 != cas0, "the CAS changed after APPEND")
check(990 <= r.ttl("x:str") <= 1000, "TTL kept by APPEND")
check(r.setrange("x:str", 0, "J") == 11, "SETRANGE")
f2, d2, cas2 = mc_gets("x:str")
check((f2, d2) == (7, b"Jello world") and cas2 != cas1, "SETRANGE seen by memcached, new CAS")

# counters across both
check(mc.set("x:n", b"10", flags=3) is True, "mc set counter")
check(r.incr("x:n") == 11, "redis INCR on a memcached counter")
f, d, cas_a = mc_gets("x:n")
check((f, d) == (3, b"11"), "memcached reads 11 with flags 3")
check(mc.incr("x:n", 5) == 16, "memcached incr on it")
check(r.get("x:n") == b"16", "redis reads 16")
check(r.incrby("x:n", -20) == -4, "INCRBY below zero (Redis rules)")
check(mc.get("x:n") == b"-4", "memcached reads -4")
check(r.incr("x:new") == 1, "INCR creates a counter")
check(mc_gets("x:new")[:2] == (0, b"1"), "memcached reads it with flags 0")
check(r.incrbyfloat("x:new", 0.5) == 1.5, "INCRBYFLOAT")
check(mc.get("x:new") == b"1.5", "memcached reads 1.5")

# Redis writes, memcached reads with flags 0 and a fresh CAS each time
check(r.set("y:s", "from redis") is True, "redis SET")
fy, dy, casy = mc_gets("y:s")
check((fy, dy) == (0, b"from redis") and casy > 0, "memcached gets flags 0 and a CAS")
check(r.set("y:s", "again") is True, "redis SET again")
fy2, dy2, casy2 = mc_gets("y:s")
check(dy2 == b"again" and casy2 != casy, "the CAS changed after a RESP SET")
check(mc.cas("y:s", b"stale", casy) is False, "memcached cas with the old CAS fails")
check(mc.cas("y:s", b"by cas", casy2) is True, "memcached cas with the new CAS stores")
check(r.get("y:s") == b"by cas", "redis reads memcached's cas write")
check(r.set("y:ttl", "v", ex=500) is True, "SET EX")
mc_ttl_item = mc_gets("y:ttl")
check(mc_ttl_item is not None and mc_ttl_item[1] == b"v", "memcached reads SET EX's value")
check(490 <= r.ttl("y:ttl") <= 500, "TTL")
check(r.set("y:ttl", "w", keepttl=True, get=True) == b"v", "SET KEEPTTL GET returns the old data")
check(490 <= r.ttl("y:ttl") <= 500, "KEEPTTL")
check(r.setnx("y:nx", "1") is True and r.setnx("y:nx", "2") is False, "SETNX")
check(mc.get("y:nx") == b"1", "memcached reads SETNX's value")
check(r.getex("y:nx", ex=100) == b"1" and 90 <= r.ttl("y:nx") <= 100, "GETEX EX")
check(r.getdel("y:nx") == b"1" and mc.get("y:nx") is None, "GETDEL deletes for memcached too")
check(r.mset({"y:m1": "a", "y:m2": "b", "y:m3": "c"}) is True, "MSET")
check(mc.get_many(["y:m1", "y:m2", "y:m3"]) == {"y:m1": b"a", "y:m2": b"b", "y:m3": b"c"}, "memcached get_many reads MSET")
check(r.delete("y:m1", "y:m2", "x:str") == 3, "DEL across shards")
check(mc.get("x:str") is None and mc.get("y:m3") == b"c", "memcached sees the deletes")
check(r.expire("y:m3", 100) is True, "EXPIRE on an item")
check(mc.get("y:m3") == b"c", "EXPIRE keeps the item readable")
check(mc.touch("y:m3", 1000) is True and 990 <= r.ttl("y:m3") <= 1000, "memcached touch seen by TTL")

# a value memshift did not write (raw redis-cli on a shard) reads as-is
for p in shard_ports:
    redis.Redis(host="127.0.0.1", port=p).set("z:raw", "raw bytes")
check(r.get("z:raw") == b"raw bytes", "a raw value reads as stored")
check(r.append("z:raw", "!") == 10, "APPEND on a raw value stays raw")
check(mc.get("z:raw") is None, "memcached clients miss a raw value")

print("CROSS PROTOCOL OK", flush=True)
