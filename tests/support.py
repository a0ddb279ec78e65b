"""Paths and small helpers shared by the test suites (import as ``from tests.support import ...``)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
PYTHON = str(VENV_BIN / "python")
PEERS = ROOT / "tests" / "peers" / "node_modules"
FIXTURES = ROOT / "tests" / "fixtures"
NODE = shutil.which("node") or "node"
WARDEN = str(VENV_BIN / "warden")

RAWSERVER = [PYTHON, str(FIXTURES / "rawserver.py")]


def through_warden(argv: list[str], *warden_args: str) -> list[str]:
    """The command line that runs ``argv`` behind ``warden run``."""
    return [WARDEN, "run", *warden_args, "--", *argv]


def everything_server() -> list[str]:
    return [NODE, str(PEERS / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"), "stdio"]


def filesystem_server(root: Path) -> list[str]:
    return [NODE, str(PEERS / "@modelcontextprotocol" / "server-filesystem" / "dist" / "index.js"), str(root)]
