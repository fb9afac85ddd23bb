"""The `kvlab` command: `kvlab --version`, `kvlab serve [streamlit options]`, `kvlab db upgrade|current|backup
FILE|restore FILE`.

Every subcommand checks the settings first (kvlab/settings.py): a bad one ends the command with its message
and exit status 2, never a traceback. `kvlab db` works on the database the server would use (KVLAB_DATABASE_URL
or KVLAB_DATABASE_URL_FILE, else the SQLite file in KVLAB_DATA_DIR) through progress/migrate.py and
progress/backup.py.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import kvlab
from kvlab.settings import SettingsError, load_settings

USAGE_ERROR = 2  # argparse's own status for a bad command line; a bad setting is the same kind of mistake
FAILED = 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kvlab",
        description="KV Lab: an interactive course on LLM serving memory, built on a real inference engine.",
    )
    parser.add_argument("--version", action="version", version=f"kvlab {kvlab.__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    serve = commands.add_parser(
        "serve",
        help="start the course's web server (Streamlit options pass through, e.g. --server.port=8501)",
        description="Check the settings, warm the lessons' first results, then start the course's server. "
        "Options after `serve` go to Streamlit (e.g. --server.port=8501 --server.address=0.0.0.0).",
    )
    serve.set_defaults(passes_through=True)  # its unknown options are Streamlit's (main: parse_known_args)
    db = commands.add_parser("db", help="the progress database: upgrade, current, backup, restore")
    actions = db.add_subparsers(dest="action", metavar="ACTION", required=True)
    actions.add_parser("upgrade", help="bring the database's schema to this release's (creates it when empty)")
    actions.add_parser("current", help="print the database's schema revision")
    backup = actions.add_parser("backup", help="write the whole database to FILE")
    backup.add_argument("file", metavar="FILE")
    restore = actions.add_parser("restore", help="replace the database's contents with FILE's (from `backup`)")
    restore.add_argument("file", metavar="FILE")
    restore.add_argument("--force", action="store_true", help="replace a database that holds data")
    return parser


def database_url(environ: Mapping[str, str]) -> str:
    """The database the server would open: KVLAB_DATABASE_URL(_FILE), else the SQLite file in KVLAB_DATA_DIR."""
    from progress.store import database_url as server_url

    return server_url(environ)


def _store_function(module: str, name: str) -> Callable[..., Any]:
    return getattr(importlib.import_module(module), name)


def _db(action: str, file: str | None, url: str, force: bool = False) -> int:
    if action == "upgrade":
        revision = _store_function("progress.migrate", "upgrade")(url)
        print(f"database at revision {revision}")
    elif action == "current":
        revision = _store_function("progress.migrate", "current")(url)
        print(revision if revision is not None else "none (an empty database, or one older than migrations)")
    elif action == "backup":
        _store_function("progress.backup", "backup")(url, file)
        print(f"backed up to {file}")
    else:
        _store_function("progress.backup", "restore")(url, file, force=force)
        print(f"restored from {file}")
    return 0


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Run the `kvlab` command line; returns its exit status."""
    parser = _parser()
    args, rest = parser.parse_known_args(sys.argv[1:] if argv is None else list(argv))
    if rest and not getattr(args, "passes_through", False):
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    environ = os.environ if environ is None else environ
    try:
        settings = load_settings(environ)
    except SettingsError as exc:
        print(f"kvlab: {exc}", file=sys.stderr)
        return USAGE_ERROR
    if args.command == "serve":
        from ui.serve import serve

        return serve(rest, settings)
    try:
        return _db(args.action, getattr(args, "file", None), database_url(environ), getattr(args, "force", False))
    except Exception as exc:  # the store's errors name what failed and the fix; the operator gets no traceback
        print(f"kvlab db {args.action}: {exc}", file=sys.stderr)
        return FAILED


__all__ = ["database_url", "main"]
