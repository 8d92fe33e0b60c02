# Keyspace walks and INFO with redis-py: run against memshift's RESP port
# and against one plain Redis holding the same keys, it must print the same
# lines. The keys: k:* (10,000 strings, some with a TTL, and one hash) and
# one other key; written by the test (through memcached's port for half of
# them on memshift).
# usage: keyspace.py HOST PORT PROTOCOL(2|3)
import hashlib
import sys

import redis

host, port, proto = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
r = redis.Redis(host=host, port=port, protocol=proto, socket_timeout=30)


def walk(label, it):
    keys = list(it)
    unique = set(keys)
    digest = hashlib.sha256(b"\n".join(sorted(unique))).hexdigest()[:16]
    print(label, "returned", len(keys), "unique", len(unique), "digest", digest, flush=True)
    return unique


walk("scan_iter match count=100", r.scan_iter(match="k:*", count=100))
everything = walk("scan_iter count=1000", r.scan_iter(count=1000))
walk("scan_iter match k:resp:1* count=10", r.scan_iter(match="k:resp:1*", count=10))
walk("scan_iter type string", r.scan_iter(match="k:*", count=500, _type="string"))
walk("scan_iter type hash", r.scan_iter(count=500, _type="hash"))
walk("keys k:*", r.keys("k:*"))
walk("keys nothing", r.keys("nothing:*"))
print("randomkey is a key", r.randomkey() in everything, flush=True)

# A scan step by hand: the first page is a list and a cursor.
cursor, page = r.scan(0, match="k:*", count=50)
print("first page is a list", isinstance(page, list), "cursor is an int", isinstance(cursor, int))
for bad in ("abc", "-", " 1"):
    try:
        r.execute_command("SCAN", bad)
    except redis.ResponseError as e:
        print("SCAN", repr(bad), "->", e)
for args in (("COUNT", "0"), ("COUNT", "x"), ("FOO",), ("MATCH",)):
    try:
        r.execute_command("SCAN", "0", *args)
    except redis.ResponseError as e:
        print("SCAN 0", args, "->", e)

ks = r.info("keyspace")
print("info keyspace sections", sorted(ks.keys()))
print("info keyspace db0 keys", ks["db0"]["keys"], "expires", ks["db0"]["expires"])
mem = r.info("memory")
print("info memory is section-only", "redis_version" not in mem and "db0" not in mem)
for field in ("used_memory", "used_memory_human", "maxmemory", "maxmemory_human", "maxmemory_policy"):
    print("info memory has", field, field in mem)
both = r.info("keyspace", "memory")
print("info keyspace memory", "used_memory" in both and "db0" in both)
print("info nosuch", r.info("nosuch"))
default = r.info()
print("info parses", "redis_version" in default, "db0" in default, "used_memory" in default)
print("info all parses", "redis_version" in r.info("all"))

# OBJECT on the key's shard (a string stored by memshift has its header:
# "v" stays embstr on both; a number would not be int through memshift).
for key in ("k:hash", "k:resp:1", "k:mc:1", "nothing"):
    print("object encoding", key, r.object("encoding", key))
try:
    r.execute_command("OBJECT", "ENCODING")
except redis.ResponseError as e:
    print("object encoding without a key ->", e)

# CONFIG GET: the read-only subset memshift answers, as the shards have it.
readable = ("save", "appendonly", "appendfsync", "maxmemory", "maxmemory-policy")
for pattern in ("*", "maxmemory*", "SAVE"):
    got = r.config_get(pattern)
    print("config_get", pattern, sorted((k, v) for k, v in got.items() if k.lower() in readable))
print("WORKLOAD DONE", flush=True)
