"""Lesson 2 — MHA, MQA and GQA: the KV-group slider, KV footprint, head sharing, and a real 5-D GQA run."""

import streamlit as st

from engine.memory.catalog import MODELS
from lessons.labs import gqa as lab
from ui import charts_attention
from ui.page import (
    backend_info,
    lesson_check,
    linked_view,
    page_header,
    prose,
    run_or_stop,
    show_chart,
    show_table,
    sources,
)

PAGE = "gqa"
GiB, KiB = 1024**3, 1024


@st.cache_data(show_spinner=False)
def _run(num_heads: int, groups: int, head_dim: int, seq_len: int) -> lab.GqaRun:
    return lab.run_gqa(num_heads, groups, head_dim, seq_len, repeats=3)


page_header(PAGE)
view = linked_view(PAGE)  # the settings come from the URL (defaults in ui/links.py) and are written back

c1, c2 = st.columns([2, 1])
model = c1.selectbox("Model shape", list(MODELS), key=view.keys["model"])
spec = MODELS[model]
kv_dtype = c2.selectbox("KV cache precision", lab.KV_DTYPES, key=view.keys["kv_dtype"])
options = lab.group_options(spec.num_heads)
# One slider per model: the valid group counts (divisors of the query heads) differ between models.
groups = st.select_slider(
    f"KV groups G (KV heads) — divisors of {spec.num_heads} query heads; {spec.name} ships with {spec.num_kv_heads}",
    options=options,
    key=view.keys["groups"],  # gqa_groups_<model>; starts at the model's real KV-head count
)
c3, c4 = st.columns(2)
context = c3.number_input("Context length per user (tokens)", 1, 10_000_000, step=1024, key=view.keys["context"])
users = c4.number_input("Concurrent users", 1, 100_000, step=1, key=view.keys["users"])

fp = run_or_stop(lab.footprint, model, groups, kv_dtype, int(context), int(users), hint="use whole numbers >= 1")
kind = lab.attention_kind(spec.num_heads, groups)
m1, m2, m3 = st.columns(3)
m1.metric(f"KV per token ({kind})", f"{fp.bytes_per_token / KiB:,.0f} KiB")
m2.metric("KV at context × users", f"{fp.total_bytes / GiB:,.2f} GiB")
m3.metric(
    "Buggy calculator (query heads)",
    f"{fp.naive_total_bytes / GiB:,.2f} GiB",
    f"{fp.overcount:,.0f}× too high",
    delta_color="off",
)
st.markdown(
    f"**2 × {spec.num_layers} layers × {groups} KV heads × {spec.head_dim} head dim × "
    f"{fp.bytes_per_token // (2 * spec.num_layers * groups * spec.head_dim)} bytes = "
    f"{fp.bytes_per_token:,} bytes per token.** A calculator that multiplies by the {spec.num_heads} *query* heads "
    f"instead gets {fp.naive_bytes_per_token:,} bytes — {fp.overcount:,.0f}× too much at G = {groups}."
)
if context > spec.max_context:
    st.warning(f"{spec.name} was trained for at most {spec.max_context:,} tokens; the footprint is still computed.")

rows = lab.footprint_rows(model, kv_dtype, int(context), int(users))
show_chart(
    charts_attention.kv_by_groups(
        options,
        [r["GiB at context x users"] for r in rows],
        groups,
        f"KV cache of {spec.name} shapes at {int(context):,} tokens × {int(users):,} users",
        "GiB",
    ),
    f"KV cache for every valid group count; the chosen G={groups} is striped. Shape from {spec.source} "
    "config.json; G = query heads is MHA, G = 1 is MQA.",
    rows,
    f"kv-by-groups-{model}",
    "gqa_bars",
)

st.subheader("Who reads which KV head")
prose(PAGE, "Head sharing")
show_chart(
    charts_attention.head_sharing(spec.num_heads, groups),
    f"Each of the {spec.num_heads} query heads (top) reads one of {groups} cached KV heads (bottom); "
    f"{spec.num_heads // groups} query heads share each KV head (same line colour and dash).",
    [{"query head": h, "KV head": h // (spec.num_heads // groups)} for h in range(spec.num_heads)],
    f"head-sharing-{model}-G{groups}",
    "gqa_heads",
)

st.subheader("The 5-D layout, run for real")
prose(PAGE, "The 5-D layout")
seq_len = st.slider("Tokens in the live run (M = N)", 16, 256, step=16, key=view.keys["seq_len"])
view.publish()
shapes = lab.layout_shapes(spec.num_heads, groups, spec.head_dim, seq_len)
show_table([{"tensor": k, "shape": v} for k, v in shapes.items()], f"gqa-layout-{model}", "gqa_layout", "shapes")
with st.spinner("Running memory_efficient_attention in [B, M, G, H, K] and MHA with repeated heads …"):
    run = run_or_stop(_run, spec.num_heads, groups, spec.head_dim, seq_len)
r1, r2, r3 = st.columns(3)
r1.metric("Max |GQA − MHA with repeated heads|", f"{run.max_abs_err:.2e}")
r2.metric("K+V bytes read, GQA", f"{run.gqa_kv_bytes / KiB:,.0f} KiB")
r3.metric(
    "K+V bytes read, MHA",
    f"{run.mha_kv_bytes / KiB:,.0f} KiB",
    f"{run.mha_kv_bytes / run.gqa_kv_bytes:,.0f}×",
    delta_color="off",
)
st.caption(
    f"Key stride {run.key_stride}: the 0 is the H dimension — the {spec.num_heads // groups} query heads of a group "
    f"read the same K/V memory. Same outputs (fp32 rounding), {run.mha_kv_bytes // run.gqa_kv_bytes}× less KV stored."
)
show_table(run.rows(), f"gqa-run-{model}-G{groups}", "gqa_run", "run")
st.caption(
    f"Times come from this machine ({backend_info()['label']}, {backend_info()['device']}) and are noisy on a shared "
    "machine; the bytes are exact. Where attention is bandwidth-bound (decode, lesson 1) saved KV reads are saved time."
)

sources(PAGE)
lesson_check(PAGE)
