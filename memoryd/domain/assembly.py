"""The domain's parts assembled over one `Core` (`Domain`): what every interface calls."""

from __future__ import annotations

import aiosqlite

from memoryd.clock import Clock
from memoryd.config import Settings
from memoryd.domain.blocks import Blocks
from memoryd.domain.core import Core, Runtime
from memoryd.domain.governance import Governance
from memoryd.domain.memories import Memories
from memoryd.domain.recaller import Recaller
from memoryd.domain.session_events import SessionEvents
from memoryd.memory import MemoryBackend


class Domain:
    """Recall, the blocks agents are told, memory's writes, governance and sessions, over
    the daemon's store connection and a memory backend."""

    def __init__(self, settings: Settings, clock: Clock, conn: aiosqlite.Connection,
                 backend: MemoryBackend, runtime: Runtime) -> None:
        self.core = Core(settings, clock, conn, backend, runtime)
        self.recaller = Recaller(self.core)
        self.blocks = Blocks(self.core, self.recaller)
        self.memories = Memories(self.core, self.recaller)
        self.governance = Governance(self.core)
        self.sessions = SessionEvents(self.core, self.blocks)
