# The masker as it was before the scanner (memoryd/memory/privacy/scanner.py): every rule's
# pattern over the whole text, gated by its marker words alone. Kept, unchanged, as the
# reference memoryd's masker must equal byte for byte (tests/property/
# test_masking_reference.py, benchmarks/masking.py). Not imported by memoryd.
"""Secrets and personal data out of memory text: masked before anything reaches memory.

Transcripts are full of credentials (a `.env` file read by a tool, a token in a
curl command). The daemon's store keeps the transcript as written (it is the
user's own record, mode 0600), but memory text is recalled into prompts,
exported and maybe shared through a remote backend, so it is masked first:
by every write to memory (segments, summaries, extracted facts, `remember`,
`correct`, `import`) and by the log renderer.

Two rule sets, applied in order:

1. memoryd's own rules (`_OWN`): whole blocks (PEM and PGP private keys), then
   secrets that need context to find (NAME=value and `"name": "value"`
   assignments, a password said in prose, `mysql -p…`, `Authorization: Basic`,
   URL passwords, a bare AWS secret key next to an access key id), then token
   formats detect-secrets does not know (Anthropic, Stripe test keys, npm
   `npm_`, Slack app tokens, GitLab's newer prefixes, Google API keys, bearer
   tokens).
2. detect-secrets' plugin rules (Yelp's maintained list: AWS, GitHub, GitLab,
   Stripe, Slack, Twilio, SendGrid, PyPI, npm, JWT, private key headers, ...),
   loaded from the installed package on first use. Its keyword, entropy and
   public-IP detectors are not used: the first is rule 1's assignment rule,
   the others mask hashes and addresses that are not secrets.

Then personal data (issue 16): e-mail addresses, US social security numbers, phone
numbers, payment card numbers (Luhn-checked), IBANs (mod-97-checked) and IP addresses (loopback and
unspecified ones kept); and before all, `<private>…</private>` spans.

A pattern with groups masks its longest group when that is at least
MIN_GROUP characters (the secret inside its context), else the whole match.
"""

from __future__ import annotations

import contextlib
import re
import sys
import types
from collections.abc import Callable, Iterable, Iterator
from functools import cache
from typing import Any

from memoryd.private import mask_private

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

_OWN: list[_Rule] = [
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
_AWS_ID = re.compile(r"\b(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b|\[REDACTED:aws_access_key\]")
_AWS_SECRET = re.compile(r"(?<![A-Za-z0-9/+=])(?=[A-Za-z0-9/+]*[a-z])(?=[A-Za-z0-9/+]*[A-Z])"
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
def _plugin_rules() -> tuple[_Rule, ...]:
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


def _mask(text: str, kind: str, pattern: re.Pattern[str], group: int | None) -> str:
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


def _present(markers: tuple[str, ...], found: frozenset[str]) -> bool:
    return not found.isdisjoint(markers)


# -- private spans and personal data (issue 16) ----------------------------------------

_EMAIL = re.compile(r"(?<![\w.+\-])[A-Za-z0-9][A-Za-z0-9._%+\-]*@[A-Za-z0-9](?:[A-Za-z0-9\-]*"
                    r"[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9\-]*[A-Za-z0-9])?)*\.[A-Za-z]{2,}\b"
                    r"(?!:)(?![.\-]?\w)")  # not git@host:repo (SSH), not a longer name
# +49 30 1234567, (555) 123-4567, 555-123-4567, 555.123.4567; not dates, versions or ids.
_PHONE = re.compile(r"(?<![\w+.\-])(?:\+\d{1,3}[ .\-]?(?:\(\d{1,4}\)[ .\-]?)?\d{1,4}"
                    r"(?:[ .\-]?\d{2,4}){2,4}|\(\d{3}\)[ .\-]?\d{3}[ .\-]\d{4}"
                    r"|\d{3}[.\-]\d{3}[.\-]\d{4})(?![\w.\-]*\d)")
# 13-19 digits run together, or grouped as cards print them (4-4-4-x, Amex 4-6-5).
_CARD = re.compile(r"(?<![\d\-.])(?:\d{13,19}|\d{4}([ \-])\d{4}\1\d{4}\1\d{1,7}"
                   r"|\d{4}([ \-])\d{6}\2\d{5})(?![\d\-]|\.\d)")
#: A US social security number as written (area never 000, 666 or 9xx).
_SSN = re.compile(r"(?<![\d-])(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}(?![\d-])")
_IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?\b")
_IPV4 = re.compile(r"(?<![\d.])(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}"
                   r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?![\d.]*\d)")
_IPV6 = re.compile(r"(?<![\w:])(?:[0-9A-Fa-f]{1,4}:){7}[0-9A-Fa-f]{1,4}(?![\w:])"
                   r"|(?<![\w:])(?:[0-9A-Fa-f]{1,4}:){1,6}:(?:[0-9A-Fa-f]{1,4}:){0,5}"
                   r"[0-9A-Fa-f]{1,4}(?![\w:])")
#: Every byte but an ASCII digit's: what is left of a text's UTF-8 once these are deleted
#: is its digits (no other character's bytes include one).
_NOT_DIGITS = bytes(b for b in range(256) if not 0x30 <= b <= 0x39)
#: Addresses that name no one: loopback, unspecified, documentation-free local ones.
_HARMLESS_IPS = frozenset({"127.0.0.1", "0.0.0.0", "255.255.255.255", "::1"})


_DIGIT_RUN = re.compile(r"\d+")


#: What an IBAN, and an IPv6 address, open with: every match of `_IBAN` and `_IPV6`
#: begins one of these, and none can begin inside one (those characters are all word
#: characters, which both patterns refuse before them).
_IBAN_START = re.compile(r"[A-Z]{2}\d{2}")
_IPV6_START = re.compile(r"[0-9A-Fa-f]{1,4}:")
#: Where a phone number can begin: a run of digits (its lookbehind refuses a digit
#: before it), a "+" or a "(".
_PHONE_START = re.compile(r"\d+|[+(]")


def _digit_runs(text: str) -> list[int]:
    """Where each run of digits (as `\\d` reads them) begins."""
    return _starts(_DIGIT_RUN, text)


class _Runs:
    """A text's digit runs, found again only once a mask has changed the text (`_sub_at`
    returns the very text it was given when nothing matched)."""

    __slots__ = ("_runs", "_text")

    def __init__(self) -> None:
        self._text: str | None = None
        self._runs: list[int] = []

    def of(self, text: str) -> list[int]:
        if text is not self._text:
            self._text, self._runs = text, _digit_runs(text)
        return self._runs


def _starts(pattern: re.Pattern[str], text: str) -> list[int]:
    return [found.start() for found in pattern.finditer(text)]


def _sub_at(pattern: re.Pattern[str], starts: Iterable[int], text: str,
            repl: str | Callable[[re.Match[str]], str]) -> str:
    """`pattern.sub(repl, text)` (`repl` taken literally), a match tried only at `starts`,
    in ascending order: the same text when no match of `pattern` begins anywhere else.
    `re` finds no quick way through text for a pattern that opens with a lookbehind: on a
    message of 4 KB each such `sub` took 100-300 us, finding the digit runs a few."""
    out: list[str] = []
    last = 0
    for start in starts:
        if start < last:
            continue
        match = pattern.match(text, start)
        if match is None:
            continue
        out += (text[last:start], repl(match) if callable(repl) else repl)
        last = match.end()
    if not out:
        return text
    out.append(text[last:])
    return "".join(out)


def _luhn(digits: str) -> bool:
    total = 0
    for position, char in enumerate(reversed(digits)):
        value = int(char)
        if position % 2:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def _iban_valid(text: str) -> bool:
    compact = text.replace(" ", "")
    moved = compact[4:] + compact[:4]
    number = "".join(str(int(c, 36)) for c in moved)
    return 15 <= len(compact) <= 34 and int(number) % 97 == 1


def _mask_card(match: re.Match[str]) -> str:
    digits = re.sub(r"\D", "", match.group(0))
    real = 13 <= len(digits) <= 19 and len(set(digits)) > 1 and _luhn(digits)
    return "[REDACTED:card]" if real else match.group(0)


def _mask_iban(match: re.Match[str]) -> str:
    return "[REDACTED:iban]" if _iban_valid(match.group(0)) else match.group(0)


def _mask_ip(match: re.Match[str]) -> str:
    return match.group(0) if match.group(0) in _HARMLESS_IPS else "[REDACTED:ip]"


# National identity numbers beside the US SSN, each as it is written and, where it has
# one, with its check digit or letter verified (a random number rarely passes).
#: United Kingdom National Insurance number: AB 12 34 56 C.
_NINO = re.compile(r"(?<![A-Za-z0-9])(?!BG|GB|KN|NK|NT|TN|ZZ)[A-CEGHJ-PR-TW-Z][A-CEGHJ-NPR-TW-Z]"
                   r" ?\d{2} ?\d{2} ?\d{2} ?[A-D](?![A-Za-z0-9])")
#: Spain's DNI (8 digits and a letter) and NIE (X, Y or Z, 7 digits, a letter).
_DNI = re.compile(r"(?<![A-Za-z0-9])([XYZ]?)(\d{7,8})-?([A-Z])(?![A-Za-z0-9])")
_DNI_LETTERS = "TRWAGMYFPDXBNJZSQVHLCKE"
#: Brazil's CPF as printed: 123.456.789-09.
_CPF = re.compile(r"(?<![\d.])(\d{3})\.(\d{3})\.(\d{3})-(\d{2})(?![\d-])")
#: Canada's SIN as printed, 3-3-3 with dashes or spaces (Luhn).
_SIN = re.compile(r"(?<![\d-])(\d{3})([ \-])(\d{3})\2(\d{3})(?![\d-])")
#: India's Aadhaar as printed, 4-4-4 (Verhoeff; never starts with 0 or 1).
_AADHAAR = re.compile(r"(?<![\d-])([2-9]\d{3})([ \-])(\d{4})\2(\d{4})(?![\d-])")
#: Italy's codice fiscale: six letters, two digits, a month letter, two digits, a letter,
#: three digits, a check letter.
_FISCAL_CODE = re.compile(r"(?<![A-Za-z0-9])[A-Z]{6}\d{2}[A-EHLMPRST]\d{2}[A-Z]\d{3}[A-Z]"
                          r"(?![A-Za-z0-9])")
_VERHOEFF_D = [[(i + j) % 5 + 5 * ((i // 5 + j // 5) % 2) if i < 5 and j < 5 else 0
                for j in range(10)] for i in range(10)]


def _verhoeff(number: str) -> bool:
    mult = ((0, 1, 2, 3, 4, 5, 6, 7, 8, 9), (1, 2, 3, 4, 0, 6, 7, 8, 9, 5),
            (2, 3, 4, 0, 1, 7, 8, 9, 5, 6), (3, 4, 0, 1, 2, 8, 9, 5, 6, 7),
            (4, 0, 1, 2, 3, 9, 5, 6, 7, 8), (5, 9, 8, 7, 6, 0, 4, 3, 2, 1),
            (6, 5, 9, 8, 7, 1, 0, 4, 3, 2), (7, 6, 5, 9, 8, 2, 1, 0, 4, 3),
            (8, 7, 6, 5, 9, 3, 2, 1, 0, 4), (9, 8, 7, 6, 5, 4, 3, 2, 1, 0))
    perm = ((0, 1, 2, 3, 4, 5, 6, 7, 8, 9), (1, 5, 7, 6, 2, 8, 3, 0, 9, 4),
            (5, 8, 0, 3, 7, 9, 6, 1, 4, 2), (8, 9, 1, 6, 0, 4, 3, 5, 2, 7),
            (9, 4, 5, 3, 1, 2, 6, 8, 7, 0), (4, 2, 8, 6, 5, 7, 3, 9, 0, 1),
            (2, 7, 9, 3, 8, 0, 6, 4, 1, 5), (7, 0, 4, 6, 9, 1, 3, 2, 5, 8))
    check = 0
    for position, digit in enumerate(reversed(number)):
        check = mult[check][perm[position % 8][int(digit)]]
    return check == 0


def _mask_dni(match: re.Match[str]) -> str:
    prefix, digits, letter = match.groups()
    if (prefix and len(digits) != 7) or (not prefix and len(digits) != 8):
        return match.group(0)
    number = int(str("XYZ".index(prefix)) + digits) if prefix else int(digits)
    return "[REDACTED:national_id]" if _DNI_LETTERS[number % 23] == letter else match.group(0)


def _mask_cpf(match: re.Match[str]) -> str:
    digits = [int(c) for c in "".join(match.groups())]
    if len(set(digits)) == 1:
        return match.group(0)
    for size in (9, 10):
        total = sum(d * w for d, w in zip(digits[:size], range(size + 1, 1, -1), strict=True))
        if (total * 10 % 11) % 10 != digits[size]:
            return match.group(0)
    return "[REDACTED:national_id]"


def _mask_sin(match: re.Match[str]) -> str:
    digits = match.group(1) + match.group(3) + match.group(4)
    return "[REDACTED:national_id]" if digits[0] != "0" and _luhn(digits) else match.group(0)


def _mask_aadhaar(match: re.Match[str]) -> str:
    digits = match.group(1) + match.group(3) + match.group(4)
    return "[REDACTED:national_id]" if _verhoeff(digits) else match.group(0)


def _mask_national(text: str) -> str:
    if "." in text and "-" in text:
        text = _CPF.sub(_mask_cpf, text)
    text = _SIN.sub(_mask_sin, text)
    text = _AADHAAR.sub(_mask_aadhaar, text)
    text = _DNI.sub(_mask_dni, text)
    text = _NINO.sub("[REDACTED:national_id]", text)
    return _FISCAL_CODE.sub("[REDACTED:national_id]", text)


def mask_personal(text: str) -> str:
    """E-mail addresses, phone numbers, payment cards (Luhn), IBANs (mod 97), IPs, and
    national identity numbers (the US SSN; the UK's, Spain's, Brazil's, Canada's, India's
    and Italy's, with their checks)."""
    if "@" in text:
        text = _EMAIL.sub("[REDACTED:email]", text)
    # One pass in C (ten `count`s were a tenth of a backfill's masking): most text has
    # few digits.
    digits = len(text.encode("utf-8", "surrogatepass").translate(None, _NOT_DIGITS))
    if digits < 6:
        return text
    text = _mask_national(text)
    if digits < 7:
        return text
    # Cards, SSNs, IPv4 addresses and phone numbers begin a run of digits (their
    # lookbehinds refuse a digit before them), or a phone number its "+" or "(".
    runs = _Runs()
    if digits >= 13:
        text = _sub_at(_CARD, runs.of(text), text, _mask_card)
        text = _sub_at(_IBAN, _starts(_IBAN_START, text), text, _mask_iban)
    if "-" in text:
        text = _sub_at(_SSN, runs.of(text), text, "[REDACTED:ssn]")
    text = _sub_at(_PHONE, _starts(_PHONE_START, text), text, "[REDACTED:phone]")
    if text.count(".") >= 3:
        text = _sub_at(_IPV4, runs.of(text), text, _mask_ip)
    if "::" in text or text.count(":") >= 7:
        text = _sub_at(_IPV6, _starts(_IPV6_START, text), text, _mask_ip)
    return text


ExtraMasks = tuple[tuple[str, re.Pattern[str]], ...]


def compile_extra(patterns: Iterable[tuple[str, str]]) -> ExtraMasks:
    """(kind, regular expression) pairs from the settings, compiled; ValueError names a bad one."""
    compiled = []
    for kind, pattern in patterns:
        try:
            compiled.append((kind, re.compile(pattern)))
        except re.error as exc:
            raise ValueError(f"pattern {kind!r} is not a valid regular expression"
                             f" ({exc})") from None
    return tuple(compiled)


def mask_extra(text: str, masks: ExtraMasks) -> str:
    """`text` with every match of the configured extra patterns replaced by
    `[REDACTED:<kind>]` (`privacy.extra_patterns`)."""
    for kind, pattern in masks:
        text = pattern.sub(f"[REDACTED:{kind}]", text)
    return text


def shown(text: str | None, masks: ExtraMasks) -> str:
    """Stored text as every reader is shown it (`sessions`, `show`, the viewer, the API):
    secrets, personal data, `<private>` spans and the configured patterns masked."""
    return "" if not text else mask_extra(redact(text), masks)


def sessions_shown(rows: list[dict[str, Any]], masks: ExtraMasks) -> list[dict[str, Any]]:
    """Rows of `sessions` with their summaries as a reader is shown them."""
    for row in rows:
        if row.get("summary_markdown"):
            row["summary_markdown"] = shown(row["summary_markdown"], masks)
    return rows


#: A JSON string escape: `\n`, `\"`, `\uXXXX`...
_JSON_ESCAPE = re.compile(r'\\(u[0-9a-fA-F]{4}|["\\/bfnrt])')
_ESCAPED = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", '"': '"', "\\": "\\",
            "/": "/"}


def _unescape(match: re.Match[str]) -> str:
    code = match.group(1)
    return chr(int(code[1:], 16)) if code[0] == "u" else _ESCAPED[code]


def readable_stored(text: str, kind: str | None) -> str:
    """A stored message's text as a person or an agent reads it, before masking: a tool
    call's input is JSON text, whose escapes (`\nAuthorization: Basic`, `{\"api_key\"`)
    hide a secret from rules anchored on a line start or a quote; its strings are shown
    decoded, so that `redact` sees them as written."""
    if kind not in ("tool_call", "tool_input") or "\\" not in text:
        return text
    return _JSON_ESCAPE.sub(_unescape, text)


def redact(text: str) -> str:
    """`text` with `<private>` spans, secrets and personal data replaced by
    `[REDACTED:<kind>]`: what every write to memory, and every log line, goes through."""
    return mask_personal(_mask_secrets(mask_private(text)))


def _mask_secrets(text: str) -> str:
    lowered = text.lower()
    if not _holds_any(_ANY_GATED, text, lowered):
        return text  # most text: no marker of any rule
    found = _markers_in(text, lowered)
    for kind, markers, pattern, group in _OWN:
        if _present(markers, found):
            masked = _mask(text, kind, pattern, group)
            if masked != text:
                text, found = masked, _markers_in(masked, masked.lower())
    # A bare AWS secret key is told from a hash only by what is around it: an access key
    # id, or the text speaking of AWS.
    if ("AKIA" in text or "ASIA" in text or "aws_access_key]" in text
            or "aws" in lowered) and (_AWS_ID.search(text) or "aws" in lowered):
        masked = _AWS_SECRET.sub("[REDACTED:aws_secret_key]", text)
        if masked != text:
            text, found = masked, _markers_in(masked, masked.lower())
    for kind, markers, pattern, group in _plugin_rules():
        if _present(markers, found):
            masked = _mask(text, kind, pattern, group)
            if masked != text:
                text, found = masked, _markers_in(masked, masked.lower())
    return text


#: Characters from the most to the least common in text (prose and code); one not here
#: (a digit, most capitals) is rarer still.
_COMMONEST = " \netaoinsrhldcu.mfpgwy,b\"'vk-:/_()=xjqzTSAICEPMNRDBLFOHWGUKVYJXQZ"


def _gate(marker: str) -> str:
    """The marker's rarest character: text without it cannot hold the marker, and
    `char in text` (a memchr) costs a fraction of `marker in text`."""
    return max(marker, key=lambda c: _COMMONEST.find(c) % (len(_COMMONEST) + 1))


# (gate, cased, markers, pattern): a group is looked for only in text holding its gate
# character; markers that all begin alike in one search (the regex engine looks for
# their common start about as fast as `in` looks for one marker), others one by one.
_Gated = tuple[tuple[str, bool, tuple[str, ...], re.Pattern[str] | None], ...]


def _gated(markers: Iterable[str]) -> _Gated:
    groups: dict[tuple[str, bool], list[str]] = {}
    for marker in sorted(set(markers)):
        groups.setdefault((_gate(marker), marker in _CASED), []).append(marker)
    return tuple((gate, cased, tuple(group), re.compile("|".join(map(re.escape, group)))
                  if len(group) > 1 and len({m[0] for m in group}) == 1 else None)
                 for (gate, cased), group in groups.items())


def _holds_any(gated: _Gated, text: str, lowered: str) -> bool:
    # Plain loops: a generator a group was a tenth of the test (it runs on every text).
    for gate, cased, markers, pattern in gated:
        within = text if cased else lowered
        if gate in within:
            if pattern is not None:
                if pattern.search(within) is not None:
                    return True
                continue
            for marker in markers:
                if marker in within:
                    return True
    return False


def _markers_in(text: str, lowered: str) -> frozenset[str]:
    """Every rule's markers that `text` holds (capitalised ones as written), and "" (a
    plugin this module has no markers for always runs)."""
    found = [""]
    for gate, cased, markers, _pattern in _ALL_GATED:
        within = text if cased else lowered
        if gate in within:
            found += [marker for marker in markers if marker in within]
    return frozenset(found)


# Markers looked for as written (they hold a capital letter).
_CASED = frozenset(m for _k, markers, _p, _g in _OWN for m in markers if m != m.lower()) | \
    frozenset(m for markers in _PLUGIN_MARKERS.values() for m in markers if m != m.lower())
_LOWER = frozenset(m for _k, markers, _p, _g in _OWN for m in markers if m == m.lower()) | \
    frozenset(m for markers in _PLUGIN_MARKERS.values() for m in markers if m == m.lower())


def _least(markers: frozenset[str]) -> tuple[str, ...]:
    """The markers that hold no other marker: text holding any marker holds one of these."""
    return tuple(sorted(m for m in markers if not any(o != m and o in m for o in markers)))


# The first test of every text: is any rule's marker in it at all?
_ANY_LOWER = _least(_LOWER)
# ("PRIVATE KEY" needs no test of its own: the lower-cased text then holds "key".)
_ANY_CASED = tuple(m for m in _least(_CASED) if not any(o in m.lower() for o in _ANY_LOWER))
_ANY_GATED = _gated(_ANY_LOWER + _ANY_CASED)
_ALL_GATED = _gated(_CASED | _LOWER)
