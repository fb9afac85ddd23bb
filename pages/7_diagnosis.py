"""Lesson 7 — Production diagnosis: an OOM incident's symptoms, the learner's diagnosis and fixes, a graded re-run,
and "diagnose your own server" (a pasted vLLM log read into a memory bar, room for requests and flag changes)."""

from typing import Any

import streamlit as st

from lessons.diagnosis import get_scenario, own_log, scenario_ids, symptoms, vllm_command
from lessons.diagnosis.readlog import MAX_LOG_CHARS
from lessons.labs import diagnosis as lab
from ui import charts_memory
from ui.chart_view import show_chart
from ui.downloads import download_rows, show_table
from ui.errors import run_or_stop
from ui.extensible_section import extensible_section
from ui.figure_cache import frozen_figure
from ui.inert import prose_md
from ui.kv_precision import kv_precision_section
from ui.linked_view import linked_view
from ui.memo import memo
from ui.own_config import own_config_box
from ui.progress import record_diagnosis
from ui.prose import page_header, prose, sources
from ui.quiz import lesson_check
from ui.router import lesson_section

PAGE = "diagnosis"


@memo(max_entries=32)
def _symptoms(scenario_id: str, variant: int) -> Any:
    return symptoms(lab.scenario_for(scenario_id, variant))


@memo(max_entries=32)  # a figure, shared read-only
def _memory_fig(scenario_id: str, variant: int) -> Any:
    title = lab.memory_title(lab.scenario_for(scenario_id, variant))
    return frozen_figure(charts_memory.memory_breakdown(_symptoms(scenario_id, variant).memory, title))


@memo(max_entries=64)
def _grade(
    scenario_id: str, variant: int, diagnoses: tuple[str, ...], fixes: tuple[tuple[str, Any], ...]
) -> lab.GradedRun:
    return lab.graded_run(scenario_id, variant, diagnoses, dict(fixes))


page_header(PAGE)


def _calculator() -> None:
    """The lesson's settings, numbers and charts: a widget here re-runs only this (ui.router.lesson_section)."""
    view = linked_view(PAGE)  # incident and variant come from the URL (defaults in lessons/links.py), written back

    c1, c2 = st.columns([3, 1])
    sid = c1.selectbox(
        "Incident", scenario_ids(), format_func=lambda i: get_scenario(i).title, key=view.keys["incident"]
    )
    variant = c2.number_input(
        "Variant (0 = original)",
        0,
        lab.MAX_VARIANT,
        step=1,
        key=view.keys["variant"],
        help="Each variant changes the traffic and sizes a little, so classmates do not share one answer.",
    )
    view.publish()
    scenario = run_or_stop(lab.scenario_for, sid, int(variant), hint=f"pick a whole number from 0 to {lab.MAX_VARIANT}")
    st.markdown(f"### {scenario.title}\n\n{scenario.story}")

    st.subheader("Symptoms")
    prose(PAGE, "Symptoms")
    with st.spinner("Replaying the incident's traffic …"):
        sym = _symptoms(sid, int(variant))
    # Plain code blocks: Streamlit's syntax colours (e.g. numbers #29b09d on #f7f7f6, 2.5:1) are under WCAG's 4.5:1.
    st.code("\n".join(sym.logs), language=None, wrap_lines=True)
    show_chart(
        _memory_fig(sid, int(variant)),
        "Where the GPU's memory goes as deployed; every segment is labelled with its part and size.",
        sym.memory_rows(),
        f"memory-{sid}-{variant}",
        "diag_mem",
        summary=charts_memory.memory_summary(sym.memory),
    )
    show_table(lab.traffic_rows(sym), f"traffic-{sid}-{variant}", "diag_traffic", "traffic numbers")

    st.subheader("Your diagnosis")
    st.caption("Tick every explanation you think is true (there may be more than one).")
    suffix = f"{sid}_{variant}"
    picked = tuple(d.id for d in scenario.diagnoses if st.checkbox(d.text, key=f"diag_dx_{d.id}_{suffix}"))
    with st.expander("Hint"):
        st.markdown(scenario.hint)

    st.subheader("Your fixes")
    prose(PAGE, "Fixes")
    now = lab.current_values(scenario.config)
    chosen: dict[str, Any] = {}
    f1, f2 = st.columns(2)
    for i, (param, current) in enumerate(now.items()):
        col, label, key = (f1, f2)[i % 2], lab.FIX_LABELS[param], f"diag_fix_{param}_{suffix}"
        opts = lab.options_for(param, current)
        if param == "model":
            chosen[param] = col.selectbox(label, opts, index=opts.index(current), key=key, format_func=lab.model_label)
        elif param in ("policy", "kv_cache_dtype", "quantization", "enforce_eager"):
            chosen[param] = col.radio(label, opts, index=opts.index(current), key=key, horizontal=True)
        elif param == "kv_cache_memory_bytes":
            chosen[param] = col.select_slider(label, options=opts, value=current, key=key, format_func=lab.gib_label)
        else:
            chosen[param] = col.select_slider(label, options=opts, value=current, key=key)
    fixes = run_or_stop(lab.changed_fixes, scenario.config, chosen)
    st.markdown("**Changed:** " + (", ".join(f"`{k}` {now[k]} → {v}" for k, v in fixes.items()) or "nothing yet"))
    st.code(vllm_command(scenario, fixes), language=None, wrap_lines=True)
    st.download_button(
        "Download this `vllm serve` command",
        vllm_command(scenario, fixes) + "\n",
        file_name=f"serve-{sid}.sh",
        mime="text/x-shellscript",
        key="diag_cmd_dl",
    )

    result_key = f"diag_result_{suffix}"
    if st.button("Run the traffic again", key="diag_run", type="primary"):
        with st.status("Re-running the incident with your configuration …", expanded=False) as status:
            result = run_or_stop(
                _grade,
                sid,
                int(variant),
                picked,
                tuple(sorted(fixes.items())),
                hint="pick another combination of fixes",
            )
            status.update(label="Re-run finished", state="complete")
        st.session_state[result_key] = (picked, fixes, result)
        record_diagnosis(sid, result.record)

    if result_key in st.session_state:
        graded_picked, graded_fixes, result = st.session_state[result_key]
        st.subheader("Result")
        if graded_picked != picked or graded_fixes != fixes:
            st.caption("You changed your answers since this run; press **Run the traffic again** to grade them.")
        (st.success if result.resolved else st.warning)(
            result.verdict, icon=":material/check_circle:" if result.resolved else ":material/cancel:"
        )
        for line in result.explanation:
            st.markdown(f"- {line}")
        show_table(result.rows, f"diagnosis-{sid}-{variant}", "diag_rows", "before / after")
        if result.diagnosis_feedback:
            st.markdown("**On your diagnosis**\n\n" + "\n".join(f"- {line}" for line in result.diagnosis_feedback))
        if result.costs:
            st.markdown("**What the fix costs**\n\n" + "\n".join(f"- {line}" for line in result.costs))
        download_rows([result.record], f"diagnosis-result-{sid}", "diag_record", "result")


def _own_server() -> None:
    """The paste box: a learner's own vLLM log (and OOM message) read into numbers, a bar and flag changes."""
    st.subheader("Diagnose your own server")
    prose(PAGE, "Your own server")
    own_config_box(PAGE)  # the learner's own model: its KV per token, for the pool their log reports
    pasted = st.text_area(
        "Your vLLM start-up log",
        key="diag_paste_log",
        max_chars=MAX_LOG_CHARS,
        height=180,
        placeholder="INFO ... [gpu_worker.py] Available KV cache memory: 6.87 GiB",
    )
    oom = st.text_area(
        "PyTorch out-of-memory message (optional)",
        key="diag_paste_oom",
        max_chars=own_log.MAX_OOM_CHARS,
        height=80,
        placeholder="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ...",
    )
    if not (pasted.strip() or oom.strip()):
        return
    log = own_log.read_paste(pasted, oom)
    for doubt in log.doubts:  # the course's own words about a figure beyond any GPU (no pasted text in them)
        st.warning(doubt, icon=":material/report:")
    if not log.recognised:
        st.info(log.message, icon=":material/help:")
        return
    if log.message:
        st.caption(log.message)
    c1, c2 = st.columns(2)
    model = c1.selectbox(
        "Model (KV bytes per token; empty: from the log)",
        lab.PASTE_MODELS,
        index=lab.paste_model_index(own_log.guess_model(log)),
        key="diag_paste_model",
        format_func=lab.model_label_or_log,
    )
    start = own_log.request_len_default(log)
    length = int(
        c2.number_input("Request length (tokens)", 1, own_log.MAX_REQUEST_LEN, start, step=256, key="diag_paste_len")
    )
    show_table(own_log.found_rows(log), "your-vllm-log", "diag_paste_found", "what your log says")
    for error in log.errors:  # a line of the learner's paste: shown as text, never as Markdown
        st.warning(f"Your log reports: {prose_md(error)}", icon=":material/error:")
    parts = own_log.memory_parts(log)
    if parts:
        fig = charts_memory.memory_breakdown(parts, "Your GPU's memory, from the log")
        show_chart(
            fig,
            "Your GPU's memory by part, as the pasted log states it (GiB); parts the log does not state are left out.",
            own_log.memory_rows(log),
            "your-gpu-memory",
            "diag_paste_mem",
            summary=charts_memory.memory_summary(parts),
        )
    pool = own_log.kv_pool(log, model or None)
    if pool:
        st.markdown(own_log.room_sentence(pool, length))
    changes = own_log.suggestions(log, length, model or None)
    if changes:
        st.markdown("**Flag changes and what vLLM's start-up arithmetic gives with each**")
        show_table([c.row() for c in changes], "your-server-fixes", "diag_paste_fixes", "flag changes")
    else:
        st.caption(
            "For flag suggestions the page needs the KV cache size ('Available KV cache memory' or "
            "'GPU KV cache size') or the model: pick it above."
        )


def _kv_precision() -> None:
    kv_precision_section(PAGE)


def _extensible() -> None:
    extensible_section(PAGE)


# Four fragments: the paste box and the two sections take none of the incident's settings, so a move in one
# re-runs it alone.
lesson_section(_calculator)
lesson_section(_own_server)
lesson_section(_kv_precision)
lesson_section(_extensible)

sources(PAGE)
lesson_check(PAGE)
