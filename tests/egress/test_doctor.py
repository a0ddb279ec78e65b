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
