"""redis-py (sync and asyncio, RESP2 and RESP3) against memproxy: every MEM.* verb, ordinary
traffic, pipelines, transactions and pub/sub. usage: python redis_py_client.py PORT"""
import asyncio
import os
import sys

import redis
import redis.asyncio as aredis

PORT = int(sys.argv[1])
TAG = f"py{os.getpid()}"
checks = 0


def ok(cond, what):
    global checks
    checks += 1
    if not cond:
        raise AssertionError(what)


def as_map(v):
    """RESP3 maps arrive as dicts, RESP2 ones as flat lists."""
    if isinstance(v, dict):
        return v
    return dict(zip(v[0::2], v[1::2]))


def every_verb(r, proto):
    user, thread = f"{TAG}-{proto}", f"{TAG}-t{proto}"
    ok(r.execute_command("MEM.PING") in ("PONG", True), "MEM.PING")
    rem = as_map(r.execute_command("MEM.REMEMBER", "The user sails every weekend.", "USER", user, "KIND", "semantic"))
    ok(len(rem["id"]) == 12 and rem["deduped"] == 0, f"MEM.REMEMBER {rem}")
    again = as_map(r.execute_command("MEM.REMEMBER", "The user sails every weekend!", "USER", user, "KIND", "semantic"))
    ok(again["deduped"] == 1 and again["id"] == rem["id"], f"dedup {again}")
    hits = r.execute_command("MEM.RECALL", "Does the user like boats?", "USER", user)
    ok(len(hits) == 1 and as_map(hits[0])["text"] == "The user sails every weekend.", f"MEM.RECALL {hits}")
    for mode in ("keyword", "hybrid"):
        ok(len(r.execute_command("MEM.RECALL", "sails weekend", "USER", user, "MODE", mode)) == 1, mode)
    s = as_map(r.execute_command("MEM.SESSION", "START", thread, "USER", user, "GOAL", "plan a trip"))
    ok(s["created"] == 1, f"SESSION START {s}")
    ok(r.execute_command("MEM.SESSION", "SCRATCHPAD", thread, "likes boats") in ("OK", True), "SCRATCHPAD")
    ok(r.execute_command("MEM.SESSION", "GOAL", thread, "plan a sailing trip") in ("OK", True), "GOAL")
    t = as_map(r.execute_command("MEM.TURN", thread, "user", "Does the user go sailing on weekends?", "USER", user))
    ok(t["turn_count"] == 1 and len(t["recalled"]) == 1, f"MEM.TURN {t}")
    g = as_map(r.execute_command("MEM.SESSION", "GET", thread))
    ok(g["goal"] == "plan a sailing trip" and len(g["recent_turns"]) == 1, f"SESSION GET {g}")
    ok(len(r.execute_command("MEM.EVENTS", thread)) >= 3, "MEM.EVENTS")
    listed = r.execute_command("MEM.LIST", "USER", user)
    ok(len(listed) == 2, f"MEM.LIST {listed}")
    info = as_map(r.execute_command("MEM.INFO"))
    ok(info["index"] == "agentmem:idx" and info["dim"] == 384, f"MEM.INFO {info}")
    ok(len(r.execute_command("MEM.EMBED", "hello")) == 384, "MEM.EMBED")
    ok(any("MEM.RECALL" in l for l in r.execute_command("MEM.HELP")), "MEM.HELP")
    ok(r.execute_command("MEM.FORGET", rem["id"]) == 1, "MEM.FORGET id")
    ok(r.execute_command("MEM.FORGET", "USER", user) == 1, "MEM.FORGET USER")
    ok(r.execute_command("MEM.SESSION", "END", thread) == 1, "SESSION END")
    try:
        r.execute_command("MEM.RECALL", "x", "K", "0")
        ok(False, "an error")
    except redis.ResponseError as e:
        ok("K must be an integer" in str(e), str(e))


def ordinary(r, proto):
    k = f"{TAG}:{proto}:k"
    ok(r.set(k, "v") and r.get(k) == "v", "SET/GET")
    p = r.pipeline(transaction=False)
    p.set(k, "1").incr(k).execute_command("MEM.PING").get(k)
    res = p.execute()
    ok(res[1] == 2 and res[3] == "2", f"pipeline {res}")
    p = r.pipeline(transaction=True)
    p.incr(k).incr(k)
    ok(p.execute() == [3, 4], "MULTI/EXEC")
    ps = r.pubsub()
    ps.subscribe(f"{TAG}-chan")
    ok(ps.get_message(timeout=5)["type"] == "subscribe", "subscribe")
    r.publish(f"{TAG}-chan", "hi")
    m = ps.get_message(timeout=5)
    ok(m and m["data"] == "hi", f"message {m}")
    ps.close()
    info = r.execute_command("COMMAND", "INFO", "mem.recall")
    # redis-py parses the command table into a dict keyed by name.
    ok("mem.recall" in info if isinstance(info, dict) else info[0] is not None, f"COMMAND INFO {info}")


async def run_async(proto):
    r = aredis.Redis(port=PORT, protocol=proto, decode_responses=True)
    user = f"{TAG}-a{proto}"
    rem = as_map(await r.execute_command("MEM.REMEMBER", "The user drinks oolong tea.", "USER", user))
    ok(len(rem["id"]) == 12, "async MEM.REMEMBER")
    results = await asyncio.gather(*[
        r.execute_command("MEM.RECALL", "What tea does the user like?", "USER", user) for _ in range(8)
    ])
    ok(all(len(h) == 1 for h in results), "async concurrent MEM.RECALL")
    async with r.pipeline(transaction=False) as p:
        p.execute_command("MEM.RECALL", "tea", "USER", user, "MODE", "keyword")
        p.set(f"{TAG}:a", "1")
        res = await p.execute()
    ok(len(res[0]) == 1 and res[1], "async pipeline")
    ok(await r.execute_command("MEM.FORGET", "USER", user) == 1, "async MEM.FORGET")
    await r.aclose()


for proto in (2, 3):
    r = redis.Redis(port=PORT, protocol=proto, decode_responses=True)
    every_verb(r, proto)
    ordinary(r, proto)
    r.close()
    asyncio.run(run_async(proto))
print(f"redis-py {redis.__version__}: {checks} passed, 0 failed")
