"""The secrets store and the one redaction registry (invariant 10)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from warden.errors import ConfigError, StateError
from warden.secrets import REDACTED, Redactor, SecretStore, load_redactor, looks_secret, redactable

CANARY = "canary-Zq8vX2mP"


class MemoryKeyring:
    """A keyring backend that keeps values in memory: the OS keyring path, without an OS keyring."""

    def __init__(self) -> None:
        self.items: dict[tuple[str, str], str] = {}

    def get_password(self, service: str, username: str) -> str | None:
        return self.items.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        self.items[(service, username)] = password

    def delete_password(self, service: str, username: str) -> None:
        del self.items[(service, username)]


@pytest.fixture
def store(state_dir: Path) -> SecretStore:
    return SecretStore(state_dir, keyring=None)


def test_set_get_list_remove(store: SecretStore) -> None:
    store.set("GITHUB_TOKEN", CANARY)
    assert store.get("GITHUB_TOKEN") == CANARY
    assert store.names() == ["GITHUB_TOKEN"]
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    assert store.remove("GITHUB_TOKEN") is True
    assert store.remove("GITHUB_TOKEN") is False
    assert store.names() == []
    with pytest.raises(ConfigError, match="no secret 'GITHUB_TOKEN'") as refused:
        store.get("GITHUB_TOKEN")
    assert refused.value.hint == "set it with: warden secrets set GITHUB_TOKEN"
    assert CANARY in store.values(), "a removed value is still redacted"


@pytest.mark.parametrize("value", ["", "1", "short", "7chars!"])
def test_short_values_are_refused_not_silently_unredacted(store: SecretStore, value: str) -> None:
    with pytest.raises(ConfigError, match="too short to be redacted"):
        store.set("X_TOKEN", value)


@pytest.mark.parametrize("name", ["", "1ABC", "-x", "a b", "a/b", "x" * 129, "\x00", "é"])
def test_bad_names_are_refused(store: SecretStore, name: str) -> None:
    with pytest.raises(ConfigError, match="cannot name a secret"):
        store.set(name, CANARY)


def test_unsafe_store_file_is_refused(store: SecretStore) -> None:
    store.set("A_TOKEN", CANARY)
    os.chmod(store.path, 0o644)
    with pytest.raises(StateError, match="not a private regular file"):
        store.names()
    os.chmod(store.path, 0o600)
    store.path.write_text("{not json")
    with pytest.raises(StateError, match="corrupt"):
        load_redactor(store.path.parent)


def test_symlinked_store_is_refused(store: SecretStore, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.json"
    target.write_text("{}")
    store.path.parent.mkdir(mode=0o700, exist_ok=True)
    store.path.symlink_to(target)
    with pytest.raises(StateError, match="symlink"):
        store.values()


def test_handed_values_reach_every_later_reader(state_dir: Path) -> None:
    SecretStore(state_dir, keyring=None).record_handed("github", {"GITHUB_TOKEN": CANARY, "DEBUG": "1"})
    redactor = load_redactor(state_dir)
    assert redactor.text(f"token={CANARY}") == f"token={REDACTED}"
    assert "1" not in redactor.values


def test_keyring_backend_keeps_values_out_of_the_file(state_dir: Path) -> None:
    ring = MemoryKeyring()
    store = SecretStore(state_dir, keyring=ring)
    store.set("API_KEY", CANARY)
    store.record_handed("srv", {"OTHER_TOKEN": "handed-Value-123"})
    text = store.path.read_text()
    assert CANARY not in text
    assert "handed-Value-123" not in text
    assert json.loads(text)["backend"] == "keyring"
    assert store.get("API_KEY") == CANARY
    assert set(store.values()) == {CANARY, "handed-Value-123"}
    with pytest.raises(StateError, match="OS keyring, which cannot be reached"):
        SecretStore(state_dir, keyring=None).values()


def test_file_store_stays_a_file_store_when_a_keyring_appears(state_dir: Path) -> None:
    SecretStore(state_dir, keyring=None).set("A_TOKEN", CANARY)
    ring = MemoryKeyring()
    SecretStore(state_dir, keyring=ring).set("B_TOKEN", CANARY + "b")
    assert ring.items == {}
    assert json.loads((state_dir / "secrets.json").read_text())["backend"] == "file"


def test_secret_looking_names() -> None:
    for name in ("GITHUB_PERSONAL_ACCESS_TOKEN", "API_KEY", "OPENAI_APIKEY", "DB_PASSWORD", "GH_PAT",
                 "AWS_SECRET_ACCESS_KEY", "BRAVE_API_KEY", "SLACK_BOT_TOKEN"):
        assert looks_secret(name), name
    for name in ("DEBUG", "MEMORY_FILE_PATH", "NODE_ENV", "PATH", "LOG_LEVEL", "PATHS"):
        assert not looks_secret(name), name


# -- the redactor --------------------------------------------------------------------------------------------

secret_values = st.text(min_size=8, max_size=24).filter(lambda s: s.strip() == s and "\x00" not in s and redactable(s))


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(secret=secret_values, before=st.text(max_size=40), after=st.text(max_size=40))
def test_text_never_keeps_a_registered_value(secret: str, before: str, after: str) -> None:
    out = Redactor([secret]).text(before + secret + after)
    assert secret not in out


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=30),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12)


def _plant(value: object, secret: str) -> object:
    if isinstance(value, str):
        return value + secret
    if isinstance(value, list):
        return [_plant(v, secret) for v in value] + [secret]
    if isinstance(value, dict):
        return {k + secret: _plant(v, secret) for k, v in value.items()} | {"s": secret}
    return [value, secret]


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(secret=secret_values, value=json_values, ascii_only=st.booleans())
def test_wire_bytes_never_keep_a_registered_value(secret: str, value: object, ascii_only: bool) -> None:
    message = {"jsonrpc": "2.0", "id": 1, "result": _plant(value, secret)}
    raw = json.dumps(message, ensure_ascii=ascii_only).encode() if ascii_only else msgspec.json.encode(message)
    out = Redactor([secret]).wire(raw)
    decoded = msgspec.json.decode(out)  # still valid JSON
    assert secret not in json.dumps(decoded, ensure_ascii=False)
    assert secret.encode("utf-8", "surrogatepass") not in out


def test_wire_passes_clean_messages_as_the_same_bytes() -> None:
    raw = b'{"jsonrpc":"2.0","id":1,"result":{"x":  1.50}}'
    assert Redactor([CANARY]).wire(raw) is raw


def test_secret_inside_a_number_becomes_a_string_not_broken_json() -> None:
    out = Redactor(["12345678901"]).wire(b'{"id":1,"result":{"n":12345678901}}')
    assert msgspec.json.decode(out) == {"id": 1, "result": {"n": REDACTED}}


def test_escaped_spellings_are_found() -> None:
    secret = "pa/ss\"wörd-123"
    red = Redactor([secret])
    for raw in (json.dumps({"e": secret}).encode(), json.dumps({"e": secret}).replace("/", "\\/").encode(),
                msgspec.json.encode({"e": secret})):
        assert msgspec.json.decode(red.wire(raw)) == {"e": REDACTED}


def test_longest_value_is_cut_whole() -> None:
    assert Redactor(["abcdefgh", "abcdefgh-longer"]).text("x abcdefgh-longer y") == f"x {REDACTED} y"


def test_repr_never_shows_values() -> None:
    assert CANARY not in repr(Redactor([CANARY]))
