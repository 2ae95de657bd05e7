"""A layer of the chain: one backend, opened on first use and again, after a failed open,
once OPEN_RETRY seconds have passed (a primary down at start costs only the retries)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import structlog

from memoryd.clock import Clock
from memoryd.errors import BackendError, BackendUnavailable, MemorydError
from memoryd.memory.protocol import MemoryBackend

log = structlog.get_logger("memoryd.memory.chain")

OPEN_RETRY = 10.0  # seconds between attempts to open a layer that could not be opened
Opener = Callable[[], Awaitable[MemoryBackend]]


class Layer:
    """One backend of the chain, opened on first use and again after a failed open."""

    def __init__(self, name: str, opener: Opener, clock: Clock) -> None:
        self.name = name
        self._opener = opener
        self._clock = clock
        self._backend: MemoryBackend | None = None
        self._failed_at: float | None = None
        self.last_error: str | None = None
        self._lock = asyncio.Lock()

    @property
    def backend(self) -> MemoryBackend | None:
        """The backend when it is open (None before the first use or while it cannot open)."""
        return self._backend

    async def get(self) -> MemoryBackend:
        if self._backend is not None:
            return self._backend
        async with self._lock:
            if self._backend is not None:
                return self._backend
            now = self._clock.monotonic()
            if self._failed_at is not None and now - self._failed_at < OPEN_RETRY:
                raise BackendUnavailable(f"not reachable ({self.last_error})", backend=self.name)
            try:
                self._backend = await self._opener()
            except BackendUnavailable as exc:
                self._failed_at, self.last_error = now, exc.detail
                log.warning("memory_layer_unavailable", layer=self.name, error=exc.detail)
                raise
            except BackendError as exc:
                self._failed_at, self.last_error = now, exc.detail
                log.error("memory_layer_failed", layer=self.name, error=exc.detail)
                raise BackendUnavailable(exc.detail, backend=self.name) from None
            except (MemorydError, OSError) as exc:
                # A layer's directory that cannot be made, a bad setting: that layer is out.
                self._failed_at, self.last_error = now, str(exc)
                log.error("memory_layer_failed", layer=self.name, error=str(exc))
                raise BackendUnavailable(str(exc), backend=self.name) from None
            self._failed_at = self.last_error = None
            return self._backend

    async def available(self) -> bool:
        try:
            backend = await self.get()
        except BackendError:
            return False
        return await backend.is_available()

    async def close(self) -> None:
        backend, self._backend = self._backend, None
        if backend is not None:
            await backend.close()
