"""Topic matching (AMQP semantics) against a straight-from-the-spec reference, plus checks."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monitors.bus import topic_matches, validate_pattern, validate_routing_key


def reference(pattern: list[str], key: list[str]) -> bool:
    """RabbitMQ's topic rule, written as directly as possible (exponential, fine for tests)."""
    if not pattern:
        return not key
    head, rest = pattern[0], pattern[1:]
    if head == "#":
        return reference(rest, key) or (bool(key) and reference(pattern, key[1:]))
    return bool(key) and head in ("*", key[0]) and reference(rest, key[1:])


words = st.sampled_from(["a", "b", "worker", "x1"])  # few words, so matches are common
keys = st.lists(words, min_size=1, max_size=6)
patterns = st.lists(st.one_of(words, st.just("*"), st.just("#")), min_size=1, max_size=6)


@given(patterns, keys)
def test_matches_reference(pattern: list[str], key: list[str]) -> None:
    assert topic_matches(".".join(pattern), ".".join(key)) == reference(pattern, key)


@given(keys, st.data())
def test_wildcarding_a_key_still_matches(key: list[str], data: st.DataObject) -> None:
    pattern = [data.draw(st.sampled_from([w, "*", "#"])) for w in key]
    assert topic_matches(".".join(pattern), ".".join(key))


@given(keys)
def test_hash_matches_everything_and_star_counts_words(key: list[str]) -> None:
    text = ".".join(key)
    assert topic_matches("#", text)
    assert topic_matches(".".join("*" * len(key)), text)
    assert not topic_matches(".".join("*" * (len(key) + 1)), text)


@pytest.mark.parametrize(
    ("pattern", "key", "expected"),
    [
        ("worker.heartbeat", "worker.heartbeat", True),
        ("worker.*", "worker.heartbeat", True),
        ("worker.*", "worker", False),
        ("worker.*", "worker.a.b", False),
        ("worker.#", "worker", True),  # '#' is zero or more words
        ("worker.#", "worker.a.b", True),
        ("#.ack", "worker.elect.ack", True),
        ("*.elect.*", "worker.elect.ack", True),
        ("a.#.b.#.c", "a.b.c", True),
        ("a.#.b.#.c", "a.c.b", False),
        ("worker.*", "workers.x", False),  # not a glob: words match whole
    ],
)
def test_examples(pattern: str, key: str, expected: bool) -> None:
    assert topic_matches(pattern, key) is expected


def test_many_hashes_is_not_exponential() -> None:
    pattern = ".".join(["#"] * 30 + ["z"])
    assert not topic_matches(pattern, ".".join(["a"] * 60))  # DP: instant; recursion: forever


@pytest.mark.parametrize(
    "bad", ["", "a..b", ".a", "a.", "a b", "a.*", "a.#", "wor*ker", "é", "x" * 256]
)
def test_bad_routing_keys(bad: str) -> None:
    with pytest.raises(ValueError):
        validate_routing_key(bad)


@pytest.mark.parametrize("bad", ["", "a..b", "a.b*", "#x", "a b"])
def test_bad_patterns(bad: str) -> None:
    with pytest.raises(ValueError):
        validate_pattern(bad)


def test_good_patterns() -> None:
    for good in ("#", "*", "a.*.#", "worker.heartbeat"):
        assert validate_pattern(good) == good
    with pytest.raises(TypeError):
        validate_routing_key(b"a.b")  # type: ignore[arg-type]
