"""corun.fetch: input parsing, the journal, resumption and the CLI, against a real server."""

from __future__ import annotations

import base64
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from fetch_servers import ThreadServer

import corun
from corun.fetch import (
    BadInput,
    FetchOptions,
    FetchRequest,
    Journal,
    JournalMismatch,
    ProgressState,
    fingerprint,
    journal_path,
    parse_line,
    run_fetch,
)

pytestmark = pytest.mark.timeout(90)

#: Retries without waiting (1 ms backoff ceiling).
FAST = {"retry_delay": 0.001}


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    text = path.read_text()
    assert text.endswith("\n") or text == ""
    return [json.loads(line) for line in text.splitlines()]


def test_parse_line() -> None:
    assert parse_line(1, b"http://a.example/x") == FetchRequest(
        1, None, "http://a.example/x", "GET", {}, None
    )
    item = parse_line(
        2, b'{"url": "http://a.example/", "method": "post", "id": 7, "body": {"k": 1}}'
    )
    assert isinstance(item, FetchRequest)
    assert (item.method, item.id, item.body) == ("POST", 7, '{"k":1}')
    for raw, kind in [
        (b"{nope", "invalid_json"),
        (b'{"url": "http://a.example/", "headers": [1]}', "invalid_request"),
        (b"ftp://x/y", "unsupported_scheme"),
        (b"http:///nohost", "invalid_url"),
        (b"not a url", "invalid_url"),
        (b"", "invalid_request"),
        (b'{"id": 3}', "invalid_request"),
        (b"\xff\xfe", "invalid_request"),
    ]:
        bad = parse_line(5, raw)
        assert isinstance(bad, BadInput) and bad.kind == kind, raw
        assert bad.line == 5 and bad.error


def test_fetch_writes_one_line_per_input_line(server: ThreadServer, tmp_path: Path) -> None:
    base = server.base
    lines = [
        f"{base}/ok?n=1",
        json.dumps({"url": f"{base}/ok?n=2", "id": "two"}),
        "{bad json",
        "ftp://example.org/file",
        "",
        f"{base}/status/404",
        f"{base}/binary",
        f"{base}/flaky?fail=1&tag=f",
    ]
    src = tmp_path / "in.txt"
    src.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out.jsonl"
    summary_path = tmp_path / "summary.json"
    options = FetchOptions(input=str(src), output=str(out), summary_json=str(summary_path), **FAST)
    summary = corun.run(run_fetch(options))
    assert summary.complete and summary.done == summary.total == len(lines)
    records = read_jsonl(out)
    assert [r["line"] for r in records] == list(range(1, len(lines) + 1))
    assert records[0]["status"] == 200 and records[0]["body"] == "ok 1"
    assert records[1]["id"] == "two" and records[1]["body"] == "ok 2"
    assert records[2]["status"] is None and records[2]["error_kind"] == "invalid_json"
    assert records[3]["error_kind"] == "unsupported_scheme"
    assert records[4]["error_kind"] == "invalid_request"
    assert records[5]["status"] == 404 and records[5]["attempts"] == 1
    assert records[6]["body_base64"] is True
    assert base64.b64decode(records[6]["body"]) == bytes(range(256))
    assert records[7]["status"] == 200 and records[7]["attempts"] == 2
    assert all({"elapsed_ms", "attempts", "error", "url", "id"} <= set(r) for r in records)
    data = json.loads(summary_path.read_text())
    assert data["by_status"] == {"200": 4, "404": 1, "none": 3}
    assert data["by_error"] == {"invalid_json": 1, "unsupported_scheme": 1, "invalid_request": 1}
    assert data["retries"] == 1 and data["latency_p50_ms"] > 0
    # A re-run of a finished run fetches nothing and writes the same output.
    hits = dict(server.faults.hits)
    again = corun.run(run_fetch(options))
    assert again.complete and server.faults.hits == hits
    assert read_jsonl(out) == records


def test_progress_counts_retries_as_the_summary_does(server: ThreadServer, tmp_path: Path) -> None:
    # Every response is a 503 without Retry-After: each line spends its two
    # retries and ends with its last answer (a status, not an error).
    src = tmp_path / "in.txt"
    src.write_text("".join(f"{server.base}/status/503?n={i}\n" for i in range(1, 6)))
    out = tmp_path / "out.jsonl"
    states: list[ProgressState] = []
    options = FetchOptions(
        input=str(src), output=str(out), concurrency=1, retries=2, breaker_min_calls=1000, **FAST
    )
    summary = corun.run(run_fetch(options, on_progress=states.append))
    records = read_jsonl(out)
    assert [(r["attempts"], r["status"], r["error_kind"]) for r in records] == [(3, 503, None)] * 5
    assert server.faults.hits["status"] == 15
    assert summary.retries == 10
    final = states[-1]
    assert (final.done, final.total, final.errors, final.retries) == (5, 5, 0, summary.retries)
    assert (final.healthy, final.paused, final.unavailable) == (1, 0, 0)
    # A resumed run starts from the journal's counts, as the summary does.
    out.unlink()
    states.clear()
    again = corun.run(run_fetch(options, on_progress=states.append))
    assert again.complete and states[-1].retries == again.retries == 10
    assert server.faults.hits["status"] == 15


def test_rate_is_an_optional_hard_limit(server: ThreadServer, tmp_path: Path) -> None:
    from corun.cli import _build_parser

    assert FetchOptions(input="x", output="y").rate is None
    parse = _build_parser().parse_args
    assert parse(["fetch", "in", "-o", "out"]).rate is None
    assert parse(["fetch", "in", "-o", "out", "--rate", "2.5"]).rate == 2.5
    assert parse(["fetch", "in", "-o", "out", "--no-rate-limit"]).rate is None
    args = parse(["fetch", "in", "-o", "out", "--retry-failed", "--host-give-up", "30"])
    assert (args.retry_failed, args.host_give_up) == (True, 30.0)
    assert parse(["fetch", "in", "-o", "out", "--no-adaptive"]).no_adaptive is True
    # Adaptive: from 2 up to per_host; fixed: per_host from the start, never less.
    adaptive = FetchOptions(input="x", output="y", per_host=16).limit_options()
    assert (adaptive.initial, adaptive.min_limit, adaptive.max_limit) == (2, 1, 16)
    fixed = FetchOptions(input="x", output="y", per_host=16, adaptive=False).limit_options()
    assert (fixed.initial, fixed.min_limit, fixed.max_limit) == (16, 16, 16)
    # 15 requests to one host at 10/s with a burst of 10: the last 5 wait 0.1 s each.
    src = tmp_path / "in.txt"
    src.write_text("".join(f"{server.base}/ok?n={i}\n" for i in range(15)))
    options = FetchOptions(
        input=str(src), output=str(tmp_path / "o.jsonl"), progress=False, rate=10.0
    )
    started = time.monotonic()
    summary = corun.run(run_fetch(options))
    assert summary.complete and summary.by_status == {"200": 15}
    assert time.monotonic() - started >= 0.45


def test_save_dir(server: ThreadServer, tmp_path: Path) -> None:
    src = tmp_path / "in.txt"
    src.write_text(f"{server.base}/ok?n=9\n")
    options = FetchOptions(
        input=str(src), output=str(tmp_path / "o.jsonl"), save_dir=str(tmp_path / "b"), **FAST
    )
    corun.run(run_fetch(options))
    [record] = read_jsonl(tmp_path / "o.jsonl")
    assert record["body"] is None and Path(record["body_path"]).read_bytes() == b"ok 9"


def test_resume_skips_journalled_lines(server: ThreadServer, tmp_path: Path) -> None:
    src = tmp_path / "in.txt"
    src.write_text("".join(f"{server.base}/ok?n={i}\n" for i in range(1, 21)))
    out = tmp_path / "out.jsonl"
    journal = Journal(journal_path(str(out)), fingerprint(str(src)), 20)
    for line in range(1, 11):
        journal.record(line, {"line": line, "id": None, "status": 299, "error": None})
    journal.close()
    summary = corun.run(run_fetch(FetchOptions(input=str(src), output=str(out), **FAST)))
    assert summary.complete
    records = read_jsonl(out)
    assert [r["line"] for r in records] == list(range(1, 21))
    assert [r["status"] for r in records] == [299] * 10 + [200] * 10
    assert server.faults.hits["ok"] == 10


def test_journal_refuses_other_input(tmp_path: Path) -> None:
    src = tmp_path / "in.txt"
    src.write_text("http://a.example/\n")
    Journal(str(tmp_path / "j"), fingerprint(str(src)), 1).close()
    src.write_text("http://b.example/\n")
    with pytest.raises(JournalMismatch, match="different input"):
        Journal(str(tmp_path / "j"), fingerprint(str(src)), 1)


def _journal_rows(path: str) -> int:
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1)
        try:
            return int(db.execute("SELECT COUNT(*) FROM results").fetchone()[0])
        finally:
            db.close()
    except sqlite3.Error:
        return 0


def _start(src: Path, out: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "corun",
            "fetch",
            str(src),
            "--output",
            str(out),
            "--concurrency",
            "8",
            "--per-host",
            "8",
            "--no-rate-limit",
            "--no-progress",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _wait_rows(path: str, at_least: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while _journal_rows(path) < at_least:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else b""
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_sigterm_then_sigkill_then_resume(server: ThreadServer, tmp_path: Path) -> None:
    total = 2000
    src = tmp_path / "in.txt"
    src.write_text("".join(f"{server.base}/ok?n={i}&delay=0.003\n" for i in range(1, total + 1)))
    out = tmp_path / "out.jsonl"
    jpath = journal_path(str(out))

    first = _start(src, out)
    _wait_rows(jpath, 200, first)
    first.send_signal(signal.SIGTERM)
    assert first.wait(20) == 130  # graceful: interrupted, journal consistent
    assert not out.exists()
    after_term = _journal_rows(jpath)
    assert 200 <= after_term < total
    assert first.stderr is not None
    told = first.stderr.read().decode().splitlines()[-2:]
    assert told == [
        "  to resume: run the same command again; it fetches only the "
        f"{total - after_term} lines not done",
        f"  {out} is written once every line is done; until then the results are in {jpath}",
    ]

    second = _start(src, out)
    _wait_rows(jpath, after_term + 200, second)
    second.kill()  # SIGKILL: no chance to clean up
    second.wait(10)
    assert not out.exists()
    after_kill = _journal_rows(jpath)
    assert after_kill < total

    third = _start(src, out)
    assert third.wait(60) == 0, third.stderr.read() if third.stderr else b""
    records = read_jsonl(out)
    assert [r["line"] for r in records] == list(range(1, total + 1))  # none lost, none doubled
    assert all(r["status"] == 200 for r in records)
    assert all(r["body"] == f"ok {r['line']}" for r in records)
    # Only unrecorded lines were fetched again (plus at most the in-flight ones killed).
    assert server.faults.hits["ok"] - total < 2 * 8 + 200 * 2 + 8
    assert not os.path.exists(str(out) + ".tmp")


def test_a_schema_1_journal_is_upgraded_in_place(tmp_path: Path) -> None:
    src = tmp_path / "in.txt"
    src.write_text("http://a.example/1\nhttp://a.example/2\n")
    path = str(tmp_path / "j")
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
    db.execute("CREATE TABLE results (line INTEGER PRIMARY KEY, record TEXT NOT NULL)")
    db.executemany(
        "INSERT INTO meta VALUES (?, ?)",
        [("schema", "1"), ("fingerprint", fingerprint(str(src))), ("total", "2")],
    )
    records = [
        {
            "line": 1,
            "status": 200,
            "error": None,
            "error_kind": None,
            "attempts": 2,
            "elapsed_ms": 5.0,
        },
        {
            "line": 2,
            "status": None,
            "error": "refused",
            "error_kind": "connect",
            "attempts": 4,
            "elapsed_ms": 9.0,
        },
    ]
    db.executemany(
        "INSERT INTO results VALUES (?, ?)", [(r["line"], json.dumps(r)) for r in records]
    )
    db.commit()
    db.close()
    journal = Journal(path, fingerprint(str(src)), 2)
    try:
        assert dict(journal.rows()) == {1: (200, None, 2, 5.0), 2: (None, "connect", 4, 9.0)}
        assert journal.retryable_lines() == {2}
        assert [json.loads(text) for _, text in journal.records()] == records
        assert journal.get_meta("schema") == "2"
    finally:
        journal.close()
