"""Fast paths that skip a regular expression decide exactly as the expression does."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from memoryd.lifecycle import extraction, segments

# Letters of the cues in both cases, Unicode letters that fold onto ASCII ones (Kelvin
# sign, dotted I, long s), base64's alphabet and the whitespace that ends a run.
_ALPHABET = "rememberREMEMBERmindMINDforgetFORGETfutureFUTUREnowNOWon" + "KİıſéÉ" + (
    "AZaz09+/=") + " \t\n\x1c\x0b.,"
_PIECES = st.sampled_from(["remember", "Mind", "FORGET", "futurE", "now on", "NOW\n\tON",
                           "now", "on", "A" * 199, "b/+=" * 60, "\u212a", " ", "\n"])
_TEXT = st.lists(st.one_of(st.text(alphabet=_ALPHABET, max_size=40), _PIECES),
                 max_size=30).map("".join)


@settings(max_examples=400, deadline=None)
@given(_TEXT)
def test_the_cue_test_agrees_with_its_regular_expression(text: str) -> None:
    assert extraction._has_cue(text) == (extraction._CUE_WORD.search(text) is not None)


@settings(max_examples=400, deadline=None)
@given(_TEXT)
@example("b/+=" * 60)  # Python 3.11.2 read a possessive pattern's runs wrongly: kept
def test_base64_removal_agrees_with_its_regular_expression(text: str) -> None:
    assert segments._without_base64(text) == segments._BASE64_RUN.sub("[base64 omitted]", text)
