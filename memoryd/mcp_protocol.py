"""The part of MCP a tools-only server speaks: JSON-RPC 2.0, one message per line on stdio.

Written here rather than taken from the official SDK because of time: importing the SDK
takes over a second, and Codex and Claude Code send a session's first model request
without waiting for a server that slow, so memoryd's tools were missing from one session
in seven (issue 32.4). This module imports nothing heavy; the tools' own work (the
daemon's client) is loaded on the first call. The test suite drives it with the SDK's
client, in-process and over stdio, so the two stay in step.

Tools are plain async functions; their input schema comes from their signatures
(str, int, float, bool, list[str], and `X | None`), and a refused argument is one line
that names the argument and never repeats its value.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import sys
import threading
import types
import typing
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import structlog

from memoryd.errors import ToolError

#: The revisions reachable by the initialize handshake, oldest first; a client asking for
#: another gets the newest (the spec's counter-offer). Tools work the same in all of them.
PROTOCOL_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS = -32700, -32600, -32601, -32602

Tool = Callable[..., Awaitable[str]]


@dataclass(frozen=True)
class Annotations:
    """MCP tool annotations: what a tool does to memory, for a client deciding whether it
    may run without asking."""

    read_only: bool
    destructive: bool = False
    idempotent: bool = False

    def wire(self) -> dict[str, bool]:
        notes = {"readOnlyHint": self.read_only, "openWorldHint": False}
        if not self.read_only:
            notes |= {"destructiveHint": self.destructive, "idempotentHint": self.idempotent}
        return notes


_JSON_TYPES: dict[Any, str] = {str: "string", int: "integer", float: "number",
                               bool: "boolean"}


def _type_schema(hint: Any) -> dict[str, Any]:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        inner = [_type_schema(arg) for arg in typing.get_args(hint)]
        return {"anyOf": inner}
    if hint is type(None):
        return {"type": "null"}
    if typing.get_origin(hint) is list:
        (item,) = typing.get_args(hint)
        return {"type": "array", "items": _type_schema(item)}
    if hint in _JSON_TYPES:
        return {"type": _JSON_TYPES[hint]}
    raise TypeError(f"no JSON schema for {hint!r}")


def _fits(value: Any, schema: dict[str, Any]) -> bool:
    if "anyOf" in schema:
        return any(_fits(value, option) for option in schema["anyOf"])
    kind = schema["type"]
    if kind == "null":
        return value is None
    if kind == "array":
        return isinstance(value, list) and all(_fits(v, schema["items"]) for v in value)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer())
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, str)


def _named(schema: dict[str, Any]) -> str:
    if "anyOf" in schema:
        return " or ".join(_named(option) for option in schema["anyOf"])
    if schema["type"] == "array":
        return f"a list of {_named(schema['items'])}s"
    return {"null": "null", "integer": "an integer", "number": "a number",
            "boolean": "true or false", "string": "a string"}[schema["type"]]


@dataclass
class _Registered:
    name: str
    description: str
    annotations: Annotations
    function: Tool
    properties: dict[str, dict[str, Any]] = field(default_factory=dict)
    required: list[str] = field(default_factory=list)

    def listing(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description,
                "inputSchema": {"type": "object", "properties": self.properties,
                                "required": self.required},
                "annotations": self.annotations.wire()}

    def arguments(self, given: Any) -> dict[str, Any]:
        """The call's arguments, checked against the schema: one line when refused."""
        if given is None:
            given = {}
        if not isinstance(given, dict):
            raise ToolError(f"{self.name}: arguments: must be an object")
        problems = [f"{name}: required" for name in self.required if name not in given]
        for name, value in given.items():
            schema = self.properties.get(name)
            if schema is not None and not _fits(value, schema):
                problems.append(f"{name}: must be {_named(schema)}")
        if problems:
            raise ToolError(f"{self.name}: " + "; ".join(problems))
        return {name: int(value) if self.properties[name].get("type") == "integer"
                and isinstance(value, float) else value
                for name, value in given.items() if name in self.properties}


class Server:
    """A tools-only MCP server: register tools with `tool`, then `run` it on stdio or
    answer messages one at a time with `handle` (what tests do in-process)."""

    def __init__(self, name: str, version: str, instructions: str) -> None:
        self.name = name
        self.version = version
        self.instructions = instructions
        self._tools: dict[str, _Registered] = {}
        #: Run once the client has gone, before the loop ends (a store opened in-process
        #: is closed then, not by the interpreter at exit).
        self.on_close: list[Callable[[], Awaitable[None]]] = []

    def tool(self, *, description: str, annotations: Annotations
             ) -> Callable[[Tool], Tool]:
        def register(function: Tool) -> Tool:
            hints = typing.get_type_hints(function)
            entry = _Registered(function.__name__, description, annotations, function)
            for name, parameter in inspect.signature(function).parameters.items():
                schema = _type_schema(hints[name])
                if parameter.default is inspect.Parameter.empty:
                    entry.required.append(name)
                else:
                    schema["default"] = parameter.default
                entry.properties[name] = schema
            self._tools[entry.name] = entry
            return function
        return register

    async def handle(self, message: Any) -> dict[str, Any] | None:
        """The answer to one JSON-RPC message; None for a notification or a response."""
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            return _error(None, INVALID_REQUEST, "not a JSON-RPC 2.0 message")
        method = message.get("method")
        if "id" not in message:
            return None  # a notification (initialized, cancelled) or a client's response
        ident = message["id"]
        if not isinstance(method, str):
            return _error(ident, INVALID_REQUEST, "no method")
        params = message.get("params") or {}
        if method == "initialize":
            asked = params.get("protocolVersion") if isinstance(params, dict) else None
            version = asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[-1]
            return _result(ident, {
                "protocolVersion": version,
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": {"name": self.name, "version": self.version},
                "instructions": self.instructions})
        if method == "ping":
            return _result(ident, {})
        if method == "tools/list":
            return _result(ident, {"tools": [t.listing() for t in self._tools.values()]})
        if method == "tools/call":
            return _result(ident, await self._call(params))
        return _error(ident, METHOD_NOT_FOUND, f"method not found: {method}")

    async def _call(self, params: Any) -> dict[str, Any]:
        name = params.get("name") if isinstance(params, dict) else None
        entry = self._tools.get(name) if isinstance(name, str) else None
        try:
            if entry is None:
                raise ToolError(f"unknown tool: {name}")
            text = await entry.function(**entry.arguments(params.get("arguments")))
        except ToolError as exc:
            return _refused(" ".join(str(exc).split()))
        except Exception as exc:  # a defect: the agent gets one line, the log the rest
            structlog.get_logger("memoryd.mcp").exception("mcp_tool_failed", tool=name)
            return _refused(f"{name}: failed ({type(exc).__name__})")
        return {"content": [{"type": "text", "text": text}], "isError": False}

    def run(self, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> None:
        """Serve on stdio until the client closes stdin; calls run concurrently."""
        asyncio.run(self._serve(stdin or sys.stdin.buffer, stdout or sys.stdout.buffer))

    async def _serve(self, stdin: BinaryIO, stdout: BinaryIO) -> None:
        loop = asyncio.get_running_loop()
        lines: asyncio.Queue[bytes | None] = asyncio.Queue()

        def read() -> None:
            # A thread, not the event loop's pipe reader: stdin may be a file, a pipe or
            # a terminal, and a client closing it mid-call must end the loop quietly.
            for line in iter(stdin.readline, b""):
                loop.call_soon_threadsafe(lines.put_nowait, line)
            loop.call_soon_threadsafe(lines.put_nowait, None)

        threading.Thread(target=read, name="mcp-stdin", daemon=True).start()
        pending: set[asyncio.Task[None]] = set()

        def write(answer: dict[str, Any] | None) -> None:
            if answer is None:
                return
            try:
                stdout.write(json.dumps(answer, ensure_ascii=False).encode() + b"\n")
                stdout.flush()
            except (BrokenPipeError, ValueError):
                pass  # the client has gone; nothing is left to tell it

        async def answer(message: Any) -> None:
            if isinstance(message, list):  # a batch (2025-03-26): each answered alone
                for one in message:
                    write(await self.handle(one))
                return
            write(await self.handle(message))

        while (line := await lines.get()) is not None:
            if not line.strip():
                continue
            try:
                message = json.loads(line)
            except ValueError:
                write(_error(None, PARSE_ERROR, "not JSON"))
                continue
            except RecursionError:  # `[[[[…` thousands deep: not a request, never a crash
                write(_error(None, PARSE_ERROR, "nested too deeply"))
                continue
            task = asyncio.create_task(answer(message))
            pending.add(task)
            task.add_done_callback(pending.discard)
        if pending:
            await asyncio.wait(pending, timeout=10)
        for close in self.on_close:
            await close()


def _refused(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": True}


def _result(ident: Any, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "result": result}


def _error(ident: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "error": {"code": code, "message": message}}
