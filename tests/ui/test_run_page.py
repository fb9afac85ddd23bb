"""ui/router.py run_page: a page that raises (a bug, or a widget value no browser sends) shows a clear message and
logs the traceback instead of stopping on Streamlit's redacted error; script control passes through."""

import logging

from streamlit.testing.v1 import AppTest


def _router_with_a_failing_page() -> None:
    import streamlit as st

    from ui.router import run_page

    class Page:
        url_path = "probe"

        def run(self) -> None:
            choice = st.selectbox("Model", ["a", "b"], key="probe_model")
            st.write("drawn")
            if choice == "b":
                raise KeyError(f"unknown model {choice!r}")  # what a page does with a value outside its options
            st.write("after")

    run_page(Page())
    st.write("the router goes on")


def test_a_failing_page_shows_a_message_and_the_router_goes_on(caplog):
    at = AppTest.from_function(_router_with_a_failing_page).run()
    assert not at.exception and not at.error
    with caplog.at_level(logging.ERROR, logger="kvlab"):
        at.selectbox(key="probe_model").set_value("b").run()
    assert not at.exception  # no stopped page, no redacted traceback
    assert at.error and "could not use what it was sent" in at.error[0].value
    assert [m.value for m in at.markdown] == ["drawn", "the router goes on"]
    assert any(
        "page 'probe' failed" in r.getMessage() and r.exc_info for r in caplog.records
    )  # logged, with its traceback
    at.selectbox(key="probe_model").set_value("a").run()
    assert not at.exception and not at.error and [m.value for m in at.markdown][-2:] == ["after", "the router goes on"]


def test_script_control_passes_through():
    def script() -> None:
        import streamlit as st

        from ui.router import run_page

        class Page:
            url_path = "probe"

            def run(self) -> None:
                st.write("before")
                st.stop()  # a BaseException: the router must let Streamlit handle it
                st.write("after")

        run_page(Page())

    at = AppTest.from_function(script).run()
    assert not at.exception and not at.error
    assert [m.value for m in at.markdown] == ["before"]
