"""The OpenAI wire's shared pieces (harness/wire/openai.py)."""

from __future__ import annotations

import pytest

from harness.load.metrics import metrics_url
from harness.wire.openai import bearer, model_ids, root_url


@pytest.mark.parametrize("given", ["http://h:8000", "http://h:8000/", "http://h:8000/v1", "http://h:8000/v1/"])
def test_root_url_drops_a_trailing_v1_and_slash(given):
    assert root_url(given) == "http://h:8000"
    assert metrics_url(given) == "http://h:8000/metrics"


def test_root_url_keeps_a_path_prefix_that_is_not_v1():
    assert root_url("https://gw.example/llm/v1") == "https://gw.example/llm"
    assert root_url("https://gw.example/v1beta") == "https://gw.example/v1beta"


def test_bearer_only_with_a_key():
    assert bearer(None) == {} and bearer("") == {}
    assert bearer("k") == {"Authorization": "Bearer k"}


def test_model_ids_reads_a_listing_and_refuses_anything_else():
    assert model_ids({"object": "list", "data": [{"id": "a"}, {"id": "b"}]}) == ["a", "b"]
    for bad in ({}, [], {"data": [{"name": "a"}]}, {"data": None}, "models"):
        with pytest.raises(ValueError):
            model_ids(bad)
