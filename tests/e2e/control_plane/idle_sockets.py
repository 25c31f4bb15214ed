#!/usr/bin/env python3
"""Holds idle TCP connections to a port, as a slow or careless client does.

idle_sockets.py PORT READY_FILE SPEC... where SPEC is SRC:N (N connections
bound to source address SRC, e.g. 127.0.1.7:16). With --partial each sends
an unfinished request line and then nothing. Once every connection is made it
writes READY_FILE (the count) and holds them until stdin closes or it is killed.
"""
import os
import socket
import sys


def main() -> int:
    args = sys.argv[1:]
    partial = "--partial" in args
    args = [a for a in args if a != "--partial"]
    port, ready, specs = int(args[0]), args[1], args[2:]
    held = []
    for spec in specs:
        src, n = spec.rsplit(":", 1)
        for _ in range(int(n)):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((src, 0))
            s.connect(("127.0.0.1", port))
            if partial:
                s.sendall(b"GET /api/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            held.append(s)
    with open(ready + ".tmp", "w") as f:
        f.write(str(len(held)))
    os.rename(ready + ".tmp", ready)
    sys.stdin.read()  # until the test closes our stdin (or kills us)
    return 0


if __name__ == "__main__":
    sys.exit(main())
