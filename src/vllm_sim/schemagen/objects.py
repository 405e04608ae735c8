"""Object values: required and drawn optional properties, `minProperties`,
`maxProperties`, `dependentRequired` and `additionalProperties`."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from .context import Ctx, Generate, fail
from .keywords import ALLOWED_KEY, length
from .limits import MAX_PROPERTIES, check_deadline, paced, shown
from .settings import SynthesisSettings


def object_value(
    rng: random.Random,
    schema: Mapping[str, Any],
    settings: SynthesisSettings,
    ctx: Ctx,
    generate: Generate,
) -> dict[str, Any]:
    properties = schema.get("properties") or {}
    if not isinstance(properties, Mapping):
        raise fail("properties must be an object", ctx)
    required = schema.get("required") or []
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise fail("required must be an array of strings", ctx)
    if len(required) > MAX_PROPERTIES:
        message = f"{len(required)} required properties exceed the limit of {MAX_PROPERTIES}"
        raise fail(message, ctx)
    allowed: frozenset[str] | None = schema.get(ALLOWED_KEY)
    chosen = _choose(rng, schema, settings, ctx, properties, required)
    if len(chosen) > MAX_PROPERTIES:  # optional draws stop at the limit: dependencies
        message = f"{len(chosen)} properties are required (with dependentRequired)"
        raise fail(f"{message}, over the limit of {MAX_PROPERTIES}", ctx)
    result: dict[str, Any] = {}
    for name in chosen:
        if allowed is not None and name not in allowed:
            raise fail(f"required property {name!r} is not allowed", ctx)
        if name in properties:
            result[name] = generate(properties[name], ctx.child(f".properties.{name}"))
        else:
            extra = schema.get("additionalProperties", True)
            if extra is False:
                raise fail(f"required property {name!r} is not allowed", ctx)
            result[name] = generate(extra, ctx.child(f".additionalProperties.{name}"))
    return result


def _choose(
    rng: random.Random,
    schema: Mapping[str, Any],
    settings: SynthesisSettings,
    ctx: Ctx,
    properties: Mapping[str, Any],
    required: list[str],
) -> list[str]:
    """The property names to generate: every required one, each allowed optional one with
    the configured probability, then fitted to the dependencies and property counts."""
    allowed: frozenset[str] | None = schema.get(ALLOWED_KEY)
    percent = (
        settings.optional_param_probability if ctx.top else settings.optional_field_probability
    )
    chosen: list[str] = []
    optional: list[str] = []  # declared, allowed optional properties, in order
    for name, sub in paced(properties.items(), ctx.path):
        if name in required:
            chosen.append(name)
        elif sub is not False and (allowed is None or name in allowed):
            optional.append(name)
            room = len(chosen) < MAX_PROPERTIES - len(required)
            if not ctx.minimal and room and rng.random() < percent / 100:
                chosen.append(name)
    for name in required:
        if name not in chosen:
            chosen.append(name)
    return _adjust_property_count(schema, chosen, required, optional, ctx)


def _adjust_property_count(
    schema: Mapping[str, Any],
    chosen: list[str],
    required: list[str],
    optional: list[str],
    ctx: Ctx,
) -> list[str]:
    raw = schema.get("dependentRequired")
    dependent: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}

    def closure(names: list[str]) -> list[str]:
        result = list(names)
        present = set(result)
        for name in result:  # grows while iterating: dependencies may have dependencies
            needs = dependent.get(name, [])
            if not isinstance(needs, list) or not all(isinstance(d, str) for d in needs):
                raise fail(f"dependentRequired of {name!r} must be an array of strings", ctx)
            for need in needs:
                if need not in present:
                    present.add(need)
                    result.append(need)
        return result

    chosen = closure(chosen)
    most = length(schema, "maxProperties", ctx)
    while most is not None and len(chosen) > most:
        check_deadline(ctx.path)
        # Drop the last optional property that no other chosen property depends on.
        needed = {d for name in chosen for d in dependent.get(name, ())}
        droppable = [n for n in chosen if n not in required and n not in needed]
        if not droppable:
            raise fail(f"more than maxProperties ({most}) properties are required", ctx)
        chosen.remove(droppable[-1])
    least = length(schema, "minProperties", ctx) or 0
    if least > MAX_PROPERTIES:
        message = f"minProperties ({shown(least)}) exceeds the limit of {MAX_PROPERTIES}"
        raise fail(message, ctx)
    for name in optional:
        if len(chosen) >= least:
            break
        if name not in chosen:
            grown = closure([*chosen, name])
            if most is None or len(grown) <= most:
                chosen = grown
    if len(chosen) < least:
        raise fail(f"cannot generate minProperties ({least}) declared properties", ctx)
    return chosen
