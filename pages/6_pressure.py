"""Lesson 6 — Serving under KV pressure: traffic through the real engine read as vLLM's metrics, the two limits,
the token budget, the simulator at GPU scale, and a reader for a server's /metrics."""

from typing import Any

import streamlit as st

from lessons.diagnosis import read_vllm_metrics
from lessons.diagnosis.metrics import MAX_SCRAPE_BYTES, metrics_rows
from lessons.labs import choices
from lessons.labs import pressure as lab
from lessons.run_limit import RunAllowance
from ui import charts_pressure
from ui.chart_view import metric_row, show_chart
from ui.downloads import show_table
from ui.errors import show_error, within_run_limit
from ui.figure_cache import figure, frozen_figure
from ui.inert import prose_md
from ui.linked_view import linked_view
from ui.memo import memo
from ui.pressure_gpu import gpu_scale_section
from ui.prose import page_header, prose, sources
from ui.quiz import lesson_check
from ui.router import lesson_section

PAGE = "pressure"
PASTE_CHARS = 300_000  # a real scrape is tens of KB; the reader itself refuses more than MAX_SCRAPE_BYTES
ALLOWANCE_KEY = "pr_run_allowance"  # this session's count of uncached engine runs (lessons/run_limit.py)


@st.cache_resource(show_spinner=False)
def _model() -> tuple[Any, Any, Any]:
    """The demo model on the CPU, loaded once per process and shared read-only by every run."""
    return lab.load_demo()


@memo(max_entries=256)
def _run(rate: float, prompt_len: int, num_blocks: int, max_num_seqs: int, budget: int, burst: bool) -> lab.PressureRun:
    """One engine run per setting, shared by every learner of this server (the runs are seeded)."""
    # Only a miss gets here: a setting anyone ran before costs this session nothing.
    st.session_state.setdefault(ALLOWANCE_KEY, RunAllowance()).charge()
    return lab.run(lab.Traffic(rate, prompt_len, num_blocks, max_num_seqs, budget), _model(), burst)


def _of(t: lab.Traffic, burst: bool = False) -> lab.PressureRun:
    return _run(t.rate, t.prompt_len, t.num_blocks, t.max_num_seqs, t.budget, burst)


@memo(max_entries=64)
def _dashboard_fig(rate: float, prompt_len: int, num_blocks: int, max_num_seqs: int, budget: int) -> Any:
    run = _run(rate, prompt_len, num_blocks, max_num_seqs, budget, False)
    title = f"One run: {lab.NUM_REQUESTS} requests at {rate:g} per step into {num_blocks} KV blocks (real engine)"
    return frozen_figure(charts_pressure.dashboard(run.steps, lab.METRICS, title))


page_header(PAGE)


def _budget_section(budgets: lab.BudgetSweep, prompt_len: int, max_num_seqs: int) -> None:
    """The token budget's chart and its sentence, from the burst run at each budget."""
    show_chart(
        figure(
            charts_pressure.budget_trade,
            budgets.points(),
            "The token budget's trade, on a burst of prompts (real engine)",
        ),
        budgets.caption(),
        budgets.rows(),
        f"pressure-budget-{prompt_len}-{max_num_seqs}",
        "pr_budget",
        summary=budgets.summary(),
    )
    st.markdown(budgets.outcome())


def _calculator() -> None:
    """The lesson's settings, numbers and charts: a widget here re-runs only this (ui.router.lesson_section)."""
    view = linked_view(PAGE)  # the settings come from the URL (defaults in lessons/links.py) and are written back

    c1, c2, c3 = st.columns(3)
    rate = c1.select_slider(
        "Traffic (new requests per engine step)",
        options=lab.RATES,
        key=view.keys["rate"],
        help="Poisson arrivals, counted in engine steps so the run is the same on every machine. "
        f"{lab.NUM_REQUESTS} requests, each generating {lab.OUTPUT_TOKENS} tokens.",
    )
    prompt_len = c2.select_slider("Prompt length (tokens)", options=lab.PROMPT_LENS, key=view.keys["prompt_len"])
    num_blocks = c3.select_slider(
        "KV pool (blocks of 16 tokens)",
        options=lab.POOL_BLOCKS,
        key=view.keys["kv_blocks"],
        help="The engine's num_gpu_blocks: on a GPU, what gpu_memory_utilization leaves for KV after the weights.",
    )
    c4, c5 = st.columns(2)
    max_num_seqs = c4.select_slider(
        "max_num_seqs (requests in the batch at most)", options=lab.MAX_NUM_SEQS, key=view.keys["max_num_seqs"]
    )
    budget = c5.select_slider(
        "max_num_batched_tokens (token budget)",
        options=lab.BUDGETS,
        key=view.keys["max_num_batched_tokens"],
        help="Tokens one step may compute: one per decode, the rest for prompt chunks (chunked prefill).",
    )

    traffic = lab.Traffic(float(rate), int(prompt_len), int(num_blocks), int(max_num_seqs), int(budget))
    run: lab.PressureRun | None = None
    try:
        traffic.check()
    except ValueError as exc:
        show_error(exc, "move the slider it names; the sections below that need the engine wait until then.")
    else:
        with st.spinner("Pushing the traffic through the engine (demo model, CPU) …"):
            run = within_run_limit(lambda: _of(traffic))

    if run is not None:
        st.subheader("The dashboard")
        m = lab.METRICS
        m1, m2, m3, m4 = metric_row(4)
        m1.metric("Preemptions", f"{run.preemptions}", help=f"{m['preemptions']} at the end of the run")
        m2.metric("Peak KV-cache usage", f"{run.peak_kv_usage:.0%}", help=m["kv_usage"])
        m3.metric("Peak running", f"{run.peak_running}", help=m["running"])
        m4.metric(
            "Peak waiting",
            f"{run.peak_waiting}",
            help=f"{m['waiting']}; all of them wait for capacity here ({m['waiting_capacity']})",
        )
        m5, m6, m7, m8 = metric_row(4)
        m5.metric("Recomputed tokens", f"{run.recomputed_tokens:,}", help="the engine's own counter; vLLM has none")
        m6.metric("TTFT p50 / p95", f"{run.ttft_ms(50):,.0f} / {run.ttft_ms(95):,.0f} ms", help=m["ttft"])
        m7.metric("TPOT p50 / p95", f"{run.tpot_ms(50):.0f} / {run.tpot_ms(95):.0f} ms", help=m["tpot"])
        m8.metric("Limit that binds", run.binding)
        st.markdown(run.binding_sentence())
        st.caption(
            f"{run.num_steps} engine steps in {run.wall_s:.2f} s on this machine's CPU (one thread). TTFT in steps: "
            f"p50 {run.ttft_steps(50):g}, p95 {run.ttft_steps(95):g} (the same on every machine); milliseconds "
            "come from the engine's own timestamps of this run (arrival, first token, finish)."
        )
        prose(PAGE, "What an operator watches")
        show_chart(
            _dashboard_fig(traffic.rate, traffic.prompt_len, traffic.num_blocks, traffic.max_num_seqs, traffic.budget),
            "Top: the KV pool's blocks in use. Bottom: requests running (solid) and waiting (dashed), and the "
            "preemption counter (dash-dot), after every engine step: what a dashboard scraping the engine would draw.",
            [s.row() for s in run.steps],
            f"pressure-steps-{rate:g}-{num_blocks}",
            "pr_steps",
            summary=run.chart_summary(),
        )
        with st.expander("Every request: TTFT, TPOT and preemptions", expanded=False):
            show_table(
                [r.row() for r in run.requests], f"pressure-requests-{rate:g}-{num_blocks}", "pr_reqs", "requests"
            )

        st.subheader("Traffic grows")
        prose(PAGE, "Traffic grows")
        with st.spinner("Running the same settings at each traffic level …"):
            sweep = within_run_limit(lambda: lab.RateSweep(tuple(_of(t) for t in lab.rate_settings(traffic))))
    if run is not None and sweep is not None:
        rows = sweep.rows()
        show_chart(
            figure(
                charts_pressure.traffic_sweep,
                sweep.points(),
                f"Preemptions and TTFT as traffic grows ({num_blocks} KV blocks)",
            ),
            "One run of the real engine per traffic level, the other settings as above: preemptions (hatched bars, "
            "left axis) and TTFT p50 (solid) and p95 (dashed) in engine steps (right axis).",
            rows,
            f"pressure-traffic-{num_blocks}-{prompt_len}",
            "pr_sweep",
            summary=sweep.summary(),
        )

    st.subheader("Two limits: the KV pool or max_num_seqs")
    prose(PAGE, "Two limits")

    st.subheader("The token budget")
    prose(PAGE, "The token budget")
    settings = lab.budget_settings(traffic)
    with st.spinner("Running the burst at each token budget …"):
        budgets = within_run_limit(lambda: lab.BudgetSweep(tuple(_of(t, burst=True) for t in settings)))
    if budgets is not None:
        _budget_section(budgets, prompt_len, max_num_seqs)

    st.subheader("At GPU scale (simulated)")
    prose(PAGE, "At GPU scale")
    gpu = st.selectbox(
        "GPU (simulator)",
        lab.GPU_CHOICES,
        key=view.keys["gpu"],
        format_func=choices.gpu_name,
        help=f"{lab.GPU_REQUESTS} ShareGPT-like requests of {lab.GPU_MODEL}, max_model_len {lab.GPU_MAX_MODEL_LEN:,}, "
        f"gpu_memory_utilization {lab.GPU_UTILIZATION}.",
    )
    view.publish()
    gpu_scale_section(PAGE, gpu)  # the simulated sweep and the learner's own config.json


def _metrics() -> None:
    """A learner's own /metrics scrape read into the limit that binds (takes none of the calculator's settings)."""
    st.subheader("Read your server's /metrics")
    prose(PAGE, "Your server's /metrics")
    scrape = st.text_area(
        "Paste a /metrics scrape",
        key="pr_scrape",
        max_chars=PASTE_CHARS,
        height=160,
        placeholder="# HELP vllm:num_requests_running ...",
    )
    with st.expander("Optional: an earlier scrape of the same server, and its max_num_seqs"):
        earlier = st.text_area("Earlier scrape", key="pr_earlier", max_chars=PASTE_CHARS, height=120)
        seats = st.number_input(
            "--max-num-seqs (0 = not known)", min_value=0, max_value=1_000_000, step=1, key="pr_seats"
        )
    if scrape.strip():
        result = read_vllm_metrics(
            scrape, max_num_seqs=int(seats) or None, earlier=earlier if earlier.strip() else None
        )
        if result.error:
            st.warning(prose_md(result.error), icon=":material/data_alert:")
        else:
            rows = metrics_rows(result)
            if rows:
                st.dataframe(rows, hide_index=True, key="pr_metrics_table")
            binds = lab.SCRAPE_BINDING.get(result.binding, lab.SCRAPE_BINDING[lab.BINDS_UNKNOWN])
            st.info(f"**Limit that binds: {binds}.** {prose_md(result.reason)}", icon=":material/speed:")
            st.markdown(f"**What to change:** {prose_md(result.fix)}")
        for note in result.notes:
            st.caption(prose_md(note))
        st.caption(
            f"The reader takes up to {MAX_SCRAPE_BYTES // 1_000_000} MB; this box up to {PASTE_CHARS:,} characters."
        )


lesson_section(_calculator)
lesson_section(_metrics)  # its own fragment: a paste re-runs the reader, not the engine runs above

sources(PAGE)
lesson_check(PAGE)
