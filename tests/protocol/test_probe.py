"""The stdio era probe as a pure state machine (ER03–ER08, ER13, LC04) and the era helpers (LC12–LC18)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from warden.errors import IncompatibleServer, LocalProtocolError, RemoteProtocolError
from warden.protocol.eras import (
    META_CLIENT_CAPABILITIES,
    META_CLIENT_INFO,
    META_PROTOCOL_VERSION,
    negotiate_legacy,
    read_request_meta,
    request_meta,
    result_type,
)
from warden.protocol.probe import (
    QUOTED_MAX,
    Incompatible,
    Legacy,
    Modern,
    SendDiscover,
    StdioProbe,
    check_initialize_result,
)

DISCOVER = {"resultType": "complete", "supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}},
            "ttlMs": 0, "cacheScope": "private",
            "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "s", "version": "1"}}}


def test_ER03_probe_starts_with_discover_at_the_preferred_modern_version() -> None:
    assert StdioProbe().start() == SendDiscover("2026-07-28", {})


def test_ER04_discover_result_means_modern_with_fields_read_by_exact_names() -> None:
    probe = StdioProbe()
    probe.start()
    step = probe.on_result(DISCOVER)
    assert isinstance(step, Modern)
    assert step.version == "2026-07-28"
    assert step.discover.capabilities == {"tools": {}}
    assert step.discover.server_info() == {"name": "s", "version": "1"}
    assert probe.done


@pytest.mark.parametrize("code", [-32601, -32602, -32600, -32603, -32000, -32002, -1, 42])
def test_ER06_ER07_any_other_error_means_legacy_never_keyed_to_one_code(code: int) -> None:
    probe = StdioProbe()
    probe.start()
    step = probe.on_error(code, None)
    assert isinstance(step, Legacy)
    assert not step.fresh_process


@given(st.integers().filter(lambda c: c not in (-32020, -32021, -32022)),
       st.none() | st.dictionaries(st.text(), st.text()))
def test_ER07_fallback_for_every_non_modern_code(code: int, data: object) -> None:
    probe = StdioProbe()
    probe.start()
    assert isinstance(probe.on_error(code, data), Legacy)


def test_ER06_timeout_and_close_mean_legacy_on_a_fresh_process() -> None:
    for event in ("on_timeout", "on_closed"):
        probe = StdioProbe()
        probe.start()
        step = getattr(probe, event)()
        assert step == Legacy(True, step.reason)
        assert step.fresh_process


@pytest.mark.parametrize("result", [{}, {"tools": []}, {"supportedVersions": [], "capabilities": {}},
                                    {"supportedVersions": ["2026-07-28"]},
                                    {"supportedVersions": "2026-07-28", "capabilities": {}},
                                    dict(DISCOVER, resultType="input_required")])
def test_ER06_unrecognised_result_means_legacy(result: dict[str, object]) -> None:
    probe = StdioProbe()
    probe.start()
    assert isinstance(probe.on_result(result), Legacy)


def test_ER05_LC18_unsupported_version_error_retries_with_a_mutual_version() -> None:
    probe = StdioProbe(("2026-07-28", "2027-01-01"))
    assert probe.start().version == "2027-01-01"
    step = probe.on_error(-32022, {"supported": ["2026-07-28"], "requested": "2027-01-01"})
    assert step == SendDiscover("2026-07-28", {})
    assert isinstance(probe.on_result(DISCOVER), Modern)


def test_ER13_version_list_with_only_legacy_versions_means_legacy() -> None:
    probe = StdioProbe()
    probe.start()
    step = probe.on_error(-32022, {"supported": ["2025-11-25", "2025-06-18"]})
    assert isinstance(step, Legacy)


def test_LC18_no_mutual_version_fails_instead_of_retrying() -> None:
    probe = StdioProbe()
    probe.start()
    assert isinstance(probe.on_error(-32022, {"supported": ["2099-01-01"]}), Incompatible)
    probe = StdioProbe()
    probe.start()
    assert isinstance(probe.on_error(-32022, None), Incompatible)


def test_LC18_a_server_listing_a_megabyte_of_versions_gets_a_short_reason() -> None:
    """The reason reaches the host's error and warden's log: before, it quoted every version the server listed."""
    probe = StdioProbe()
    probe.start()
    step = probe.on_error(-32022, {"supported": ["x" * 1_000_000]})
    assert isinstance(step, Incompatible)
    assert step.reason == "the server supports only " + repr(["x" * 1_000_000])[:QUOTED_MAX] + "…"


def test_ER05_missing_capability_retries_once_with_them_then_gives_up() -> None:
    probe = StdioProbe()
    probe.start()
    step = probe.on_error(-32021, {"requiredCapabilities": {"elicitation": {}}})
    assert step == SendDiscover("2026-07-28", {"elicitation": {}})
    step = probe.on_error(-32020, None)
    assert isinstance(step, SendDiscover)
    assert isinstance(probe.on_error(-32020, None), Incompatible)


def test_probe_refuses_out_of_order_use() -> None:
    probe = StdioProbe()
    with pytest.raises(LocalProtocolError, match="probe is idle"):
        probe.on_timeout()
    probe.start()
    with pytest.raises(LocalProtocolError, match="probe is awaiting, not idle"):
        probe.start()
    probe.on_error(-32601, None)
    with pytest.raises(LocalProtocolError, match="probe is done"):
        probe.on_result(DISCOVER)


def test_LC04_initialize_answer_with_an_unknown_version_is_refused() -> None:
    good = {"protocolVersion": "2025-06-18", "capabilities": {}, "serverInfo": {"name": "s", "version": "1"}}
    assert check_initialize_result(good).protocol_version == "2025-06-18"
    with pytest.raises(IncompatibleServer, match="'2026-07-28', which warden cannot speak"):
        check_initialize_result(dict(good, protocolVersion="2026-07-28"))
    with pytest.raises(IncompatibleServer, match="malformed"):
        check_initialize_result({"protocolVersion": "2025-11-25"})


def test_LC03_negotiation_answers_the_requested_legacy_version_or_the_latest() -> None:
    assert negotiate_legacy("2025-03-26") == "2025-03-26"
    assert negotiate_legacy("2026-07-28") == "2025-11-25"
    assert negotiate_legacy("1999-01-01") == "2025-11-25"
    assert negotiate_legacy(None) == "2025-11-25"


def test_LC12_LC13_LC15_modern_meta_carries_version_capabilities_and_client_info() -> None:
    meta = request_meta("2026-07-28", {"elicitation": {}}, {"name": "warden", "version": "0"}, log_level="info")
    assert meta == {META_PROTOCOL_VERSION: "2026-07-28", META_CLIENT_CAPABILITIES: {"elicitation": {}},
                    META_CLIENT_INFO: {"name": "warden", "version": "0"},
                    "io.modelcontextprotocol/logLevel": "info"}


def test_LC16_LC17_result_type_absent_is_complete_unknown_is_invalid() -> None:
    assert result_type({}) == "complete"
    assert result_type({"resultType": "input_required"}) == "input_required"
    assert result_type({"resultType": "task"}, tasks_declared=True) == "task"
    with pytest.raises(RemoteProtocolError, match="unrecognised resultType 'task'"):
        result_type({"resultType": "task"})
    with pytest.raises(RemoteProtocolError, match="unrecognised resultType 'partial'"):
        result_type({"resultType": "partial"})


def test_read_request_meta() -> None:
    assert read_request_meta({}) == (None, None)
    assert read_request_meta({"_meta": {"progressToken": 1}}) == (None, None)
    assert read_request_meta({"_meta": {META_PROTOCOL_VERSION: "v", META_CLIENT_CAPABILITIES: {}}}) == ("v", {})
    with pytest.raises(RemoteProtocolError, match="must carry both"):
        read_request_meta({"_meta": {META_PROTOCOL_VERSION: "2026-07-28"}})
