"""API keys: how a secret is made and checked, and what its scopes allow. No I/O here.

A secret reads `nmr_<id>_<random>`: `nmr_` makes a leaked one easy to recognise (and to scan
for), `<id>` is 8 hex digits that name the key in lists and logs without revealing it, and
`<random>` is 256 bits from `secrets`. Only the SHA-256 of the whole secret is stored; the
secret is high-entropy, so a plain hash is as good as a slow one, and checking it costs a
microsecond on the hot path. The edge finds a key by its id and compares digests in constant
time.

Scopes: `admin` (everything: create counters, manage keys, and all the rest), `read` (the GET
routes), `next:PATTERN` (take values of the counters whose name matches the glob PATTERN, as
`fnmatch` reads it, case-sensitive: `next:inv-*`, `next:*`).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from fnmatch import fnmatchcase
from typing import Any

from infra.errors import InvalidKey

PREFIX = "nmr_"
SECRET = re.compile(r"^nmr_([0-9a-f]{8})_[A-Za-z0-9_-]{43}$")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# A glob of counter names, as fnmatch reads it: name characters and wildcards, and sets, each
# `[` closed by a `]` (a `]` or `!` first in a set is a member or the negation, as fnmatch
# reads them). An unclosed `[` (`next:[`) would match only a literal bracket, which no
# counter name holds: the typo is refused.
_MEMBER = r"[A-Za-z0-9._*?!\[-]"
_SET = rf"\[(?:!(?:\]{_MEMBER}*|{_MEMBER}+)|\]{_MEMBER}*|[A-Za-z0-9._*?\[-]{_MEMBER}*)\]"
PATTERN = re.compile(rf"^(?:[A-Za-z0-9._*?!-]|{_SET})+$")
MAX_PATTERN = 128
MAX_SCOPES = 32


class Need(Enum):
    """What a request needs a key to allow."""

    ADMIN = "admin"
    READ = "read"
    NEXT = "next"
    ANY = "any"  # a valid key, whatever its scopes (a route that does not exist: 404 after)


def digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8", "surrogateescape")).digest()


def identify(secret: str) -> str | None:
    """The key id a presented secret names, or None if it is not shaped like one of ours."""
    match = SECRET.fullmatch(secret)
    return match.group(1) if match else None


def mint() -> tuple[str, str]:
    """A new (id, secret)."""
    key_id = secrets.token_hex(4)
    return key_id, f"{PREFIX}{key_id}_{secrets.token_urlsafe(32)}"


def new(name: Any, scopes: Any, now: datetime) -> tuple[Key, str]:
    """A new key (name and scopes checked: InvalidKey) and its secret, which is not kept."""
    key_id, secret = mint()
    key = Key(key_id, check_name(name), digest(secret), check_scopes(scopes), now)
    return key, secret


def check_name(name: Any) -> str:
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise InvalidKey(
            "name", "must be 1-64 letters, digits, '.', '_' or '-', from a letter or digit"
        )
    return name


def check_scopes(scopes: Any) -> tuple[str, ...]:
    if not isinstance(scopes, list) or not scopes or len(scopes) > MAX_SCOPES:
        raise InvalidKey("scopes", f"must be a list of 1 to {MAX_SCOPES} scopes")
    for scope in scopes:
        if not isinstance(scope, str):
            raise InvalidKey("scopes", "each scope must be a string")
        if scope in ("admin", "read"):
            continue
        glob = scope[5:]
        if scope.startswith("next:") and len(glob) <= MAX_PATTERN and PATTERN.fullmatch(glob):
            continue
        raise InvalidKey(
            "scopes",
            f"{scope[:80]!r} is not a scope: use admin, read or next:PATTERN "
            "(a glob of counter names, e.g. next:inv-*, with every [ closed by a ])",
        )
    return tuple(dict.fromkeys(scopes))


@dataclass(frozen=True, slots=True)
class Key:
    id: str
    name: str
    digest: bytes
    scopes: tuple[str, ...]
    created: datetime
    last_used: datetime | None = None
    revoked: datetime | None = None

    def matches(self, secret: str) -> bool:
        return hmac.compare_digest(self.digest, digest(secret))

    def allows(self, need: Need, counter: str = "") -> bool:
        if "admin" in self.scopes or need is Need.ANY:
            return True
        if need is Need.READ:
            return "read" in self.scopes
        if need is Need.NEXT:
            return any(
                scope.startswith("next:") and fnmatchcase(counter, scope[5:])
                for scope in self.scopes
            )
        return False

    def to_json(self) -> dict[str, Any]:
        """What the API shows of a key: never its secret nor its digest."""
        return {
            "id": self.id,
            "name": self.name,
            "scopes": list(self.scopes),
            "created": self.created.isoformat(),
            "last_used": self.last_used.isoformat() if self.last_used else None,
            "revoked": self.revoked.isoformat() if self.revoked else None,
        }
