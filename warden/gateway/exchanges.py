"""The exchanges open with 2026 hosts: requests warden must ask a 2026 host something about (PX07).

A 2026 host takes questions only as ``input_required`` results, so a request that needs one (consent for the
request itself, or a legacy server's question in the middle of it) runs on in the background as an
:class:`~warden.gateway.mrtr.Exchange` while each round of the host's request is answered with the questions it
raised and warden's own signed ``requestState``. :class:`Exchanges` keeps that table, opens and continues its
entries, and forgets each one once its result is collected or nobody came for it. What the request does inside
(decide, record, forward) is the gateway's call path, given as ``run``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, final

import trio

from warden.errors import RemoteProtocolError
from warden.gateway.link import Context, HostLink
from warden.gateway.mrtr import Exchange, Questions
from warden.gateway.questions import ServerQuestions, for_modern_host
from warden.gateway.shaping import passed_complete, result_kind, to_modern_result
from warden.gateway.task_routing import TaskRouting
from warden.policy.pins import digest as pin_digest
from warden.protocol.eras import Era
from warden.protocol.messages import INVALID_PARAMS, Request, encode_error_object, encode_json, encode_result
from warden.protocol.request_state import StateClaims, StateSigner, binding_of, is_ours
from warden.upstream.connection import ServerDescription

Run = Callable[[Exchange, Request, dict[str, Any], Context, HostLink], Awaitable[None]]
"""The gateway's side of one exchange: decide (asking through the exchange), record, call; ends it with
:meth:`Exchange.finish`."""


@final
class Exchanges:
    """The open exchanges of one server's gateway, by id (the id travels only inside a signed ``requestState``)."""

    def __init__(self, *, signer: StateSigner, background: trio.Nursery, question_timeout: float, run: Run,
                 questions: ServerQuestions, tasks: TaskRouting) -> None:
        self._signer = signer
        self._background = background
        self._question_timeout = question_timeout
        self._run = run
        self._questions = questions
        self._tasks = tasks
        self._open: dict[str, Exchange] = {}

    async def answer(self, request: Request, ctx: Context, params: dict[str, Any], link: HostLink,
                     description: ServerDescription) -> bytes:
        """A 2026 host that warden must ask something (consent for this request, or a legacy server's question):
        run the request in the background (or continue it, when the host brings back warden's ``requestState``)
        and answer with its result or with the questions it raised."""
        original = {k: v for k, v in params.items() if k not in ("_meta", "requestState", "inputResponses")}
        binding = binding_of(request.method, pin_digest(original))  # the retry must repeat the same request
        state = params.get("requestState")
        if is_ours(state):
            assert isinstance(state, str)
            exchange = self._open.get(self._signer.open(state, host=link.id, binding=binding,
                                                        now=trio.current_time()))
            if exchange is None:
                raise RemoteProtocolError("the request this requestState continues has ended; send it afresh",
                                          jsonrpc_code=INVALID_PARAMS)
            exchange.deliver(params.get("inputResponses"))
        else:
            exchange = Exchange(question_timeout=self._question_timeout)
            self._open[exchange.id] = exchange
            forwarded = {k: v for k, v in params.items() if k not in ("requestState", "inputResponses")}
            self._background.start_soon(self._run_then_forget, exchange, request, forwarded, ctx, link)
        step = await exchange.next_step()
        if isinstance(step, Questions):
            expires = trio.current_time() + self._question_timeout
            result: dict[str, Any] = {
                "resultType": "input_required",
                "inputRequests": {key: for_modern_host(q) for key, q in step.requests.items()},
                "requestState": self._signer.mint(StateClaims(exchange.id, link.id, binding, expires)),
            }
            return encode_result(request.id, encode_json(result))
        if not step.ok:
            assert step.error is not None
            return encode_error_object(step.error, request.id)
        assert step.result is not None
        if ctx.upstream is Era.MODERN:  # the server's own result passes through, its questions vetted
            tasks = request.method == "tools/call" and self._tasks.carried(ctx, link)
            kind, stated = result_kind(step.result, tasks=tasks)
            if kind == "input_required":
                return encode_result(request.id, await self._questions.passed_input_required(step, ctx))
            return encode_result(request.id, passed_complete(step.result, stated=stated, method=request.method,
                                                             principal=ctx.caller.principal))
        return encode_result(request.id, encode_json(
            to_modern_result(step.result_dict(), request.method, description.server_info)))

    async def _run_then_forget(self, exchange: Exchange, request: Request, params: dict[str, Any], ctx: Context,
                               link: HostLink) -> None:
        """Run the exchange's request; then keep its result for the host's last retry, no longer than a question
        would wait (a host that never comes back leaves nothing behind)."""
        await self._run(exchange, request, params, ctx, link)
        with trio.move_on_after(self._question_timeout):
            await exchange.collected.wait()
        self._open.pop(exchange.id, None)
