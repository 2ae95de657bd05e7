"""The secret rules: memoryd's own (`OWN_RULES`) and detect-secrets' regex plugins (loaded on
first use, without `requests`), each with the markers a text must hold for it to run,
and how a rule's match is masked (`mask_secret`).

Each rule is (kind, markers, pattern, what to mask): None (the whole match), a group's
number, LONGEST_GROUP or ANY_GROUP. Applied by `redaction`.
"""

from __future__ import annotations

import contextlib
import re
import sys
import types
from collections.abc import Iterable, Iterator
from functools import cache
from typing import Any

MIN_GROUP = 12
LONGEST_GROUP = -1  # mask the longest group if it has MIN_GROUP characters, else all
ANY_GROUP = -2  # mask whichever group matched

_NAME = (r"[A-Za-z0-9_.\-]*(?:api[_-]?key|secret|token|passw(?:or)?d|passphrase|pwd|"
         r"access[_-]?key|auth[_-]?key|credentials?|private[_-]?key|"
         r"(?<![A-Za-z])pass(?![A-Za-z])|(?<![A-Za-z])pw(?![A-Za-z]))[A-Za-z0-9_.\-]*")


# kind, markers, pattern, what to mask: None (the whole match), a group's number, or one of
# the above. A rule runs only on text holding one of its markers (a marker with a capital
# letter is looked for as written, others in the lower-cased text): most text holds none,
# and a substring test costs a fraction of one regex search.
_Rule = tuple[str, tuple[str, ...], re.Pattern[str], int | None]

OWN_RULES: list[_Rule] = [
    ("private_key", ("PRIVATE KEY",), re.compile(
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----[\s\S]*?"
        r"(?:-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)"), None),
    # NAME=value, NAME: value, "name": "value" (JSON, YAML, .env, shell); values of digits
    # only (token counts) and short ones stay.
    ("assigned_secret", ("key", "secret", "token", "pass", "pwd", "pw", "credential"), re.compile(
        rf"(?i)(?<![A-Za-z0-9])[\"']?{_NAME}[\"']?\s*[=:]\s*"
        r"(?:\"((?=[^\"\n]*[A-Za-z])[^\"\n]{6,})\"|'((?=[^'\n]*[A-Za-z])[^'\n]{6,})'"
        # unquoted: not a call (`token = os.environ.get(...)` is code, not a secret)
        r"|((?=[^\s\"',;()]*[A-Za-z])[^\s\"',;()]{6,})(?![(\w]))"), ANY_GROUP),
    # "use the deploy password hunter2!": prose, where the value has a digit or a symbol.
    ("password", ("passw", "passphrase", "passcode"), re.compile(
        r"(?i)\b(?:password|passphrase|passwd|passcode)\s+(?:is\s+|was\s+|to\s+)?[`\"']?"
        r"((?=[^\s`\"',;]*[\d!@#$%^&*()+=~?<>|\\/])[^\s`\"',;]{6,})"), 1),
    ("mysql_password", ("mysql",),
     re.compile(r"\bmysql(?:dump|admin|sh)?\b[^\n]*?\s-p(?!\s)([^\s\"']+)"), 1),
    ("basic_auth", ("basic",),
     re.compile(r"(?i)\bauthorization\s*:\s*basic\s+([A-Za-z0-9+/=._\-]{8,})"), 1),
    ("bearer_token", ("bearer",),
     re.compile(r"(?i)\bbearer\s+([A-Za-z0-9._~+/\-]{20,}=*)"), 1),
    # scheme://user:password@host: the password may hold / or @; the last @ ends it.
    # The user may be empty: `redis://:password@host`.
    ("url_password", ("://",), re.compile(r"://[^\s:/@\"'<>]*:([^\s@]+)@[\w.\-]+"), 1),
    ("anthropic_key", ("sk-ant-",), re.compile(r"\bsk-ant-[A-Za-z0-9_\-]{20,}"), None),
    ("openai_key", ("sk-",),
     re.compile(r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}"), None),
    ("stripe_key", ("k_live_", "k_test_"),
     re.compile(r"\b(?:sk|rk|pk)_(?:live|test)_[0-9A-Za-z]{16,}"), None),
    ("gitlab_token", ("gl",), re.compile(
        r"\bgl(?:pat|dt|rt|ptt|ft|imt|agent|oas|soat|cbt)-[0-9A-Za-z_\-]{20,}"), None),
    ("npm_token", ("npm_",), re.compile(r"\bnpm_[A-Za-z0-9]{36}\b"), None),
    ("slack_token", ("xox", "xapp-"),
     re.compile(r"\bx(?:ox[abposre]|app)-[A-Za-z0-9\-]{10,}"), None),
    ("github_token", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
     re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,})"), None),
    ("aws_access_key", ("AKIA", "ASIA", "ABIA", "ACCA"),
     re.compile(r"\b(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b"), None),
    ("google_api_key", ("AIza",), re.compile(r"\bAIza[0-9A-Za-z_\-]{35}\b"), None),
    ("jwt", ("eyJ",),
     re.compile(r"\beyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}"), None),
    # Token formats of services people paste into agents (issue 29.5).
    ("huggingface_token", ("hf_",), re.compile(r"\bhf_[A-Za-z0-9]{30,}"), None),
    ("vault_token", ("hvs.", "hvb.", "hvr."),
     re.compile(r"\bhv[sbr]\.[A-Za-z0-9_\-]{20,}"), None),
    ("shopify_token", ("shpat_", "shpca_", "shppa_", "shpss_"),
     re.compile(r"\bshp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}\b"), None),
    ("digitalocean_token", ("_v1_",), re.compile(r"\bdo[por]_v1_[a-f0-9]{64}\b"), None),
    ("square_token", ("sq0",), re.compile(r"\bsq0(?:atp|csp|idp)-[0-9A-Za-z_\-]{22,}"), None),
    ("telegram_bot_token", (":AA",), re.compile(r"\b\d{8,10}:AA[0-9A-Za-z_\-]{32,34}\b"), None),
    ("discord_bot_token", ("discord", "bot "), re.compile(
        r"\b[MNO][A-Za-z\d_\-]{23,27}\.[A-Za-z\d_\-]{6}\.[A-Za-z\d_\-]{27,40}\b"), None),
    # An AWS secret access key named in prose, without its key id beside it.
    ("aws_secret_key", ("secret",), re.compile(
        r"(?i)\baws[\s_\-]*secret[\s_\-]*(?:access[\s_\-]*)?key\b[^A-Za-z0-9/+=\n]{0,30}"
        r"(?:is\s+|was\s+)?[`\"']?([A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])"), 1),
    # "the password for the staging box is hunter2!": the word, a few words, then the value.
    ("password", ("passw", "passphrase", "passcode"), re.compile(
        r"(?i)\b(?:password|passphrase|passwd|passcode)\b[^.\n:=]{1,40}?\b(?:is|was|=)\s+"
        r"[`\"']?((?=[^\s`\"',;]*[\d!@#$%^&*()+=~?<>|\\/])[^\s`\"',;.]{6,})"), 1),
    # ~/.netrc: `machine HOST login USER password SECRET`, any value.
    ("netrc_password", ("machine",),
     re.compile(r"(?i)\bmachine\s+\S+\s+login\s+\S+\s+password\s+(\S+)"), 1),
    # A PuTTY key file: its private lines and their MAC, whatever follows the header.
    ("private_key", ("PuTTY-User-Key-File",), re.compile(
        r"PuTTY-User-Key-File-\d+:[^\n]*(?:\n(?!Private-MAC:)[^\n]*)*"
        r"(?:\nPrivate-MAC:[^\n]*|\Z)"), None),
    # More services' token formats people paste (issue 61.10).
    ("google_oauth_secret", ("GOCSPX-",),
     re.compile(r"\bGOCSPX-[A-Za-z0-9_\-]{24,}"), None),
    ("grafana_token", ("glsa_", "glc_"),
     re.compile(r"\b(?:glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}|glc_[A-Za-z0-9+/=]{32,})"), None),
    ("atlassian_token", ("ATATT", "ATCTT"),
     re.compile(r"\bAT[AC]TT[A-Za-z0-9_\-=]{40,}"), None),
    ("databricks_token", ("dapi",), re.compile(r"\bdapi[a-f0-9]{32}(?:-\d)?\b"), None),
    ("linear_key", ("lin_api_", "lin_oauth_"),
     re.compile(r"\blin_(?:api|oauth)_[A-Za-z0-9]{32,}"), None),
    ("notion_token", ("ntn_", "secret_"),
     re.compile(r"\b(?:ntn_[A-Za-z0-9]{40,}|secret_[A-Za-z0-9]{43})\b"), None),
    ("postman_key", ("PMAK-",), re.compile(r"\bPMAK-[a-f0-9]{24}-[a-f0-9]{34}\b"), None),
    ("newrelic_key", ("NRAK-", "NRII-", "NRJS-"),
     re.compile(r"\bNR(?:AK|II|JS)-[A-Za-z0-9]{19,}"), None),
    ("groq_key", ("gsk_",), re.compile(r"\bgsk_[A-Za-z0-9]{40,}"), None),
    # A Docker config's registry credentials (`"auth": "<base64 of user:password>"`).
    ("docker_auth", ("auth",), re.compile(
        r"(?i)[\"']auth[\"']\s*:\s*[\"']([A-Za-z0-9+/]{8,}={0,2})[\"']"), 1),
    # A kubeconfig's client key (and its token is an assignment).
    ("kube_client_key", ("client-key-data",),
     re.compile(r"client-key-data\s*:\s*[\"']?([A-Za-z0-9+/]{16,}={0,2})"), 1),
    # A key, token or secret said in prose: "the api key for staging is 9f2c...". The
    # value has letters and digits and is long, so "the token is expired" stays.
    ("named_secret", ("key", "token", "secret"), re.compile(
        r"(?i)\b(?:api[\s_\-]?key|access[\s_\-]?key|secret(?:[\s_\-]?key)?|token)\b"
        r"[^.\n:=]{0,40}?\b(?:is|was|=)\s+[`\"']?"
        r"((?=[A-Za-z0-9_\-./+=]*\d)(?=[A-Za-z0-9_\-./+=]*[A-Za-z])[A-Za-z0-9_\-./+=]{16,})"),
     1),
]
# A bare AWS secret key is 40 characters of base64; alone it is indistinguishable from a
# hash, so it is masked only in text that also holds an access key id.
AWS_ID = re.compile(r"\b(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b|\[REDACTED:aws_access_key\]")
#: What the text must hold for a bare key to be looked for (a superset of the test in
#: `_mask_secrets`: an access key id, its mask, or the word).
AWS_CONTEXT = re.compile(r"(?i:aws)|AKIA|ASIA")
AWS_SECRET = re.compile(r"(?<![A-Za-z0-9/+=])(?=[A-Za-z0-9/+]*[a-z])(?=[A-Za-z0-9/+]*[A-Z])"
                         r"(?=[A-Za-z0-9/+]*[0-9])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")

# Not used: keywords (the assignment rule above), entropy and public IPs (not secrets), the
# provider-specific assignments (IBM, Cloudant, SoftLayer: the assignment rule covers them,
# and their patterns cost ten times a plain one), Discord (no literal to look for) and
# Telegram (anchored to the whole text: it never matches a message).
_SKIPPED_PLUGINS = {"KeywordDetector", "IPPublicDetector", "Base64HighEntropyString",
                    "HexHighEntropyString", "IbmCloudIamDetector", "IbmCosHmacDetector",
                    "CloudantDetector", "SoftlayerDetector", "DiscordBotTokenDetector",
                    "TelegramBotTokenDetector"}
_PLUGIN_MARKERS: dict[str, tuple[str, ...]] = {
    "ArtifactoryDetector": ("AKC", "AP"),
    "AWSKeyDetector": ("AKIA", "ASIA", "ABIA", "ACCA", "A3T", "aws"),
    "AzureStorageKeyDetector": ("accountkey",),
    "BasicAuthDetector": ("://",),
    "GitHubTokenDetector": ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
    "GitLabTokenDetector": ("gl", "gr1348941"),
    "JwtTokenDetector": ("eyJ",),
    "MailchimpDetector": ("-us",),
    "NpmDetector": ("_authtoken",),
    "OpenAIDetector": ("T3BlbkFJ",),
    "PrivateKeyDetector": ("PRIVATE KEY", "PuTTY"),
    "PypiTokenDetector": ("pypi-",),
    "SendGridDetector": ("SG.",),
    "SlackDetector": ("xox", "hooks.slack.com"),
    "SquareOAuthDetector": ("sq0csp-",),
    "StripeDetector": ("k_live_",),
    "TwilioKeyDetector": ("AC", "SK"),
}


class _NotLoaded(types.ModuleType):
    """What detect-secrets' plugins see as `requests` while memoryd reads their rules:
    any name is a placeholder (they name it at import only in annotations and `except`
    clauses of `verify`, which memoryd never calls)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return type(name, (Exception,), {"__module__": self.__name__})


@contextlib.contextmanager
def _without_requests() -> Iterator[None]:
    """detect-secrets imports `requests` (with urllib3, charset_normalizer and idna,
    about 14 MB a daemon kept for its lifetime) only to verify secrets online, which
    memoryd never does: its plugins are imported against a placeholder instead."""
    if "requests" in sys.modules:
        yield
        return
    sys.modules["requests"] = _NotLoaded("requests")
    try:
        yield
    finally:
        sys.modules.pop("requests", None)


@cache
def plugin_rules() -> tuple[_Rule, ...]:
    """detect-secrets' regex rules (imported on first use, without `requests`)."""
    with _without_requests():
        from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
        from detect_secrets.plugins.base import RegexBasedDetector

        rules: list[_Rule] = []
        plugins: dict[str, Any] = get_mapping_from_secret_type_to_class()
    for secret_type, plugin in sorted(plugins.items()):
        if plugin.__name__ in _SKIPPED_PLUGINS or not issubclass(plugin, RegexBasedDetector):
            continue
        kind = re.sub(r"[^a-z0-9]+", "_", secret_type.lower()).strip("_")
        # A plugin this table does not know yet (a newer detect-secrets) always runs.
        markers = _PLUGIN_MARKERS.get(plugin.__name__, ("",))
        patterns: Iterable[re.Pattern[str]] = plugin.denylist
        for pattern in patterns:
            rules.append((kind, markers, pattern, LONGEST_GROUP if pattern.groups else None))
    return tuple(rules)


def mask_secret(text: str, kind: str, pattern: re.Pattern[str], group: int | None) -> str:
    if group is None:
        return pattern.sub(f"[REDACTED:{kind}]", text)

    def replace(match: re.Match[str]) -> str:
        if group in (LONGEST_GROUP, ANY_GROUP):
            spans = [match.span(g) for g in range(1, pattern.groups + 1)
                     if match.group(g) is not None]
        else:
            spans = [match.span(group)] if match.group(group) is not None else []
        least = MIN_GROUP if group == LONGEST_GROUP else 1
        spans = [s for s in spans if s[1] - s[0] >= least]
        if not spans:
            return f"[REDACTED:{kind}]"
        start, end = max(spans, key=lambda s: s[1] - s[0])
        if match.group(0)[start - match.start():end - match.start()].startswith("[REDACTED:"):
            return match.group(0)
        return _keep_span(match, start, end, kind)

    return pattern.sub(replace, text)


def _keep_span(match: re.Match[str], start: int, end: int, kind: str) -> str:
    text, base = match.group(0), match.start()
    return f"{text[:start - base]}[REDACTED:{kind}]{text[end - base:]}"

@cache
def all_markers() -> tuple[str, ...]:
    return tuple(sorted({m for _k, markers, _p, _g in (*OWN_RULES, *plugin_rules())
                         for m in markers if m}))


@cache
def unmarked() -> bool:
    return any(markers == ("",) for _k, markers, _p, _g in plugin_rules())

# Markers looked for as written (they hold a capital letter).
CASED = frozenset(m for _k, markers, _p, _g in OWN_RULES for m in markers if m != m.lower()) | \
    frozenset(m for markers in _PLUGIN_MARKERS.values() for m in markers if m != m.lower())
