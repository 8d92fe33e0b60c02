#!/usr/bin/env python3
"""Write keys.txt: the keys every golden-vector generator places, one per
line, hex-encoded. Deterministic; re-running gives the same file.

Memcached ASCII keys cannot contain bytes <= 0x20 or 0x7f (gomemcache and
pymemcache refuse them), so none of these do. Keys longer than 250 bytes
cannot be stored; the generators record the library's chooser for them.
"""
import os
import random

keys = [f"key:{n}".encode() for n in range(1000)]

text = [
    "a", "ab", "abc", "abcd", "abcde", "abcdef", "abcdefg",  # murmur3 tails
    "user:42:profile", "session:4f2a9c1e0b7d", "{user:1}:cart", "foo", "bar",
    "it's", 'say"hi"', "both'\"", "back\\slash", "~!@#$%^&*()_+-=[]{}|;:,.<>/?`",
    "café", "ключ:1", "キー:2", "emoji:🎉", "ÿ", "Ā", "€uro", "naïve:ÅÆØ",
    "L" * 100,
    "long:" + "".join(str(i % 10) for i in range(195)),
    "x" * 250,
]
keys += [t.encode("utf-8") for t in text]

rng = random.Random(20240611)
allowed = [b for b in range(0x21, 0x100) if b != 0x7F]
high = list(range(0x80, 0x100))
keys += [
    b"\xff\xfe\xfd",
    b"bin:\x80\x81\x82",
    b"\xc3(",  # invalid UTF-8
    b"quote'\xff",
    b"dq\"\xfe'",
]
for n in range(20):
    length = rng.randint(1, 64)
    k = bytes(rng.choice(allowed) for _ in range(length))
    if n % 2 == 0:
        k = bytes([rng.choice(high)]) + k  # make sure it is not plain ASCII
    keys.append(k)
# Over the 250-byte memcached limit: chooser only.
keys += [b"y" * 251, b"z" * 256, b"over:" + b"0123456789" * 30]

seen = set()
out = []
for k in keys:
    assert k and all(b > 0x20 and b != 0x7F for b in k), k
    if k not in seen:
        seen.add(k)
        out.append(k)

path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "keys.txt")
with open(path, "w") as f:
    for k in out:
        f.write(k.hex() + "\n")
print(f"wrote {len(out)} keys to {path}")
