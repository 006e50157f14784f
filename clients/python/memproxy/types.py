"""Typed results of the MEM.* verbs, read from RESP2 (flat field/value arrays) or RESP3 (maps)
replies, with or without `decode_responses`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional


class MemproxyError(Exception):
    """An error reply of memproxy or Redis. `code` is Redis's error code (`ERR`, `NOPERM`, `OOM`,
    `NOAUTH`, `READONLY`, `WRONGTYPE`, …), `message` the rest of the line."""

    def __init__(self, code: str, message: str):
        super().__init__(f"{code} {message}")
        self.code = code
        self.message = message


def text(v: Any) -> Optional[str]:
    if v is None:
        return None
    if isinstance(v, (bytes, bytearray)):
        return v.decode("utf-8", "replace")
    return str(v)


def num(v: Any) -> Optional[float]:
    """A double: a float under RESP3, a bulk string under RESP2."""
    return None if v is None else float(text(v) if isinstance(v, (bytes, bytearray)) else v)


def integer(v: Any) -> Optional[int]:
    return None if v is None else int(text(v) if isinstance(v, (bytes, bytearray)) else v)


def _ttl(m: Dict[str, Any]) -> int:
    """A reply's `ttl` (-1: none)."""
    t = integer(m.get("ttl"))
    return -1 if t is None else t


def as_map(v: Any) -> Dict[str, Any]:
    """A MEM.* map: a dict under RESP3, a flat `field, value, …` list under RESP2."""
    if v is None:
        return {}
    if isinstance(v, dict):
        return {text(k): x for k, x in v.items()}
    items = list(v)
    return {text(items[i]): items[i + 1] for i in range(0, len(items) - 1, 2)}


@dataclass
class Hit:
    """A recalled (or listed) memory."""

    id: str
    text: str
    kind: Optional[str] = None
    user: Optional[str] = None
    namespace: Optional[str] = None
    source_thread: Optional[str] = None
    created_ts: Optional[float] = None
    hit_count: int = 0
    ttl: int = -1
    distance: Optional[float] = None
    score: Optional[float] = None
    retrieval: Optional[str] = None

    @classmethod
    def parse(cls, v: Any) -> "Hit":
        m = as_map(v)
        return cls(
            id=text(m.get("id")) or "",
            text=text(m.get("text")) or "",
            kind=text(m.get("kind")),
            user=text(m.get("user")),
            namespace=text(m.get("namespace")),
            source_thread=text(m.get("source_thread")),
            created_ts=num(m.get("created_ts")),
            hit_count=integer(m.get("hit_count")) or 0,
            ttl=_ttl(m),
            distance=num(m.get("distance")),
            score=num(m.get("score")),
            retrieval=text(m.get("retrieval")),
        )


@dataclass
class Remembered:
    """What MEM.REMEMBER did: a new memory, or a hit on the nearest one (`deduped`)."""

    id: str
    deduped: bool
    distance: Optional[float]
    ttl: int

    @classmethod
    def parse(cls, v: Any) -> "Remembered":
        m = as_map(v)
        return cls(
            id=text(m.get("id")) or "",
            deduped=bool(integer(m.get("deduped"))),
            distance=num(m.get("distance")),
            ttl=_ttl(m),
        )


@dataclass
class Turn:
    """One MEM.TURN: what it recalled for the prompt, what it remembered, the event's id."""

    thread: str
    turn_count: int
    recalled: List[Hit]
    remembered: Optional[Remembered]
    event: Optional[str]

    @classmethod
    def parse(cls, v: Any) -> "Turn":
        m = as_map(v)
        rem = m.get("remembered")
        return cls(
            thread=text(m.get("thread")) or "",
            turn_count=integer(m.get("turn_count")) or 0,
            recalled=[Hit.parse(h) for h in (m.get("recalled") or [])],
            remembered=Remembered.parse(rem) if rem else None,
            event=text(m.get("event")),
        )


@dataclass
class Message:
    role: str
    content: str
    ts: Optional[float] = None


@dataclass
class Session:
    """A thread's working memory (MEM.SESSION GET)."""

    thread_id: str
    user: Optional[str]
    agent: Optional[str]
    goal: str
    scratchpad: str
    turn_count: int
    recent_turns: List[Message]
    ttl: int
    fields: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, v: Any) -> "Session":
        m = as_map(v)
        turns = []
        for t in m.get("recent_turns") or []:
            tm = as_map(t)
            turns.append(Message(text(tm.get("role")) or "", text(tm.get("content")) or "", num(tm.get("ts"))))
        return cls(
            thread_id=text(m.get("thread_id")) or "",
            user=text(m.get("user")),
            agent=text(m.get("agent")),
            goal=text(m.get("goal")) or "",
            scratchpad=text(m.get("scratchpad")) or "",
            turn_count=integer(m.get("turn_count")) or 0,
            recent_turns=turns,
            ttl=_ttl(m),
            fields={k: (text(x) if isinstance(x, (bytes, bytearray)) else x) for k, x in m.items()},
        )


@dataclass
class Event:
    id: str
    action: str
    detail: str
    ts: Optional[float]

    @classmethod
    def parse(cls, v: Any) -> "Event":
        m = as_map(v)
        return cls(text(m.get("id")) or "", text(m.get("action")) or "", text(m.get("detail")) or "", num(m.get("ts")))


@dataclass
class Merge:
    """One group MEM.CONSOLIDATE merged (or, with dry_run, would merge)."""

    kept: str
    merged: List[str]
    hit_count: int
    ttl: int

    @classmethod
    def parse(cls, v: Any) -> "Merge":
        m = as_map(v)
        return cls(
            kept=text(m.get("kept")) or "",
            merged=[text(x) or "" for x in (m.get("merged") or [])],
            hit_count=integer(m.get("hit_count")) or 0,
            ttl=_ttl(m),
        )


def plain(v: Any) -> Any:
    """A reply as plain Python values (maps as dicts where the RESP3 reply has them)."""
    if isinstance(v, (bytes, bytearray)):
        return v.decode("utf-8", "replace")
    if isinstance(v, dict):
        return {text(k): plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    return v
