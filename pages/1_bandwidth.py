"""Lesson 1 — memory bandwidth: decode vs prefill on the roofline, bytes per token, and this machine."""

import streamlit as st

from lessons.labs import bandwidth as lab
from lessons.labs import choices
from ui import charts, charts_bandwidth
from ui.chart_view import metric_row, show_chart
from ui.downloads import show_table
from ui.errors import run_or_stop, show_error
from ui.figure_cache import figure
from ui.linked_view import linked_view
from ui.memo import memo
from ui.own_config import own_config_box
from ui.prose import page_header, prose, sources
from ui.quiz import lesson_check
from ui.router import lesson_section

PAGE = "bandwidth"
MEASURE_KEY = "bw_measurements"  # this learner's live measurements (session state, never shared)
DEMO_KEY = "bw_demo_measurement"


@memo
def _lesson(model: str, gpu: str, batch: int, context: int, dtype: str) -> lab.BandwidthLesson:
    return lab.lesson(model, gpu, batch, context, dtype)


@memo
def _sweep(model: str, gpu: str, context: int, dtype: str) -> lab.BatchSweep:
    return lab.batch_sweep(model, gpu, context, dtype)


@memo
def _fit(model: str, gpu: str, context: int, dtype: str) -> lab.BatchFit:
    return lab.batch_fit(model, gpu, context, dtype)


page_header(PAGE)


def _calculator() -> None:
    """The lesson's settings, numbers and charts: a widget here re-runs only this (ui.router.lesson_section)."""
    view = linked_view(PAGE)  # the settings below come from the URL (defaults in lessons/links.py) and are written back

    c1, c2, c3 = st.columns(3)
    model = c1.selectbox("Model", choices.MODEL_KEYS, key=view.keys["model"])
    gpu = c2.selectbox("GPU", choices.GPU_KEYS, format_func=choices.gpu_name, key=view.keys["gpu"])
    dtype = c3.selectbox("Weight precision", lab.WEIGHT_DTYPES, key=view.keys["dtype"])
    c4, c5 = st.columns(2)
    context = c5.number_input(
        "Context length (tokens in the KV cache per sequence)",
        min_value=1,
        max_value=1_000_000,
        step=512,
        key=view.keys["context"],
    )
    own_config_box(PAGE, "bf16", int(context))  # the learner's own model, read as the catalog's are
    problem = lab.context_problem(model, int(context))  # a context the model cannot read: explained below
    fit = None if problem else _fit(model, gpu, int(context), dtype)
    batch = c4.slider(
        "Sequences decoding together (batch)",
        1,
        lab.MAX_BATCH,
        key=view.keys["batch"],
        help=f"At this context, at most {fit.max_batch:,} sequences fit in the {fit.gpu_name}'s KV budget "
        f"(gpu_memory_utilization {lab.GPU_MEMORY_UTILIZATION}); larger batches are shown as not fitting."
        if fit
        else None,
    )
    view.publish()
    if problem:
        show_error(*problem)
        st.stop()
    result = run_or_stop(_lesson, model, gpu, int(batch), int(context), dtype, hint="pick a supported setting")
    if not fit.fits(int(batch)):
        st.warning(
            fit.why(int(batch)) + " The numbers below are what the roofline would give if it did.",
            icon=":material/block:",
        )

    m1, m2, m3, m4 = metric_row(4)
    m1.metric("Bytes moved per generated token", f"{result.gb_per_token:,.2f} GB")
    m2.metric("Decode step (roofline bound)", f"{result.ms_per_token:,.2f} ms")
    m3.metric("Decode tokens/s (whole batch)", f"{result.decode_tokens_per_s:,.0f}")
    m4.metric("Decode is limited by", result.decode_limit)
    m5, m6, m7 = metric_row(3)
    m5.metric("KV cache of this batch", f"{fit.kv_gib(int(batch)):,.1f} GiB")
    m6.metric(
        "KV budget on this GPU",
        f"{fit.kv_budget_gib:,.1f} GiB",
        help=f"{fit.gpu_name} memory × {lab.GPU_MEMORY_UTILIZATION} − weights − activations − overhead",
    )
    m7.metric("Largest batch that fits", f"{fit.max_batch:,}", help=fit.why(int(batch)))
    st.markdown(result.verdict())

    g = result.gpu
    show_chart(
        figure(
            charts_bandwidth.roofline, g.bf16_flops, g.bandwidth_bytes_per_s, result.points(), f"Roofline of {g.name}"
        ),
        f"Roofline of {g.name} ({result.bandwidth_tb_per_s:,.2f} TB/s, {result.peak_tflops:,.0f} TFLOP/s bf16; "
        f"source: {g.source}). Points left of the dotted ridge line are bandwidth-bound.",
        result.summary_rows(),
        f"roofline-{model}-{gpu}",
        "bw_roofline",
        summary=result.roofline_summary(),
    )
    per_op = result.bytes_per_op()
    show_chart(
        figure(
            charts.bar,
            [o.op for o in per_op],
            [o.mb_per_token for o in per_op],
            "Bytes moved per generated token",
            "MB per token",
        ),
        "Every decode step streams every weight matrix once (shared by the batch; of the input embedding table only "
        "each token's row) plus each sequence's whole KV cache ('attention'). Raising the batch shares the weight "
        "bytes; the KV bytes grow with it.",
        result.bytes_per_token_rows(),
        f"bytes-per-token-{model}",
        "bw_bytes",
        summary=result.bytes_summary(),
    )
    prose(PAGE, "Batching")
    sweep = _sweep(model, gpu, int(context), dtype)
    big = sweep.largest
    show_chart(
        figure(
            charts_bandwidth.batch_sweep,
            sweep.points,
            fit.max_batch,
            f"Decode throughput as the batch grows ({int(context):,} tokens)",
        ),
        f"Throughput rises while the batch shares the weight reads, then levels off: attention reads every sequence's "
        f"KV cache each step, and its intensity stays at {sweep.attention_intensity:,.1f} FLOP/byte "
        f"(the group size, {sweep.group_size} query heads per KV head) whatever the batch — at batch {big.batch:,} KV "
        f"is {big.kv_share_pct:,.0f}% of the bytes moved. Grey crosses: batches whose KV does not fit next to "
        f"the weights in {fit.gpu_name} memory (largest that fits: {fit.max_batch:,}).",
        sweep.rows(),
        f"batch-sweep-{model}-{gpu}",
        "bw_sweep",
        summary=sweep.summary(),
    )

    st.subheader("Measured on this machine")
    prose(PAGE, "Measured here")
    if st.button("Measure this machine's bandwidth", key="bw_measure"):
        with st.status("Timing a decode-like GEMV and a prefill-like GEMM …", expanded=False) as status:
            st.session_state[MEASURE_KEY] = lab.measure_here()
            status.update(label="Measured", state="complete")
    machine: lab.MachineBandwidth | None = st.session_state.get(MEASURE_KEY)
    if machine:
        a1, a2, a3 = metric_row(3)
        a1.metric("Decode-like: achieved bandwidth", f"{machine.gemv_gb_per_s:,.1f} GB/s")
        a2.metric("Decode-like: achieved compute", f"{machine.gemv_gflops:,.1f} GFLOP/s")
        a3.metric("Prefill-like: achieved compute", f"{machine.gemm_gflops:,.1f} GFLOP/s")
        st.markdown(
            f"The same weights did **{machine.reuse_gain:,.0f}×** more useful work "
            f"per second when each byte was reused for {machine.gemm.batch} tokens: "
            "the decode-like run was waiting for memory, not arithmetic."
        )
        show_table(machine.rows(), "bandwidth-measurement", "bw_measure_table", "measurement")
    else:
        st.caption("Press the button to time your own machine (about a second).")

    if st.button("Time the demo model's real decode step", key="bw_measure_demo"):
        with st.status("Loading the demo model and timing decode steps …", expanded=False) as status:
            try:
                # MBU needs this machine's bandwidth too: measure_demo times it first when it is not measured yet
                demo_run = lab.measure_demo(st.session_state.get(MEASURE_KEY))
                st.session_state[MEASURE_KEY], st.session_state[DEMO_KEY] = demo_run.machine, demo_run
                status.update(label="Measured", state="complete")
            except lab.TooNoisy as exc:  # every round of timing came out impossible: say so, keep what was shown
                status.update(label="Too noisy to measure now", state="error")
                show_error(f"The decode step was {exc}.", "press the button again in a moment, when it is less busy.")
            except (FileNotFoundError, OSError, ValueError) as exc:
                st.session_state.pop(DEMO_KEY, None)
                status.update(label="Demo model unavailable", state="error")
                show_error(f"The demo model could not be loaded ({exc}).", "train or install it, see README.")
    demo: lab.DemoDecode | None = st.session_state.get(DEMO_KEY)
    if demo:
        demo = demo.against(st.session_state[MEASURE_KEY])  # this machine's latest measurement
        for column, (label, value, help_text) in zip(metric_row(3), demo.metrics(), strict=True):
            column.metric(label, value, help=help_text)
        st.caption(demo.caption())
        show_table(demo.rows(), "demo-decode-measurement", "bw_demo_table", "measurement")


lesson_section(_calculator)

sources(PAGE)
lesson_check(PAGE)
