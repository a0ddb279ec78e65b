"""``tests/OBLIGATIONS-COVERAGE.md`` cannot drift: it accounts for every numbered obligation exactly once, every
test it cites exists and names that obligation in its name or docstring (``xfail`` ones strictly, the others not at
all), and an obligation it says cannot apply is named by no test."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Final

from tests.support import ROOT

TABLE: Final = ROOT / "tests" / "OBLIGATIONS-COVERAGE.md"
GROUPS: Final = {"LC": 19, "ER": 17, "ST": 5, "HL": 11, "HM": 19, "SS": 4, "AU": 9, "MS": 42, "RT": 8, "SA": 10,
                 "EL": 16, "PX": 28, "SEC": 9}
"""The groups of shared/seeds/OBLIGATIONS.md and how many obligations each numbers (IDs are never renumbered; a
new obligation gets the next number, and then this table and the coverage table grow with it)."""
STATUSES: Final = ("tested", "xfail", "gap", "n/a")
MIN_TESTED: Final = 180
ID: Final = re.compile(r"(?<![A-Za-z0-9])((?:LC|ER|ST|HL|HM|SS|AU|MS|RT|SA|EL|PX|SEC)[0-9]{2})(?![0-9])")
ROW: Final = re.compile(r"^\| ((?:[A-Z]{2,3})[0-9]{2}) \| (MUST|SHOULD|MAY|IMPLIED) \| ([a-z/]+) \| (.+) \|$")
CITED: Final = re.compile(r"`(tests/[^`:]+\.py)::(test_[A-Za-z0-9_]+)`")


@dataclass(frozen=True)
class Row:
    id: str
    level: str
    status: str
    entry: str


@dataclass(frozen=True)
class NamedTest:
    path: str
    name: str
    ids: frozenset[str]
    strict_xfail: bool
    xfail: bool


def rows() -> list[Row]:
    found = []
    for line in TABLE.read_text().splitlines():
        if match := ROW.match(line):
            found.append(Row(*match.groups()))
    return found


def _xfail(decorator: ast.expr) -> tuple[bool, bool]:
    """(is an xfail mark, has strict=True)."""
    call = decorator if isinstance(decorator, ast.Call) else None
    target = call.func if call is not None else decorator
    if not (isinstance(target, ast.Attribute) and target.attr == "xfail"):
        return False, False
    strict = call is not None and any(k.arg == "strict" and isinstance(k.value, ast.Constant) and k.value.value is True
                                      for k in call.keywords)
    return True, strict


def _functions(path: Path) -> Iterator[NamedTest]:
    rel = path.relative_to(ROOT).as_posix()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_"):
            marks = [_xfail(d) for d in node.decorator_list]
            yield NamedTest(rel, node.name, frozenset(ID.findall(f"{node.name} {ast.get_docstring(node) or ''}")),
                               any(strict for _, strict in marks), any(x for x, _ in marks))


@cache
def suite_functions() -> dict[tuple[str, str], NamedTest]:
    """Every test function of the suite, with the obligation IDs its name and docstring name."""
    found: dict[tuple[str, str], NamedTest] = {}
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        if "node_modules" in path.parts:
            continue
        for function in _functions(path):
            found[(function.path, function.name)] = function
    return found


def test_the_table_accounts_for_every_obligation_exactly_once() -> None:
    table = rows()
    ids = [row.id for row in table]
    expected = [f"{group}{n:02d}" for group, size in GROUPS.items() for n in range(1, size + 1)]
    assert len(expected) == 197
    assert sorted(ids) == sorted(expected), set(ids) ^ set(expected)
    assert len(ids) == len(set(ids))
    assert {row.status for row in table} <= set(STATUSES)


def test_every_cited_test_exists_and_names_its_obligation() -> None:
    functions = suite_functions()
    for row in rows():
        cited = CITED.findall(row.entry)
        if row.status in ("tested", "xfail"):
            assert cited, f"{row.id}: no test cited"
        for path, name in cited if row.status in ("tested", "xfail") else ():
            function = functions.get((path, name))
            assert function is not None, f"{row.id}: {path}::{name} does not exist"
            assert row.id in function.ids, f"{row.id}: {path}::{name} does not name it"
            if row.status == "xfail":
                assert function.strict_xfail, f"{row.id}: {path}::{name} is not a strict xfail"
            else:
                assert not function.xfail, f"{row.id}: {path}::{name} is an xfail; the row must say so"


def test_what_is_not_tested_says_why_and_stays_untested() -> None:
    named = {i for function in suite_functions().values() for i in function.ids}
    for row in rows():
        if row.status in ("gap", "n/a", "xfail"):
            reason = CITED.sub("", row.entry)
            assert len(reason.strip(" —,.")) >= 40, f"{row.id}: the reason is missing or too short"
        if row.status == "n/a":
            assert row.id not in named, f"{row.id} is marked n/a but a test names it: cite the test instead"


def test_at_least_180_obligations_have_a_test_that_proves_them() -> None:
    tested = [row for row in rows() if row.status == "tested"]
    assert len(tested) >= MIN_TESTED
