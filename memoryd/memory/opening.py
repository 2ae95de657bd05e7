"""Opening the configured memory: the embedded backend alone, or the chain of layers.

Every command, hook fallback and the daemon open memory here (`open_memory_backend`),
and here only: who owns the memories (`memory_user`, `owner_user`), how each layer
opens (`opener`), and the chain's assembly (`open_layers`).

`memory.backends: [sqlite]` (the default) opens the embedded backend as it
always did. Anything longer, or another primary, opens a `ChainBackend` whose
layers open lazily (a PostgreSQL server that is down when memoryd starts is a
layer to fall back from, not a failure) and whose outbox is
`<state_dir>/outbox.db`.
"""

from __future__ import annotations

import getpass
import os
import socket
from collections.abc import Awaitable, Callable
from typing import cast

import structlog

from memoryd.clock import Clock
from memoryd.config import Settings
from memoryd.config_memory import BackendKind
from memoryd.errors import BackendError, EmbeddingError
from memoryd.files import ensure_private_dir
from memoryd.memory.backends.jsonl import JsonlMemoryBackend
from memoryd.memory.backends.sqlite import SQLiteMemoryBackend
from memoryd.memory.chain import ChainBackend
from memoryd.memory.embeddings import make_embedder
from memoryd.memory.embeddings.interface import Embedder
from memoryd.memory.layers import Layer
from memoryd.memory.outbox import Outbox
from memoryd.memory.privacy.masking import MaskedBackend
from memoryd.memory.protocol import Capability, MemoryBackend

log = structlog.get_logger("memoryd.memory")

_FULL = frozenset({Capability.REMEMBER, Capability.RECALL, Capability.FORGET,
                   Capability.CORRECT, Capability.EXPORT, Capability.TEMPORAL})
DECLARED: dict[str, frozenset[Capability]] = {
    "sqlite": _FULL,
    "postgres": _FULL,
    "jsonl": JsonlMemoryBackend.capabilities,
    # GatewayMemoryBackend.capabilities, written out: the gateway's module (and httpx)
    # loads only when a gateway is configured (tests/unit check they agree).
    "gateway": frozenset({Capability.RECALL}),
}


def origin(settings: Settings) -> str:
    """This memoryd among several sharing one database: its host and state directory."""
    from memoryd.memory.backends.postgres import origin_id

    return origin_id(f"{socket.gethostname()}:{settings.state_dir}")


def memory_user(settings: Settings) -> str:
    """The owner of this memoryd's memories: `memory.user`, else the login name."""
    return settings.memory.user or login_name()


def owner_user(settings: Settings) -> str:
    """The owner in the shared PostgreSQL database."""
    return settings.memory.postgres.user or memory_user(settings)


def login_name() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid-{os.getuid()}"


def postgres_dsn(settings: Settings) -> str:
    name = settings.memory.postgres.dsn_env
    dsn = os.environ.get(name, "").strip()
    if not dsn:
        raise BackendError(f"memory.postgres.dsn_env: the environment variable {name} is not"
                           " set (it holds the connection string)", backend="postgres")
    return dsn


def opener(kind: BackendKind, settings: Settings, clock: Clock, embedder: Embedder | None, *,
           masked: bool = True, readonly: bool = False) -> Callable[[], Awaitable[MemoryBackend]]:
    """How to open one layer; `masked`: with `privacy.extra_patterns` applied to its writes
    (a chain applies them itself, before its outbox); `readonly`: the embedded backend
    opened for reading only."""
    embeddings = settings.memory.embeddings

    async def sqlite() -> MemoryBackend:
        if not readonly:
            ensure_private_dir(settings.memory_path.parent, "memory.path")
        return await SQLiteMemoryBackend.open(
            settings.memory_path, clock=clock, embedder=embedder,
            owner=memory_user(settings), readonly=readonly,
            vector_weight=embeddings.vector_weight,
            paraphrase_vector_weight=embeddings.paraphrase_vector_weight)

    async def postgres() -> MemoryBackend:
        from memoryd.memory.backends.postgres import Owner, PostgresMemoryBackend

        pg = settings.memory.postgres
        return await PostgresMemoryBackend.open(
            postgres_dsn(settings),
            owner=Owner(user=owner_user(settings), origin=origin(settings),
                        agents=tuple(pg.agents) if pg.agents is not None else None),
            clock=clock, embedder=embedder, vector_weight=embeddings.vector_weight,
            paraphrase_vector_weight=embeddings.paraphrase_vector_weight,
            connect_timeout=pg.connect_timeout, max_connections=pg.max_connections)

    async def jsonl() -> MemoryBackend:
        ensure_private_dir(settings.jsonl_path, "memory.jsonl.path")
        return await JsonlMemoryBackend.open(settings.jsonl_path, clock=clock,
                                             owner=memory_user(settings))

    async def gateway() -> MemoryBackend:
        from memoryd.memory.backends.gateway import GatewayConfig, GatewayMemoryBackend

        gw = settings.memory.gateway
        ensure_private_dir(settings.state_dir)
        config = GatewayConfig(
            base_url=gw.base_url, user_id=gw.user_id or memory_user(settings),
            user_key=os.environ.get(gw.user_key_env, ""), app_id=gw.app_id,
            project_id=gw.project_id, scope=tuple(gw.scope), timeout=gw.timeout)
        return await GatewayMemoryBackend.open(config, ledger=settings.gateway_ledger_path,
                                               clock=clock)

    chosen = {"sqlite": sqlite, "postgres": postgres, "jsonl": jsonl, "gateway": gateway}[kind]
    masks = settings.extra_masks()
    if not masks or not masked:
        return chosen

    async def with_masks() -> MemoryBackend:
        # `privacy.extra_patterns` masked at one boundary, before any layer stores or sends.
        return cast(MemoryBackend, MaskedBackend(await chosen(), masks))

    return with_masks


def is_chain(settings: Settings) -> bool:
    return settings.memory.backends != ["sqlite"]


async def open_layers(settings: Settings, clock: Clock, embedder: Embedder | None, *,
                      readonly: bool = False) -> MemoryBackend:
    """The configured memory: the embedded backend alone, or the chain (`readonly`: the
    embedded backend for reading only; a chain opens as it always does)."""
    if not is_chain(settings):
        return await opener("sqlite", settings, clock, embedder, readonly=readonly)()
    ensure_private_dir(settings.state_dir)
    outbox = await Outbox.open(settings.outbox_path, clock=clock)
    layers = [Layer(kind, opener(kind, settings, clock, embedder, masked=False), clock)
              for kind in settings.memory.backends]
    return ChainBackend(layers, outbox, clock,
                        {kind: DECLARED[kind] for kind in settings.memory.backends},
                        masks=settings.extra_masks())


async def open_memory_backend(settings: Settings, clock: Clock, *,
                              vectors: bool = True, readonly: bool = False) -> MemoryBackend:
    """The configured memory, opened: the embedded backend, or the chain of layers.

    With an embedder, recall is hybrid; an embedder that cannot be made (the
    local model not installed) leaves keyword recall working, with a warning.
    `vectors=False` opens it keyword-only (a hook without a daemon cannot afford
    to load a model).
    """
    embedder = None
    try:
        if vectors:
            embedder = make_embedder(settings.memory.embeddings, settings.models_path)
    except EmbeddingError as exc:
        log.warning("embeddings_unavailable", error=str(exc))
    return await open_layers(settings, clock, embedder, readonly=readonly)
