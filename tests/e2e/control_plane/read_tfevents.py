#!/usr/bin/env python3
"""Reads a run's TensorBoard event files (one per attempt) without TensorFlow:
checks every record's masked CRC32C, decodes Event/Summary protobuf fields, and
requires each file's version record, the first file to start at step 1, and at
least MIN_STEPS distinct steps over all files carrying the scalar tags shardd
writes.  Usage: read_tfevents.py MIN_STEPS FILE..."""
import struct
import sys


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def fields(buf):
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = varint(buf, i)
        elif wt == 1:
            v, i = buf[i:i + 8], i + 8
        elif wt == 5:
            v, i = buf[i:i + 4], i + 4
        elif wt == 2:
            n, i = varint(buf, i)
            v, i = buf[i:i + n], i + n
        else:
            raise ValueError("wire type %d" % wt)
        yield num, v


def varint(buf, i):
    v = shift = 0
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, i


def read(path):
    data = open(path, "rb").read()
    at, events = 0, []
    while at < len(data):
        header = data[at:at + 8]
        (n,) = struct.unpack("<Q", header)
        (hcrc,) = struct.unpack("<I", data[at + 8:at + 12])
        assert hcrc == masked(header), "%s: length CRC mismatch at %d" % (path, at)
        body = data[at + 12:at + 12 + n]
        (dcrc,) = struct.unpack("<I", data[at + 12 + n:at + 16 + n])
        assert dcrc == masked(body), "%s: data CRC mismatch at %d" % (path, at)
        ev = {"step": 0, "scalars": {}}
        for num, v in fields(body):
            if num == 2:
                ev["step"] = v
            elif num == 3:
                ev["version"] = v.decode()
            elif num == 5:
                for _, value in fields(v):
                    kv = dict(fields(value))
                    ev["scalars"][kv[1].decode()] = struct.unpack("<f", kv[2])[0]
        events.append(ev)
        at += 16 + n
    assert events and events[0].get("version") == "brain.Event:2", "%s: no brain.Event:2 version record" % path
    return events


def main(min_steps, paths):
    files = [read(p) for p in sorted(paths)]
    steps = [e for events in files for e in events[1:] if e["scalars"]]
    distinct = sorted({e["step"] for e in steps})
    assert len(distinct) >= min_steps, "only %d distinct steps in %d file(s)" % (len(distinct), len(files))
    for tag in ("loss", "lr", "grad_norm", "tokens_per_s", "loss_scale", "step_time_s"):
        assert tag in steps[-1]["scalars"], "no %s scalar" % tag
    first = [e["step"] for e in files[0][1:] if e["scalars"]]
    assert first[:5] == [1, 2, 3, 4, 5], "the first file's steps are out of order: %s" % first[:5]
    print("tfevents: %d file(s), %d records, %d distinct steps, last loss %.4f" %
          (len(files), sum(len(f) for f in files), len(distinct), steps[-1]["scalars"]["loss"]))


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2:])
