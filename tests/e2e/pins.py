"""The real agent CLIs the end-to-end tests run, pinned in one place.

A version bump is a change here and nowhere else. Each is installed from the npm
registry once into a cache (`$E2E_AGENTS_CACHE`, default `~/.cache/memoryd-e2e`; not a
`MEMORYD_` name: memoryd refuses unknown settings in the environment)
and reused by later runs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Pin:
    package: str
    version: str
    command: str


PINS = {
    "claude": Pin("@anthropic-ai/claude-code", "2.1.331", "claude"),
    "codex": Pin("@openai/codex", "0.169.0", "codex"),
    "gemini": Pin("@google/gemini-cli", "0.61.0", "gemini"),
}


def cache_dir() -> Path:
    return Path(os.environ.get("E2E_AGENTS_CACHE")
                or Path.home() / ".cache" / "memoryd-e2e")


class Unavailable(Exception):
    """The agent cannot be installed here (no npm, no registry)."""


def installed(agent: str) -> Path:
    """The agent's executable, installed from the registry on first use."""
    pin = PINS[agent]
    prefix = cache_dir() / f"{agent}-{pin.version}"
    binary = prefix / "node_modules" / ".bin" / pin.command
    if binary.exists():
        return binary
    npm = shutil.which("npm")
    if npm is None:
        raise Unavailable("npm is not installed (.ci/run installs Node.js and npm)")
    prefix.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        # npm's own download cache beside the agents, not in the tester's ~/.npm.
        [npm, "install", "--prefix", str(prefix), "--cache", str(cache_dir() / "npm-cache"),
         "--no-audit", "--no-fund", "--loglevel=error", f"{pin.package}@{pin.version}"],
        capture_output=True, text=True, timeout=900)
    if done.returncode != 0 or not binary.exists():
        raise Unavailable(f"npm install {pin.package}@{pin.version} failed:"
                          f" {done.stderr.strip()[-500:]}")
    return binary
