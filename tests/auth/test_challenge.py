"""The WWW-Authenticate parser: the examples the MCP spec and the conformance mocks send, the forms RFC 9110
allows, and a property test - every input gets an answer (never an exception), and generated challenges come back
with their parameters intact."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from warden.auth import BearerChallenge, bearer_challenge, parse_challenges
from warden.auth.challenge import MAX_CHALLENGE_LENGTH, Challenge


def test_sdk_401_challenge() -> None:
    header = ('Bearer error="invalid_token", error_description="Missing Authorization header", '
              'resource_metadata="http://localhost:1/.well-known/oauth-protected-resource/mcp"')
    assert bearer_challenge([header]) == BearerChallenge(
        resource_metadata="http://localhost:1/.well-known/oauth-protected-resource/mcp", error="invalid_token")


def test_step_up_challenge_scopes_in_order_without_duplicates() -> None:
    header = 'Bearer error="insufficient_scope", scope="mcp:write mcp:basic mcp:write", resource_metadata="u"'
    challenge = bearer_challenge([header])
    assert challenge is not None
    assert challenge.insufficient_scope
    assert challenge.scopes == ("mcp:write", "mcp:basic")


def test_several_challenges_and_fields() -> None:
    assert parse_challenges(['Basic realm="x, y"', "Negotiate abc==, Bearer scope=read"]) == [
        Challenge("basic", {"realm": "x, y"}), Challenge("negotiate", {}, "abc=="),
        Challenge("bearer", {"scope": "read"})]
    assert bearer_challenge(["Basic realm=x"]) is None


def test_quoted_pairs_case_and_first_parameter_wins() -> None:
    challenge = parse_challenges(['BEARER Scope="a\\"b", scope="ignored"'])[0]
    assert challenge == Challenge("bearer", {"scope": 'a"b'})


def test_malformed_parts_are_skipped() -> None:
    assert parse_challenges(['"""', "=x", ", ,"]) == []
    assert parse_challenges(['Bearer =x, scope="unterminated']) == [Challenge("bearer", {"scope": "unterminated"})]


def test_oversized_header_is_cut() -> None:
    header = "Bearer scope=" + "a" * (MAX_CHALLENGE_LENGTH * 2)
    challenge = bearer_challenge([header])
    assert challenge is not None
    assert len(challenge.scopes[0]) == MAX_CHALLENGE_LENGTH - len("Bearer scope=")


@given(st.lists(st.text(max_size=300), max_size=4))
def test_any_input_gets_an_answer(headers: list[str]) -> None:
    challenges = parse_challenges(headers)
    assert all(c.scheme == c.scheme.lower() and c.scheme for c in challenges)
    bearer_challenge(headers)


TOKEN = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_.", min_size=1, max_size=20)
VALUE = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=40)


@given(st.dictionaries(TOKEN.filter(lambda t: t[0].isalpha()), VALUE, max_size=5))
def test_generated_bearer_parameters_round_trip(params: dict[str, str]) -> None:
    quoted = ", ".join('{}="{}"'.format(k, v.replace("\\", "\\\\").replace('"', '\\"')) for k, v in params.items())
    parsed = parse_challenges([f"Bearer {quoted}", "Basic realm=x"])
    assert parsed[0] == Challenge("bearer", {k.lower(): v for k, v in params.items()})
    assert parsed[-1] == Challenge("basic", {"realm": "x"})
