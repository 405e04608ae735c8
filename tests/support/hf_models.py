"""Small real model folders for tests, built here, never downloaded.

One byte-level BPE is trained on this repository's own text (with the whole byte alphabet,
so any Unicode text round-trips) and saved in two model folders whose configuration and
chat template follow two families of real models:

- `qwen`: ChatML turns, a default system prompt, tools listed as JSON inside the system
  turn, tool calls as `<tool_call>` JSON, tool results grouped in a user turn; no
  beginning-of-sequence token.
- `llama`: a beginning-of-sequence token added by the tokenizer and written by the
  template, header tokens, tools as indented JSON in the first user turn, a tool call as
  a JSON object, results in `ipython` turns; the template reads `date_string`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Final, Literal

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

Family = Literal["qwen", "llama"]

_REPO: Final = Path(__file__).resolve().parents[2]
VOCAB_SIZE: Final = 4096
CONTEXT_LENGTH: Final = 4096

QWEN_SPECIALS: Final = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
LLAMA_SPECIALS: Final = (
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
)

QWEN_TEMPLATE: Final = """\
{%- if tools %}
{{- '<|im_start|>system\\n' }}
{%- if messages[0].role == 'system' %}{{- messages[0].content }}\
{%- else %}{{- 'You are a helpful assistant.' }}{%- endif %}
{{- '\\n\\n# Tools\\n\\nYou may call functions to answer.\\n\\n<tools>' }}
{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}
{{- '\\n</tools>\\n\\nWrite each call as JSON inside <tool_call></tool_call>.<|im_end|>\\n' }}
{%- elif messages[0].role == 'system' %}
{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- else %}
{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'system' and loop.first %}
{%- elif message.role == 'user' or (message.role == 'assistant' and not message.tool_calls) %}
{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
{%- elif message.role == 'assistant' %}
{{- '<|im_start|>assistant' }}
{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}
{%- for call in message.tool_calls %}
{{- '\\n<tool_call>\\n{"name": "' + call.function.name + '", "arguments": ' }}
{{- call.function.arguments | tojson }}{{- '}\\n</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\\n' }}
{%- elif message.role == 'tool' %}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}
{{- '<|im_start|>user' }}
{%- endif %}
{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
"""

LLAMA_TEMPLATE: Final = """\
{{- bos_token }}
{%- if date_string is not defined %}{%- set date_string = '26 Jul 2024' %}{%- endif %}
{%- if messages[0].role == 'system' %}
{%- set system_message = messages[0].content | trim %}{%- set messages = messages[1:] %}
{%- else %}{%- set system_message = '' %}{%- endif %}
{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}
{%- if tools is not none %}{{- 'Environment: ipython\\n' }}{%- endif %}
{{- 'Cutting Knowledge Date: December 2023\\nToday Date: ' + date_string + '\\n\\n' }}
{{- system_message + '<|eot_id|>' }}
{%- if tools is not none and messages | length > 0 %}
{%- set first_user = messages[0].content | trim %}{%- set messages = messages[1:] %}
{{- '<|start_header_id|>user<|end_header_id|>\\n\\nAnswer with a JSON function call.\\n\\n' }}
{%- for tool in tools %}{{- tool | tojson(indent=4) }}{{- '\\n\\n' }}{%- endfor %}
{{- first_user + '<|eot_id|>' }}
{%- endif %}
{%- for message in messages %}
{%- if not (message.role == 'tool' or message.tool_calls) %}
{{- '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' }}
{{- message.content | trim + '<|eot_id|>' }}
{%- elif message.tool_calls %}
{%- set call = message.tool_calls[0].function %}
{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n{"name": "' + call.name }}
{{- '", "parameters": ' + call.arguments | tojson + '}<|eot_id|>' }}
{%- else %}
{{- '<|start_header_id|>ipython<|end_header_id|>\\n\\n' + message.content + '<|eot_id|>' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""


def _corpus() -> list[str]:
    files = [_REPO / "README.md", *sorted((_REPO / "src").rglob("*.py"))]
    return [path.read_text(encoding="utf-8") for path in files]


def train_tokenizer() -> Tokenizer:
    """A byte-level BPE of VOCAB_SIZE ids; ids 0-7 are both families' special tokens."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=[*QWEN_SPECIALS, *LLAMA_SPECIALS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(), trainer)
    return tokenizer


def _write_json(path: Path, value: object) -> None:
    path.write_text(json.dumps(value, indent=2, ensure_ascii=False), encoding="utf-8")


def write_model_folder(tokenizer: Tokenizer, folder: Path, family: Family) -> Path:
    """A model folder of `family` in `folder` (created): tokenizer, template, configs."""
    folder.mkdir(parents=True, exist_ok=True)
    trim = processors.ByteLevel(trim_offsets=False)
    if family == "llama":
        bos = "<|begin_of_text|>"
        tokenizer.post_processor = processors.Sequence(
            [
                trim,
                processors.TemplateProcessing(
                    single=f"{bos} $A",
                    pair=f"{bos} $A {bos} $B",
                    special_tokens=[(bos, tokenizer.token_to_id(bos))],
                ),
            ]
        )
        special = {"bos_token": bos, "eos_token": "<|eot_id|>"}
        template, eos = (
            LLAMA_TEMPLATE,
            [tokenizer.token_to_id(t) for t in ("<|eot_id|>", "<|end_of_text|>")],
        )
    else:
        tokenizer.post_processor = trim
        special = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
        template, eos = QWEN_TEMPLATE, [tokenizer.token_to_id("<|im_end|>")]
    tokenizer.save(str(folder / "tokenizer.json"))
    _write_json(
        folder / "tokenizer_config.json",
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "model_max_length": CONTEXT_LENGTH,
            "chat_template": template,
            **special,
        },
    )
    _write_json(folder / "generation_config.json", {"eos_token_id": eos})
    _write_json(
        folder / "config.json",
        {
            "architectures": ["LlamaForCausalLM" if family == "llama" else "Qwen2ForCausalLM"],
            "max_position_embeddings": CONTEXT_LENGTH,
            "vocab_size": VOCAB_SIZE,
            "eos_token_id": eos[0],
        },
    )
    return folder
