#!/usr/bin/env python3
"""Redis memory per stored memory at several embedding dimensions (docs/OPERATIONS.md, "Memory per
memory at another dimension").

For each dimension: a fresh redis-server with the pinned RedisJSON and RediSearch (scripts/setup.sh),
memproxy's index (src/store/schema.rs: the guide's fields, HNSW FLOAT32 COSINE on `embedding` and
`windows`), N short memories in the guide's layout (12-word texts, random unit vectors), then the
growth of `used_memory` per memory once everything is indexed, and `MEMORY USAGE` of a document
alone. No Python packages needed.

usage: dim_memory.py [N=4000] [DIM ...=384 768 1024 1536 3072]   (MEMPROXY_DEPS: the deps dir)
"""
import json
import os
import random
import socket
import struct
import subprocess
import sys
import time

DEPS = os.environ.get("MEMPROXY_DEPS", os.path.expanduser("~/.cache/memproxy"))
WORDS = ("the user prefers tea coffee lives in Lisbon Porto allergic to peanuts works on the "
         "inventory service flaky test note asked about deployment").split()


def resp(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Conn:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.f = self.sock.makefile("rb")

    def read(self):
        line = self.f.readline()
        kind, body = line[:1], line[1:-2]
        if kind in (b"+", b":", b","):
            return body.decode()
        if kind == b"-":
            raise RuntimeError(body.decode())
        if kind == b"$":
            n = int(body)
            return None if n < 0 else self.f.read(n + 2)[:-2].decode(errors="replace")
        if kind == b"*":
            return [self.read() for _ in range(int(body))]
        raise RuntimeError(line)

    def cmd(self, *args):
        self.sock.sendall(resp(*args))
        return self.read()

    def pipe(self, cmds):
        self.sock.sendall(b"".join(resp(*c) for c in cmds))
        return [self.read() for _ in cmds]


def used_memory(c):
    info = c.cmd("INFO", "memory")
    return int(next(l for l in info.split("\r\n") if l.startswith("used_memory:")).split(":")[1])


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def create_args(dim):
    a = ["FT.CREATE", "agentmem:idx", "ON", "JSON", "PREFIX", "1", "agent:mem:", "SCHEMA"]
    for path, name, ty in [("$.text", "text", "TEXT"), ("$.user", "user", "TAG"),
                           ("$.namespace", "namespace", "TAG"), ("$.kind", "kind", "TAG"),
                           ("$.source_thread", "source_thread", "TAG"),
                           ("$.created_ts", "created_ts", "NUMERIC"),
                           ("$.hit_count", "hit_count", "NUMERIC")]:
        a += [path, "AS", name, ty]
        if ty == "NUMERIC":
            a.append("SORTABLE")
        if ty == "TAG" and name != "kind":
            a.append("CASESENSITIVE")
    for path, name in [("$.embedding", "embedding"), ("$.windows[*]", "windows")]:
        a += [path, "AS", name, "VECTOR", "HNSW", "6", "TYPE", "FLOAT32", "DIM", str(dim),
              "DISTANCE_METRIC", "COSINE"]
    return a


def measure(dim, n):
    port = free_port()
    server = subprocess.Popen(
        [DEPS + "/bin/redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--loadmodule", DEPS + "/lib/rejson.so",
         "--loadmodule", DEPS + "/lib/redisearch.so"], stdout=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                c = Conn(port)
                c.cmd("PING")
                break
            except OSError:
                time.sleep(0.1)
        c.cmd(*create_args(dim))
        before = used_memory(c)
        rnd = random.Random(dim)
        for start in range(0, n, 200):
            cmds = []
            for i in range(start, min(n, start + 200)):
                v = [rnd.gauss(0, 1) for _ in range(dim)]
                norm = sum(x * x for x in v) ** 0.5
                v = [float("%.9g" % struct.unpack("f", struct.pack("f", x / norm))[0]) for x in v]
                doc = {"id": "%012x" % i, "user": "bench", "namespace": "default",
                       "kind": "semantic", "source_thread": "",
                       "text": " ".join(rnd.choice(WORDS) for _ in range(12)), "embedding": v,
                       "created_ts": 1.7e9 + i, "hit_count": 0}
                cmds.append(("JSON.SET", "agent:mem:%012x" % i, "$", json.dumps(doc)))
            c.pipe(cmds)
        while True:
            info = c.cmd("FT.INFO", "agentmem:idx")
            d = dict(zip(info[::2], info[1::2]))
            if str(d.get("percent_indexed")) in ("1", "1.0") and str(d.get("indexing")) == "0":
                break
            time.sleep(0.2)
        after = used_memory(c)
        doc = sum(int(c.cmd("MEMORY", "USAGE", "agent:mem:%012x" % i)) for i in range(50)) / 50
        print(f"dim {dim:>5}: {(after - before) / n:>8.0f} bytes per memory "
              f"(the JSON document alone: {doc:.0f}), {n} memories", flush=True)
    finally:
        server.kill()
        server.wait()


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
    dims = [int(d) for d in sys.argv[2:]] or [384, 768, 1024, 1536, 3072]
    for dim in dims:
        measure(dim, n)


if __name__ == "__main__":
    main()
