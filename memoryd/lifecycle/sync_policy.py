"""When recovery saves a session's messages: its policy (`RecoveryPolicy`, from the
settings), when a session's open tail is due, and how long a question waits for its answer."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

from tenacity import (
    AsyncRetrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
)

from memoryd.clock import Clock
from memoryd.config import Settings
from memoryd.errors import BackendError
from memoryd.lifecycle.segments import SegmentPlan, open_question
from memoryd.names import is_compaction_agent
from memoryd.store.sessions import SessionSyncState, StoredMessage

Item = TypeVar("Item")
Result = TypeVar("Result")


@dataclass(frozen=True, slots=True)
class RecoveryPolicy:
    sync_delay: timedelta = timedelta(seconds=60)
    sync_max_lag: timedelta = timedelta(minutes=2)
    max_chars: int = 6000
    idle_gap: timedelta = timedelta(minutes=30)
    retry_attempts: int = 3
    retry_wait_max: float = 2.0
    #: Agents whose sessions' memories are private to them (`memory.private_agents`).
    private_agents: frozenset[str] = frozenset()
    #: Whether a saved segment of a project is queued for the model (`Settings.distills`);
    #: None: distillation is off.
    distills: Callable[[str | None], bool] | None = None
    #: Whether a session's project or working tree is memoryd's own (an agent CLI asked
    #: as the distillation model, `Settings.is_own`): passed over, never saved to memory.
    is_own: Callable[[str | None], bool] = lambda _path: False

    def passes_over(self, session: SessionSyncState) -> bool:
        """Whether memory passes the session over: memoryd's own (a model it asked), or an
        agent's compaction of another session (its parent holds the same)."""
        return (self.is_own(session.project) or self.is_own(session.worktree)
                or is_compaction_agent(session.source, session.external_id))

    def private_to(self, source: str) -> str | None:
        return source if source in self.private_agents else None


def recovery_policy(settings: Settings) -> RecoveryPolicy:
    """The policy the settings ask for (the daemon's job, `memoryd sync`, a client)."""
    return RecoveryPolicy(
        sync_delay=timedelta(seconds=settings.sync_delay),
        sync_max_lag=timedelta(seconds=settings.sync_max_lag),
        max_chars=settings.segment_max_chars,
        idle_gap=timedelta(seconds=settings.segment_idle_gap),
        private_agents=frozenset(settings.memory.private_agents),
        distills=settings.distills if settings.memory.llm.enabled else None,
        is_own=settings.is_own,
    )


def _is_transient(exc: BaseException) -> bool:
    return isinstance(exc, BackendError) and exc.transient


async def retrying(policy: RecoveryPolicy, save: Callable[[Item], Awaitable[Result]],
                   item: Item) -> Result:
    """`save(item)`, a transient backend failure retried briefly (the policy's attempts)."""
    async for attempt in AsyncRetrying(
        retry=retry_if_exception(_is_transient),
        stop=stop_after_attempt(policy.retry_attempts),
        wait=wait_exponential(multiplier=0.1, max=policy.retry_wait_max),
        reraise=True,
    ):
        with attempt:
            return await save(item)
    raise AssertionError("tenacity re-raises the last failure")  # pragma: no cover



def answered_up_to(policy: RecoveryPolicy, clock: Clock, session: SessionSyncState,
                   messages: list[StoredMessage]) -> int:
    """How many of a session's last `messages` may be saved now: all but a question
    still waiting for its answer (see `Recovery.run`)."""
    if session.status in ("paused", "ended"):
        return len(messages)
    position = open_question(messages)
    if position is None:
        return len(messages)
    asked = messages[position].timestamp or session.last_activity
    if asked is None or clock.now() - asked >= policy.sync_max_lag:
        return len(messages)
    return position


def tail_due(policy: RecoveryPolicy, clock: Clock, session: SessionSyncState,
             tail: SegmentPlan) -> bool:
    """Whether a session's open tail is saved now: the session paused or ended, its
    first message is `sync_max_lag` old, or the session has been quiet `sync_delay`."""
    if session.status in ("paused", "ended"):
        return True
    now = clock.now()
    first_written = tail.messages[0].timestamp
    if first_written is not None and now - first_written >= policy.sync_max_lag:
        return True
    last = session.last_activity
    return last is None or now - last >= policy.sync_delay
