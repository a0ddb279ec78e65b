"""The conformance fixture server (tests/fixtures/conformance_server.py) over stdio, as ``warden run`` fronts it.

The harness itself only speaks HTTP and runs later, with the transports; these checks keep the fixture honest in
between: it starts, serves both eras, and offers every name the harness calls, so a broken fixture shows up here
and not as a wall of harness failures. The names below are the ones the 0.1.16 and 0.2.0-alpha.12 dist bundles
call (tests/conformance/README.md says how they were found).
"""

from __future__ import annotations

import os
from typing import Any

from mcp import Client, StdioServerParameters
from mcp.client.context import ClientRequestContext
from mcp.types import (
    CreateMessageRequestParams,
    CreateMessageResult,
    ElicitRequestParams,
    ElicitResult,
    ListRootsResult,
    Root,
    TextContent,
)

from tests.support import FIXTURES, PYTHON

HARNESS_TOOLS = {
    "test_simple_text", "test_image_content", "test_audio_content", "test_embedded_resource",
    "test_multiple_content_types", "test_tool_with_logging", "test_error_handling", "test_tool_with_progress",
    "test_sampling", "test_elicitation", "test_elicitation_sep1034_defaults", "test_elicitation_sep1330_enums",
    "test_reconnection", "json_schema_2020_12_tool", "test_missing_capability", "test_streaming_elicitation",
    "test_logging_tool", "test_x_mcp_header", "test_trigger_tool_change", "test_trigger_prompt_change",
    "test_input_required_result_elicitation", "test_input_required_result_sampling",
    "test_input_required_result_list_roots", "test_input_required_result_request_state",
    "test_input_required_result_multiple_inputs", "test_input_required_result_multi_round",
    "test_input_required_result_tampered_state", "test_input_required_result_capabilities",
}
HARNESS_PROMPTS = {
    "test_simple_prompt", "test_prompt_with_arguments", "test_prompt_with_embedded_resource",
    "test_prompt_with_image", "test_input_required_result_prompt",
}
HARNESS_RESOURCES = {"test://static-text", "test://static-binary", "test://watched-resource"}


def fixture_params() -> StdioServerParameters:
    return StdioServerParameters(command=PYTHON, args=[str(FIXTURES / "conformance_server.py")],
                                 env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})


async def answer_elicitation(ctx: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
    return ElicitResult(action="accept", content={"name": "Alice", "username": "alice", "email": "a@example.invalid"})


async def answer_sampling(ctx: ClientRequestContext, params: CreateMessageRequestParams) -> CreateMessageResult:
    return CreateMessageResult(role="assistant", content=TextContent(type="text", text="Paris"), model="m",
                               stop_reason="endTurn")


async def answer_roots(ctx: ClientRequestContext) -> ListRootsResult:
    return ListRootsResult(roots=[Root(uri="file:///tmp/root", name="root")])


def text_of(result: Any) -> str:
    return "".join(block.text for block in result.content if isinstance(block, TextContent))


async def check_names(client: Client) -> None:
    tools = {tool.name for tool in (await client.list_tools()).tools}
    prompts = {prompt.name for prompt in (await client.list_prompts()).prompts}
    resources = {str(resource.uri) for resource in (await client.list_resources()).resources}
    templates = {t.uri_template for t in (await client.list_resource_templates()).resource_templates}
    assert tools == HARNESS_TOOLS
    assert prompts == HARNESS_PROMPTS
    assert resources == HARNESS_RESOURCES
    assert templates == {"test://template/{id}/data"}
    assert text_of(await client.call_tool("test_simple_text", {})) == "This is a simple text response for testing."
    error = await client.call_tool("test_error_handling", {})
    assert error.is_error
    assert text_of(error) == "This tool intentionally returns an error for testing"


async def test_fixture_legacy_era() -> None:
    """2025-11-25: every harness name is there, and the fixture asks the client mid-call, on the wire."""
    async with Client(fixture_params(), mode="legacy", elicitation_callback=answer_elicitation,
                      sampling_callback=answer_sampling) as client:
        assert client.protocol_version == "2025-11-25"
        await check_names(client)
        assert text_of(await client.call_tool("test_sampling", {"prompt": "capital?"})) == "LLM response: Paris"
        elicited = text_of(await client.call_tool("test_elicitation", {"message": "who?"}))
        assert elicited.startswith("User response: Elicitation completed: action=accept")


async def test_fixture_modern_era() -> None:
    """2026-07-28: the same names, and questions arrive as InputRequiredResult; the SDK client's retries finish
    them (requestState echoed, sealed by the SDK)."""
    async with Client(fixture_params(), mode="auto", elicitation_callback=answer_elicitation,
                      sampling_callback=answer_sampling, list_roots_callback=answer_roots) as client:
        assert client.protocol_version == "2026-07-28"
        await check_names(client)
        assert text_of(await client.call_tool("test_input_required_result_elicitation", {})) == "Hello, Alice!"
        assert text_of(await client.call_tool("test_input_required_result_sampling", {})) == "Model said: Paris"
        roots = text_of(await client.call_tool("test_input_required_result_list_roots", {}))
        assert roots == "Client exposed 1 root(s): file:///tmp/root"
        state = text_of(await client.call_tool("test_input_required_result_request_state", {}))
        assert state.startswith("state-ok")
        assert text_of(await client.call_tool("test_input_required_result_multiple_inputs", {})) == (
            "All inputs received."
        )
