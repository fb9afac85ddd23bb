"""Run the real app and its services on loopback for end-to-end checks: `streamlit run app.py` on free
ports, a throwaway PostgreSQL cluster, and nginx with the project's config in front of several replicas.

Shared by the web load benchmarks (bench/app/), the browser and deployment tests (tests/browser/,
tests/deploy/) and the progress-store tests (tests/pg.py). PostgreSQL and nginx are Debian's packages
(scripts/install_postgres.sh, scripts/install_nginx.sh). Everything binds to 127.0.0.1 only, and every
context manager here stops what it started, also on an exception or Ctrl-C.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"
APP_SCRIPT = ROOT / "app.py"


def free_port() -> int:
    """A TCP port that is free on the loopback interface right now."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def _spawn_app(port: int, data_dir: Path, log: Any, extra_env: dict[str, str] | None, script: Path) -> subprocess.Popen:
    """``streamlit run SCRIPT`` (through ui.serve) on 127.0.0.1:``port`` from the repository root (its
    .streamlit/config.toml), output into the open file ``log``."""
    # The test and benchmark servers skip the lessons' warm-up (ui/warm.py: 20-40 s per start on two cores);
    # a benchmark that times it or needs it passes KVLAB_WARM=1 (bench/app/warm_start.py).
    env = {**os.environ, "KVLAB_DATA_DIR": str(data_dir), "KVLAB_WARM": "0", **(extra_env or {})}
    env.pop("TRITON_INTERPRET", None)  # the app picks its backend like a normal run, not like pytest
    cmd = [
        sys.executable,
        "-m",
        "ui.serve",  # `streamlit run SCRIPT` with the app's imports done before the health check answers
        str(script),
        "--server.headless",
        "true",
        "--server.port",
        str(port),
        "--server.address",
        HOST,
        "--browser.gatherUsageStats",
        "false",
    ]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def _wait_healthy(procs: list[subprocess.Popen], urls: list[str], logs: list[Path], timeout_s: float) -> None:
    """Wait until every server answers its health check; RuntimeError naming the log of one that does not."""
    deadline = time.monotonic() + timeout_s
    pending = list(range(len(procs)))
    while pending:
        for i in list(pending):
            if procs[i].poll() is not None:
                raise RuntimeError(f"streamlit exited with code {procs[i].returncode}; see {logs[i]}")
            if _healthy(urls[i]):
                pending.remove(i)
        if pending and time.monotonic() > deadline:
            raise RuntimeError(f"streamlit not healthy after {timeout_s:.0f} s; see {logs[pending[0]]}")
        if pending:
            time.sleep(0.3)


def _stop(proc: subprocess.Popen, grace_s: float = 15.0) -> None:
    """Terminate ``proc`` (kill it after ``grace_s``) and reap it; a no-op for one that already ended."""
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


@contextlib.contextmanager
def running_app(
    data_dir: Path,
    log_path: Path,
    timeout_s: float = 90.0,
    extra_env: dict[str, str] | None = None,
    info: dict[str, Any] | None = None,
    script: Path = APP_SCRIPT,
):
    """Start ``streamlit run app.py`` (or another ``script``) on a free loopback port; yield its base URL;
    stop it afterwards. ``info``, when given, receives the server's ``pid`` (for CPU accounting).
    """
    with running_apps(
        1, data_dir, log_path.parent, timeout_s, extra_env, log_names=[log_path.name], script=script
    ) as apps:
        if info is not None:
            info["pid"] = apps[0]["pid"]
        yield apps[0]["url"]


@contextlib.contextmanager
def running_apps(
    count: int,
    data_dir: Path,
    log_dir: Path,
    timeout_s: float = 120.0,
    extra_env: dict[str, str] | None = None,
    log_names: list[str] | None = None,
    script: Path = APP_SCRIPT,
) -> Iterator[list[dict[str, Any]]]:
    """Start ``count`` servers of app.py (or another ``script``) at once, each on its own free loopback port;
    yield one dict per server (``url``, ``port``, ``pid``, ``proc``, ``log``); stop them all afterwards (a
    killed one is just reaped)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    names = log_names or [f"streamlit-{i}.log" for i in range(count)]
    procs: list[subprocess.Popen] = []
    with contextlib.ExitStack() as files:
        try:
            apps = []
            for i in range(count):
                port, log_path = free_port(), log_dir / names[i]
                proc = _spawn_app(port, data_dir, files.enter_context(open(log_path, "w")), extra_env, script)
                procs.append(proc)
                apps.append(
                    {"url": f"http://{HOST}:{port}", "port": port, "pid": proc.pid, "proc": proc, "log": log_path}
                )
            _wait_healthy(procs, [a["url"] for a in apps], [a["log"] for a in apps], timeout_s)
            yield apps
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.terminate()
            for proc in procs:
                _stop(proc)


# --- PostgreSQL: a throwaway cluster on loopback ------------------------------------------------------

PG_USER = PG_DATABASE = "kvlab"


def find_postgres_bindir() -> Path | None:
    """Folder with initdb and pg_ctl: $KVLAB_PG_BINDIR, else the newest Debian /usr/lib/postgresql/*/bin."""
    candidates = [Path(os.environ["KVLAB_PG_BINDIR"])] if os.environ.get("KVLAB_PG_BINDIR") else []
    debian = Path("/usr/lib/postgresql")
    if debian.is_dir():
        versions = [d for d in debian.iterdir() if d.name.split(".")[0].isdigit()]
        candidates += [d / "bin" for d in sorted(versions, key=lambda d: int(d.name.split(".")[0]), reverse=True)]
    for bindir in candidates:
        if (bindir / "initdb").is_file() and (bindir / "pg_ctl").is_file():
            return bindir
    return None


def _as_postgres(cmd: list[str]) -> list[str]:
    """``cmd`` run as the ``postgres`` user when we are root (the server refuses to run as root)."""
    if os.geteuid() != 0:
        return cmd
    if shutil.which("runuser"):
        return ["runuser", "-u", "postgres", "--", *cmd]
    import shlex

    return ["su", "postgres", "-s", "/bin/sh", "-c", shlex.join(cmd)]


def _pg_owner() -> tuple[int, int] | None:
    """(uid, gid) the cluster's files must belong to: the ``postgres`` user when we are root, else None."""
    if os.geteuid() != 0:
        return None
    import pwd

    try:
        entry = pwd.getpwnam("postgres")
    except KeyError:
        raise RuntimeError("running as root but there is no 'postgres' user; install Debian's postgresql") from None
    return entry.pw_uid, entry.pw_gid


@contextlib.contextmanager
def postgres_cluster(timeout_s: float = 60.0) -> Iterator[dict[str, Any]]:
    """A fresh PostgreSQL cluster in a temporary folder, listening on 127.0.0.1 at a free port, with a
    database and a password-protected user; yields ``url`` (SQLAlchemy, ``postgresql+psycopg://``),
    ``port``, ``log`` and ``bindir``; stops the server and deletes every file afterwards.

    RuntimeError (with the reason) when the binaries are missing or the server does not start."""
    import secrets
    import tempfile

    bindir = find_postgres_bindir()
    if bindir is None:
        raise RuntimeError("PostgreSQL is not installed; run scripts/install_postgres.sh (or set KVLAB_PG_BINDIR)")
    owner = _pg_owner()
    top = Path(tempfile.mkdtemp(prefix="kvlab-pg-"))
    data, log, pwfile = top / "data", top / "postgres.log", top / "pw"
    password = secrets.token_hex(16)
    pwfile.write_text(password + "\n")
    if owner is not None:
        for path in (top, pwfile):
            os.chown(path, *owner)
    started = False
    try:
        _pg_run(
            bindir,
            [
                "initdb",
                "-D",
                str(data),
                "-U",
                PG_USER,
                f"--pwfile={pwfile}",
                "-A",
                "scram-sha-256",
                "-E",
                "UTF8",
                "--no-locale",
                "--no-sync",
            ],
            log,
            timeout_s,
        )
        for attempt in range(3):  # a free port can be taken by someone else before the server binds it
            port = free_port()
            opts = f"-c listen_addresses={HOST} -p {port} -k {top} -c max_connections=200"
            try:
                _pg_run(
                    bindir,
                    ["pg_ctl", "-D", str(data), "-l", str(log), "-w", "-t", str(int(timeout_s)), "-o", opts, "start"],
                    log,
                    timeout_s + 10,
                )
                started = True
                break
            except RuntimeError:
                if attempt == 2:
                    raise
        env = {**os.environ, "PGPASSWORD": password}
        subprocess.run(
            [str(bindir / "createdb"), "-h", HOST, "-p", str(port), "-U", PG_USER, PG_DATABASE],
            env=env,
            check=True,
            capture_output=True,
            timeout=timeout_s,
        )
        url = f"postgresql+psycopg://{PG_USER}:{password}@{HOST}:{port}/{PG_DATABASE}"
        yield {"url": url, "port": port, "log": log, "bindir": bindir}
    finally:
        if started:
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                _pg_run(bindir, ["pg_ctl", "-D", str(data), "-m", "fast", "-w", "stop"], log, 60)
        shutil.rmtree(top, ignore_errors=True)


def _pg_run(bindir: Path, cmd: list[str], log: Path, timeout_s: float) -> None:
    """Run a PostgreSQL server tool as the cluster's owner; RuntimeError with its output when it fails."""
    full = _as_postgres([str(bindir / cmd[0]), *cmd[1:]])
    done = subprocess.run(full, capture_output=True, text=True, timeout=timeout_s, cwd="/")
    if done.returncode != 0:
        tail = log.read_text(errors="replace")[-600:] if log.is_file() else ""
        raise RuntimeError(f"{cmd[0]} failed ({done.returncode}): {(done.stderr or done.stdout)[-600:]} {tail}")


# --- nginx: the project's sticky-session config in front of loopback replicas -----------------------------

NGINX_SITE = ROOT / "deploy" / "nginx.conf"
NGINX_MAIN = """# Generated by bench/app_server.py from deploy/nginx.conf for a loopback run; deleted afterwards.
worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    log_format kvlab '$remote_addr "$request" $status upstream=$upstream_addr route=$cookie_kvlab_route';
    access_log {prefix}/access.log kvlab;
    client_body_temp_path {prefix}/client_body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
{site}
}}
"""
UPSTREAM_HEADER = "X-KVLab-Upstream"  # loopback runs only: which replica answered (the benchmark's bookkeeping)
# deploy/nginx.conf is a template: its ${KVLAB_...} names and their defaults, the same as compose.yaml's lb
# service (tests/deploy/test_nginx_headers.py checks that the two agree).
# KVLAB_SERVER_NAME has no default in compose (a deployment names its site); loopback runs answer to the
# loopback address, localhost and the benchmarks' site name (.test is reserved for testing, RFC 2606).
LOOPBACK_SITE = "kvlab.test"
NGINX_TEMPLATE_DEFAULTS = {"KVLAB_FRAME_ANCESTORS": "'self'", "KVLAB_SERVER_NAME": f"{HOST} localhost {LOOPBACK_SITE}"}
NGINX_REQUIRED = ("KVLAB_SERVER_NAME",)  # compose refuses to start without them


def find_nginx() -> str | None:
    """Path of nginx: $KVLAB_NGINX, else nginx on PATH or in /usr/sbin (Debian's package)."""
    for name in (os.environ.get("KVLAB_NGINX"), "nginx", "/usr/sbin/nginx"):
        if name and (path := shutil.which(name)):
            return path
    return None


def _replace_line(text: str, pattern: str, lines: list[str]) -> str:
    """Replace the one line of ``text`` matching regex ``pattern`` with ``lines`` (same indentation)."""
    import re

    found = re.findall(pattern, text, flags=re.MULTILINE)
    if len(found) != 1:
        raise RuntimeError(f"deploy/nginx.conf must have exactly one line matching {pattern!r}, found {len(found)}")
    indent = found[0][: len(found[0]) - len(found[0].lstrip())]
    return re.sub(pattern, "\n".join(indent + line for line in lines), text, count=1, flags=re.MULTILINE)


def fill_nginx_template(text: str, values: dict[str, str] | None = None) -> str:
    """``text`` with every ``${KVLAB_NAME}`` replaced, as the nginx image's envsubst does in compose:
    ``values`` over NGINX_TEMPLATE_DEFAULTS. nginx's own ``$variables`` (lower case) are left alone.
    ValueError for a value that could break out of its quoted nginx string, or for a template name that
    has no value (compose.yaml and NGINX_TEMPLATE_DEFAULTS must name the same variables)."""
    import re

    merged = {**NGINX_TEMPLATE_DEFAULTS, **(values or {})}
    for name, value in merged.items():
        if re.search(r'["\\$;{}\x00-\x1f]', value):
            raise ValueError(f"{name}={value!r}: quotes, backslashes, $, ;, braces and control characters are refused")

    def fill(m: re.Match) -> str:
        if m.group(1) not in merged:
            raise ValueError(f"deploy/nginx.conf uses ${{{m.group(1)}}}, which has no value (NGINX_TEMPLATE_DEFAULTS)")
        return merged[m.group(1)]

    return re.sub(r"\$\{(KVLAB_[A-Z0-9_]*)\}", fill, text)


def loopback_nginx_conf(
    app_ports: list[int], listen_port: int, prefix: Path, template_values: dict[str, str] | None = None
) -> str:
    """deploy/nginx.conf for a loopback run: the upstream lists the replicas' 127.0.0.1 ports, both servers
    (the site's and the default one that refuses other Hosts) listen on 127.0.0.1:``listen_port``, and
    responses name the replica that answered (UPSTREAM_HEADER).
    Its template variables get ``template_values`` or their defaults (``fill_nginx_template``). Everything
    else (cookie, hashing, websocket headers, security headers, limits, timeouts) is the deployment's own text."""
    site = fill_nginx_template(NGINX_SITE.read_text(), template_values)
    site = _replace_line(site, r"^\s*server app:8501;.*$", [f"server {HOST}:{p};" for p in app_ports])
    site = _replace_line(site, r"^\s*listen 80;.*$", [f"listen {HOST}:{listen_port};"])
    site = _replace_line(site, r"^\s*listen 80 default_server;.*$", [f"listen {HOST}:{listen_port} default_server;"])
    site = _replace_line(
        site,
        r"^\s*add_header Set-Cookie \$kvlab_route_cookie always;.*$",
        ["add_header Set-Cookie $kvlab_route_cookie always;", f"add_header {UPSTREAM_HEADER} $upstream_addr always;"],
    )
    indented = "\n".join(("    " + line) if line.strip() else "" for line in site.splitlines())
    return NGINX_MAIN.format(prefix=prefix, site=indented)


@contextlib.contextmanager
def nginx_balancer(
    app_ports: list[int], timeout_s: float = 30.0, template_values: dict[str, str] | None = None
) -> Iterator[dict[str, Any]]:
    """nginx with the project's sticky-session config in front of ``app_ports``, on a free loopback port;
    yields ``url``, ``port``, ``pid`` and ``prefix`` (its folder: config, logs); stopped and its folder
    deleted afterwards. ``template_values`` as in ``loopback_nginx_conf``. RuntimeError when nginx is
    missing or does not start (its error log in the message)."""
    import tempfile

    binary = find_nginx()
    if binary is None:
        raise RuntimeError("nginx is not installed; run scripts/install_nginx.sh (or set KVLAB_NGINX)")
    prefix = Path(tempfile.mkdtemp(prefix="kvlab-nginx-"))
    prefix.chmod(0o755)  # worker processes (user nobody when we are root) use the temp folders in here
    try:
        port = free_port()
        conf = prefix / "nginx.conf"
        conf.write_text(loopback_nginx_conf(app_ports, port, prefix, template_values))
        cmd = [binary, "-p", str(prefix), "-c", str(conf), "-g", "daemon off;"]
        with open(prefix / "stdout.log", "w") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
            try:
                deadline = time.monotonic() + timeout_s
                while not _port_open(port):
                    if proc.poll() is not None or time.monotonic() > deadline:
                        error_log = prefix / "error.log"
                        errors = error_log.read_text(errors="replace") if error_log.exists() else ""
                        raise RuntimeError(f"nginx did not start ({proc.poll()}): {errors[-600:]}")
                    time.sleep(0.1)
                yield {"url": f"http://{HOST}:{port}", "port": port, "pid": proc.pid, "prefix": prefix}
            finally:
                _stop(proc, grace_s=10)
    finally:
        shutil.rmtree(prefix, ignore_errors=True)


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((HOST, port)) == 0


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds used so far by process ``pid`` (all its threads); None off Linux."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime in clock ticks
