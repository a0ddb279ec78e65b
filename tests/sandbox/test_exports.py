"""The public surface of warden.sandbox: one sorted ``__all__``, every name real, every launcher a Launcher."""

from __future__ import annotations

import inspect

import warden.sandbox


def test_all_is_sorted_and_complete() -> None:
    names = warden.sandbox.__all__
    assert names == sorted(names, key=lambda n: (not n.isupper(), n))  # ruff's RUF022 order: constants first
    for name in names:
        assert hasattr(warden.sandbox, name), name
    public = {n for n, v in vars(warden.sandbox).items()
              if not n.startswith("_") and (inspect.isclass(v) or inspect.isfunction(v))
              and getattr(v, "__module__", "").startswith("warden.sandbox")}
    assert public <= set(names)


def test_launchers_satisfy_the_protocol() -> None:
    for cls in (warden.sandbox.BwrapLauncher, warden.sandbox.ContainerLauncher,
                warden.sandbox.UnsafeUnsandboxedLauncher):
        for method in ("manifest", "launch"):
            assert callable(getattr(cls, method)), (cls, method)
        assert inspect.iscoroutinefunction(cls.launch)


def test_make_launcher_signature_is_what_the_proxy_calls() -> None:
    signature = inspect.signature(warden.sandbox.make_launcher)
    assert list(signature.parameters) == ["settings", "state_dir", "host_env", "egress"]
    assert signature.parameters["state_dir"].kind is inspect.Parameter.KEYWORD_ONLY
