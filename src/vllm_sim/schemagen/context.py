"""Where the walk is inside a schema, and the error that names that place."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

MINIMAL_DEPTH: Final = 4  # more nested $refs than this: generate the shortest value


class SynthesisError(ValueError):
    """A schema we cannot generate a value for; the message names the problem and the path."""


@dataclass(frozen=True, slots=True)
class Ctx:
    path: str  # where in the schema we are, for error messages
    depth: int  # nested $refs followed so far
    top: bool  # the root instance (tool parameters): its optional props use the param rate
    null_ok: bool  # a `{"type": "null"}` reached through anyOf/oneOf may produce None

    @property
    def minimal(self) -> bool:
        return self.depth > MINIMAL_DEPTH

    def at(self, suffix: str) -> Ctx:
        return Ctx(self.path + suffix, self.depth, self.top, self.null_ok)

    def branch(self, suffix: str) -> Ctx:
        """An `anyOf`/`oneOf` branch, where a `{"type": "null"}` may produce None."""
        return Ctx(self.path + suffix, self.depth, self.top, True)

    def child(self, suffix: str) -> Ctx:
        return Ctx(path=self.path + suffix, depth=self.depth, top=False, null_ok=False)


# For lookups outside a walk (cost estimates, instance matching): errors there are caught.
DETACHED: Final = Ctx("$", 0, False, False)

# Generates a value for a subschema; arrays and objects call back into the walk with it.
Generate = Callable[[Any, Ctx], Any]


def fail(message: str, ctx: Ctx) -> SynthesisError:
    return SynthesisError(f"{message} at {ctx.path}")


def unsupported_type(name: object, ctx: Ctx) -> SynthesisError:
    shown = "(missing)" if name is None else name
    return fail(f"tool parameters of type {shown} are not supported", ctx)
