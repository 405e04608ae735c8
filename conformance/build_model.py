"""Builds the oracle's model folder: a byte-level BPE tokenizer trained on the text files named
on the command line, a chat template, and a tiny random-weight Llama sized to it.

Runs inside the oracle's own environment (it needs torch, transformers and tokenizers, which
the simulator's environment does not have): `python build_model.py OUT FILE...`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

VOCAB_SIZE = 8192
SPECIAL = ("<unk>", "<s>", "</s>")

# A string-content template: vLLM then flattens text parts into one string, and assistant
# tool-call turns (content null) render as empty turns rather than failing.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n"
    "{% if m['content'] is string %}{{ m['content'] }}{% endif %}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def ascii_lines(files: list[str]) -> list[str]:
    """Only ASCII text, so every token decodes to whole characters: a random model then never
    emits half of a multi-byte character, which would make streamed deltas empty."""
    lines: list[str] = []
    for name in files:
        text = Path(name).read_text(encoding="utf-8", errors="ignore")
        lines.extend(text.encode("ascii", "ignore").decode().splitlines())
    return lines


def build_tokenizer(files: list[str]) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    # Each punctuation mark is a token of its own: no token then spans the end of one
    # structure and the start of the next (`><` across `</tool_call><tool_call>`), so a
    # grammar always reaches the point where EOS may end the output.
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Punctuation(behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=list(SPECIAL))
    tok.train_from_iterator(ascii_lines(files), trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A $B", special_tokens=[("<s>", tok.token_to_id("<s>"))]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        chat_template=CHAT_TEMPLATE,
        model_max_length=512,
    )


def build_model(out: Path, tokenizer: Any, sample: str) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    # head_dim = hidden_size / heads = 64: the CPU attention kernels need at least that.
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=512,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(config)
    banned = banned_tokens(tokenizer)
    with torch.no_grad():
        suppress(model, banned)
        ids = tokenizer(sample, return_tensors="pt").input_ids[:, :400]
        place_eos(model, ids, banned, tokenizer.eos_token_id)
    model.save_pretrained(out)


def suppress(model: Any, banned: list[int]) -> None:
    """Makes the banned tokens (blank ones and the special ones but EOS) lose every argmax.

    Random weights left alone would sometimes pick blanks for ever where a grammar allows
    free whitespace (tool-call arguments), making lengths depend on luck. Hidden dimension 0
    is held at a constant: every embedding has 1.0 there and no layer writes to it, so
    after the final norm it is always large and positive; the banned tokens' output rows
    weigh it by -1, the others by 0. The rest of the model stays random."""
    model.model.embed_tokens.weight[:, 0] = 1.0
    for layer in model.model.layers:
        layer.self_attn.o_proj.weight[0, :] = 0.0
        layer.mlp.down_proj.weight[0, :] = 0.0
    model.lm_head.weight[:, 0] = 0.0
    model.lm_head.weight[banned, 0] = -1.0


def place_eos(model: Any, ids: Any, banned: list[int], eos: int) -> None:
    """Gives EOS a fixed logit of 2.5 standard deviations of the others': below the best of
    the ~8,000 free tokens at every position (their maximum sits near 4 deviations), so free
    text runs to max_tokens, but above a lone competitor almost always, so where a grammar
    allows only a few tokens besides EOS (another tool call after the first) it ends."""
    output = model(ids, output_hidden_states=True)
    skip = set(banned)
    keep = [i for i in range(output.logits.shape[-1]) if i not in skip]
    sigma = output.logits[0][:, keep].std().item()
    h0 = output.hidden_states[-1][0][:, 0].mean().item()
    model.lm_head.weight[eos, :] = 0.0
    model.lm_head.weight[eos, 0] = 2.5 * sigma / h0


def banned_tokens(tokenizer: Any) -> list[int]:
    special = set(tokenizer.all_special_ids) - {tokenizer.eos_token_id}
    blank = {i for i in range(len(tokenizer)) if not tokenizer.decode([i]).strip()}
    return sorted(special | blank)


def main(argv: list[str]) -> None:
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(argv[1:])
    tokenizer.save_pretrained(out)
    build_model(out, tokenizer, "\n".join(ascii_lines(argv[1:2])))


if __name__ == "__main__":
    main(sys.argv[1:])
