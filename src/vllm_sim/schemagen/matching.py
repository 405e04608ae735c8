"""Whether a generated value validates against a schema, for the `oneOf` check."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .context import DETACHED, SynthesisError
from .keywords import ALLOWED_KEY, all_list, canonical, matches_scalar_keywords, within
from .limits import check_deadline
from .merge import normalize
from .refs import MAX_REF_DEPTH, resolve


class Matcher:
    """Checks values against subschemas of one root schema (which `$ref`s point into)."""

    def __init__(self, root: Any) -> None:
        self._root = root

    def matches(self, value: Any, schema: Any, depth: int) -> bool:
        """Whether `value` validates against `schema`. Keywords it does not know count as
        satisfied, so it errs towards "matches" (a oneOf value is regenerated more often)."""
        check_deadline()  # `$ref` diamonds make the walk exponential
        if schema is True or depth > MAX_REF_DEPTH:
            return True
        if schema is False:
            return False
        if not isinstance(schema, Mapping):
            return True
        schema = normalize(schema)
        if "$ref" in schema:
            try:
                target, _ = resolve(self._root, schema["$ref"], DETACHED)
            except SynthesisError:
                return True
            if not self.matches(value, target, depth + 1):
                return False
        if not all_list(schema.get("allOf"), lambda s: self.matches(value, s, depth + 1)):
            return False
        any_of = schema.get("anyOf")
        if isinstance(any_of, list) and not any(self.matches(value, s, depth + 1) for s in any_of):
            return False
        one_of = schema.get("oneOf")
        if (
            isinstance(one_of, list)
            and sum(1 for s in one_of if self.matches(value, s, depth + 1)) != 1
        ):
            return False
        if "not" in schema and self.matches(value, schema["not"], depth + 1):
            return False
        if not matches_scalar_keywords(value, schema):
            return False
        if isinstance(value, list):
            return self._matches_array(value, schema, depth)
        if isinstance(value, Mapping):
            return self._matches_object(value, schema, depth)
        return True

    def _matches_array(self, value: list[Any], schema: Mapping[str, Any], depth: int) -> bool:
        if not within(len(value), schema.get("minItems"), schema.get("maxItems")):
            return False
        prefix = schema.get("prefixItems")
        prefix = prefix if isinstance(prefix, list) else []
        items = schema.get("items", True)
        for index, item in enumerate(value):
            sub = prefix[index] if index < len(prefix) else items
            if not self.matches(item, sub, depth + 1):
                return False
        if schema.get("uniqueItems") is True:
            keys = [canonical(item) for item in value]
            if len(set(keys)) != len(keys):
                return False
        return True

    def _matches_object(
        self, value: Mapping[str, Any], schema: Mapping[str, Any], depth: int
    ) -> bool:
        required = schema.get("required")
        if isinstance(required, list) and any(name not in value for name in required):
            return False
        if not within(len(value), schema.get("minProperties"), schema.get("maxProperties")):
            return False
        properties = schema.get("properties")
        properties = properties if isinstance(properties, Mapping) else {}
        extra = schema.get("additionalProperties", True)
        allowed: frozenset[str] | None = schema.get(ALLOWED_KEY)
        for name, item in value.items():
            if allowed is not None and name not in allowed:
                return False
            sub = properties.get(name, extra)
            if not self.matches(item, sub, depth + 1):
                return False
        return True
