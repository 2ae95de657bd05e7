"""Secrets out of memory text: keys and tokens found in conversation are masked.

Transcripts are full of credentials (a `.env` file read by a tool, a token in a
curl command). The daemon's store keeps the transcript as written (it is the
user's own record, mode 0600), but memory text is recalled into prompts,
exported and maybe shared through a remote backend, so it is masked first.
Patterns are deliberately specific (known prefixes, key=value assignments,
PEM blocks) so that ordinary prose and hashes survive.
"""

from __future__ import annotations

import re

_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("private_key", re.compile(
        r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)")),
    ("anthropic_key", re.compile(r"\bsk-ant-[A-Za-z0-9_\-]{20,}")),
    ("openai_key", re.compile(r"\bsk-(?:proj-|svcacct-)?[A-Za-z0-9_\-]{20,}")),
    ("github_token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,})")),
    ("aws_access_key", re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b")),
    ("slack_token", re.compile(r"\bxox[abposr]-[A-Za-z0-9\-]{10,}")),
    ("google_api_key", re.compile(r"\bAIza[0-9A-Za-z_\-]{35}\b")),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}")),
    ("bearer_token", re.compile(r"(?i)(?<=\bbearer )[A-Za-z0-9._~+/\-]{20,}=*")),
    ("url_password", re.compile(r"(?<=://)[^\s:/@]+:[^\s@/]{3,}(?=@)")),
    # NAME=value where NAME says it is a secret; values of digits only (token counts) stay.
    ("assigned_secret", re.compile(
        r"(?i)\b([A-Za-z0-9_]*(?:api[_-]?key|secret|token|passw(?:or)?d|pwd|access[_-]?key)"
        r"[A-Za-z0-9_]*\s*[=:]\s*)([\"']?)(?=[^\s\"',;]*[A-Za-z])([^\s\"',;]{6,})\2")),
]


def _keep_name(match: re.Match[str]) -> str:
    return f"{match.group(1)}[REDACTED:assigned_secret]"


#: Something (lower-cased) that every pattern above needs. Most text has none of it and
#: is returned as is: substring tests are several times cheaper than one regex search.
_MARKERS = ("private key", "sk-", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_",
            "akia", "asia", "xox", "aiza", "eyj", "://", "bearer", "key", "secret", "token",
            "passw", "pwd")


def redact(text: str) -> str:
    """`text` with every secret found replaced by `[REDACTED:<kind>]`."""
    lowered = text.lower()
    if not any(marker in lowered for marker in _MARKERS):
        return text
    for kind, pattern in _PATTERNS:
        if kind == "assigned_secret":
            text = pattern.sub(_keep_name, text)
        else:
            text = pattern.sub(f"[REDACTED:{kind}]", text)
    return text
