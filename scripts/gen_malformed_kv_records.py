#!/usr/bin/env python3
"""Writes tests/data/malformed/kv_records/: KV record files (the format in
src/kv/kv_record.h) written by this second, independent encoder in pure
Python from the format's table, each damaged in one way. `ok_*` files must
parse (so the C reader and this writer agree on the format); every other
file must be refused. All records: model id (1, 2), block size 4, 8 prefix
tokens, a 64-byte payload. Deterministic; run with any Python 3:

    python3 scripts/gen_malformed_kv_records.py
"""
import os
import struct

M = (1 << 64) - 1
OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "malformed", "kv_records")


def mix64(h):
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & M
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & M
    h ^= h >> 33
    return h


def hash_bytes(seed, data):
    """di_kv_hash_bytes: four 64-bit lanes over 32-byte strides, FNV tail."""
    n = len(data)
    h = (seed ^ 0x9E3779B97F4A7C15 ^ n) & M
    l0, l1, l2, l3 = h, (h + 1) & M, (h + 2) & M, (h + 3) & M
    i = 0
    while i + 32 <= n:
        w = struct.unpack_from("<4Q", data, i)
        l0 = ((l0 ^ w[0]) * 0xBF58476D1CE4E5B9) & M; l0 ^= l0 >> 31
        l1 = ((l1 ^ w[1]) * 0x94D049BB133111EB) & M; l1 ^= l1 >> 31
        l2 = ((l2 ^ w[2]) * 0xBF58476D1CE4E5B9) & M; l2 ^= l2 >> 29
        l3 = ((l3 ^ w[3]) * 0x94D049BB133111EB) & M; l3 ^= l3 >> 29
        i += 32
    h = mix64(l0) ^ mix64((l1 + 0x632BE59BD9B4E019) & M) ^ mix64(l2 ^ 0x85EBCA77C2B2AE63) ^ mix64((l3 * 3 + 1) & M)
    for b in data[i:]:
        h = ((h ^ b) * 0x100000001B3) & M
    return mix64(h)


def key_of(tokens):
    """di_kv_key_next(di_kv_key_root(), tokens)."""
    a = 0x243F6A8885A308D3 ^ 0x9E3779B97F4A7C15
    b = 0x13198A2E03707344 ^ 0xD1B54A32D192ED03
    for t in tokens:
        t &= 0xFFFFFFFF
        a = ((a ^ t) * 0xBF58476D1CE4E5B9) & M
        a ^= a >> 29
        b = ((b ^ (t + 0x51)) * 0x94D049BB133111EB) & M
        b ^= b >> 31
    return mix64(a), mix64(b ^ len(tokens))


def record(model=(1, 2), tokens=tuple(range(100, 108)), block=4, payload=bytes(range(64)),
           version=1, header_bytes=72, magic=b"DIKVREC\0", key=None, fix_checksum=True):
    k = key if key is not None else key_of(tokens)
    body = struct.pack("<%di" % len(tokens), *tokens) + payload
    head = bytearray(magic + struct.pack("<II", version, header_bytes) + struct.pack("<QQ", *model) +
                     struct.pack("<QQ", *k) + struct.pack("<II", len(tokens), block) +
                     struct.pack("<QQ", len(payload), 0))
    if fix_checksum:
        h = hash_bytes(0x6B76726563, bytes(head))
        struct.pack_into("<Q", head, 64, hash_bytes(h, body))
    return bytes(head) + body


def main():
    os.makedirs(OUT, exist_ok=True)
    good = record()
    cases = {
        "ok_valid.kvr": good,
        "flipped_payload_byte.kvr": good[:-3] + bytes([good[-3] ^ 1]) + good[-2:],
        "flipped_token_byte.kvr": good[:80] + bytes([good[80] ^ 0x40]) + good[81:],
        "flipped_header_byte.kvr": good[:20] + bytes([good[20] ^ 2]) + good[21:],
        "truncated_payload.kvr": good[:-1],
        "truncated_header.kvr": good[:40],
        "empty.kvr": b"",
        "trailing_byte.kvr": good + b"\0",
        "other_model.kvr": record(model=(1, 3)),
        "other_version.kvr": record(version=2),
        "other_block_size.kvr": record(block=8),
        "other_payload_size.kvr": record(payload=bytes(65)),
        "bad_magic.kvr": record(magic=b"DIKVREX\0"),
        "key_not_of_tokens.kvr": record(key=(1, 1)),
        "tokens_not_whole_blocks.kvr": record(tokens=tuple(range(6))),
        "no_checksum.kvr": record(fix_checksum=False),
        "huge_token_count.kvr": good[:48] + struct.pack("<I", 0x7FFFFFFF) + good[52:],
    }
    for name, data in sorted(cases.items()):
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
    with open(os.path.join(OUT, "README.md"), "w") as f:
        f.write("KV records (src/kv/kv_record.h) written by scripts/gen_malformed_kv_records.py, an\n"
                "independent Python encoder. `ok_*` must parse, every other file must be refused\n"
                "(tests/kv/test_disk_tier.c). Model id (1, 2), block 4, 8 tokens, 64-byte payload.\n")


if __name__ == "__main__":
    main()
