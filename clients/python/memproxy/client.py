"""`Memory` and `AsyncMemory`: one method per MEM.* verb, keyword arguments for its options,
typed results. Both work on a URL or on a redis-py client the caller already has (RESP2 or RESP3,
decoded or not): MEM.* are ordinary commands to redis-py."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import redis
import redis.asyncio
from redis import exceptions as rex

from .types import Event, Hit, Merge, MemproxyError, Remembered, Session, Turn, as_map, plain, text

# redis-py strips the code of the errors it maps to classes; older versions keep no status_code.
_CODES = {
    rex.NoPermissionError: "NOPERM",
    rex.OutOfMemoryError: "OOM",
    rex.ReadOnlyError: "READONLY",
    rex.NoScriptError: "NOSCRIPT",
    rex.ExecAbortError: "EXECABORT",
    rex.BusyLoadingError: "LOADING",
}


def _error(e: Exception) -> MemproxyError:
    msg = str(e)
    code = getattr(e, "status_code", None)
    if not code:
        code = next((c for cls, c in _CODES.items() if isinstance(e, cls)), None)
    if not code and isinstance(e, rex.AuthenticationError):
        code = "NOAUTH" if "NOAUTH" in msg or "Authentication required" in msg else "WRONGPASS"
    if not code:
        head, _, rest = msg.partition(" ")
        if head.isupper() and head.isalpha():
            code, msg = head, rest
        else:
            code = "ERR"
    return MemproxyError(code, msg)


def _user(user: Optional[str]) -> List[Any]:
    """`USER u` for the verbs on an existing thread, when the caller names its user."""
    return ["USER", user] if user is not None else []


def _scope(args: List[Any], user, namespace, kind=None, thread=None) -> None:
    for word, v in (("USER", user), ("NS", namespace), ("KIND", kind), ("THREAD", thread)):
        if v is not None:
            args += [word, v]


class _Verbs:
    """Argument lists and reply parsing shared by the sync and async clients."""

    @staticmethod
    def remember(text_, user, namespace, kind, thread, ttl, dedup, created, hits) -> List[Any]:
        a: List[Any] = ["MEM.REMEMBER", text_]
        _scope(a, user, namespace, kind, thread)
        if ttl is not None:
            a += ["PERSIST"] if ttl == 0 else ["TTL", int(ttl)]
        if dedup is False:
            a += ["NODEDUP"]
        elif dedup is not None and dedup is not True:
            a += ["DEDUP", float(dedup)]
        if created is not None:
            a += ["CREATED", float(created)]
        if hits is not None:
            a += ["HITS", int(hits)]
        return a

    @staticmethod
    def recall(query, user, namespace, kind, thread, k, threshold, mode, weights, at=None) -> List[Any]:
        a: List[Any] = ["MEM.RECALL", query]
        _scope(a, user, namespace, kind, thread)
        if k is not None:
            a += ["K", int(k)]
        if threshold is not None:
            a += ["THRESHOLD", float(threshold)]
        if mode is not None:
            a += ["MODE", mode]
        if weights is not None:
            a += ["WEIGHTS", float(weights[0]), float(weights[1])]
        if at is not None:
            a += ["AT", float(at)]
        return a

    @staticmethod
    def turn(thread, role, content, user, namespace, agent, remember, k, threshold, mode) -> List[Any]:
        a: List[Any] = ["MEM.TURN", thread, role, content]
        _scope(a, user, namespace)
        if agent is not None:
            a += ["AGENT", agent]
        if remember is not None:
            a += ["REMEMBER", "SKIP" if remember in (False, "skip", "SKIP") else remember]
        if k is not None:
            a += ["K", int(k)]
        if threshold is not None:
            a += ["THRESHOLD", float(threshold)]
        if mode is not None:
            a += ["MODE", mode]
        return a

    @staticmethod
    def forget(id, user, namespace, kind) -> List[Any]:
        if id is not None:
            if user is not None or namespace is not None or kind is not None:
                raise ValueError("forget takes an id or a scope (user, namespace, kind), not both")
            return ["MEM.FORGET", id]
        if user is None:
            raise ValueError("forget needs an id, or a user whose memories to erase")
        a: List[Any] = ["MEM.FORGET"]
        _scope(a, user, namespace, kind)
        return a

    @staticmethod
    def list(user, namespace, kind, offset, count) -> List[Any]:
        a: List[Any] = ["MEM.LIST"]
        _scope(a, user, namespace, kind)
        if count is not None:
            a += ["LIMIT", int(offset), int(count)]
        return a

    @staticmethod
    def consolidate(user, namespace, kind, threshold, dry_run) -> List[Any]:
        a: List[Any] = ["MEM.CONSOLIDATE"]
        _scope(a, user, namespace, kind)
        if threshold is not None:
            a += ["THRESHOLD", float(threshold)]
        if dry_run:
            a += ["DRYRUN"]
        return a

    @staticmethod
    def session_start(thread, user, agent, goal, ttl) -> List[Any]:
        a: List[Any] = ["MEM.SESSION", "START", thread] if thread is not None else ["MEM.SESSION", "NEW"]
        if user is not None:
            a += ["USER", user]
        if agent is not None:
            a += ["AGENT", agent]
        if goal is not None:
            a += ["GOAL", goal]
        if ttl is not None and thread is not None:
            a += ["TTL", int(ttl)]
        return a

    @staticmethod
    def tool_call(name: str, args: Dict[str, Any]) -> Tuple[str, Dict[str, Any]]:
        """A tool call (the catalog's names and arguments) as a method name and its keywords."""
        a = dict(args)
        scope = {"user": a.pop("user", None), "namespace": a.pop("namespace", None)}
        if name == "remember":
            return "remember", {"text": a.pop("text"), "kind": a.pop("kind", None), "ttl": a.pop("ttl", None), **scope}
        if name == "recall":
            return "recall", {
                "query": a.pop("query"),
                "kind": a.pop("kind", None),
                "k": a.pop("k", None),
                "threshold": a.pop("threshold", None),
                "mode": a.pop("mode", None),
                **scope,
            }
        if name == "forget":
            if a.get("id"):
                return "forget", {"id": a.pop("id")}
            return "forget", {"kind": a.pop("kind", None), **scope}
        if name == "turn":
            return "turn", {
                "thread": a.pop("thread"),
                "role": a.pop("role"),
                "content": a.pop("content"),
                "remember": a.pop("remember", None),
                "k": a.pop("k", None),
                "mode": a.pop("mode", None),
                **scope,
            }
        if name == "session":
            return "_session_tool", {
                "action": a.pop("action"),
                "thread": a.pop("thread", None),
                "user": scope["user"],
                "text_": a.pop("text", None),
            }
        raise ValueError(f"unknown tool {name!r}")


def _result(v: Any) -> Any:
    """A typed result as JSON-able data (for tool results)."""
    if isinstance(v, list):
        return [_result(x) for x in v]
    if hasattr(v, "__dataclass_fields__"):
        from dataclasses import asdict

        return asdict(v)
    return v


class Memory:
    """memproxy's verbs over a synchronous redis-py client.

    `Memory("redis://127.0.0.1:6380")`, `Memory(redis.Redis(...))`, or keyword arguments for
    `redis.Redis` (`Memory(host=..., port=..., protocol=3)`)."""

    def __init__(self, url_or_client: Union[str, "redis.Redis", None] = None, **kwargs: Any):
        if isinstance(url_or_client, str):
            self.redis = redis.Redis.from_url(url_or_client, **kwargs)
        elif url_or_client is None:
            self.redis = redis.Redis(**kwargs)
        else:
            self.redis = url_or_client

    def _do(self, args: Sequence[Any]) -> Any:
        try:
            return self.redis.execute_command(*args)
        except rex.ResponseError as e:
            raise _error(e) from None
        except rex.AuthenticationError as e:
            raise _error(e) from None

    def remember(self, text: str, *, user: Optional[str] = None, namespace: Optional[str] = None,
                 kind: Optional[str] = None, thread: Optional[str] = None, ttl: Optional[int] = None,
                 dedup: Union[bool, float, None] = None, created: Optional[float] = None,
                 hits: Optional[int] = None) -> Remembered:
        """MEM.REMEMBER. `ttl=0` keeps the memory forever (PERSIST); `dedup=False` is NODEDUP,
        a number the dedup distance."""
        return Remembered.parse(self._do(_Verbs.remember(text, user, namespace, kind, thread, ttl, dedup, created, hits)))

    def recall(self, query: str, *, user: Optional[str] = None, namespace: Optional[str] = None,
               kind: Optional[str] = None, thread: Optional[str] = None, k: Optional[int] = None,
               threshold: Optional[float] = None, mode: Optional[str] = None,
               weights: Optional[Tuple[float, float]] = None, at: Optional[float] = None) -> List[Hit]:
        """MEM.RECALL: the scope's memories relevant to `query`, best first. The default (`mode="auto"`)
        gates: empty when the question touches none of them. `mode="rank"` ranks without the gate (the
        k best, always: what a search API promises). `at`: the question's own time (unix seconds) for
        time phrases such as "last week"."""
        return [Hit.parse(h) for h in self._do(_Verbs.recall(query, user, namespace, kind, thread, k, threshold, mode, weights, at)) or []]

    def turn(self, thread: str, role: str, content: str, *, user: Optional[str] = None,
             namespace: Optional[str] = None, agent: Optional[str] = None,
             remember: Union[str, bool, None] = None, k: Optional[int] = None,
             threshold: Optional[float] = None, mode: Optional[str] = None) -> Turn:
        """MEM.TURN: recall for `content`, remember it (`remember="skip"` or False: don't), append it
        to the thread's session, log an event; one atomic step."""
        return Turn.parse(self._do(_Verbs.turn(thread, role, content, user, namespace, agent, remember, k, threshold, mode)))

    def session(self, thread: str, *, user: Optional[str] = None) -> Optional[Session]:
        """MEM.SESSION GET: the thread's working memory, or None. `user`: the thread's user (a
        session of another user is refused; required in front of a Redis Cluster)."""
        v = self._do(["MEM.SESSION", "GET", thread] + _user(user))
        return Session.parse(v) if v else None

    def start_session(self, thread: Optional[str] = None, *, user: Optional[str] = None,
                      agent: Optional[str] = None, goal: Optional[str] = None,
                      ttl: Optional[int] = None) -> str:
        """MEM.SESSION START (or NEW without a thread): the thread id."""
        return text(as_map(self._do(_Verbs.session_start(thread, user, agent, goal, ttl))).get("thread")) or ""

    def set_goal(self, thread: str, goal: str, *, user: Optional[str] = None) -> None:
        self._do(["MEM.SESSION", "GOAL", thread, goal] + _user(user))

    def set_scratchpad(self, thread: str, scratchpad: str, *, user: Optional[str] = None) -> None:
        self._do(["MEM.SESSION", "SCRATCHPAD", thread, scratchpad] + _user(user))

    def end_session(self, thread: str, *, user: Optional[str] = None) -> int:
        return int(self._do(["MEM.SESSION", "END", thread] + _user(user)))

    def events(self, thread: str, *, count: Optional[int] = None, user: Optional[str] = None) -> List[Event]:
        a: List[Any] = ["MEM.EVENTS", thread] + (["COUNT", int(count)] if count is not None else []) + _user(user)
        return [Event.parse(e) for e in self._do(a) or []]

    def forget(self, id: Optional[str] = None, *, user: Optional[str] = None,
               namespace: Optional[str] = None, kind: Optional[str] = None) -> int:
        """MEM.FORGET one memory by id (1 or 0), or a whole scope (the count deleted)."""
        return int(self._do(_Verbs.forget(id, user, namespace, kind)))

    def list(self, *, user: Optional[str] = None, namespace: Optional[str] = None,
             kind: Optional[str] = None, offset: int = 0, count: Optional[int] = None) -> List[Hit]:
        return [Hit.parse(h) for h in self._do(_Verbs.list(user, namespace, kind, offset, count)) or []]

    def consolidate(self, *, user: Optional[str] = None, namespace: Optional[str] = None,
                    kind: Optional[str] = None, threshold: Optional[float] = None,
                    dry_run: bool = False) -> List[Merge]:
        return [Merge.parse(m) for m in self._do(_Verbs.consolidate(user, namespace, kind, threshold, dry_run)) or []]

    def info(self) -> Dict[str, Any]:
        return {k: plain(v) for k, v in as_map(self._do(["MEM.INFO"])).items()}

    def embed(self, text: str) -> List[float]:
        return [float(x) for x in self._do(["MEM.EMBED", text])]

    def _session_tool(self, action: str, thread: Optional[str], user: Optional[str], text_: Optional[str]) -> Any:
        if action == "new":
            return {"thread": self.start_session(user=user)}
        if not thread:
            raise ValueError(f"session {action} needs a thread")
        if action == "get":
            return self.session(thread, user=user)
        if action == "goal":
            return self.set_goal(thread, text_ or "", user=user)
        if action == "scratchpad":
            return self.set_scratchpad(thread, text_ or "", user=user)
        if action == "end":
            return self.end_session(thread, user=user)
        raise ValueError(f"unknown session action {action!r}")

    def call_tool(self, name: str, arguments: Dict[str, Any]) -> Any:
        """Run one tool call of `memproxy.tools` (as a model asked for it): JSON-able result."""
        method, kw = _Verbs.tool_call(name, arguments)
        return _result(getattr(self, method)(**kw))


class AsyncMemory:
    """`Memory` over `redis.asyncio`: the same methods, as coroutines."""

    def __init__(self, url_or_client: Union[str, "redis.asyncio.Redis", None] = None, **kwargs: Any):
        if isinstance(url_or_client, str):
            self.redis = redis.asyncio.Redis.from_url(url_or_client, **kwargs)
        elif url_or_client is None:
            self.redis = redis.asyncio.Redis(**kwargs)
        else:
            self.redis = url_or_client

    async def _do(self, args: Sequence[Any]) -> Any:
        try:
            return await self.redis.execute_command(*args)
        except rex.ResponseError as e:
            raise _error(e) from None
        except rex.AuthenticationError as e:
            raise _error(e) from None

    async def remember(self, text: str, *, user=None, namespace=None, kind=None, thread=None,
                       ttl=None, dedup=None, created=None, hits=None) -> Remembered:
        return Remembered.parse(await self._do(_Verbs.remember(text, user, namespace, kind, thread, ttl, dedup, created, hits)))

    async def recall(self, query: str, *, user=None, namespace=None, kind=None, thread=None, k=None,
                     threshold=None, mode=None, weights=None, at=None) -> List[Hit]:
        return [Hit.parse(h) for h in await self._do(_Verbs.recall(query, user, namespace, kind, thread, k, threshold, mode, weights, at)) or []]

    async def turn(self, thread: str, role: str, content: str, *, user=None, namespace=None, agent=None,
                   remember=None, k=None, threshold=None, mode=None) -> Turn:
        return Turn.parse(await self._do(_Verbs.turn(thread, role, content, user, namespace, agent, remember, k, threshold, mode)))

    async def session(self, thread: str, *, user=None) -> Optional[Session]:
        v = await self._do(["MEM.SESSION", "GET", thread] + _user(user))
        return Session.parse(v) if v else None

    async def start_session(self, thread=None, *, user=None, agent=None, goal=None, ttl=None) -> str:
        return text(as_map(await self._do(_Verbs.session_start(thread, user, agent, goal, ttl))).get("thread")) or ""

    async def set_goal(self, thread: str, goal: str, *, user=None) -> None:
        await self._do(["MEM.SESSION", "GOAL", thread, goal] + _user(user))

    async def set_scratchpad(self, thread: str, scratchpad: str, *, user=None) -> None:
        await self._do(["MEM.SESSION", "SCRATCHPAD", thread, scratchpad] + _user(user))

    async def end_session(self, thread: str, *, user=None) -> int:
        return int(await self._do(["MEM.SESSION", "END", thread] + _user(user)))

    async def events(self, thread: str, *, count=None, user=None) -> List[Event]:
        a: List[Any] = ["MEM.EVENTS", thread] + (["COUNT", int(count)] if count is not None else []) + _user(user)
        return [Event.parse(e) for e in await self._do(a) or []]

    async def forget(self, id=None, *, user=None, namespace=None, kind=None) -> int:
        return int(await self._do(_Verbs.forget(id, user, namespace, kind)))

    async def list(self, *, user=None, namespace=None, kind=None, offset=0, count=None) -> List[Hit]:
        return [Hit.parse(h) for h in await self._do(_Verbs.list(user, namespace, kind, offset, count)) or []]

    async def consolidate(self, *, user=None, namespace=None, kind=None, threshold=None, dry_run=False) -> List[Merge]:
        return [Merge.parse(m) for m in await self._do(_Verbs.consolidate(user, namespace, kind, threshold, dry_run)) or []]

    async def info(self) -> Dict[str, Any]:
        return {k: plain(v) for k, v in as_map(await self._do(["MEM.INFO"])).items()}

    async def embed(self, text: str) -> List[float]:
        return [float(x) for x in await self._do(["MEM.EMBED", text])]

    async def _session_tool(self, action, thread, user, text_) -> Any:
        if action == "new":
            return {"thread": await self.start_session(user=user)}
        if not thread:
            raise ValueError(f"session {action} needs a thread")
        if action == "get":
            return await self.session(thread, user=user)
        if action == "goal":
            return await self.set_goal(thread, text_ or "", user=user)
        if action == "scratchpad":
            return await self.set_scratchpad(thread, text_ or "", user=user)
        if action == "end":
            return await self.end_session(thread, user=user)
        raise ValueError(f"unknown session action {action!r}")

    async def call_tool(self, name: str, arguments: Dict[str, Any]) -> Any:
        method, kw = _Verbs.tool_call(name, arguments)
        return _result(await getattr(self, method)(**kw))
