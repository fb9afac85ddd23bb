"""Deep links: a page's main settings in the URL, seeded into its widgets and written back to the address bar
(lessons/links.py parses and checks them; `link_note` words a value the page did not take)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import streamlit as st

from lessons import links
from ui.inert import inert_md, prose_md


def link_note(bad: links.BadValue) -> str:
    """The warning for a link parameter the page did not take: Markdown whose only untrusted parts (the
    link's value, a free-text parameter's complaint about it) are inert (`ui.inert`)."""
    why = f"{prose_md(bad.reason)}; it takes {bad.accepts}" if bad.reason is not None else f"it takes {bad.accepts}"
    return (
        f"Link parameter `{bad.name}` has the value {inert_md(bad.raw)}, which is not valid ({why}); "
        f"showing the default, {inert_md(bad.default)}."
    )


LINK_LABEL = "Copy link to this view"
LINK_OPEN = "_link_open"  # suffix of the session-state key that holds whether the link expander is open


class LinkedView:
    """A page's deep-linked settings for this run (from `linked_view`); `publish()` after the last widget."""

    def __init__(self, spec: links.LinkSpec) -> None:
        self.spec = spec
        self._top = st.container()  # notes and the link control sit under the page's intro
        query = {name: st.query_params[name] for name in spec.names if name in st.query_params}
        wanted, bad = links.resolve(spec, query)
        self.keys: dict[str, str] = {}
        current: dict[str, Any] = {}  # each setting's value this run: the widget's own, else the link's
        shown = []
        for p in spec.params:
            key = p.key_for(current)
            self.keys[p.name] = key
            if key not in st.session_state:
                # A widget the page has not drawn yet in this session (the page was just opened, or a widget
                # that depends on a changed setting): it starts from the link when the settings it depends
                # on are the link's, else from its default. A widget already on screen keeps its value,
                # so a re-run that races a stale URL can never undo a learner's move.
                same = all(current[e] == wanted[e] for e in current)
                st.session_state[key] = wanted[p.name] if same else p.default_for(current)
                shown += [link_note(bad[p.name])] if p.name in bad else []
            current[p.name] = st.session_state[key]
        for note in shown:
            self._top.warning(note, icon=":material/link_off:")

    def values(self) -> dict[str, Any]:
        """Each linked setting's current value (the widgets' values once they are drawn)."""
        return {name: st.session_state.get(key) for name, key in self.keys.items()}

    def publish(self) -> str:
        """Write the view into the address bar (only what changed) and show the link; returns the link."""
        query = links.query_for(self.spec, self.values())
        others = links.other_pages_params(self.spec)  # left over from a lesson opened before this one
        if any(st.query_params.get(k) != v for k, v in query.items()) or any(k in others for k in st.query_params):
            kept = {k: v for k, v in st.query_params.to_dict().items() if k not in others and k not in query}
            st.query_params.from_dict({**kept, **query})  # one address-bar update; embed=true is kept
        link = links.link(self.spec, self.values())
        box = self._top.expander(
            LINK_LABEL, icon=":material/link:", key=f"{self.spec.page_id}{LINK_OPEN}", on_change="rerun"
        )
        if not box.open:
            return link  # its contents are made only while it is open, like a chart's table
        with box:
            st.caption("Add this to the app's address (for example `https://kvlab.example.org/`):")
            st.code(link, language=None, wrap_lines=True)  # no sideways scrolling a keyboard cannot reach
            st.caption("To embed this view in a course page (`embed=true`: no Streamlit toolbar or footer):")
            embed = links.link(self.spec, self.values(), embed="true")
            st.code(
                f'<iframe src="https://kvlab.example.org/{embed}" width="100%" height="900" '
                'style="border:0" title="KV Lab"></iframe>',
                language=None,  # Streamlit's syntax colours are under 4.5:1 on the code background
                wrap_lines=True,
            )
        return link


def current_view(page_id: str) -> dict[str, str]:
    """The settings of ``page_id`` in this session's address, checked (a bad or missing value: its default), as
    the page's query parameters: what a teacher's "show the class these settings" sends (ui/live_screens.py)."""
    spec = links.SPECS[page_id]
    query = {name: st.query_params[name] for name in spec.names if name in st.query_params}
    return links.query_for(spec, links.resolve(spec, query)[0])


def adopt_view(page_id: str, query: Mapping[str, str]) -> None:
    """Set the widgets of ``page_id`` to the view ``query`` names before switching to it (following a teacher):
    `LinkedView` keeps a widget's own value over the link's, so a learner who had moved them sees the link's."""
    spec = links.SPECS[page_id]
    wanted, _ = links.resolve(spec, dict(query))
    earlier: dict[str, Any] = {}
    for p in spec.params:
        st.session_state[p.key_for(earlier)] = wanted[p.name]
        earlier[p.name] = wanted[p.name]


def linked_view(page_id: str) -> LinkedView:
    """The page's settings from the URL (bad values: a warning and the default), seeded into widget state.

    Call it after `page_header` and before the page's widgets, which then take `key=view.keys[name]` and no
    default of their own (lessons/links.py holds the defaults); call `view.publish()` after the last of them.
    """
    return LinkedView(links.SPECS[page_id])
