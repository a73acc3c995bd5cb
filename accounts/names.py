"""The names people sign up with: what a name looks like, so that no one signs up as a look-alike
of someone else (`alice` with a Cyrillic U+0430 for its `a`, `aIice` with a capital i, `ALICE`),
nor as a look-alike of a deleted account's placeholder (`deIeted-0a1b2c3d4e5f`).

A name is reduced to its skeleton per Unicode TR39 (each character replaced by the prototype it
can be mistaken for: U+0430→`a`, `I`→`l`, `0`→`O`, `m`→`rn`), after NFKC, with and without case
folding, then case-folded: two names that share a reduction look alike. The confusables data is
Unicode's, as shipped by `confusable-homoglyphs` (the package django-registration uses).
"""

import unicodedata
from collections import defaultdict
from collections.abc import Iterable
from functools import cache

from confusable_homoglyphs.confusables import confusables_data
from django.core.exceptions import ValidationError

from accounts.my_data import PLACEHOLDER_PREFIX

PLACEHOLDER_REFUSED = (
    f"Names that read as {PLACEHOLDER_PREFIX!r} followed by anything are Loop's own: they stand "
    "for deleted accounts."
)

# The package keeps right-to-left characters wrapped in direction marks; they are not part of them.
DIRECTION_MARKS = str.maketrans("", "", "\u200e\u200f")


@cache
def prototypes() -> dict[int, str]:
    """Each confusable character's prototype, as a `str.translate` table.

    The package lists confusables both ways (source to prototype, prototype to sources), so the
    direction is recovered: in confusables.txt a source is one code point mapped to exactly one
    prototype, and a prototype is never itself a source. So a character linked to one other,
    which is longer or linked to more, is a source; of two single characters linked only to each
    other, either serves, and the smaller is taken.
    """
    links: dict[str, set[str]] = defaultdict(set)
    for char, glyphs in confusables_data.items():
        char = char.translate(DIRECTION_MARKS)
        for glyph in glyphs:
            other = glyph["c"].translate(DIRECTION_MARKS)
            if other != char:
                links[char].add(other)
                links[other].add(char)
    table = {}
    for char, others in links.items():
        if len(char) != 1 or len(others) != 1:
            continue
        (other,) = others
        if len(other) > 1 or len(links[other]) > 1 or other < char:
            table[ord(char)] = other
    return {code: settled(prototype, table) for code, prototype in table.items()}


def settled(prototype: str, table: dict[int, str]) -> str:
    """`prototype` decomposed and mapped until nothing changes: the package keeps prototypes
    composed (`ņ`, not `n` and a cedilla), and a few hold a character that a lone pair put the
    other way round. Settled, one pass of the table gives a skeleton."""
    prototype = unicodedata.normalize("NFD", prototype)
    while (mapped := unicodedata.normalize("NFD", prototype.translate(table))) != prototype:
        prototype = mapped
    return prototype


def skeleton(text: str) -> str:
    decomposed = unicodedata.normalize("NFD", text)
    return unicodedata.normalize("NFD", decomposed.translate(prototypes()))


def looks(name: str) -> set[str]:
    """What `name` looks like: two names look alike when these sets meet."""
    plain = unicodedata.normalize("NFKC", name)
    return {skeleton(plain).casefold(), skeleton(plain.casefold()).casefold()}


def look_alike(name: str, others: Iterable[str]) -> bool:
    mine = looks(name)
    return any(mine & looks(other) for other in others)


def looks_like_a_placeholder(name: str) -> bool:
    """Whether `name` reads as a deleted account's placeholder (accounts.my_data): its start looks
    like the prefix, whatever letters, case or width make it up."""
    prefixes = looks(PLACEHOLDER_PREFIX)
    return any(look.startswith(prefix) for look in looks(name) for prefix in prefixes)


def refuse_placeholder_look_alike(name: str) -> None:
    """A validator for every form that sets a name: no one passes for an anonymised account in
    the audit."""
    if looks_like_a_placeholder(name):
        raise ValidationError(PLACEHOLDER_REFUSED, code="placeholder")
