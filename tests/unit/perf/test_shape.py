"""Model shapes from config.json: the spec's check table of parameter and KV sizes, the
presets, multimodal and MoE configs, and the errors of incomplete ones."""

from __future__ import annotations

from typing import Any

import pytest

from vllm_sim.perf import PRESETS, ModelShape, preset_for

KIB = 1024

# The key numbers of each model's config.json.
LLAMA_31_8B: dict[str, Any] = {
    "model_type": "llama",
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_hidden_layers": 32,
    "intermediate_size": 14336,
    "vocab_size": 128256,
    "tie_word_embeddings": False,
}
QWEN3_14B: dict[str, Any] = {
    "model_type": "qwen3",
    "hidden_size": 5120,
    "num_attention_heads": 40,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "num_hidden_layers": 40,
    "intermediate_size": 17408,
    "vocab_size": 151936,
    "tie_word_embeddings": False,
}
CODELLAMA_34B: dict[str, Any] = {
    "model_type": "llama",
    "hidden_size": 8192,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "num_hidden_layers": 48,
    "intermediate_size": 22016,
    "vocab_size": 32000,
}
LLAMA_2_70B: dict[str, Any] = {
    "model_type": "llama",
    "hidden_size": 8192,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "num_hidden_layers": 80,
    "intermediate_size": 28672,
    "vocab_size": 32000,
    "tie_word_embeddings": False,
}
# Multi-head attention: no num_key_value_heads, which then equals the heads.
LLAMA_2_7B: dict[str, Any] = {
    "model_type": "llama",
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "intermediate_size": 11008,
    "vocab_size": 32000,
}
MIXTRAL_8X7B: dict[str, Any] = {
    "model_type": "mixtral",
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_hidden_layers": 32,
    "intermediate_size": 14336,
    "vocab_size": 32000,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "tie_word_embeddings": False,
}


def near(value: float, expected: float, tolerance: float = 0.01) -> bool:
    return abs(value / expected - 1) <= tolerance


@pytest.mark.parametrize(
    ("config", "billions", "kv_kib"),
    [
        pytest.param(LLAMA_31_8B, 8.03, 128, id="Llama-3.1-8B"),
        pytest.param(QWEN3_14B, 14.77, 160, id="Qwen3-14B"),
        pytest.param(CODELLAMA_34B, 33.7, 192, id="CodeLlama-34B"),
        pytest.param(LLAMA_2_70B, 69.0, 320, id="Llama-2-70B"),
        pytest.param(LLAMA_2_7B, 6.74, 512, id="Llama-2-7B"),
    ],
)
def test_the_spec_check_table(config: dict[str, Any], billions: float, kv_kib: int) -> None:
    shape = ModelShape.from_config(config)
    assert near(shape.params(), billions * 1e9)
    assert near(shape.kv_bytes_per_token(2.0), kv_kib * KIB)


def test_key_value_heads_default_to_the_attention_heads() -> None:
    shape = ModelShape.from_config(LLAMA_2_7B)
    assert shape.kv_heads == 32 and shape.head_dim == 128


def test_kv_per_rank_splits_the_kv_heads_and_then_replicates_one() -> None:
    shape = ModelShape.from_config(LLAMA_31_8B)  # 8 KV heads
    assert shape.kv_bytes_per_token(2.0, tensor_parallel=2) == 64 * KIB
    assert shape.kv_bytes_per_token(1.0, tensor_parallel=8) == 8 * KIB
    # Past 8 ranks each rank keeps one head's worth.
    assert shape.kv_bytes_per_token(2.0, tensor_parallel=16) == 16 * KIB
    with pytest.raises(ValueError, match="tensor_parallel"):
        shape.kv_bytes_per_token(2.0, tensor_parallel=0)


# Published parameter counts of the preset models.
@pytest.mark.parametrize(
    ("model", "billions"),
    [
        ("meta-llama/Llama-3.1-8B-Instruct", 8.03),
        ("meta-llama/Llama-3.1-70B-Instruct", 70.6),
        ("meta-llama/Llama-3.2-3B-Instruct", 3.21),
        ("Qwen/Qwen2.5-1.5B-Instruct", 1.54),
        ("Qwen/Qwen2.5-7B-Instruct", 7.61),
        ("Qwen/Qwen3-14B", 14.8),
        ("Qwen/Qwen3-32B", 32.8),
        ("Qwen/Qwen3-30B-A3B", 30.5),
        ("mistralai/Mixtral-8x7B-Instruct-v0.1", 46.7),
    ],
)
def test_presets_have_the_published_sizes(model: str, billions: float) -> None:
    shape = PRESETS[model]
    assert shape.name == model
    assert near(shape.params(), billions * 1e9)


def test_the_presets_equal_their_configs() -> None:
    assert (
        ModelShape.from_config(LLAMA_31_8B, name="meta-llama/Llama-3.1-8B-Instruct")
        == (PRESETS["meta-llama/Llama-3.1-8B-Instruct"])
    )
    assert ModelShape.from_config(QWEN3_14B, name="Qwen/Qwen3-14B") == PRESETS["Qwen/Qwen3-14B"]
    mixtral = "mistralai/Mixtral-8x7B-Instruct-v0.1"
    assert ModelShape.from_config(MIXTRAL_8X7B, name=mixtral) == PRESETS[mixtral]


def test_preset_for_matches_the_id_then_its_last_part_in_any_case() -> None:
    llama = PRESETS["meta-llama/Llama-3.1-8B-Instruct"]
    assert preset_for("meta-llama/Llama-3.1-8B-Instruct") is llama
    assert preset_for("llama-3.1-8b-instruct") is llama
    assert preset_for("/models/LLAMA-3.1-8B-INSTRUCT/") is llama
    assert preset_for("some-mirror/Qwen3-14B") is PRESETS["Qwen/Qwen3-14B"]
    assert preset_for("meta-llama/Llama-3.1-405B-Instruct") is None
    assert preset_for("") is None


def test_a_multimodal_config_is_read_from_its_text_config() -> None:
    config = {
        "model_type": "llava",
        "vision_config": {"hidden_size": 1024, "num_attention_heads": 16},
        "text_config": LLAMA_31_8B,
    }
    assert ModelShape.from_config(config) == ModelShape.from_config(LLAMA_31_8B)


def test_mixtral_is_46_7_billion_resident_and_12_9_billion_active() -> None:
    shape = ModelShape.from_config(MIXTRAL_8X7B)
    assert shape.is_moe
    assert (shape.experts, shape.experts_per_token, shape.moe_intermediate) == (8, 2, 14336)
    assert near(shape.params(), 46.7e9)
    # The published 12.9 B active counts the embedding and the LM head too.
    assert near(shape.active_params() + shape.embedding_params(), 12.9e9)
    assert shape.active_params() < shape.params() / 3


def test_moe_widths_and_shared_experts_by_each_convention() -> None:
    base = {**MIXTRAL_8X7B, "num_local_experts": None}
    qwen3_moe = ModelShape.from_config({**base, "num_experts": 128, "moe_intermediate_size": 768})
    assert (qwen3_moe.experts, qwen3_moe.moe_intermediate) == (128, 768)
    assert qwen3_moe.shared_expert_intermediate == 0
    qwen2_moe = ModelShape.from_config(
        {**base, "num_experts": 60, "moe_intermediate_size": 1408, "num_experts_per_tok": 4}
        | {"shared_expert_intermediate_size": 5632}
    )
    assert qwen2_moe.shared_expert_intermediate == 5632
    deepseek = ModelShape.from_config(
        {**base, "n_routed_experts": 64, "moe_intermediate_size": 1408, "n_shared_experts": 2}
    )
    assert (deepseek.experts, deepseek.shared_expert_intermediate) == (64, 2 * 1408)
    # A shared expert is run by every token, and resident once.
    with_shared = qwen2_moe.active_params()
    without = ModelShape.from_config(
        {**base, "num_experts": 60, "moe_intermediate_size": 1408, "num_experts_per_tok": 4}
    ).active_params()
    assert with_shared - without == qwen2_moe.layers * 3 * qwen2_moe.hidden * 5632


def test_a_single_expert_is_a_dense_model() -> None:
    shape = ModelShape.from_config({**LLAMA_31_8B, "num_experts": 1})
    assert not shape.is_moe and shape.params() == ModelShape.from_config(LLAMA_31_8B).params()


def test_tied_embeddings_count_once() -> None:
    untied = ModelShape.from_config(LLAMA_31_8B)
    tied = ModelShape.from_config({**LLAMA_31_8B, "tie_word_embeddings": True})
    assert untied.params() - tied.params() == 128256 * 4096


def test_a_plain_mlp_has_two_matrices() -> None:
    neox = ModelShape.from_config({**LLAMA_2_7B, "model_type": "gpt_neox"})
    assert not neox.gated_mlp
    gated = ModelShape.from_config(LLAMA_2_7B)
    assert gated.params() - neox.params() == 32 * 4096 * 11008


def test_whole_floats_are_accepted_as_integers() -> None:
    assert ModelShape.from_config({**LLAMA_31_8B, "hidden_size": 4096.0}).hidden == 4096


@pytest.mark.parametrize(
    "key", ["hidden_size", "num_attention_heads", "num_hidden_layers", "vocab_size"]
)
def test_a_missing_key_is_named(key: str) -> None:
    config = {name: value for name, value in LLAMA_31_8B.items() if name != key}
    with pytest.raises(ValueError, match=f"missing '{key}'"):
        ModelShape.from_config(config, name="my-model")


def test_a_dense_model_without_an_intermediate_size_is_refused() -> None:
    config = {name: value for name, value in LLAMA_31_8B.items() if name != "intermediate_size"}
    with pytest.raises(ValueError, match="intermediate_size"):
        ModelShape.from_config(config)


def test_an_moe_model_without_experts_per_token_is_refused() -> None:
    config = {k: v for k, v in MIXTRAL_8X7B.items() if k != "num_experts_per_tok"}
    with pytest.raises(ValueError, match="num_experts_per_tok"):
        ModelShape.from_config(config)


@pytest.mark.parametrize("value", [0, -8, 4.5, "8", True, [8]])
def test_a_key_that_is_not_a_positive_integer_is_named(value: object) -> None:
    with pytest.raises(ValueError, match="'num_key_value_heads' must be a positive integer"):
        ModelShape.from_config({**LLAMA_31_8B, "num_key_value_heads": value})


def test_a_head_dim_that_cannot_be_derived_is_asked_for() -> None:
    with pytest.raises(ValueError, match="head_dim"):
        ModelShape.from_config({**LLAMA_31_8B, "num_attention_heads": 30})


def test_tie_word_embeddings_must_be_a_boolean() -> None:
    with pytest.raises(ValueError, match="tie_word_embeddings"):
        ModelShape.from_config({**LLAMA_31_8B, "tie_word_embeddings": "yes"})


def test_an_inconsistent_shape_is_refused() -> None:
    with pytest.raises(ValueError, match="experts_per_token"):
        ModelShape(
            1, 64, 4, 4, 16, 0, 100, False, experts=4, experts_per_token=5, moe_intermediate=8
        )
    with pytest.raises(ValueError, match="layers"):
        ModelShape(0, 64, 4, 4, 16, 128, 100, False)
