"""Reading a whole upstream list, page by page, under one set of rules for every transport (MS14, MS15, and
invariant 13: everything a server can make warden hold is bounded).

warden answers hosts with complete lists (it must see every entry to pin it), so it follows ``nextCursor`` itself.
A hostile server can make that expensive: cursors that never end, two cursors that alternate, pages as large as
the message limit. :class:`Pager` ends the list with :class:`ListRefused` at the first of:

- a cursor it has seen before in this list (any repeat, not only the last one: ``A, B, A`` is a cycle);
- more than ``max_pages`` pages, ``max_items`` entries or ``max_bytes`` bytes of page text.

The refusal names the server, the list and the rule, so a host (and a person reading its log) knows what happened;
warden keeps the last complete list it had, and the server's other lists are unaffected.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, NoReturn, final

from warden.errors import RemoteProtocolError
from warden.protocol.eras import LIST_METHODS, result_type
from warden.protocol.messages import INTERNAL_ERROR

__all__ = ["ListLimits", "ListRefused", "Pager"]

DEFAULT_MAX_PAGES: Final = 1000
DEFAULT_MAX_ITEMS: Final = 10_000
"""Real servers list tens to a few hundred entries (the reference servers: at most ~100 resources)."""
DEFAULT_MAX_BYTES: Final = 8 * 1024 * 1024
"""Page text per list. The largest real list seen (GitHub's tools with their schemas) is under 0.5 MiB."""


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class ListLimits:
    """What one list may cost. ``warden run --list-max-items / --list-max-bytes`` set them."""

    max_pages: int = DEFAULT_MAX_PAGES
    max_items: int = DEFAULT_MAX_ITEMS
    max_bytes: int = DEFAULT_MAX_BYTES


class ListRefused(RemoteProtocolError):
    """An upstream list broke a paging rule; warden does not answer with a part of it."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message, jsonrpc_code=INTERNAL_ERROR, hint=hint)


@final
class Pager:
    """One list being read. Call :meth:`params` for each page's request, :meth:`add` with each page's result;
    :meth:`add` returns True when the list is complete.

    Args:
        server: the server's name, for the refusal.
        method: ``tools/list``, ``prompts/list``, ``resources/list`` or ``resources/templates/list``.
        modern: the server speaks 2026-07-28 (``ttlMs`` and ``cacheScope`` are read; ``""`` is a cursor).
        key: the result's list (default: the list ``method`` answers with; ``tasks`` for ``tasks/list``).
    """

    def __init__(self, server: str, method: str, *, modern: bool, limits: ListLimits | None = None,
                 key: str | None = None) -> None:
        self._server = server
        self._method = method
        self._key = key or LIST_METHODS[method]
        self._modern = modern
        self._limits = limits or ListLimits()
        self._seen: set[str] = set()
        self._cursor: str | None = None
        self._pages = 0
        self._bytes = 0
        self.items: list[Any] = []
        self._expires: float | None = None
        self._last = 0.0
        self.private = not modern
        """Any page was private (PX21); a legacy server's lists are always treated as private."""

    @property
    def ttl(self) -> int:
        """How long, in ms from the last page, the whole list stays fresh: until the first of its pages goes stale
        (a page read earlier has used up part of its ``ttlMs``, PX21); 0 when no page said."""
        if self._expires is None:
            return 0
        return max(0, int((self._expires - self._last) * 1000 + 1e-6))

    def params(self, base: Mapping[str, Any]) -> dict[str, Any]:
        """The request params for the next page: ``base`` with the cursor, if any."""
        page = dict(base)
        if self._cursor is not None:
            page["cursor"] = self._cursor
        return page

    def add(self, page: Mapping[str, Any], size: int, *, now: float = 0.0) -> bool:
        """Take one page (``size``: the length of its result text; ``now``: when it arrived, in seconds on any
        clock the caller keeps for the whole list). True: the list is complete.

        Raises:
            ListRefused: a rule of the module docstring was broken, or the page has no list.
            RemoteProtocolError: a 2026 page with an unrecognised ``resultType``.
        """
        limits = self._limits
        self._pages += 1
        self._bytes += size
        if self._modern:
            result_type(page)
            page_ttl = page.get("ttlMs")
            page_ttl = page_ttl if isinstance(page_ttl, int) and not isinstance(page_ttl, bool) and page_ttl > 0 \
                else 0
            expires = now + page_ttl / 1000
            self._expires = expires if self._expires is None else min(self._expires, expires)
            self._last = now
            self.private = self.private or page.get("cacheScope") != "public"
        entries = page.get(self._key)
        if not isinstance(entries, list):  # absent is malformed too, not "nothing": it would unlist everything
            self._refuse(f"the server's answer has no {self._key!r} list")
        if self._bytes > limits.max_bytes:
            self._refuse(f"the list is larger than {limits.max_bytes} bytes", "--list-max-bytes")
        if len(self.items) + len(entries) > limits.max_items:
            self._refuse(f"the list has more than {limits.max_items} entries", "--list-max-items")
        self.items.extend(entries)
        cursor = page.get("nextCursor")
        if cursor is None or (cursor == "" and not self._modern):
            return True
        if not isinstance(cursor, str):
            self._refuse("the server's nextCursor is not a string")
        if cursor in self._seen:
            self._refuse("the server's nextCursor repeats an earlier cursor (the pages would never end)")
        if self._pages >= limits.max_pages:
            self._refuse(f"the list has more than {limits.max_pages} pages")
        self._seen.add(cursor)
        self._cursor = cursor
        return False

    def _refuse(self, rule: str, setting: str | None = None) -> NoReturn:
        self.items = []  # nothing of a refused list is kept
        hint = (f"if the server's lists really are this large, raise it with `warden run {setting} N`" if setting
                else "this is a fault of the server; warden keeps the last complete list it had")
        raise ListRefused(f"{self._server}: {self._method} refused: {rule}", hint=hint)
