"""Which host paths a server's runtime needs: the finders behind the node / python / binary profiles.

Given a launch spec, this module resolves the command on the host (``npx``, ``uvx`` and ``pipx run`` are resolved
to the program of the package warden took into its store, because the sandbox has no network to download one and
no package is ever run on the host to install it), reads its ``#!`` line,
picks a profile and runs that profile's finders. The result is a :class:`Runtime`: the argv to exec inside the
sandbox and the read-only binds, each with the profile's reason.

What is never bound automatically: a directory named in the server's arguments (a workspace, a repository).
Those are the policy's call (``read_dirs`` / ``write_dirs``); guessing them would hand a server whatever path a
host configuration happens to mention.

The parsers (:func:`parse_shebang`, :func:`parse_pyvenv_home`) are pure and
property-tested; the finders read the filesystem (``stat``, ``readlink``, small reads) and nothing else.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from warden.errors import LaunchError
from warden.intake import RUNNERS, resolve_launch
from warden.paths import within
from warden.sandbox._profiles import Finder, Profiles, RuntimeProfile

# Paths the base profile already exposes (read-only); a runtime file under them needs no bind of its own.
SYSTEM_ROOTS = ("/usr",)
_MAX_HEAD = 512
_MAX_SMALL_FILE = 256 * 1024
# Interpreter options after which the next argument is not a script (it is code or a module name) ...
_NO_SCRIPT_AFTER = frozenset({"-m", "-c", "-e", "--eval", "-p", "--print"})
# ... and options that consume the next argument.
_TAKES_VALUE = frozenset({"-W", "-X", "-r", "--require", "--import", "--loader", "--experimental-loader"})


@dataclass(frozen=True, slots=True)
class RuntimeBind:
    """A host path the runtime needs, bound read-only: ``source`` (symlinks resolved) shown at ``path``."""

    path: str
    source: str
    finder: Finder
    why: str


@dataclass(frozen=True, slots=True)
class Runtime:
    """What to exec inside the sandbox and what of the host it needs to run."""

    profile: str
    argv: tuple[str, ...]
    binds: tuple[RuntimeBind, ...]
    path_dirs: tuple[str, ...]
    env: Mapping[str, str]
    # Every host file whose content or link target shaped ``binds`` (symlinks followed, #! lines, pyvenv.cfg,
    # package.json). If the server can write one of them, it could steer the next launch's binds: the planner
    # refuses that (see _plan.make_plan).
    derived_from: tuple[str, ...] = ()
    # The store entry an npx / uvx / pipx command runs from (its launch-manifest fields), if any.
    package: Mapping[str, str] | None = None
    # The program the kernel ends up running: the #! interpreter (resolved on the host), else the command itself.
    interpreter: str = ""


def parse_shebang(head: bytes) -> tuple[str, str | None] | None:
    """Parse the ``#!`` line at the start of ``head``: (interpreter, optional single argument) or None.

    Linux passes everything after the interpreter as one argument, trimmed; so does this. A line that is not
    valid UTF-8, has no absolute interpreter path, or does not end within ``head`` is not a usable shebang.
    """
    if not head.startswith(b"#!"):
        return None
    end = head.find(b"\n")
    if end < 0:
        return None
    try:
        line = head[2:end].decode("utf-8")
    except UnicodeDecodeError:
        return None
    line = line.strip(" \t\r")
    if "\0" in line:
        return None
    parts = line.split(None, 1)
    if not parts or not parts[0].startswith("/"):
        return None
    arg = parts[1].strip(" \t\r") if len(parts) > 1 else None
    return parts[0], (arg or None)


def parse_pyvenv_home(text: str) -> str | None:
    """Return the ``home`` value of a ``pyvenv.cfg`` (the base interpreter's bin directory), if absolute."""
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "home":
            value = value.strip()
            return value if value.startswith("/") and "\0" not in value else None
    return None


def _system_view(path: str) -> str:
    """``path`` as the sandbox resolves it at the top level: merged-/usr symlinks (``/bin -> usr/bin``) are
    recreated inside, so ``/bin/sh`` is ``/usr/bin/sh`` there. Other symlinks are not followed."""
    parts = path.split("/", 2)
    if len(parts) < 2 or not parts[1]:
        return path
    top = "/" + parts[1]
    try:
        target = os.readlink(top)
    except OSError:
        return path
    resolved = os.path.normpath(os.path.join("/", target))
    if not any(within(resolved, root) for root in SYSTEM_ROOTS):
        return path
    return resolved + ("/" + parts[2] if len(parts) > 2 else "")


def _read_small(path: Path, limit: int = _MAX_SMALL_FILE) -> bytes | None:
    try:
        with path.open("rb") as handle:
            return handle.read(limit)
    except OSError:
        return None


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:
        return False


def resolve_command(command: str, *, search_path: str, cwd: str) -> str:
    """Return the absolute path of ``command`` (not symlink-resolved), searching ``search_path`` for bare names.

    Raises:
        LaunchError: nothing executable by that name exists.
    """
    if "/" in command:
        candidate = os.path.normpath(os.path.join(cwd, command))
        if os.access(candidate, os.X_OK) and _is_file(Path(candidate)):
            return candidate
        raise LaunchError(f"the server command {command!r} does not exist or is not executable",
                          hint="check the command in the server's configuration")
    found = shutil.which(command, path=search_path)
    if found is None:
        raise LaunchError(f"the server command {command!r} is not on PATH ({search_path})",
                          hint="give the full path of the command, or install it")
    return os.path.normpath(os.path.join(cwd, found))


def _script_argument(args: Sequence[str]) -> int | None:
    """Index in ``args`` (the interpreter's arguments) of the script path, if there is one."""
    skip = False
    for index, arg in enumerate(args):
        if skip:
            skip = False
            continue
        if arg in _NO_SCRIPT_AFTER or arg == "--":
            return index + 1 if arg == "--" and index + 1 < len(args) else None
        if arg in _TAKES_VALUE:
            skip = True
            continue
        if arg.startswith("-"):
            continue
        return index
    return None


def _hops(path: str) -> Iterator[str]:
    """``path`` and every path its symlink chain passes through (absolute), ending at the real file."""
    seen: set[str] = set()
    current = path
    while current not in seen and len(seen) < 40:
        seen.add(current)
        yield current
        try:
            target = os.readlink(current)
        except OSError:
            return
        current = os.path.normpath(os.path.join(os.path.dirname(current), target))
    real = os.path.realpath(path)
    if real not in seen:
        yield real


def _outermost_named(path: str, name: str) -> str | None:
    parts = Path(path).parts
    for index, part in enumerate(parts):
        if part == name:
            return str(Path(*parts[: index + 1]))
    return None


def _venv_of(path: str) -> str | None:
    parent = Path(path).parent
    if parent.name == "bin" and _is_file(parent.parent / "pyvenv.cfg"):
        return str(parent.parent)
    return None


def _prefix_of(real_interpreter: str) -> str | None:
    """The install prefix of an interpreter binary (``<prefix>/bin/<name>`` with a ``<prefix>/lib``)."""
    parent = Path(real_interpreter).parent
    if parent.name != "bin":
        return None
    prefix = parent.parent
    return str(prefix) if (prefix / "lib").is_dir() and str(prefix) != "/" else None


def _python_prefix(prefix: str) -> bool:
    """Whether ``prefix`` holds a Python standard library (the landmark Python itself looks for): a pyvenv.cfg's
    ``home`` is text anyone who can write the virtualenv controls, and its prefix is bound read-only."""
    return any(next(Path(prefix, lib).glob("python3*/os.py"), None) is not None for lib in ("lib", "lib64"))


def _pick_profile(setting: str, profiles: Profiles, names: Sequence[str], exe: str) -> RuntimeProfile:
    if setting != "auto":
        return profiles.runtimes[setting]
    for profile in profiles.runtimes.values():
        for name in names:
            if any(fnmatch.fnmatchcase(name, pattern) for pattern in profile.interpreters):
                return profile
    if _venv_of(exe) is not None:
        return profiles.runtimes["python"]
    return profiles.runtimes["binary"]


class _Binds:
    """Accumulates binds, skipping paths already visible (system roots or an earlier bind)."""

    def __init__(self, profile: RuntimeProfile) -> None:
        self._profile = profile
        self.items: list[RuntimeBind] = []

    def covered(self, path: str) -> bool:
        path = _system_view(path)
        return any(within(path, root) for root in SYSTEM_ROOTS) or any(within(path, b.path) for b in self.items)

    def add(self, finder: Finder, path: str | None) -> None:
        why = self._profile.why_for(finder)
        if path is None or why is None:
            return
        dest = os.path.normpath(path)
        if self.covered(dest):
            return
        # Keep the outermost: a bind that contains earlier ones replaces them.
        self.items = [b for b in self.items if not within(b.path, dest)]
        self.items.append(RuntimeBind(path=dest, source=os.path.realpath(dest), finder=finder, why=why))


def detect_runtime(argv: Sequence[str], *, setting: str, profiles: Profiles, host_env: Mapping[str, str],
                   cwd: str, state_dir: Path | None = None) -> Runtime:
    """Resolve ``argv`` on the host and decide what the sandbox must show of it (see the module docstring).

    ``npx`` / ``uvx`` / ``pipx run`` commands run the program of their package's entry in warden's store
    (``state_dir``), pinned at intake (:mod:`warden.intake`); the sandbox has no network to fetch anything.

    Raises:
        LaunchError: the command does not exist, or names a package that was not taken into the store.
    """
    search_path = host_env.get("PATH") or os.defpath
    args = list(argv)
    evidence: list[str] = []
    package: dict[str, str] | None = None
    if os.path.basename(args[0]) in RUNNERS:
        if state_dir is None:
            raise LaunchError(f"{args[0]} commands run from warden's package store, and this launcher has none",
                              hint="start the server through `warden run`")
        node = resolve_command("node", search_path=search_path, cwd=cwd) if os.path.basename(args[0]) == "npx" \
            else ""
        resolved = resolve_launch(args, state_dir=state_dir, node=node)
        assert resolved is not None
        args = list(resolved.argv)
        package = resolved.record.manifest()
    exe = resolve_command(args[0], search_path=search_path, cwd=cwd)
    real_exe = os.path.realpath(exe)

    interpreter: str | None = None
    script: str | None = None
    script_index: int | None = None
    head = _read_small(Path(real_exe), _MAX_HEAD) or b""
    shebang = parse_shebang(head)
    if shebang is not None:
        evidence += [exe, real_exe]
        interpreter, shebang_arg = shebang
        if os.path.basename(interpreter) == "env" and shebang_arg:
            words = [w for w in shebang_arg.split() if not w.startswith("-") and "=" not in w]
            if words:
                try:
                    interpreter = resolve_command(words[0], search_path=search_path, cwd=cwd)
                except LaunchError:
                    interpreter = None
        script = exe
    else:
        script_index = _script_argument(args[1:])
        if script_index is not None:
            candidate = os.path.normpath(os.path.join(cwd, args[1 + script_index]))
            if _is_file(Path(candidate)):
                script = candidate
                script_index += 1
            else:
                script_index = None

    exe_hops = list(_hops(exe))
    interpreter_hops = list(_hops(interpreter)) if interpreter else []
    names = [os.path.basename(p) for p in (*interpreter_hops, *exe_hops)]
    profile = _pick_profile(setting, profiles, names, exe)
    binds = _Binds(profile)
    interpreter_paths = interpreter_hops or exe_hops
    interesting = [*exe_hops, *interpreter_hops, *(_hops(script) if script else ())]
    evidence += interesting
    for item in profile.bind:
        finder = item.finds
        if finder == "node_modules":
            for path in interesting:
                binds.add(finder, _outermost_named(path, "node_modules"))
        elif finder == "venv":
            for path in interesting:
                binds.add(finder, _venv_of(path))
        elif finder == "runtime_prefix":
            binds.add(finder, _prefix_of(interpreter_paths[-1]))
            for path in interesting:
                venv = _venv_of(path)
                cfg = _read_small(Path(venv) / "pyvenv.cfg") if venv else None
                home = parse_pyvenv_home(cfg.decode("utf-8", "replace")) if cfg else None
                if home and venv:
                    evidence.append(str(Path(venv) / "pyvenv.cfg"))
                    prefix = _prefix_of(os.path.join(os.path.realpath(home), "python"))
                    if prefix is not None and not binds.covered(prefix) and not _python_prefix(prefix):
                        raise LaunchError(
                            f"{Path(venv) / 'pyvenv.cfg'} says home = {home}, and {prefix} is no Python "
                            "installation (no lib/python3.*/os.py): warden binds a virtualenv's base "
                            "installation into its sandbox, and will not bind that directory",
                            hint=f"recreate the virtualenv: python3 -m venv {venv}")
                    binds.add(finder, prefix)
        elif finder == "package_json":
            if script and _outermost_named(script, "node_modules") is None:
                directory = Path(script).parent
                while True:
                    if _is_file(directory / "package.json"):
                        binds.add(finder, str(directory / "package.json"))
                        break
                    if directory.parent == directory:
                        break
                    directory = directory.parent
        elif finder == "script":
            if script:
                binds.add(finder, script)
        elif finder == "executable":
            for path in (exe, *(interpreter_paths[:1] if interpreter else ())):
                if not binds.covered(path):
                    binds.add(finder, path)

    path_dirs: list[str] = []
    for path in (exe, *(interpreter_paths[:1] if interpreter else ())):
        directory = os.path.dirname(path)
        if not any(within(_system_view(directory), root) for root in SYSTEM_ROOTS) and directory not in path_dirs:
            path_dirs.append(directory)

    final = [exe, *args[1:]]
    if script_index is not None and script is not None:
        final[script_index] = script
    return Runtime(profile=profile.name, argv=tuple(final), binds=tuple(binds.items),
                   path_dirs=tuple(path_dirs), env=dict(profile.env), derived_from=tuple(dict.fromkeys(evidence)),
                   package=package, interpreter=interpreter or exe)
