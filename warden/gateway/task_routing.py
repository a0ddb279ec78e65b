"""Tasks carried between hosts and one server (issue 15 item 2), on the trio side: which requests may take part,
whose task each one is, and where its requests, notifications and outcome go.

:mod:`warden.gateway.tasks` holds the rules (when the extension is negotiated, the wire forms, the
:class:`~warden.gateway.tasks.TaskTable`) without I/O; :class:`TaskRouting` applies them to live traffic. It exists
apart from the call path because a task outlives the call that created it: its status is polled, pushed and
fetched long after, and each of those must reach only the host that owns the task, pass the same content rules
the call's result would have, and end in one outcome record tied to the call's decision.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping, Set
from typing import Any, final

import msgspec
import trio

from warden import audit
from warden.errors import RemoteProtocolError
from warden.gateway.guard import Guard
from warden.gateway.link import Context, HostLink, Sink, UpstreamCall
from warden.gateway.questions import ServerQuestions
from warden.gateway.recorder import Recorder
from warden.gateway.shaping import passed_complete, result_kind, strip_host_meta
from warden.gateway.tasks import (
    LEGACY_TASKS_VERSION,
    TASKS_EXTENSION,
    TERMINAL,
    TaskEntry,
    TaskTable,
    created_task,
    declares_extension,
    legacy_task_capability,
)
from warden.protocol.eras import SERVER_NOTIFICATIONS, Era
from warden.protocol.messages import (
    INTERNAL_ERROR,
    METHOD_NOT_FOUND,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    Request,
    decode_object,
    encode_error,
    encode_error_object,
    encode_json,
    encode_notification,
    encode_result,
)
from warden.protocol.session import Reply
from warden.upstream.connection import ServerDescription, Upstream

log = logging.getLogger(__name__)

Screen = Callable[[bytes], bytes]
"""The content rules on one tool's result: what the host may see (raises PolicyError when they refuse it)."""


def _reports_error(raw: bytes, era: Era) -> bool:
    """Whether a finished task's tool result says the tool failed (``isError``): a 2026 ``tasks/get`` carries it
    under ``result``, a 2025-11-25 ``tasks/result`` is the tool result itself."""
    body = decode_object(raw)
    result = body.get("result") if era is Era.MODERN else body
    return isinstance(result, dict) and result.get("isError") is True


@final
class TaskRouting:
    """The tasks of one server: carried where host and server speak the same form, each owned by one host.

    ``links``: the hosts connected now (an owner that left gets nothing); ``call``: the gateway's call path;
    ``screen``: the content rules of a tool, by name; ``questions``: the gate a task's questions pass."""

    def __init__(self, *, name: str, guard: Guard, recorder: Recorder, upstream: Callable[[], Upstream],
                 links: Set[HostLink], call: UpstreamCall, screen: Callable[[str], Screen],
                 questions: ServerQuestions) -> None:
        self._name = name
        self._guard = guard
        self._recorder = recorder
        self._upstream = upstream
        self._links = links
        self._call = call
        self._screen = screen
        self._questions = questions
        self._tasks = TaskTable()
        """Which host owns which task of this server: task requests and notifications go to the owner only."""
        self._legacy_offered: tuple[ServerDescription, bool] | None = None
        """Whether the server described offers task-augmented ``tools/call`` (2025-11-25), by description."""

    def carried(self, ctx: Context, link: HostLink) -> bool:
        """Whether this request of ``link`` may take part in tasks: host and server speak the same form on the
        lane it travels (2026: both declared the extension, the host on this very request, MS33; 2025-11-25: both
        negotiated that version and the server offers task-augmented ``tools/call``). Otherwise there is no
        defined translation, and tasks are not carried at all."""
        description = self._upstream().description
        if description is None or ctx.upstream is not ctx.era or description.era is not ctx.era:
            return False
        if ctx.era is Era.MODERN:
            return declares_extension(description.capabilities) and declares_extension(ctx.capabilities)
        if link.legacy is None or link.legacy.version != LEGACY_TASKS_VERSION \
                or description.version != LEGACY_TASKS_VERSION:
            return False
        known = self._legacy_offered
        if known is None or known[0] is not description:  # read once per description of the server, not per call
            known = self._legacy_offered = (description,
                                            legacy_task_capability(description.capabilities) is not None)
        return known[1]

    def note(self, params: Mapping[str, Any], ctx: Context, link: HostLink, reply: Reply,
             index: int | None, *, tasks: bool) -> None:
        """Remember the task a ``tools/call`` created as ``link``'s, tied to the call's decision record (its
        outcome is recorded against that record when the task ends).

        Raises:
            RemoteProtocolError: a 2025-11-25 server answered with a task the call did not ask for, or a task
                warden cannot carry (a 2026 one the request did not declare was refused by the result type).
        """
        if not reply.ok or reply.result is None:
            return
        legacy_asked = ctx.era is Era.LEGACY and "task" in params
        if not (tasks and (ctx.era is Era.MODERN or legacy_asked)):
            if ctx.era is Era.LEGACY and b'"task"' in reply.result and "task" in reply.result_dict():
                raise RemoteProtocolError("the server answered with a task this call did not ask for",
                                          jsonrpc_code=INTERNAL_ERROR)
            return
        created = created_task(reply.result_dict(), ctx.era)
        if created is None:
            return  # the server answered at once: creating a task is its choice
        name = params.get("name")
        self._tasks.add(created[0], TaskEntry(link.id, ctx.era, name if isinstance(name, str) else "", index))

    async def request(self, request: Request, ctx: Context, params: dict[str, Any], link: HostLink,
                      sink: Sink) -> bytes:
        """``tasks/get``, ``tasks/result``, ``tasks/update``, ``tasks/cancel``: only for a task this host created
        through warden (refused, never forwarded, otherwise); the answer passes the content rules of the tool the
        task runs, and a task seen ending gets its outcome record, tied to the call's decision."""
        refusal = self._refused(request, ctx, link)
        if refusal is not None:
            return refusal
        task_id, entry = self._tasks.owned(params.get("taskId"), link.id)
        upstream = self._upstream()
        reply = await self._call(request.method, self._questions.answered(strip_host_meta(params), ctx), ctx, sink,
                                 tasks=True)
        if not reply.ok:
            assert reply.error is not None
            if request.method == "tasks/result":  # the underlying call's own error, returned as it was
                upstream.release_progress(task_id)
                self._ended(task_id, "failed", None, reply.message or "the task failed")
            return encode_error_object(reply.error, request.id)
        assert reply.result is not None
        raw = reply.result
        if ctx.era is Era.MODERN:
            kind, stated = result_kind(raw)
            if kind != "complete":
                raise RemoteProtocolError(f"the server answered {request.method} with resultType {kind!r}",
                                          jsonrpc_code=INTERNAL_ERROR)
            raw = passed_complete(raw, stated=stated, method=request.method, principal=None)
        if request.method == "tasks/result":
            upstream.release_progress(task_id)
            raw = self._screen(entry.tool)(raw)
            await self._guard.mark_source(entry.tool, link.session_key, entry.decision_index, ctx.caller)
            self._ended(task_id, "completed", raw, None)
            return encode_result(request.id, raw)
        if request.method == "tasks/update" or (request.method == "tasks/cancel" and ctx.era is Era.MODERN):
            return encode_result(request.id, raw)  # an acknowledgement; the status is seen through tasks/get
        task = reply.result_dict()
        status = task.get("status")
        if task.get("taskId") != task_id:
            raise RemoteProtocolError(f"the server answered {request.method} about another task",
                                      jsonrpc_code=INTERNAL_ERROR)
        if status in TERMINAL:
            upstream.release_progress(task_id)
        if ctx.era is Era.MODERN:  # questions only on a task waiting for them; a result through the content rules
            if status == "input_required":
                task["inputRequests"] = await self._questions.task_questions(entry, task.get("inputRequests"), ctx)
            else:
                task.pop("inputRequests", None)
            if status == "completed" and isinstance(task.get("result"), dict):
                task["result"] = decode_object(self._screen(entry.tool)(encode_json(task["result"])))
                await self._guard.mark_source(entry.tool, link.session_key, entry.decision_index, ctx.caller)
            raw = encode_json({"resultType": "complete", **task})  # stated to a 2026 host (LC16)
        if status != "completed" or ctx.era is Era.MODERN:  # a 2025-11-25 result comes with tasks/result
            error = task.get("error")
            self._ended(task_id, status, raw, error.get("message") if isinstance(error, dict) else
                        task.get("statusMessage") if isinstance(task.get("statusMessage"), str) else None)
        return encode_result(request.id, raw)

    def _refused(self, request: Request, ctx: Context, link: HostLink) -> bytes | None:
        """The answer to a task request warden does not carry for this host: -32021 to a 2026 host that did not
        declare the extension on this request (the server offers it), else method not found."""
        if self.carried(ctx, link):
            return None
        description = self._upstream().description
        if ctx.era is Era.MODERN and ctx.upstream is Era.MODERN and description is not None and \
                declares_extension(description.capabilities):
            return encode_error(request.id, MISSING_REQUIRED_CLIENT_CAPABILITY, "Missing required client capability",
                                {"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}})
        return encode_error(request.id, METHOD_NOT_FOUND, f"warden does not carry {request.method} to this server")

    async def list_owned(self, request: Request, ctx: Context, params: dict[str, Any], link: HostLink,
                         sink: Sink) -> bytes:
        """2025-11-25 ``tasks/list``: the server lists every task of warden's one session with it; the host sees
        only its own (a task retrievable by ``tasks/get`` for it stays listable, other hosts' never are)."""
        refusal = self._refused(request, ctx, link)
        if refusal is not None:
            return refusal
        reply = await self._call(request.method, strip_host_meta(params), ctx, sink, tasks=True)
        if not reply.ok:
            assert reply.error is not None
            return encode_error_object(reply.error, request.id)
        body = reply.result_dict()
        listed = body.get("tasks")
        if not isinstance(listed, list):
            raise RemoteProtocolError("the server's tasks/list has no tasks array", jsonrpc_code=INTERNAL_ERROR)
        body["tasks"] = [t for t in listed if isinstance(t, dict) and self._tasks.owns(t.get("taskId"), link.id)]
        return encode_result(request.id, encode_json(body))

    def _ended(self, task_id: str, status: object, raw: bytes | None, error: str | None) -> None:
        """The outcome record of a task seen ending (once), tied to the decision of the call that created it."""
        entry = self._tasks.ended(task_id, status)
        if entry is None:
            return
        if status == "cancelled":
            outcome, error = audit.Outcome.CANCELLED, error or "the task was cancelled"
        elif status == "failed":
            outcome, error = audit.Outcome.ERROR, error or "the task failed"
        else:
            is_error = raw is not None and b'"isError"' in raw and _reports_error(raw, entry.era)
            outcome = audit.Outcome.ERROR if is_error else audit.Outcome.OK
        self._recorder.outcome(entry.decision_index, method="tools/call",
                               result=raw if status == "completed" else None,
                               error=error if status != "completed" else None, outcome=outcome,
                               target=f"task {task_id}")

    async def notification(self, method: str, params: bytes | None) -> None:
        """A task's status notification reaches only the host that owns the task (none if no connected host
        does); one showing the task ended records its outcome. It carries the status alone: the questions a
        task asks and the result it inlines (both optional in a notification) reach the host only through
        ``tasks/get`` / ``tasks/result``, where they pass the policy and the content rules."""
        try:
            body = decode_object(params) if params else {}
        except (msgspec.DecodeError, TypeError):
            body = {}
        task_id = body.get("taskId")
        entry = self._tasks.get(task_id) if isinstance(task_id, str) else None
        if entry is None or not isinstance(task_id, str):
            log.info("%s: %s for a task warden did not carry; dropped", self._name, method)
            return
        status = body.get("status")
        if status in TERMINAL:
            self._upstream().release_progress(task_id)
            if status != "completed":  # a completed task's result is recorded when it is fetched
                message = body.get("statusMessage")
                self._ended(task_id, status, None, message if isinstance(message, str) else None)
        owner = next((link for link in self._links if link.id == entry.owner), None)
        if owner is None or owner.unsolicited is None or method not in SERVER_NOTIFICATIONS[owner.era]:
            log.info("%s: %s for a task whose host is not connected; dropped", self._name, method)
            return
        if "inputRequests" in body or "result" in body:  # questions and results only through tasks/get
            params = encode_json({k: v for k, v in body.items() if k not in ("inputRequests", "result")})
        with contextlib.suppress(trio.ClosedResourceError):
            await owner.unsolicited.send(encode_notification(method, params))
