"""Paths and small helpers shared by the test suites (import as ``from tests.support import ...``)."""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import json
import os
import pty
import select
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import trio
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
PYTHON = str(VENV_BIN / "python")
PEERS = ROOT / "tests" / "peers" / "node_modules"
FIXTURES = ROOT / "tests" / "fixtures"
NODE = shutil.which("node") or "node"
WARDEN = str(VENV_BIN / "warden")

RAWSERVER = [PYTHON, str(FIXTURES / "rawserver.py")]


def sandbox_writable(path: Path) -> Path:
    """Make ``path`` writable by a sandbox: when warden runs as root the sandbox runs as an unprivileged uid in
    warden's sandbox group, so the dir gets that group, setgid, mode 2775."""
    from warden.sandbox._uids import SANDBOX_GID

    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        os.chown(path, -1, SANDBOX_GID)
        path.chmod(0o2775)
    return path


def held_uid_slots() -> list[str]:
    """The machine-wide sandbox uid slot lock files this process holds open (a released slot is closed): empty
    once every sandbox it started was reaped or refused."""
    from warden.sandbox._uids import SLOT_DIR

    held = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(f"{SLOT_DIR}/"):
            held.append(target)
    return held


def write_state_file(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Put ``data`` at ``path`` as another process could have (replacing what is there), with exactly ``mode``:
    for the tests of what warden makes of a state file it did not write."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.chmod(path, mode)  # past the umask


def sandbox_readable(path: Path) -> Path:
    """Open ``path`` (a test's own tree) for reading by the sandbox's unprivileged uid."""
    for root, _dirs, files in os.walk(path):
        os.chmod(root, 0o755)
        for name in files:
            os.chmod(os.path.join(root, name), 0o644)
    return path


def write_config(tmp_path: Path, *, extra: str = "", read_dirs: tuple[str, ...] = (),
                 write_dirs: tuple[str, ...] = ()) -> Path:
    """Write a trusting user config at ``$WARDEN_CONFIG`` (tofu, every capability on, an elicitation rate no
    harness run reaches, the sandbox may read ``read_dirs`` and write ``tmp_path`` and ``write_dirs``) plus ``extra``
    TOML; returns its path."""
    path = Path(os.environ["WARDEN_CONFIG"])
    for directory in (tmp_path, *map(Path, write_dirs)):
        sandbox_writable(directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    writable = [str(tmp_path), *write_dirs]
    path.write_text(f"""
[defaults]
on_new = "tofu"
on_changed = "ask"

[defaults.capabilities]
sampling = "with-tools"
sampling_context = true
elicitation = "url"
elicitation_rate = "1000/min"
roots = ["/"]

[defaults.sandbox]
read_dirs = {json.dumps(list(read_dirs))}
write_dirs = {json.dumps(writable)}
{extra}
""")
    return path


def shows_a_crash(line: str) -> bool:
    """A line of warden's stderr that reports a crash: a traceback (the log writes one for an error warden caught)
    or the one line the ``warden`` command prints for an exception nothing caught (it then exits 70)."""
    return "Traceback" in line or "warden: internal error: " in line


def through_warden(argv: list[str], *warden_args: str) -> list[str]:
    """The command line that runs ``argv`` behind ``warden run``."""
    return [WARDEN, "run", *warden_args, "--", *argv]


def everything_server() -> list[str]:
    return [NODE, str(PEERS / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"), "stdio"]


def filesystem_server(root: Path) -> list[str]:
    return [NODE, str(PEERS / "@modelcontextprotocol" / "server-filesystem" / "dist" / "index.js"), str(root)]


class RawHost:
    """A host that speaks raw JSON lines to a ``warden run`` child: for hostile and lifecycle tests."""

    def __init__(self, process: trio.Process) -> None:
        assert process.stdin is not None
        assert process.stdout is not None
        self.process = process
        self._stdin = process.stdin
        self._stdout = process.stdout
        self._buffer = b""
        self.seen: list[dict[str, object]] = []
        self._early: list[tuple[object, dict[str, object]]] = []
        """Responses read while waiting for another (:meth:`response`)."""

    @classmethod
    async def start(cls, argv: list[str], **kwargs: Any) -> RawHost:
        process = await trio.lowlevel.open_process(argv, stdin=-1, stdout=-1, **kwargs)
        return cls(process)

    async def send_raw(self, data: bytes) -> None:
        await self._stdin.send_all(data)

    async def send(self, message: dict[str, object]) -> None:
        await self.send_raw(json.dumps(message).encode() + b"\n")

    async def request(self, id_: object, method: str, params: dict[str, object] | None = None) -> None:
        message: dict[str, object] = {"jsonrpc": "2.0", "id": id_, "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)

    async def initialize(self, capabilities: dict[str, object] | None = None) -> dict[str, object]:
        await self.request(0, "initialize", {"protocolVersion": "2025-11-25", "capabilities": capabilities or {},
                                             "clientInfo": {"name": "rawhost", "version": "1"}})
        answer = await self.response(0)
        await self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return answer

    async def next_message(self, timeout: float = 30.0) -> dict[str, object] | None:
        """The next message from warden, or None at EOF. Fails the test on timeout."""
        with trio.fail_after(timeout):
            while b"\n" not in self._buffer:
                chunk = await self._stdout.receive_some(1 << 20)
                if not chunk:
                    return None
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        message = json.loads(line)
        self.seen.append(message)
        return message

    async def response(self, id_: object, timeout: float = 30.0) -> dict[str, object]:
        """Read until the response to ``id_`` (or take it from those read before while waiting for another:
        concurrent requests may be answered in any order); other messages are kept in ``seen``."""
        for i, (answered, early) in enumerate(self._early):
            if answered == id_:
                del self._early[i]
                return early
        while True:
            message = await self.next_message(timeout)
            assert message is not None, f"warden closed its stdout before answering {id_!r}"
            if "method" not in message and "id" in message:
                if message["id"] == id_:
                    return message
                self._early.append((message["id"], message))

    async def call(self, id_: object, tool: str, arguments: dict[str, object] | None = None,
                   timeout: float = 30.0) -> dict[str, object]:
        await self.request(id_, "tools/call", {"name": tool, "arguments": arguments or {}})
        return await self.response(id_, timeout)

    async def close(self) -> int:
        await self._stdin.aclose()
        with trio.fail_after(30):
            return await self.process.wait()


def rss_kib(pid: int) -> int:
    """Resident memory of a process, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")


HUGE = "\x00huge-number\x00"
"""For the fuzzers: stands for a JSON number beyond a double's range (``1e400``), valid JSON text json.dumps cannot
write; each fuzzer's encoder swaps it in."""


def nested(levels: int) -> dict[str, Any]:
    """``{"a": {"a": ...}}``, ``levels`` deep: for the fuzzers' deep-nesting values."""
    value: dict[str, Any] = {}
    for _ in range(levels):
        value = {"a": value}
    return value


def in_terminal(argv: Sequence[str], answers: Sequence[tuple[bytes, bytes]], *, env: Mapping[str, str] | None = None,
                timeout: float = 60) -> tuple[int, str]:
    """Run ``argv`` on a pty (stdin, stdout and stderr); for each (prompt, answer), wait for the prompt and type the
    answer. Returns the exit code and everything it printed (``\r\n`` as ``\n``, each prompt answered marked
    ``<asked>``). A prompt that does not come within ``timeout`` fails the test with what was printed so far."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(list(argv), stdin=slave, stdout=slave, stderr=slave, close_fds=True,
                            env={**os.environ, "COLUMNS": "120"} if env is None else {"COLUMNS": "120", **env})
    os.close(slave)
    out = b""
    deadline = time.monotonic() + timeout

    def more() -> bytes:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([master], [], [], left)[0]:
            return b""
        try:
            return os.read(master, 65536)
        except OSError:  # EIO: the other side is closed (the program ended)
            return b""

    try:
        for prompt, answer in answers:
            while prompt not in out:
                chunk = more()
                if not chunk:
                    raise AssertionError(f"no prompt {prompt!r} from {argv[-2:]} within {timeout} s; it printed:\n"
                                         + out.decode(errors="replace")[-6000:])
                out += chunk
            out = out.replace(prompt, b"<asked>" + prompt, 1)
            os.write(master, answer + b"\n")
        code = proc.wait(max(1.0, deadline - time.monotonic()))
        while chunk := more():
            out += chunk
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    return code, out.decode(errors="replace").replace("\r\n", "\n")


def _subject_alt_name(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def make_certificates(directory: Path, name: str) -> tuple[Path, Path, Path]:
    """A CA and a leaf certificate for ``name`` (a host name or an IP address) signed by it: (ca.pem, leaf.pem,
    leaf.key). For TLS test servers on 127.0.0.1 and in test network namespaces; nothing else trusts the CA."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "warden test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(1).not_valid_before(now - datetime.timedelta(hours=1))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(2)
            .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([_subject_alt_name(name)]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    paths = directory / "ca.pem", directory / "leaf.pem", directory / "leaf.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return paths


def server_pids(serve_pid: int, needle: str) -> list[int]:
    """Processes below ``serve_pid`` whose command line holds ``needle`` (the sandboxed server, not its bwrap)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    below, todo = [], [serve_pid]
    while todo:
        for child in children.get(todo.pop(), []):
            below.append(child)
            todo.append(child)
    found = []
    for pid in below:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(needle.encode() in a for a in argv) and b"bwrap" not in Path(argv[0].decode() or "x").name.encode():
            found.append(pid)
    return found


def audit_records(event: str, *extra: str) -> list[dict[str, Any]]:
    """The audit log's records of ``event`` (a prefix, as ``warden audit show --event`` takes it), oldest first,
    as ``warden audit show --json`` prints them; ``extra`` are more of its filters."""
    shown = subprocess.run([WARDEN, "audit", "show", "--json", "--event", event, *extra], capture_output=True,
                           text=True, timeout=60, check=False)
    assert shown.returncode == 0, shown.stderr
    return [json.loads(line) for line in shown.stdout.splitlines() if line.strip()]


def _listening_inodes(port: int) -> set[str]:
    """Socket inodes listening on TCP ``port`` on any local address (``/proc/net/tcp`` and ``tcp6``; state 0A)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":
                inodes.add(fields[9])
    return inodes


def _listens_itself(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds the socket listening on ``port`` (not another test's server on it)."""
    wanted = {f"socket:[{inode}]" for inode in _listening_inodes(port)}
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False
    for fd in fds:
        with contextlib.suppress(OSError):
            if os.readlink(fd) in wanted:
                return True
    return False


def free_port() -> int:
    """A port free on 127.0.0.1 now: for a process that must be told its port before it listens, which may then
    find it taken (:func:`start_listening` and ``warden_http(bind=FIXED_PORT)`` start it again on another)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def start_listening(start: Callable[[int], subprocess.Popen[bytes]], *, timeout: float = 90.0,
                    attempts: int = 5) -> tuple[int, subprocess.Popen[bytes]]:
    """Start a server process that takes its port as an argument, on a free port, and wait until *it* listens there.

    A port found free and closed can be taken by a parallel test before the server binds it; the server then exits
    (EADDRINUSE) while a readiness probe is answered by the other test's server. So readiness here means the started
    process holds the listening socket, and a server that exits before that is started again on another port.
    """
    for _ in range(attempts):
        port = free_port()
        process = start(port)
        deadline = time.monotonic() + timeout
        while process.poll() is None and time.monotonic() < deadline:
            if _listens_itself(process.pid, port):
                return port, process
            time.sleep(0.05)
        if process.poll() is None:
            process.kill()
            process.wait()
            raise AssertionError(f"{process.args!r} did not listen on {port} within {timeout} s")
    raise AssertionError(f"{process.args!r} exited before listening, {attempts} times (last: {process.returncode})")
