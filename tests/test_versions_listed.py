"""The supported CPythons are named the same everywhere a user or CI reads them.

pyproject's classifiers, the README's "Supported Python" table, the Makefile's
``PY=`` choices and the passes of ``.ci/run``: a version added to one and not
the others is a version that is claimed and not tested, or tested and not
claimed.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _classified() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    prefix = "Programming Language :: Python :: "
    return {
        c.removeprefix(prefix)
        for c in project["classifiers"]
        if re.fullmatch(re.escape(prefix) + r"3\.\d+", c)
    }


def _in_readme_table() -> set[str]:
    text = (ROOT / "README.md").read_text()
    table = text.split("## Supported Python", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| (3\.\d+) \|", table, re.M))


def _in_ci() -> set[str]:
    text = (ROOT / ".ci" / "run").read_text()
    versions = set(re.findall(r"make test PY=(3\.\d+)\s*$", text, re.M))
    if re.search(r"make test\s*$", text, re.M):
        versions.add("3.11")  # the machine's python3
    return versions


def _in_makefile() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    sid = re.search(r"^SID_PYS := (.*)$", text, re.M)
    assert sid is not None
    others = set(re.findall(r"^else ifeq \(\$\(PY\),(3\.\d+)\)", text, re.M))
    return {"3.11", *others, *sid.group(1).split()}


def test_every_listed_version_is_tested_and_every_tested_one_listed() -> None:
    classified = _classified()
    assert classified == _in_readme_table()
    assert classified == _in_ci()
    assert classified == _in_makefile()
    assert classified == {"3.11", "3.12", "3.13", "3.14", "3.15"}


def test_the_running_interpreter_is_a_supported_one() -> None:
    assert f"{sys.version_info.major}.{sys.version_info.minor}" in _classified()
