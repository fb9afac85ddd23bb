"""deploy/nginx.conf's security headers, request limits and site check, through the real nginx in front of one
real replica.

Every response (the page, the health check, a static asset, a 404, nginx's own error pages) carries
X-Content-Type-Options, Referrer-Policy and a Content-Security-Policy that keeps scripts, styles and frames
to this origin (frame-ancestors from KVLAB_FRAME_ANCESTORS; Streamlit's one inline script by its hash); a
huge request line, a huge header and an oversize body are refused by nginx itself, and the replica never
sees them; so is a Host that is not one of KVLAB_SERVER_NAME's (421: DNS rebinding) and an Origin that is
not the site's own (403); the websocket still upgrades. The config is a template (compose.yaml fills it
with the nginx image's envsubst): the loopback copy fills the same names and nothing else.

Needs Debian's nginx (scripts/install_nginx.sh): without it the live tests skip, and fail under CI (tests/pg.py).
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import io
import re
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import streamlit
import yaml

from bench.app_server import (
    HOST,
    NGINX_REQUIRED,
    NGINX_SITE,
    NGINX_TEMPLATE_DEFAULTS,
    ROOT,
    fill_nginx_template,
    find_nginx,
    free_port,
    loopback_nginx_conf,
    nginx_balancer,
    running_app,
)
from tests.pg import require_nginx

COURSE = "'self' https://course.example.org"
SECURITY = ("X-Content-Type-Options", "Referrer-Policy", "Content-Security-Policy", "Permissions-Policy")


def _directives(conf: str) -> str:
    return "\n".join(ln.split("#", 1)[0] for ln in conf.splitlines())


def parse_csp(policy: str) -> dict[str, list[str]]:
    """A Content-Security-Policy header as {directive: sources}."""
    parts = [p.split() for p in policy.split(";") if p.strip()]
    return {p[0]: p[1:] for p in parts}


def csp_of(conf: str) -> dict[str, list[str]]:
    """The policy of the one Content-Security-Policy add_header line in a (filled) config."""
    (policy,) = re.findall(r'add_header Content-Security-Policy "([^"]*)" always;', _directives(conf))
    return parse_csp(policy)


def assert_real_csp(policy: dict[str, list[str]], frame_ancestors: str, what: str) -> None:
    """Scripts, styles, frames and plugins restricted to this origin; no inline script but by its hash."""
    assert policy["default-src"] == ["'self'"], what
    assert policy["script-src"][0] == "'self'", what
    assert not {"'unsafe-inline'", "'unsafe-eval'"} & set(policy["script-src"]), what  # no inline code, no eval
    assert not any(src in ("*", "data:", "blob:", "http:", "https:") for src in policy["script-src"]), what
    assert policy["object-src"] == ["'none'"] and policy["base-uri"] == ["'self'"], what
    assert policy["frame-ancestors"] == frame_ancestors.split(), what


# --- The template: filled like compose fills it, checked by nginx -----------------------------------------


def test_the_template_fills_kvlab_names_and_leaves_nginx_variables_alone(tmp_path):
    raw = NGINX_SITE.read_text()
    assert "${KVLAB_FRAME_ANCESTORS}" in _directives(raw)
    default = _directives(loopback_nginx_conf([8001], 9000, tmp_path))
    custom = _directives(loopback_nginx_conf([8001], 9000, tmp_path, {"KVLAB_FRAME_ANCESTORS": COURSE}))
    assert csp_of(default)["frame-ancestors"] == ["'self'"]
    assert csp_of(custom)["frame-ancestors"] == COURSE.split()
    assert "${" not in default and "${" not in custom  # nothing left for nginx to misread as its own variable
    # Line for line the same text, but for the template names: nginx's $http_host, $request_id ... stay.
    filled = fill_nginx_template(raw, {"KVLAB_FRAME_ANCESTORS": COURSE}).splitlines()
    site_names = NGINX_TEMPLATE_DEFAULTS["KVLAB_SERVER_NAME"]
    for before, after in zip(raw.splitlines(), filled, strict=True):
        assert after == before.replace("${KVLAB_FRAME_ANCESTORS}", COURSE).replace("${KVLAB_SERVER_NAME}", site_names)
    assert "proxy_set_header Host $http_host;" in custom and '"kvlab_route=$request_id; Path=/' in custom
    # Only ${KVLAB_...} names change, exactly like the image's envsubst with NGINX_ENVSUBST_FILTER=KVLAB_.
    assert (
        fill_nginx_template("$host ${host} $HOME ${HOME} ${KVLAB_FRAME_ANCESTORS}")
        == "$host ${host} $HOME ${HOME} 'self'"
    )


@pytest.mark.parametrize(
    "bad", ["'self'\" always; add_header X-Evil \"1", "'self'; script-src *", "$http_host", "a\nb"]
)
def test_a_value_that_could_break_out_of_its_nginx_string_is_refused(bad):
    with pytest.raises(ValueError, match="KVLAB_FRAME_ANCESTORS"):
        fill_nginx_template(NGINX_SITE.read_text(), {"KVLAB_FRAME_ANCESTORS": bad})


def test_a_template_name_without_a_value_is_an_error():
    with pytest.raises(ValueError, match="KVLAB_NOT_DEFINED"):
        fill_nginx_template("add_header X ${KVLAB_NOT_DEFINED};")


def test_compose_fills_the_same_names_with_the_same_defaults():
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    lb, app = compose["services"]["lb"], compose["services"]["app"]
    assert "./deploy/nginx.conf:/etc/nginx/templates/default.conf.template:ro" in lb["volumes"]
    assert lb["environment"]["NGINX_ENVSUBST_FILTER"] == "KVLAB_"
    used = set(re.findall(r"\$\{(KVLAB_[A-Z0-9_]*)\}", _directives(NGINX_SITE.read_text())))
    assert used == set(NGINX_TEMPLATE_DEFAULTS)
    for name, default in NGINX_TEMPLATE_DEFAULTS.items():
        if name in NGINX_REQUIRED:  # a deployment must name its site: compose stops without it
            assert re.fullmatch(rf"\$\{{{name}:\?set {name} .+\}}", lb["environment"][name]), name
        else:
            assert lb["environment"][name] == f"${{{name}:-{default}}}"
    # A class deployment cannot start without its secrets, which reach the app as files (kvlab/settings.py).
    for name, secret in (
        ("TEACHER_KEY", "teacher_key"),
        ("DATABASE_URL", "database_url"),
        ("COOKIE_SECRET", "cookie_secret"),
    ):
        assert app["environment"][f"KVLAB_{name}_FILE"] == f"/run/secrets/{secret}" and secret in app["secrets"]
        assert compose["secrets"][secret] == {"file": f"./secrets/{secret}"}
        assert f"KVLAB_{name}" not in app["environment"]  # never a plain variable beside its file
    assert compose["services"]["db"]["environment"]["POSTGRES_PASSWORD_FILE"] == "/run/secrets/db_password"
    assert app["environment"]["KVLAB_MODEL_DIRS"] == "${KVLAB_MODEL_DIRS:-}"  # no model folders unless set
    assert app["environment"]["KVLAB_ALLOWED_HOSTS"] == lb["environment"]["KVLAB_SERVER_NAME"]  # the same site


def test_compose_replicas_trust_only_nginx_s_own_address_for_forwarded_for():
    """The sign-in throttle counts failures per learner address, read from X-Forwarded-For only when the
    connection comes from a trusted proxy: in compose that is the lb service's fixed address, on its network."""
    import ipaddress

    from progress.auth import trusted_proxies

    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    lb_address = compose["services"]["lb"]["networks"]["default"]["ipv4_address"]
    trusted = compose["services"]["app"]["environment"]["KVLAB_TRUSTED_PROXIES"]
    (subnet,) = (c["subnet"] for c in compose["networks"]["default"]["ipam"]["config"])
    assert trusted == lb_address
    assert ipaddress.ip_address(lb_address) in ipaddress.ip_network(subnet)
    assert [str(n) for n in trusted_proxies(trusted)] == [f"{lb_address}/32"]


def test_the_policy_allows_streamlit_s_inline_script_by_its_hash_only(tmp_path):
    policy = csp_of(loopback_nginx_conf([8001], 9000, tmp_path))
    assert_real_csp(policy, "'self'", "deploy/nginx.conf")
    index = (Path(streamlit.__file__).parent / "static" / "index.html").read_text()
    inline = re.findall(r"<script>(.*?)</script>", index, flags=re.S)  # scripts without a src
    assert inline, "Streamlit's index.html has no inline script any more: drop the hash from script-src"
    hashes = {f"'sha256-{base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()}'" for body in inline}
    listed = {src for src in policy["script-src"] if src.startswith("'sha256-")}
    assert listed == hashes, f"script-src must list the installed Streamlit's inline scripts: {sorted(hashes)}"


def test_the_filled_config_passes_nginx_own_check(tmp_path):
    require_nginx()
    for values in (None, {"KVLAB_FRAME_ANCESTORS": COURSE}):
        conf = tmp_path / "nginx.conf"
        conf.write_text(loopback_nginx_conf([8001], 9000, tmp_path, values))
        done = subprocess.run(
            [find_nginx(), "-t", "-p", str(tmp_path), "-c", str(conf)], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr


# --- Live: nginx in front of one replica ----------------------------------------------------------------


@pytest.fixture(scope="module")
def replica(tmp_path_factory):
    require_nginx()
    work = tmp_path_factory.mktemp("nginx-headers")
    with running_app(work / "data", work / "streamlit.log") as url:
        yield {"url": url, "port": int(url.rsplit(":", 1)[1])}


def _get(url: str, path: str) -> tuple[int, http.client.HTTPMessage, bytes]:
    try:
        with urllib.request.urlopen(url + path, timeout=10) as resp:
            return resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers, err.read()


def _raw(port: int, data: bytes) -> tuple[int, http.client.HTTPMessage]:
    """Send ``data`` as it is (nginx may answer and close before it has all of it); the status and headers."""
    with socket.create_connection((HOST, port), timeout=10) as s:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused early: the answer is already on its way
        reply = b""
        while b"\r\n\r\n" not in reply and (chunk := s.recv(65536)):
            reply += chunk
    head = reply.split(b"\r\n\r\n", 1)[0].decode("latin-1")
    status_line, _, header_text = head.partition("\r\n")
    return int(status_line.split()[1]), http.client.parse_headers(io.BytesIO(header_text.encode() + b"\r\n\r\n"))


def _logged(log: Path, pattern: str, count: int, timeout_s: float = 5.0) -> list[str]:
    """The access-log lines matching ``pattern``, once there are ``count`` (nginx logs a refused request when
    the client has gone, after its lingering close) or ``timeout_s`` has passed."""
    deadline = time.monotonic() + timeout_s
    while True:
        lines = [re.sub(r"(.)\1{40,}", r"\1...", ln) for ln in log.read_text().splitlines() if re.search(pattern, ln)]
        if len(lines) >= count or time.monotonic() > deadline:
            return lines
        time.sleep(0.1)


def _assert_security_headers(headers: http.client.HTTPMessage, frame_ancestors: str, what: str) -> None:
    for name in SECURITY:
        assert len(headers.get_all(name) or []) == 1, f"{what}: {name} {headers.get_all(name)}"
    assert headers["X-Content-Type-Options"] == "nosniff", what
    assert headers["Referrer-Policy"] == "same-origin", what
    assert_real_csp(parse_csp(headers["Content-Security-Policy"]), frame_ancestors, what)
    assert "camera=()" in headers["Permissions-Policy"], what
    assert headers.get("X-Frame-Options") is None, what  # superseded by frame-ancestors; would contradict it
    assert headers.get("Strict-Transport-Security") is None, what  # plain http: no HSTS
    assert headers.get("Server") == "nginx", what  # server_tokens off: no version


def test_every_response_carries_the_security_headers(replica):
    with nginx_balancer([replica["port"]]) as lb:
        status, headers, page = _get(lb["url"], "/")
        assert status == 200
        _assert_security_headers(headers, "'self'", "/")
        asset = re.search(rb'src="\.?/?(static/[^"]+\.js)"', page)
        assert asset, page[:500]
        for path, expected in [
            ("/_stcore/health", 200),
            ("/" + asset.group(1).decode(), 200),
            ("/media/nope.png", 404),
        ]:
            status, headers, _ = _get(lb["url"], path)
            assert status == expected, path
            _assert_security_headers(headers, "'self'", path)
    with nginx_balancer([free_port()]) as dead:  # nginx's own error page: no replica behind it
        status, headers, _ = _get(dead["url"], "/")
        assert status == 502
        _assert_security_headers(headers, "'self'", "502 page")


def test_a_course_site_allowed_to_embed_the_lessons_reaches_the_header(replica):
    with nginx_balancer([replica["port"]], template_values={"KVLAB_FRAME_ANCESTORS": COURSE}) as lb:
        status, headers, _ = _get(lb["url"], "/?embed=true")
        assert status == 200
        _assert_security_headers(headers, COURSE, "/?embed=true")
        status, headers = _raw(lb["port"], b"GET /?q=" + b"x" * 20_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status == 414
        _assert_security_headers(headers, COURSE, "414 page")


def test_oversize_requests_are_refused_by_nginx_and_the_replica_stays_healthy(replica):
    with nginx_balancer([replica["port"]]) as lb:
        host = f"Host: {HOST}:{lb['port']}\r\n".encode()
        refused = {
            "1 MB query string": _raw(lb["port"], b"GET /?q=" + b"x" * 1_000_000 + b" HTTP/1.1\r\n" + host + b"\r\n"),
            "20 KB header": _raw(lb["port"], b"GET / HTTP/1.1\r\n" + host + b"X-Big: " + b"y" * 20_000 + b"\r\n\r\n"),
            "40 KB of headers": _raw(
                lb["port"],
                b"GET / HTTP/1.1\r\n"
                + host
                + b"".join(b"X-H%d: %s\r\n" % (i, b"z" * 4000) for i in range(10))
                + b"\r\n",
            ),
            "6 MB body": _raw(
                lb["port"], b"POST /_stcore/upload_file HTTP/1.1\r\n" + host + b"Content-Length: 6291456\r\n\r\n"
            ),
        }
        statuses = {what: status for what, (status, _) in refused.items()}
        assert statuses == {"1 MB query string": 414, "20 KB header": 400, "40 KB of headers": 400, "6 MB body": 413}
        for what, (_, headers) in refused.items():
            _assert_security_headers(headers, "'self'", what)
        rejected = _logged(lb["prefix"] / "access.log", r'" (400|413|414) ', 4)
        assert len(rejected) == 4 and all("upstream=-" in ln for ln in rejected), rejected  # never proxied
        assert _get(replica["url"], "/_stcore/health")[0] == 200
        assert _get(lb["url"], "/_stcore/health")[0] == 200


def test_the_websocket_still_upgrades_through_nginx(replica):
    with nginx_balancer([replica["port"]]) as lb:
        conn = http.client.HTTPConnection(HOST, lb["port"], timeout=10)
        try:
            conn.request(
                "GET",
                "/_stcore/stream",
                headers={
                    "Upgrade": "websocket",
                    "Connection": "Upgrade",
                    "Sec-WebSocket-Version": "13",
                    "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
                    "Sec-WebSocket-Protocol": "streamlit",
                    "Origin": lb["url"],
                },
            )
            resp = conn.getresponse()
            assert resp.status == 101, (resp.status, resp.read()[:300])
            assert resp.headers["Upgrade"].lower() == "websocket"
        finally:
            conn.close()


# --- Host and Origin: only the configured site, never a rebound name or another site's page --------------

UPGRADE = (
    b"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: streamlit\r\n"
)


def _ask(port: int, host: str, path: str = "/", origin: str | None = None, websocket: bool = False) -> int:
    """The status nginx answers a request to ``path`` sent with this Host (and Origin, and upgrade headers)."""
    head = f"GET {path} HTTP/1.1\r\nHost: {host}\r\n".encode()
    if origin is not None:
        head += f"Origin: {origin}\r\n".encode()
    status, _ = _raw(port, head + (UPGRADE if websocket else b"") + b"Connection: close\r\n\r\n")
    return status


def test_a_foreign_host_is_refused_by_nginx_and_never_reaches_a_replica(replica):
    with nginx_balancer([replica["port"]]) as lb:
        port = lb["port"]
        for name in (f"{HOST}:{port}", f"localhost:{port}", f"kvlab.test:{port}", HOST):
            assert _ask(port, name) == 200, name  # the loopback run's site names, with or without the port
        foreign = ("evil.example", f"evil.example:{port}", f"kvlab.test.evil.example:{port}", "10.1.2.3")
        for name in foreign:  # a name an attacker rebound to this address; a scan by another address
            for path, websocket in (("/", False), ("/_stcore/stream", True), ("/_stcore/health", False)):
                assert _ask(port, name, path, websocket=websocket) == 421, (name, path)
        status, headers = _raw(port, b"GET / HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n")
        assert status == 421
        _assert_security_headers(headers, "'self'", "421 page")
        refused = _logged(lb["prefix"] / "access.log", r'" 421 ', len(foreign) * 3 + 1)
        assert len(refused) == len(foreign) * 3 + 1 and all("upstream=-" in ln for ln in refused), refused


def test_the_site_names_come_from_kvlab_server_name(replica):
    with nginx_balancer([replica["port"]], template_values={"KVLAB_SERVER_NAME": "kvlab.school.example"}) as lb:
        port = lb["port"]
        assert _ask(port, f"kvlab.school.example:{port}") == 200
        assert _ask(port, f"kvlab.test:{port}") == 421 and _ask(port, f"{HOST}:{port}") == 421


def test_a_request_from_another_site_s_page_is_refused(replica):
    with nginx_balancer([replica["port"]]) as lb:
        port = lb["port"]
        site = f"kvlab.test:{port}"
        assert _ask(port, site, "/_stcore/stream", f"http://{site}", websocket=True) == 101  # its own page
        assert _ask(port, site, "/_stcore/stream", f"https://{site}", websocket=True) == 101  # behind TLS
        for origin in (
            "http://evil.example",
            f"http://evil.example:{port}",
            f"http://kvlab.test:{port + 1}",
            "http://kvlab.test",
            "null",
            f"http://{site}.evil.example",
            f"http://{site}/x",
        ):
            assert _ask(port, site, "/_stcore/stream", origin, websocket=True) == 403, origin
            assert _ask(port, site, "/", origin) == 403, origin
        forbidden = _logged(lb["prefix"] / "access.log", r'" 403 ', 14)
        assert len(forbidden) == 14 and all("upstream=-" in ln for ln in forbidden)


def test_a_protocol_client_on_the_site_s_name_gets_a_session_and_a_rebound_name_does_not(replica):
    import asyncio

    from websockets.exceptions import InvalidStatus

    from bench.app.client import StreamlitSession

    async def session_on(url: str, host: str) -> int:
        try:
            async with StreamlitSession(url, host=host, timeout_s=60) as session:
                return len((await session.run("")).texts)
        except InvalidStatus as exc:
            return -exc.response.status_code

    with nginx_balancer([replica["port"]]) as lb:
        assert asyncio.run(session_on(lb["url"], f"kvlab.test:{lb['port']}")) > 0
        assert asyncio.run(session_on(lb["url"], f"rebound.example:{lb['port']}")) == -421
