"""LangGraph long-term memory on memproxy: `MemproxyStore`, a `BaseStore`.

Mapping (docs: clients/python/README.md):
- a namespace `(a, b, c)` is memproxy user `a`, memproxy namespace `b.c` (`default` for `(a,)`);
  LangGraph forbids `.` in labels, so the join is unambiguous;
- each item is one memory (its text: the value's string fields, or the `fields` asked for, embedded by
  memproxy, never deduplicated onto another item) plus one field of a hash beside it,
  `<prefix>:items:<namespace as JSON>`, holding the key, the value and the timestamps, so that
  `get(namespace, key)` is one HGET; `<prefix>:ids:<namespace as JSON>` maps memory ids back to keys,
  and the set `<prefix>:namespaces` lists the namespaces in use;
- `search(prefix, query=…, limit=n)` is MEM.RECALL in each namespace under the prefix, and keeps
  `BaseStore`'s contract: the n best items by similarity, each with its score `1 − distance`. It
  ranks without a gate (`search_mode="rank"`, the default here); `search_mode="auto"` also drops
  everything when the question touches none of the namespace's memories (memproxy's default for
  MEM.RECALL), any other mode is MEM.RECALL's; `filter` compares the value's fields ($eq, $ne, $gt,
  $gte, $lt, $lte, or a plain value for equality); without a query, items newest first.

The hashes and the set are ordinary Redis commands, sent through the same memproxy connection. A put is
remember → hash → forget the replaced memory: an interrupted put leaves at most an orphan memory,
which no search returns (its id is in no namespace's map). TTLs are not supported (`supports_ttl` is
False); the async forms run the sync ones in a thread.
"""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timezone
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)

from .client import Memory
from .types import text


def _scope(namespace: Tuple[str, ...]) -> Tuple[str, str]:
    if not namespace:
        raise ValueError("a namespace needs at least one label (the user)")
    return namespace[0], ".".join(namespace[1:]) or "default"


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _strings(v: Any) -> List[str]:
    if isinstance(v, str):
        return [v]
    if isinstance(v, dict):
        return [s for x in v.values() for s in _strings(x)]
    if isinstance(v, (list, tuple)):
        return [s for x in v for s in _strings(x)]
    return []


def _field(value: Dict[str, Any], path: str) -> Any:
    cur: Any = value
    for part in path.split("."):
        if path == "$":
            return value
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


_OPS = {
    "$eq": lambda a, b: a == b,
    "$ne": lambda a, b: a != b,
    "$gt": lambda a, b: a is not None and a > b,
    "$gte": lambda a, b: a is not None and a >= b,
    "$lt": lambda a, b: a is not None and a < b,
    "$lte": lambda a, b: a is not None and a <= b,
}


def _matches(value: Dict[str, Any], flt: Optional[Dict[str, Any]]) -> bool:
    for path, want in (flt or {}).items():
        got = _field(value, path)
        if isinstance(want, dict) and want and all(k in _OPS for k in want):
            try:
                if not all(_OPS[op](got, arg) for op, arg in want.items()):
                    return False
            except TypeError:
                return False
        elif got != want:
            return False
    return True


class MemproxyStore(BaseStore):
    """A LangGraph `BaseStore` whose items are memproxy memories (see the module's docs)."""

    supports_ttl = False

    def __init__(
        self,
        memory: Union[Memory, str],
        *,
        fields: Optional[Sequence[str]] = None,
        search_mode: Optional[str] = "rank",
        prefix: str = "memproxy:lgstore",
    ):
        self.memory = Memory(memory) if isinstance(memory, str) else memory
        self.fields = list(fields) if fields else None
        self.search_mode = search_mode
        self.prefix = prefix

    # -- keys (plain Redis, through memproxy) --
    def _items(self, ns: Tuple[str, ...]) -> str:
        return f"{self.prefix}:items:{json.dumps(list(ns))}"

    def _ids(self, ns: Tuple[str, ...]) -> str:
        return f"{self.prefix}:ids:{json.dumps(list(ns))}"

    def _registry(self) -> str:
        return f"{self.prefix}:namespaces"

    def _text(self, value: Dict[str, Any], index: Any) -> Optional[str]:
        if index is False:
            return None
        fields = index if isinstance(index, list) else self.fields
        parts = _strings(value) if not fields else [s for f in fields for s in _strings(_field(value, f))]
        joined = "\n".join(p for p in parts if p.strip())
        return joined or None

    def _item(self, ns: Tuple[str, ...], key: str, raw: Any, score: Optional[float] = None) -> Optional[Item]:
        if raw is None:
            return None
        d = json.loads(text(raw))
        kw = dict(
            namespace=ns,
            key=key,
            value=d["value"],
            created_at=datetime.fromisoformat(d["created_at"]),
            updated_at=datetime.fromisoformat(d["updated_at"]),
        )
        return SearchItem(score=score, **kw) if score is not None else Item(**kw)

    # -- operations --
    def _get(self, op: GetOp) -> Optional[Item]:
        return self._item(tuple(op.namespace), op.key, self.memory._do(["HGET", self._items(tuple(op.namespace)), op.key]))

    def _put(self, op: PutOp) -> None:
        ns = tuple(op.namespace)
        user, mns = _scope(ns)
        old_raw = self.memory._do(["HGET", self._items(ns), op.key])
        old = json.loads(text(old_raw)) if old_raw is not None else None
        if op.value is None:
            if old is not None:
                if old.get("memory_id"):
                    self.memory.forget(old["memory_id"])
                    self.memory._do(["HDEL", self._ids(ns), old["memory_id"]])
                self.memory._do(["HDEL", self._items(ns), op.key])
                if int(self.memory._do(["HLEN", self._items(ns)])) == 0:
                    self.memory._do(["SREM", self._registry(), json.dumps(list(ns))])
            return
        now = _now().isoformat()
        body = self._text(dict(op.value), op.index)
        memory_id = None
        if body is not None:
            memory_id = self.memory.remember(body, user=user, namespace=mns, kind="semantic", dedup=False).id
            self.memory._do(["HSET", self._ids(ns), memory_id, op.key])
        doc = {
            "value": dict(op.value),
            "memory_id": memory_id,
            "created_at": old["created_at"] if old else now,
            "updated_at": now,
        }
        self.memory._do(["HSET", self._items(ns), op.key, json.dumps(doc)])
        self.memory._do(["SADD", self._registry(), json.dumps(list(ns))])
        if old and old.get("memory_id") and old["memory_id"] != memory_id:
            self.memory.forget(old["memory_id"])
            self.memory._do(["HDEL", self._ids(ns), old["memory_id"]])

    def _namespaces(self) -> List[Tuple[str, ...]]:
        return sorted(tuple(json.loads(text(m))) for m in self.memory._do(["SMEMBERS", self._registry()]) or [])

    def _search(self, op: SearchOp) -> List[SearchItem]:
        prefix = tuple(op.namespace_prefix)
        spaces = [ns for ns in self._namespaces() if ns[: len(prefix)] == prefix]
        found: List[SearchItem] = []
        want = op.offset + op.limit
        for ns in spaces:
            if op.query:
                user, mns = _scope(ns)
                k = min(1000, want * (4 if op.filter else 1))
                hits = self.memory.recall(op.query, user=user, namespace=mns, k=k, mode=self.search_mode)
                if not hits:
                    continue
                keys = self.memory._do(["HMGET", self._ids(ns), *[h.id for h in hits]])
                for h, key in zip(hits, keys):
                    if key is None:
                        continue  # not this namespace's (another tuple in the same scope) or orphaned
                    key = text(key)
                    raw = self.memory._do(["HGET", self._items(ns), key])
                    score = 1.0 - h.distance if h.distance is not None else h.score
                    item = self._item(ns, key, raw, score=score)
                    if item is not None and _matches(item.value, op.filter):
                        found.append(item)
            else:
                flat = self.memory._do(["HGETALL", self._items(ns)]) or {}
                pairs = flat.items() if isinstance(flat, dict) else zip(flat[::2], flat[1::2])
                for key, raw in pairs:
                    d = json.loads(text(raw))
                    if _matches(d["value"], op.filter):
                        found.append(
                            SearchItem(
                                namespace=ns,
                                key=text(key),
                                value=d["value"],
                                created_at=datetime.fromisoformat(d["created_at"]),
                                updated_at=datetime.fromisoformat(d["updated_at"]),
                            )
                        )
        if op.query:
            found.sort(key=lambda i: -(i.score or 0.0))
        else:
            found.sort(key=lambda i: i.updated_at, reverse=True)
        return found[op.offset : op.offset + op.limit]

    def _list(self, op: ListNamespacesOp) -> List[Tuple[str, ...]]:
        def fits(ns: Tuple[str, ...]) -> bool:
            for c in op.match_conditions or ():
                path = tuple(c.path)
                if len(path) > len(ns):
                    return False
                part = ns[: len(path)] if c.match_type == "prefix" else ns[len(ns) - len(path) :]
                if not all(p == "*" or p == x for p, x in zip(path, part)):
                    return False
            return True

        out: List[Tuple[str, ...]] = []
        for ns in self._namespaces():
            if not fits(ns):
                continue
            if op.max_depth is not None:
                ns = ns[: op.max_depth]
            if ns not in out:
                out.append(ns)
        return out[op.offset : op.offset + op.limit]

    def batch(self, ops: Iterable[Op]) -> List[Result]:
        out: List[Result] = []
        for op in ops:
            if isinstance(op, GetOp):
                out.append(self._get(op))
            elif isinstance(op, PutOp):
                out.append(self._put(op))
            elif isinstance(op, SearchOp):
                out.append(self._search(op))
            elif isinstance(op, ListNamespacesOp):
                out.append(self._list(op))
            else:
                raise ValueError(f"unknown operation {op!r}")
        return out

    async def abatch(self, ops: Iterable[Op]) -> List[Result]:
        ops = list(ops)
        return await asyncio.get_running_loop().run_in_executor(None, self.batch, ops)
