"""Known differences, accepted with a reason (conformance/accepted.toml).

Each `[[accepted]]` entry matches differences by shell-style patterns on `case`, `aspect` and
`path` (each `*` when left out) and must give a one-line `reason`. An entry that matched
nothing in a run is reported as stale, so the file does not outlive the differences.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from conformance.compare import Difference


@dataclass(frozen=True)
class Accepted:
    case: str
    aspect: str
    path: str
    reason: str

    def matches(self, diff: Difference) -> bool:
        return (
            fnmatchcase(diff.case, self.case)
            and fnmatchcase(diff.aspect, self.aspect)
            and fnmatchcase(diff.path, self.path)
        )


def parse_accepted(document: dict[str, Any]) -> list[Accepted]:
    entries: list[Accepted] = []
    for number, item in enumerate(document.get("accepted", []), start=1):
        reason = str(item.get("reason", "")).strip()
        if not reason:
            raise ValueError(f"accepted entry {number} has no reason")
        unknown = set(item) - {"case", "aspect", "path", "reason"}
        if unknown:
            raise ValueError(f"accepted entry {number} has unknown keys {sorted(unknown)}")
        entries.append(
            Accepted(
                case=str(item.get("case", "*")),
                aspect=str(item.get("aspect", "*")),
                path=str(item.get("path", "*")),
                reason=reason,
            )
        )
    return entries


def load_accepted(path: Path) -> list[Accepted]:
    if not path.exists():
        return []
    return parse_accepted(tomllib.loads(path.read_text(encoding="utf-8")))


@dataclass(frozen=True)
class Verdict:
    unexpected: list[Difference]
    accepted: list[tuple[Difference, Accepted]]
    stale: list[Accepted]


def classify(diffs: Iterable[Difference], entries: list[Accepted]) -> Verdict:
    unexpected: list[Difference] = []
    accepted: list[tuple[Difference, Accepted]] = []
    used: set[int] = set()
    for diff in diffs:
        index = next((i for i, e in enumerate(entries) if e.matches(diff)), None)
        if index is None:
            unexpected.append(diff)
        else:
            used.add(index)
            accepted.append((diff, entries[index]))
    stale = [entry for i, entry in enumerate(entries) if i not in used]
    return Verdict(unexpected, accepted, stale)
