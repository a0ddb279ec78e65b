"""The non-pure helpers of the policy: resolve symlinks of roots and path arguments on the real file system.

The decision stays pure (:func:`warden.policy.decide`); these functions gather the facts it needs. A root or path
whose lexical form lies inside an allowed directory may still lead out of it through a symlink, so the real path
(``os.path.realpath`` with ``strict=True``) must lie inside the real path of an allowed directory too.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from warden.policy._decide import Decision, LaunchFacts, RootFacts, _values, decide, normalize_path
from warden.policy._effective import ServerPolicy
from warden.policy._glob import glob_match
from warden.protocol.roots import RootError, file_uri_path, normalize_file_uri, path_to_file_uri

__all__ = ["filter_roots", "launch_facts", "resolve_argument_paths", "resolve_root"]


def _real(path: str) -> str | None:
    try:
        return os.path.realpath(path, strict=True)
    except OSError:
        return None


def launch_facts(server: ServerPolicy) -> LaunchFacts:
    """The facts of launching ``server`` as its policy stands, with the real paths of its sandbox dirs and of the
    org's dir ceilings: a symlink in a user's ``read_dirs`` must not lead the mount outside the org's."""
    sandbox, ceilings = server.sandbox.value, server.ceilings
    paths = {*sandbox.read_dirs, *sandbox.write_dirs}
    for ceiling in (ceilings.read_dirs, ceilings.write_dirs):
        paths.update(ceiling.value if ceiling is not None else ())
    return LaunchFacts(server, real_paths={path: _real(path) for path in paths})


def resolve_root(server: ServerPolicy, uri: Any) -> RootFacts:
    """Parse ``uri`` (pure), then resolve it and the server's allowed root dirs on the file system."""
    real_allowed = tuple(r for d in server.roots.value if (r := _real(d)) is not None)
    try:
        path = normalize_file_uri(uri)
    except RootError as exc:
        return RootFacts(server, str(uri), None, None, real_allowed, exc.message)
    return RootFacts(server, uri, path, _real(path), real_allowed)


def filter_roots(server: ServerPolicy, roots: Sequence[Any]) -> tuple[list[dict[str, Any]], list[tuple[Any,
                                                                                                      Decision]]]:
    """Split a host's ``roots/list`` answer into the roots to give the server (rewritten to the canonical URI of
    their real path, ``name`` kept) and the refused ones with the decision that refused each (RT04, RT05, RT07)."""
    kept: list[dict[str, Any]] = []
    refused: list[tuple[Any, Decision]] = []
    for root in roots:
        uri = root.get("uri") if isinstance(root, Mapping) else None
        facts = resolve_root(server, uri)
        d = decide(facts)
        if d.allowed and facts.real_path is not None:
            out: dict[str, Any] = {"uri": path_to_file_uri(facts.real_path)}
            if isinstance(root, Mapping) and isinstance(root.get("name"), str):
                out["name"] = root["name"]
            kept.append(out)
        else:
            refused.append((root, d))
    return kept, refused


def resolve_argument_paths(server: ServerPolicy, tool: str, arguments: Mapping[str, Any] | None) -> dict[str, str]:
    """Real paths of the arguments that ``under`` rules constrain, keyed like ``ToolCallFacts.resolved_paths``: by
    the argument's value as written (resolved as written: the kernel follows a symlink before the ``..`` after it,
    so ``/proj/link/../x`` is ``/elsewhere/x`` when ``link`` leads to ``/elsewhere/sub``) and by its lexically
    normalized path (what a server that normalizes before opening uses). Paths that do not exist yet resolve
    through their nearest existing parent."""
    out: dict[str, str] = {}
    for ar in server.arguments:
        if ar.rule.under is None or not glob_match(ar.rule.tool, tool):
            continue
        for _, value in _values(arguments or {}, ar.rule.argument.split("."), ""):
            if not isinstance(value, str):
                continue
            try:
                if value.startswith("file:"):
                    written, path = file_uri_path(value), normalize_file_uri(value)
                else:
                    written, path = value, normalize_path(value)
            except RootError:
                continue
            out[value] = os.path.realpath(written)
            out[path] = os.path.realpath(path)
    return out
