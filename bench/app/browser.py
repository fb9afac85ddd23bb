"""What drives the app in a real Chromium, for bench.app.classroom's browser sessions and the browser tests.

The browser is Debian's ``chromium`` (scripts/install_browser.sh) driven by Playwright through
``executable_path``; Playwright never downloads one here. ``RUNS_FINISHED_JS`` brings the protocol
client's rule for a finished run (bench/app/client.py) into the page: an init script that counts the
finished runs the page receives (full-app runs, and fragment runs: a widget inside an ``st.fragment``
re-runs only that fragment), read off its websocket frames, for drivers that must know
when the re-run a key press caused has finished (see its comment for why the DOM cannot tell).
"""

from __future__ import annotations

import os
import shutil

from bench.app.client import FRAGMENT_RUN_ENDS, SCRIPT_FINISHED_FIELD

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",  # CI containers run as root, where the sandbox cannot start
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",  # small /dev/shm in containers
    # Many contexts in one browser: pages not in front must keep their timers (Streamlit debounces widget
    # values with setTimeout; a throttled background page sends a slider move a minute late).
    "--disable-background-timer-throttling",
    "--disable-renderer-backgrounding",
    "--disable-backgrounding-occluded-windows",
]
# The app is connected and no script runs (Streamlit's own e2e signal; it can miss a whole quick run, see below).
APP_IDLE = '[data-testid="stApp"][data-test-script-state="notRunning"][data-test-connection-state="CONNECTED"]'


def find_chromium() -> str | None:
    """Path of a system Chromium: $KVLAB_CHROMIUM, else chromium / chromium-browser on PATH."""
    for name in (os.environ.get("KVLAB_CHROMIUM"), "chromium", "chromium-browser"):
        if name and (path := shutil.which(name)):
            return path
    return None


# `window.__kvFinished` counts the ForwardMsgs whose `script_finished` status ends a full-app run or a
# fragment's run (bench/app/client.py: FRAGMENT_RUN_ENDS, which holds FULL_RUN_ENDS) that reach the page,
# found by walking each frame's top-level
# protobuf fields (the field number and statuses come from the installed Streamlit's ForwardMsg, so they
# cannot drift). Why not watch stApp's `data-test-script-state` attribute (APP_IDLE): when a busy server's
# whole run reaches the browser in one burst, React batches the state updates of all its messages into one
# render, the attribute goes straight from "notRunning" to "notRunning", and a run that really happened is
# never seen: in bench.app.classroom with 8 Chromium sessions on 2 cores, 3-5 of 96 slider moves looked
# like lost commits that way.
RUNS_FINISHED_JS = """
() => {
  window.__kvFinished = 0;
  const FIELD = @FIELD@, DONE = new Set(@DONE@);
  const varint = (b, i) => {
    let v = 0, m = 1, x;
    do { x = b[i++]; v += (x & 127) * m; m *= 128; } while (x & 128);
    return [v, i];
  };
  const finished = (buf) => {
    const b = new Uint8Array(buf); let i = 0, tag, v;
    while (i < b.length) {
      [tag, i] = varint(b, i);
      const field = Math.floor(tag / 8), wire = tag & 7;
      if (wire === 0) { [v, i] = varint(b, i); if (field === FIELD) return DONE.has(v); }
      else if (wire === 2) { [v, i] = varint(b, i); i += v; }
      else if (wire === 1) i += 8; else if (wire === 5) i += 4; else return false;
    }
    return false;
  };
  const count = (data) => { if (finished(data)) window.__kvFinished += 1; };
  const Native = window.WebSocket;
  window.WebSocket = class extends Native {
    constructor(...args) {
      super(...args);
      if (!String(args[0]).includes('/_stcore/stream')) return;
      this.addEventListener('message', (e) => {
        if (e.data instanceof ArrayBuffer) count(e.data);
        else if (e.data instanceof Blob) e.data.arrayBuffer().then(count);
      });
    }
  };
}
""".replace("@FIELD@", str(SCRIPT_FINISHED_FIELD)).replace("@DONE@", str(sorted(FRAGMENT_RUN_ENDS)))
