"""rabbit_autoheal as a pure state machine, driven by the node monitor core.

RabbitMQ 4.2's flow, kept message for message:

    any node  -> leader   request_start                 (when all members are up and it has a partition)
    leader    -> all      autoheal_status_request        (RabbitMQ's multi_call of `status`)
    all       -> leader   autoheal_status                {partitions, nodes, weight}
    leader    -> winner   become_winner                  {losers}
    winner    -> losers   winner_is                      {winner}
    losers: stop the application (PauseApp) and report it (app_down), then wait for
    winner    -> losers   autoheal_safe_to_start         (after every loser has stopped)
    winner    -> leader   autoheal_finished              {winner}
    leader    -> winner   report_autoheal_status         (a leader that was also a loser asks on its way back)

States: not_healing | collecting (the leader awaiting statuses; RabbitMQ blocks in multi_call
instead) | leader_waiting(winner, losers) | winner_waiting(outstanding, notify) |
restarting(winner, after) (a loser holding its application stopped).

Kept from RabbitMQ: the leader is the first member by name; it refuses while a member is not
connected to it (nodes_down) or cannot see every member (remote_down); a loser waits for
safe_to_start, the winner going down, or the state transition timeout (60 s); any node_down
while winner_waiting aborts and releases the losers; a leader drops to not_healing if its
winner goes down. Added: the winner's wait has the same timeout (RabbitMQ can wait for ever),
and a collecting leader gives up after `status_timeout` (NODE_REPLY_TIMEOUT, 5 s).

A node restart is survived without RabbitMQ's app-env trick: the monitor keeps running while a
loser's application restarts, so its state is simply kept; and a peer that restarted (a new
creation) is handled by the core as that peer going down, which aborts or releases whatever
heal it was part of.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from monitors.effects import CancelTimer, Effect, Log, Send, SetTimer
from monitors.node_monitor.messages import VERSION
from monitors.node_monitor.partitions import all_partitions, autoheal_winner

# the messages Autoheal.handle takes (the core routes each of them here)
MESSAGE_TYPES = (
    "request_start",
    "autoheal_status_request",
    "autoheal_status",
    "become_winner",
    "winner_is",
    "autoheal_safe_to_start",
    "autoheal_finished",
    "report_autoheal_status",
)
TIMER_COLLECT = "autoheal_collect"
TIMER_RESTART = "autoheal_restart"
TIMER_WINNER = "autoheal_winner"

MESSAGES = frozenset(
    {
        "request_start",
        "autoheal_status_request",
        "autoheal_status",
        "become_winner",
        "winner_is",
        "autoheal_safe_to_start",
        "autoheal_finished",
        "report_autoheal_status",
    }
)


@dataclass(frozen=True)
class Ctx:
    """What autoheal needs to know about the node, taken fresh at every call."""

    node: str
    creation: int
    name: str  # the registered name messages go to
    members: tuple[str, ...]  # sorted, this node included
    connected: frozenset[str]  # members other than this node with a dist connection
    partitions: frozenset[str]
    weight: int

    @property
    def leader(self) -> str:
        return self.members[0] if self.members else self.node


@dataclass(frozen=True)
class NotHealing:
    name = "not_healing"


@dataclass(frozen=True)
class Collecting:
    name = "collecting"
    waiting: frozenset[str]
    replies: dict[str, tuple[frozenset[str], frozenset[str], int]] = field(
        default_factory=dict, hash=False, compare=False
    )


@dataclass(frozen=True)
class LeaderWaiting:
    name = "leader_waiting"
    winner: str
    losers: tuple[str, ...]


@dataclass(frozen=True)
class WinnerWaiting:
    name = "winner_waiting"
    outstanding: frozenset[str]
    notify: tuple[str, ...]


@dataclass(frozen=True)
class Restarting:
    name = "restarting"
    winner: str
    after: NotHealing | LeaderWaiting


State = NotHealing | Collecting | LeaderWaiting | WinnerWaiting | Restarting

_TIMER_OF = {Collecting: TIMER_COLLECT, Restarting: TIMER_RESTART, WinnerWaiting: TIMER_WINNER}


class Autoheal:
    """One node's part in autoheal. Every method returns effects; none does I/O."""

    def __init__(self, *, timeout: float = 60.0, status_timeout: float = 5.0) -> None:
        self.timeout = timeout
        self.status_timeout = status_timeout
        self.state: State = NotHealing()

    # -------------------------------------------------------------------- queries

    @property
    def holds_app(self) -> bool:
        """A loser keeps its application stopped until it is told it is safe to start."""
        return isinstance(self.state, Restarting)

    @property
    def winner(self) -> str | None:
        return self.state.winner if isinstance(self.state, Restarting | LeaderWaiting) else None

    @property
    def healing(self) -> bool:
        return not isinstance(self.state, NotHealing)

    # -------------------------------------------------------------------- plumbing

    def _goto(self, new: State) -> list[Effect]:
        old_timer = _TIMER_OF.get(type(self.state))
        new_timer = _TIMER_OF.get(type(new))
        self.state = new
        out: list[Effect] = []
        if old_timer and old_timer != new_timer:
            out.append(CancelTimer(old_timer))
        return out

    def _arm(self, key: str, after: float) -> Effect:
        return SetTimer(key, after)

    def _send(self, ctx: Ctx, to: str, t: str, **fields: Any) -> list[Effect]:
        msg = {"v": VERSION, "t": t, "c": ctx.creation, **fields}
        if to == ctx.node:
            return self.handle(ctx.node, msg, ctx)
        return [Send(to, ctx.name, msg)]

    @staticmethod
    def _log(text: str, **fields: Any) -> Log:
        return Log.info("autoheal: " + text, **fields)

    # -------------------------------------------------------------------- entry points

    def maybe_start(self, ctx: Ctx) -> list[Effect]:
        """rabbit_autoheal:maybe_start: ask the leader to heal (the core checks all are up)."""
        if self.healing:
            return []
        return [
            self._log("request sent", leader=ctx.leader),
            *self._send(ctx, ctx.leader, "request_start", node=ctx.node),
        ]

    def handle(self, sender: str, msg: dict[str, Any], ctx: Ctx) -> list[Effect]:
        """An autoheal message (already validated by the core)."""
        t = msg["t"]
        st = self.state
        if t == "autoheal_status_request":
            # RabbitMQ answers `status` from the node monitor whatever the autoheal state.
            return self._send(
                ctx,
                sender,
                "autoheal_status",
                partitions=sorted(ctx.partitions),
                nodes=sorted(ctx.connected | {ctx.node}),
                weight=ctx.weight,
            )
        if isinstance(st, Restarting) and t != "autoheal_safe_to_start":
            return [self._log("ignoring a message while restarting", msg=t, winner=st.winner)]
        handler = getattr(self, "_on_" + t)
        return handler(sender, msg, ctx)

    def node_down(self, node: str, ctx: Ctx) -> list[Effect]:
        """A member went down (or restarted: the core reports that as down, then up)."""
        st = self.state
        if isinstance(st, Collecting):
            return [
                self._log("request denied: a node went down while collecting", node=node),
                *self._goto(NotHealing()),
            ]
        if isinstance(st, WinnerWaiting):
            return self._abort([node], st.notify, ctx)
        if isinstance(st, LeaderWaiting):
            if st.winner == node:
                return [
                    self._log("aborting: the winner went down", winner=node),
                    *self._goto(NotHealing()),
                ]
            return [self._log("a node went down; waiting for the winner's decision", node=node)]
        if isinstance(st, Restarting) and st.winner == node:
            return [
                self._log("the winner went down; starting again", winner=node),
                *self._goto(NotHealing()),
            ]
        return []

    def rabbit_down(self, node: str, ctx: Ctx) -> list[Effect]:
        """`node` reported that its application stopped (RabbitMQ: DOWN of {rabbit, Node})."""
        st = self.state
        if isinstance(st, WinnerWaiting) and node in st.outstanding:
            left = st.outstanding - {node}
            if not left:
                return [
                    self._log("final node has stopped, starting...", node=node),
                    *self._winner_finish(st.notify, ctx),
                ]
            self.state = WinnerWaiting(left, st.notify)
            return []
        if isinstance(st, LeaderWaiting) and st.winner == node:
            return self._abort([node], st.losers, ctx)
        return []

    def timer(self, key: str, ctx: Ctx) -> list[Effect]:
        st = self.state
        if key == TIMER_COLLECT and isinstance(st, Collecting):
            self.state = NotHealing()
            return [
                self._log("request denied: no status from some nodes", nodes=sorted(st.waiting))
            ]
        if key == TIMER_RESTART and isinstance(st, Restarting):
            self.state = NotHealing()
            return [
                Log.warning(
                    "autoheal: timed out waiting for a safe-to-start message from the winner; "
                    "will retry",
                    winner=st.winner,
                )
            ]
        if key == TIMER_WINNER and isinstance(st, WinnerWaiting):
            self.state = WinnerWaiting(frozenset(), st.notify)
            return [
                Log.warning(
                    "autoheal: timed out waiting for the losers to stop",
                    outstanding=sorted(st.outstanding),
                ),
                *self._winner_finish(st.notify, ctx),
            ]
        return []

    # -------------------------------------------------------------------- the leader

    def _on_request_start(self, sender: str, msg: dict[str, Any], ctx: Ctx) -> list[Effect]:
        if ctx.leader != ctx.node:
            return [self._log("request received but we are not the leader", node=sender)]
        if self.healing:
            return [self._log("request received when healing; ignoring", node=sender)]
        out: list[Effect] = [self._log("request received", node=sender)]
        down = [n for n in ctx.members if n != ctx.node and n not in ctx.connected]
        if down:
            return [*out, self._log("request denied: nodes down", nodes=down)]
        waiting = frozenset(n for n in ctx.members if n != ctx.node)
        own = (ctx.partitions, ctx.connected | {ctx.node}, ctx.weight)
        self.state = Collecting(waiting, {ctx.node: own})
        if not waiting:
            return [*out, *self._decide(ctx)]
        out.append(self._arm(TIMER_COLLECT, self.status_timeout))
        for n in sorted(waiting):
            out += self._send(ctx, n, "autoheal_status_request")
        return out

    def _on_autoheal_status(self, sender: str, msg: dict[str, Any], ctx: Ctx) -> list[Effect]:
        st = self.state
        if not isinstance(st, Collecting) or sender not in st.waiting:
            return []
        st.replies[sender] = (
            frozenset(msg["partitions"]),
            frozenset(msg["nodes"]),
            max(0, msg["weight"]),
        )
        self.state = Collecting(st.waiting - {sender}, st.replies)
        if self.state.waiting:
            return []
        return self._decide(ctx)

    def _decide(self, ctx: Ctx) -> list[Effect]:
        """check_other_nodes, then make_decision, once every status is in."""
        st = self.state
        assert isinstance(st, Collecting)
        members = set(ctx.members)
        # our own entry as it is now, not as it was when the request came in
        st.replies[ctx.node] = (ctx.partitions, ctx.connected | {ctx.node}, ctx.weight)
        remote_down = {
            n: sorted(members - seen)
            for n, (_, seen, _) in sorted(st.replies.items())
            if members - seen
        }
        out = self._goto(NotHealing())
        if remote_down:
            return [*out, self._log("request denied: remote_down", remote_down=remote_down)]
        parts = all_partitions(members, {n: r[0] for n, r in st.replies.items()})
        weights = {n: r[2] for n, r in st.replies.items()}
        if len(parts) < 2:
            return [*out, self._log("nothing to heal: one partition", partitions=parts)]
        winner, losers = autoheal_winner(parts, weights)
        out.append(
            Log.info(
                "autoheal decision",
                partitions=parts,
                weights=weights,
                winner=winner,
                losers=losers,
            )
        )
        if winner == ctx.node:
            return out + self._on_become_winner(ctx.node, {"losers": losers}, ctx)
        self.state = LeaderWaiting(winner, tuple(losers))
        return out + self._send(ctx, winner, "become_winner", losers=losers)

    def _on_autoheal_finished(self, sender: str, msg: dict[str, Any], ctx: Ctx) -> list[Effect]:
        st, winner = self.state, msg["winner"]
        if isinstance(st, LeaderWaiting) and st.winner == winner:
            return [
                self._log("finished according to winner", winner=winner),
                *self._goto(NotHealing()),
            ]
        if isinstance(st, NotHealing):
            if winner == ctx.node:
                return [self._log("finished according to winner", winner=winner)]
            return [
                self._log(
                    "finished according to winner; unexpected, we might have seen it down",
                    winner=winner,
                )
            ]
        return []

    # -------------------------------------------------------------------- the winner

    def _on_become_winner(self, sender: str, msg: dict[str, Any], ctx: Ctx) -> list[Effect]:
        losers = tuple(sorted(set(msg["losers"]) - {ctx.node}))
        st = self.state
        if isinstance(st, NotHealing):
            return [
                self._log("I am the winner, waiting for the losers to stop", losers=list(losers)),
                *self._stop_partition(losers, ctx),
            ]
        if isinstance(st, WinnerWaiting):
            if losers == st.notify:
                return [
                    self._log(
                        "I am the winner and got the same request again", losers=list(losers)
                    ),
                    *self._stop_partition(losers, ctx),
                ]
            return [
                self._log("another healing request: partitions have changed; aborting"),
                *self._winner_finish(st.notify, ctx),
            ]
        return [self._log("become_winner ignored", state=st.name)]

    def _stop_partition(self, losers: tuple[str, ...], ctx: Ctx) -> list[Effect]:
        down = [n for n in losers if n not in ctx.connected]
        if down:
            return self._abort(down, losers, ctx)
        if not losers:
            return self._winner_finish((), ctx)
        self.state = WinnerWaiting(frozenset(losers), losers)
        out: list[Effect] = [self._arm(TIMER_WINNER, self.timeout)]
        for n in losers:
            out += self._send(ctx, n, "winner_is", winner=ctx.node)
        return out

    def _abort(self, down: Collection[str], notify: Collection[str], ctx: Ctx) -> list[Effect]:
        # Release anyone waiting on us: it may not heal, but nobody stays stopped.
        return [
            self._log("aborting: nodes down", nodes=sorted(down)),
            *self._winner_finish(tuple(n for n in notify if n != ctx.node), ctx),
        ]

    def _winner_finish(self, notify: Collection[str], ctx: Ctx) -> list[Effect]:
        out = self._goto(NotHealing())
        for n in notify:
            if n in ctx.connected:
                out += self._send(ctx, n, "autoheal_safe_to_start")
        if ctx.leader == ctx.node or ctx.leader in ctx.connected:
            out += self._send(ctx, ctx.leader, "autoheal_finished", winner=ctx.node)
        return out

    def _on_report_autoheal_status(
        self, sender: str, msg: dict[str, Any], ctx: Ctx
    ) -> list[Effect]:
        # The leader was a loser and asks on its way back; answer only once we are done
        # (if still waiting, the notification goes out when it is over).
        if isinstance(self.state, NotHealing):
            return self._send(ctx, sender, "autoheal_finished", winner=ctx.node)
        return []

    # -------------------------------------------------------------------- a loser

    def _on_winner_is(self, sender: str, msg: dict[str, Any], ctx: Ctx) -> list[Effect]:
        winner, st = msg["winner"], self.state
        if winner != sender:
            return [self._log("winner_is not sent by the winner; ignored", sender=sender)]
        if isinstance(st, NotHealing) or (isinstance(st, LeaderWaiting) and st.winner == winner):
            self.state = Restarting(winner, st)
            return [
                Log.warning("autoheal: we were selected to restart; winner is " + winner),
                self._arm(TIMER_RESTART, self.timeout),
            ]
        return [self._log("winner_is ignored", state=st.name, winner=winner)]

    def _on_autoheal_safe_to_start(
        self, sender: str, msg: dict[str, Any], ctx: Ctx
    ) -> list[Effect]:
        st = self.state
        if not isinstance(st, Restarting) or sender != st.winner:
            return []
        out = [self._log("safe to start", winner=sender), *self._goto(st.after)]
        if isinstance(st.after, LeaderWaiting):
            # We led this heal and lost it: we may have missed autoheal_finished while
            # restarting, so ask the winner.
            out += self._send(ctx, st.after.winner, "report_autoheal_status")
        return out
