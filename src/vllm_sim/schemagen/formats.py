"""Strings for the `format` values the generator knows; other formats are annotations."""

from __future__ import annotations

import datetime
import ipaddress
import random
import uuid
from collections.abc import Callable
from typing import Final

from .words import WORDS

_DATE_START: Final = datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC)
_DATE_SPAN_SECONDS: Final = 31 * 365 * 24 * 3600  # 2000..2030


def _random_moment(rng: random.Random) -> datetime.datetime:
    return _DATE_START + datetime.timedelta(seconds=rng.randrange(_DATE_SPAN_SECONDS))


def _word_slug(rng: random.Random) -> str:
    return rng.choice(WORDS).lower()


FORMATS: Final[dict[str, Callable[[random.Random], str]]] = {
    "date-time": lambda rng: _random_moment(rng).strftime("%Y-%m-%dT%H:%M:%SZ"),
    "date": lambda rng: _random_moment(rng).strftime("%Y-%m-%d"),
    "time": lambda rng: _random_moment(rng).strftime("%H:%M:%SZ"),
    "email": lambda rng: f"{_word_slug(rng)}@example.com",
    "idn-email": lambda rng: f"{_word_slug(rng)}@example.com",
    "uri": lambda rng: f"https://example.com/{_word_slug(rng)}",
    "uri-reference": lambda rng: f"https://example.com/{_word_slug(rng)}",
    "iri": lambda rng: f"https://example.com/{_word_slug(rng)}",
    "iri-reference": lambda rng: f"https://example.com/{_word_slug(rng)}",
    "hostname": lambda rng: f"{_word_slug(rng)}.example.com",
    "uuid": lambda rng: str(uuid.UUID(int=rng.getrandbits(128), version=4)),
    "ipv4": lambda rng: str(ipaddress.IPv4Address(rng.getrandbits(32))),
    "ipv6": lambda rng: str(ipaddress.IPv6Address(rng.getrandbits(128))),
    "duration": lambda rng: f"P{rng.randint(1, 30)}D",
}
