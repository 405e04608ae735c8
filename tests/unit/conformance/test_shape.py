"""Shapes: key paths and value kinds, content aside; what two shapes disagree on."""

from __future__ import annotations

from conformance.shape import (
    ShapeRules,
    ancestors,
    diff_shapes,
    id_form,
    shape_of,
)


def test_content_does_not_matter_but_kinds_do() -> None:
    a = shape_of({"text": "hello", "n": 1, "p": 0.5, "x": None})
    b = shape_of({"text": "other words", "n": 7, "p": 0.25, "x": None})
    assert diff_shapes(a, b) == []
    c = shape_of({"text": "hello", "n": 1.0, "p": 0.5, "x": "set"})
    assert [(d.path, set(d.oracle), set(d.sim)) for d in diff_shapes(a, c)] == [
        ("n", {"int"}, {"float"}),
        ("x", {"null"}, {"str"}),
    ]


def test_protocol_values_are_compared_content_values_are_not() -> None:
    a = shape_of({"object": "chat.completion", "finish_reason": "length", "content": "a"})
    b = shape_of({"object": "chat.completion", "finish_reason": "stop", "content": "b"})
    [diff] = diff_shapes(a, b)
    assert diff.path == "finish_reason"
    assert diff.oracle == {'str="length"'} and diff.sim == {'str="stop"'}


def test_a_case_can_ignore_or_pin_values() -> None:
    rules = ShapeRules(ignore_values=frozenset({"finish_reason"}))
    a = shape_of({"finish_reason": "length"}, rules)
    b = shape_of({"finish_reason": "stop"}, rules)
    assert diff_shapes(a, b) == []
    pinned = ShapeRules(exact_values=frozenset({"id"}))
    assert shape_of({"id": "chatcmpl-x"}, pinned)["id"] == {'str="chatcmpl-x"'}


def test_ids_keep_prefix_alphabet_and_length() -> None:
    assert id_form("chatcmpl-8451ab03ac86554e") == "chatcmpl-{hex:16}"
    assert id_form("chatcmpl-tool-b78a6dab10e2345a") == "chatcmpl-tool-{hex:16}"
    assert id_form("msg_1f5d2804-650b-5d2e-8d70-e6faafe06179") == "msg_{uuid:36}"
    assert id_form("resp_AbC9") == "resp_{alnum:4}"
    assert shape_of({"id": "cmpl-0a"})["id"] == {"str~cmpl-{hex:2}"}


def test_lists_compare_by_element_structure_not_length() -> None:
    a = shape_of({"choices": [{"index": 0, "text": "a"}]})
    b = shape_of({"choices": [{"index": 0, "text": "b"}, {"index": 0, "text": "c"}]})
    assert diff_shapes(a, b) == []
    assert shape_of({"x": []})["x"] == {"list(empty)"}


def test_a_key_some_elements_lack_is_marked_absent() -> None:
    shape = shape_of({"items": [{"a": 1, "b": None}, {"a": 2}]})
    assert shape["items[].b"] == {"null", "absent"}
    assert shape["items[].a"] == {"int"}


def test_token_keyed_maps_merge_their_values() -> None:
    a = shape_of({"logprobs": {"top_logprobs": [{"Hello": -0.1, " world": -2.0}]}})
    b = shape_of({"logprobs": {"top_logprobs": [{"Other": -0.5}]}})
    assert diff_shapes(a, b) == []
    assert a["logprobs.top_logprobs[]{}"] == {"float"}
    prompt = shape_of({"prompt_logprobs": [None, {"17": {"logprob": -1.0, "rank": 1}}]})
    assert prompt["prompt_logprobs[]{}.rank"] == {"int"}


def test_a_missing_subtree_is_reported_once_at_its_root() -> None:
    a = shape_of({"usage": {"prompt_tokens": 1, "details": {"cached": 0}}})
    b = shape_of({})
    assert [d.path for d in diff_shapes(a, b)] == ["usage"]
    c = shape_of({"usage": None})
    assert [d.path for d in diff_shapes(a, c)] == ["usage"]


def test_a_new_key_under_a_shared_parent_is_reported() -> None:
    a = shape_of({"choices": [{"index": 0}]})
    b = shape_of({"choices": [{"index": 0, "token_ids": None}]})
    [diff] = diff_shapes(a, b)
    assert (diff.path, set(diff.oracle), set(diff.sim)) == (
        "choices[].token_ids",
        {"absent"},
        {"null"},
    )


def test_ancestors() -> None:
    assert ancestors("a.b[].c") == ["$", "a", "a.b", "a.b[]"]
    assert ancestors("m{}.rank") == ["$", "m", "m{}"]
    assert ancestors("a") == ["$"]
