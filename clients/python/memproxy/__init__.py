"""memproxy for Python: `Memory` / `AsyncMemory` (one method per MEM.* verb, typed results),
`memproxy.tools` (function-calling definitions), `memproxy.langgraph.MemproxyStore` (a LangGraph
`BaseStore`; needs the `langgraph` extra)."""

from .client import AsyncMemory, Memory
from .types import Event, Hit, MemproxyError, Merge, Message, Remembered, Session, Turn

__all__ = [
    "AsyncMemory",
    "Event",
    "Hit",
    "Memory",
    "MemproxyError",
    "Merge",
    "Message",
    "Remembered",
    "Session",
    "Turn",
]
__version__ = "0.1.0"
