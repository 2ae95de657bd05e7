"""The scanner's translations match wherever their `re` patterns do (a superset), so
that a rule it says cannot match truly cannot; and what it takes from Python's Unicode
classes is what Python's `re` reads."""

from __future__ import annotations

import re
import sys
from re import _constants as sre  # type: ignore[attr-defined]

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memoryd.memory.privacy import redaction, scanner
from memoryd.memory.privacy.scanner import (
    FOLDED,
    SHAPE,
    Scanner,
    characters_before,
    translate,
)

_ALL = [chr(c) for c in range(0x80, 0x110000) if not 0xD800 <= c < 0xE000]


def test_the_characters_taken_from_unicode_classes_are_those_re_reads() -> None:
    digit, space = re.compile(r"\d"), re.compile(r"\s")
    assert scanner._beyond_ascii(sre.CATEGORY_DIGIT) == \
        frozenset(c for c in _ALL if digit.match(c))
    assert scanner._beyond_ascii(sre.CATEGORY_SPACE) == \
        frozenset(c for c in _ALL if space.match(c))
    letters = re.compile("[a-z]", re.IGNORECASE)
    assert frozenset(FOLDED) == frozenset(c for c in _ALL if letters.match(c))


def test_shape_keeps_every_offset_and_names_digits_and_letters_by_one_byte() -> None:
    text = b"Call 555-0199 at 10:30, ok?"
    assert len(text.translate(SHAPE)) == len(text)
    assert text.translate(SHAPE) == b"Aaaa 000-0000 aa 00:00, aa?"


def test_a_pattern_that_matches_the_empty_string_or_nothing_is_not_scanned() -> None:
    assert translate(re.compile(r"a*")) is None
    assert translate(re.compile(r"(?=x)")) is None
    found = Scanner([re.compile(r"a*"), re.compile(r"zz")], [range(2)])
    assert found.scan(0, b"hello").possible == frozenset({0})
    assert found.scan(0, b"a zz").possible == frozenset({0, 1})


def test_without_the_library_every_rule_may_match(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scanner, "hyperscan", None)
    found = Scanner([re.compile(r"zz"), re.compile(r"\d+")], [range(2)], where=[1])
    assert found.scan(0, b"nothing here").possible == frozenset({0, 1})
    assert "re alone" in found.summary()


# Patterns with what the translation must widen: lookarounds at either end and inside,
# back-references, IGNORECASE letters Python folds from beyond ASCII, Unicode digits and
# spaces, negated classes, `.`, long and lazy repeats, alternation, atomic groups.
_PATTERNS = [re.compile(p) for p in (
    r"(?<![\d-])\d{3}([ \-])\d{3}\1\d{4}(?![\d-])", r"(?i)\bapi[_-]?key\s*=\s*(\S{6,})",
    r"(?i)pass\s+(?:is\s+)?[^\s\"']{6,}", r"\btok_[A-Za-z0-9]{20,40}\b", r"x.{0,5}?y",
    r"(?<![A-Za-z0-9])[XYZ]?\d{7,8}-?[A-Z](?![A-Za-z0-9])", r"[^\s:]+:\s+\d+",
    r"(?=[^\s]*[a-z])(?=[^\s]*\d)[a-z\d]{8}", r"(?>ab|a)c", r"(a)?(?(1)b|c)d",
    r"\(\d{3}\)\s?\d{3}", r"[\w.]+@\w+\.\w{2,}", r"(?s)BEGIN.*?END|\Z$",
)]
_TEXT = st.lists(st.sampled_from([
    "0", "12", "345", "6789", "-", " ", "\u00a0", "\u2003", "٣", "٤٥٦", "a", "b", "c", "d",
    "x", "y", "X", "Z", "Api_\u212aey", "API-KEY", "pa\u017f\u017f", "PASS", " is ", "=",
    "tok_", "abcdefghij", ":", "(", ")", "@", ".", "\n", "—", "中", "\u0130", "BEGIN",
    "END", "é", "\ud800"]), max_size=40).map("".join)
_WHERE = Scanner(_PATTERNS, [range(len(_PATTERNS))], where=range(len(_PATTERNS)))
_WHETHER = Scanner(_PATTERNS, [range(len(_PATTERNS))], shaped=[0])


@settings(max_examples=500, deadline=None)
@given(_TEXT)
def test_the_scanner_finds_every_pattern_wherever_re_does(text: str) -> None:
    data = text.encode("utf-8", "surrogatepass")
    whether = _WHETHER.scan(0, data, text.isascii())
    where = _WHERE.scan(0, data)
    for index, pattern in enumerate(_PATTERNS):
        matches = list(pattern.finditer(text))
        if not matches:
            continue
        assert index in whether.possible, (pattern.pattern, text)
        assert index in where.possible, (pattern.pattern, text)
        if index in _WHERE.always:
            continue
        # Each match ends where a candidate of the superset ends, or a byte before.
        ends = {characters_before(data, end) for end in where.ends[index]}
        for match in matches:
            assert match.end() in ends or match.end() + 1 in ends, (pattern.pattern, text)


def test_memoryds_own_rules_are_all_scanned() -> None:
    """None of the secret and personal-data rules is left to run on every text."""
    scan = redaction._SCANNING.prepare()
    if scanner.hyperscan is None:
        pytest.skip(f"no hyperscan wheel for {sys.platform}")
    assert scan.scanner.always == frozenset(), scan.scanner.summary()


def test_a_process_builds_the_scanner_only_once_it_has_masked_enough() -> None:
    scanning = redaction._Scanning()
    assert scanning.get(1000) is None
    assert scanning.get(redaction.SCANNER_AFTER - 2000) is None
    built = scanning.get(1000)
    assert built is not None and scanning.get(10) is built
