"""``make demo`` is one of the README's two commands: it must run to the end and show what it claims."""

from __future__ import annotations

import subprocess

from tests.support import PYTHON, ROOT


def test_the_demo_runs_a_sandboxed_call_and_verifies_its_audit_log() -> None:
    done = subprocess.run([PYTHON, str(ROOT / "scripts" / "demo.py")], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "tools the host sees: []" in out  # first contact: nothing before a human approves
    assert "add(2, 3) -> 5" in out
    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if line.count("│") == 4}
    assert "cannot connect" in rows["network"]  # its 127.0.0.1 is its own network namespace's loopback
    assert "cannot read" in rows["secret_file"]  # the host's /tmp is not the sandbox's
    assert "sk-not-for-the-server" not in out
    assert "audit log OK: 24 records" in out
