"""Which of a modern HTTP server's tools warden can call, and with which ``Mcp-Param-*`` headers (HM06, HM11).

A 2026-07-28 request over HTTP mirrors the arguments a tool's ``x-mcp-header`` annotations name into headers, so
warden must know a tool's definition before it calls it, and a tool whose annotations are invalid cannot be
called correctly at all: it is removed from every ``tools/list`` page the session sees, and a call to it is
refused before it is sent. :class:`ToolScreen` keeps that knowledge for one connection; the transport that lists
tools for itself (:mod:`warden.transport.http_client`) feeds it every page it gets.

Pure: no I/O; the caller logs what :meth:`ToolScreen.screen` reports as newly excluded.
"""

from __future__ import annotations

from typing import Any, final

import msgspec

from warden.protocol.mcp_headers import ToolHeaders, check_tool_headers
from warden.protocol.messages import Response, decode_object, encode_json, encode_result, parse_message

__all__ = ["ToolScreen"]


@final
class ToolScreen:
    """What one connection knows of its server's tools: the checked headers of each valid one, the reason each
    invalid one is excluded, and the names a complete listing did not have (so a call to an unknown name lists
    the tools once, not on every call)."""

    def __init__(self) -> None:
        self._tools: dict[str, ToolHeaders] = {}
        self._excluded: dict[str, str] = {}
        self._unlisted: set[str] = set()

    def known(self, name: object) -> ToolHeaders | str | None:
        """The checked definition of a listed tool, the reason it cannot be called, or None if never listed."""
        if not isinstance(name, str):
            return None
        problem = self._excluded.get(name)
        if problem is not None:
            return (f"tool {name!r} is excluded: its x-mcp-header annotations are invalid ({problem}); "
                    "warden does not call it over HTTP")
        return self._tools.get(name)

    def worth_listing_for(self, name: object) -> bool:
        """Whether listing the tools could tell warden about ``name`` (it is not known, and the last listing
        since it was asked for did not have it)."""
        return isinstance(name, str) and self.known(name) is None and name not in self._unlisted

    def not_listed(self, name: str) -> None:
        """A listing made for a call to ``name`` did not have it: do not list again for it until the tools change."""
        self._unlisted.add(name)

    def screen(self, response: Response) -> tuple[Response, list[tuple[str, str]]]:
        """A ``tools/list`` page without its invalid tools (HM11), and the tools newly excluded with the reason.
        The valid tools' headers are remembered; an untouched page is returned as it is."""
        try:
            result = decode_object(response.result)
        except (msgspec.DecodeError, TypeError):
            return response, []
        tools = result.get("tools")
        if not isinstance(tools, list):
            return response, []
        self._unlisted.clear()
        kept: list[Any] = []
        newly: list[tuple[str, str]] = []
        for tool in tools:
            name = tool.get("name") if isinstance(tool, dict) else None
            if not isinstance(name, str):
                kept.append(tool)
                continue
            checked = check_tool_headers(tool)
            if checked.problem is None:
                self._tools[name] = checked
                self._excluded.pop(name, None)
                kept.append(tool)
                continue
            if name not in self._excluded:
                newly.append((name, checked.problem))
            self._excluded[name] = checked.problem
            self._tools.pop(name, None)
        if len(kept) == len(tools):
            return response, newly
        result["tools"] = kept
        screened = parse_message(encode_result(response.id, encode_json(result)))
        assert isinstance(screened, Response)
        return screened, newly
