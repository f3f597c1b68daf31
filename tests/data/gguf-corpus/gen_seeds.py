#!/usr/bin/env python3
"""gen_seeds.py - regenerate the hand-made seeds of the GGUF fuzzing corpus.

The fuzzer (tests/fuzz.sh) starts from the *.bin files in this folder. Valid
seeds give it every metadata type, several tensor types, both versions, a
non-default alignment and split keys to mutate; the hostile seeds sit right
next to a defect the reader must reject (and the regressions of bugs fixed in
src/gguf/gguf.c), so those checks stay covered. llama-q4_0.bin is not made here: it
is the output of

    build/mkmodel -o llama-q4_0.bin --type q4_0 --n-embd 32 --n-layer 1 \
        --n-head 2 --n-head-kv 1 --n-ff 32 --vocab 260

Run from this folder: python3 gen_seeds.py
"""
import struct

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
F32T, F16T, Q4_0, Q8_0, Q4_K = 0, 1, 2, 8, 12


def s(x):
    b = x.encode() if isinstance(x, str) else x
    return struct.pack("<Q", len(b)) + b


def hdr(version, nt, nkv):
    return b"GGUF" + struct.pack("<IQQ", version, nt, nkv)


def kv(key, t, payload):
    return s(key) + struct.pack("<I", t) + payload


def arr(key, et, items, fmt=None):
    body = b"".join(s(i) for i in items) if et == STR else b"".join(struct.pack("<" + fmt, i) for i in items)
    return kv(key, ARR, struct.pack("<IQ", et, len(items)) + body)


def tinfo(name, ne, t, off):
    return s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<q", n) for n in ne) + struct.pack("<IQ", t, off)


def image(version, kvs, tensors, align=32):
    """tensors: (name, ne, type, nbytes); offsets assigned, data patterned."""
    out = hdr(version, len(tensors), len(kvs)) + b"".join(kvs)
    off, offs = 0, []
    for name, ne, t, nb in tensors:
        offs.append(off)
        out += tinfo(name, ne, t, off)
        off = (off + nb + align - 1) // align * align
    out += b"\0" * (-len(out) % align)
    data = bytearray(off)
    for i, (_, _, _, nb) in enumerate(tensors):
        for j in range(nb):
            data[offs[i] + j] = (i * 31 + j * 7 + 1) & 255
    return out + bytes(data)


RICH_KVS = [
    kv("general.architecture", STR, s("llama")),
    kv("t.u8", U8, struct.pack("<B", 200)),
    kv("t.i8", I8, struct.pack("<b", -5)),
    kv("t.u16", U16, struct.pack("<H", 60000)),
    kv("t.i16", I16, struct.pack("<h", -300)),
    kv("t.u32", U32, struct.pack("<I", 4000000000)),
    kv("t.i32", I32, struct.pack("<i", -2000000000)),
    kv("t.f32", F32, struct.pack("<f", 1.5)),
    kv("t.bool", BOOL, b"\x01"),
    kv("t.str", STR, s("hello")),
    kv("t.str.empty", STR, s("")),
    kv("t.u64", U64, struct.pack("<Q", 1 << 40)),
    kv("t.i64", I64, struct.pack("<q", -(1 << 40))),
    kv("t.f64", F64, struct.pack("<d", 2.25)),
    kv("t.f64.huge", F64, struct.pack("<d", 1e300)),
    arr("t.arr.i32", I32, [1, -2, 3], "i"),
    arr("t.arr.f32", F32, [0.5, -1.25], "f"),
    arr("t.arr.bool", BOOL, [1, 0, 1], "B"),
    arr("t.arr.u64", U64, [7, 1 << 63], "Q"),
    arr("tokenizer.ggml.tokens", STR, ["<s>", "", "hello"]),
    arr("t.arr.empty", I32, [], "i"),
    arr("t.arr.str.empty", STR, []),
]
RICH_TENSORS = [
    ("token_embd.weight", [8, 3], F32T, 96),
    ("blk.0.attn_q.weight", [64, 2], Q4_0, 72),
    ("blk.0.ffn_down.weight", [256, 2], Q4_K, 288),
    ("output_norm.weight", [5], F16T, 10),
    ("four.dims", [2, 1, 3, 2], F32T, 48),
    ("empty.tensor", [4, 0], F32T, 0),
    ("blk.0.attn_k.weight", [32], Q8_0, 34),
]


def main():
    seeds = {}
    seeds["header-only.bin"] = hdr(3, 0, 0)
    seeds["rich-v3-align64.bin"] = image(3, RICH_KVS + [kv("general.alignment", U32, struct.pack("<I", 64))],
                                         RICH_TENSORS, 64)
    seeds["rich-v2.bin"] = image(2, RICH_KVS, RICH_TENSORS)
    seeds["split-00001-of-00002.bin"] = image(3, [
        kv("general.architecture", STR, s("llama")),
        kv("split.no", U16, struct.pack("<H", 0)),
        kv("split.count", U16, struct.pack("<H", 2)),
        kv("split.tensors.count", I32, struct.pack("<i", 3)),
    ], [("a", [8, 2], F32T, 64), ("b", [32], Q8_0, 34)])
    # hostile neighbours (each one defect away from valid)
    seeds["bad-type-hole.bin"] = image(3, [kv("general.architecture", STR, s("llama"))],
                                       [("w", [8, 2], 4, 64)])
    seeds["bad-q4_0-row33.bin"] = image(3, [], [("w", [33, 1], Q4_0, 64)])
    seeds["bad-alignment-48.bin"] = image(3, [kv("general.alignment", U32, struct.pack("<I", 48))],
                                          [("w", [8], F32T, 32)])
    seeds["bad-nested-array.bin"] = hdr(3, 0, 1) + kv("a", ARR, struct.pack("<IQ", ARR, 1) +
                                                      struct.pack("<IQ", U8, 1) + b"\0") + b"\0" * 16
    # regressions of bugs fixed in src/gguf/gguf.c: a duplicate key after many keys
    # (the quadratic check), and an f64 too large for gguf_get_f32
    many = [kv("k.%d" % i, U8, b"\0") for i in range(400)]
    seeds["regress-dup-key-late.bin"] = image(3, many + [kv("k.17", U8, b"\1")], [])
    seeds["regress-f64-huge.bin"] = image(3, [kv("x", F64, struct.pack("<d", -1e300))], [("w", [8], F32T, 32)])
    for name, data in seeds.items():
        assert len(data) < 65536
        with open(name, "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
