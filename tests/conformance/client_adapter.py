#!/usr/bin/env python3
"""The conformance harness's client: a host that reaches the harness's mock server through ``warden run``.

``@modelcontextprotocol/conformance client --command "python client_adapter.py" --scenario NAME`` starts a mock
MCP server and runs this script with the mock's URL as its last argument and the scenario's name in
``MCP_CONFORMANCE_SCENARIO``. The script is what a real host would be: the Python SDK ``Client`` over stdio,
talking to ``warden run -- URL``. So the harness judges what *warden* puts on the wire as the mock's client -
its era probe, headers, sessions, resumption, MRTR rounds. The script does what each scenario asks of a host
(calls, answers to questions) and exits 0 when its calls finished; any failure exits non-zero.

warden runs with its own throw-away state dir and a config that trusts what it sees on first use, every
capability on: the scenarios test the protocol, not the pins (a pin-gated warden would refuse every call of a
mock it has never seen). The host's era: legacy for the 2025 scenarios (so a legacy mock's questions reach it on
the wire), auto (which reaches 2026-07-28 with warden) for the 2026 ones; ``WARDEN_ADAPTER_HOST=legacy|auto``
overrides it (``sep-2322-client-request-state`` is worth running both ways: with a legacy host warden runs the
MRTR rounds itself). warden's diagnostics go to this script's stderr, which the harness keeps.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters, types
from mcp.client.session import ClientRequestContext
from mcp.shared.exceptions import MCPError

WARDEN = str(Path(sys.executable).parent / "warden")

CONFIG = """
[defaults]
on_new = "tofu"
on_changed = "ask"

[defaults.capabilities]
sampling = "with-tools"
sampling_context = true
elicitation = "url"
roots = ["/"]
"""

MODERN_SCENARIOS = frozenset({
    "request-metadata", "http-standard-headers", "http-custom-headers", "http-invalid-tool-headers",
    "json-schema-ref-no-deref", "sep-2322-client-request-state",
})


def fill_form(schema: dict[str, Any]) -> dict[str, Any]:
    """What a user accepting a form would send: every field, with its default where the schema gives one
    (SEP-1034 puts applying defaults on the client), else a plausible value of its type."""
    content: dict[str, Any] = {}
    for name, prop in (schema.get("properties") or {}).items():
        if not isinstance(prop, dict):
            continue
        if "default" in prop:
            content[name] = prop["default"]
        elif isinstance(prop.get("enum"), list) and prop["enum"]:
            content[name] = prop["enum"][0]
        else:
            content[name] = {"boolean": True, "integer": 1, "number": 1.0}.get(str(prop.get("type")), "warden")
    return content


async def accept_with_defaults(context: ClientRequestContext, params: types.ElicitRequestParams,
                               ) -> types.ElicitResult | types.ErrorData:
    schema = getattr(params, "requested_schema", None) or {}
    if not isinstance(schema, dict):
        schema = schema.model_dump(by_alias=True, exclude_none=True)
    return types.ElicitResult(action="accept", content=fill_form(schema))


def expect_ok(result: types.CallToolResult, what: str) -> None:
    if result.is_error:
        raise SystemExit(f"{what} failed: {result.content}")


async def scenario_initialize(client: Client, context: dict[str, Any]) -> None:
    await client.list_tools()


async def scenario_tools_call(client: Client, context: dict[str, Any]) -> None:
    tools = await client.list_tools()
    if "add_numbers" not in [t.name for t in tools.tools]:
        raise SystemExit(f"add_numbers not listed: {[t.name for t in tools.tools]}")
    expect_ok(await client.call_tool("add_numbers", {"a": 2, "b": 3}), "add_numbers")


async def scenario_elicitation_defaults(client: Client, context: dict[str, Any]) -> None:
    await client.list_tools()
    expect_ok(await client.call_tool("test_client_elicitation_defaults", {}), "test_client_elicitation_defaults")


async def scenario_sse_retry(client: Client, context: dict[str, Any]) -> None:
    await client.list_tools()
    expect_ok(await client.call_tool("test_reconnection", {}), "test_reconnection")


async def scenario_request_metadata(client: Client, context: dict[str, Any]) -> None:
    tools = await client.list_tools()
    for tool in tools.tools[:1]:
        await client.call_tool(tool.name, {})


async def scenario_standard_headers(client: Client, context: dict[str, Any]) -> None:
    await client.list_tools()
    expect_ok(await client.call_tool("test_headers", {}), "test_headers")
    expect_ok(await client.call_tool("my-hyphenated-tool", {}), "my-hyphenated-tool")
    await client.list_resources()
    for uri in ("file:///path/to/file%20name.txt", "https://example.com/resource?id=123"):
        await client.read_resource(uri)
    await client.list_prompts()
    await client.get_prompt("test_prompt")


async def scenario_custom_headers(client: Client, context: dict[str, Any]) -> None:
    await client.list_tools()
    for call in context.get("toolCalls") or []:
        expect_ok(await client.call_tool(call["name"], call.get("arguments") or {}), call["name"])


async def scenario_invalid_tool_headers(client: Client, context: dict[str, Any]) -> None:
    tools = await client.list_tools()
    names = [t.name for t in tools.tools]
    if names != ["valid_tool"]:
        raise SystemExit(f"warden should list only valid_tool, listed {names}")
    expect_ok(await client.call_tool("valid_tool", {"region": "us-west1"}), "valid_tool")
    # a tool warden excluded must be refused by warden, never reach the server
    for name in ("invalid_empty_header", "invalid_number_header", "invalid_duplicate_diff_case"):
        try:
            result = await client.call_tool(name, {"region": "x", "value": 1})
        except MCPError:
            continue
        if not result.is_error:
            raise SystemExit(f"warden let the excluded tool {name} through")


async def scenario_ref_no_deref(client: Client, context: dict[str, Any]) -> None:
    tools = await client.list_tools()
    if "lookup_user" not in [t.name for t in tools.tools]:
        raise SystemExit(f"lookup_user not listed: {[t.name for t in tools.tools]}")


async def scenario_auth(client: Client, context: dict[str, Any]) -> None:
    """Every ``auth/*`` scenario: the mock answers warden with 401 and its authorization server; the adapter is
    the user who consented (warden runs with ``--oauth-browser always`` and ``oauth_browser.py`` as ``$BROWSER``). Two
    requests after the handshake: a listing and a call, which is what the step-up and migration mocks challenge."""
    tools = await client.list_tools()
    names = [t.name for t in tools.tools]
    if names:
        expect_ok(await client.call_tool(names[0], {}), names[0])


async def scenario_request_state(client: Client, context: dict[str, Any]) -> None:
    await client.list_tools()
    for name in ("test_mrtr_echo_state", "test_mrtr_no_state", "test_mrtr_unrelated", "test_mrtr_no_result_type"):
        expect_ok(await client.call_tool(name, {}), name)


SCENARIOS: dict[str, Callable[[Client, dict[str, Any]], Awaitable[None]]] = {
    "initialize": scenario_initialize,
    "tools_call": scenario_tools_call,
    "elicitation-sep1034-client-defaults": scenario_elicitation_defaults,
    "sse-retry": scenario_sse_retry,
    "request-metadata": scenario_request_metadata,
    "http-standard-headers": scenario_standard_headers,
    "http-custom-headers": scenario_custom_headers,
    "http-invalid-tool-headers": scenario_invalid_tool_headers,
    "json-schema-ref-no-deref": scenario_ref_no_deref,
    "sep-2322-client-request-state": scenario_request_state,
}


LEGACY_HOST_SCENARIOS = frozenset({"sep-2322-client-request-state"})
"""Run with a legacy host by default: warden then answers the mock's input requests itself (PX08), which is what
the scenario should judge. ``WARDEN_ADAPTER_HOST=auto`` relays them to a 2026 host instead."""


CIMD_URL = "https://conformance-test.local/client-metadata.json"
"""The client ID metadata document URL the harness's ``auth/basic-cimd`` expects a client to use."""


def oauth_args(scenario: str, context: dict[str, Any], env: dict[str, str]) -> list[str]:
    """warden's OAuth flags for an ``auth/*`` scenario: consent given (the adapter is the browser), warden's client
    ID metadata document URL, and the pre-registered client when the scenario hands one over (its secret through
    the environment, as warden requires)."""
    if not scenario.startswith("auth/"):
        return []
    args = ["--oauth-browser", "always", "--oauth-client-metadata-url", CIMD_URL, "--oauth-timeout", "20"]
    if context.get("client_id"):
        args += ["--oauth-client-id", context["client_id"]]
        if context.get("client_secret"):
            env["CONFORMANCE_CLIENT_SECRET"] = context["client_secret"]
            args += ["--oauth-client-secret-env", "CONFORMANCE_CLIENT_SECRET"]
        if context.get("issuer"):
            args += ["--oauth-issuer", context["issuer"]]
    env["BROWSER"] = f"{sys.executable} {Path(__file__).resolve().parent / 'oauth_browser.py'} %s"
    return args


def host_mode(scenario: str) -> str:
    chosen = os.environ.get("WARDEN_ADAPTER_HOST")
    if chosen in ("legacy", "auto"):
        return chosen
    if scenario in LEGACY_HOST_SCENARIOS:
        return "legacy"
    modern = scenario in MODERN_SCENARIOS or os.environ.get("MCP_CONFORMANCE_PROTOCOL_VERSION") == "2026-07-28"
    return "auto" if modern else "legacy"


async def run(scenario: str, url: str, context: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory(prefix="warden-conformance-") as tmp:
        config = Path(tmp) / "warden.toml"
        config.write_text(CONFIG)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": tmp}
        args = ["--state-dir", str(Path(tmp) / "state"), "--config", str(config), "run",
                *oauth_args(scenario, context, env), "--", url]
        if os.environ.get("WARDEN_ADAPTER_VERBOSE"):
            args.insert(0, "-v")
        server = StdioServerParameters(command=WARDEN, args=args, env=env)
        async with Client(server, mode=host_mode(scenario), elicitation_callback=accept_with_defaults,
                          read_timeout_seconds=30) as client:
            await SCENARIOS.get(scenario, scenario_auth)(client, context)


def main(argv: list[str]) -> int:
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    if len(argv) < 2 or (scenario not in SCENARIOS and not scenario.startswith("auth/")):
        print(f"usage: MCP_CONFORMANCE_SCENARIO=<{'|'.join(SCENARIOS)}> {argv[0]} URL", file=sys.stderr)
        return 2
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    anyio.run(run, scenario, argv[-1], context, backend="trio")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
