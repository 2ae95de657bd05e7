"""The models distillation may ask (`memory.llm.provider`).

- `openai`: any OpenAI-compatible `POST {base_url}/chat/completions` (OpenAI, vLLM,
  llama.cpp's server, LM Studio, Ollama's `/v1`);
- `anthropic`: the Messages API (`POST {base_url}/v1/messages`);
- `claude-cli`, `codex-cli`, `gemini-cli`: the user's own agent CLI, signed in, as the
  model (`claude -p`, `codex exec`, `gemini -p`): no key, billed to the user's plan.

Both HTTP providers are asked to stream their answer (server-sent events, read with
httpx-sse): `timeout` then bounds each wait for the next piece, not the whole answer, so a
slow local model (llama.cpp on a CPU) that keeps writing is not cut off, while one that
stalls is. A server that answers in one JSON body instead is read as such. The whole
answer still has a deadline (`ANSWER_DEADLINE_FACTOR` x `timeout`) and a size bound.

The key is read from MEMORYD_LLM_API_KEY only, sent only in its header, and never
appears in a log line or an error (errors name the provider, the URL and the status).
A 429, a 5xx, a timeout or a refused connection is `DistillUnavailable`: retried here
briefly (tenacity, honouring Retry-After up to a bound), then left to the worker, which
tries again later. A request the provider refuses as such (400, 413, 422) is
`DistillRefused` (counted against that segment); credentials or a model it does not
know (401, 403, 404) are a plain `DistillError`: the worker waits long before it sends
anything again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import structlog
from tenacity import (
    AsyncRetrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
)

from memoryd.config_memory import LlmSettings
from memoryd.errors import DistillError, DistillRefused, DistillUnavailable

log = structlog.get_logger("memoryd.distill")

API_KEY_ENV = "MEMORYD_LLM_API_KEY"
#: Set in an agent CLI run as the model: memoryd's own hooks in it answer nothing.
DISTILLING_ENV = "MEMORYD_DISTILLING"
#: The answer's length asked for (an answer holds at most a dozen short items).
MAX_ANSWER_TOKENS = 1024
#: Longest wait a Retry-After may ask of one call here (longer: left to the worker).
RETRY_AFTER_CAP = 30.0
ATTEMPTS = 3
ANTHROPIC_URL = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"
#: An agent CLI's own output read at most (its answer is a few KB).
CLI_OUTPUT_CAP = 4 << 20
#: An HTTP answer read at most (1,024 tokens are about 4 KB; a stream past this is not
#: an answer to this request).
HTTP_ANSWER_CAP = 256 << 10
#: A whole streamed answer may take this many times `timeout` (a piece may take one).
ANSWER_DEADLINE_FACTOR = 10


@dataclass(frozen=True, slots=True)
class Completion:
    text: str
    tokens_in: int
    tokens_out: int


class Provider(Protocol):
    name: str

    async def complete(self, system: str, user: str) -> Completion:
        """The model's answer to `user` under the instructions `system`."""
        ...

    async def close(self) -> None:
        ...


def estimate_tokens(text: str) -> int:
    """Tokens of `text` where a provider does not say (about four characters a token)."""
    return max(1, len(text) // 4)


def counted(completion: Completion, system: str, user: str) -> Completion:
    """`completion` with what its provider did not say it cost estimated from what was
    sent and answered: a server that omits `usage` must not spend the daily budget free."""
    if completion.tokens_in and completion.tokens_out:
        return completion
    return Completion(completion.text,
                      completion.tokens_in or estimate_tokens(system) + estimate_tokens(user),
                      completion.tokens_out or estimate_tokens(completion.text))


def shown_url(url: str) -> str:
    """`url` without user:password@ and without its query."""
    return re.sub(r"//[^/@\s]*@", "//", url).split("?", 1)[0]


def _retry_after(value: str | None) -> float | None:
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and seconds >= 0 else None


class _HttpProvider:
    """What the two HTTP providers share: the client, the status rules, the retries."""

    name = "http"

    def __init__(self, url: str, headers: dict[str, str], timeout: float,
                 transport: Any = None) -> None:
        import httpx  # only a daemon with a model configured loads it for this

        self._httpx = httpx
        self.url = url
        #: The URL as errors, logs and the audit trail may show it: no user:password@, no
        #: query (a key may ride in either).
        self.shown = shown_url(url)
        self._timeout = timeout
        self._client = httpx.AsyncClient(headers=headers, timeout=timeout,
                                         transport=transport)

    async def close(self) -> None:
        await self._client.aclose()

    async def complete(self, system: str, user: str) -> Completion:
        async for attempt in AsyncRetrying(
            retry=retry_if_exception(_soon_again),
            stop=stop_after_attempt(ATTEMPTS),
            wait=_wait, reraise=True,
        ):
            with attempt:
                return await self._once(system, user)
        raise AssertionError("tenacity re-raises the last failure")  # pragma: no cover

    async def _once(self, system: str, user: str) -> Completion:
        from httpx_sse import SSEError, aconnect_sse

        deadline = self._timeout * ANSWER_DEADLINE_FACTOR
        try:
            async with asyncio.timeout(deadline), aconnect_sse(
                    self._client, "POST", self.url, json=self._body(system, user)) as source:
                response = source.response
                await self._check_status(response)
                if response.headers.get("content-type", "").startswith("text/event-stream"):
                    stream = _Stream(self.shown, self.name)
                    async for event in source.aiter_sse():
                        if not event.data.strip() and event.event != "message_stop":
                            continue  # a keep-alive: no data to read
                        if self._event(event.event, event.data, stream):
                            return stream.completion()
                        stream.check_size()
                    raise DistillUnavailable(f"{self.shown}: the answer stopped before its"
                                             " end", provider=self.name)
                return self._read(json.loads(await _capped_body(response, self.shown,
                                                                self.name)))
        except TimeoutError:
            # Asking again at once would take as long: the worker's back-off waits first.
            raise DistillUnavailable(f"{self.shown}: no whole answer in {deadline:g} s",
                                     provider=self.name, retry_after=deadline) from None
        except self._httpx.TransportError as exc:
            # The exception's text may echo the request: its class only.
            raise DistillUnavailable(f"{self.shown}: {type(exc).__name__}",
                                     provider=self.name) from None
        except (SSEError, ValueError, KeyError, TypeError, IndexError, AttributeError):
            raise DistillRefused(f"{self.shown}: an answer of an unexpected shape",
                                 provider=self.name) from None

    async def _check_status(self, response: Any) -> None:
        status = response.status_code
        if status == 200:
            return
        await response.aclose()  # the error's body is never read (nor shown)
        if status == 429 or status >= 500:
            raise DistillUnavailable(f"{self.shown}: HTTP {status}", provider=self.name,
                                     retry_after=_retry_after(response.headers.get("retry-after")))
        if status in (400, 413, 422):
            raise DistillRefused(f"{self.shown}: HTTP {status}", provider=self.name)
        raise DistillError(f"{self.shown}: HTTP {status}", provider=self.name)

    def _body(self, system: str, user: str) -> dict[str, Any]:
        raise NotImplementedError

    def _read(self, data: Any) -> Completion:
        raise NotImplementedError

    def _event(self, event: str, data: str, stream: _Stream) -> bool:
        """Takes one server-sent event into `stream`; True once the answer is whole."""
        raise NotImplementedError


@dataclass(slots=True)
class _Stream:
    """A streamed answer as it arrives."""

    shown: str
    provider: str
    parts: list[str] = field(default_factory=list)
    size: int = 0
    tokens_in: int = 0
    tokens_out: int = 0

    def add(self, piece: Any) -> None:
        if isinstance(piece, str) and piece:
            self.parts.append(piece)
            self.size += len(piece)

    def check_size(self) -> None:
        if self.size > HTTP_ANSWER_CAP:
            raise _too_long(self.shown, self.provider)

    def failed(self, data: str) -> DistillUnavailable:
        """An error the provider reports inside the stream (overloaded, mid-answer)."""
        try:
            kind = json.loads(data).get("error", {}).get("type")
        except (ValueError, AttributeError):
            kind = None
        label = kind if isinstance(kind, str) and kind.isidentifier() else "an error"
        return DistillUnavailable(f"{self.shown}: {label} in the stream",
                                  provider=self.provider)

    def completion(self) -> Completion:
        text = "".join(self.parts)
        return Completion(text, self.tokens_in, self.tokens_out or estimate_tokens(text))


async def _capped_body(response: Any, shown: str, provider: str) -> bytes:
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > HTTP_ANSWER_CAP:
            raise _too_long(shown, provider)
    return bytes(body)


def _too_long(shown: str, provider: str) -> DistillRefused:
    return DistillRefused(f"{shown}: an answer longer than {HTTP_ANSWER_CAP // 1024} KB",
                          provider=provider)


def _soon_again(error: BaseException) -> bool:
    """Transient, and not asked to wait longer than a call here may (then the worker's
    back-off honours Retry-After)."""
    return isinstance(error, DistillUnavailable) and (
        error.retry_after is None or error.retry_after <= RETRY_AFTER_CAP)


def _wait(retry_state: Any) -> float:
    """Retry-After when the provider gave one (bounded), else exponential back-off."""
    outcome = retry_state.outcome
    error = outcome.exception() if outcome is not None else None
    if isinstance(error, DistillError) and error.retry_after is not None:
        return min(error.retry_after, RETRY_AFTER_CAP)
    return float(wait_exponential(multiplier=0.5, max=8.0)(retry_state))


class OpenAIChat(_HttpProvider):
    """Any OpenAI-compatible chat completions endpoint."""

    name = "openai"

    def __init__(self, settings: LlmSettings, transport: Any = None) -> None:
        key = os.environ.get(API_KEY_ENV, "")
        super().__init__(settings.base_url.rstrip("/") + "/chat/completions",
                         {"Authorization": f"Bearer {key}"} if key else {},
                         settings.timeout, transport)
        self.model = settings.model

    def _body(self, system: str, user: str) -> dict[str, Any]:
        return {"model": self.model, "temperature": 0, "max_tokens": MAX_ANSWER_TOKENS,
                "response_format": {"type": "json_object"},
                "stream": True, "stream_options": {"include_usage": True},
                "messages": [{"role": "system", "content": system},
                             {"role": "user", "content": user}]}

    def _read(self, data: Any) -> Completion:
        text = data["choices"][0]["message"]["content"]
        if not isinstance(text, str):
            raise TypeError("no text")
        usage = data.get("usage") or {}
        return Completion(text, int(usage.get("prompt_tokens") or 0),
                          int(usage.get("completion_tokens") or 0))

    def _event(self, event: str, data: str, stream: _Stream) -> bool:
        if data.strip() == "[DONE]":
            return True
        chunk = json.loads(data)
        if chunk.get("error"):
            raise stream.failed(data)
        for choice in chunk.get("choices") or []:
            stream.add((choice.get("delta") or {}).get("content"))
        usage = chunk.get("usage") or {}
        stream.tokens_in = int(usage.get("prompt_tokens") or stream.tokens_in)
        stream.tokens_out = int(usage.get("completion_tokens") or stream.tokens_out)
        return False


class AnthropicMessages(_HttpProvider):
    """The Anthropic Messages API."""

    name = "anthropic"

    def __init__(self, settings: LlmSettings, transport: Any = None) -> None:
        headers = {"anthropic-version": ANTHROPIC_VERSION}
        key = os.environ.get(API_KEY_ENV, "")
        if key:
            headers["x-api-key"] = key
        base = (settings.base_url or ANTHROPIC_URL).rstrip("/")
        super().__init__(base + "/v1/messages", headers, settings.timeout, transport)
        self.model = settings.model

    def _body(self, system: str, user: str) -> dict[str, Any]:
        return {"model": self.model, "max_tokens": MAX_ANSWER_TOKENS, "temperature": 0,
                "stream": True, "system": system, "messages": [{"role": "user", "content": user}]}

    def _read(self, data: Any) -> Completion:
        text = "".join(block["text"] for block in data["content"]
                       if block.get("type") == "text")
        usage = data.get("usage") or {}
        return Completion(text, int(usage.get("input_tokens") or 0),
                          int(usage.get("output_tokens") or 0))

    def _event(self, event: str, data: str, stream: _Stream) -> bool:
        # message_start, content_block_start/_delta/_stop, message_delta, message_stop,
        # ping, error (https://docs.anthropic.com/en/api/messages-streaming)
        if event == "message_stop":
            return True
        if event == "error":
            raise stream.failed(data)
        if event == "message_start":
            usage = json.loads(data)["message"].get("usage") or {}
            stream.tokens_in = int(usage.get("input_tokens") or 0) + int(
                usage.get("cache_read_input_tokens") or 0) + int(
                usage.get("cache_creation_input_tokens") or 0)
        elif event == "content_block_delta":
            delta = json.loads(data).get("delta") or {}
            if delta.get("type") == "text_delta":
                stream.add(delta.get("text"))
        elif event == "message_delta":
            usage = json.loads(data).get("usage") or {}
            stream.tokens_out = int(usage.get("output_tokens") or stream.tokens_out)
        return False


#: How each agent CLI is asked (the instructions as the argument, the conversation on
#: standard input; `codex exec` ignores standard input when given a prompt, so it gets
#: both there, after `-`) and which default model is small enough.
_CLI: dict[str, tuple[str, list[str], str]] = {
    "claude-cli": ("claude", ["-p", "--output-format", "json", "--model", "{model}"], "haiku"),
    "codex-cli": ("codex", ["exec", "--skip-git-repo-check", "--sandbox", "read-only",
                            "--model", "{model}"], ""),
    "gemini-cli": ("gemini", ["--model", "{model}", "-p"], ""),
}


class AgentCli:
    """The user's own agent CLI as the model: run once a segment, in a directory of its
    own (its transcripts there belong to no project of the user's), with memoryd's
    hooks in it told to answer nothing."""

    def __init__(self, provider: str, settings: LlmSettings, workdir: Path) -> None:
        command, args, default_model = _CLI[provider]
        self.name = provider
        self._command = command
        model = settings.model or default_model
        self._args = [a.format(model=model) for a in args if model or a != "{model}"]
        if not model:  # no --model: the CLI's own default
            self._args = [a for a in self._args if a != "--model"]
        self._timeout = settings.timeout
        self._workdir = workdir

    def executable(self) -> str | None:
        return shutil.which(self._command)

    async def close(self) -> None:
        return None

    async def complete(self, system: str, user: str) -> Completion:
        found = self.executable()
        if found is None:
            raise DistillError(f"`{self._command}` is not on PATH", provider=self.name)
        self._workdir.mkdir(mode=0o700, parents=True, exist_ok=True)
        env = {**os.environ, DISTILLING_ENV: "1"}
        if self._command == "gemini":
            # Run headless in a folder it was never told to trust, Gemini CLI exits (55,
            # FatalUntrustedWorkspaceError): memoryd's own empty directory is trusted for
            # the run (an environment variable, which older versions simply ignore).
            env["GEMINI_CLI_TRUST_WORKSPACE"] = "true"
        if self._command == "codex":
            argument, given = "-", f"{system}\n\n{user}"
        else:
            argument, given = system, user
        try:
            process = await asyncio.create_subprocess_exec(
                found, *self._args, argument, stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
                cwd=self._workdir, env=env, start_new_session=True)
        except OSError as exc:
            raise DistillError(f"`{self._command}` did not start ({exc.strerror})",
                               provider=self.name) from None
        try:
            async with asyncio.timeout(self._timeout):
                out, _ = await process.communicate(given.encode())
        except TimeoutError:
            raise DistillUnavailable(f"`{self._command}` took over {self._timeout:g} s",
                                     provider=self.name) from None
        finally:
            if process.returncode is None:
                # Timed out, or this call was cancelled (the daemon stopping, Ctrl-C): the
                # CLI and what it started go too, not left to run (and bill) on their own.
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                await process.wait()
        if process.returncode != 0:
            raise DistillUnavailable(f"`{self._command}` exited with {process.returncode}",
                                     provider=self.name)
        text = out[:CLI_OUTPUT_CAP].decode("utf-8", "replace")
        return self._read(text, system, user)

    def _read(self, text: str, system: str, user: str) -> Completion:
        if self.name == "claude-cli":
            # `--output-format json`: {"result": "...", "usage": {...}, "is_error": ...}
            try:
                data = json.loads(text)
                if data.get("is_error"):
                    raise DistillUnavailable("the CLI reported an error", provider=self.name)
                usage = data.get("usage") or {}
                answer = str(data["result"])
                return Completion(answer, int(usage.get("input_tokens") or 0)
                                  + int(usage.get("cache_read_input_tokens") or 0)
                                  + int(usage.get("cache_creation_input_tokens") or 0),
                                  int(usage.get("output_tokens") or 0)
                                  or estimate_tokens(answer))
            except (ValueError, KeyError, TypeError, AttributeError):
                raise DistillRefused("an answer of an unexpected shape",
                                     provider=self.name) from None
        return Completion(text, estimate_tokens(system) + estimate_tokens(user),
                          estimate_tokens(text))


async def check_provider(settings: LlmSettings, workdir: Path, transport: Any = None
                         ) -> tuple[str, str]:
    """(`ok`/`warn`/`fail`, what was found) for `memoryd doctor`: the agent CLI on PATH,
    or the endpoint's model list answering with the key given (no tokens spent)."""
    if settings.provider.endswith("-cli"):
        found = AgentCli(settings.provider, settings, workdir).executable()
        if found is None:
            return "fail", f"`{_CLI[settings.provider][0]}` is not on PATH"
        return "ok", f"{found} (signed in as you; runs billed to your plan)"
    import httpx

    key = os.environ.get(API_KEY_ENV, "")
    if settings.provider == "anthropic":
        url = (settings.base_url or ANTHROPIC_URL).rstrip("/") + "/v1/models"
        headers = {"anthropic-version": ANTHROPIC_VERSION, **({"x-api-key": key} if key else {})}
    else:
        url = settings.base_url.rstrip("/") + "/models"
        headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        async with httpx.AsyncClient(timeout=min(settings.timeout, 10.0),
                                     transport=transport) as client:
            response = await client.get(url, headers=headers)
    except httpx.TransportError as exc:
        return "fail", f"{shown_url(url)}: {type(exc).__name__}"
    if response.status_code in (401, 403):
        return "fail", (f"{shown_url(url)}: HTTP {response.status_code}"
                        + ("" if key else f" ({API_KEY_ENV} is not set)"))
    if response.status_code >= 400:
        return "warn", (f"{shown_url(url)}: HTTP {response.status_code} (the model list;"
                        " calls may work)")
    return "ok", f"{shown_url(url)} answers" + ("" if key else f" ({API_KEY_ENV} not set)")


def make_provider(settings: LlmSettings, workdir: Path, transport: Any = None) -> Provider:
    """The configured provider (`settings.provider` is not `none`)."""
    if settings.provider == "openai":
        return OpenAIChat(settings, transport)
    if settings.provider == "anthropic":
        return AnthropicMessages(settings, transport)
    return AgentCli(settings.provider, settings, workdir)
