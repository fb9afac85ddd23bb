"""A Streamlit script for the protocol client's tests (tests/bench/app/test_client.py): it shows what the
client's websocket handshake carried, can cut its own run short with st.rerun(), and has one fragment."""

import streamlit as st

st.markdown(f"host {st.context.headers.get('Host')}")
st.markdown(f"origin {st.context.headers.get('Origin')}")
st.markdown("cookies [" + "; ".join(f"{k}={v}" for k, v in sorted(dict(st.context.cookies).items())) + "]")

restarts = st.slider("Restarts", 0, 5, 0, key="restarts")  # this many st.rerun() before the run that ends
done = st.session_state.get("restarted", 0)
st.markdown(f"run {done} of {restarts}")
if done < restarts:
    st.session_state.restarted = done + 1
    st.rerun()
st.session_state.restarted = 0
st.metric("Restarted", done)


@st.fragment
def part() -> None:
    st.button("Fragment button", key="frag_button")
    st.markdown("fragment ran")


part()
