"""Masking with the scanner masks exactly what masking did before it, byte for byte.

`tests/reference/redaction_re.py` is the masker as it was before the scanner: every
rule's `re` pattern over the whole text, gated only by its marker words. memoryd's masker
must give the same text for every input, whether the scanner is built (a process that
has masked much, the daemon) or not yet (a hook, a command): random text with planted
secrets, personal data, digits, separators, escapes and characters beyond ASCII that
Python's classes and IGNORECASE read (Arabic digits, no-break spaces, the Kelvin sign,
the long s, the dotted and dotless i), and every line of the real fixture transcripts.
"""

from __future__ import annotations

import random
import string
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from memoryd.memory.privacy import redaction
from tests.helpers import TRANSCRIPTS
from tests.reference import redaction_re as reference


@pytest.fixture(params=["scanner", "rules alone"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The scanner built, or not yet built (and never, within the test); nothing
    remembered from the other mode."""
    redaction._redact_remembered.cache_clear()
    if request.param == "scanner":
        redaction.prepare()
    else:
        monkeypatch.setattr(redaction, "_SCANNING", redaction._Scanning())
        monkeypatch.setattr(redaction, "SCANNER_AFTER", 1 << 62)
    yield request.param


def _luhn_card(rng: random.Random) -> str:
    digits = [4] + [rng.randrange(10) for _ in range(14)]
    total = sum(d if i % 2 else (d * 2 - 9 if d > 4 else d * 2)
                for i, d in enumerate(reversed(digits)))
    digits.append((10 - total % 10) % 10)
    return "".join(map(str, digits))


def _planted(seed: int) -> str:
    """One secret or personal item of a kind memoryd masks, its value from `seed`."""
    rng = random.Random(seed)
    token = "".join(rng.choices(string.ascii_letters + string.digits, k=40))
    upper = "".join(rng.choices(string.ascii_uppercase + string.digits, k=16))
    card = _luhn_card(rng)
    items = [
        f"AKIA{upper}", f"aws_secret_access_key = {token}", f"ghp_{token[:36]}",
        f"sk-ant-api03-{token}", f"sk-proj-{token}", f"xoxb-{token[:24]}",
        f"glpat-{token[:20]}", f"npm_{token[:36]}", f"AIza{token[:35]}",
        f"eyJ{token[:12]}.eyJ{token[12:24]}.{token[24:]}", f"hf_{token[:34]}",
        f"api_key={token[:20]}", f'"password": "{token[:10]}!"', f"TOKEN='{token[:12]}'",
        f"the deploy password is {token[:8]}!9", f"postgres://app:{token[:12]}@db:5432/x",
        f"Authorization: Basic {token[:20]}", f"Bearer {token}",
        f"mysql -u root -p{token[:10]} db", f"machine host login me password {token[:9]}",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIE" + token + "\n-----END RSA PRIVATE KEY-----",
        f"{token[:6].lower()}@example.com", f"+1 555 {rng.randrange(100, 999)} 4567",
        f"(555) 123-{rng.randrange(1000, 9999)}", f"555.{rng.randrange(100, 999)}.1234",
        card, " ".join(card[i:i + 4] for i in range(0, 16, 4)), "-".join([card[:4]] * 4),
        f"{rng.randrange(100, 665)}-{rng.randrange(10, 99)}-{rng.randrange(1000, 9999)}",
        "DE89 3704 0044 0532 0130 00", "GB82WEST12345698765432",
        f"10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(256)}",
        "2001:db8::8a2e:370:7334", "fe80:0:0:0:202:b3ff:fe1e:8329",
        "AB 12 34 56 C", "12345678Z", "X1234567L", "123.456.789-09", "046 454 286",
        "2345 6789 0123", "RSSMRA85T10A562S", f"<private>{token}</private>",
        f"{rng.randrange(1_600_000_000_000, 1_800_000_000_000)}",
    ]
    return rng.choice(items)


_PIECES = st.one_of(
    st.sampled_from([
        " ", "\n", "\t", "-", ".", ":", "::", "/", "+", "(", ")", "@", "_", "=", '"', "'",
        "\\n", '\\"', "\\u003c", "key", "token", "secret", "password", "pass", "aws",
        "Bearer ", "://", "AKIA", "eyJ", "sk-", "gh", "xox", "0", "00", "123", "4111",
        "2026-11-28", "v3.12.1", "12:45:09", "٣", "١٢٣٤", "\u00a0", "\u2003", "\u212a",
        "\u017f", "\u0130", "\u0131", "API_\u212aEY=", "to\u212aen: ", "—", "→", "é",
        "中文", "ß", "\ud83d\ude00",
    ]),
    st.text(alphabet=string.ascii_letters + string.digits + " .-_:/@+=", max_size=12),
    st.integers(min_value=0, max_value=10**6).map(_planted),
    st.integers(min_value=0, max_value=10**6).map(lambda n: f"{_planted(n)} {_planted(n)}"),
    st.integers(min_value=0, max_value=10**13).map(str),
)
_TEXTS = st.lists(_PIECES, max_size=40).map("".join)


@settings(max_examples=1000, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_TEXTS)
@example("my key: AKIAABCDEFGHIJKLMNOP and wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY aws")
@example("GB82WEST12345698765432 GB82WEST12345698765432 4111111111111111 4111111111111111 "
         "+1 555 123 4567 (555) 123-4567 078-05-1120 078-05-1120 10.0.0.7 10.0.0.8 "
         "fe80::1:2 fe80::3:4 ١٢٣٤٥٦٧٨٩٠١٢٣٤٥ 4111-1111-1111-1111")
@example("token:aws_secret_access_key = KYQ9AeyeFntJG9MSgtD8dV3HlYbJYywouuqpis7i")
@example("call +49 30 1234567 or 4111 1111 1111 1111 at 10.0.0.1, ssn 078-05-1120")
@example("API_\u212aEY=abcdef123456 pa\u017f\u017fword is hunter2! ١٢٣-٤٥-٦٧٨٩")
@example("to\u212aen: abcdef123456, \u0130P 10.0.0.7 card ١٢٣٤٥٦٧٨٩٠١٢٣٤٥")
def test_masks_as_the_reference_does(mode: str, text: str) -> None:
    assert redaction.redact(text) == reference.redact(text)
    assert redaction.mask_personal(text) == reference.mask_personal(text)


@pytest.mark.parametrize("kind", ["claude", "codex", "gemini"])
def test_every_fixture_line_masks_as_the_reference_does(mode: str, kind: str) -> None:
    lines = [line for path in sorted((TRANSCRIPTS / kind).iterdir())
             if path.suffix in (".jsonl", ".json")
             for line in path.read_bytes().decode("utf-8", "surrogatepass").splitlines()]
    assert lines
    differing = [n for n, line in enumerate(lines)
                 if redaction.redact(line) != reference.redact(line)]
    assert differing == []


_EXTRA = redaction.compile_extra([
    ("ticket", r"\bTICKET-\d{3,6}\b"), ("customer", r"(?i)acme\s+corp(?:oration)?"),
    ("tag", r"(?<![\w-])proj-[a-z]{2,}(?![\w-])"), ("twice", r"(\d{2})-\1"),
    ("code", r"[A-Z]{3}\d{2,}(?=\s|$)"), ("wide", r"\s\S{30,}\s"), ("spaced", r"x\s+y"),
])


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(_PIECES, st.sampled_from([
    "TICKET-1234", "ACME  Corp", "acme corporation", "proj-abc", "12-12", "12-13",
    "ABC123 ", "x \u00a0 y", "x\u2003y", "\u212aACME corp"])), max_size=30).map("".join))
def test_extra_patterns_mask_as_their_own_subs_do(mode: str, text: str) -> None:
    expected = text
    for kind, pattern in _EXTRA:
        expected = pattern.sub(f"[REDACTED:{kind}]", expected)
    assert redaction.mask_extra(text, _EXTRA) == expected
