"""DemoView: a redrawn panel on a terminal, rate-limited one-line updates anywhere else."""

from __future__ import annotations

import io

from rich.console import Console

from rabbitry.demo.view import DemoState, DemoView, NodeStatus, one_line, render


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _state(processed: int = 0, phase: str = "running the job") -> DemoState:
    return DemoState(
        nodes={
            "a@127.0.0.1": NodeStatus("core", "running"),
            "b@127.0.0.1": ("core", "paused"),
            "exec-1@127.0.0.1": NodeStatus("executor", "down"),
        },
        redis_master="127.0.0.1:7001",
        done_tasks=3,
        total_tasks=8,
        processed=processed,
        throughput=1234.5,
        phase=phase,
        events=[f"event {i}" for i in range(8)],
        redis_servers={"127.0.0.1:7000": "down", "127.0.0.1:7001": "master"},
    )


def _plain_console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=False, width=200), out


def test_render_shows_nodes_redis_progress_and_recent_events() -> None:
    out = io.StringIO()
    Console(file=out, width=120, force_terminal=False).print(render(_state(4321), max_events=3))
    text = out.getvalue()

    for expected in (
        "running the job",
        "a ",
        "executor",
        "paused",
        "down",
        "127.0.0.1:7001",
        "master (in use)",
        "tasks 3/8",
        "4,321 messages",
        "1,234/s",
        "event 7",
        "event 5",
    ):
        assert expected in text, f"{expected!r} missing from:\n{text}"
    assert "event 4" not in text  # only the last three


def test_render_without_redis_servers_or_totals() -> None:
    out = io.StringIO()
    Console(file=out, width=100).print(render(DemoState()))
    assert "master" in out.getvalue() and "unknown" in out.getvalue()


def test_one_line() -> None:
    line = one_line(_state(99), elapsed=3.0)
    assert line == (
        "[   3.0s] running the job | nodes a=running b=paused exec-1=down | redis 127.0.0.1:7001 "
        "| tasks 3/8 · 99 messages · 1,234/s"
    )


def test_plain_console_prints_at_most_once_per_second() -> None:
    console, out = _plain_console()
    clock = FakeClock()
    with DemoView(console, clock=clock) as view:
        assert not view.live
        for step in range(30):  # 3 s of updates every 0.1 s
            clock.now = 100.0 + step / 10
            view.update(_state(step))
    lines = [x for x in out.getvalue().splitlines() if not x.startswith("  • ")]

    # at 0.0, 1.0, 2.0 (+/- float rounding), then the last state on exit
    assert 3 <= len(lines) <= 4
    assert "| tasks 3/8 · 0 messages" in lines[0]
    assert "29 messages" in lines[-1], "the final state must be printed on exit"


def test_plain_console_prints_a_phase_change_at_once() -> None:
    console, out = _plain_console()
    clock = FakeClock()
    with DemoView(console, clock=clock) as view:
        view.update(_state(1, "starting"))
        clock.now += 0.1
        view.update(_state(2, "starting"))
        clock.now += 0.1
        view.update(_state(3, "killing the Redis master"))
    lines = [x for x in out.getvalue().splitlines() if not x.startswith("  • ")]

    assert len(lines) == 2
    assert "starting" in lines[0] and "killing the Redis master" in lines[1]


def test_plain_console_prints_each_event_once_as_its_own_line() -> None:
    console, out = _plain_console()
    clock = FakeClock()
    with DemoView(console, clock=clock) as view:
        state = _state(1)
        state.events = ["  1.0s redis master killed 127.0.0.1:7000"]
        view.update(state)
        clock.now += 1.5
        state = _state(2)
        state.events = [*state.events[:0], "  1.0s redis master killed 127.0.0.1:7000"]
        state.events.append("  1.2s warning failover: RCS: master check failed")
        view.update(state)
    events = [x for x in out.getvalue().splitlines() if x.startswith("  • ")]
    assert events == [
        "  • " + "  1.0s redis master killed 127.0.0.1:7000",
        "  • " + "  1.2s warning failover: RCS: master check failed",
    ]


def test_executors_get_short_names() -> None:
    from rabbitry.demo.names import short_name

    assert short_name("spark-app-20261126075515-0000-1@127.0.0.1") == "executor 1"
    assert short_name("spark-local-4242-driver@127.0.0.1") == "executor driver"
    assert short_name("a@127.0.0.1") == "a"
    state = DemoState(nodes={"spark-app-20261126075515-0000-0@127.0.0.1": ("executor", "down")})
    assert "executor-0=down" in one_line(state)


def test_terminal_console_redraws_in_place() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120, height=40)
    with DemoView(console, refresh_per_second=20) as view:
        assert view.live
        view.update(_state(555))
    text = out.getvalue()

    assert "555 messages" in text  # the final frame stays on screen
    assert "\x1b[" in text  # drawn with terminal control codes, not printed as log lines
