"""The HTTP face's public surface: each module has one sorted ``__all__`` naming every public class and function it
defines, and nothing that is not there."""

from __future__ import annotations

import inspect
from types import ModuleType

import pytest

import warden.gateway.http
import warden.gateway.http_access
import warden.gateway.http_streams
import warden.gateway.http_token


def _isort(name: str) -> tuple[int, str]:
    """ruff's (isort-style) order: CONSTANTS, then Classes, then functions."""
    return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)


@pytest.mark.parametrize("module", [warden.gateway.http, warden.gateway.http_access, warden.gateway.http_streams,
                                    warden.gateway.http_token])
def test_all_is_sorted_and_complete(module: ModuleType) -> None:
    names = module.__all__
    assert names == sorted(names, key=_isort)
    for name in names:
        assert hasattr(module, name), name
    public = {n for n, v in vars(module).items()
              if not n.startswith("_") and (inspect.isclass(v) or inspect.isfunction(v))
              and getattr(v, "__module__", "") == module.__name__}
    assert public == {n for n in names if inspect.isclass(getattr(module, n)) or inspect.isfunction(getattr(module, n))}


def test_serve_http_follows_the_serve_convention() -> None:
    """``serve_*`` takes ``task_status`` and reports the endpoint through it (trio's convention): the face, whose
    ``url`` hosts reach and whose redaction ``warden serve`` widens on reload."""
    signature = inspect.signature(warden.gateway.http.serve_http)
    assert list(signature.parameters) == ["served", "options", "task_status"]
    assert signature.parameters["task_status"].kind is inspect.Parameter.KEYWORD_ONLY
