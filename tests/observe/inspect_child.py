"""An observed process for the inspection tests: an ``InspectServer`` with fixed answers.

Prints the socket's path on stdout, serves until its stdin closes, then
closes the server and prints ``closed``. The audit lines go to stderr.

    python inspect_child.py [--directory D] [--request-timeout S] [--max-answer N] [--broken]

Requests: ``ps``, ``top`` (one second later at every call), ``dump`` and
``metrics`` answer the documents of ``observe_docs``; ``boom`` raises,
``big`` answers one byte over ``--max-answer``, ``notstr`` returns bytes.
With ``--broken``, ``ps`` is not JSON, ``dump`` is a JSON list and ``top``
lacks its tasks.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

from observe_docs import METRICS, dump_doc, ps_doc, top_doc

from corun.observe.server import InspectServer


def handlers(args: argparse.Namespace) -> dict[str, Callable[[], Any]]:
    pid = os.getpid()
    samples = itertools.count(1)

    def boom() -> str:
        raise RuntimeError("the handler broke\nover two lines")

    common: dict[str, Callable[[], Any]] = {
        "metrics": lambda: METRICS,
        "boom": boom,
        "big": lambda: "x" * (args.max_answer + 1),
        "notstr": lambda: b"bytes",
    }
    if args.broken:
        return {
            **common,
            "ps": lambda: "{not json",
            "dump": lambda: "[1, 2]",
            "top": lambda: json.dumps({"pid": pid, "time": next(samples), "loop": {}}),
        }
    return {
        **common,
        "ps": lambda: json.dumps(ps_doc(pid)),
        "top": lambda: json.dumps(top_doc(pid, next(samples))),
        "dump": lambda: json.dumps(dump_doc(pid)),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--directory")
    parser.add_argument("--request-timeout", type=float, default=2.0)
    parser.add_argument("--max-answer", type=int, default=64 * 1024 * 1024)
    parser.add_argument("--broken", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(name)s %(levelname)s %(message)s"
    )
    server = InspectServer(
        handlers(args),
        directory=args.directory,
        request_timeout=args.request_timeout,
        max_answer=args.max_answer,
    )
    print(server.start(), flush=True)
    sys.stdin.read()
    server.close()
    print("closed", flush=True)


if __name__ == "__main__":
    main()
