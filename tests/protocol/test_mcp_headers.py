"""Mcp-* headers of 2026-07-28 Streamable HTTP: value encoding, x-mcp-header validity, client emission and
server validation. Vectors come from the spec (streamable-http.mdx, server/tools.mdx), SEP-2243's conformance
tables and the conformance suite 0.2.0-alpha.12 (http-custom-headers, http-invalid-tool-headers,
http-header-validation, http-custom-header-server-validation, server-stateless)."""

from __future__ import annotations

import base64
import contextlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from warden.errors import LocalProtocolError, RemoteProtocolError
from warden.protocol.mcp_headers import (
    MAX_SAFE_INTEGER,
    HeaderValueError,
    ParamHeader,
    Rejection,
    ToolHeaders,
    check_input_schema,
    check_tool_headers,
    decode_header_value,
    encode_header_value,
    param_headers,
    request_headers,
    unrecognized_param_headers,
    validate_request_headers,
)
from warden.protocol.messages import HEADER_MISMATCH, INVALID_PARAMS, UNSUPPORTED_PROTOCOL_VERSION

V = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": V,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
}


def schema(**props: Any) -> dict[str, Any]:
    return {"type": "object", "properties": props}


def hdrs(*pairs: tuple[str, str]) -> list[tuple[bytes, bytes]]:
    return [(n.encode(), v.encode("utf-8")) for n, v in pairs]


def base(method: str = "tools/list", name: str | None = None) -> list[tuple[str, str]]:
    pairs = [("MCP-Protocol-Version", V), ("Mcp-Method", method)]
    if name is not None:
        pairs.append(("Mcp-Name", name))
    return pairs


# ------------------------------------------------------------------------------------------ value encoding


SPEC_ENCODING = [
    # 2026-07-28 streamable-http.mdx "Encoding examples"
    ("us-west1", "us-west1"),
    ("Hello, 世界", "=?base64?SGVsbG8sIOS4lueVjA==?="),
    (" padded ", "=?base64?IHBhZGRlZCA=?="),
    ("line1\nline2", "=?base64?bGluZTEKbGluZTI=?="),
    ("=?base64?literal?=", "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?="),
    # SEP-2243 "Value Encoding Edge Cases"
    (" us-west1", "=?base64?IHVzLXdlc3Qx?="),
    ("us-west1 ", "=?base64?dXMtd2VzdDEg?="),
    (" us-west1 ", "=?base64?IHVzLXdlc3QxIA==?="),
    ("us west 1", "us west 1"),
    ("true", "true"),
    ("42", "42"),
    ("日本語", "=?base64?5pel5pys6Kqe?="),
    ("line1\r\nline2", "=?base64?bGluZTENCmxpbmUy?="),
    ("", ""),
]


@pytest.mark.parametrize(("value", "wire"), SPEC_ENCODING)
def test_HM09_spec_encoding_vectors(value: str, wire: str) -> None:
    """covers: HM09 - plain values stay plain, unsafe ones and sentinel look-alikes get the Base64 sentinel."""
    assert encode_header_value(value) == wire
    assert decode_header_value(wire) == value


def test_HM10_tab_anywhere_is_base64() -> None:
    """covers: HM10"""
    assert encode_header_value("\tindented") == "=?base64?CWluZGVudGVk?="
    assert encode_header_value("in\tside") == "=?base64?" + base64.b64encode(b"in\tside").decode() + "?="


@pytest.mark.parametrize("value", ["a\x00b", "a\x7fb", "a\x1bb", "é", "\u2028"])
def test_HM09_control_and_non_ascii_are_encoded(value: str) -> None:
    """covers: HM09"""
    wire = encode_header_value(value)
    assert wire.startswith("=?base64?")
    assert wire.endswith("?=")
    assert decode_header_value(wire) == value


def test_HM09_sentinel_shapes() -> None:
    """covers: HM09 - only values that start with the prefix AND end with the suffix look like the sentinel."""
    assert encode_header_value("=?base64?") == "=?base64?"
    assert encode_header_value("=?base64?=") == "=?base64?="  # prefix and suffix would overlap: not the shape
    assert encode_header_value("=?base64??=").startswith("=?base64?PT9")
    assert encode_header_value("=?BASE64?x?=") == "=?BASE64?x?="


def test_HM09_lone_surrogate_is_refused_locally() -> None:
    """covers: HM09"""
    with pytest.raises(LocalProtocolError, match="not valid Unicode"):
        encode_header_value("\ud800")


SEP_DECODING = [
    ("=?base64?SGVsbG8=?=", "Hello"),
    ("SGVsbG8=", "SGVsbG8="),  # missing prefix: literal
    ("=?base64?SGVsbG8=", "=?base64?SGVsbG8="),  # missing suffix: literal
    ("=?BASE64?SGVsbG8=?=", "=?BASE64?SGVsbG8=?="),  # non-lowercase prefix: literal
    ("=?base64??=", ""),
]


@pytest.mark.parametrize(("wire", "value"), SEP_DECODING)
def test_PX26_sentinel_only_with_exact_markers(wire: str, value: str) -> None:
    """covers: PX26"""
    assert decode_header_value(wire) == value


@pytest.mark.parametrize(
    ("wire", "reason"),
    [
        ("=?base64?SGVsbG8?=", "not valid Base64"),  # SEP-2243: invalid padding
        ("=?base64?SGVs!!!bG8=?=", "not valid Base64"),  # SEP-2243: invalid characters
        ("=?base64?SGVsbG9=?=", "not canonical"),  # non-zero trailing bits: "Hello" has one canonical form
        ("=?base64?/w==?=", "not decode to UTF-8"),
        ("a\rb", "characters an HTTP field may not carry"),
        ("a\x00b", "characters an HTTP field may not carry"),
        ("Région", "characters an HTTP field may not carry"),
    ],
)
def test_PX26_invalid_values_raise_header_value_error(wire: str, reason: str) -> None:
    """covers: PX26"""
    with pytest.raises(HeaderValueError, match=reason) as info:
        decode_header_value(wire)
    assert info.value.jsonrpc_code == HEADER_MISMATCH
    assert isinstance(info.value, RemoteProtocolError)


@given(st.text())
def test_HM09_round_trip_and_wire_safety(value: str) -> None:
    """covers: HM09, HM10 - every text survives encode→decode, and what goes on the wire is a safe plain value."""
    wire = encode_header_value(value)
    assert decode_header_value(wire) == value
    assert all(0x20 <= ord(c) <= 0x7E for c in wire)
    assert wire == wire.strip(" \t")


@given(st.text())
def test_PX26_decode_raises_only_its_own_error(value: str) -> None:
    """covers: PX26"""
    with contextlib.suppress(HeaderValueError):
        decode_header_value(value)


@given(st.binary())
def test_PX26_any_payload_inside_markers(payload: bytes) -> None:
    """covers: PX26 - arbitrary bytes in the payload: decodes to text or raises HeaderValueError, nothing else."""
    wire = "=?base64?" + payload.decode("latin-1") + "?="
    with contextlib.suppress(HeaderValueError):
        decode_header_value(wire)


# ------------------------------------------------------------------------------ x-mcp-header annotations


# The ten invalid tools of the conformance suite's http-invalid-tool-headers scenario, plus its valid one.
CONFORMANCE_TOOLS = [
    {"name": "valid_tool", "inputSchema": schema(region={"type": "string", "x-mcp-header": "Region"})},
    {"name": "invalid_empty_header", "inputSchema": schema(value={"type": "string", "x-mcp-header": ""})},
    {"name": "invalid_object_header", "inputSchema": schema(data={"type": "object", "x-mcp-header": "Data"})},
    {
        "name": "invalid_array_header",
        "inputSchema": schema(items={"type": "array", "items": {"type": "string"}, "x-mcp-header": "Items"}),
    },
    {"name": "invalid_null_header", "inputSchema": schema(nil={"type": "null", "x-mcp-header": "Nil"})},
    {"name": "invalid_number_header", "inputSchema": schema(score={"type": "number", "x-mcp-header": "Score"})},
    {
        "name": "invalid_duplicate_same_case",
        "inputSchema": schema(
            field1={"type": "string", "x-mcp-header": "Region"}, field2={"type": "string", "x-mcp-header": "Region"}
        ),
    },
    {
        "name": "invalid_duplicate_diff_case",
        "inputSchema": schema(
            field1={"type": "string", "x-mcp-header": "MyField"}, field2={"type": "string", "x-mcp-header": "myfield"}
        ),
    },
    {"name": "invalid_space_in_name", "inputSchema": schema(value={"type": "string", "x-mcp-header": "My Region"})},
    {
        "name": "invalid_colon_in_name",
        "inputSchema": schema(value={"type": "string", "x-mcp-header": "Region:Primary"}),
    },
    {"name": "invalid_non_ascii_name", "inputSchema": schema(value={"type": "string", "x-mcp-header": "Région"})},
    {"name": "invalid_control_char_name", "inputSchema": schema(value={"type": "string", "x-mcp-header": "Region\t1"})},
]


def test_HM11_invalid_tools_excluded_valid_tool_kept() -> None:
    """covers: HM11, PX23 - filtering the conformance tool list keeps exactly the valid tool."""
    kept = [tool["name"] for tool in CONFORMANCE_TOOLS if check_tool_headers(tool).valid]
    assert kept == ["valid_tool"]
    assert check_tool_headers(CONFORMANCE_TOOLS[0]) == ToolHeaders(
        params=(ParamHeader(path=("region",), name="Region", type="string"),)
    )


@pytest.mark.parametrize(
    ("annotation", "reason"),
    [
        ("", "is empty"),
        ("My Region", "not an HTTP token"),
        ("Region:Primary", "not an HTTP token"),
        ("Région", "not an HTTP token"),
        ("Region\t1", "not an HTTP token"),
        ("Re\r\ngion", "not an HTTP token"),
        ("Re\x00gion", "not an HTTP token"),
        ("Re\x7fgion", "not an HTTP token"),
        ("(Region)", "not an HTTP token"),
        (5, "is a int, not a string"),
        (None, "is a NoneType, not a string"),
        (["Region"], "is a list, not a string"),
    ],
)
def test_HM12_invalid_annotation_values(annotation: object, reason: str) -> None:
    """covers: HM12"""
    result = check_input_schema(schema(value={"type": "string", "x-mcp-header": annotation}))
    assert not result.valid
    assert result.params == ()
    assert result.problem is not None
    assert reason in result.problem
    assert "/properties/value" in result.problem


def test_HM12_every_tchar_is_accepted() -> None:
    """covers: HM12"""
    token = "!#$%&'*+-.^_`|~09AZaz"
    result = check_input_schema(schema(v={"type": "string", "x-mcp-header": token}))
    assert result.params == (ParamHeader(("v",), token, "string"),)


@pytest.mark.parametrize(("first", "second"), [("Region", "Region"), ("MyField", "myfield"), ("Region", "REGION")])
def test_HM13_case_insensitive_duplicates(first: str, second: str) -> None:
    """covers: HM13"""
    result = check_input_schema(
        schema(a={"type": "string", "x-mcp-header": first}, b={"type": "string", "x-mcp-header": second})
    )
    assert result.problem is not None
    assert "repeats" in result.problem


def test_HM13_duplicates_across_nesting_levels() -> None:
    """covers: HM13 - uniqueness is over the whole inputSchema, not per object."""
    result = check_input_schema(
        schema(a={"type": "string", "x-mcp-header": "Zone"}, o=schema(b={"type": "integer", "x-mcp-header": "zone"}))
    )
    assert result.problem is not None
    assert "repeats 'Zone'" in result.problem


@pytest.mark.parametrize("declared", ["number", "object", "array", "null", ["string", "null"], ["string"], None, 7])
def test_HM14_only_string_integer_boolean(declared: object) -> None:
    """covers: HM14"""
    prop: dict[str, Any] = {"x-mcp-header": "X"}
    if declared is not None:
        prop["type"] = declared
    result = check_input_schema(schema(x=prop))
    assert result.problem is not None
    assert "only 'string', 'integer' or 'boolean' may be mirrored" in result.problem


@pytest.mark.parametrize("declared", ["string", "integer", "boolean"])
def test_HM14_primitive_types_are_valid(declared: str) -> None:
    """covers: HM14"""
    assert check_input_schema(schema(x={"type": declared, "x-mcp-header": "X"})).params == (
        ParamHeader(("x",), "X", declared),
    )


UNREACHABLE = {
    "root": {"type": "string", "x-mcp-header": "Root"},
    "items": schema(a={"type": "array", "items": {"type": "string", "x-mcp-header": "A"}}),
    "prefixItems": schema(a={"type": "array", "prefixItems": [{"type": "string", "x-mcp-header": "A"}]}),
    "items-array (draft-07 tuple)": schema(a={"type": "array", "items": [{"type": "string", "x-mcp-header": "A"}]}),
    "contains": schema(a={"type": "array", "contains": {"type": "string", "x-mcp-header": "A"}}),
    "oneOf": {"type": "object", "oneOf": [schema(a={"type": "string", "x-mcp-header": "A"})]},
    "anyOf": schema(a={"anyOf": [{"type": "string", "x-mcp-header": "A"}]}),
    "allOf": {"allOf": [schema(a={"type": "string", "x-mcp-header": "A"})]},
    "not": {"type": "object", "not": schema(a={"type": "string", "x-mcp-header": "A"})},
    "if": {"type": "object", "if": schema(a={"type": "string", "x-mcp-header": "A"})},
    "then": {"type": "object", "then": schema(a={"type": "string", "x-mcp-header": "A"})},
    "else": {"type": "object", "else": schema(a={"type": "string", "x-mcp-header": "A"})},
    "$ref target in $defs": {
        "type": "object",
        "$defs": {"r": {"type": "string", "x-mcp-header": "A"}},
        "properties": {"a": {"$ref": "#/$defs/r"}},
    },
    "definitions": {"definitions": {"r": {"type": "string", "x-mcp-header": "A"}}},
    "additionalProperties": {"type": "object", "additionalProperties": {"type": "string", "x-mcp-header": "A"}},
    "patternProperties": {"type": "object", "patternProperties": {"^a": {"type": "string", "x-mcp-header": "A"}}},
    "dependentSchemas": {"dependentSchemas": {"a": schema(b={"type": "string", "x-mcp-header": "A"})}},
    "unknown keyword": {"type": "object", "x-vendor": {"type": "string", "x-mcp-header": "A"}},
    "properties under items": schema(
        a={"type": "array", "items": schema(b={"type": "string", "x-mcp-header": "A"})}
    ),
}


@pytest.mark.parametrize("case", sorted(UNREACHABLE))
def test_HM15_annotation_off_the_properties_chain_is_invalid(case: str) -> None:
    """covers: HM15"""
    result = check_input_schema(UNREACHABLE[case])
    assert result.problem is not None
    assert ("schema root" if case == "root" else "reached through `properties` keys alone") in result.problem


def test_HM15_nested_properties_chain_is_valid() -> None:
    """covers: HM15, HM06 - a chain of `properties` keys at any depth is reachable."""
    result = check_input_schema(
        schema(
            region={"type": "string", "x-mcp-header": "Region"},
            target=schema(account=schema(id={"type": "integer", "x-mcp-header": "Account"})),
        )
    )
    assert result.params == (
        ParamHeader(("region",), "Region", "string"),
        ParamHeader(("target", "account", "id"), "Account", "integer"),
    )


def test_HM15_instance_data_is_not_searched_and_property_names_are_names() -> None:
    """covers: HM15 - const/enum/default/examples hold data; a property named like a keyword is a property."""
    result = check_input_schema(
        {
            "type": "object",
            "default": {"x-mcp-header": "NotAnAnnotation"},
            "examples": [{"x-mcp-header": "Nope"}],
            "properties": {
                "items": {"type": "string", "x-mcp-header": "Items"},
                "enum": {"type": "boolean", "x-mcp-header": "Enum", "const": {"x-mcp-header": "x y"}},
            },
        }
    )
    assert result.params == (ParamHeader(("items",), "Items", "string"), ParamHeader(("enum",), "Enum", "boolean"))


def test_HM15_ref_is_not_followed_and_no_annotation_means_valid() -> None:
    """covers: HM15 - the conformance json-schema-ref-no-deref tool: network $ref, nothing annotated, valid."""
    tool = {
        "name": "lookup_user",
        "inputSchema": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "$defs": {"userId": {"type": "string", "pattern": "^[a-z0-9-]+$"}},
            "properties": {"id": {"$ref": "#/$defs/userId"}, "profile": {"$ref": "http://127.0.0.1:1/c.json"}},
            "required": ["id"],
        },
    }
    assert check_tool_headers(tool) == ToolHeaders(params=())
    assert check_tool_headers({"name": "no-schema"}).valid


def test_HM15_deep_nesting_does_not_overflow() -> None:
    """covers: HM15 - the walk is iterative; 100k levels of `properties` are fine."""
    node: dict[str, Any] = {"type": "string", "x-mcp-header": "Deep"}
    for _ in range(100_000):
        node = {"type": "object", "properties": {"p": node}}
    result = check_input_schema(node)
    assert result.valid
    assert len(result.params[0].path) == 100_000


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(
        st.sampled_from(["type", "properties", "items", "x-mcp-header", "oneOf", "a", "enum", "$ref", "not"]),
        children,
        max_size=4,
    ),
    max_leaves=30,
)


@given(JSON)
def test_HM15_checker_is_total(value: object) -> None:
    """covers: HM11, HM15 - any JSON value gets a verdict, never an exception; a verdict with params is valid."""
    result = check_input_schema(value)
    assert (result.problem is None) or (result.params == ())
    for param in result.params:
        assert param.type in {"string", "integer", "boolean"}
        assert param.path


# ------------------------------------------------------------------------------------- client emission

CUSTOM = {
    "type": "object",
    "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"},
        "priority": {"type": "integer", "x-mcp-header": "Priority"},
        "verbose": {"type": "boolean", "x-mcp-header": "Verbose"},
        "debug": {"type": "boolean", "x-mcp-header": "Debug"},
        "empty_val": {"type": "string", "x-mcp-header": "EmptyVal"},
        "method_val": {"type": "string", "x-mcp-header": "Method"},
        "float_val": {"type": "number"},
        "non_ascii_val": {"type": "string", "x-mcp-header": "NonAscii"},
        "whitespace_val": {"type": "string", "x-mcp-header": "Whitespace"},
        "leading_space_val": {"type": "string", "x-mcp-header": "LeadingSpace"},
        "trailing_space_val": {"type": "string", "x-mcp-header": "TrailingSpace"},
        "internal_space_val": {"type": "string", "x-mcp-header": "InternalSpace"},
        "control_char_val": {"type": "string", "x-mcp-header": "ControlChar"},
        "crlf_val": {"type": "string", "x-mcp-header": "CrLf"},
        "tab_val": {"type": "string", "x-mcp-header": "Tab"},
        "query": {"type": "string"},
    },
}
CUSTOM_ARGS = {
    "region": "us-west1",
    "priority": 42,
    "verbose": False,
    "debug": True,
    "empty_val": "",
    "method_val": "test-method",
    "float_val": 3.14159,
    "non_ascii_val": "Hello, 世界",
    "whitespace_val": " padded ",
    "leading_space_val": " us-west1",
    "trailing_space_val": "us-west1 ",
    "internal_space_val": "us west 1",
    "control_char_val": "line1\nline2",
    "crlf_val": "line1\r\nline2",
    "tab_val": "\tindented",
    "query": "SELECT * FROM users",
}


def test_HM06_HM07_HM08_conformance_custom_headers() -> None:
    """covers: HM06, HM07, HM08, HM09, HM10 - the conformance http-custom-headers call, header for header."""
    tool = check_input_schema(CUSTOM)
    assert dict(param_headers(tool, CUSTOM_ARGS)) == {
        "Mcp-Param-Region": "us-west1",
        "Mcp-Param-Priority": "42",
        "Mcp-Param-Verbose": "false",
        "Mcp-Param-Debug": "true",
        "Mcp-Param-EmptyVal": "",
        "Mcp-Param-Method": "test-method",
        "Mcp-Param-NonAscii": "=?base64?SGVsbG8sIOS4lueVjA==?=",
        "Mcp-Param-Whitespace": "=?base64?IHBhZGRlZCA=?=",
        "Mcp-Param-LeadingSpace": "=?base64?IHVzLXdlc3Qx?=",
        "Mcp-Param-TrailingSpace": "=?base64?dXMtd2VzdDEg?=",
        "Mcp-Param-InternalSpace": "us west 1",
        "Mcp-Param-ControlChar": "=?base64?bGluZTEKbGluZTI=?=",
        "Mcp-Param-CrLf": "=?base64?bGluZTENCmxpbmUy?=",
        "Mcp-Param-Tab": "=?base64?CWluZGVudGVk?=",
    }


def test_HM06_null_and_absent_arguments_give_no_header() -> None:
    """covers: HM06 - the conformance test_custom_headers_null call: verbose is null, so no Mcp-Param-Verbose."""
    tool = check_input_schema(
        schema(
            region={"type": "string", "x-mcp-header": "Region"},
            priority={"type": "integer", "x-mcp-header": "Priority"},
            verbose={"type": "boolean", "x-mcp-header": "Verbose"},
            query={"type": "string"},
        )
    )
    args = {"region": "us-east1", "priority": 1, "verbose": None, "query": "SELECT 1"}
    assert param_headers(tool, args) == [("Mcp-Param-Region", "us-east1"), ("Mcp-Param-Priority", "1")]
    assert param_headers(tool, {}) == []
    assert param_headers(tool, None) == []


def test_HM06_nested_path_extraction() -> None:
    """covers: HM06"""
    tool = check_input_schema(schema(target=schema(account=schema(id={"type": "integer", "x-mcp-header": "Acct"}))))
    assert param_headers(tool, {"target": {"account": {"id": 7}}}) == [("Mcp-Param-Acct", "7")]
    assert param_headers(tool, {"target": {"account": None}}) == []
    assert param_headers(tool, {"target": "not-an-object"}) == []
    assert param_headers(tool, {"target": {"account": {"id": None}}}) == []


@pytest.mark.parametrize(
    ("value", "wire"),
    [(42, "42"), (-7, "-7"), (0, "0"), (42.0, "42"), (MAX_SAFE_INTEGER, "9007199254740991"),
     (-MAX_SAFE_INTEGER, "-9007199254740991"), (True, "true"), (False, "false")],
)
def test_HM08_value_conversion(value: object, wire: str) -> None:
    """covers: HM08"""
    tool = check_input_schema(schema(n={"type": "integer", "x-mcp-header": "N"}))
    assert param_headers(tool, {"n": value}) == [("Mcp-Param-N", wire)]


@pytest.mark.parametrize("value", [MAX_SAFE_INTEGER + 1, -MAX_SAFE_INTEGER - 1, 2**64, 3.5, 1e300, {"a": 1}, [1]])
def test_HM08_unmirrorable_values_are_refused(value: object) -> None:
    """covers: HM08 - out-of-range integers, fractions, objects and arrays have no header form: refuse, -32602."""
    tool = check_input_schema(schema(n={"type": "integer", "x-mcp-header": "N"}))
    with pytest.raises(LocalProtocolError, match="is mirrored into Mcp-Param-N") as info:
        param_headers(tool, {"n": value})
    assert info.value.jsonrpc_code == INVALID_PARAMS


def test_HM11_calling_an_invalid_tool_over_http_is_refused() -> None:
    """covers: HM11"""
    invalid = check_tool_headers(CONFORMANCE_TOOLS[1])
    with pytest.raises(LocalProtocolError, match="x-mcp-header annotations are invalid"):
        param_headers(invalid, {"value": "x"})


def test_HM07_request_headers_standard_and_custom() -> None:
    """covers: HM07, HM09 (Mcp-Name), HM06 - the spec's execute_sql example."""
    tool = check_input_schema(
        schema(region={"type": "string", "x-mcp-header": "Region"}, query={"type": "string"})
    )
    params = {"_meta": META, "name": "execute_sql", "arguments": {"region": "us-west1", "query": "SELECT 1"}}
    assert request_headers("tools/call", params, tool=tool) == [
        ("MCP-Protocol-Version", V),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "execute_sql"),
        ("Mcp-Param-Region", "us-west1"),
    ]
    assert request_headers("resources/read", {"_meta": META, "uri": "file:///path/to/file%20name.txt"}) == [
        ("MCP-Protocol-Version", V),
        ("Mcp-Method", "resources/read"),
        ("Mcp-Name", "file:///path/to/file%20name.txt"),
    ]
    name_header = request_headers("prompts/get", {"_meta": META, "name": "Grüße"})[2]
    assert name_header == ("Mcp-Name", "=?base64?R3LDvMOfZQ==?=")
    assert request_headers("tools/list", {"_meta": META}) == [("MCP-Protocol-Version", V), ("Mcp-Method", "tools/list")]


def test_request_headers_version_comes_from_meta() -> None:
    """The protocol version header mirrors the request's own _meta, whatever it says."""
    meta = {**META, "io.modelcontextprotocol/protocolVersion": "2027-01-01"}
    assert request_headers("server/discover", {"_meta": meta})[0] == ("MCP-Protocol-Version", "2027-01-01")
    with pytest.raises(LocalProtocolError, match="no _meta protocol version"):
        request_headers("tools/list", {})
    with pytest.raises(LocalProtocolError, match="no _meta protocol version"):
        request_headers("tools/list", None)
    with pytest.raises(LocalProtocolError, match="no _meta protocol version"):
        request_headers("tools/list", ["by-position"])  # type: ignore[arg-type]
    with pytest.raises(LocalProtocolError, match=r"no string params\.uri"):
        request_headers("resources/read", {"_meta": META})


# ------------------------------------------------------------------------------------ server validation


def check(
    pairs: list[tuple[str, str]], method: str, params: dict[str, Any] | None, tool: ToolHeaders | None = None
) -> Rejection | None:
    return validate_request_headers(hdrs(*pairs), method, params, tool=tool)


def assert_mismatch(result: Rejection | None, match: str) -> None:
    assert result is not None
    assert result.code == HEADER_MISMATCH
    assert result.http_status == 400
    assert result.message.startswith("Header mismatch: ")
    assert match in result.message, result.message


def test_PX24_valid_requests_pass() -> None:
    """covers: PX24"""
    assert check(base(), "tools/list", {"_meta": META}) is None
    assert check(base("tools/call", "t"), "tools/call", {"_meta": META, "name": "t", "arguments": {}}) is None
    assert check(base("resources/read", "test://static-text"), "resources/read",
                 {"_meta": META, "uri": "test://static-text"}) is None
    assert check(base("tasks/get", "task-1"), "tasks/get", {"_meta": META, "taskId": "task-1"}) is None


def test_PX24_header_names_are_case_insensitive_values_are_not() -> None:
    """covers: PX24 - conformance http-header-validation: mcp-method / MCP-METHOD accepted, TOOLS/LIST refused."""
    params = {"_meta": META}
    assert check([("mcp-protocol-version", V), ("mcp-method", "tools/list")], "tools/list", params) is None
    assert check([("MCP-PROTOCOL-VERSION", V), ("MCP-METHOD", "tools/list")], "tools/list", params) is None
    assert_mismatch(check([("MCP-Protocol-Version", V), ("Mcp-Method", "TOOLS/LIST")], "tools/list", params),
                    "Mcp-Method header value 'TOOLS/LIST' does not match body value 'tools/list'")


def test_PX24_whitespace_around_values_is_not_part_of_them() -> None:
    """covers: PX24 - conformance ServerAcceptsWhitespaceHeaderValue (RFC 9110 §5.5)."""
    params = {"_meta": META, "name": "test_simple_text", "arguments": {}}
    pairs = [("MCP-Protocol-Version", V), ("Mcp-Method", "tools/call"), ("Mcp-Name", "  test_simple_text \t")]
    assert check(pairs, "tools/call", params) is None


@pytest.mark.parametrize(
    ("pairs", "method", "match"),
    [
        ([("Mcp-Method", "tools/list")], "tools/list", "MCP-Protocol-Version header is missing"),
        ([("MCP-Protocol-Version", "2025-11-25"), ("Mcp-Method", "tools/list")], "tools/list",
         "MCP-Protocol-Version header value '2025-11-25' does not match body value '2026-07-28'"),
        ([("MCP-Protocol-Version", V)], "tools/list", "Mcp-Method header is missing"),
        ([("MCP-Protocol-Version", V), ("Mcp-Method", "prompts/list")], "tools/list",
         "Mcp-Method header value 'prompts/list' does not match body value 'tools/list'"),
        ([*base("tools/list"), ("Mcp-Method", "tools/list")], "tools/list", "Mcp-Method header appears 2 times"),
        ([*base(), ("MCP-Protocol-Version", V)], "tools/list", "MCP-Protocol-Version header appears 2 times"),
    ],
)
def test_PX24_version_and_method_mismatches(pairs: list[tuple[str, str]], method: str, match: str) -> None:
    """covers: PX24, SEC05"""
    assert_mismatch(check(pairs, method, {"_meta": META}), match)


@pytest.mark.parametrize(
    ("method", "field", "body", "sent", "match"),
    [
        ("tools/call", "name", "test_simple_text", None, "Mcp-Name header is missing"),
        ("tools/call", "name", "test_simple_text", "wrong_tool_name",
         "Mcp-Name header value 'wrong_tool_name' does not match body value 'test_simple_text'"),
        ("prompts/get", "name", "p", "P", "does not match"),
        ("resources/read", "uri", "test://a", "test://b", "does not match"),
        ("tasks/cancel", "taskId", "t-1", "t-2", "does not match"),
        ("tools/call", "name", "Grüße", "Grüße", "characters an HTTP field may not carry"),
        ("tools/call", "name", "x", "=?base64?eA?=", "not valid Base64"),
        ("tools/call", "name", "=?base64?eA==?=", "=?base64?eA==?=", "does not match body value"),
    ],
)
def test_PX24_name_mismatches(method: str, field: str, body: str, sent: str | None, match: str) -> None:
    """covers: PX24, PX26"""
    assert_mismatch(check(base(method, sent), method, {"_meta": META, field: body}), match)


def test_PX24_name_is_decoded_before_comparison() -> None:
    """covers: PX24, PX26"""
    name = "Grüße, 世界"
    wire = encode_header_value(name)
    assert check(base("prompts/get", wire), "prompts/get", {"_meta": META, "name": name}) is None
    literal = "=?base64?literal?="
    params = {"_meta": META, "name": literal}
    assert check(base("tools/call", encode_header_value(literal)), "tools/call", params) is None


def test_PX24_duplicate_name_header() -> None:
    """covers: PX24 - routers reading the first and last copy would disagree."""
    pairs = [*base("tools/call", "a"), ("mcp-name", "a")]
    assert_mismatch(check(pairs, "tools/call", {"_meta": META, "name": "a"}), "Mcp-Name header appears 2 times")


def test_PX24_raw_bytes_outside_field_grammar() -> None:
    """covers: PX24 - obs-text (bytes >= 0x80) and control bytes in a recognised header are refused."""
    raw = [(b"MCP-Protocol-Version", V.encode()), (b"Mcp-Method", b"tools/call"), (b"Mcp-Name", b"t\xe9")]
    result = validate_request_headers(raw, "tools/call", {"_meta": META, "name": "t\u00e9"})
    assert_mismatch(result, "Mcp-Name header holds characters an HTTP field may not carry")
    raw = [(b"MCP-Protocol-Version", V.encode()), (b"Mcp-Method", b"tools/\x01list")]
    assert_mismatch(validate_request_headers(raw, "tools/list", {"_meta": META}), "Mcp-Method header holds")


@pytest.mark.parametrize(
    ("params", "match"),
    [
        (None, "params._meta is required"),
        ({}, "params._meta is required"),
        ({"_meta": "x"}, "params._meta is required"),
        (["by-position"], "params._meta is required"),
        ({"_meta": {"io.modelcontextprotocol/clientCapabilities": {}}}, "protocolVersion'] must be a string"),
        ({"_meta": {"io.modelcontextprotocol/protocolVersion": V}}, "clientCapabilities'] must be an object"),
        ({"_meta": {**META, "io.modelcontextprotocol/clientCapabilities": []}}, "must be an object"),
    ],
)
def test_meta_is_checked_first(params: Any, match: str) -> None:
    """A body without the required _meta pair is invalid params (400), before any header is looked at."""
    result = check([], "tools/list", params)
    assert result is not None
    assert (result.code, result.http_status) == (INVALID_PARAMS, 400)
    assert match in result.message


def test_name_bearing_method_without_name_is_invalid_params() -> None:
    result = check(base("tools/call", "x"), "tools/call", {"_meta": META})
    assert result is not None
    assert (result.code, result.message) == (INVALID_PARAMS, "params.name must be a string")


def test_unsupported_version_after_header_checks() -> None:
    """conformance server-stateless: a body version the server does not serve is -32022 with data, HTTP 400; but
    a header that disagrees with the body is -32020 first (sep-2575-http-server-header-mismatch-400)."""
    meta = {**META, "io.modelcontextprotocol/protocolVersion": "v999.0.0"}
    pairs = [("MCP-Protocol-Version", "v999.0.0"), ("Mcp-Method", "server/discover")]
    result = check(pairs, "server/discover", {"_meta": meta})
    assert result == Rejection(
        UNSUPPORTED_PROTOCOL_VERSION,
        "Unsupported protocol version",
        {"supported": ["2026-07-28"], "requested": "v999.0.0"},
    )
    assert result.http_status == 400
    pairs = [("MCP-Protocol-Version", V), ("Mcp-Method", "server/discover")]
    assert_mismatch(check(pairs, "server/discover", {"_meta": meta}), "does not match body value 'v999.0.0'")


XTOOL = check_input_schema(
    schema(
        region={"type": "string", "x-mcp-header": "Region"},
        count={"type": "integer", "x-mcp-header": "Count"},
        flag={"type": "boolean", "x-mcp-header": "Flag"},
        nested=schema(zone={"type": "string", "x-mcp-header": "Zone"}),
        query={"type": "string"},
    )
)


def call(args: dict[str, Any], *extra: tuple[str, str], tool: ToolHeaders = XTOOL) -> Rejection | None:
    params = {"_meta": META, "name": "x", "arguments": args}
    return check([*base("tools/call", "x"), *extra], "tools/call", params, tool)


def test_PX25_matching_param_headers_pass() -> None:
    """covers: PX25"""
    args = {"region": "us-west1", "count": 42, "flag": True, "nested": {"zone": "Zürich"}, "query": "q"}
    extra = [(name, value) for name, value in param_headers(XTOOL, args)]
    assert call(args, *extra) is None
    assert call({}) is None
    assert call({"region": None, "nested": None}) is None


@pytest.mark.parametrize(("body", "header"), [(42, "42"), (42, "42.0"), (42.0, "42"), (-7, "-7.000"), (0, "-0")])
def test_PX25_integers_compare_numerically(body: int | float, header: str) -> None:
    """covers: PX25 - 42.0 equals 42."""
    assert call({"count": body}, ("Mcp-Param-Count", header)) is None


@pytest.mark.parametrize("header", ["43", "42.5", "4.2e1", "+42", "0x2a", " ", "forty-two", "=?base64?NDI=?=x"])
def test_PX25_integer_mismatches(header: str) -> None:
    """covers: PX25"""
    assert_mismatch(call({"count": 42}, ("Mcp-Param-Count", header)), "Mcp-Param-Count")


def test_PX25_base64_integer_header_decodes_then_compares() -> None:
    """covers: PX25, PX26"""
    assert call({"count": 42}, ("Mcp-Param-Count", "=?base64?NDI=?=")) is None


def test_PX25_missing_header_for_present_argument() -> None:
    """covers: PX25 - conformance ServerRejectsMissingCustomHeader."""
    assert_mismatch(call({"region": "us-west1"}), "Mcp-Param-Region header is missing but argument 'region' is present")
    assert_mismatch(call({"nested": {"zone": "z"}}), "Mcp-Param-Zone header is missing but argument 'nested.zone'")


def test_PX25_header_without_argument() -> None:
    """covers: PX25 - a header the body never carried would let a router act on a value nobody executes."""
    assert_mismatch(call({}, ("Mcp-Param-Region", "us-west1")), "present but argument 'region' is absent or null")
    assert_mismatch(call({"region": None}, ("Mcp-Param-Region", "x")), "absent or null")


@pytest.mark.parametrize(
    ("args", "header", "match"),
    [
        ({"region": "us-west1"}, ("Mcp-Param-Region", "us-east1"), "does not match argument 'region'"),
        ({"region": " padded "}, ("Mcp-Param-Region", " padded "), "does not match"),  # trimmed on the wire
        ({"flag": True}, ("Mcp-Param-Flag", "True"), "does not match argument 'flag'"),
        ({"flag": False}, ("Mcp-Param-Flag", "0"), "does not match"),
        ({"region": "Hello"}, ("Mcp-Param-Region", "=?base64?SGVsbG8?="), "not valid Base64"),
        ({"region": "Hello"}, ("Mcp-Param-Region", "=?base64?SGVs!!!bG8=?="), "not valid Base64"),
        ({"region": "x"}, ("Mcp-Param-Region", "x\x01"), "characters an HTTP field may not carry"),
        ({"count": 2**60}, ("Mcp-Param-Count", str(2**60)), "not an integer within"),
        ({"count": 1.5}, ("Mcp-Param-Count", "1.5"), "not an integer within"),
        ({"region": ["a"]}, ("Mcp-Param-Region", "a"), "is a list: no header form"),
    ],
)
def test_PX25_param_mismatches(args: dict[str, Any], header: tuple[str, str], match: str) -> None:
    """covers: PX25, PX26"""
    assert_mismatch(call(args, header), match)


def test_PX26_conformance_custom_header_server_validation() -> None:
    """covers: PX26 - the five Base64 cases of the conformance http-custom-header-server-validation scenario."""
    hello = base64.b64encode(b"Hello").decode()
    assert call({"region": "Hello"}, ("Mcp-Param-Region", f"=?base64?{hello}?=")) is None
    assert call({"region": hello}, ("Mcp-Param-Region", hello)) is None
    assert call({"region": f"=?base64?{hello}"}, ("Mcp-Param-Region", f"=?base64?{hello}")) is None
    assert_mismatch(call({"region": "Hello"}, ("Mcp-Param-Region", "=?base64?SGVsbG8?=")), "not valid Base64")
    assert_mismatch(call({"region": "Hello"}, ("Mcp-Param-Region", "=?base64?SGVs!!!bG8=?=")), "not valid Base64")


def test_PX25_duplicate_param_header() -> None:
    """covers: PX25"""
    result = call({"region": "a"}, ("Mcp-Param-Region", "a"), ("mcp-param-region", "a"))
    assert_mismatch(result, "Mcp-Param-Region header appears 2 times")


def test_PX25_arguments_must_be_an_object() -> None:
    """covers: PX25"""
    params = {"_meta": META, "name": "x", "arguments": ["region"]}
    result = check(base("tools/call", "x"), "tools/call", params, XTOOL)
    assert result == Rejection(INVALID_PARAMS, "params.arguments must be an object")


def test_PX27_unrecognised_param_headers_are_ignored_and_forwarded() -> None:
    """covers: PX27"""
    extra = [("Mcp-Param-Tenant", "acme"), ("Mcp-Param-Region", "r"), ("MCP-PARAM-X-Trace", "=?base64?!!?=")]
    assert call({"region": "r"}, *extra) is None
    raw = hdrs(*base("tools/call", "x"), *extra, ("X-Other", "1"))
    assert unrecognized_param_headers(raw, XTOOL) == [
        (b"Mcp-Param-Tenant", b"acme"),
        (b"MCP-PARAM-X-Trace", b"=?base64?!!?="),
    ]
    assert unrecognized_param_headers(raw, None) == [
        (b"Mcp-Param-Tenant", b"acme"),
        (b"Mcp-Param-Region", b"r"),
        (b"MCP-PARAM-X-Trace", b"=?base64?!!?="),
    ]


def test_PX25_invalid_or_unknown_tool_skips_param_checks() -> None:
    """covers: PX25, PX23 - an invalid tool is never listed, so a call to it is refused as unknown elsewhere."""
    invalid = check_tool_headers(CONFORMANCE_TOOLS[5])
    assert call({"score": 1.5}, ("Mcp-Param-Score", "x"), tool=invalid) is None


# --------------------------------------------------------------------- client and server agree (property)

ARG_VALUES = (
    st.none()
    | st.text()
    | st.booleans()
    | st.integers(min_value=-MAX_SAFE_INTEGER, max_value=MAX_SAFE_INTEGER)
)


@given(
    region=ARG_VALUES,
    count=ARG_VALUES,
    zone=ARG_VALUES,
    drop=st.sets(st.sampled_from(["region", "count", "nested"])),
    name=st.text(min_size=1),
)
def test_PX24_PX25_what_warden_sends_warden_accepts(
    region: object, count: object, zone: object, drop: set[str], name: str
) -> None:
    """covers: HM06, HM09, PX24, PX25 - headers built from any call pass validation of that same call; altering
    any one mirrored header makes it fail."""
    args: dict[str, Any] = {"region": region, "count": count, "nested": {"zone": zone}}
    for key in drop:
        del args[key]
    params = {"_meta": META, "name": name, "arguments": args}
    built = request_headers("tools/call", params, tool=XTOOL)
    raw = [(n.encode(), v.encode()) for n, v in built]
    assert validate_request_headers(raw, "tools/call", params, tool=XTOOL) is None
    for i, (header, value) in enumerate(built):
        tampered = encode_header_value(decode_header_value(value) + "x")
        if header == "MCP-Protocol-Version":
            tampered = value + "x"
        altered = [*raw[:i], (header.encode(), tampered.encode()), *raw[i + 1 :]]
        result = validate_request_headers(altered, "tools/call", params, tool=XTOOL)
        assert result is not None
        assert result.code == HEADER_MISMATCH


@given(
    st.lists(st.tuples(st.binary(max_size=12), st.binary(max_size=24)), max_size=6),
    st.sampled_from(["tools/call", "tools/list", "resources/read", "prompts/get", "tasks/get"]),
    JSON,
)
def test_PX24_validation_is_total(headers: list[tuple[bytes, bytes]], method: str, junk: object) -> None:
    """covers: PX24, PX25 - arbitrary header bytes and bodies get a verdict, never an exception."""
    params: dict[str, Any] = {"_meta": META, "name": junk, "uri": junk, "taskId": junk, "arguments": junk}
    result = validate_request_headers(headers, method, params, tool=XTOOL)
    assert result is None or result.http_status == 400


def test_HM15_deep_invalid_annotation_message_stays_short() -> None:
    """covers: HM15 - the reason names the tail of a deep location, not 100k steps."""
    node: dict[str, Any] = {"type": "number", "x-mcp-header": "Deep"}
    for _ in range(100_000):
        node = {"type": "object", "properties": {"p": node}}
    result = check_input_schema(node)
    assert result.problem is not None
    assert result.problem.startswith("x-mcp-header 'Deep' at …/properties/p/properties/p/")
    assert len(result.problem) < 300


def test_PX24_long_values_are_shortened_in_messages() -> None:
    """covers: PX24 - a peer cannot make warden echo a whole long header back in an error."""
    long_name = "n" * 5000
    result = check(base("tools/call", "m" * 5000), "tools/call", {"_meta": META, "name": long_name})
    assert_mismatch(result, "Mcp-Name header value '" + "m" * 64 + "'… does not match body value '" + "n" * 64 + "'…")
    assert result is not None
    assert len(result.message) < 300
