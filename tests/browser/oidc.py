"""A real OpenID Provider on loopback for the single sign-on test: oidc-provider (npm, pinned in package.json,
installed by scripts/install_browser.sh) running tests/browser/oidc_provider.mjs, stopped afterwards."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.app_server import HOST, ROOT

SCRIPT = Path(__file__).with_name("oidc_provider.mjs")
CLIENT_ID = "kvlab"  # the client oidc_provider.mjs registers


NODE_MIN = 20  # oidc-provider 9 uses the global WebCrypto and ES modules of Node.js 20+


def _node_major(node: str) -> int:
    try:
        text = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout
        return int(text.strip().lstrip("v").split(".")[0])
    except (OSError, ValueError, subprocess.SubprocessError):
        return 0


def skip_without_provider() -> str:
    """The node binary, or skip (fail under CI) when node (20+) or oidc-provider is missing."""
    node = shutil.which("node")
    missing = None
    if node is None or not (ROOT / "node_modules" / "oidc-provider" / "package.json").is_file():
        missing = "node or oidc-provider is missing; run scripts/install_browser.sh (npm ci)"
    elif _node_major(node) < NODE_MIN:
        missing = f"oidc-provider needs Node.js {NODE_MIN} or later; {node} is older"
    if missing:
        msg = f"SSO BROWSER TEST SKIPPED: {missing}"
        print(f"\n*** {msg} ***", file=sys.stderr)
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return node


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


@contextlib.contextmanager
def running_provider(port: int, redirect_uri: str, client_secret: str, log: Path) -> Iterator[str]:
    """oidc-provider on 127.0.0.1:``port`` with one client for ``redirect_uri``; yields its issuer URL."""
    node = skip_without_provider()
    issuer = f"http://{HOST}:{port}"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [node, str(SCRIPT), str(port), redirect_uri, client_secret], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT
        )
        try:
            deadline = time.monotonic() + 60
            while not _answers(f"{issuer}/.well-known/openid-configuration"):
                if proc.poll() is not None:
                    raise RuntimeError(f"oidc-provider exited with code {proc.returncode}; see {log}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"oidc-provider did not answer within 60 s; see {log}")
                time.sleep(0.2)
            yield issuer
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
