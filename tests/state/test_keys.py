"""``Key``: a resource's ``Kind/name``, made from its parts or parsed, never split by hand."""

from __future__ import annotations

import json
import pickle

import pytest

from state.keys import InvalidKey, Key


def test_a_key_is_its_text_and_gives_back_its_parts() -> None:
    key = Key("Deployment", "vlm-1.a")
    assert key == "Deployment/vlm-1.a"
    assert (key.kind, key.name) == ("Deployment", "vlm-1.a")
    assert {key: 1}["Deployment/vlm-1.a"] == 1  # type: ignore[index]  # hashes as its text: records, queues, metrics
    assert json.dumps([key]) == '["Deployment/vlm-1.a"]'
    again = pickle.loads(pickle.dumps(key))
    assert isinstance(again, Key)
    assert again.name == "vlm-1.a"


def test_parse_reads_text_back_and_keeps_a_key_as_it_is() -> None:
    key = Key.parse("StreamSet/cams")
    assert isinstance(key, Key)
    assert (key.kind, key.name) == ("StreamSet", "cams")
    assert Key.parse(key) is key


@pytest.mark.parametrize("text", ["Deployment", "/vlm", "Deployment/", "Deploy ment/x",
                                  "Deployment/..", "Deployment/.hidden", "Deployment/a b",
                                  "Deployment/a/b", "9Kind/x", ""])
def test_text_that_is_not_kind_slash_name_is_refused(text: str) -> None:
    with pytest.raises(InvalidKey):
        Key.parse(text)
