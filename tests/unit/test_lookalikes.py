"""A user's void reason may not read as one of numerator's own (issue 51): the skeleton folds
look-alikes onto the letters they imitate, and its table is Unicode's, derived again here from
the package that ships confusables.txt."""

from __future__ import annotations

import json
import unicodedata
from importlib import resources

import pytest

from infra.ledger import VoidReason, reserved
from infra.lookalikes import CONFUSABLE, skeleton

LOOKALIKES = [
    "ab\u200bandoned",  # a zero-width space inside
    "\u200babandoned",  # and before
    "\u0430bandoned",  # a Cyrillic a
    "abandone\u0501",  # a Cyrillic komi de for d
    "not\u2011confirmed",  # a non-breaking hyphen
    "\uff41\uff42\uff41\uff4e\uff44\uff4f\uff4e\uff45\uff44",  # fullwidth
    "ABAND\u039fNED",  # a Greek capital omicron
    "abando\u0301ned",  # a combining accent
    "not-confirrned",  # rn for m
    "\U0001d41a\U0001d41b\U0001d41a\U0001d427\U0001d41d\U0001d428\U0001d427\U0001d41e\U0001d41d",
]


@pytest.mark.parametrize("reason", LOOKALIKES)
def test_a_look_alike_of_numerators_own_reasons_is_reserved(reason: str) -> None:
    assert reserved(reason), ascii(reason)


@pytest.mark.parametrize(
    "reason",
    [
        "invoice cancelled",
        "abandoned order 17",
        "abandon",
        "аннулирую",
        "作废发票号码已取消了",
        "confirmed",
    ],
)
def test_a_reason_in_its_own_words_is_not(reason: str) -> None:
    assert not reserved(reason), reason


def test_numerators_own_reasons_are_their_own_skeletons() -> None:
    assert {skeleton(r) for r in VoidReason} == {"abandoned", "notconfirmed"}


def test_the_table_is_unicodes() -> None:
    """CONFUSABLE again from confusable-homoglyphs' confusables.json: every single character
    Unicode lists as confusable with a letter of the reserved words or its capital, less those
    NFKD folds onto the letter itself (the skeleton folds them so)."""
    data = json.loads(
        (resources.files("confusable_homoglyphs") / "confusables.json").read_text("utf-8")
    )
    derived: dict[str, set[str]] = {}
    for letter in sorted(set("".join(VoidReason).replace("-", ""))):
        for target in (letter, letter.upper()):
            for entry in data.get(target, []):
                char = entry["c"].replace("\u200e", "")  # direction marks around RTL glyphs
                if len(char) != 1:
                    continue
                forms = {char}
                folded = char.casefold()
                if not char.isascii() and len(folded) == 1 and not folded.isascii():
                    forms.add(folded)
                for form in forms:
                    if unicodedata.normalize("NFKD", form).casefold() != letter:
                        derived.setdefault(letter, set()).add(form)
    assert {k: set(v) for k, v in CONFUSABLE.items()} == derived
