"""What a reader cannot tell apart from a word: Unicode's confusables (UTS #39's
confusables.txt, as PyPI's `confusable-homoglyphs` 3.3.1 ships it) for the letters of
numerator's own void reasons, and a skeleton that folds a text onto them.

Only those letters are listed — the skeleton answers one question, whether a user's text reads as
one of numerator's words — and tests/unit/test_lookalikes.py derives the same table from the
package, so that the two cannot drift."""

from __future__ import annotations

import unicodedata

# For each letter of `abandoned` and `not-confirmed`, the characters Unicode lists as confusable
# with it or its capital (single characters; those NFKD already folds onto it left out).
CONFUSABLE = {
    "a": (
        "\u0251\u0391\u03b1\u0410\u0430\u13aa\u15c5\u237a\ua4ee\U000102a0\U00016f40"
        "\U0001d6a8\U0001d6c2\U0001d6e2\U0001d6fc\U0001d71c\U0001d736\U0001d756\U0001d770"
        "\U0001d790\U0001d7aa"
    ),
    "b": (
        "\u0184\u0185\u0392\u03b2\u0412\u042c\u0432\u044c\u13cf\u13f4\u1472\u15af\u15f7"
        "\ua4d0\ua7b4\ua7b5\U00010282\U000102a1\U00010301\U0001d6a9\U0001d6e3\U0001d71d"
        "\U0001d757\U0001d791"
    ),
    "c": (
        "\u03f2\u03f9\u0421\u0441\u13df\u1d04\u2ca4\u2ca5\ua4da\uabaf\U000102a2\U00010302"
        "\U00010415\U0001043d\U0001051c\U000118e9\U000118f2\U0001f74c"
    ),
    "d": "\u0501\u13a0\u13e7\u146f\u15de\u15ea\ua4d2\ua4d3",
    "e": (
        "\u0395\u03b5\u0415\u0435\u04bd\u13ac\u212e\u22ff\u2d39\ua4f0\uab32\U00010286"
        "\U000118a6\U000118ae\U000118c6\U000118ce\U0001d6ac\U0001d6e6\U0001d720\U0001d75a"
        "\U0001d794"
    ),
    "f": (
        "\u017f\u03dc\u03dd\u0584\u15b4\u1e9d\ua4dd\ua798\ua799\uab35\U00010287\U000102a5"
        "\U00010525\U000118a2\U000118c2\U0001d213\U0001d7ca"
    ),
    "i": (
        "l\u0131\u0269\u026a\u02db\u037a\u03b9\u0456\u04cf\u13a5\u1fbe\u2373\ua647\uab75"
        "\U000118c3\U0001d6a4\U0001d6ca\U0001d704\U0001d73e\U0001d778\U0001d7b2"
    ),
    "m": (
        "\u039c\u03bc\u03fa\u03fb\u041c\u043c\u13b7\u15f0\u16d6\u2c98\u2c99\ua4df"
        "\U000102b0\U00010311\U0001d6b3\U0001d6ed\U0001d727\U0001d761\U0001d79b"
    ),
    "n": (
        "\u039d\u03bd\u0578\u057c\u2c9a\u2c9b\ua4e0\U00010513\U0001d6b4\U0001d6ee"
        "\U0001d728\U0001d762\U0001d79c"
    ),
    "o": (
        "0\u039f\u03bf\u03c3\u041e\u043e\u0555\u0585\u05e1\u0647\u0665\u06be\u06c1\u06d5"
        "\u06f5\u07c0\u0966\u09e6\u0a66\u0ae6\u0b20\u0b66\u0be6\u0c02\u0c66\u0c82\u0ce6"
        "\u0d02\u0d20\u0d66\u0d82\u0e50\u0ed0\u101d\u1040\u10ff\u12d0\u1d0f\u1d11\u2c9e"
        "\u2c9f\u2d54\u3007\ua4f3\uab3d\ufba6\ufba7\ufba8\ufba9\ufbaa\ufbab\ufbac\ufbad"
        "\ufee9\ufeea\ufeeb\ufeec\U00010292\U000102ab\U00010404\U0001042c\U000104c2"
        "\U000104ea\U00010516\U000114d0\U000118b5\U000118c8\U000118d5\U000118d7\U000118e0"
        "\U0001d6b6\U0001d6d0\U0001d6d4\U0001d6f0\U0001d70a\U0001d70e\U0001d72a\U0001d744"
        "\U0001d748\U0001d764\U0001d77e\U0001d782\U0001d79e\U0001d7b8\U0001d7bc\U0001d7ce"
        "\U0001d7d8\U0001d7e2\U0001d7ec\U0001d7f6\U0001ee24\U0001ee64\U0001ee84\U0001fbf0"
    ),
    "r": (
        "\u01a6\u0280\u0433\u13a1\u13b1\u13d2\u1587\u1d26\u2c85\ua4e3\uab47\uab48\uab81"
        "\U000104b4\U000104dc\U00016f35\U0001d216"
    ),
    "t": (
        "\u03a4\u03c4\u0422\u0442\u13a2\u22a4\u27d9\u2ca6\u2ca7\ua4d4\U00010297\U000102b1"
        "\U00010315\U000118bc\U000118dc\U00016f0a\U0001d6bb\U0001d6f5\U0001d72f\U0001d769"
        "\U0001d7a3\U0001f768"
    ),
}
LOOKALIKE = {char: letter for letter, chars in CONFUSABLE.items() for char in chars}

# Characters a reader sees as nothing, or as a mere joint, between two letters: format
# characters (zero-width spaces and joiners, the soft hyphen, direction marks), combining marks,
# control characters, white space and dashes.
UNSEEN = frozenset({"Cf", "Cc", "Mn", "Me", "Pd", "Zs", "Zl", "Zp"})
DASHLIKE = frozenset(
    "\u2212\u02d7\u2043\u2796"
)  # minus, modifier minus, hyphen bullet, heavy minus


def skeleton(text: str) -> str:
    """`text` as a reader sees its letters: look-alikes folded onto the letters they imitate,
    compatibility forms (fullwidth, mathematical) onto plain ones, case folded, accents, unseen
    characters and dashes dropped, `rn` read as `m`."""
    seen = []
    for char in text:
        char = LOOKALIKE.get(char) or LOOKALIKE.get(char.casefold()) or char
        for part in unicodedata.normalize("NFKD", char).casefold():
            if unicodedata.category(part) in UNSEEN or part in DASHLIKE or part.isspace():
                continue
            seen.append(LOOKALIKE.get(part, part))
    return "".join(seen).replace("rn", "m")
