"""Random instances of a JSON Schema (2020-12, and the older drafts' forms), stdlib only.

Values are drawn from one `random.Random`, so a seed reproduces them. The basic keywords
behave like a tool-call argument generator: an `enum` pick, a word from a ten-word list for
strings, integers and numbers in the server ranges of `SynthesisSettings`, coin-flip
booleans, arrays of `min_items..max_items` elements, objects with every required property
and each optional one with a probability.

Beyond that, the output aims to VALIDATE against the schema:

- numeric bounds (`minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum`, also the
  draft-4 boolean form) narrow the server range; `multipleOf`;
- `minLength` / `maxLength` pad or trim the picked word; `const`;
- type arrays (`["string", "null"]`), `anyOf`, `oneOf` (a value that also matches another
  branch is regenerated a few times, then emitted anyway), `allOf` (branches are merged);
- `$ref` to any JSON pointer inside the root schema (`#`, `#/$defs/x`, `#/definitions/x`);
  after more than four nested references the shortest option is chosen (empty arrays,
  only required properties, the cheapest `anyOf` branch, `null` when allowed);
- `prefixItems` and array-form `items` (tuples), `uniqueItems`, `additionalProperties:
  false` inside `allOf`, `minProperties` / `maxProperties`, `dependentRequired`;
- `format` `date-time`, `date`, `time`, `email`, `idn-email`, `uri`, `uri-reference`, `iri`,
  `iri-reference`, `uuid`, `ipv4`, `ipv6`, `hostname`, `duration`;
- `pattern`: literals, `.`, classes (`[A-Z]`, `[^...]`, `\\d`, `\\w`, `\\s`, ...), groups,
  alternation, quantifiers and anchors. Every generated string is checked against the
  pattern(s) with `re.search` semantics by a linear-time automaton (never Python's
  backtracking `re`, see `limits`);
  a pattern that cannot be satisfied (backreferences, lookarounds, conflicting lengths)
  raises `SynthesisError` instead of producing a string that does not match. A formatted
  string is used when it also matches the pattern; otherwise the pattern wins over `format`;
- `enum` values that the rest of the schema rejects (type, bounds, lengths, pattern) are
  skipped; an integer `multipleOf` 0.5 draws integers; a float multiple is accepted only
  when `value / multipleOf` is integral, the check validators such as `jsonschema` make.

Not supported, and silently ignored: `not`, `if`/`then`/`else`, `contains`,
`patternProperties`, `propertyNames`, `dependentSchemas`, `unevaluated*`, `$dynamicRef`,
unknown formats (they are annotations). Raised as `SynthesisError`: a `$ref` outside the root
schema or to an anchor, an empty schema `{}` with no type (a tool parameter must declare
one), contradictions (`minimum` above `maximum`, disjoint allOf types, ...). Best effort
only: a `oneOf` whose branches overlap everywhere (`[{"type": "boolean"}, {"type":
"boolean"}]`) and a `pattern` whose strings can never have the `format`.

Work is bounded (`limits`): at most 1,000 characters per string and per `pattern`, 100
items per array, 100 properties per object, 10,000 values (nested `const` and `enum` values
included) and 30 ms of CPU per synthesis, or per `budgeted()` block around several (one
request's); a schema whose minimum exceeds a cap is a
`SynthesisError` naming the path and the limit. An `anyOf` or `oneOf` branch that cannot be
satisfied is skipped (SynthesisError when none can be).

`arguments_json` writes a value as compact JSON with sorted keys, as tool-call arguments.
"""

from .context import SynthesisError
from .encoding import arguments_json
from .limits import budgeted
from .settings import SynthesisSettings
from .synthesis import synthesize
from .words import WORDS

__all__ = [
    "WORDS",
    "SynthesisError",
    "SynthesisSettings",
    "arguments_json",
    "budgeted",
    "synthesize",
]
