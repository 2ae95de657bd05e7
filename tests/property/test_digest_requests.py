"""A digest keeps a long request's squeezed head, not all of it (`_squeezed_head`):
clipped for the digest, the head must read exactly as the whole request did."""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from daemon.lifecycle.digest import REQUEST_CHARS, _clip, _squeezed_head

_TEXT = st.text(st.sampled_from("ab \n\t\u00a0\u3000x."), max_size=2000) | st.text(max_size=2000)


@given(_TEXT, st.integers(min_value=1, max_value=400))
@example("word " * 200, REQUEST_CHARS)
@example(" " * 700 + "late words", REQUEST_CHARS)
@example("x" * 700, REQUEST_CHARS)
@example("a" * 639 + "b" * 2 + " c", REQUEST_CHARS)
def test_the_head_of_a_request_clips_as_the_whole_of_it(text: str, limit: int) -> None:
    whole = " ".join(text.split())
    head = _squeezed_head(text, limit)
    assert whole.startswith(head)
    assert _clip(head, limit) == _clip(whole, limit)
    assert not head or len(head) <= max(len(whole), 4 * limit)
