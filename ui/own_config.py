"""The "your model's config.json" paste box every calculator shows (lessons 1, 2, 4, 6 and 7): one widget.

The learner pastes a Hugging Face config.json; lessons/labs/own_config.py reads it through the memory model.
The pasted text is never shown back: the page shows the parsed model as a table of numbers the memory model
computed (layers, attention kind, layer kinds, KV per token), and a broken paste gets `ui.errors.show_error`,
whose message names the field and is shown inertly. Streamlit's `max_chars` stops an oversize paste in the
browser; `read_config` refuses it again on the server (a forged request skips the browser's check).
"""

from __future__ import annotations

import streamlit as st

from lessons.labs import own_config
from lessons.labs.own_config import OwnModel
from ui.downloads import show_table
from ui.errors import show_error

LABEL = "Your model's config.json (paste its text; Ctrl+Enter to read it)"
PLACEHOLDER = '{"model_type": "llama", "num_hidden_layers": 32, "num_attention_heads": 32, ...}'


def key(page: str) -> str:
    """The session-state key of a page's paste box."""
    return f"{page}_config_json"


def own_config_box(page: str, kv_dtype: str = "bf16", context: int | None = None) -> OwnModel | None:
    """The paste box and the parsed model shown back; returns it (None when empty or broken)."""
    with st.container(border=True):
        st.markdown(
            "**Your own model.** Paste the `config.json` from the model's repository (the file beside its "
            "weights) and the memory model reads it the way it reads the catalog's: layers, attention kind, "
            "the kind of every layer's KV cache and the bytes each token costs."
        )
        text = st.text_area(
            LABEL,
            key=key(page),
            max_chars=own_config.MAX_CONFIG_CHARS,
            height=120,
            placeholder=PLACEHOLDER,
        )
        try:
            model = own_config.read_config(text)
        except ValueError as exc:
            show_error(exc, "fix that field in the pasted text, or paste the model's config.json unchanged")
            return None
        if model is None:
            return None
        st.markdown(model.summary(kv_dtype))
        show_table(model.rows(kv_dtype, context), f"{page}-your-config", f"{page}_own_config", "your model")
        return model
