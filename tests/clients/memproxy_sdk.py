"""The Python SDK (clients/python) against a real memproxy: Memory and AsyncMemory over RESP2 and
RESP3, decoded or not, errors with their codes, tool definitions and tool calls, and the LangGraph
store (put/get/search/delete/list_namespaces, batch and async forms, a graph whose node stores and
recalls through `store`, namespaces that never see each other's items).
usage: python memproxy_sdk.py PORT"""
import asyncio
import os
import sys

import redis

import memproxy
from memproxy import AsyncMemory, Hit, Memory, MemproxyError
from memproxy import tools as mtools

PORT = int(sys.argv[1])
TAG = f"sdk{os.getpid()}"
checks = 0


def ok(cond, what):
    global checks
    checks += 1
    if not cond:
        raise AssertionError(what)


def raises(code, f):
    try:
        f()
    except MemproxyError as e:
        ok(e.code == code and "\n" not in str(e), f"{code}: got {e.code} {e}")
        return e
    raise AssertionError(f"expected {code}")


def verbs(mem, label):
    user, thread = f"{TAG}-{label}", f"{TAG}-t-{label}"
    r = mem.remember("The user is allergic to peanuts.", user=user, kind="semantic")
    ok(len(r.id) == 12 and not r.deduped and r.ttl == -1, f"remember {r}")
    again = mem.remember("The user is allergic to peanuts!", user=user, kind="semantic")
    ok(again.deduped and again.id == r.id and again.distance < 0.2, f"dedup {again}")
    mem.remember("The user's cat is called Pixel.", user=user, kind="semantic")
    hits = mem.recall("Does the user have any food allergies?", user=user, k=3)
    ok(hits and isinstance(hits[0], Hit) and hits[0].id == r.id, f"recall {hits}")
    h = hits[0]
    ok(h.text == "The user is allergic to peanuts." and h.hit_count == 1 and h.retrieval == "auto", f"hit {h}")
    ok(0 <= h.distance < 0.67 and h.score is not None and h.user == user and h.namespace == "default", f"hit {h}")
    ok(mem.recall("What is the capital of Peru?", user=user) == [], "nothing unrelated")
    ok(mem.recall("peanuts", user=user, mode="keyword")[0].id == r.id, "keyword")
    t = mem.turn(thread, "user", "Any snack ideas for the user?", user=user, remember="skip")
    ok(t.thread == thread and t.turn_count == 1 and t.remembered is None and t.event, f"turn {t}")
    t2 = mem.turn(thread, "assistant", "Try roasted chickpeas.", user=user, remember="episodic")
    ok(t2.turn_count == 2 and t2.remembered is not None and not t2.remembered.deduped, f"turn {t2}")
    s = mem.session(thread)
    ok(s.turn_count == 2 and [m.role for m in s.recent_turns] == ["user", "assistant"], f"session {s}")
    mem.set_goal(thread, "plan snacks")
    mem.set_scratchpad(thread, "no nuts")
    s = mem.session(thread)
    ok(s.goal == "plan snacks" and s.scratchpad == "no nuts" and s.ttl > 0, f"goal {s}")
    ev = mem.events(thread, count=10)
    ok(len(ev) >= 2 and ev[0].action, f"events {ev}")
    fresh = mem.start_session(user=user)
    ok(fresh and mem.session(fresh) is not None, "new session")
    ok(mem.end_session(fresh) >= 1 and mem.session(fresh) is None, "end session")
    listed = mem.list(user=user)
    ok(len(listed) == 3 and all(x.text for x in listed), f"list {listed}")
    ok(len(mem.list(user=user, offset=0, count=1)) == 1, "list LIMIT")
    ok(mem.consolidate(user=user, dry_run=True) == [], "consolidate dry run")
    info = mem.info()
    ok(info["dim"] == 384 and "recall_auto_threshold" in info, f"info {info}")
    v = mem.embed("hello")
    ok(len(v) == 384 and abs(sum(x * x for x in v) - 1) < 1e-3, "embed")
    e = raises("ERR", lambda: mem.recall("x", user=user, k=0))
    ok("K must be" in e.message, e.message)
    ok(mem.forget(r.id) == 1 and mem.forget(r.id) == 0, "forget id")
    ok(mem.forget(user=user) == 2, "forget scope")
    try:
        mem.forget()
        ok(False, "forget without an id or a user")
    except ValueError:
        ok(True, "")


def errors_keep_codes():
    admin = redis.Redis(port=PORT, decode_responses=True)
    name = f"{TAG}-reader"
    admin.execute_command("ACL", "SETUSER", name, "on", f">{name}pw", "~*", "&*", "+@all", "-@write")
    reader = Memory(redis.Redis(port=PORT, username=name, password=f"{name}pw"))
    raises("NOPERM", lambda: reader.remember("The user likes tea.", user=f"{TAG}-ro"))
    ok(reader.recall("tea", user=f"{TAG}-ro") == [], "a reader may recall")
    admin.execute_command("ACL", "DELUSER", name)
    admin.close()


async def async_verbs(proto):
    mem = AsyncMemory(f"redis://127.0.0.1:{PORT}", protocol=proto)
    user = f"{TAG}-async{proto}"
    r = await mem.remember("The user drinks oolong tea.", user=user)
    hits = await asyncio.gather(*[mem.recall("What tea does the user like?", user=user) for _ in range(4)])
    ok(all(h and h[0].id == r.id for h in hits), f"async recall {hits}")
    t = await mem.turn(f"{TAG}-at{proto}", "user", "hi", user=user, remember=False)
    ok(t.turn_count == 1, "async turn")
    ok(await mem.forget(user=user) == 1, "async forget")
    raises_async = None
    try:
        await mem.recall("x", user=user, k=0)
    except MemproxyError as e:
        raises_async = e.code
    ok(raises_async == "ERR", "async error code")
    await mem.redis.aclose()


def tool_definitions():
    cat = mtools.catalog()
    names = [t["name"] for t in cat]
    ok(names == ["remember", "recall", "forget", "turn", "session"], names)
    oa = mtools.openai_tools()
    ok(all(t["type"] == "function" and t["function"]["parameters"]["type"] == "object" for t in oa), "openai")
    an = mtools.anthropic_tools(["recall"])
    ok(len(an) == 1 and an[0]["input_schema"]["required"] == ["query"], "anthropic")
    mem = Memory(f"redis://127.0.0.1:{PORT}", decode_responses=True)
    user = f"{TAG}-tools"
    out = mem.call_tool("remember", {"text": "The user's bike is a red Brompton.", "user": user})
    ok(len(out["id"]) == 12, f"call remember {out}")
    out = mem.call_tool("recall", {"query": "What bike does the user ride?", "user": user, "k": 2})
    ok(out and out[0]["text"] == "The user's bike is a red Brompton.", f"call recall {out}")
    out = mem.call_tool("session", {"action": "new", "user": user})
    ok(out["thread"], "call session new")
    ok(mem.call_tool("forget", {"user": user}) == 1, "call forget")


def langgraph_store():
    try:
        from langgraph.config import get_store
        from langgraph.graph import END, START, StateGraph

        from memproxy.langgraph import MemproxyStore
    except ImportError as e:
        raise AssertionError(f"langgraph is not installed (scripts/setup.sh installs it): {e}")
    from typing import TypedDict

    store = MemproxyStore(Memory(f"redis://127.0.0.1:{PORT}"), prefix=f"{TAG}:lg")
    a, b = (f"{TAG}a", "memories"), (f"{TAG}b", "memories")
    store.put(a, "food", {"text": "I am allergic to peanuts.", "topic": "health"})
    store.put(a, "pet", {"text": "My cat is called Pixel.", "topic": "home"})
    store.put(b, "food", {"text": "I love peanut butter.", "topic": "health"})
    item = store.get(a, "food")
    ok(item and item.key == "food" and item.value["topic"] == "health" and item.namespace == a, f"get {item}")
    ok(store.get(a, "nope") is None, "get missing")
    found = store.search(a, query="Does the user have food allergies?", limit=3)
    ok(found and found[0].key == "food" and found[0].score > 0.3, f"search {found}")
    ok(all(i.namespace == a for i in found), "other namespaces never seen")
    ok(store.search((f"{TAG}a",), filter={"topic": "home"})[0].key == "pet", "filter, prefix")
    ok(store.search(a, filter={"topic": {"$ne": "home"}})[0].key == "food", "filter $ne")
    ok({i.key for i in store.search(a)} == {"food", "pet"}, "list by namespace")
    created = item.created_at
    store.put(a, "food", {"text": "I am allergic to shellfish, not peanuts.", "topic": "health"})
    again = store.get(a, "food")
    ok(again.created_at == created and again.updated_at >= created and "shellfish" in again.value["text"], "update")
    hits = store.search(a, query="Can the user eat shrimp?", limit=5)
    ok(hits and hits[0].key == "food" and len([h for h in hits if h.key == "food"]) == 1, f"replaced {hits}")
    spaces = store.list_namespaces(prefix=(f"{TAG}a",))
    ok(spaces == [a], f"list_namespaces {spaces}")
    ok(store.list_namespaces(prefix=(f"{TAG}a",), max_depth=1) == [(f"{TAG}a",)], "max_depth")
    store.delete(a, "pet")
    ok(store.get(a, "pet") is None, "delete")
    # BaseStore's contract, tried as a new user would: search(query, limit=n) returns the n best
    # items with their scores, however loosely the query matches (memproxy's default recall gates
    # and answered [] here).
    c = (f"{TAG}c", "memories")
    store.put(c, "diet", {"text": "Alice is vegetarian and avoids fish."})
    store.put(c, "job", {"text": "Alice works night shifts at the hospital."})
    best = store.search(c, query="what should I cook for her?", limit=2)
    ok(len(best) == 2 and best[0].key == "diet" and best[0].score >= best[1].score, f"search ranks {best}")
    gated = MemproxyStore(Memory(f"redis://127.0.0.1:{PORT}"), prefix=f"{TAG}:lg", search_mode="auto")
    ok(gated.search(c, query="What is the capital of Peru?", limit=2) == [], "search_mode auto gates")
    for k in ("diet", "job"):
        store.delete(c, k)
    store.put(a, "raw", {"blob": 1}, index=False)
    ok(store.get(a, "raw").value == {"blob": 1}, "unindexed put")

    async def run_async():
        await store.aput(b, "sport", {"text": "I climb on Tuesdays."})
        got = await store.aget(b, "sport")
        hits = await store.asearch(b, query="When do I go climbing?")
        return got, hits

    got, hits = asyncio.run(run_async())
    ok(got and hits and hits[0].key == "sport", f"async store {hits}")

    class State(TypedDict):
        user: str
        said: str
        recalled: list

    def remember_and_recall(state: State):
        st = get_store()
        ns = (state["user"], "memories")
        st.put(ns, "latest", {"text": state["said"]})
        return {"recalled": [i.value["text"] for i in st.search(ns, query="Which city did I move to?")]}

    g = StateGraph(State)
    g.add_node("memory", remember_and_recall)
    g.add_edge(START, "memory")
    g.add_edge("memory", END)
    app = g.compile(store=store)
    out = app.invoke({"user": f"{TAG}graph", "said": "I moved to Lisbon last spring.", "recalled": []})
    ok(out["recalled"] == ["I moved to Lisbon last spring."], f"graph {out}")
    other = store.search((f"{TAG}a", "memories"), query="Which city did I move to?")
    ok(all(i.key != "latest" for i in other), "the graph's item stays in its namespace")
    for ns in (a, b, (f"{TAG}graph", "memories")):
        for i in store.search(ns, limit=100):
            store.delete(ns, i.key)
    ok(store.list_namespaces(prefix=(f"{TAG}a",)) == [], "emptied namespaces leave the list")


for proto in (2, 3):
    for decode in (True, False):
        verbs(Memory(f"redis://127.0.0.1:{PORT}", protocol=proto, decode_responses=decode), f"{proto}{decode}")
    verbs(Memory(redis.Redis(port=PORT, protocol=proto)), f"client{proto}")
    asyncio.run(async_verbs(proto))
errors_keep_codes()
tool_definitions()
langgraph_store()
print(f"memproxy SDK {memproxy.__version__}: {checks} passed, 0 failed")
