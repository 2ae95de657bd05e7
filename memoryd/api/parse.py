"""Each operation's JSON arguments made into the domain's typed request (`memoryd.domain.
requests`); a bad argument is an `ApiError` with status 400 (`args`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from memoryd.api import args as arg
from memoryd.domain.core import MAX_LIMIT
from memoryd.domain.memories import REMEMBERED_TYPES, WRONG_TYPE
from memoryd.domain.requests import (
    TRANSCRIPT_ACTIONS,
    BriefingRequest,
    Caller,
    ContextRequest,
    CorrectRequest,
    ForgetRequest,
    ForgetUserRequest,
    GetMemoryRequest,
    HoldRequest,
    LinkRequest,
    ListSessionsRequest,
    RecallRequest,
    RememberRequest,
    RetentionRequest,
    Scope,
    SearchSessionsRequest,
    SessionEventRequest,
    TranscriptsRequest,
)
from memoryd.errors import ApiError
from memoryd.memory import MemoryType
from memoryd.memory.recall.context import DEFAULT_BUDGET, MIN_BUDGET
from memoryd.names import project_path

Args = Mapping[str, Any]
#: The longest wait a hook may ask for its answer (`answer_within`, seconds).
MAX_ANSWER_WITHIN = 600.0
#: The oldest sessions `transcripts` takes (`older_than`, seconds): ten years.
MAX_OLDER_THAN = 10 * 365 * 86400


def caller(args: Args) -> Caller:
    return Caller(interface=arg.opt_text(args, "interface") or "api", agent=arg.agent(args),
                  as_agent="agent" in args,
                  agent_session_id=arg.opt_text(args, "agent_session_id"))


def scope(args: Args, now: datetime) -> Scope:
    return Scope(project=arg.project(args), all_projects=arg.flag(args, "all_projects"),
                 agent=arg.agent(args), types=_types(args),
                 since=arg.when(args, "since", now), until=arg.when(args, "until", now),
                 as_of=arg.when(args, "as_of", now))


def _types(args: Args) -> tuple[MemoryType, ...] | None:
    kinds = arg.types(args)
    return tuple(kinds) if kinds is not None else None


def recall(args: Args, now: datetime) -> RecallRequest:
    return RecallRequest(query=arg.text(args, "query", default=""),
                         limit=arg.integer(args, "limit", 10, 1, MAX_LIMIT),
                         scope=scope(args, now), record=arg.flag(args, "record"),
                         caller=caller(args))


def recall_temporal(args: Args, now: datetime) -> RecallRequest:
    if args.get("since") is None:
        raise ApiError(400, "since is required (an ISO date, 'yesterday', 'last week')")
    return RecallRequest(query=arg.text(args, "query", default=""),
                         limit=arg.integer(args, "limit", 50, 1, MAX_LIMIT),
                         scope=scope(args, now), order="time", caller=caller(args))


def context(args: Args, now: datetime) -> ContextRequest:
    return ContextRequest(query=arg.text(args, "query", default=""),
                          budget=arg.integer(args, "budget", DEFAULT_BUDGET, MIN_BUDGET,
                                             100_000),
                          scope=scope(args, now), record=arg.flag(args, "record"),
                          caller=caller(args))


def remember(args: Args, now: datetime) -> RememberRequest:
    content = arg.text(args, "content")
    kind = arg.opt_text(args, "type") or MemoryType.FACT.value
    if kind not in {t.value for t in REMEMBERED_TYPES}:
        raise ApiError(400, WRONG_TYPE)
    importance = args.get("importance")
    if importance is not None and (isinstance(importance, bool) or not isinstance(
            importance, int | float) or not 0.0 <= float(importance) <= 1.0):
        raise ApiError(400, "importance must be a number from 0 to 1")
    tags = args.get("tags") or []
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise ApiError(400, "tags must be a list of strings")
    return RememberRequest(content=content, type=MemoryType(kind),
                           importance=None if importance is None else float(importance),
                           tags=tuple(tags), private=arg.flag(args, "private"),
                           project=arg.project(args), caller=caller(args))


def correct(args: Args, now: datetime) -> CorrectRequest:
    return CorrectRequest(content=arg.text(args, "content"),
                          memory_id=arg.opt_text(args, "memory_id"),
                          query=arg.opt_text(args, "query"),
                          reason=arg.opt_text(args, "reason"), caller=caller(args))


def forget(args: Args, now: datetime) -> ForgetRequest:
    return ForgetRequest(memory_id=arg.opt_text(args, "memory_id"),
                         session=arg.opt_text(args, "session"), project=arg.project(args),
                         everything=arg.flag(args, "all"), hard=arg.flag(args, "hard"),
                         confirmed=arg.confirmed_everything(args), caller=caller(args))


def get_memory(args: Args, now: datetime) -> GetMemoryRequest:
    return GetMemoryRequest(memory_id=arg.text(args, "memory_id"),
                            record_use=arg.flag(args, "record_use", default=True),
                            caller=caller(args))


def forget_user(args: Args, now: datetime) -> ForgetUserRequest:
    return ForgetUserRequest(user=arg.text(args, "user"),
                             confirmed=arg.confirmed_everything(args), caller=caller(args))


def retention(args: Args, now: datetime) -> RetentionRequest:
    dry_run = args.get("dry_run")
    if dry_run is not None and not isinstance(dry_run, bool):
        raise ApiError(400, "dry_run must be true or false")
    return RetentionRequest(dry_run=dry_run, trust_clock=arg.flag(args, "trust_clock"))


def transcripts(args: Args, now: datetime) -> TranscriptsRequest:
    named = arg.text(args, "action")
    action = next((a for a in TRANSCRIPT_ACTIONS if a == named), None)
    if action is None:
        raise ApiError(400, "action must be " + ", ".join(TRANSCRIPT_ACTIONS[:-1])
                       + " or " + TRANSCRIPT_ACTIONS[-1])
    older_than = args.get("older_than")
    if older_than is not None and (isinstance(older_than, bool) or not isinstance(
            older_than, int | float) or not 0 <= older_than <= MAX_OLDER_THAN):
        raise ApiError(400, "older_than must be a number of seconds (up to ten years)")
    return TranscriptsRequest(action=action, session=arg.opt_text(args, "session"),
                              project=arg.project(args),
                              older_than=None if older_than is None else float(older_than))


def hold(args: Args, now: datetime) -> HoldRequest:
    return HoldRequest(project=arg.project(args), session=arg.opt_text(args, "session"),
                       reason=arg.opt_text(args, "reason"))


def hold_id(args: Args, now: datetime) -> int:
    return arg.integer(args, "hold", 0, 1, 2**62)


def link(args: Args, now: datetime) -> LinkRequest:
    return LinkRequest(old=project_path(arg.text(args, "old")),
                       new=project_path(arg.text(args, "new")))


def old_path(args: Args, now: datetime) -> str:
    return project_path(arg.text(args, "old"))


def search_sessions(args: Args, now: datetime) -> SearchSessionsRequest:
    return SearchSessionsRequest(query=arg.text(args, "query"),
                                 limit=arg.integer(args, "limit", 20, 1, MAX_LIMIT),
                                 project=arg.project(args),
                                 since=arg.when(args, "since", now),
                                 until=arg.when(args, "until", now), agent=arg.agent(args))


def list_sessions(args: Args, now: datetime) -> ListSessionsRequest:
    return ListSessionsRequest(status=arg.opt_text(args, "status"),
                               source=arg.opt_text(args, "source"), flat=arg.flag(args, "all"))


def session(args: Args, now: datetime) -> str | None:
    return arg.opt_text(args, "session")


def nothing(args: Args, now: datetime) -> None:
    return None


def session_event(args: Args, now: datetime) -> SessionEventRequest:
    answer_by = arg.when(args, "answer_by", now)
    within = args.get("answer_within")
    if answer_by is None and isinstance(within, int | float) and not isinstance(within, bool):
        answer_by = now + timedelta(seconds=min(MAX_ANSWER_WITHIN, max(0.0, float(within))))
    waiting = args.get("still_waiting")  # set by the API's hook route, never JSON
    return SessionEventRequest(
        agent=arg.text(args, "agent"), event=arg.text(args, "event"),
        session_id=arg.opt_text(args, "session_id"),
        transcript_path=arg.opt_text(args, "transcript_path"),
        transcript_root=arg.opt_text(args, "transcript_root"), cwd=arg.opt_text(args, "cwd"),
        prompt=arg.text(args, "prompt", default=""), source=arg.opt_text(args, "source"),
        trigger=arg.opt_text(args, "trigger"), answer_by=answer_by,
        still_waiting=waiting if callable(waiting) else None)


def briefing(args: Args, now: datetime) -> BriefingRequest:
    return BriefingRequest(agent=arg.opt_text(args, "agent") or "claude",
                           cwd=arg.opt_text(args, "cwd"))


Parser = Callable[[Args, datetime], Any]
