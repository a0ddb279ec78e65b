"""Package intake: npm and PyPI packages fetched into warden's own store without running any of their code.

When a launch command is ``npx [-y] PKG[@VER] ARGS``, ``uvx [--from P] PKG ARGS`` or ``pipx run PKG ARGS``,
warden does not let the runner download and start the package on the host. It fetches the package itself with
the ordinary client (npm ``--ignore-scripts`` into a private prefix with its lockfile; uv, wheels only, into a
virtualenv with a ``pylock.toml``), checks every artifact against the registry's hash, applies the release-age
gate, lists install scripts (run only sandboxed, without network, where policy allows), byte-compiles Python,
and commits the entry to the store (:mod:`._store` explains where it lives and who can see it). The sandbox then
runs the entry's program, read-only, and the launch manifest names the package, version, integrity and digests.

How callers use it::

    request = parse_runner(argv)                          # None: not a package runner
    result = take_in(request, state_dir=..., env=os.environ, policy=IntakePolicy(...))   # IntakeError
    result.record.manifest()                              # the launch manifest's "package" fields
    new, diff = update(request, ...)                      # warden update NAME: diff.lines() for review
"""

from warden.intake._audit import append_package_record, package_record
from warden.intake._intake import InstallScripts, IntakePolicy, IntakeResult, PackageDiff, take_in, update
from warden.intake._resolve import RUNNERS, ResolvedLaunch, resolve_launch
from warden.intake._spec import PackageRequest, normalize_pypi_name, parse_package, parse_runner
from warden.intake._store import InstalledPackage, Store, tree_digest

__all__ = [
    "RUNNERS",
    "InstallScripts",
    "InstalledPackage",
    "IntakePolicy",
    "IntakeResult",
    "PackageDiff",
    "PackageRequest",
    "ResolvedLaunch",
    "Store",
    "append_package_record",
    "normalize_pypi_name",
    "package_record",
    "parse_package",
    "parse_runner",
    "resolve_launch",
    "take_in",
    "tree_digest",
    "update",
]
