"""AMQP topic routing keys and patterns, as pure functions.

Keys are words separated by "."; in patterns `*` stands for exactly one word and `#` for zero
or more words (RabbitMQ's topic exchange). The same matcher filters messages on every backend, so
memory://, redis:// and amqp:// agree on what a subscription receives.
"""

from __future__ import annotations

import re
from functools import lru_cache

# Printable ASCII except space: keys become Redis channel names and AMQP short strings, and a
# readable key is worth more than exotic ones. 255 is AMQP's short-string limit.
MAX_KEY_LENGTH = 255
_WORD = re.compile(r"[!-~]+")


def _check(text: str, what: str, wildcards: bool) -> list[str]:
    if not isinstance(text, str):
        raise TypeError(f"{what} must be a str, not {type(text).__name__}")
    if not text:
        raise ValueError(f"{what} must not be empty")
    if len(text) > MAX_KEY_LENGTH:
        raise ValueError(f"{what} {text[:40]!r}... is longer than {MAX_KEY_LENGTH} characters")
    words = text.split(".")
    for word in words:
        if not word:
            raise ValueError(f"{what} {text!r} has an empty word (leading, trailing or double '.')")
        if not _WORD.fullmatch(word):
            raise ValueError(f"{what} {text!r}: words are printable ASCII without spaces")
        if word in ("*", "#"):
            if not wildcards:
                raise ValueError(
                    f"{what} {text!r} contains the wildcard {word!r}; only patterns may"
                )
        elif "*" in word or "#" in word:
            raise ValueError(
                f"{what} {text!r}: '*' and '#' must be whole words (as in 'worker.*' or 'a.#')"
            )
    return words


# Routing keys already found valid. Every frame received is checked, and a node hears the
# same few keys over and over: a set lookup instead of a split and a regex per word. Bounded,
# since keys come from the network: when full it starts again (a hostile peer can only make
# us check keys, as we did before).
_VALID_KEYS: set[str] = set()
_VALID_KEYS_MAX = 4096


def validate_routing_key(key: str) -> str:
    """Return `key` if it is a routing key one may publish with, else raise ValueError."""
    if type(key) is str and key in _VALID_KEYS:
        return key
    _check(key, "routing key", wildcards=False)
    if len(_VALID_KEYS) >= _VALID_KEYS_MAX:
        _VALID_KEYS.clear()
    _VALID_KEYS.add(key)
    return key


def validate_pattern(pattern: str) -> str:
    """Return `pattern` if it is a valid subscription pattern, else raise ValueError."""
    _check(pattern, "pattern", wildcards=True)
    return pattern


@lru_cache(maxsize=1024)
def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split("."))


@lru_cache(maxsize=4096)  # pure, and every delivery asks it once per subscription
def topic_matches(pattern: str, routing_key: str) -> bool:
    """True if `routing_key` matches the topic `pattern` (`*` one word, `#` zero or more).

    Dynamic programming over words, O(len(pattern) * len(key)): a recursive matcher is
    exponential on patterns like "#.#.#.x", and patterns can come from config files.
    """
    pat = _words(pattern)
    key = _words(routing_key)
    # reach[j]: the first i pattern words can match the first j key words.
    reach = [True] + [False] * len(key)
    for word in pat:
        if word == "#":
            # '#' extends any reachable prefix by any number of words.
            seen = False
            for j in range(len(key) + 1):
                seen = seen or reach[j]
                reach[j] = seen
        else:
            for j in range(len(key), 0, -1):
                reach[j] = reach[j - 1] and (word == "*" or word == key[j - 1])
            reach[0] = False
    return reach[len(key)]
