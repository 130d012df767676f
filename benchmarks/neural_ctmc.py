"""Neural CTMC (exit-rate + jump heads) vs MDLM, GIDD and SEDD on a known source and on real text.

Every method is the same bidirectional time-conditioned `jaxgen.nn.Transformer`
(`jaxgen.discrete.DiffusionTransformer`), trained with `jaxgen.core.fit` on its own loss, then
evaluated through the same path-KL NELBO (`jaxgen.discrete.nelbo`) and the same samplers
(`jaxgen.discrete.sample`, Euler exit-rate step). Source A: a seeded order-2 Markov chain
(Dirichlet(0.1) rows) with exact entropy, so the NELBO gap and the exact NLL of samples are
known. Source B: an offline text corpus mapped to a small character set; samples are scored by a
causal transformer (`jaxgen.transformers`) trained on the same symbols (generative perplexity),
next to the samples' unigram entropy.
"""

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

import jaxgen.discrete as D
from jaxgen.core import adamw_cosine, fit, minibatches, train_step
from jaxgen.data import MissingDataError, load_text_corpus, random_windows
from jaxgen.nn import Transformer
from jaxgen.transformers import evaluate_lm, fit_lm, generative_perplexity

NAME = "neural_ctmc"
PAPER = (
    "Neural Continuous-Time Markov Chain: Discrete Diffusion via Decoupled Jump Timing and "
    "Direction (Li et al., arXiv 2604.15694)"
)

# method -> (schedule kind, loss, sampling parameterisation)
METHODS = {
    "ctmc_uniform": ("uniform", "ctmc", "ctmc"),
    "ctmc_masked": ("masked", "ctmc", "ctmc"),
    "ctmc_gidd": ("gidd", "ctmc", "ctmc"),
    "mdlm": ("masked", "mdlm", "x0"),
    "gidd": ("gidd", "gidd", "x0"),
    "gidd_uniform": ("uniform", "gidd", "x0"),
    "sedd_uniform": ("uniform", "sedd", "score"),
    "sedd_absorb": ("masked", "sedd", "score"),
}

CONFIGS = {
    "quick": {
        # was N=8, L=16, Dirichlet(0.1), batch 32, 300 steps: no method got past the unigram
        # model (NELBO 0.04 nats below it). Smaller, sharper source; 4x batch, 3.3x steps, the
        # same recipe for every method (see the ablation note).
        "N": 4,
        "L": 8,
        "dirichlet": 0.05,
        "floor": 0.02,
        "dim": 32,
        "layers": 2,
        "heads": 2,
        "batch": 128,
        "train_steps": 1000,
        "lr": 3e-3,
        "methods": ["ctmc_uniform", "gidd_uniform", "mdlm", "sedd_uniform"],
        "claim_seeds": 2,
        "sample_steps": [16, 32, 64, 128],
        "num_samples": 256,
        "eval_seqs": 256,
        "eval_times": 16,
        "text": {
            "corpus": "bible-kjv",
            "max_bytes": 300_000,
            "L": 32,
            "batch": 32,
            "train_steps": 120,
            "scorer_steps": 120,
            "methods": ["ctmc_uniform", "gidd_uniform"],
            "sample_steps": 32,
            "num_samples": 64,
            "eval_seqs": 32,
        },
    },
    "full": {
        "N": 16,
        "L": 32,
        "dirichlet": 0.1,
        "floor": 0.02,
        "dim": 128,
        "layers": 3,
        "heads": 4,
        "batch": 64,
        "train_steps": 3000,
        "lr": 1e-3,
        "methods": list(METHODS),
        "claim_seeds": 3,
        "sample_steps": [16, 32, 64, 128],
        "num_samples": 1024,
        "eval_seqs": 256,
        "eval_times": 64,
        "text": {
            "corpus": "bible-kjv",
            "max_bytes": None,
            "L": 64,
            "batch": 64,
            "train_steps": 3000,
            "scorer_steps": 3000,
            "methods": [
                "ctmc_uniform",
                "ctmc_masked",
                "ctmc_gidd",
                "gidd_uniform",
                "gidd",
                "mdlm",
                "sedd_uniform",
            ],
            "sample_steps": 64,
            "num_samples": 256,
            "eval_seqs": 256,
        },
    },
}

# --full --smoke: the full configuration's code path, every size cut to the least that runs.
SMOKE = {
    "L": 8,
    "dim": 16,
    "layers": 1,
    "heads": 2,
    "batch": 4,
    "train_steps": 3,
    "claim_seeds": 1,
    "sample_steps": [16],
    "num_samples": 8,
    "eval_seqs": 4,
    "eval_times": 2,
    "text": {
        "max_bytes": 20000,
        "L": 16,
        "train_steps": 3,
        "scorer_steps": 3,
        "sample_steps": 4,
        "num_samples": 4,
        "eval_seqs": 4,
    },
}

# What was tried to make the quick source learnable (standalone runs, source seed 123,
# ctmc_uniform unless named). H = true entropy/token, U = unigram entropy; NELBO and the exact
# sample NLL (K=16 / K=32) in nats/token; "iid" = NLL of an iid sampler from the marginal.
ABLATION = (
    "N8 L16 Dir(0.1) batch 32, 300 steps, lr 3e-3 (old quick): H 0.75, U 1.83 | NELBO 1.84, "
    "NLL 7.88 / 7.46 (iid 8.02): not learned",
    "same, 1000 steps: NELBO 1.66, NLL 6.84 / 6.29: not learned",
    "N4 L8 Dir(0.1) floor 0.02, batch 32, 1000 steps: H 0.68, U 1.31 | NELBO 1.21 "
    "(gidd_uniform 1.21), NLL 2.09 / 2.10 (iid 2.45): a third of the gap",
    "same, lr 1e-2, 1500 steps: NELBO 1.29 (mdlm 1.15): a larger lr is worse",
    "N4 L8 Dir(0.05) floor 0.02, batch 128, 1000 steps, lr 3e-3 (new quick): H 0.36, U 0.90 | "
    "NELBO 0.49, NLL 1.03 / 0.94 (iid 2.49): learned",
    "new quick in the benchmark (seed 0): every method closes 0.76-0.97 of the NELBO gap and "
    "0.62-0.89 of the sample-NLL gap; uniform Neural CTMC then beats uniform GIDD by 0.15 "
    "nats/token (seed spread 0.02); the old +0.51 was read on unlearned models."
    " A smaller context table and a larger batch (less gradient "
    "noise in the one-time Monte-Carlo ELBO) made the source learnable; no library recipe "
    "change was needed. The floor bounds one transition's NLL by log(N / floor): without it a "
    "single near-impossible jump (Dirichlet entries below 1e-10) dominated the mean sample NLL.",
)

TEXT_CHARS = "abcdefghijklmnopqrstuvwxyz .,'\n"  # everything else -> one extra symbol


class Bundle(eqx.Module):
    """A network, its schedule and its loss name: one pytree for `jaxgen.core.fit`."""

    net: D.DiffusionTransformer
    schedule: D.InterpolatingSchedule
    loss: str = eqx.field(static=True)


def bundle_loss(bundle: Bundle, x, key):
    """Module-level loss for `fit` (one compiled step per method)."""
    fn = {
        "ctmc": D.neural_ctmc_loss,
        "mdlm": D.mdlm_loss,
        "gidd": D.gidd_loss,
        "sedd": D.sedd_loss,
    }[bundle.loss]
    return fn(bundle.net, x, key, schedule=bundle.schedule)


def _schedule(kind: str, n: int) -> D.InterpolatingSchedule:
    return {"uniform": D.uniform_schedule, "masked": D.masked_schedule, "gidd": D.gidd_schedule}[
        kind
    ](n)


# ---------------------------------------------------------------- order-2 Markov source
def markov_source(seed: int, n: int, conc: float = 0.1, floor: float = 0.0):
    """Transition tensor P[a, b, c], stationary pair law mu[a, b], per-token entropy rate.

    Rows are ``(1 - floor) Dirichlet(conc) + floor / n``: the floor bounds every transition's
    NLL by ``log(n / floor)``, so one near-impossible jump in a sample cannot dominate the mean
    sample NLL (with ``floor = 0`` a Dirichlet(0.1) row has entries of 1e-10 and below).
    """
    rng = np.random.default_rng(seed)
    trans = (1 - floor) * rng.dirichlet(np.full(n, conc), size=(n, n)) + floor / n
    mu = np.full((n, n), 1.0 / n**2)
    for _ in range(2000):  # power iteration on pairs (a, b) -> (b, c)
        mu = np.einsum("ab,abc->bc", mu, trans)
    mu /= mu.sum()
    rate = float(-np.sum(mu[..., None] * trans * np.log(trans + 1e-300)))
    pair_h = float(-np.sum(mu * np.log(mu + 1e-300)))
    return trans, mu, rate, pair_h


def markov_batches(trans, mu, batch: int, length: int):
    log_t = jnp.log(jnp.asarray(trans, jnp.float32) + 1e-30)
    log_mu = jnp.log(jnp.asarray(mu, jnp.float32).reshape(-1) + 1e-30)
    n = trans.shape[0]

    def sample_one(key):
        k0, ks = jr.split(key)
        pair = jr.categorical(k0, log_mu)
        a, b = pair // n, pair % n

        def step(carry, k):
            a, b = carry
            c = jr.categorical(k, log_t[a, b])
            return (b, c), c

        _, rest = jax.lax.scan(step, (a, b), jr.split(ks, length - 2))
        return jnp.concatenate([jnp.stack([a, b]), rest]).astype(jnp.int32)

    return lambda key: jax.vmap(sample_one)(jr.split(key, batch))


def markov_nll(samples: np.ndarray, trans, mu) -> float:
    """Exact NLL per token of samples under the true source."""
    s = np.asarray(samples)
    ll = np.log(mu[s[:, 0], s[:, 1]] + 1e-300)
    ll = ll + np.log(trans[s[:, :-2], s[:, 1:-1], s[:, 2:]] + 1e-300).sum(-1)
    return float(-ll.mean() / s.shape[1])


def unigram_entropy(samples: np.ndarray, vocab: int) -> float:
    """Mean per-sample entropy (nats) of the token frequencies."""
    s = np.asarray(samples)
    out = []
    for row in s:
        p = np.bincount(row, minlength=vocab) / len(row)
        out.append(-np.sum(p[p > 0] * np.log(p[p > 0])))
    return float(np.mean(out))


@eqx.filter_jit
def _nelbo_batch(net, schedule, x, key, parameterization, num_times):
    return jax.vmap(
        lambda xi, k: D.nelbo(
            net, xi, k, schedule=schedule, parameterization=parameterization, num_times=num_times
        )
    )(x, jr.split(key, x.shape[0]))


class Trained(NamedTuple):
    """A trained bundle with what `fit` compiled its step against (for the throughput timing)."""

    bundle: Bundle
    opt_state: object
    batches: object
    optimizer: object


def _train(method: str, n: int, cfg: dict, batches, steps: int, length: int, key) -> Trained:
    kind, loss, _ = METHODS[method]
    sched = _schedule(kind, n)
    km, kf = jr.split(key)
    net = D.DiffusionTransformer(
        sched.vocab_size, cfg["dim"], cfg["layers"], cfg["heads"], length, key=km
    )
    opt = adamw_cosine(cfg["lr"], steps, warmup_steps=max(1, steps // 20))  # cached: one compile
    res = fit(
        bundle_loss, Bundle(net, sched, loss), batches, opt, num_steps=steps, key=kf, progress=False
    )
    if not np.all(np.isfinite(res.losses)):
        raise FloatingPointError(f"{method}: non-finite training loss.")
    return Trained(res.model, res.opt_state, batches, opt)


def _train_step_time(rec, trained: Trained) -> dict:
    """Compiled time of one full training step (batch draw, loss, gradient, AdamW update).

    It is the very function `fit` ran, so nothing is compiled again.
    """
    return rec.time(
        train_step,
        trained.bundle,
        trained.opt_state,
        jr.key(2),
        jnp.asarray(0),
        loss_fn=bundle_loss,
        batches=trained.batches,
        optimizer=trained.optimizer,
        mesh=None,
        repeats=5,
    )


def run(config: dict, key, rec) -> None:
    cfg = config
    n, length = cfg["N"], cfg["L"]
    seed = int(jr.randint(key, (), 0, 2**30))
    trans, mu, rate, pair_h = markov_source(seed, n, cfg["dirichlet"], cfg["floor"])
    h_tok = (pair_h + (length - 2) * rate) / length
    rec.metric("markov_true_entropy_per_token", h_tok)
    rec.metric("markov_entropy_rate", rate)
    k_eval, k_train, k_samp, k_text = jr.split(key, 4)
    # one fresh training set of train_steps * batch sequences, drawn once: the compiled training
    # step then gathers rows instead of running the order-2 chain every step
    train_set = jax.jit(markov_batches(trans, mu, cfg["train_steps"] * cfg["batch"], length))(
        jr.fold_in(k_train, 10**6)
    )
    batches = minibatches(train_set, cfg["batch"])
    x_eval = markov_batches(trans, mu, cfg["eval_seqs"], length)(k_eval)

    nelbos, nelbo_seq, nll, ent, thr = {}, {}, {}, {}, {}
    seeds_of = {
        m: (cfg["claim_seeds"] if m in ("ctmc_uniform", "gidd_uniform") else 1)
        for m in cfg["methods"]
    }
    trained = {}
    for method in rec.progress(cfg["methods"], desc="methods"):
        _, _, param = METHODS[method]
        for s in range(seeds_of[method]):
            kk = jr.fold_in(k_train, 1000 * s + list(METHODS).index(method))
            trained[(method, s)] = fitted = _train(
                method, n, cfg, batches, cfg["train_steps"], length, kk
            )
            bundle = fitted.bundle
            val = _nelbo_batch(
                bundle.net, bundle.schedule, x_eval, jr.fold_in(k_eval, s), param, cfg["eval_times"]
            )
            nelbos.setdefault(method, []).append(float(jnp.mean(val)) / length)
            nelbo_seq.setdefault(method, []).append(np.asarray(val) / length)
            for k_steps in cfg["sample_steps"]:
                smp = D.sample(
                    jr.fold_in(k_samp, k_steps),
                    bundle.net,
                    bundle.schedule,
                    cfg["num_samples"],
                    length,
                    k_steps,
                    "euler",
                    param,
                )
                smp = np.asarray(smp)
                nll.setdefault(method, {}).setdefault(k_steps, []).append(
                    markov_nll(smp, trans, mu)
                )
                ent.setdefault(method, {}).setdefault(k_steps, []).append(unigram_entropy(smp, n))
        # throughput, compiled, same shapes for every method
        bundle = trained[(method, 0)].bundle
        tg = _train_step_time(rec, trained[(method, 0)])
        ts = rec.time(
            D.sample,
            jr.key(3),
            bundle.net,
            bundle.schedule,
            cfg["num_samples"],
            length,
            32,
            "euler",
            param,
            repeats=3,
        )
        thr[method] = {
            "train_steps_per_s": 1.0 / tg["median_s"],
            "sample_tokens_per_s_K32": cfg["num_samples"] * length / ts["median_s"],
        }

    for method in cfg["methods"]:
        rec.metric(f"nelbo_per_token/{method}", float(np.mean(nelbos[method])))
        for k_steps in cfg["sample_steps"]:
            rec.metric(f"sample_nll/{method}/K{k_steps}", float(np.mean(nll[method][k_steps])))
            rec.metric(f"unigram_entropy/{method}/K{k_steps}", float(np.mean(ent[method][k_steps])))
        rec.metric(f"throughput/{method}", thr[method])
    few = [k for k in (16, 32) if k in cfg["sample_steps"]]
    for method in ("ctmc_uniform", "gidd_uniform"):
        if method in nll:
            per_seed = [np.mean([nll[method][k][s] for k in few]) for s in range(seeds_of[method])]
            rec.metric(f"sample_nll_K16_32_per_seed/{method}", per_seed)

    # Trained enough to compare, per model and before any comparison is read: the model closes at
    # least half of the gap between a context-free (unigram) model and the true source, in NELBO
    # (vs the marginal's entropy) and in the exact NLL of its samples (vs an iid sampler from the
    # marginal, scored the same way). Worst seed counts.
    marginal = mu.sum(axis=0) / mu.sum()
    h_unigram = float(-np.sum(marginal[marginal > 0] * np.log(marginal[marginal > 0])))
    rec.metric("source_unigram_entropy", h_unigram)
    iid = np.random.default_rng(seed).choice(n, size=(cfg["num_samples"], length), p=marginal)
    unigram_nll = markov_nll(iid, trans, mu)
    rec.metric("unigram_sampler_nll", unigram_nll)
    k_max = max(cfg["sample_steps"])
    for m in cfg["methods"]:
        closed = (h_unigram - np.max(nelbos[m])) / (h_unigram - h_tok)
        rec.claim(
            f"nelbo_learned/{m}",
            f"{m}: fraction of the unigram -> true-entropy gap closed by NELBO/token "
            f"(worst seed; 0 = unigram {h_unigram:.3f}, 1 = true {h_tok:.3f} nats)",
            float(closed),
            ">=",
            0.5,
        )
        closed = (unigram_nll - np.max(nll[m][k_max])) / (unigram_nll - h_tok)
        rec.claim(
            f"samples_learned/{m}",
            f"{m}: fraction of the unigram-sampler -> true-entropy gap closed by the exact NLL "
            f"of its samples (K={k_max}, worst seed; 0 = iid sampler {unigram_nll:.3f} nats)",
            float(closed),
            ">=",
            0.5,
        )
    # The bound is checked pairwise on the evaluation sequences themselves: NELBO(x) minus the
    # true -log p(x) / L of the same x. Its mean over data is KL(p || p_theta) / L plus the ELBO
    # gap, >= 0; pairing removes the data-sampling noise of comparing with the entropy H.
    true_eval = np.array([markov_nll(row[None], trans, mu) for row in np.asarray(x_eval)])
    rec.metric("eval_true_nll_per_token", float(true_eval.mean()))
    diffs = {
        (m, s): nelbo_seq[m][s] - true_eval for m in cfg["methods"] for s in range(seeds_of[m])
    }
    worst = min(diffs, key=lambda ms: diffs[ms].mean())
    d = diffs[worst]
    rec.claim(
        "nelbo_bound",
        "every method's NELBO/token >= the true NLL/token of the same evaluation sequences "
        "(valid bound); value = min over methods and seeds of the mean paired difference",
        float(d.mean()),
        ">=",
        0.0,
        argmin=f"{worst[0]} seed {worst[1]}",
        mc_se=float(d.std(ddof=1) / np.sqrt(len(d))),
    )
    if "ctmc_uniform" in nll and "gidd_uniform" in nll:
        c = [
            np.mean([nll["ctmc_uniform"][k][s] for k in few])
            for s in range(seeds_of["ctmc_uniform"])
        ]
        g = [
            np.mean([nll["gidd_uniform"][k][s] for k in few])
            for s in range(seeds_of["gidd_uniform"])
        ]
        rec.claim(
            "uniform_ctmc_beats_gidd_few_steps",
            "uniform Neural CTMC sample NLL (mean of K=16,32, over seeds) <= uniform GIDD's; "
            "value = difference (nats/token)",
            float(np.mean(c) - np.mean(g)),
            "<=",
            0.0,
            seed_spread_ctmc=float(np.std(c)),
            seed_spread_gidd=float(np.std(g)),
        )

    for row in ABLATION:
        rec.note("ablation (quick source): " + row)

    try:
        mdlm = trained.get(("mdlm", 0))
        _peer_flow_matching(
            rec, None if mdlm is None else mdlm.bundle, n, length, cfg, trans, mu, nll
        )
    except Exception as err:  # the peer must never sink the benchmark: record why it failed
        rec.peer("flow_matching.MixtureDiscreteEulerSolver", f"failed: {err!r}"[:300])

    with rec.figure("vs_steps", ncols=2, figsize=(10, 4)) as (fig, axes):
        ks = cfg["sample_steps"]
        for method in cfg["methods"]:
            axes[0].plot(ks, [np.mean(nll[method][k]) for k in ks], "o-", label=method)
            axes[1].plot(ks, [np.mean(ent[method][k]) for k in ks], "o-", label=method)
        axes[0].axhline(h_tok, color="k", ls="--", label="true entropy / token")
        for ax, lab in zip(
            axes,
            ("sample NLL under true source (nats/token)", "unigram entropy of samples (nats)"),
            strict=True,
        ):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("sampling steps K")
            ax.set_ylabel(lab)
        axes[0].set_title("order-2 Markov source")
        axes[1].set_title("sample diversity")
        axes[0].legend(fontsize=7)

    try:
        _text_row(rec, cfg, k_text)
    except MissingDataError as err:
        rec.note(f"text row skipped: {err}")


def _peer_flow_matching(rec, bundle, n, length, cfg, trans, mu, nll) -> None:
    """flow_matching's MixtureDiscreteEulerSolver driving jaxgen's trained MDLM x_hat model."""
    try:
        import torch
        from flow_matching.path import MixtureDiscreteProbPath
        from flow_matching.path.scheduler import PolynomialConvexScheduler
        from flow_matching.solver import MixtureDiscreteEulerSolver
        from flow_matching.utils import ModelWrapper
    except ImportError:
        rec.peer("flow_matching.MixtureDiscreteEulerSolver", "not installed")
        return
    if bundle is None:
        rec.peer("flow_matching.MixtureDiscreteEulerSolver", "not run (mdlm not in this config)")
        return
    net, sched = bundle.net, bundle.schedule
    probs_fn = jax.jit(jax.vmap(lambda z, t: jnp.exp(D.model_log_x0(net, sched, z, t))))

    class Wrapped(ModelWrapper):
        def forward(self, x, t, **extras):
            t_ours = jnp.asarray(1.0 - t.numpy().astype(np.float32))  # fm: t=1 is data
            t_ours = jnp.clip(t_ours, 1e-3, 1 - 1e-3)
            p = np.asarray(probs_fn(jnp.asarray(x.numpy().astype(np.int32)), t_ours))
            return torch.from_numpy(p.astype(np.float32))

    path = MixtureDiscreteProbPath(scheduler=PolynomialConvexScheduler(n=1.0))
    solver = MixtureDiscreteEulerSolver(
        model=Wrapped(None), path=path, vocabulary_size=sched.vocab_size
    )
    out = {}
    for k_steps in [k for k in (16, 32) if k in cfg["sample_steps"]]:
        x0 = torch.full((cfg["num_samples"], length), sched.mask_id, dtype=torch.long)
        import time as _time

        t0 = _time.perf_counter()
        torch.manual_seed(k_steps)
        smp = solver.sample(
            x_init=x0, step_size=1.0 / k_steps, time_grid=torch.tensor([0.0, 1.0 - 1e-3])
        )
        wall = _time.perf_counter() - t0
        smp = smp.numpy()
        still = smp == sched.mask_id
        out[f"sample_nll_K{k_steps}"] = markov_nll(np.where(still, 0, smp), trans, mu)
        out[f"masked_left_K{k_steps}"] = float(still.mean())
        out[f"jaxgen_mdlm_sample_nll_K{k_steps}"] = float(np.mean(nll["mdlm"][k_steps]))
        out[f"wall_s_K{k_steps}"] = wall
    rec.peer("flow_matching.MixtureDiscreteEulerSolver", out)


def _text_row(rec, cfg, key) -> None:
    tc = cfg["text"]
    try:
        corpus = load_text_corpus(tc["corpus"], max_bytes=tc["max_bytes"])
    except MissingDataError:
        corpus = load_text_corpus("python_stdlib", max_bytes=tc["max_bytes"])
    rec.metric("text/corpus", corpus.name)
    table = np.full(256, len(TEXT_CHARS), np.int32)
    for i, ch in enumerate(TEXT_CHARS):
        table[ord(ch)] = i
        if ch.isalpha():
            table[ord(ch.upper())] = i
    train = table[corpus.train]
    val = table[corpus.validation]
    n, length = len(TEXT_CHARS) + 1, tc["L"]
    rec.metric("text/num_tokens", n)
    k_sc, k_tr, k_ev, k_sm = jr.split(key, 4)
    scorer = Transformer(n, cfg["dim"], cfg["layers"], cfg["heads"], length, key=k_sc)
    scorer = fit_lm(
        scorer,
        random_windows(train, tc["batch"], length),
        key=k_sc,
        num_steps=tc["scorer_steps"],
        learning_rate=cfg["lr"],
    ).model
    floor = evaluate_lm(scorer, val[: 64 * length], context=length - 1)
    rec.metric("text/scorer_val_ppl", floor.perplexity)
    x_val = random_windows(val, tc["eval_seqs"], length)(k_ev)
    gen, valn = {}, {}
    text_batches = random_windows(train, tc["batch"], length)
    for method in tc["methods"]:
        _, _, param = METHODS[method]
        bundle = _train(
            method,
            n,
            cfg,
            text_batches,
            tc["train_steps"],
            length,
            jr.fold_in(k_tr, list(METHODS).index(method)),
        ).bundle
        v = _nelbo_batch(bundle.net, bundle.schedule, x_val, k_ev, param, cfg["eval_times"])
        valn[method] = float(jnp.mean(v)) / length
        smp = D.sample(
            k_sm,
            bundle.net,
            bundle.schedule,
            tc["num_samples"],
            length,
            tc["sample_steps"],
            "euler",
            param,
        )
        gen[method] = float(generative_perplexity(scorer, smp))
        rec.metric(f"text/val_nelbo_per_token/{method}", valn[method])
        rec.metric(f"text/gen_ppl_K{tc['sample_steps']}/{method}", gen[method])
        rec.metric(f"text/unigram_entropy/{method}", unigram_entropy(np.asarray(smp), n))
    data_ent = unigram_entropy(np.asarray(x_val), n)
    rec.metric("text/unigram_entropy/data", data_ent)
    behind = [m for m in tc["methods"] if valn[m] > data_ent]
    if behind:
        rec.note(
            f"text row: {', '.join(behind)} val NELBO/token above the data's per-window unigram "
            f"entropy ({data_ent:.2f} nats): not trained enough at this budget, so the text "
            "figures are a smoke check of the path, not a comparison."
        )
    rec.note(
        f"text row: gen PPL under a {tc['scorer_steps']}-step causal scorer (floor: its "
        f"val PPL {floor.perplexity:.2f}); compare unigram entropy against data "
        f"({data_ent:.2f} nats) before reading gen PPL."
    )
    rec.note(
        "throughput: train_steps_per_s times one compiled training step (batch draw, loss, "
        "gradient, AdamW update); sampling tokens/s at K=32, compiled."
    )
