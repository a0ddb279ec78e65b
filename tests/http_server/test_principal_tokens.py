"""The named-token list and principal names, as hostile input: whatever the file holds, reading it either yields
tokens warden wrote or refuses it (never a partial list), a request's credential never makes it raise, and an
OAuth subject of any length or content becomes a principal a record can hold, distinct from every other."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import write_state_file
from warden.errors import ConfigError, StateError
from warden.gateway.principals import NamedToken, TokenRegistry, check_name, oauth_principal

json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=70),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
                               st.sampled_from(["tokens", "name", "created", "sha256", "x"]), inner, max_size=4),
                           max_leaves=16)


@pytest.fixture
def state(tmp_path: Path) -> Path:
    directory = tmp_path / "state"
    directory.mkdir(mode=0o700)
    return directory


def _write(directory: Path, data: bytes, mode: int = 0o600) -> None:
    (directory / "http").mkdir(mode=0o700, exist_ok=True)
    write_state_file(directory / "http" / "tokens.json", data, mode)


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=300) | json_values.map(lambda v: json.dumps(v).encode()),
       credential=st.binary(max_size=64))
def test_any_token_file_is_read_whole_or_refused_and_a_credential_never_raises(state: Path, data: bytes,
                                                                               credential: bytes) -> None:
    _write(state, data)
    registry = TokenRegistry(state)
    try:
        tokens: tuple[NamedToken, ...] | None = registry.tokens()
    except StateError as exc:
        refusal, tokens = exc.message, None
    if tokens is None:
        assert "is not one warden wrote" in refusal
        assert registry.principal_of(credential) is None  # fail closed: a broken list admits nobody
    else:
        assert all(check_name(t.name) == t.name for t in tokens)
        assert registry.principal_of(credential) in (None, *(t.principal for t in tokens))


def test_a_token_matches_its_own_principal_only_and_the_list_never_holds_it(state: Path) -> None:
    registry = TokenRegistry(state)
    alice, bob = registry.add("alice"), registry.add("bob")
    assert registry.principal_of(alice.encode()) == "token:alice"
    assert registry.principal_of(bob.encode()) == "token:bob"
    assert registry.principal_of(alice[:-1].encode()) is None
    text = (state / "http" / "tokens.json").read_text()
    assert alice not in text
    assert bob not in text
    with pytest.raises(ConfigError, match="exists already"):
        registry.add("alice")
    assert registry.revoke("alice")
    assert registry.principal_of(alice.encode()) is None  # the same object sees the change at once
    assert not registry.revoke("alice")


@pytest.mark.parametrize("mode", [0o640, 0o604])
def test_a_token_list_others_could_read_or_write_is_refused(state: Path, mode: int) -> None:
    TokenRegistry(state).add("alice")
    (state / "http" / "tokens.json").chmod(mode)
    with pytest.raises(StateError, match="not a private regular file"):
        TokenRegistry(state).tokens()


@given(st.lists(st.text(st.characters(codec=None), min_size=1, max_size=600), min_size=2, max_size=2, unique=True)
       | st.just(["a\ud800", "a\udc00"]))
def test_every_oauth_subject_is_a_distinct_principal_a_record_can_hold(subjects: list[str]) -> None:
    one, two = (oauth_principal(s) for s in subjects)
    assert one != two
    assert len(one) <= 256
    assert len(two) <= 256
    assert one.startswith("oauth:")
    one.encode("utf-8")  # a lone surrogate in a subject is replaced, not kept
