"""Which masking rules can match a text: every rule's pattern in one Hyperscan scan.

Masking runs dozens of regular expressions over every text that reaches memory, and
Python's `re` tries each one at every position. Hyperscan (Vectorscan, through the
`hyperscan` package, which carries the library in its wheel) finds matches of all of
them in one pass over the text. It cannot run the rules as written (lookarounds,
back-references and Python's Unicode classes), so each rule is translated into a
pattern that matches wherever the rule can and maybe elsewhere too, over the text's
UTF-8 bytes:

- lookarounds and anchors (`(?=…)`, `(?<!…)`, `\\b`, `^`, `\\Z`) are left out;
- a back-reference is its group's pattern again; lazy, possessive and atomic forms
  are plain repeats and groups;
- a character is exact among ASCII characters; where Python's class may also hold a
  character beyond ASCII (`\\d`, `\\w`, `\\s`, a negated class, `.`), any non-ASCII
  character is let in, and under IGNORECASE the four characters Python folds onto ASCII
  letters (İ, ı, ſ, K) are added where their letter is.

A rule whose translation finds nothing in a text cannot match it, and is skipped; the
others run as written, so what is masked is exactly what the rules say. A rule the
scanner cannot take (a translation that matches the empty string, or one the library
refuses) is reported as possible in every text; without the library, every rule is.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from re import _compiler as sre_compile  # type: ignore[attr-defined]
from re import _constants as sre  # type: ignore[attr-defined]
from re import _parser as sre_parse  # type: ignore[attr-defined]
from typing import Any

import structlog

hyperscan: Any
try:
    import hyperscan
except ImportError:  # no wheel for this platform: every rule runs, as `re` alone runs them
    hyperscan = None

log = structlog.get_logger(__name__)

#: Non-ASCII characters Python's IGNORECASE matches to an ASCII letter: İ and ı (i), K (k),
#: ſ (s). A test checks this against every code point.
FOLDED = ("\u0130", "\u0131", "\u212a", "\u017f")
#: A node holding more non-ASCII characters than these is looked for by their bytes'
#: classes, not one by one.
FEW = 8
_SINGLE = (sre.LITERAL, sre.NOT_LITERAL, sre.ANY, sre.IN)
_REPEATS = (sre.MAX_REPEAT, sre.MIN_REPEAT, getattr(sre, "POSSESSIVE_REPEAT", sre.MAX_REPEAT))
_ZERO_WIDTH = (sre.AT, sre.ASSERT, sre.ASSERT_NOT)


#: An ASCII text as its ASCII-only patterns read it: each digit a "0", each capital an
#: "A", each small letter an "a" (the same length, so offsets hold). Classes of digits or
#: letters become one byte, and a run of them a literal the library finds at its fastest.
SHAPE = bytes(ord("0") if chr(b).isdigit() else ord("A") if chr(b).isupper()
              else ord("a") if chr(b).islower() else b for b in range(128)) + bytes(range(128, 256))


class Untranslatable(Exception):
    """A pattern construct this module has no superset for (the rule then always runs)."""


def _node_pattern(node: tuple[Any, Any], flags: int) -> re.Pattern[str]:
    state = sre_parse.State()
    state.flags = flags
    compiled: re.Pattern[str] = sre_compile.compile(sre_parse.SubPattern(state, [node]), flags)
    return compiled


@cache
def _beyond_ascii(category: Any) -> frozenset[str]:
    """The non-ASCII characters of `\\d` (decimal digits) or `\\s` (white space), as
    Python's `re` reads them in a str pattern (a test checks them against it)."""
    test = str.isdecimal if category is sre.CATEGORY_DIGIT else str.isspace
    return frozenset(c for c in map(chr, range(0x80, 0x110000)) if test(c))


def _candidates(node: tuple[Any, Any]) -> frozenset[str] | None:
    """The non-ASCII characters a character node may hold (besides the IGNORECASE folds),
    None where they are too many to name (a negated class, `.`, `\\w`)."""
    op, av = node
    if op is sre.LITERAL:
        return frozenset() if av < 128 else None
    if op is not sre.IN:
        return None
    found: frozenset[str] = frozenset()
    for item_op, item in av:
        if item_op is sre.LITERAL and item < 128:
            continue
        if item_op in (sre.RANGE, getattr(sre, "RANGE_UNI_IGNORE", sre.RANGE)) \
                and item[1] < 128:
            continue
        if item_op is sre.CATEGORY and item in (sre.CATEGORY_DIGIT, sre.CATEGORY_SPACE):
            found |= _beyond_ascii(item)
            continue
        return None
    return found


def _leads(chars: Iterable[str]) -> list[int]:
    return sorted({c.encode("utf-8", "surrogatepass")[0] for c in chars})


def _byte_class(codes: Sequence[int]) -> bytes:
    parts, index = [], 0
    while index < len(codes):
        end = index
        while end + 1 < len(codes) and codes[end + 1] == codes[end] + 1:
            end += 1
        first, last = codes[index], codes[end]
        parts.append(b"\\x%02x" % first if first == last else b"\\x%02x-\\x%02x" % (first, last))
        index = end + 1
    return b"[" + b"".join(parts) + b"]"


class _Translation:
    """One pattern's superset, over bytes, for Hyperscan."""

    def __init__(self, pattern: re.Pattern[str], *, keep_end: bool,
                 ascii_only: bool) -> None:
        self._ascii_only = ascii_only
        self._keep_end = keep_end
        self._groups: dict[int, Any] = {}
        self._memo: dict[tuple[Any, int], tuple[list[int], tuple[str, ...] | None]] = {}
        parsed = sre_parse.parse(pattern.pattern, pattern.flags)
        self._record_groups(list(parsed), parsed.state.flags)
        self.source = self._sequence(_trim(list(parsed), keep_end=keep_end),
                                     parsed.state.flags)

    def _edge(self, node: tuple[Any, Any], flags: int, direction: int) -> bytes:
        """`(?<![C])` at the start or `(?![C])` at the end, C one character: the start or
        end of the text, or a byte that begins or ends no character of C."""
        refused, _extra = self._members(node, flags)
        others = set(range(0x80 if self._ascii_only else 0x100)) - set(refused)
        allowed = _byte_class(self._shaped(others))
        return b"(?:^|" + allowed + b")" if direction < 0 else b"(?:" + allowed + b"|$)"

    def _record_groups(self, items: list[tuple[Any, Any]], flags: int) -> None:
        """Every group's pattern as written, for the back-references to it."""
        for op, av in items:
            if op is sre.SUBPATTERN:
                group, add, remove, body = av
                if group is not None:
                    self._groups[group] = (list(body), (flags | add) & ~remove)
                self._record_groups(list(body), (flags | add) & ~remove)
            elif op in _REPEATS:
                self._record_groups(list(av[2]), flags)
            elif op is sre.BRANCH:
                for branch in av[1]:
                    self._record_groups(list(branch), flags)
            elif op in (sre.ASSERT, sre.ASSERT_NOT):
                self._record_groups(list(av[1]), flags)

    def _members(self, node: tuple[Any, Any], flags: int
                 ) -> tuple[list[int], tuple[str, ...] | None]:
        """The node's ASCII characters, and its non-ASCII ones (None: any)."""
        key = (repr(node), flags)
        if key not in self._memo:
            compiled = _node_pattern(node, flags)
            ascii_codes = [c for c in range(128) if compiled.match(chr(c))]
            candidates = _candidates(node)
            extra = () if self._ascii_only else None if candidates is None else tuple(
                sorted(c for c in candidates.union(FOLDED if flags & re.IGNORECASE else ())
                       if compiled.match(c)))
            self._memo[key] = (ascii_codes, extra)
        return self._memo[key]

    def _shaped(self, codes: Iterable[int]) -> list[int]:
        return sorted({SHAPE[c] for c in codes} if self._ascii_only else set(codes))

    def _character(self, node: tuple[Any, Any], flags: int, low: int, high: int | None
                   ) -> bytes:
        """A character node repeated `low` to `high` times (None: no bound)."""
        codes, extra = self._members(node, flags)
        return self._run(self._shaped(codes), extra, low, high)

    def _flat(self, body: list[tuple[Any, Any]], flags: int, low: int, high: int | None
              ) -> bytes | None:
        """A repeated group of characters alone (`(?: ?[A-Z0-9]{4}){2,7}`) as one run of
        any of them, as long as the group's shortest to its longest times the count: the
        library runs a nested repeat of digits twenty times slower than a run."""
        codes: set[int] = set()
        extra: set[str] | None = set()
        shortest, longest = 0, 0
        for op, av in body:
            if op in _SINGLE:
                node, least, most = (op, av), 1, 1
            elif op in _REPEATS and len(av[2]) == 1 and av[2][0][0] in _SINGLE:
                node, least, most = av[2][0], av[0], av[1]
            else:
                return None
            node_codes, node_extra = self._members(node, flags)
            codes.update(node_codes)
            extra = None if extra is None or node_extra is None else extra | set(node_extra)
            shortest += least
            longest = sre.MAXREPEAT if sre.MAXREPEAT in (longest, most) else longest + most
        if not shortest:
            return None
        most_total = None if high is None or longest == sre.MAXREPEAT else high * longest
        if self._keep_end:
            # Where ends are asked for, every byte of a run would be one: only a run of
            # digits and what separates them (a phone number's groups), its bounds kept.
            if most_total is None or any(chr(c).isalpha() for c in codes):
                return None
            return self._run(self._shaped(codes), None if extra is None else tuple(sorted(
                extra)), low * shortest, most_total, bounded=True)
        return self._run(self._shaped(codes), None if extra is None else tuple(sorted(extra)),
                         low * shortest, most_total)

    def _run(self, codes: list[int], extra: tuple[str, ...] | None, low: int,
             high: int | None, bounded: bool = False) -> bytes:
        if not codes and extra == ():
            raise Untranslatable("a class that matches nothing")
        if extra is None or len(extra) > FEW:
            # Each non-ASCII character is 2 to 4 bytes: a lead byte (any, or those of the
            # characters the node holds), then continuation bytes.
            leads = list(range(0xC0, 0x100)) if extra is None else _leads(extra)
            atom = _byte_class(sorted([*codes, *range(0x80, 0xC0), *leads]))
            high = None if high is None else 4 * high
        elif extra:
            alternatives = [_byte_class(codes)] if codes else []
            alternatives += [b"".join(b"\\x%02x" % b for b in c.encode("utf-8", "surrogatepass"))
                             for c in extra]
            atom = b"(?:" + b"|".join(alternatives) + b")"
        else:
            atom = _byte_class(codes)
        if bounded and high is not None:
            return atom + (b"{%d,%d}" % (low, high) if low != high else b"{%d}" % low)
        return atom + _quantifier(low, high)

    def _sequence(self, items: Any, flags: int) -> bytes:
        return b"".join(self._item(op, av, flags) for op, av in items)

    def _item(self, op: Any, av: Any, flags: int) -> bytes:
        if op in _SINGLE:
            return self._character((op, av), flags, 1, 1)
        if op is _EDGE:
            return self._edge(av[1], flags, av[0])
        if op is sre.AT and av in _ANCHORS and not flags & re.MULTILINE:
            return _ANCHORS[av]
        if op in _ZERO_WIDTH:
            return b""
        if op in _REPEATS:
            low, high, body = av
            high = None if high == sre.MAXREPEAT else high
            if len(body) == 1 and body[0][0] in _SINGLE:
                return self._character(body[0], flags, low, high)
            flat = self._flat(list(body), flags, low, high)
            if flat is not None:
                return flat
            inner = self._sequence(body, flags)
            return b"(?:" + inner + b")" + _quantifier(low, high) if inner else b""
        if op is sre.SUBPATTERN:
            _group, add, remove, body = av
            return b"(?:" + self._sequence(body, (flags | add) & ~remove) + b")"
        if op is sre.BRANCH:
            return b"(?:" + b"|".join(self._sequence(b, flags) for b in av[1]) + b")"
        if op is getattr(sre, "ATOMIC_GROUP", None):
            return b"(?:" + self._sequence(av, flags) + b")"
        if op is sre.GROUPREF:
            if av not in self._groups:
                raise Untranslatable("a reference to a group not yet seen")
            body, group_flags = self._groups[av]
            return b"(?:" + self._sequence(body, group_flags) + b")"
        if op is sre.GROUPREF_EXISTS:
            _group, yes, no = av
            return b"(?:" + self._sequence(yes, flags) + b"|" + \
                (self._sequence(no, flags) if no else b"") + b")"
        raise Untranslatable(f"{op}")


#: Where a match may begin or end that the library says as Python does (without
#: MULTILINE): the start of the text, its end (or before a last line break).
_ANCHORS = {sre.AT_BEGINNING: b"^", sre.AT_BEGINNING_STRING: b"^", sre.AT_END: b"$",
            sre.AT_END_STRING: b"$"}
#: A lookaround of one character kept at an end of the pattern, read as a byte there.
_EDGE = object()


def _nullable(item: tuple[Any, Any]) -> bool:
    """Whether an item can match the empty string (an anchor and a back-reference taken
    as not: the safe side, they are kept)."""
    op, av = item
    if op is sre.AT and av in _ANCHORS:
        return False
    if op in _ZERO_WIDTH:
        return True
    if op in _REPEATS:
        return bool(av[0] == 0 or all(_nullable(i) for i in av[2]))
    if op is sre.SUBPATTERN:
        return all(_nullable(i) for i in av[3])
    if op is getattr(sre, "ATOMIC_GROUP", None):
        return all(_nullable(i) for i in av)
    if op is sre.BRANCH:
        return any(all(_nullable(i) for i in branch) for branch in av[1])
    return False


def _one_character_not(item: tuple[Any, Any], direction: int) -> bool:
    """Whether `item` is `(?<![C])` (direction -1) or `(?![C])` (1), C one character."""
    op, av = item
    return op is sre.ASSERT_NOT and av[0] == direction and len(av[1]) == 1 \
        and av[1][0][0] in _SINGLE


def _ends_looking_ahead(item: tuple[Any, Any]) -> bool:
    """Whether `item` ends with `(?=X)R` (in a group, or in one of its alternatives)."""
    op, av = item
    body = av[3] if op is sre.SUBPATTERN else None
    if op is sre.BRANCH:
        return any(b and _ends_looking_ahead((sre.SUBPATTERN, (None, 0, 0, b))) for b in av[1])
    if body is None or not body:
        return False
    body = list(body)
    return (len(body) > 1 and body[-2][0] is sre.ASSERT and body[-2][1][0] == 1) \
        or _ends_looking_ahead(body[-1])


def _trim(items: list[tuple[Any, Any]], left: bool = True, right: bool = True,
          keep_end: bool = False) -> list[tuple[Any, Any]]:
    """A pattern that matches inside every match of `items` (for the scanner's question
    whether a rule can match at all): what can match nothing at either end is left out,
    an end's repeat kept at its least (reported once, not at every end it reaches), a
    last `(?=X)R` read as X; a character a match may not follow or be followed by, at an
    end, is kept as a byte there. `keep_end`: the end is left as it is (but its
    character not followed), so that the superset ends where every match ends."""
    items = list(items)
    for leftmost in (True,) * left + (False,) * right:
        end = 0 if leftmost else -1
        if not leftmost and keep_end:
            if len(items) > 1 and _one_character_not(items[-1], 1):
                items[-1] = (_EDGE, (1, items[-1][1][1][0]))
            continue
        while items:
            # (A last `(?=X)R` before it says more than the character after: it is read.)
            if len(items) > 1 and _one_character_not(items[end], -1 if leftmost else 1) \
                    and not _nullable(items[1 if leftmost else -2]) \
                    and (leftmost or not _ends_looking_ahead(items[-2])):
                items[end] = (_EDGE, (-1 if leftmost else 1, items[end][1][1][0]))
                break
            if not _nullable(items[end]):
                break
            items.pop(end)
        if not items or items[end][0] is _EDGE:
            continue
        if not leftmost and len(items) > 1 and items[-2][0] is sre.ASSERT \
                and items[-2][1][0] == 1:
            items[-2:] = _trim(list(items[-2][1][1]), left=False)
            if not items:
                return items
        index = 0 if leftmost else len(items) - 1
        op, av = items[index]
        if op in _REPEATS:
            low, _high, body = av
            items[index] = (op, (low, low, body))
            if low == 1:
                items[index:index + 1] = _trim(list(body), left=leftmost, right=not leftmost)
        elif op is sre.SUBPATTERN:
            group, add, remove, body = av
            items[index] = (op, (group, add, remove, _trim(list(body), left=leftmost,
                                                            right=not leftmost)))
        elif op is sre.BRANCH:
            items[index] = (op, (av[0], [_trim(list(b), left=leftmost, right=not leftmost)
                                         for b in av[1]]))
    return items


#: The longest repeat the scanner is asked for: a longer one is read as "at least its
#: least, capped here" (twenty characters of a key are found wherever forty are), which
#: keeps the database small and quick to build.
LONGEST_REPEAT = 16


def _quantifier(low: int, high: int | None) -> bytes:
    if high is None or high > LONGEST_REPEAT:
        low, high = min(low, LONGEST_REPEAT), None
    if high == low:
        return b"" if low == 1 else b"{%d}" % low
    if high is None:
        return {0: b"*", 1: b"+"}.get(low, b"{%d,}" % low)
    return b"?" if (low, high) == (0, 1) else b"{%d,%d}" % (low, high)


def translate(pattern: re.Pattern[str], *, keep_end: bool = False,
              ascii_only: bool = False) -> bytes | None:
    """`pattern`'s superset for Hyperscan, or None where there is none (it always runs).
    `keep_end`: every match of the pattern ends where one of the superset's does (or a
    byte later); `ascii_only`: for texts of ASCII characters alone."""
    try:
        source = _Translation(pattern, keep_end=keep_end, ascii_only=ascii_only).source
    except (Untranslatable, RecursionError):
        return None
    # A superset that matches the empty string matches every text: no use as a gate.
    return source if source and not re.fullmatch(source, b"") else None


#: Every byte but UTF-8's continuation bytes (0x80-0xBF), deleted to count those.
_NOT_CONTINUATION = bytes(b for b in range(0x100) if not 0x80 <= b < 0xC0)


def characters_before(data: bytes, end: int) -> int:
    """How many characters of a text begin before byte `end` of its UTF-8 (lone
    surrogates written with "surrogatepass" count as one each, as Python counts them)."""
    return end - len(data[:end].translate(None, _NOT_CONTINUATION))


@dataclass(frozen=True)
class Found:
    """What one scan of a group found: the patterns that may match, and for a pattern
    scanned for where, the ends of its candidate matches (offsets in the UTF-8 bytes)."""

    possible: frozenset[int]
    ends: dict[int, list[int]]


class Scanner:
    """Which of `patterns` may match a text: each group of them found in one pass.

    A pattern in `where` is scanned for the ends of its matches (its translation keeps
    its end as written), so that its exact check is run only near them; the others for
    whether they match at all (reported once). A group in `shaped` scans an ASCII text
    as `SHAPE` reads it (digits and letters one byte each), a database of its own.
    """

    def __init__(self, patterns: Sequence[re.Pattern[str]], groups: Sequence[Sequence[int]],
                 where: Iterable[int] = (), shaped: Iterable[int] = ()) -> None:
        self._count = len(patterns)
        self._where = frozenset(where)
        self._groups = [tuple(g) for g in groups]
        self._always: list[frozenset[int]] = [frozenset(g) for g in self._groups]
        # (group, for ASCII texts by their shape) -> database
        self._databases: dict[tuple[int, bool], Any] = {}
        self._scratch = threading.local()
        if hyperscan is None:
            log.info("masking_scanner_unavailable", rules=self._count)
            return
        shaped = frozenset(shaped)
        for number, group in enumerate(self._groups):
            always: set[int] = set()
            for shape in (False, True) if number in shaped else (False,):
                sources = {i: translate(patterns[i], keep_end=i in self._where,
                                        ascii_only=shape) for i in group}
                scanned = {i: s for i, s in sources.items() if s is not None}
                self._databases[number, shape], refused = self._compile(scanned)
                always |= {i for i in group if i not in scanned or i in refused}
            self._always[number] = frozenset(always)

    def _compile(self, sources: dict[int, bytes]) -> tuple[Any, set[int]]:
        # Prefiltering mode (the library's own approximation) scans some of these patterns
        # fifty times slower; it is asked for only by a pattern refused without it.
        flags = {i: hyperscan.HS_FLAG_DOTALL | (0 if i in self._where
                                                 else hyperscan.HS_FLAG_SINGLEMATCH)
                 for i in sources}
        refused: set[int] = set()
        while sources:
            database = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
            try:
                database.compile(expressions=list(sources.values()), ids=list(sources),
                                 elements=len(sources), flags=[flags[i] for i in sources])
            except hyperscan.error as exc:
                # The library names the expression it refused by its position.
                found = re.search(r"(\d+)", str(exc))
                position = int(found.group(1)) if found else 0
                index = list(sources)[position if position < len(sources) else 0]
                if not flags[index] & hyperscan.HS_FLAG_PREFILTER and index not in self._where:
                    flags[index] |= hyperscan.HS_FLAG_PREFILTER
                else:
                    refused.add(index)
                    del sources[index]
                continue
            if refused:
                log.info("masking_scanner_refused", rules=sorted(refused))
            return database, refused
        return None, refused

    @property
    def always(self) -> frozenset[int]:
        """The patterns reported possible in every text (no superset for them)."""
        return frozenset().union(*self._always) if self._always else frozenset()

    def summary(self) -> str:
        """How the patterns are looked for (for `doctor` and the benchmarks)."""
        if hyperscan is None:
            return f"re alone: no hyperscan for this platform ({self._count} patterns)"
        always = sum(len(a) for a in self._always)
        return (f"hyperscan {hyperscan.__version__}: {self._count - always} of {self._count}"
                f" patterns in {len(self._groups)} scans, {len(self._where)} of them for where")

    def scan(self, group: int, data: bytes, ascii_text: bool = False) -> Found:
        """What group `group` may match in `data` (a text's UTF-8 bytes; `ascii_text`: all
        of them ASCII)."""
        shape = ascii_text and (group, True) in self._databases
        database = self._databases.get((group, shape))
        if database is None:
            return Found(self._always[group], {})
        scratches = getattr(self._scratch, "value", None)
        if scratches is None:
            scratches = self._scratch.value = {}
        scratch = scratches.get((group, shape))
        if scratch is None:
            scratch = scratches[group, shape] = hyperscan.Scratch(database)
        found: set[int] = set()
        ends: dict[int, list[int]] = {}
        where = self._where

        def hit(index: int, _start: int, end: int, _flags: int, _context: Any) -> None:
            if index in where:
                ends.setdefault(index, []).append(end)
            found.add(index)

        database.scan(data.translate(SHAPE) if shape else data, match_event_handler=hit,
                      scratch=scratch)
        return Found(frozenset(found) | self._always[group], ends)
