"""Cutting text that may hold a secret: masked first, then cut.

A secret cut in two no longer matches its rule (`ghp_Zq8RkT2mWvX9pL4nB7cD1eF…` is too short
for a GitHub token's pattern), so every cut of text that reaches memory, a hook or a model
masks before it cuts, and never cuts inside a mask. Only a window of the text past the cut
is masked: a secret that begins before the cut is whole in it, and what lies past the window
is never shown.
"""

from __future__ import annotations

from memoryd.memory.privacy.redaction import redact

#: How far past a cut the masker reads. The longest secret a rule matches whole is a PEM
#: block (a 4096-bit RSA key is about 3,300 characters); half the window is the margin
#: kept between the cut and what the window's own end may have cut.
LOOKAHEAD = 16_384
_MASK_START = "[REDACTED:"


def masked_window(text: str, limit: int, *, squeeze: bool = False) -> tuple[str, int]:
    """`text` masked (whitespace runs squeezed to one space when `squeeze`), at least its
    first `limit` characters, and how many characters past what is returned were not
    read (0: all of it is returned)."""
    window = text[: limit + LOOKAHEAD]
    rest = len(text) - len(window)
    shown = redact(window)
    if squeeze:
        shown = " ".join(shown.split())
    if rest and len(shown) < limit + LOOKAHEAD // 2:
        # Masks or squeezing took much of the window: a secret its end cut could have come
        # within `limit`. Rare (kilobytes of secrets or of blanks): all of it is read.
        shown, rest = redact(text), 0
        if squeeze:
            shown = " ".join(shown.split())
    return shown, rest


def cut_point(masked: str, limit: int) -> int:
    """Where to cut `masked` within `limit` characters without cutting a mask in two."""
    if len(masked) <= limit:
        return len(masked)
    start = masked.rfind(_MASK_START, max(0, limit - 64), limit)
    if start != -1 and masked.find("]", start) >= limit:
        return start
    return limit


def cut_masked(masked: str, limit: int) -> str:
    """Already masked `masked` within `limit` characters, an ellipsis where it was cut."""
    if len(masked) <= limit:
        return masked
    if limit < 1:
        return ""
    return masked[: cut_point(masked, limit - 1)].rstrip() + "…"


def clip(text: str, limit: int, *, squeeze: bool = True) -> str:
    """`text` masked, whitespace runs squeezed (unless not `squeeze`), then within `limit`
    characters, an ellipsis where it was cut."""
    shown, rest = masked_window(text, limit, squeeze=squeeze)
    if not rest:
        return cut_masked(shown, limit)
    return shown[: cut_point(shown, limit - 1)].rstrip() + "…"


def head(text: str, limit: int) -> tuple[str, int]:
    """The masked first `limit` characters of `text` (a mask never cut), and about how many
    characters follow them."""
    shown, rest = masked_window(text, limit)
    cut = cut_point(shown, limit)
    return shown[:cut], len(shown) - cut + rest
