"""SingletonCore: leases granted by a majority of the core, for cluster singletons and global
names, as a pure core (no threads, sockets, clocks or files; see docs/cores.md).

Every core node runs one. Each is two things at once:

- an **acceptor**, which grants a lease on a key (a singleton child's id, or a global name) to
  one holder at a time, for the lease's length measured on its own clock from when the request
  arrived, and keeps the highest fencing token it ever granted (persisted before it answers);
- a **candidate** for the keys whose guard runs on this node (the singleton child's place in
  the application tree, or a registered global name), which asks every core member for the
  lease and holds it once a strict majority of the core said yes.

Decisions worth knowing:

- **The holder counts from its send time.** A renewal counts only once a majority has answered,
  and the lease then runs from the moment the holder *asked* (`sent_at`), shortened by the
  clock-rate bound: `lease * (1 - DRIFT) / (1 + DRIFT)`. An acceptor counts its grant from the
  moment the request *arrived*, later in real time. So every acceptor of a majority still holds
  the old grant when the old holder's own lease runs out, and a new holder needs a majority, one
  of which must have seen the old grant expire. Two lease intervals never overlap as long as no
  monotonic clock runs more than DRIFT (1 %) fast or slow against real time. Offsets between
  clocks do not matter: nothing compares two nodes' readings.
- **A holder that is cut off stops renewing at once**, because a renewal without a majority's
  answer is no renewal; it does not notice the cut first. Self-renewal is how OTP's dist_ac and
  Akka's singleton end up with two instances.
- **Fencing tokens from the same majority round**, not from mnesia_like: the store is optional on
  a node, and the round that grants the lease already reaches a majority, so the token costs no
  extra round trip. An acceptor grants a new holder only a token above every token it granted,
  and writes its highest token to disc before it answers (PersistToken comes before the Send in
  the effects). Any two majorities share an acceptor, so tokens only grow, cluster-wide, also
  across full-cluster restarts.
- **A restarted acceptor forgets its grants**, so it grants nothing for one lease length after
  a start that found a persisted token (`quiet`). A fresh node has granted nothing and need not
  wait.
- **A paused node holds nothing.** Its guard lives in the application tree, so a pause stops
  the guard, which stops the instance and then releases the lease; the release lets the next
  node start at once instead of waiting out the lease (a handover).
- **Who asks.** Every node whose guard runs may ask, but a node waits `rank * HANDOVER_STEP`
  first, its rank being its place among the running core members in the key's placement order
  (the tree's `placement:` list first, then the other members by name). A node of a higher rank
  than the holder's, named in `placement:`, takes the singleton over by asking the holder to
  hand it over (OTP's takeover).
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field
from typing import Any

from monitors.effects import CancelTimer, Effect, Log, Send, SetTimer
from rabbitry.singleton.effects import (
    Answer,
    Conflict,
    PersistTokens,
    RenewInstance,
    StartInstance,
    StopInstance,
)

NAME = "rabbitry_singleton"
VERSION = 1
DRIFT = 0.01  # the clock-rate bound: a monotonic clock runs at most 1 % fast or slow
HANDOVER_STEP = 0.05  # seconds a node waits per rank before it asks for a free key
MIN_LEASE, MAX_LEASE = 0.2, 3600.0
MAX_KEY = 255

SingletonEffect = (
    Effect | StartInstance | RenewInstance | StopInstance | PersistTokens | Answer | Conflict
)


def holder_lease(lease: float) -> float:
    """How long a holder may count its lease from its send time (see the module docstring)."""
    return lease * (1 - DRIFT) / (1 + DRIFT)


@dataclass
class Grant:
    """An acceptor's grant of `key` to `holder`, live until its own clock reads `until`."""

    holder: str
    token: int
    until: float
    info: dict[str, Any] = field(default_factory=dict)
    confirmed: bool = False  # the holder said it won (or renews): an instance runs there


@dataclass
class Claim:
    """This node's wish to hold `key`, and how far it got."""

    key: str
    lease: float
    placement: tuple[str, ...] = ()
    info: dict[str, Any] = field(default_factory=dict)
    phase: str = "idle"  # idle | asking | held
    token: int = 0
    round: int = 0
    sent_at: float = 0.0
    renew: bool = False
    yes: set[str] = field(default_factory=set)
    no: set[str] = field(default_factory=set)
    expires: float = 0.0  # while held: this node's own reading when the lease ends
    wait_left: float = 0.0  # the longest confirmed grant left that refused us this round
    holder_seen: str | None = None  # who refused us holds it
    # who refused us holds it and has said it won (a confirmed grant): only then is the key
    # taken. A live grant alone may be another candidate's in a duel that it loses too
    taken_by: str | None = None


@dataclass
class Query:
    """A whereis question to the core, answered once a majority replied or time ran out."""

    key: str
    answers: dict[str, dict[str, Any]] = field(default_factory=dict)


class SingletonCore:
    """One node's acceptor and candidate (see the module docstring)."""

    NAME = NAME

    def __init__(
        self,
        node: str,
        *,
        lease: float,
        max_token: int = 0,
        restarted: bool = False,
        role: str = "core",
        members: list[str] | tuple[str, ...] = (),
    ) -> None:
        self.node = node
        self.role = role
        self.default_lease = _clamp(lease)
        self.max_token = int(max_token)  # the highest token this acceptor granted or saw
        self.restarted = restarted
        self.quiet_until = 0.0
        self.members: list[str] = sorted(set(members) | ({node} if role == "core" else set()))
        self.running: list[str] = list(self.members)
        self.grants: dict[str, Grant] = {}
        self.claims: dict[str, Claim] = {}
        self.queries: dict[int, Query] = {}
        self._next_query = 0
        self.moves = 0  # instances started here
        # jitter for retries after a duel of two candidates, from a generator of our own (a
        # core reads no random source): seeded by the node's name, so replays are exact
        self._jitter_state = (zlib.crc32(node.encode()) or 1) & 0xFFFFFFFF
        self._warned: set[str] = set()

    # ------------------------------------------------------------------ lifecycle

    def start(self, now: float) -> list[SingletonEffect]:
        if self.restarted and self.role == "core":
            # grants given before the restart are forgotten: give none until they ran out
            self.quiet_until = now + self.default_lease
            return [
                Log.info(
                    f"singleton: granting no lease for {self.default_lease:g}s after a restart"
                )
            ]
        return []

    def set_members(
        self, members: list[str], running: list[str], now: float
    ) -> list[SingletonEffect]:
        """The core members (all) and those whose application runs, from the node monitor."""
        members = sorted(set(members))
        if self.role == "core" and self.node not in members:
            members = sorted({*members, self.node})
        self.members = members
        self.running = sorted(set(running) & set(members))
        return []

    def majority(self) -> int:
        return len(self.members) // 2 + 1

    # ------------------------------------------------------------------ the candidate

    def want(
        self,
        key: str,
        now: float,
        *,
        lease: float | None = None,
        placement: tuple[str, ...] = (),
        info: dict[str, Any] | None = None,
    ) -> list[SingletonEffect]:
        """A guard for `key` runs here: hold the key whenever this node may."""
        claim = self.claims.get(key)
        if claim is None:
            claim = self.claims[key] = Claim(key, _clamp(lease or self.default_lease))
        claim.placement = tuple(placement)
        claim.info = dict(info or {})
        if claim.phase == "idle":
            return self._after(key, self._rank_delay(claim))
        return []

    def unwant(self, key: str, now: float, reason: str = "stopped") -> list[SingletonEffect]:
        """The guard stops (a pause, a stop, a leave): stop the instance, then release the
        lease so that the next node starts at once (a handover)."""
        claim = self.claims.pop(key, None)
        if claim is None:
            return []
        out: list[SingletonEffect] = []
        if claim.phase == "held":
            out.append(StopInstance(key, claim.token, reason))
        if claim.phase in ("held", "asking"):
            out += self._release(claim)
        return out

    def _release(self, claim: Claim) -> list[SingletonEffect]:
        out: list[SingletonEffect] = []
        msg = {"v": VERSION, "t": "release", "key": claim.key, "token": claim.token}
        for member in self.members:
            if member == self.node:
                self._on_release(self.node, msg)
            else:
                out.append(Send(member, NAME, msg))
        free = {"v": VERSION, "t": "free", "key": claim.key}
        out += [Send(m, NAME, free) for m in self.members if m != self.node]
        return out

    def _jitter(self, scale: float) -> float:
        """A pseudo-random delay in [0, scale) (xorshift32)."""
        x = self._jitter_state
        x ^= (x << 13) & 0xFFFFFFFF
        x ^= x >> 17
        x ^= (x << 5) & 0xFFFFFFFF
        self._jitter_state = x
        return scale * (x / 0x100000000)

    def _rank_delay(self, claim: Claim) -> float:
        order = [n for n in claim.placement if n in self.running]
        order += [n for n in self.running if n not in order]
        rank = order.index(self.node) if self.node in order else len(order)
        return rank * HANDOVER_STEP

    def _after(self, key: str, delay: float) -> list[SingletonEffect]:
        return [SetTimer(f"try:{key}", max(0.0, delay), key)]

    def _ask(self, claim: Claim, now: float, renew: bool) -> list[SingletonEffect]:
        if self.role != "core":
            return []
        claim.round += 1
        claim.sent_at = now
        claim.renew = renew
        claim.yes, claim.no = set(), set()
        claim.wait_left, claim.holder_seen, claim.taken_by = 0.0, None, None
        if not renew:
            claim.token = self.max_token + 1
            claim.phase = "asking"
        msg = {
            "v": VERSION,
            "t": "acquire",
            "key": claim.key,
            "token": claim.token,
            "round": claim.round,
            "lease": claim.lease,
            "info": claim.info,
            "renew": renew,
        }
        out: list[SingletonEffect] = [SetTimer(f"round:{claim.key}", claim.lease / 3, claim.round)]
        for member in self.members:
            if member == self.node:
                out += self._answer_acquire(self.node, msg, now, local=True)
            else:
                out.append(Send(member, NAME, msg))
        return out

    def _on_ack(self, sender: str, msg: dict[str, Any], now: float) -> list[SingletonEffect]:
        claim = self.claims.get(msg["key"])
        if claim is None or msg["round"] != claim.round or claim.phase == "idle":
            return self._late_grant(sender, msg, claim)
        if sender not in self.members or sender in claim.yes or sender in claim.no:
            return []
        self.max_token = max(self.max_token, int(msg["max_token"]))
        if msg["ok"]:
            claim.yes.add(sender)
        else:
            claim.no.add(sender)
            left = msg.get("left")
            if msg.get("confirmed") is True and isinstance(left, int | float) and _is_number(left):
                claim.wait_left = max(claim.wait_left, min(float(left), claim.lease))
            holder = msg.get("holder")
            if isinstance(holder, str) and holder and holder != self.node:
                claim.holder_seen = holder
                if msg.get("confirmed") is True:
                    claim.taken_by = holder
        if len(claim.yes) >= self.majority():
            return self._won(claim, now)
        if len(claim.no) > len(self.members) - self.majority():
            return self._lost_round(claim, now)
        return []

    def _late_grant(
        self, sender: str, msg: dict[str, Any], claim: Claim | None
    ) -> list[SingletonEffect]:
        """A grant that came after its round ended (lost, or given up): give it back. Else it
        outlives us at that acceptor, which then refuses the real holder's renewals as long
        as that grant is on record with a newer token than the holder's: the holder keeps
        its lease with the others, but that node never names it, and the holder has no
        majority left should one of the others go. Not a grant of the token we hold."""
        token = msg.get("token")
        if msg.get("ok") is not True or not _is_int(token) or sender not in self.members:
            return []
        if claim is not None and claim.phase == "held" and claim.token == token:
            return []
        # never our own acceptor's: its answer comes inside the round's _ask, never late
        return [
            Send(sender, NAME, {"v": VERSION, "t": "release", "key": msg["key"], "token": token})
        ]

    def _won(self, claim: Claim, now: float) -> list[SingletonEffect]:
        if claim.phase == "held" and now >= claim.expires:
            # the old lease ran out while we asked (a slow round, a freeze): the instance has
            # stopped acting; it stops for good, and a new one asks with a new token
            return self._expired(claim)
        claim.expires = claim.sent_at + holder_lease(claim.lease)
        left = claim.expires - now
        out: list[SingletonEffect] = [
            CancelTimer(f"round:{claim.key}"),  # this round is over
            SetTimer(f"expire:{claim.key}", max(0.0, left), claim.token),
            SetTimer(f"try:{claim.key}", claim.lease / 3, claim.key),
        ]
        if claim.phase == "held":
            out.append(RenewInstance(claim.key, claim.token, left))
        else:
            claim.phase = "held"
            self.moves += 1
            out.append(StartInstance(claim.key, claim.token, left, dict(claim.info)))
            held = {"v": VERSION, "t": "held", "key": claim.key, "token": claim.token}
            out += [Send(m, NAME, held) for m in self.members if m != self.node]
            self._on_held(self.node, held)
            out.append(Log.info(f"singleton {claim.key}: holding it here, token {claim.token}"))
        claim.round += 1  # late answers of this round change nothing
        return out

    def _lost_round(self, claim: Claim, now: float) -> list[SingletonEffect]:
        held = claim.phase == "held"
        taken = claim.holder_seen is not None
        out: list[SingletonEffect] = [CancelTimer(f"round:{claim.key}")]
        if held and taken:
            # someone else holds a live grant: ours ran out at an acceptor; stop now
            out.append(StopInstance(claim.key, claim.token, f"taken by {claim.holder_seen}"))
            out.append(Conflict(claim.key, claim.holder_seen or ""))
            claim.phase = "idle"
        elif not held:
            # give back what we were granted, so that a duel does not stall for a lease
            claim.phase = "idle"
            out += [
                Send(
                    m, NAME, {"v": VERSION, "t": "release", "key": claim.key, "token": claim.token}
                )
                for m in sorted(claim.yes)
                if m != self.node
            ]
            if self.node in claim.yes:
                self._on_release(self.node, {"key": claim.key, "token": claim.token})
        claim.round += 1
        if claim.wait_left:  # an instance runs elsewhere: ask again once its grant ends
            retry = claim.wait_left + HANDOVER_STEP
        elif claim.no:  # another candidate, or an acceptor that restarted: a duel, jittered
            retry = HANDOVER_STEP + self._jitter(claim.lease / 4)
        else:  # no answer from a majority: a cut; try again at the renewal pace
            retry = claim.lease / 3
        if held and not taken:
            retry = min(retry, claim.lease / 6)  # renew again soon, before the lease ends
        out += self._after(claim.key, retry + self._rank_delay(claim))
        return out

    def _on_round_timeout(self, key: str, round_: Any, now: float) -> list[SingletonEffect]:
        claim = self.claims.get(key)
        if claim is None or round_ != claim.round or claim.phase == "idle":
            return []
        return self._lost_round(claim, now)

    def _on_expire(self, key: str, token: Any, now: float) -> list[SingletonEffect]:
        claim = self.claims.get(key)
        if claim is None or claim.phase != "held" or token != claim.token:
            return []
        if now < claim.expires:  # renewed meanwhile; the new timer will tell
            return []
        return self._expired(claim)

    def _expired(self, claim: Claim) -> list[SingletonEffect]:
        claim.phase = "idle"
        claim.round += 1
        key = claim.key
        return [
            CancelTimer(f"round:{key}"),
            CancelTimer(f"expire:{key}"),
            StopInstance(key, claim.token, "lease ran out (no majority renewed it)"),
            Log.warning(f"singleton {key}: the lease ran out without a majority's renewal"),
            *self._after(key, HANDOVER_STEP + self._rank_delay(claim)),
        ]

    def _on_try(self, key: str, now: float) -> list[SingletonEffect]:
        claim = self.claims.get(key)
        if claim is None:
            return []
        if claim.phase == "held" and now >= claim.expires:
            return self._expired(claim)
        if claim.phase == "held":
            handover = self._takeover_by(claim)
            if handover is not None:
                out: list[SingletonEffect] = [
                    StopInstance(key, claim.token, f"handed over to {handover} (placement)")
                ]
                out += self._release(claim)
                claim.phase = "idle"
                claim.round += 1
                return out + self._after(key, claim.lease)
            return self._ask(claim, now, renew=True)
        if claim.phase == "asking":
            return []
        # No wait for the node monitor to list this node as running: the guard (or the
        # registering process) exists, so the application is up or starting; a process that
        # registers a global name from its start would otherwise wait for itself.
        return self._ask(claim, now, renew=False)

    def _takeover_by(self, claim: Claim) -> str | None:
        """A node ahead of this one in the key's placement list that runs now, if any."""
        for node in claim.placement:
            if node == self.node:
                return None
            if node in self.running:
                return node
        return None

    # ------------------------------------------------------------------ the acceptor

    def _answer_acquire(
        self, sender: str, msg: dict[str, Any], now: float, local: bool = False
    ) -> list[SingletonEffect]:
        key, token, lease = msg["key"], int(msg["token"]), _clamp(msg["lease"])
        grant = self.grants.get(key)
        live = grant is not None and now < grant.until
        ok = False
        out: list[SingletonEffect] = []
        if (
            self.role != "core"
            or now < self.quiet_until
            or (live and grant is not None and grant.holder != sender)
        ):
            pass
        elif live and grant is not None:  # the holder renews (or moves to a newer token)
            # A new instance needs a new token: a node that restarted asks afresh (no renew)
            # with the token it held before, when its last grant did not reach its own
            # disc; granted, it would start a second instance with the same token. Refused,
            # it learns the newest token from the answers and asks above it.
            if token > grant.token or (token == grant.token and msg.get("renew")):
                ok = True
        elif msg.get("renew"):
            # A holder renews only while its lease is valid, so no other node can hold a
            # majority now: the renewal is safe to grant even where we have no record of it
            # (our grant ran out, or we restarted and stayed quiet for a lease), as long as
            # no newer holder is on record here. It brings no new token.
            ok = grant is None or grant.holder == sender or grant.token < token
        elif token > self.max_token:  # a new instance: a token above every one seen here
            ok = True
        if ok:
            confirmed = bool(msg.get("renew")) or (
                grant is not None
                and grant.confirmed
                and grant.holder == sender
                and grant.token == token
            )
            self.grants[key] = Grant(
                sender, token, now + lease, dict(msg.get("info") or {}), confirmed
            )
            if token > self.max_token:
                self.max_token = token
                out.append(PersistTokens(self.max_token, max(lease, self.default_lease)))
        current = self.grants.get(key)
        left = current.until - now if current is not None and now < current.until else 0.0
        answer = {
            "v": VERSION,
            "t": "ack",
            "key": key,
            "round": msg["round"],
            "ok": ok,
            "max_token": self.max_token,
            "token": token,  # what was asked for: a late grant is given back by it
            "holder": current.holder if current is not None and left > 0 else None,
            "left": left,
            "confirmed": bool(current is not None and left > 0 and current.confirmed),
        }
        if local:
            return out + self._on_ack(self.node, answer, now)
        return [*out, Send(sender, NAME, answer)]

    def _on_release(self, sender: str, msg: dict[str, Any]) -> list[SingletonEffect]:
        grant = self.grants.get(msg["key"])
        if grant is not None and grant.holder == sender and grant.token == msg["token"]:
            del self.grants[msg["key"]]
        return []

    def _on_held(self, sender: str, msg: dict[str, Any], now: float = 0.0) -> list[SingletonEffect]:
        grant = self.grants.get(msg["key"])
        if grant is not None and grant.holder == sender and grant.token == msg["token"]:
            grant.confirmed = True
        return []

    def _on_free(self, sender: str, msg: dict[str, Any], now: float) -> list[SingletonEffect]:
        claim = self.claims.get(msg["key"])
        if claim is None or claim.phase != "idle":
            return []
        return self._after(claim.key, self._rank_delay(claim))

    # ------------------------------------------------------------------ whereis

    def whereis(self, key: str, now: float) -> tuple[int, list[SingletonEffect]]:
        """Ask the core who holds `key`; the answer comes as Answer(query id, holder or None)."""
        self._next_query += 1
        qid = self._next_query
        query = self.queries[qid] = Query(key)
        msg = {"v": VERSION, "t": "whereis", "key": key, "q": qid}
        out: list[SingletonEffect] = [SetTimer(f"query:{qid}", self.default_lease / 2, qid)]
        for member in self.members:
            if member == self.node:
                query.answers[self.node] = self._where(key, now)
            else:
                out.append(Send(member, NAME, msg))
        return qid, out + self._maybe_answer(qid, final=False)

    def _where(self, key: str, now: float) -> dict[str, Any]:
        grant = self.grants.get(key)
        if grant is None or now >= grant.until or self.role != "core" or not grant.confirmed:
            return {"holder": None, "token": 0}
        return {"holder": grant.holder, "token": grant.token, "info": grant.info}

    def _on_whereis(self, sender: str, msg: dict[str, Any], now: float) -> list[SingletonEffect]:
        if self.role != "core":
            return []
        answer = {"v": VERSION, "t": "where", "q": msg["q"], **self._where(msg["key"], now)}
        return [Send(sender, NAME, answer)]

    def _on_where(self, sender: str, msg: dict[str, Any], now: float) -> list[SingletonEffect]:
        query = self.queries.get(msg["q"])
        if query is None or sender not in self.members:
            return []
        holder, token, info = msg.get("holder"), msg.get("token"), msg.get("info")
        if not isinstance(holder, str) or not _is_int(token) or not isinstance(info, dict):
            holder, token, info = None, 0, {}
        query.answers[sender] = {"holder": holder, "token": token, "info": info}
        return self._maybe_answer(msg["q"], final=False)

    def _maybe_answer(self, qid: int, final: bool) -> list[SingletonEffect]:
        query = self.queries.get(qid)
        if query is None:
            return []
        if not final and len(query.answers) < len(self.members):
            return []
        del self.queries[qid]
        live = [a for a in query.answers.values() if a.get("holder")]
        best = max(live, key=lambda a: int(a.get("token") or 0), default=None)
        return [Answer(qid, best)]

    # ------------------------------------------------------------------ events

    def receive(self, sender: str, msg: Any, now: float) -> list[SingletonEffect]:
        """A message from `sender`; a malformed one is logged and dropped."""
        problem = _problem(msg)
        if problem is not None:
            return [Log.warning(f"singleton: dropped a message from {sender}: {problem}")]
        kind = msg["t"]
        if kind == "acquire":
            if sender not in self.members:
                if sender in self._warned:
                    return []
                self._warned.add(sender)  # once per sender: a neighbour must not flood the log
                return [Log.warning(f"singleton: {sender} is not a core member; no lease for it")]
            return self._answer_acquire(sender, msg, now)
        handler = _HANDLERS.get(kind)
        return handler(self, sender, msg, now) if handler is not None else []

    def timer(self, key: str, now: float, data: Any = None) -> list[SingletonEffect]:
        kind, _, rest = key.partition(":")
        if kind == "try":
            return self._on_try(rest, now)
        if kind == "round":
            return self._on_round_timeout(rest, data, now)
        if kind == "expire":
            return self._on_expire(rest, data, now)
        if kind == "query":
            return self._maybe_answer(int(data), final=True)
        return []

    # ------------------------------------------------------------------ reading

    def status(self, now: float) -> dict[str, Any]:
        """What this node knows: the keys it holds, and the grants its acceptor keeps."""
        held = {
            key: {"token": c.token, "expires_in": round(c.expires - now, 3)}
            for key, c in self.claims.items()
            if c.phase == "held"
        }
        grants = {
            key: {"holder": g.holder, "token": g.token, "left": round(g.until - now, 3)}
            for key, g in self.grants.items()
            if now < g.until and g.confirmed
        }
        return {
            "node": self.node,
            "members": list(self.members),
            "held": held,
            "wanted": sorted(self.claims),
            "grants": grants,
            "max_token": self.max_token,
            "moves": self.moves,
        }


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _clamp(lease: Any) -> float:
    try:
        value = float(lease)
    except (TypeError, ValueError):
        return MIN_LEASE
    if math.isnan(value):
        return MIN_LEASE
    return min(MAX_LEASE, max(MIN_LEASE, value))


_FIELDS: dict[str, dict[str, type | tuple[type, ...]]] = {
    "acquire": {"key": str, "token": int, "round": int, "lease": (int, float)},
    "ack": {"key": str, "round": int, "ok": bool, "max_token": int},
    "release": {"key": str, "token": int},
    "free": {"key": str},
    "held": {"key": str, "token": int},
    "whereis": {"key": str, "q": int},
    "where": {"q": int},
}


def _problem(msg: Any) -> str | None:
    """What is wrong with a message, or None; never raises."""
    if not isinstance(msg, dict):
        return f"expected a JSON object, got {type(msg).__name__}"
    kind = msg.get("t")
    fields = _FIELDS.get(kind) if isinstance(kind, str) else None
    if fields is None:
        return f"unknown message type {str(kind)[:40]!r}"
    if msg.get("v") != VERSION:
        return f"version {str(msg.get('v'))[:20]!r}, expected {VERSION}"
    for name, types in fields.items():
        value = msg.get(name)
        if not isinstance(value, types) or (types is int and isinstance(value, bool)):
            return f"{kind}: field {name!r} is missing or of the wrong type"
        if name == "key" and isinstance(value, str) and len(value) > MAX_KEY:
            return f"{kind}: key longer than {MAX_KEY} characters"
    info = msg.get("info")
    if info is not None and not isinstance(info, dict):
        return f"{kind}: field 'info' must be an object"
    return None


_HANDLERS: dict[str, Any] = {
    "ack": SingletonCore._on_ack,
    "release": lambda core, sender, msg, now: core._on_release(sender, msg),
    "free": SingletonCore._on_free,
    "held": SingletonCore._on_held,
    "whereis": SingletonCore._on_whereis,
    "where": SingletonCore._on_where,
}
