"""Fixture packages built by the tests: an npm package and Python wheels (plus an sdist) whose install script and
whose import both write a marker file, so a test can tell whether any of their code ran, and where.

The marker goes to ``$FIXTURE_MARKER_DIR`` (else ``$HOME``), named ``warden-fixture-marker-<what>``. On the host
that is the test's fresh HOME; in a sandbox it is the sandbox's private tmpfs home.
Each fixture is also a minimal MCP server over stdio with one tool, ``markers``, that answers with the marker
files it can see in its own home and the uid it runs as.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import tarfile
import zipfile
from collections.abc import Mapping
from pathlib import Path

MARKER_PREFIX = "warden-fixture-marker-"

_NODE_MARKER = """'use strict';
const fs = require('fs'), path = require('path'), os = require('os');
module.exports = function mark(what) {
  const dir = process.env.FIXTURE_MARKER_DIR || os.homedir();
  fs.writeFileSync(path.join(dir, '@@MARKER@@' + what), String(process.pid));
};
if (require.main === module) module.exports(process.argv[2] || 'install');
""".replace("@@MARKER@@", MARKER_PREFIX)

_NODE_SERVER = """#!/usr/bin/env node
'use strict';
require('./marker.js')('import-npm');
const fs = require('fs'), os = require('os'), readline = require('readline');
const send = (m) => process.stdout.write(JSON.stringify(m) + '\\n');
readline.createInterface({ input: process.stdin }).on('line', (line) => {
  let m; try { m = JSON.parse(line); } catch (e) { return; }
  if (m.id === undefined) return;
  if (m.method === 'initialize') {
    send({ jsonrpc: '2.0', id: m.id, result: { protocolVersion: m.params.protocolVersion, capabilities: { tools: {} },
      serverInfo: { name: 'warden-fixture', version: 'VERSION' } } });
  } else if (m.method === 'tools/list') {
    send({ jsonrpc: '2.0', id: m.id, result: { tools: [{ name: 'markers', description: 'Lists marker files.',
      inputSchema: { type: 'object', properties: {} } }] } });
  } else if (m.method === 'tools/call') {
    const home = os.homedir();
    const markers = fs.readdirSync(home).filter((n) => n.startsWith('@@MARKER@@')).sort();
    send({ jsonrpc: '2.0', id: m.id, result: { content: [{ type: 'text', text: JSON.stringify({ home, markers,
      uid: process.getuid(), version: 'VERSION' }) }] } });
  } else {
    send({ jsonrpc: '2.0', id: m.id, error: { code: -32601, message: 'no such method' } });
  }
});
""".replace("@@MARKER@@", MARKER_PREFIX)

_PY_INIT = """import json, os, sys

def _mark(what):
    directory = os.environ.get("FIXTURE_MARKER_DIR") or os.path.expanduser("~")
    with open(os.path.join(directory, "@@MARKER@@" + what), "w") as handle:
        handle.write(str(os.getpid()))

_mark("import-py")

def main():
    for line in sys.stdin:
        try:
            m = json.loads(line)
        except ValueError:
            continue
        if "id" not in m:
            continue
        if m["method"] == "initialize":
            result = {"protocolVersion": m["params"]["protocolVersion"], "capabilities": {"tools": {}},
                      "serverInfo": {"name": "warden-fixture-py", "version": "VERSION"}}
        elif m["method"] == "tools/list":
            result = {"tools": [{"name": "markers", "description": "Lists marker files.",
                                 "inputSchema": {"type": "object", "properties": {}}}]}
        elif m["method"] == "tools/call":
            home = os.path.expanduser("~")
            markers = sorted(n for n in os.listdir(home) if n.startswith("@@MARKER@@"))
            text = json.dumps({"home": home, "markers": markers, "uid": os.getuid(), "version": "VERSION",
                               "cached": sys.modules[__name__].__cached__ is not None})
            result = {"content": [{"type": "text", "text": text}]}
        else:
            sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": m["id"],
                                         "error": {"code": -32601, "message": "no such method"}}) + "\\n")
            sys.stdout.flush()
            continue
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": result}) + "\\n")
        sys.stdout.flush()
""".replace("@@MARKER@@", MARKER_PREFIX)


def npm_package(directory: Path, name: str, version: str, *, install_script: bool = True,
                dependencies: dict[str, str] | None = None, filler: str = "",
                install_command: str = "node marker.js install") -> Path:
    """Write the npm fixture package's files into ``directory`` (ready for ``npm publish``)."""
    directory.mkdir(parents=True, exist_ok=True)
    manifest: dict[str, object] = {"name": name, "version": version, "bin": {name: "server.js"},
                                   "files": ["server.js", "marker.js"], "dependencies": dependencies or {}}
    if install_script:
        manifest["scripts"] = {"postinstall": install_command}
    (directory / "package.json").write_text(json.dumps(manifest, indent=1))
    (directory / "marker.js").write_text(_NODE_MARKER)
    (directory / "server.js").write_text(_NODE_SERVER.replace("VERSION", version) + filler)
    (directory / "server.js").chmod(0o755)
    return directory


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def wheel(name: str, version: str, *, requires: tuple[str, ...] = (), filler: str = "",
          data: Mapping[str, bytes] | None = None) -> tuple[str, bytes]:
    """A pure-Python wheel (built by hand: no build backend runs) of the Python fixture server; (filename, bytes).
    ``data``: files of its ``.data/data`` directory, by path (installed relative to the environment)."""
    module = name.replace("-", "_")
    dist_info = f"{module}-{version}.dist-info"
    metadata = "".join([f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
                        *(f"Requires-Dist: {r}\n" for r in requires)])
    files = {
        f"{module}/__init__.py": (_PY_INIT.replace("VERSION", version) + filler).encode(),
        f"{dist_info}/METADATA": metadata.encode(),
        f"{dist_info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: warden-tests\nRoot-Is-Purelib: true\n"
                              b"Tag: py3-none-any\n",
        f"{dist_info}/entry_points.txt": f"[console_scripts]\n{name} = {module}:main\n".encode(),
        **{f"{module}-{version}.data/data/{path}": blob for path, blob in (data or {}).items()},
    }
    record = [_record_line(path, data) for path, data in files.items()] + [f"{dist_info}/RECORD,,"]
    files[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, data in files.items():
            archive.writestr(zipfile.ZipInfo(path, date_time=(2026, 1, 1, 0, 0, 0)), data)
    return f"{module}-{version}-py3-none-any.whl", buffer.getvalue()


def sdist(name: str, version: str) -> tuple[str, bytes]:
    """A source distribution whose setup.py writes a marker: building it would run it."""
    module = name.replace("-", "_")
    setup = (f"import os\nopen(os.path.join(os.environ.get('FIXTURE_MARKER_DIR') or os.path.expanduser('~'), "
             f"'{MARKER_PREFIX}sdist-build'), 'w').write('built')\n"
             f"from setuptools import setup\nsetup(name='{name}', version='{version}', py_modules=['{module}'])\n")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for path, text in ((f"{name}-{version}/setup.py", setup), (f"{name}-{version}/{module}.py", "x = 1\n"),
                           (f"{name}-{version}/PKG-INFO",
                            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")):
            data = text.encode()
            info = tarfile.TarInfo(path)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return f"{name}-{version}.tar.gz", buffer.getvalue()
