#!/usr/bin/env python3
"""The guide's per-turn flow written as a user would without memproxy: redis-py, onnxruntime on
the same model file, client-side embedding, and the guide's commands (HGETALL + HSET/EXPIRE for the
session, FT.SEARCH KNN for recall and for dedup, JSON.SET + EXPIRE for the write, XADD for the event).

usage: turn_baseline.py PORT MODEL_DIR SECONDS CLIENTS [CLIENTS ...]
Prints one JSON line per client count: {"clients", "turns_per_s", "p50_ms", "p99_ms"}.
"""
import json
import os
import secrets
import sys
import threading
import time

import numpy as np
import onnxruntime as ort
import redis
from tokenizers import Tokenizer

PORT, MODEL, SECONDS = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
so = ort.SessionOptions()
so.intra_op_num_threads = os.cpu_count()
so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL  # what won for memproxy
session = ort.InferenceSession(f"{MODEL}/model.onnx", so)
tokenizer = Tokenizer.from_file(f"{MODEL}/tokenizer.json")
tokenizer.enable_truncation(256)
tokenizer.no_padding()


def embed(text):
    e = tokenizer.encode(text)
    ids = np.array([e.ids], dtype=np.int64)
    mask = np.array([e.attention_mask], dtype=np.int64)
    out = session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})[0]
    return out[0].astype(np.float32)


def knn(r, vec, flt, k):
    q = f"({flt})=>[KNN {k} @embedding $vec AS distance]"
    return r.execute_command("FT.SEARCH", "agentmem:idx", q, "PARAMS", 2, "vec", vec.tobytes(),
                             "SORTBY", "distance", "RETURN", 3, "text", "kind", "distance",
                             "LIMIT", 0, k, "DIALECT", 2)


def turn(r, thread, role, content, user):
    vec = embed(content)
    key = f"agent:session:{thread}"
    s = r.hgetall(key)
    turns = json.loads(s.get(b"recent_turns", b"[]"))
    now = time.time()
    turns.append({"role": role, "content": content, "ts": now})
    turns = turns[-20:]
    p = r.pipeline(transaction=False)
    p.hset(key, mapping={"thread_id": thread, "user": user, "recent_turns": json.dumps(turns), "last_active_ts": now})
    p.hincrby(key, "turn_count", 1)
    p.expire(key, 3600)
    p.execute()
    flt = f"@user:{{{user}}} @namespace:{{default}}"
    knn(r, vec, flt, 5)
    nearest = knn(r, vec, flt + " @kind:{episodic}", 1)
    if nearest[0] > 0 and float(nearest[2][nearest[2].index(b"distance") + 1]) <= 0.20:
        r.execute_command("JSON.NUMINCRBY", nearest[1], "$.hit_count", 1)
        detail = "deduped"
    else:
        mid = secrets.token_hex(6)
        doc = {"id": mid, "user": user, "namespace": "default", "kind": "episodic", "source_thread": thread,
               "text": content, "embedding": vec.tolist(), "created_ts": now, "hit_count": 0}
        p = r.pipeline(transaction=False)
        p.execute_command("JSON.SET", f"agent:mem:{mid}", "$", json.dumps(doc))
        p.expire(f"agent:mem:{mid}", 604800)
        p.execute()
        detail = f"wrote {mid} as episodic"
    r.xadd(f"agent:events:{thread}", {"action": f"turn_appended:{role}", "detail": detail, "ts": now},
           maxlen=1000, approximate=True)


def sentence(i):
    subjects = ["The user", "My manager", "The customer", "Our team", "The agent", "A colleague", "The client", "My sister"]
    verbs = ["prefers", "asked about", "dislikes", "is planning", "mentioned", "forgot", "approved", "wants to revisit"]
    objects = ["concise answers without filler phrases", "the migration of the analytics warehouse to BigQuery",
               "a high-contrast light theme in editors and dashboards", "the postmortem for the order-routing outage",
               "restaurant suggestions that avoid peanuts", "the flaky test in the inventory service",
               "working in the Europe/Berlin time zone", "a weekly summary of open pull requests"]
    return f"{subjects[i % 8]} {verbs[(i // 8) % 8]} {objects[(i // 64) % 8]} (note {i})."


def run(clients):
    lat, lock = [], threading.Lock()
    start = time.perf_counter()

    def worker(c):
        r = redis.Redis(port=PORT)
        mine, i = [], 0
        while time.perf_counter() - start < SECONDS:
            t = time.perf_counter()
            turn(r, f"py-{clients}-{c}", "user", f"{sentence(c * 1000000 + i)} [py {clients}]", "benchpy")
            mine.append(time.perf_counter() - t)
            i += 1
        with lock:
            lat.extend(mine)

    ts = [threading.Thread(target=worker, args=(c,)) for c in range(clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    elapsed = time.perf_counter() - start
    lat.sort()
    pick = lambda p: lat[round((len(lat) - 1) * p)] * 1e3
    print(json.dumps({"clients": clients, "turns_per_s": len(lat) / elapsed, "p50_ms": pick(0.5), "p99_ms": pick(0.99)}), flush=True)


for c in sys.argv[4:]:
    run(int(c))
