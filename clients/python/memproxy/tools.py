"""Tool definitions for function-calling agents: memproxy's MCP tools (`tools.json`, the output of
`memproxy tools`, checked against the binary by the tests) in OpenAI's and Anthropic's shapes.
`Memory.call_tool(name, arguments)` runs a call a model made."""

from __future__ import annotations

import copy
import json
from importlib import resources
from typing import Any, Dict, List, Optional, Sequence


def catalog() -> List[Dict[str, Any]]:
    """The tools as memproxy describes them: `name`, `description`, `input_schema`."""
    return json.loads(resources.files(__package__).joinpath("tools.json").read_text("utf-8"))


def _pick(names: Optional[Sequence[str]]) -> List[Dict[str, Any]]:
    tools = catalog()
    if names is None:
        return tools
    unknown = set(names) - {t["name"] for t in tools}
    if unknown:
        raise ValueError(f"unknown tools: {sorted(unknown)}")
    return [t for t in tools if t["name"] in names]


def openai_tools(names: Optional[Sequence[str]] = None) -> List[Dict[str, Any]]:
    """For OpenAI's Chat Completions `tools=`: `{"type": "function", "function": {...}}`."""
    return [
        {
            "type": "function",
            "function": {
                "name": t["name"],
                "description": t["description"],
                "parameters": copy.deepcopy(t["input_schema"]),
            },
        }
        for t in _pick(names)
    ]


def anthropic_tools(names: Optional[Sequence[str]] = None) -> List[Dict[str, Any]]:
    """For Anthropic's Messages API `tools=`: `{"name", "description", "input_schema"}`."""
    return [copy.deepcopy(t) for t in _pick(names)]
