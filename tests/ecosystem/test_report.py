"""Unit tests of the ecosystem harness's parsing and table logic (no suites are run)."""

import json

import pytest
from ecosystem.report import (
    OUTSIDE,
    LoopRun,
    SuiteResult,
    corun_only_failures,
    foreign_loops,
    is_corun_loop,
    parse_records,
    render_markdown,
    to_json,
)
from ecosystem.suites import SUITES

ASYNCIO_LOOP = "asyncio.unix_events._UnixSelectorEventLoop"
CORUN_LOOP = "corun.runtime.loop.EventLoop"


def line(nodeid: str, outcome: str, message: str = "", ran: tuple[str, ...] = ()) -> str:
    return json.dumps({"nodeid": nodeid, "outcome": outcome, "message": message, "ran": list(ran)})


def run_of(loop: str, *lines: str, exit_code: int = 1) -> LoopRun:
    run = parse_records(lines, loop)
    run.exit_code = exit_code
    return run


def test_parse_counts_and_last_record_wins() -> None:
    run = run_of(
        "asyncio",
        line("t::a", "passed"),
        line("t::b", "failed", "boom"),
        "",
        line("t::c", "skipped"),
        line("t::a", "failed", "second run"),
    )
    assert run.counts() == {"passed": 0, "failed": 2, "skipped": 1}
    assert run.records["t::a"].message == "second run"


def test_parse_outside_records_and_unknown_outcome() -> None:
    run = run_of("corun", line(OUTSIDE, "none", ran=(ASYNCIO_LOOP,)))
    assert run.records == {}
    assert run.outside == {ASYNCIO_LOOP}
    with pytest.raises(ValueError, match="unknown outcome"):
        parse_records([line("t::x", "error")], "corun")


def test_corun_only_failures() -> None:
    baseline = run_of(
        "asyncio",
        line("t::both", "failed"),
        line("t::ok", "passed"),
        line("t::skip", "skipped"),
    )
    corun = run_of(
        "corun",
        line("t::both", "failed"),
        line("t::ok", "failed", "only here"),
        line("t::skip", "failed"),
        line("t::new", "failed"),
        line("t::fine", "passed"),
    )
    names = [r.nodeid for r in corun_only_failures(baseline, corun)]
    assert names == ["t::new", "t::ok", "t::skip"]


def test_foreign_loops() -> None:
    assert is_corun_loop(CORUN_LOOP)
    assert not is_corun_loop("corunx.Loop")
    assert not is_corun_loop(ASYNCIO_LOOP)
    run = run_of(
        "corun",
        line("t::a", "passed", ran=(CORUN_LOOP,)),
        line("t::b", "passed", ran=(CORUN_LOOP, ASYNCIO_LOOP)),
        line("t::no_loop", "passed"),
        line(OUTSIDE, "none", ran=(CORUN_LOOP,)),
    )
    assert foreign_loops(run) == {"t::b": [ASYNCIO_LOOP]}


def test_suite_result_ok_and_broken_runs() -> None:
    good = SuiteResult(
        "lib",
        "1.0",
        run_of("asyncio", line("t::a", "passed"), exit_code=0),
        run_of("corun", line("t::a", "passed", ran=(CORUN_LOOP,)), exit_code=0),
    )
    assert good.ok()
    empty = SuiteResult("lib", "1.0", run_of("asyncio", exit_code=5), good.corun)
    assert empty.asyncio.broken()
    assert not empty.ok()
    killed = run_of("corun", line("t::a", "passed"), exit_code=-9)
    killed.timed_out = True
    assert killed.broken()


def test_markdown_and_json() -> None:
    result = SuiteResult(
        "lib",
        "1.0",
        run_of("asyncio", line("t::a", "passed"), line("t::b", "passed")),
        run_of(
            "corun",
            line("t::a", "failed", "AssertionError: a | b", ran=(CORUN_LOOP,)),
            line("t::b", "passed", ran=(ASYNCIO_LOOP,)),
        ),
    )
    text = render_markdown([result], "2030-01-01", "corun.whl")
    assert "| lib | 1.0 | 2 / 0 / 0 | 1 / 1 / 0 | 1 | FAILED (1 tests) | 1 |" in text
    assert "- `t::a`: AssertionError: a \\| b" in text
    assert f"- `t::b`: {ASYNCIO_LOOP}" in text
    data = to_json([result], "2030-01-01", "corun.whl")
    suite = data["suites"][0]  # type: ignore[index]
    assert suite["corun_only_failures"] == [{"nodeid": "t::a", "message": "AssertionError: a | b"}]
    assert suite["runs"]["corun"]["counts"] == {"passed": 1, "failed": 1, "skipped": 0}


def test_suite_table_is_pinned() -> None:
    names = [s.name for s in SUITES]
    assert len(names) == len(set(names))
    for suite in SUITES:
        assert f"=={suite.version}" in suite.library
        assert all("==" in r for r in suite.requirements), suite.name
        assert suite.copy and suite.pytest_args


def test_own_loop_tests_are_reported_but_allowed() -> None:
    corun = run_of(
        "corun",
        line("t::custom", "passed", ran=("tests.CustomLoop",)),
        exit_code=0,
    )
    result = SuiteResult(
        "lib", "1.0", run_of("asyncio", line("t::custom", "passed"), exit_code=0), corun
    )
    assert not result.ok()
    allowed = SuiteResult("lib", "1.0", result.asyncio, corun, frozenset({"t::custom"}))
    assert allowed.ok()
    assert allowed.expected_foreign() == {"t::custom": ["tests.CustomLoop"]}
    assert "ok (1 own-loop tests)" in render_markdown([allowed], "d", "b")


def test_differences_by_design_are_listed_not_counted() -> None:
    corun = run_of("corun", line("t::a", "failed"), line("t::b", "failed"))
    baseline = run_of("asyncio", line("t::a", "passed"), line("t::b", "passed"))
    result = SuiteResult("lib", "1.0", baseline, corun, differences={"t::a": "why"})
    assert [r.nodeid for r in result.corun_only()] == ["t::b"]
    assert [r.nodeid for r in result.by_design()] == ["t::a"]
    assert "`t::a`: why" in render_markdown([result], "today", "compiled")
