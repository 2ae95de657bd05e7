"""Settings: a YAML file plus MEMORYD_* environment variables, defaults that work with neither.

Where the file is: `--config PATH`, else `$MEMORYD_CONFIG`, else
`~/.config/memoryd/config.yaml` (absent is fine). Environment variables win
over the file; nested keys use `__` (`MEMORYD_MEMORY__BACKENDS='["postgres", "sqlite"]'`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

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
from memoryd.config_memory import MemorySettings
from memoryd.config_values import DAY, Duration, ExpandedPath, parse_duration
from memoryd.errors import ConfigError
from memoryd.locations import default_config_path, default_state_dir, read_config_file

if TYPE_CHECKING:
    from memoryd.memory.privacy.redaction import ExtraMasks


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
