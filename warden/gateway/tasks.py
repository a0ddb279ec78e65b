"""Tasks through warden: when the extension is negotiated, and which host owns which task. Pure: no I/O.

Two wire forms exist and the spec defines no translation between them (SEP-2663 "Backward Compatibility"): the
2026-07-28 extension ``io.modelcontextprotocol/tasks`` (negotiated per request in ``clientCapabilities.extensions``
and in ``server/discover``; ``tools/call`` answers ``resultType: "task"``; ``tasks/get|update|cancel``) and the
2025-11-25 experimental ``tasks`` capability (``initialize``; a ``task`` param on ``tools/call`` answered with
``{"task": {...}}``; ``tasks/get|result|list|cancel``). So tasks are carried only where host and server speak the
same form, and are never advertised to a host of the other era.

A task id is a bearer handle at the server (SEP-2663 "Security Implications"); warden is the one client the server
sees for every host, so the server cannot tell hosts apart. :class:`TaskTable` does: each task belongs to the host
link whose ``tools/call`` created it, and a task request naming any other id is refused before it is forwarded,
with the same answer for a foreign id and one never created (no oracle for which ids exist).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, final

import msgspec

from warden.errors import RemoteProtocolError
from warden.protocol.eras import Era
from warden.protocol.messages import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    decode_object,
    encode_json,
    encode_notification,
)

log = logging.getLogger(__name__)

TASKS_EXTENSION: Final = "io.modelcontextprotocol/tasks"
LEGACY_TASKS_VERSION: Final = "2025-11-25"
"""The only legacy version with (experimental) tasks (LC05)."""

TERMINAL: Final = frozenset({"completed", "failed", "cancelled"})
STATUSES: Final = frozenset({"working", "input_required"}) | TERMINAL

MAX_TASK_ID: Final = 256
"""Longest task id warden carries: ids are opaque server handles (UUIDs in every example); anything longer is
refused rather than held, keyed and logged."""

MAX_TASKS: Final = 4096
"""Tasks warden remembers per server (invariant 13). The oldest are forgotten first; a host asking about one gets
the same refusal as for an id never created."""

UNKNOWN_TASK: Final = "unknown task: no task with this id was created by this client through warden"

RELATED_TASK: Final = "io.modelcontextprotocol/related-task"
"""The ``_meta`` key that ties a 2025-11-25 message (a question asked for a task, ``tasks/result``'s answer) to its
task."""
TASK_NOTIFICATIONS: Final = frozenset({"notifications/tasks", "notifications/tasks/status"})
"""A task's status, pushed by the server (2026 and 2025-11-25): its params are the task itself."""


def check_task_id(value: object) -> str:
    """A task id as a host or server sent it, if it is one warden carries: a non-empty string of at most
    :data:`MAX_TASK_ID` printable ASCII characters.

    Raises:
        RemoteProtocolError: (-32602) anything else; the message does not echo the value.
    """
    if not isinstance(value, str) or not 0 < len(value) <= MAX_TASK_ID or not value.isascii() \
            or not value.isprintable():
        raise RemoteProtocolError(f"taskId must be a string of 1 to {MAX_TASK_ID} printable ASCII characters",
                                  jsonrpc_code=INVALID_PARAMS)
    return value


def declares_extension(capabilities: Mapping[str, Any]) -> bool:
    """Whether client or server capabilities declare the 2026 tasks extension (an object under ``extensions``)."""
    extensions = capabilities.get("extensions")
    return isinstance(extensions, Mapping) and isinstance(extensions.get(TASKS_EXTENSION), Mapping)


def legacy_task_capability(capabilities: Mapping[str, Any]) -> dict[str, Any] | None:
    """The part of a 2025-11-25 server's ``tasks`` capability warden carries: ``tasks/list`` and ``tasks/cancel``
    if offered, and task-augmented ``tools/call`` (the only request warden lets become a task); None when the
    server offers no task-augmented ``tools/call``."""
    tasks = capabilities.get("tasks")
    if not isinstance(tasks, Mapping):
        return None
    requests = tasks.get("requests")
    tools = requests.get("tools") if isinstance(requests, Mapping) else None
    if not isinstance(tools, Mapping) or not isinstance(tools.get("call"), Mapping):
        return None
    out: dict[str, Any] = {key: {} for key in ("list", "cancel") if isinstance(tasks.get(key), Mapping)}
    out["requests"] = {"tools": {"call": {}}}
    return out


def presented(capabilities: Mapping[str, Any], *, upstream_era: Era, upstream_version: str | None,
              host_era: Era, host_version: str | None) -> tuple[str, dict[str, Any]] | None:
    """The task capability warden shows a host (its key in ServerCapabilities and value), or None: only where the
    server offers tasks in the form the host speaks (``extensions`` 2026 to 2026; ``tasks`` 2025-11-25 to
    2025-11-25, at the version both negotiated)."""
    if upstream_era is Era.MODERN and host_era is Era.MODERN:
        return ("extensions", {TASKS_EXTENSION: {}}) if declares_extension(capabilities) else None
    if upstream_era is Era.LEGACY and host_era is Era.LEGACY and upstream_version == LEGACY_TASKS_VERSION \
            and host_version == LEGACY_TASKS_VERSION:
        legacy = legacy_task_capability(capabilities)
        return ("tasks", legacy) if legacy is not None else None
    return None


def created_task(result: Mapping[str, Any], era: Era) -> tuple[str, str] | None:
    """The id and status of the task a ``tools/call`` result created (2026: ``resultType: "task"`` with the task's
    fields at the top; 2025-11-25: ``{"task": {...}}``), or None for an ordinary result.

    Raises:
        RemoteProtocolError: (-32603) a task result without a usable ``taskId`` or ``status``.
    """
    if era is Era.MODERN:
        if result.get("resultType") != "task":
            return None
        task: Any = result
    else:
        task = result.get("task")
        if task is None:
            return None
        if not isinstance(task, Mapping):
            raise RemoteProtocolError("the server's task is not an object", jsonrpc_code=INTERNAL_ERROR)
    try:
        task_id = check_task_id(task.get("taskId"))
    except RemoteProtocolError as exc:
        raise RemoteProtocolError(f"the server created a task warden cannot carry: {exc.message}",
                                  jsonrpc_code=INTERNAL_ERROR) from exc
    status = task.get("status")
    if status not in STATUSES:
        raise RemoteProtocolError("the server created a task with no valid status", jsonrpc_code=INTERNAL_ERROR)
    return task_id, str(status)


@final
@dataclass(slots=True, eq=False)
class TaskEntry:
    """One task warden carried: who owns it, what created it (for the content rules on its result and the
    outcome record tied to the call's decision), and whether its end was recorded."""

    owner: str
    era: Era
    tool: str
    decision_index: int | None
    recorded: bool = False
    asked: dict[bytes, dict[str, Any]] = field(default_factory=dict)
    """The questions of the task's current wait that passed the policy, as the host is shown them: a host polls
    ``tasks/get`` many times for one question, which is decided, recorded and rated once."""


@final
class TaskTable:
    """Which host link owns which task id of one server. Bounded by :data:`MAX_TASKS`, oldest forgotten first."""

    def __init__(self, limit: int = MAX_TASKS) -> None:
        self._tasks: OrderedDict[str, TaskEntry] = OrderedDict()
        self._limit = limit

    def __len__(self) -> int:
        return len(self._tasks)

    def add(self, task_id: str, entry: TaskEntry) -> None:
        """Remember a task the server created for ``entry.owner``. A server that reuses an id it gave another
        host does not move the task: the first owner keeps it (the second call's host gets no handle to it)."""
        if task_id in self._tasks:
            return
        self._tasks[task_id] = entry
        while len(self._tasks) > self._limit:
            self._tasks.popitem(last=False)

    def get(self, task_id: str) -> TaskEntry | None:
        return self._tasks.get(task_id)

    def owned(self, task_id: object, owner: str) -> tuple[str, TaskEntry]:
        """The task ``task_id`` names, if ``owner`` owns it.

        Raises:
            RemoteProtocolError: (-32602) a malformed id, or one this owner did not create (foreign or never
                created: the same answer).
        """
        checked = check_task_id(task_id)
        entry = self._tasks.get(checked)
        if entry is None or entry.owner != owner:
            raise RemoteProtocolError(UNKNOWN_TASK, jsonrpc_code=INVALID_PARAMS)
        return checked, entry

    def owns(self, task_id: object, owner: str) -> bool:
        entry = self._tasks.get(task_id) if isinstance(task_id, str) else None
        return entry is not None and entry.owner == owner

    def ended(self, task_id: str, status: object) -> TaskEntry | None:
        """The entry to record an outcome for, the first time its task is seen in a terminal status."""
        entry = self._tasks.get(task_id)
        if entry is None or entry.recorded or status not in TERMINAL:
            return None
        entry.recorded = True
        return entry


TaskShape = Literal["created", "task", "list", "related"]
"""Where a message carries task ids of its own: ``created``, a ``tools/call`` result that may be a task (2026:
``taskId`` beside ``resultType: "task"``; 2025-11-25: ``task.taskId``); ``task``, a task itself (``tasks/get``, a
2025-11-25 ``tasks/cancel``, a status notification's params: its ``taskId``); ``list``, ``tasks/list`` (each of
``tasks[]``); ``related``, only the ``related-task`` metadata any message may carry (a question asked for a task,
``tasks/result``'s answer)."""

SHAPE_OF_ANSWER: Final[dict[str, TaskShape]] = {
    "tools/call": "created", "tasks/get": "task", "tasks/cancel": "task", "tasks/list": "list",
    "tasks/result": "related", "tasks/update": "related"}


def rename_task_ids(body: dict[str, Any], rename: Callable[[str], str], shape: TaskShape) -> bool:
    """Rename, in place, the task ids ``body`` (a result, or a message's params) carries as a message of
    ``shape`` carries them (:data:`TaskShape`), its ``_meta[RELATED_TASK].taskId`` included; a field of the same
    name anywhere else is the server's content and stays as it is. Returns whether anything was renamed.

    ``warden serve`` shows every server's task ids as ``SERVER<sep>ID`` with it, so two servers' ids never meet
    and a host's ``tasks/*`` request names the server it goes to."""
    meta = body.get("_meta")
    holders: list[Any] = [meta.get(RELATED_TASK)] if isinstance(meta, dict) else []
    if shape == "created":
        holders.append(body if body.get("resultType") == "task" else body.get("task"))
    elif shape == "task":
        holders.append(body)
    elif shape == "list":
        listed = body.get("tasks")
        holders += listed if isinstance(listed, list) else ()
    renamed = False
    for holder in holders:
        if isinstance(holder, dict) and isinstance(holder.get("taskId"), str):
            holder["taskId"] = rename(holder["taskId"])
            renamed = True
    return renamed


_NOTIFICATION_HEADS: Final = tuple(encode_notification(method, b"")[:-2] for method in TASK_NOTIFICATIONS)
_REQUEST_HEAD: Final = b'{"jsonrpc":"2.0","id":'


def shown_task_ids(message: bytes, prefix: str) -> bytes | None:
    """``message`` (as warden encoded it for a host: a notification, or a question) with its task ids renamed
    ``prefix + ID``: a status notification's (``task``) and a question's ``related-task`` metadata. Every other
    message is passed on unread (a server's log line or progress may hold anything, and a large one would cost a
    decode on the event loop): the ``related-task`` metadata it carries, if any, stays as the server wrote it.
    None: a status notification that cannot be read (nested too deeply to decode here): it is dropped, since its
    id could not be shown."""
    notification = message.startswith(_NOTIFICATION_HEADS)
    if not notification and not message.startswith(_REQUEST_HEAD):
        return message
    try:
        body = decode_object(message)
    except (msgspec.DecodeError, TypeError):
        log.warning("a task message this host should get could not be read; %s", "dropped" if notification
                    else "passed on as the server sent it")
        return None if notification else message
    params = body.get("params")
    if not isinstance(params, dict) or not rename_task_ids(params, lambda task_id: prefix + task_id,
                                                           "task" if notification else "related"):
        return message
    return encode_json({**body, "params": params})
