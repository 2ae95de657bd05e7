"""Secrets and personal data out of memory text: masked before anything reaches memory.

Transcripts are full of credentials (a `.env` file read by a tool, a token in a
curl command). The daemon's store keeps the transcript as written (it is the
user's own record, mode 0600), but memory text is recalled into prompts,
exported and maybe shared through a remote backend, so it is masked first:
by every write to memory (segments, summaries, extracted facts, `remember`,
`correct`, `import`) and by the log renderer.

Two rule sets, applied in order:

1. memoryd's own rules (`OWN_RULES`): whole blocks (PEM and PGP private keys), then
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

Every pattern of both sets and of personal data is first looked for by one scan
(`scanner.Scanner`, Hyperscan): a rule runs only where that scan says it may
match, so most text costs one pass, and what is masked is what the rules say.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable
from functools import lru_cache
from re import _parser as sre_parse  # type: ignore[attr-defined]
from typing import Any

from memoryd.memory.privacy.personal import (
    _IPV4,
    _IPV6,
    AADHAAR_RE,
    CARD_RE,
    CPF_RE,
    DNI_RE,
    EMAIL_RE,
    FISCAL_CODE_RE,
    IBAN_RE,
    NINO_RE,
    NOT_DIGITS_RE,
    PHONE_RE,
    SIN_RE,
    SSN_RE,
    mask_aadhaar,
    mask_card,
    mask_cpf,
    mask_dni,
    mask_iban,
    mask_ip,
    mask_sin,
)
from memoryd.memory.privacy.scanner import Found, Scanner, characters_before
from memoryd.memory.privacy.secret_rules import (
    AWS_CONTEXT,
    AWS_ID,
    AWS_SECRET,
    CASED,
    OWN_RULES,
    all_markers,
    mask_secret,
    plugin_rules,
    unmarked,
)
from memoryd.private import TAG as PRIVATE_TAG
from memoryd.private import mask_private

_DIGIT_RUN = re.compile(r"\d+")


#: What an IBAN, and an IPv6 address, open with: every match of `IBAN_RE` and `_IPV6`
#: begins one of these, and none can begin inside one (those characters are all word
#: characters, which both patterns refuse before them).
_IBAN_START = re.compile(r"[A-Z]{2}\d{2}")
_IPV6_START = re.compile(r"[0-9A-Fa-f]{1,4}:")
#: Where a phone number can begin: a run of digits (its lookbehind refuses a digit
#: before it), a "+" or a "(".
_PHONE_START = re.compile(r"\d+|[+(]")


def _starts(pattern: re.Pattern[str], text: str) -> list[int]:
    return [found.start() for found in pattern.finditer(text)]


def _sub_at(pattern: re.Pattern[str], starts: Iterable[int], text: str,
            repl: str | Callable[[re.Match[str]], str],
            edits: list[tuple[int, int, int]] | None = None) -> str:
    """`pattern.sub(repl, text)` (`repl` taken literally), a match tried only at `starts`,
    in ascending order: the same text when no match of `pattern` begins anywhere else.
    `re` finds no quick way through text for a pattern that opens with a lookbehind: on a
    message of 4 KB each such `sub` took 100-300 us, finding the digit runs a few."""
    out: list[str] = []
    last = 0
    changed = False
    for start in starts:
        if start < last:
            continue
        match = pattern.match(text, start)
        if match is None:
            continue
        replaced = repl(match) if callable(repl) else repl
        if replaced != match.group(0):
            changed = True
            if edits is not None:  # (start, end, length of what replaced it)
                edits.append((start, match.end(), len(replaced)))
        out += (text[last:start], replaced)
        last = match.end()
    if not changed:  # the very text: what was found of it stays true (`_Possible`)
        return text
    out.append(text[last:])
    return "".join(out)

def _mask_national(text: str, possible: _Possible) -> str:
    steps: list[tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]]] = [
        (SIN_RE, mask_sin), (AADHAAR_RE, mask_aadhaar), (DNI_RE, mask_dni),
        (NINO_RE, "[REDACTED:national_id]"), (FISCAL_CODE_RE, "[REDACTED:national_id]")]
    if "." in text and "-" in text:
        steps.insert(0, (CPF_RE, mask_cpf))
    for pattern, repl in steps:
        if possible.may(pattern, text):
            masked = pattern.sub(repl, text)
            if masked != text:  # else the very text: what the scan found of it holds
                text = masked
    return text


def mask_personal(text: str) -> str:
    """E-mail addresses, phone numbers, payment cards (Luhn), IBANs (mod 97), IPs, and
    national identity numbers (the US SSN; the UK's, Spain's, Brazil's, Canada's, India's
    and Italy's, with their checks)."""
    return _mask_personal(text, _Possible(len(text)))


def _mask_personal(text: str, possible: _Possible) -> str:
    if "@" in text and possible.may(EMAIL_RE, text):
        text = EMAIL_RE.sub("[REDACTED:email]", text)
    # One pass in C (ten `count`s were a tenth of a backfill's masking): most text has
    # few digits.
    digits = len(text.encode("utf-8", "surrogatepass").translate(None, NOT_DIGITS_RE))
    if digits < 6:
        return text
    text = _mask_national(text, possible)
    if digits < 7:
        return text
    # Cards, SSNs, IPv4 addresses and phone numbers begin a run of digits (their
    # lookbehinds refuse a digit before them), or a phone number its "+" or "(": a match
    # is tried only there, and only near where the scanner found one may end.
    if digits >= 13:
        if possible.may(CARD_RE, text):
            text = possible.masked_at(CARD_RE, text, mask_card)
        if possible.may(IBAN_RE, text):
            text = possible.masked_at(IBAN_RE, text, mask_iban)
    if "-" in text and possible.may(SSN_RE, text):
        text = possible.masked_at(SSN_RE, text, "[REDACTED:ssn]")
    if possible.may(PHONE_RE, text):
        text = possible.masked_at(PHONE_RE, text, "[REDACTED:phone]")
    if text.count(".") >= 3 and possible.may(_IPV4, text):
        text = possible.masked_at(_IPV4, text, mask_ip)
    if ("::" in text or text.count(":") >= 7) and possible.may(_IPV6, text):
        text = possible.masked_at(_IPV6, text, mask_ip)
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
    `[REDACTED:<kind>]` (`privacy.extra_patterns`): each run only where the scanner says
    it may match, once the process has one (`_Scanning`)."""
    if not masks:
        return text
    scanner = _extra_scanner(masks) if _SCANNING.get(len(text)) is not None else None
    found: frozenset[int] | None = None
    for index, (kind, pattern) in enumerate(masks):
        if scanner is not None:
            if found is None:
                found = scanner.scan(0, text.encode("utf-8", "surrogatepass")).possible
            if index not in found:
                continue
        masked = pattern.sub(f"[REDACTED:{kind}]", text)
        if masked != text:
            text, found = masked, None
    return text


@lru_cache(maxsize=8)
def _extra_scanner(masks: ExtraMasks) -> Scanner:
    """The configured extra patterns in one scan (a pattern the scanner cannot take runs
    on every text, as it did before)."""
    return Scanner([p for _k, p in masks], [range(len(masks))])


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


#: Texts up to this long are remembered with what masking made of them (the last
#: REMEMBERED of them): a message is masked for its segment and again for its session's
#: digest, in the same pass.
REMEMBER_CHARS = 16_384
REMEMBERED = 64


def redact(text: str) -> str:
    """`text` with `<private>` spans, secrets and personal data replaced by
    `[REDACTED:<kind>]`: what every write to memory, and every log line, goes through."""
    if len(text) <= REMEMBER_CHARS:
        return _redact_remembered(text)
    return _redact(text)


@lru_cache(maxsize=REMEMBERED)
def _redact_remembered(text: str) -> str:
    return _redact(text)


def _redact(text: str) -> str:
    possible = _Possible(len(text))
    if possible.may(PRIVATE_TAG, text):  # (no tag, nothing private: the very text)
        text = mask_private(text)
    return _mask_personal(_mask_secrets(text, possible), possible)


def _mask_secrets(text: str, possible: _Possible) -> str:
    if not possible.any_secret(text):
        return text
    original = text
    lowered = _Lowered()
    # A rule with no markers (a plugin of a newer detect-secrets) runs in any text that
    # holds some rule's marker, and only there.
    if unmarked() and not _holds(all_markers(), text, lowered):
        return text
    # (Asked of the text as it came: whether it speaks of AWS is read from it, not from
    # what the rules below leave of it.)
    aws_said = possible.may(AWS_CONTEXT, original)
    for kind, markers, pattern, group in OWN_RULES:
        if possible.may(pattern, text) and _holds(markers, text, lowered):
            masked = mask_secret(text, kind, pattern, group)
            if masked != text:
                text = masked
    # A bare AWS secret key is told from a hash only by what is around it: an access key
    # id, or the text speaking of AWS.
    if (aws_said or possible.may(AWS_CONTEXT, text)) and possible.may(AWS_SECRET, text):
        low = original.lower()
        if ("AKIA" in text or "ASIA" in text or "aws_access_key]" in text
                or "aws" in low) and (AWS_ID.search(text) or "aws" in low):
            masked = AWS_SECRET.sub("[REDACTED:aws_secret_key]", text)
            if masked != text:
                text = masked
    for kind, markers, pattern, group in plugin_rules():
        if possible.may(pattern, text) and _holds(markers, text, lowered):
            masked = mask_secret(text, kind, pattern, group)
            if masked != text:
                text = masked
    return text


class _Lowered:
    """A text lower-cased, once for each text a mask leaves."""

    __slots__ = ("_lowered", "_text")

    def __init__(self) -> None:
        self._text: str | None = None
        self._lowered = ""

    def of(self, text: str) -> str:
        if text is not self._text:
            self._text, self._lowered = text, text.lower()
        return self._lowered


def _holds(markers: tuple[str, ...], text: str, lowered: _Lowered) -> bool:
    """Whether the text holds one of a rule's markers (capitalised ones as written; ""
    is in every text)."""
    return any(marker in (text if marker in CASED else lowered.of(text))
               for marker in markers)

#: Text a process masks before the scanner is built for it: the build takes a few tenths
#: of a second, which a process masking a few lines (a hook, a command, their log lines)
#: never pays; the daemon builds it as it starts (`prepare`).
SCANNER_AFTER = 256 * 1024

#: What a match of each pattern tried only where it may begin begins: `_sub_at` is
#: given these starts (every match of the pattern begins at one of them, and none can
#: begin inside one: each pattern refuses a character of its start class before it).
_START_OF: dict[re.Pattern[str], re.Pattern[str]] = {
    CARD_RE: _DIGIT_RUN, SSN_RE: _DIGIT_RUN, _IPV4: _DIGIT_RUN, IBAN_RE: _IBAN_START,
    PHONE_RE: _PHONE_START, _IPV6: _IPV6_START}


class _Scan:
    """The scanner over every rule's pattern, in groups each scanned only when a rule of
    it is asked about: the secret rules (most text holds none of their literals), a bare
    AWS key (only in text that speaks of AWS), e-mail addresses (text with an @), and
    national identity numbers with the numbers tried where they may begin (those scanned
    for where)."""

    def __init__(self) -> None:
        secrets = [p for _k, _m, p, _g in OWN_RULES] + [AWS_CONTEXT, PRIVATE_TAG] + \
            [p for _k, _m, p, _g in plugin_rules()]
        national = [CPF_RE, SIN_RE, AADHAAR_RE, DNI_RE, NINO_RE, FISCAL_CODE_RE]
        numbers = list(_START_OF)
        groups = [secrets, [AWS_SECRET], [EMAIL_RE], national + numbers]
        patterns = [p for g in groups for p in g]
        self.index = {p: i for i, p in enumerate(patterns)}
        self.group = {p: number for number, g in enumerate(groups) for p in g}
        self.widest = {p: sre_parse.parse(p.pattern, p.flags).getwidth()[1] for p in numbers}
        #: How far before its end a candidate of each pattern scanned for where may begin,
        #: in bytes of an ASCII text (its widest match, and a byte each side for its edges).
        self.reach = {self.index[p]: self.widest[p] + 2 for p in numbers}
        self.numbers = len(groups) - 1
        self.whether = frozenset(self.index[p] for p in national)
        ranges, first = [], 0
        for g in groups:
            ranges.append(range(first, first + len(g)))
            first += len(g)
        self.scanner = Scanner(patterns, ranges, where=[self.index[p] for p in numbers],
                               shaped=(2, 3))


class _Scanning:
    """The scanner, once built; until then every rule may match every text (the rules
    then run as they are, gated by their markers alone)."""

    def __init__(self) -> None:
        self._built: _Scan | None = None
        self._masked = 0
        self._lock = threading.Lock()

    def get(self, size: int) -> _Scan | None:
        if self._built is None:
            self._masked += size
            if self._masked >= SCANNER_AFTER and self._lock.acquire(blocking=False):
                try:
                    self._build()
                finally:
                    self._lock.release()
        return self._built

    def prepare(self) -> _Scan:
        with self._lock:
            return self._build()

    def _build(self) -> _Scan:
        if self._built is None:
            self._built = _Scan()
        return self._built


_SCANNING = _Scanning()


def prepare() -> None:
    """Build the scanner now (the daemon, as it starts, in a worker thread), not once the
    process has masked `SCANNER_AFTER` of text."""
    _SCANNING.prepare()


def scanner_summary() -> str:
    """How the rules are looked for (for `doctor` and the benchmarks)."""
    return _SCANNING.prepare().scanner.summary()


class _Possible:
    """What the scanner says of a text as it stands, each group scanned when first asked
    about and again once a mask has changed the text."""

    __slots__ = ("_data", "_found", "_scan", "_text")

    def __init__(self, size: int) -> None:
        self._scan = _SCANNING.get(size)
        self._text: str | None = None
        self._data = b""
        self._found: dict[int, Found] = {}

    def _of(self, pattern: re.Pattern[str], text: str) -> Found | None:
        scan = self._scan
        if scan is None:
            return None
        if text is not self._text:
            self._text, self._data, self._found = text, text.encode("utf-8", "surrogatepass"), {}
        group = scan.group[pattern]
        found = self._found.get(group)
        if found is None:
            found = self._found[group] = scan.scanner.scan(group, self._data, text.isascii())
        return found

    def may(self, pattern: re.Pattern[str], text: str) -> bool:
        found = self._of(pattern, text)
        return found is None or (self._scan is not None
                                 and self._scan.index[pattern] in found.possible)

    def any_secret(self, text: str) -> bool:
        found = self._of(AWS_CONTEXT, text)
        return found is None or bool(found.possible)

    def masked_at(self, pattern: re.Pattern[str], text: str,
                  repl: str | Callable[[re.Match[str]], str]) -> str:
        """`pattern`'s matches in `text` replaced (`_sub_at` where they may begin); what
        the scan found of the text carried over to what is left of it."""
        edits: list[tuple[int, int, int]] = []
        masked = _sub_at(pattern, self.starts(pattern, text), text, repl, edits)
        if masked is not text:
            self._edited(text, masked, edits)
        return masked

    def _edited(self, old: str, new: str, edits: list[tuple[int, int, int]]) -> None:
        """The numbers' candidates in `new`, which is `old` with `edits` made: a candidate
        clear of every edit moves with the text; near an edit, the text is scanned again
        (an ASCII text: otherwise all of it is, when next asked)."""
        scan = self._scan
        found = self._found.get(scan.numbers) if scan is not None else None
        if scan is None or found is None or old is not self._text or not new.isascii() \
                or not old.isascii():
            return
        data = new.encode()
        widest = max(scan.reach.values())
        ends: dict[int, list[int]] = {}
        for index, old_ends in found.ends.items():
            reach = scan.reach[index]
            for end in old_ends:
                shift = 0
                for start, stop, length in edits:
                    if stop <= end - reach:
                        shift += length - (stop - start)
                    elif start - 1 <= end:
                        break  # touches this edit: found again below, if still there
                else:
                    ends.setdefault(index, []).append(end + shift)
        shift = 0
        for start, stop, length in edits:
            begin = start + shift
            shift += length - (stop - start)
            low, high = max(begin - widest - 1, 0), min(begin + length + widest + 1, len(data))
            near = scan.scanner.scan(scan.numbers, data[low:high], True)
            for index, near_ends in near.ends.items():
                ends.setdefault(index, []).extend(low + end for end in near_ends)
        # Those scanned for whether, not where, may match what the edits made (and a
        # pattern no superset was found for, as before).
        unsure = scan.whether | {i for i in found.possible if i not in found.ends}
        self._text, self._data = new, data
        self._found = {scan.numbers: Found(frozenset(unsure | set(ends)), ends)}

    def starts(self, pattern: re.Pattern[str], text: str) -> list[int]:
        """Where a match of `pattern` may begin: where its start class matches, near an end
        the scanner found (no further back than its widest match), or anywhere."""
        start_of = _START_OF[pattern]
        found = self._of(pattern, text)
        scan = self._scan
        if found is None or scan is None:
            return _starts(start_of, text)
        index = scan.index[pattern]
        if index not in found.ends:  # no superset of it scanned: anywhere
            return _starts(start_of, text)
        ascii_text = text.isascii()
        widest = scan.widest[pattern] + 1  # the superset's end may be a byte past the match's
        windows: list[list[int]] = []
        for end in sorted(set(found.ends[index])):
            if not ascii_text:
                end = characters_before(self._data, end)
            if windows and end - widest <= windows[-1][1]:
                windows[-1][1] = end
            else:
                windows.append([max(end - widest, 0), end])
        # A start found in a window may run past its end (an IBAN's "GB82" begun at its
        # last character): each window's text is read that much further.
        reach = _START_WIDTH[start_of]
        return [m.start() for lo, hi in windows
                for m in start_of.finditer(text, lo, hi + reach) if m.start() < hi]


def _start_width(pattern: re.Pattern[str]) -> int:
    """How far past a window a start found in it may run: the start pattern's widest
    match (one where it has no bound: a run of digits cut short begins where it began)."""
    widest = sre_parse.parse(pattern.pattern, pattern.flags).getwidth()[1]
    return int(widest) if widest < sre_parse.MAXREPEAT else 1


_START_WIDTH = {p: _start_width(p) for p in set(_START_OF.values())}
