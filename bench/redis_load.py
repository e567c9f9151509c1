"""Sends N script calls to a Redis on PORT, pipelined 64 at a time, as the
instruction counts of bench/redis-callgrind.sh need: 1,000 keys, and the
time passed by the client, 5 µs further each call (a realistic rate: real
time would crawl under valgrind and roll every window on every call), except
for counter-time.

Usage: python3 bench/redis_load.py PORT WHICH N
WHICH is baseline, counter (two limits), counter1 (one limit), counter-small
(two small limits), log, log-steady, log-100, bucket, bucket2, or
counter-time (two limits, the time read from the server's TIME).

The log's TTL runs on the server's clock, its windows on the client's:
under valgrind "log"'s keys (TTL 21 ms, 1,000 keys) expire between calls,
and it measures fresh keys. log-steady is a log whose keys outlive the
run: 500 in 5 s beside 5,000 in 1,000 s (TTL 2,000 s), on 10 keys with the
client's time 5 ms further each call, so that each key's 5 s window holds
100 stamps and the key 5,000. log-100 is paced the
same way: one limit of 100 in 4 s,
80 stamps in its window.
"""
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def script(which):
    if which == "baseline":
        # The yardstick of benches/redis.rs, read from there.
        text = (ROOT / "benches" / "redis.rs").read_text()
        return re.search(r'const BASELINE: &str = "(.*?)";', text, re.S).group(1).encode()
    # The store's own text for the policy (benches/drivers/redis_script.rs).
    return subprocess.run(
        ["cargo", "run", "-q", "--release", "--features", "redis", "--example", "redis_script", which],
        cwd=ROOT, check=True, capture_output=True,
    ).stdout


def arguments(which):
    """The arguments the store passes after now, for the policy."""
    if which == "baseline":
        return []
    return subprocess.run(
        ["cargo", "run", "-q", "--release", "--features", "redis", "--example", "redis_script", "--", "--args", which],
        cwd=ROOT, check=True, capture_output=True,
    ).stdout.decode().split("\n")[:-1]


def command(*args):
    out = b"*%d\r\n" % len(args)
    for arg in args:
        arg = arg if isinstance(arg, bytes) else str(arg).encode()
        out += b"$%d\r\n%s\r\n" % (len(arg), arg)
    return out


def main():
    port, which, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    connection = socket.create_connection(("127.0.0.1", port))
    replies = connection.makefile("rb")

    def read():
        line = replies.readline()
        if line[:1] == b"-":
            raise SystemExit("redis error: %s" % line.decode().strip())
        if line[:1] == b"$" and int(line[1:]) >= 0:
            return replies.read(int(line[1:]) + 2)[:-2]
        if line[:1] == b"*":
            return [read() for _ in range(int(line[1:]))]
        return line[1:-2]

    keys, step = (10, 5000) if which in ("log-steady", "log-100") else (1000, 5)
    connection.sendall(command("SCRIPT", "LOAD", script(which)))
    sha = read()
    rest = arguments(which)
    start = int(time.time() * 1e6)
    sent = 0
    while sent < n:
        batch = min(64, n - sent)
        out = b""
        for i in range(sent, sent + batch):
            key = i % keys
            now = start + step * i
            if which == "baseline":
                out += command("EVALSHA", sha, 2, "b:{%d}:prev" % key, "b:{%d}:cur" % key, 60_000)
            elif which == "counter-time":
                out += command("EVALSHA", sha, 1, "tsw:{%d}:bench" % key, "", *rest)
            else:
                out += command("EVALSHA", sha, 1, "tsw:{%d}:bench" % key, now, *rest)
        connection.sendall(out)
        for _ in range(batch):
            read()
        sent += batch


main()
