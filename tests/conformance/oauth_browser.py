#!/usr/bin/env python3
"""The user's browser in the ``auth/*`` conformance runs (warden's ``$BROWSER``): open the authorization URL and
follow its redirects. The harness's authorization server consents at once and redirects straight back to
warden's loopback listener with the code, which is what a user clicking "Allow" does. Only httpx is imported,
so the "browser" starts fast."""

from __future__ import annotations

import sys

import httpx


def main(argv: list[str]) -> int:
    with httpx.Client(follow_redirects=True, trust_env=False, timeout=20) as http:
        response = http.get(argv[1])
    print(f"browser: HTTP {response.status_code} from {response.url.host}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
