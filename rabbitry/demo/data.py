"""Generated input for the demo's pipeline: JSON lines of messages, some delivered twice, some
revoked.

Duplicates are what the exactly-once claim must catch, so they are placed where it is hard:
half of them a few lines after the original (same Spark partition, often the same task), the
other half anywhere in the file, before or after the original (another partition, another
executor, processed concurrently). Everything derives from the seed, so a run can be replayed.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from pathlib import Path

ID_PREFIX = "m"
_NEAR = 50  # a "near" duplicate lands within this many lines after its original


@dataclass(frozen=True)
class GeneratedInput:
    """What `generate_messages` wrote: the file and the facts the exactly-once check needs."""

    path: Path
    messages: int  # lines in the file
    distinct_ids: int  # ids m000000 .. m{distinct_ids-1}
    revoked: list[str] = field(repr=False)  # a sorted subset of the distinct ids
    id_width: int = 6

    @property
    def duplicates(self) -> int:
        """Lines that repeat an id already counted once."""
        return self.messages - self.distinct_ids

    def expected_ids(self) -> set[str]:
        """Every distinct id in the file (revoked ones included)."""
        return {format_id(i, self.id_width) for i in range(self.distinct_ids)}


def format_id(number: int, width: int = 6) -> str:
    """The id of message `number`: "m000123"."""
    return f"{ID_PREFIX}{number:0{width}d}"


def generate_messages(
    path: str | os.PathLike[str],
    n: int,
    *,
    duplicate_ratio: float = 0.1,
    revoked_ratio: float = 0.01,
    seed: int = 7,
) -> GeneratedInput:
    """Write `n` JSON lines `{"id": ..., "payload": ...}` to `path`.

    round(n * duplicate_ratio) of them repeat an earlier-chosen id (with the same payload, as a
    redelivery would); round(distinct * revoked_ratio) distinct ids are chosen as revoked. The
    ids are plain ASCII, so the lines are formatted directly rather than through json.dumps:
    200,000 lines take a fraction of a second.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be an int >= 0; got {n!r}")
    if not 0 <= duplicate_ratio < 1:
        raise ValueError(f"duplicate_ratio must be in [0, 1); got {duplicate_ratio!r}")
    if not 0 <= revoked_ratio <= 1:
        raise ValueError(f"revoked_ratio must be in [0, 1]; got {revoked_ratio!r}")
    rng = random.Random(seed)
    duplicates = round(n * duplicate_ratio)
    distinct = n - duplicates
    if n and distinct == 0:
        distinct, duplicates = 1, n - 1
    width = max(6, len(str(max(distinct - 1, 0))))

    # Each line gets a sort key: originals at their index, near duplicates just after their
    # original, far ones anywhere. One sort then lays the file out.
    keys: list[tuple[float, int]] = [(float(i), i) for i in range(distinct)]
    for k in range(duplicates):
        original = rng.randrange(distinct)
        near = k % 2 == 0
        key = original + rng.uniform(0.5, _NEAR) if near else rng.uniform(-0.5, distinct)
        keys.append((key, original))
    keys.sort()

    # Payloads vary in size a little, so partitions are not uniform either.
    words = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel")
    payloads = [
        f"{words[i % len(words)]}-{rng.getrandbits(32):08x}" * (1 + i % 3) for i in range(distinct)
    ]
    ids = [format_id(i, width) for i in range(distinct)]
    lines = [f'{{"id": "{ids[i]}", "payload": "{payloads[i]}"}}\n' for _key, i in keys]

    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "w", encoding="ascii") as out:
        out.writelines(lines)

    revoked_count = round(distinct * revoked_ratio)
    revoked = sorted(format_id(i, width) for i in rng.sample(range(distinct), revoked_count))
    return GeneratedInput(target, n, distinct, revoked, width)
