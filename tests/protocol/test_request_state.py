"""warden's own requestState (SEC07–SEC09): integrity-protected, bound to the host link and the request it
continues, short-lived. Each test removes exactly one of those guarantees from a state and expects a refusal."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from warden.errors import RemoteProtocolError
from warden.protocol.messages import INVALID_PARAMS
from warden.protocol.request_state import MAX_STATE_LENGTH, PREFIX, StateClaims, StateSigner, binding_of

KEY = b"k" * 32
HOST = "link-a"
BINDING = binding_of("tools/call", "sha256:" + "0" * 64)
CLAIMS = StateClaims(exchange="ex-1", host=HOST, binding=BINDING, expires=100.0)


def refused(state: str, *, host: str = HOST, binding: str = BINDING, now: float = 50.0,
            signer: StateSigner | None = None) -> None:
    with pytest.raises(RemoteProtocolError, match="requestState is invalid, expired, or not for this request") as info:
        (signer or StateSigner(KEY)).open(state, host=host, binding=binding, now=now)
    assert info.value.jsonrpc_code == INVALID_PARAMS


def payload_of(state: str) -> dict[str, object]:
    payload = state[len(PREFIX):].split(".")[0]
    decoded: dict[str, object] = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return decoded


def with_payload(state: str, claims: dict[str, object]) -> str:
    """The same MAC over a different, well-formed payload: what an attacker who cannot sign would send."""
    mac = state.split(".")[-1]
    payload = base64.urlsafe_b64encode(json.dumps(claims, separators=(",", ":")).encode()).rstrip(b"=").decode()
    return f"{PREFIX}{payload}.{mac}"


def test_SEC07_a_state_opens_for_its_own_host_and_request_until_it_expires() -> None:
    state = StateSigner(KEY).mint(CLAIMS)
    assert StateSigner(KEY).open(state, host=HOST, binding=BINDING, now=50.0) == "ex-1"
    assert StateSigner(KEY).open(state, host=HOST, binding=BINDING, now=100.0) == "ex-1"


@pytest.mark.parametrize(("field", "value"), [("x", "ex-2"), ("h", "link-b"), ("b", "0" * 32), ("e", 1e12)])
def test_SEC07_a_well_formed_payload_under_the_old_mac_is_refused(field: str, value: object) -> None:
    """Changing any claim, even to valid JSON (another exchange, host, request, a later expiry), breaks the MAC."""
    state = StateSigner(KEY).mint(CLAIMS)
    forged = with_payload(state, {**payload_of(state), field: value})
    refused(forged, host=str(value) if field == "h" else HOST, binding=str(value) if field == "b" else BINDING)


def test_SEC07_a_state_minted_under_another_key_is_refused() -> None:
    refused(StateSigner(b"o" * 32).mint(CLAIMS))


def test_SEC08_a_state_is_refused_to_another_host_link() -> None:
    refused(StateSigner(KEY).mint(CLAIMS), host="link-b")


def test_SEC08_a_state_is_refused_for_another_request() -> None:
    refused(StateSigner(KEY).mint(CLAIMS), binding=binding_of("tools/call", "sha256:" + "1" * 64))


def test_SEC08_a_state_is_refused_once_expired() -> None:
    refused(StateSigner(KEY).mint(CLAIMS), now=100.001)


def test_SEC07_an_oversized_state_is_refused_before_any_work() -> None:
    state = StateSigner(KEY).mint(CLAIMS)
    refused(state + "A" * (MAX_STATE_LENGTH - len(state) + 1))


def test_SEC07_a_validly_signed_payload_warden_never_wrote_is_refused() -> None:
    """A MAC is only as good as what it covers: a signed payload missing a claim (or not JSON) opens nothing."""
    signer = StateSigner(KEY)
    for raw in (b"not json", b"{}", b'{"x":"ex-1","h":"link-a","b":"%s"}' % BINDING.encode(),
                b'{"x":"ex-1","h":"link-a","b":"%s","e":"never"}' % BINDING.encode()):
        payload = base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
        refused(f"{PREFIX}{payload}.{signer._mac(payload)}")


@given(st.text(max_size=300))
def test_SEC07_any_string_is_refused_with_the_one_error(text: str) -> None:
    """Attacker-controlled input: nothing but RemoteProtocolError(-32602) ever comes out, whatever the bytes."""
    refused(PREFIX + text)
