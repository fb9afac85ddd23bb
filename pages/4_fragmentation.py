"""Lesson 4 — Fragmentation: static Max / Pow2 / Oracle reservation vs paged KV over one trace, in vLLM's terms."""

from typing import Any

import streamlit as st

from lessons.labs import choices
from lessons.labs import fragmentation as lab
from ui import charts, charts_memory
from ui.chart_view import show_chart
from ui.downloads import show_table
from ui.errors import run_or_stop
from ui.figure_cache import figure, frozen_figure
from ui.hybrid_section import hybrid_section
from ui.linked_view import linked_view
from ui.memo import memo
from ui.own_config import own_config_box
from ui.prose import page_header, prose, sources
from ui.quiz import lesson_check
from ui.router import lesson_section

PAGE = "fragmentation"


@memo(max_entries=64)
def _report(
    model: str, gpu: str, max_len: int, dataset: str, num_requests: int, rate: float
) -> lab.FragmentationReport:
    return lab.static_report(model, gpu, max_len, dataset, num_requests, rate)


# Built once per setting and shared read-only (nothing mutates a figure after it is built).
@memo(max_entries=64)
def _area_fig(model: str, gpu: str, max_len: int, dataset: str, num_requests: int, rate: float) -> Any:
    rep = _report(model, gpu, max_len, dataset, num_requests, rate)
    x, ys = rep.series()
    title = f"KV slots of a static server: {rep.model_name} on {rep.gpu_name}, max_model_len {max_len:,}"
    fig = charts.stacked_area(x, ys, title, "time (s, simulated)", "KV slots (tokens)")
    # five long legend names wrap to three rows: give them room below the title instead of over it
    return frozen_figure(fig.update_layout(margin={"t": 130}, title={"y": 0.98, "yanchor": "top"}, height=460))


page_header(PAGE)


def _calculator() -> None:
    """The lesson's settings, numbers and charts: a widget here re-runs only this (ui.router.lesson_section)."""
    view = linked_view(PAGE)  # the settings come from the URL (defaults in lessons/links.py) and are written back

    c1, c2, c3 = st.columns(3)
    model = c1.selectbox("Model", lab.MODEL_CHOICES, key=view.keys["model"], format_func=choices.model_name)
    gpu = c2.selectbox("GPU", choices.GPU_KEYS, key=view.keys["gpu"], format_func=choices.gpu_name)
    max_len = c3.select_slider(
        "max_model_len (tokens reserved per request)", options=lab.MAX_MODEL_LENS, key=view.keys["max_model_len"]
    )
    c4, c5, c6 = st.columns(3)
    dataset = c4.selectbox("Traffic", lab.TRAFFIC, key=view.keys["dataset"], help=lab.traffic_help())
    rate = c5.slider("Requests per second", 0.5, lab.MAX_RATE, step=0.5, key=view.keys["rate"])
    num_requests = c6.slider("Requests in the trace", 20, lab.MAX_REQUESTS, step=20, key=view.keys["requests"])
    view.publish()
    own_config_box(PAGE, "bf16", int(max_len))  # the learner's own model: what one max_model_len reservation holds

    with st.spinner("Replaying the trace through three static servers and a paged one …"):
        rep = run_or_stop(
            _report,
            model,
            gpu,
            int(max_len),
            dataset,
            int(num_requests),
            float(rate),
            hint="pick a larger GPU, a smaller model, a longer max_model_len for long-prompt traffic, or fewer "
            "requests.",
        )

    if rep.beyond_training:
        st.warning(
            f"{rep.model_name} was trained for at most {rep.model_max_context:,} tokens; the memory "
            "arithmetic still runs, but a real server would refuse this max_model_len."
        )
    st.info(rep.callout(), icon=":material/calculate:")
    s = rep.static
    m1, m2, m3, m4 = st.columns(4)
    m1.metric("KV holding live tokens, static Max", f"{rep.stored_fraction:.1%}", help="step-average share of held KV")
    m2.metric(
        "Unused slots at the peak",
        f"{rep.peak.unused:,}",
        f"{rep.unused_gib_at_peak:,.1f} GiB",
        delta_color="off",
        delta_arrow="off",
    )
    m3.metric("Running at once, static Max", f"{s.peak_concurrency}")
    gain = f"{rep.paged_concurrency_gain:.1f}× static Max"
    m4.metric("Running at once, paged", f"{rep.paged.peak_concurrency}", gain, delta_color="off", delta_arrow="off")
    peak = rep.peak
    st.markdown(
        f"The KV pool holds **{rep.capacity_tokens:,} tokens** ({rep.kv_kib_per_token:,} KiB each). At the "
        f"busiest moment {peak.running} max-length reservations held {peak.held:,} slots and "
        f"only {peak.stored:,} of them stored a token. On this trace the share of held KV memory storing "
        f"tokens is **{rep.share('Max').stored_pct:.1f}%** reserving max_model_len, "
        f"**{rep.share('Pow2').stored_pct:.1f}%** reserving a power of two, "
        f"**{rep.share('Oracle').stored_pct:.1f}%** reserving the exact final length and "
        f"**{rep.share('paged').stored_pct:.1f}%** paged. Kwon et al. (Fig. 2) measured "
        f"{lab.paper_stored_sentence()} on their own traces."
    )

    prose(PAGE, "The trace")
    show_chart(
        _area_fig(model, gpu, int(max_len), dataset, int(num_requests), float(rate)),
        "Stacked, bottom to top: stored tokens (solid), reserved slots for tokens still to come (/), internal "
        "fragmentation that will never be used (x), external fragmentation too small for the waiting request (.), "
        "and free slots (backslash hatching). The five add up to the KV capacity at every step.",
        rep.rows,
        f"fragmentation-{model}-{gpu}-{max_len}",
        "frag_area",
        summary=rep.area_summary(),
    )

    prose(PAGE, "What it costs")
    waste_rows = rep.waste_rows()
    show_chart(
        figure(
            charts_memory.waste_by_policy, rep.shares(), "Where held KV memory goes: three static policies vs paged"
        ),
        "One bar per server, the same trace and the same KV bytes: stored tokens (solid), reserved slots for tokens "
        "still to come (/), internal fragmentation (x) and external fragmentation (.), as step-averaged shares of the "
        "slots held while requests run. The table adds the paper's Fig. 2 share for each policy.",
        waste_rows,
        f"waste-by-policy-{model}-{gpu}-{max_len}",
        "frag_policies",
        summary=rep.waste_summary(),
    )
    show_table(waste_rows, f"static-vs-paged-{model}-{gpu}-{max_len}", "frag_waste", "comparison")
    st.caption(
        f"Same trace ({rep.trace.num_requests} {dataset} requests: mean prompt {rep.trace.prompt_mean}, mean "
        f"output {rep.trace.output_mean} tokens), same KV bytes. Step time from the roofline of {rep.gpu_name}; "
        "waste = step-average of (reserved + internal + external) / held slots while requests run."
    )


def _hybrid() -> None:
    hybrid_section(PAGE)


lesson_section(_calculator)
lesson_section(_hybrid)  # its own fragment: the hybrid chart takes none of the calculator's settings

sources(PAGE)
lesson_check(PAGE)
