"""``warden doctor`` says whether egress works on this machine (a real sandbox with an allow-list) and each
configured server's effective egress, the org's ceiling applied."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.support import WARDEN


def test_doctor_shows_egress(tmp_path: Path) -> None:
    config = Path(os.environ["WARDEN_CONFIG"])
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text('[servers.gh]\ncommand = "npx"\nargs = ["-y", "x"]\nnetwork.allow = ["api.github.com:443"]\n'
                      'network.allow_addresses = ["10.77.0.0/16"]\n'
                      '[servers.bad]\ncommand = "x"\nnetwork.allow = ["evil.test:443"]\n'
                      '[servers.quiet]\ncommand = "x"\n')
    org = tmp_path / "org.toml"
    org.write_text('[org]\ncommands = ["*"]\n[defaults.network]\nallow = ["api.github.com:443"]\n'
                   'allow_addresses = ["10.0.0.0/8"]\n')
    done = subprocess.run([WARDEN, "doctor", "--json"], capture_output=True, text=True, check=False,
                          env={**os.environ, "WARDEN_ORG_POLICY": str(org)})
    rows = {row["check"]: row for row in json.loads(done.stdout)}
    assert rows["egress proxy"]["status"] == "ok", rows["egress proxy"]
    assert rows["egress gh"] == {"check": "egress gh", "status": "info", "blocking": False,
                                 "detail": "through warden's proxy to api.github.com:443, names may resolve to "
                                           "10.77.0.0/16"}
    assert rows["egress quiet"]["detail"] == "none (no network at all)"
    assert rows["egress bad"]["status"] == "fail"
    assert rows["egress bad"]["detail"].startswith("network.allow entry 'evil.test:443' (user ")
    assert rows["egress bad"]["detail"].endswith("(defaults.network)): it will not start")


def test_doctor_shows_a_hostile_config_s_error_escaped_on_its_own_row() -> None:
    """The egress rows quote the config's error, which quotes the malformed server name; before, the table was
    printed raw, so the name's erase-line escape ran in the terminal and its line break began a row of its own."""
    config = Path(os.environ["WARDEN_CONFIG"])
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text('[servers."e\\u001b[2K\\u001b]8;;https://evil.test/\\u0007x\\nok"]\ncommand = "x"\n')
    done = subprocess.run([WARDEN, "doctor"], capture_output=True, text=True, check=False)
    row = next(line for line in done.stdout.split("\n") if line.startswith("egress (config)"))
    assert row.endswith("  WARN  config not read: 1 problem(s) in " + str(config) + ":\\n  "
                        + str(config) + ":1: servers.e\\x1b[2K\\x1b]8;;https://evil.test/\\x07x\\nok: server name "
                        "'e\\x1b[2K\\x1b]8;;https://evil.test/\\x07x\\nok' must be 1-64 of A-Z a-z 0-9 _ . -"), row
    assert "\x1b" not in done.stdout
