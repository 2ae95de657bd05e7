"""Masking personal data tries its patterns only where a match can begin (a run of
digits, a phone number's "+" or "(", what an IBAN or an IPv6 address opens with): it
must mask exactly what scanning the whole text with each pattern does, whatever the
text."""

from __future__ import annotations

import re

from hypothesis import example, given, settings
from hypothesis import strategies as st

from memoryd.memory.privacy import redaction as r


def _scanned(text: str) -> str:
    """mask_personal as written before: each pattern's `sub` over the whole text."""
    if "@" in text:
        text = r.EMAIL_RE.sub("[REDACTED:email]", text)
    digits = sum(map(text.count, "0123456789"))
    if digits < 7:
        return text
    if digits >= 13:
        text = r.CARD_RE.sub(r.mask_card, text)
        text = r.IBAN_RE.sub(r.mask_iban, text)
    if "-" in text:
        text = r.SSN_RE.sub("[REDACTED:ssn]", text)
    text = r.PHONE_RE.sub("[REDACTED:phone]", text)
    if text.count(".") >= 3:
        text = r._IPV4.sub(r.mask_ip, text)
    if "::" in text or text.count(":") >= 7:
        text = r._IPV6.sub(r.mask_ip, text)
    return text


# Digits (ASCII and others `\d` reads), what numbers are written with, and words.
_PIECES = st.sampled_from([
    "0", "1", "4", "5", "6", "9", "00", "000", "123", "4111", "6666", "٣", "١٢٣٤",
    " ", "-", ".", "(", ")", "+", ":", "::", "/", "\n", "a", "x", "DE", "GB", "ab_",
    "call ", "ip ", "4111 1111 1111 1111", "4111-1111-1111-1111", "078-05-1120",
    "+49 30 1234567", "(555) 123-4567", "555.123.4567", "10.0.0.1", "192.168.1.20",
    "DE89 3704 0044 0532 0130 00", "378282246310005", "2001:db8::1", "2001:DB8::1",
    "fe80::", "FE80::1", "DEAD:BEEF::1", "a:b:c:d:e:f:1:2", "1234567", "0db8:", "DEAD:",
    "ff", "Fe", "GB82WEST", "12345698765432",
])


@settings(max_examples=600, deadline=None)
@given(st.lists(_PIECES, max_size=40).map("".join))
def test_masking_only_where_matches_begin_is_masking_everywhere(text: str) -> None:
    assert r.mask_personal(text) == _scanned(text)


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(codec="utf-8"), max_size=80)
       | st.text(st.characters(categories=["Cs", "Nd", "Zs", "Ll"]), max_size=80),
       st.lists(_PIECES, max_size=20))
@example("\ud800 ", ["4111 1111 1111 1111"])  # a lone surrogate, as transcripts hold
def test_any_text_around_numbers(noise: str, pieces: list[str]) -> None:
    text = noise.join(pieces) if pieces else noise
    assert r.mask_personal(text) == _scanned(text)


def test_a_match_begins_only_at_a_run_or_a_sign() -> None:
    """The premise, on the patterns themselves: where any of them matches, the text there
    opens a run of digits, or is a phone number's "+" or "("."""
    text = ("x4111111111111111 a 078-05-1120 b +49 30 1234567 (555) 123-4567 "
            "10.0.0.1 555.123.4567 ١٢٣-٤٥-٦٧٨٩")
    for pattern in (r.CARD_RE, r.SSN_RE, r.PHONE_RE, r._IPV4):
        for match in pattern.finditer(text):
            at = match.start()
            assert text[at] in "+(" or (text[at].isdigit() and (
                at == 0 or not re.match(r"\d", text[at - 1])))
    text = "GB82 WEST 1234 5698 7654 32, 2001:db8::1, FE80::1 and fe80:0:0:0:0:0:0:1"
    for pattern, start in ((r.IBAN_RE, r._IBAN_START), (r._IPV6, r._IPV6_START)):
        found = [m.start() for m in pattern.finditer(text)]
        assert found and set(found) <= set(r._starts(start, text))
