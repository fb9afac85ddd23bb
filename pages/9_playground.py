"""Engine playground: prompts in, the real engine generates, and the learner replays its scheduler steps."""

import functools
import threading
from typing import Any

import streamlit as st

from lessons.labs import playground as lab
from lessons.labs.paged_kernel import BLOCK_SIZES
from ui import charts, charts_memory, metrics
from ui.chart_view import metric_row, show_chart
from ui.downloads import show_table
from ui.errors import run_or_stop, show_error
from ui.linked_view import linked_view
from ui.prose import page_header, prose, sources
from ui.quiz import lesson_check

PAGE = "playground"
RUN_KEY, TICKET_KEY = "pg_run", "pg_ticket"  # per-learner state: the last run and their claim on the engine pool


@st.cache_resource(show_spinner=False)
def _load_lock() -> threading.Lock:
    """One model load at a time in this process, so learners loading different folders cannot stack them up."""
    return threading.Lock()


@st.cache_resource(show_spinner=False, max_entries=2)
def _weights(model: str, policy: lab.ModelPolicy) -> tuple[Any, Any, Any]:
    """Weights, config and tokenizer loaded once per process (on its default device) and shared read-only by
    every learner's engine. At most 2 models stay cached, each within KVLAB_MAX_MODEL_BYTES; a failed load is
    not cached."""
    with _load_lock():
        return lab.load(model, None, policy)


def _generate(
    model: str, settings: lab.EngineSettings, policy: lab.ModelPolicy, prompts: list[str], params: Any, status: Any
) -> lab.PlaygroundRun:
    """One run on the learner's engine, leased from the server's pool only inside this function: a name in
    the page's globals would keep the engine alive after its session ends (the script's namespace lives on
    in a reference cycle until Python's cyclic collector runs)."""
    with _lease(model, settings, policy) as llm:
        status.write(f"Running {len(prompts)} request(s) through the scheduler …")
        live = st.empty()  # tokens/s and KV usage while the engine runs
        return lab.generate(llm, prompts, params, on_progress=live.caption)


@st.cache_resource(show_spinner=False)
def _pool() -> lab.EnginePool:
    """This server's one pool of playground engines, shared by every learner, its idle sweeper running; a
    resource like the progress store, never a learner's state (the session holds only its ticket)."""
    pool = lab.EnginePool.from_env()
    pool.start_sweeper()
    metrics.watch_pool(pool)  # the operator's gauges read this pool when scraped (ui/metrics.py)
    return pool


def _lease(model: str, settings: lab.EngineSettings, policy: lab.ModelPolicy) -> Any:
    """The learner's LLM, leased from the server's pool and rebuilt only when the model or engine knobs change
    (so the prefix cache persists); the session holds only a ticket, so a closed tab frees the engine."""
    pool = _pool()
    ticket = st.session_state.get(TICKET_KEY)
    if ticket is None:
        ticket = st.session_state[TICKET_KEY] = pool.ticket()
    if pool.engine(ticket, (model, settings)) is None:
        pool.release(ticket.id)  # the old engine (and a model no longer cached) goes before new weights load
    weights = _weights(model, policy)
    build = functools.partial(lab.new_engine, weights, model, settings)
    return pool.lease(ticket, (model, settings), lab.kv_pool_bytes(weights, settings), build)


page_header(PAGE)
view = linked_view(PAGE)  # sampling and cache settings come from the URL (defaults in lessons/links.py)
policy = run_or_stop(lab.model_policy, hint="the operator fixes the server's environment and restarts it.")

c1, c2 = st.columns([1, 2])
source = c1.radio(
    "Model",
    policy.sources,
    key="pg_source",
    horizontal=True,
    format_func=lambda s: "Demo model" if s == "demo" else "Local Hugging Face folder",
)
if policy.folders_allowed:
    folder = c2.text_input(
        "Folder path (config.json + *.safetensors)",
        "",
        key="pg_path",
        max_chars=lab.MAX_PATH_CHARS,
        disabled=source == "demo",
        help=f"A model folder under {policy.allowed_text} on this server, at most {policy.limit_text}; nothing is "
        "downloaded.",
    )
else:
    folder = ""
    c2.info(lab.FOLDERS_DISABLED_NOTICE, icon=":material/block:")
text = st.text_area(
    "Prompts, one per line",
    lab.DEFAULT_PROMPTS,
    key="pg_prompts",
    max_chars=lab.MAX_PROMPTS_TEXT_CHARS,
    height=120,
    help=f"At most {lab.MAX_PROMPTS} prompts.",
)

st.markdown("**Sampling**")
s1, s2, s3, s4, s5 = st.columns(5)
max_tokens = s1.slider("Max new tokens", 1, lab.MAX_NEW_TOKENS, key=view.keys["max_tokens"])
temperature = s2.slider(
    "Temperature (0 = greedy)",
    0.0,
    2.0,
    step=0.1,
    key=view.keys["temperature"],
    help="The tiny demo model loops when greedy; 0.6 with top-k 40 reads better.",
)
top_p = s3.slider("Top-p", 0.05, 1.0, step=0.05, key=view.keys["top_p"])
top_k = s4.number_input("Top-k (0 = off)", 0, 1024, key=view.keys["top_k"])
seed = s5.number_input("Seed", 0, 2**31 - 1, key=view.keys["seed"])

st.markdown("**Paged KV cache** — few blocks make the scheduler queue and preempt requests")
e1, e2, e3 = st.columns(3)
block_size = e1.select_slider("Block size (tokens)", options=BLOCK_SIZES, key=view.keys["block_size"])
num_blocks = e2.slider("KV blocks in the pool", 1, lab.MAX_BLOCKS, key=view.keys["num_blocks"])
prefix = e3.toggle(
    "Prefix caching", key=view.keys["prefix_caching"], help="Reuse full blocks of identical prompt prefixes."
)
view.publish()
settings = lab.EngineSettings(block_size, int(num_blocks), bool(prefix))
st.caption(f"The pool holds {settings.pool_tokens:,} tokens; that is also the longest sequence it accepts.")

if st.button("Generate", key="pg_generate", type="primary"):
    try:
        prompts = lab.parse_prompts(text)
        model = lab.resolve_model(source, folder, policy)
        params = lab.sampling_params(int(max_tokens), float(temperature), float(top_p), int(top_k), int(seed))
        with st.status("Generating with the real engine …", expanded=False) as status:
            status.write("Loading weights (once per process) …")
            st.session_state[RUN_KEY] = _generate(model, settings, policy, prompts, params, status)
            status.update(label="Done", state="complete")
        st.session_state.pop("pg_step", None)
    except ValueError as exc:
        show_error(str(exc), "fix the input above and press Generate again.")

run: lab.PlaygroundRun | None = st.session_state.get(RUN_KEY)
if run is None:
    st.info("Press **Generate** to run the engine; the scheduler's steps appear here.", icon=":material/play_arrow:")
else:
    m1, m2, m3, m4, m5 = metric_row(5)
    m1.metric("Tokens/s", f"{run.tokens_per_s:,.1f}")
    m2.metric("Generated tokens", f"{run.generated_tokens:,}")
    m3.metric("Scheduler steps", f"{len(run.traces):,}")
    m4.metric("Preemptions", f"{run.num_preemptions}")
    m5.metric("Peak KV usage", f"{run.peak_kv_usage:.0%}")
    if run.prefix_cache_queries:
        st.caption(
            f"Prefix cache: {run.prefix_cache_hits:,} of {run.prefix_cache_queries:,} prompt tokens looked up were "
            f"found in full cached blocks, a hit rate of {run.prefix_cache_hit_rate:.0%} "
            "(vllm:prefix_cache_hits / vllm:prefix_cache_queries, in tokens)."
        )
    show_table(lab.output_rows(run), "playground-outputs", "pg_outputs", "outputs")

    st.subheader("Step through the scheduler")
    prose(PAGE, "Continuous batching")
    step = st.slider("Scheduler step", 1, len(run.traces), 1, key="pg_step") if len(run.traces) > 1 else 1
    steps, series = lab.timeline(run)
    timeline = charts.lines(steps, series, "Batch and KV blocks per step", "scheduler step", "requests / blocks")
    show_chart(
        charts_memory.with_marker(timeline, step, f"step {step}"),
        "Requests running (solid) and waiting (dashed) and KV blocks in use (dotted) after each step; the dotted "
        "vertical line marks the step shown below. Each row of the table is one step.",
        lab.step_rows(run),
        "playground-steps",
        "pg_timeline",
        summary=run.timeline_summary(),
    )
    view = run_or_stop(lab.step_view, run, step - 1)
    st.markdown(f"**Step {step}.** {view.story}")
    show_table(view.scheduled, f"playground-step-{step}", "pg_sched", "scheduled requests")
    if view.tables:
        show_chart(
            charts_memory.block_table_picture(
                view.tables, view.fills, run.block_size, f"Block tables after step {step}"
            ),
            "Each running request's block table: logical block → physical block, with filled slots.",
            view.table_rows(),
            f"playground-tables-{step}",
            "pg_tables",
            summary=charts_memory.block_tables_summary(view.tables, view.fills, run.block_size),
        )
    else:
        st.caption("No request holds blocks after this step.")
    show_chart(
        charts_memory.block_pool_grid(view.blocks, run.block_size, f"The pool after step {step}", columns=8),
        "Every physical block: state in words (free / cached / used / shared), owners, ×N reference count, fill.",
        view.block_rows(),
        f"playground-pool-{step}",
        "pg_pool",
        summary=charts_memory.pool_summary(view.blocks),
    )

st.subheader("What to look for")
prose(PAGE, "What to look for")
sources(PAGE)
lesson_check(PAGE)
