"""Lesson 2 — MHA, MQA and GQA: KV-group slider, KV footprint, head sharing, real 5-D GQA decode and prefill runs."""

import streamlit as st

from lessons.labs import choices
from lessons.labs import gqa as lab
from ui import charts_attention
from ui.backend import backend_info
from ui.chart_view import metric_row, show_chart
from ui.downloads import show_table
from ui.errors import run_or_stop
from ui.figure_cache import figure
from ui.kv_precision import kv_precision_section
from ui.linked_view import linked_view
from ui.memo import memo
from ui.mla_cache import mla_cache_section
from ui.mla_section import mla_calculator, mla_section
from ui.own_config import own_config_box
from ui.prose import page_header, prose, sources
from ui.quiz import lesson_check
from ui.router import lesson_section
from ui.tensor_parallel import tensor_parallel_section

PAGE = "gqa"


@memo
def _run(num_heads: int, groups: int, head_dim: int, seq_len: int) -> lab.GqaRun:
    return lab.run_gqa(num_heads, groups, head_dim, seq_len, repeats=3)


@memo
def _decode(num_heads: int, groups: int, head_dim: int) -> lab.GqaRun:
    return lab.run_gqa_decode(num_heads, groups, head_dim, repeats=3)


page_header(PAGE)


def _calculator() -> None:
    """The lesson's settings, numbers and charts: a widget here re-runs only this (ui.router.lesson_section)."""
    view = linked_view(PAGE)  # the settings come from the URL (defaults in lessons/links.py) and are written back

    c1, c2 = st.columns([2, 1])
    model = c1.selectbox("Model shape", choices.MODEL_KEYS, key=view.keys["model"])
    shape = lab.model_shape(model)
    kv_dtype = c2.selectbox("KV cache precision", lab.KV_DTYPES, key=view.keys["kv_dtype"])
    c3, c4 = st.columns(2)
    context = c3.number_input("Context length per user (tokens)", 1, 10_000_000, step=1024, key=view.keys["context"])
    users = c4.number_input("Concurrent users", 1, 100_000, step=1, key=view.keys["users"])
    own_config_box(PAGE, kv_dtype, int(context))  # the learner's own model, read as the catalog's are
    if shape.mla:  # an MLA model caches a latent, not KV heads: its own numbers, no group slider
        view.publish()
        mla_calculator(model, kv_dtype, int(context), int(users))
        return
    # One slider per model: the valid group counts (divisors of the query heads) differ between models.
    groups = st.select_slider(
        f"KV groups G (KV heads) — divisors of {shape.num_heads} query heads; {shape.name} ships with "
        f"{shape.num_kv_heads}",
        options=shape.group_options,
        key=view.keys["groups"],  # gqa_groups_<model>; starts at the model's real KV-head count
    )

    fp = run_or_stop(lab.footprint, model, groups, kv_dtype, int(context), int(users), hint="use whole numbers >= 1")
    m1, m2, m3 = metric_row(3)
    m1.metric(f"KV per token ({fp.kind})", f"{fp.kib_per_token:,.0f} KiB")
    m2.metric("KV at context × users", f"{fp.total_gib:,.2f} GiB")
    m3.metric(
        "Buggy calculator (query heads)",
        f"{fp.naive_total_gib:,.2f} GiB",
        f"{fp.overcount:,.0f}× too high",
        delta_color="off",
    )
    st.markdown(
        f"**2 × {shape.growing_layers} layers × {groups} KV heads × {shape.head_dim} head dim × "
        f"{fp.element_bytes} bytes = "
        f"{fp.bytes_per_token:,} bytes per token.** A calculator that multiplies by the {shape.num_heads} *query* "
        "heads "
        f"instead gets {fp.naive_bytes_per_token:,} bytes — {fp.overcount:,.0f}× too much at G = {groups}."
    )
    if fp.windowed:
        st.info(
            f"{shape.name} uses sliding-window attention (window {shape.sliding_window:,} tokens): a token never "
            "attends "
            "further back, so a paged engine frees the blocks behind the window and each user holds the KV of its "
            "last "
            f"{fp.held_tokens:,} tokens (plus at most one partly used block), not all {fp.context_len:,} — the "
            "footprint "
            "above counts that cap (Jiang et al., 2023, Mistral 7B; vLLM V1 sizes windowed layers the same way)."
        )
    if shape.hybrid:
        st.info(
            f"{shape.name} is a hybrid: {shape.growing_layers} of its {shape.num_layers} layers keep every token; "
            "the others keep a bounded amount per user whatever the context (a sliding window, a local chunk or a "
            "recurrent state). The numbers above count the full layers, what each further token adds; lesson 4 "
            "charts a whole request both ways."
        )
    if fp.beyond_training:
        st.warning(
            f"{shape.name} was trained for at most {shape.max_context:,} tokens; the footprint is still computed."
        )

    table = lab.kv_by_groups(model, kv_dtype, int(context), int(users))
    show_chart(
        figure(
            charts_attention.kv_by_groups,
            table.groups,
            table.total_gib,
            groups,
            f"KV cache of {shape.name} shapes at {int(context):,} tokens × {int(users):,} users",
            "GiB",
        ),
        f"KV cache for every valid group count; the chosen G={groups} is striped. Shape from {shape.source} "
        "config.json; G = query heads is MHA, G = 1 is MQA.",
        table.rows(),
        f"kv-by-groups-{model}",
        "gqa_bars",
        summary=table.summary(groups),
    )

    st.subheader("Who reads which KV head")
    prose(PAGE, "Head sharing")
    show_chart(
        figure(charts_attention.head_sharing, shape.num_heads, groups),
        f"Each of the {shape.num_heads} query heads (top) reads one of {groups} cached KV heads (bottom); "
        f"{shape.heads_per_group(groups)} query heads share each KV head (same line colour and dash).",
        lab.head_sharing_rows(shape.num_heads, groups),
        f"head-sharing-{model}-G{groups}",
        "gqa_heads",
        summary=lab.head_sharing_summary(shape.num_heads, groups),
    )

    st.subheader("The 5-D layout, run for real")
    prose(PAGE, "The 5-D layout")
    context_tokens = shape.decode_context
    shapes = lab.layout_shapes(shape.num_heads, groups, shape.head_dim, 1, lab.DECODE_BATCH, context_tokens)
    show_table(shapes.rows(), f"gqa-layout-{model}", "gqa_layout", "shapes")
    with st.spinner(f"Decoding: {lab.DECODE_BATCH} queries over {context_tokens:,} cached tokens each, GQA and MHA …"):
        dec = run_or_stop(_decode, shape.num_heads, groups, shape.head_dim)
    r1, r2, r3, r4 = st.columns(4)
    r1.metric("Decode, GQA", f"{dec.gqa_ms:,.2f} ms", f"{dec.gb_per_s('gqa'):,.1f} GB/s", delta_color="off")
    r2.metric(
        "Decode, MHA (heads repeated)",
        f"{dec.mha_ms:,.2f} ms",
        f"{dec.gb_per_s('mha'):,.1f} GB/s",
        delta_color="off",
    )
    r3.metric("Decode speed-up of GQA", f"{dec.speedup:,.2f}×", help="MHA time / GQA time, interleaved on this machine")
    r4.metric("Max |GQA − MHA with repeated heads|", f"{dec.max_abs_err:.2e}")
    st.caption(
        f"Key stride {dec.key_stride}: the 0 is the H dimension — the {dec.heads_per_group} query heads of a group "
        f"read the same K/V memory. The GQA call reads {dec.gqa_kv_mib:,.0f} MiB of K+V, the MHA model's cache "
        f"{dec.mha_kv_mib:,.0f} MiB ({dec.kv_ratio}×): one query per sequence does "
        "almost no arithmetic per byte, so decode time follows the bytes (lesson 1). The MHA cache is built before "
        "timing, as a real MHA model stores every head."
    )

    st.markdown("**Prefill-shaped, for contrast:** one sequence of M = N tokens attends to itself.")
    low, high, step = lab.SEQ_LENS
    seq_len = st.slider("Tokens in the prefill run (M = N)", low, high, step=step, key=view.keys["seq_len"])
    view.publish()
    with st.spinner("Running memory_efficient_attention in [B, M, G, H, K] and MHA with repeated heads …"):
        run = run_or_stop(_run, shape.num_heads, groups, shape.head_dim, seq_len)
    show_chart(
        figure(
            charts_attention.gqa_times,
            [f"decode ({lab.DECODE_BATCH} x 1 query over {context_tokens:,})", f"prefill ({seq_len} tokens)"],
            [dec.gqa_ms, run.gqa_ms],
            [dec.mha_ms, run.mha_ms],
            f"{shape.name} heads, G = {groups}: attention time, GQA vs MHA with repeated heads",
        ),
        f"Measured on this machine ({backend_info()['label']}, {backend_info()['device']}, fp32): interleaved runs in "
        f"both orders, noisy on a shared machine; the bytes in the table are exact. In prefill each K/V byte serves "
        f"{seq_len} queries, so the arithmetic dominates and GQA and MHA take about the same time: GQA's win is "
        "decode.",
        dec.rows() + run.rows(),
        f"gqa-run-{model}-G{groups}",
        "gqa_run",
        summary=lab.times_summary(dec, run),
    )


def _mla() -> None:
    mla_section(PAGE)  # the engine's own latent cache, measured, follows as its own section (_mla_cache)


def _kv_precision() -> None:
    kv_precision_section(PAGE)


def _tensor_parallel() -> None:
    tensor_parallel_section(PAGE)


def _mla_cache() -> None:
    mla_cache_section(PAGE)


# Fragments: the sections below the calculator take none of its settings, so a move in one re-runs it alone.
lesson_section(_calculator)
lesson_section(_mla)
lesson_section(_mla_cache)
lesson_section(_kv_precision)
lesson_section(_tensor_parallel)

sources(PAGE)
lesson_check(PAGE)
