"""The era-answer file is a hint another process could have written: whatever it holds, recall never raises and
never yields anything but a known answer, and a file that is not private, or not a file, is not believed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import write_state_file
from warden.upstream.eras import MAX_ENTRIES, EraMemory

json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                        max_size=4), max_leaves=12)


def _write(directory: Path, data: bytes, mode: int = 0o600) -> None:
    write_state_file(directory / "eras.json", data, mode)


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=256) | json_values.map(lambda v: json.dumps(v).encode()),
       key=st.sampled_from(["k", "", "legacy"]))
def test_ER02_any_file_content_recalls_a_known_answer_or_none(tmp_path: Path, data: bytes, key: str) -> None:
    _write(tmp_path, data)
    assert EraMemory(tmp_path, key).recall() in (None, "legacy", "dual")


def test_ER02_an_answer_is_kept_privately_and_forgotten_on_request(tmp_path: Path) -> None:
    memory = EraMemory(tmp_path, "abc")
    memory.remember("dual")
    assert EraMemory(tmp_path, "abc").recall() == "dual"
    assert EraMemory(tmp_path, "other").recall() is None
    assert (tmp_path / "eras.json").stat().st_mode & 0o777 == 0o600
    memory.remember(None)
    assert json.loads((tmp_path / "eras.json").read_bytes()) == {}


def test_ER02_the_file_keeps_at_most_its_cap_dropping_the_oldest(tmp_path: Path) -> None:
    _write(tmp_path, json.dumps({f"k{i}": "legacy" for i in range(MAX_ENTRIES)}).encode())
    EraMemory(tmp_path, "newest").remember("dual")
    kept = json.loads((tmp_path / "eras.json").read_bytes())
    assert len(kept) == MAX_ENTRIES
    assert "k0" not in kept
    assert kept["newest"] == "dual"


@pytest.mark.parametrize("case", ["group-readable", "symlink", "directory", "oversized"])
def test_ER02_a_file_someone_else_could_have_shaped_is_not_believed(tmp_path: Path, case: str,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    good = json.dumps({"abc": "legacy"}).encode()
    path = tmp_path / "eras.json"
    if case == "group-readable":
        _write(tmp_path, good, 0o640)
    elif case == "symlink":
        target = tmp_path / "elsewhere.json"
        target.write_bytes(good)
        target.chmod(0o600)
        path.symlink_to(target)
    elif case == "directory":
        path.mkdir()
    else:
        _write(tmp_path, b" " * (256 * 1024) + good)
    assert EraMemory(tmp_path, "abc").recall() is None
    assert "probed as if it were empty" in caplog.text
