"""The reasoning profile's model folder: a copy of the tiny model whose tokenizer has `<think>`
and `</think>` as single vocabulary entries (added, not special, as in Qwen3's and
DeepSeek-R1's tokenizers), and whose chat template opens `<think>` in the generation prompt
(Qwen3-2507 and DeepSeek-R1 style), or closes an empty one when `enable_thinking` is false
(Qwen3's "no think"). The weights are untouched: two entries of the vocabulary are renamed,
so its size stays that of the model's embedding.

Standard library only, so any interpreter builds it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

MARKERS = ("<think>", "</think>")

THINK_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n"
    "{% if m['content'] is string %}{{ m['content'] }}{% endif %}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n"
    "{% else %}<think>\n{% endif %}{% endif %}"
)


def _pair(merge: Any) -> tuple[str, str]:
    """A BPE merge as its two parts (tokenizers writes `["a", "b"]` or `"a b"`)."""
    first, second = merge if isinstance(merge, list) else merge.split(" ", 1)
    return first, second


def leaf_entries(merges: list[Any], count: int) -> list[str]:
    """`count` vocabulary entries that no merge uses as a part, taken from the last merges
    (the newest words): renaming one, and dropping the merge that makes it, changes the
    tokenization of that word alone."""
    used = {part for merge in merges for part in _pair(merge)}
    leaves: list[str] = []
    for merge in reversed(merges):
        product = "".join(_pair(merge))
        if product not in used and product not in leaves:
            leaves.append(product)
            if len(leaves) == count:
                return leaves
    raise ValueError("the tokenizer has too few leaf merges to rename")


def _rename(tokenizer: dict[str, Any]) -> dict[int, str]:
    """Renames two leaf entries to the markers; their ids, by marker."""
    model = tokenizer["model"]
    vocab: dict[str, int] = model["vocab"]
    leaves = leaf_entries(model["merges"], len(MARKERS))
    model["merges"] = [m for m in model["merges"] if "".join(_pair(m)) not in leaves]
    ids = {}
    for leaf, marker in zip(leaves, MARKERS, strict=True):
        token_id = vocab.pop(leaf)
        vocab[marker] = token_id
        ids[token_id] = marker
        tokenizer["added_tokens"].append(
            {
                "id": token_id,
                "content": marker,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": False,
            }
        )
    return ids


def build_think_model(source: Path, target: Path) -> dict[int, str]:
    """Writes the think model of `source` into `target` (replaced); the markers' ids."""
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target, ignore=shutil.ignore_patterns(".built-*"))
    tokenizer_path = target / "tokenizer.json"
    tokenizer = json.loads(tokenizer_path.read_text(encoding="utf-8"))
    ids = _rename(tokenizer)
    tokenizer_path.write_text(json.dumps(tokenizer, ensure_ascii=False), encoding="utf-8")
    config_path = target / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    decoder = config.setdefault("added_tokens_decoder", {})
    for entry in tokenizer["added_tokens"]:
        decoder[str(entry["id"])] = {k: v for k, v in entry.items() if k != "id"}
    config["chat_template"] = THINK_TEMPLATE
    config_path.write_text(json.dumps(config, indent=2), encoding="utf-8")
    (target / "chat_template.jinja").write_text(THINK_TEMPLATE, encoding="utf-8")
    return ids
