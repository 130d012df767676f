"""SelectBench: selectivity metrics and selectivity guidance on a seeded toy (no docking).

(1) SelectToy: a Gaussian-mixture "chemical space", an on-target that shares one
binding well with the off-target, and a noisy docking oracle. The generator is the exact mixture
flow (`jaxgen.flows.MixtureInterpolantVelocity`, Euler through `jaxgen.core.solve_ode`); the arms
are unguided, on-target-only guidance and selectivity guidance
(`jaxgen.selectivity.ClassifierGuidedVelocity` around the field), with exact affinities or
kernel-ridge surrogates fitted to few noisy labels. Metrics: mean on-target energy, mean gap and
the success rate SR(gap >= 1, on <= -7) over seeds; SR against the guidance weight.
(2) The metric suite against peers on the same matrices: scikit-learn's ``roc_auc_score`` and
scipy's ``rankdata``, and its calibration under an exchangeable null (check 3).
``--full``: a learned flow-matching field (`jaxgen.core.fit`) on a 16-D mixture with 8
off-targets that share the on-target's main well at depth ratios rho, plus unique wells.
"""

import functools as ft
import time

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from jaxgen.core import adamw_cosine, fit, solve_ode
from jaxgen.flows import (
    LinearInterpolant,
    MixtureInterpolantVelocity,
    MLPVelocityField,
    flow_matching_loss,
)
from jaxgen.selectivity import (
    ClassifierGuidedVelocity,
    SelectivityObjective,
    SelectToy,
    WellLandscape,
    cross_target_auroc,
    on_target_rank,
    panel_hits,
    selectivity_gap,
    success_rate,
    top1_rate,
)

NAME = "selectbench"
PAPER = "SelectBench: the selectivity of generative structure-based drug design (NeurIPS 2026)"
CONFIGS = {
    "quick": {
        "dim": 2,
        "num_off": 1,
        "rhos": [1.0],
        "learned_field": False,
        "n": 1000,
        "seeds": 4,
        "euler_steps": 200,
        "t_min": 0.05,
        "n_lab": [16, 64],
        "sweep_w": [0.5, 1.0, 2.0, 4.0],
        "sweep_lambda": [0.5, 1.0, 2.0],
        "null_n": 20000,
        "peer_n": 2000,
        "speed_n": 100000,
        "speed_targets": 50,
        "fm_steps": 0,
        "fm_data": 0,
    },
    "full": {
        "dim": 16,
        "num_off": 8,
        "rhos": [0.2, 0.5, 0.8],
        "learned_field": True,
        "n": 5000,
        "seeds": 4,
        "euler_steps": 200,
        "t_min": 0.05,
        "n_lab": [100, 1000, 10000],
        "sweep_w": [0.5, 1.0, 2.0, 4.0, 8.0],
        "sweep_lambda": [0.5, 1.0, 2.0],
        "null_n": 100000,
        "peer_n": 20000,
        "speed_n": 100000,
        "speed_targets": 50,
        "fm_steps": 20000,
        "fm_data": 100000,
    },
}
# --full --smoke: the full configuration's code path, every size cut to the least that runs.
SMOKE = {
    "dim": 4,
    "num_off": 2,
    "rhos": [0.5],
    "n": 64,
    "seeds": 2,
    "euler_steps": 8,
    "n_lab": [16],
    "sweep_w": [1.0],
    "sweep_lambda": [1.0],
    "null_n": 2000,
    "peer_n": 200,
    "speed_n": 1000,
    "speed_targets": 5,
    "fm_steps": 5,
    "fm_data": 256,
}


class KernelRidge(eqx.Module):
    """RBF kernel-ridge regression ``a(x) = k(x, X) alpha`` (one sample; differentiable)."""

    points: jax.Array
    alpha: jax.Array

    def __init__(self, x, y, ridge=0.1):
        gram = jnp.exp(-jnp.sum((x[:, None] - x[None]) ** 2, -1))
        self.points = x
        self.alpha = jnp.linalg.solve(gram + ridge * jnp.eye(x.shape[0]), y)

    def __call__(self, x):
        """Predicted affinity of one sample."""
        return jnp.exp(-jnp.sum((self.points - x[None, :]) ** 2, -1)) @ self.alpha


class Surrogate(eqx.Module):
    """On-target and off-target kernel-ridge models fitted to noisy affinity labels."""

    on: KernelRidge
    off: tuple[KernelRidge, ...]

    def on_fn(self, x):
        """On-target affinity of one sample."""
        return self.on(x)

    def off_fn(self, x):
        """Off-target affinities (K,) of one sample."""
        return jnp.stack([m(x) for m in self.off])


def _toy(cfg, rho, key):
    """The quick toy or, in d dims, an on-target with a main and a unique well and
    ``num_off`` off-targets sharing the main well at depth ratio ``rho`` plus one unique well.
    """
    if cfg["dim"] == 2 and cfg["num_off"] == 1:
        return SelectToy.default()
    d, K = cfg["dim"], cfg["num_off"]
    k_means, k_wells = jr.split(key)
    means = 2.5 * jr.normal(k_means, (2, d)) / np.sqrt(d) * 2
    unique = 2.5 * jr.normal(k_wells, (K + 1, d)) / np.sqrt(d) * 2
    on = WellLandscape(jnp.stack([means[0], means[1]]), jnp.array([3.0, 3.0]))
    off = tuple(
        WellLandscape(jnp.stack([means[0], unique[k]]), jnp.array([3.0 * rho, 3.0]))
        for k in range(K)
    )
    return SelectToy(jnp.array([0.7, 0.3]), means, 0.5, on, off)


def _exact_field(toy):
    d = toy.dim
    covs = jnp.broadcast_to(toy.sigma**2 * jnp.eye(d), (toy.means.shape[0], d, d))
    return MixtureInterpolantVelocity(jnp.zeros(d), jnp.eye(d), toy.weights, toy.means, covs)


def _learned_field(toy, cfg, key):
    """Flow matching on prior samples (the --full path), through `jaxgen.core.fit`."""
    k_data, k_model, k_fit = jr.split(key, 3)
    data = toy.sample_prior(k_data, cfg["fm_data"])

    def batches(k):
        k0, k1 = jr.split(k)
        x1 = data[jr.randint(k1, (256,), 0, data.shape[0])]
        return jr.normal(k0, x1.shape), x1

    model = MLPVelocityField(toy.dim, 256, 3, key=k_model)
    res = fit(
        ft.partial(flow_matching_loss, interpolant=LinearInterpolant()),
        model,
        batches,
        adamw_cosine(1e-3, cfg["fm_steps"]),
        num_steps=cfg["fm_steps"],
        key=k_fit,
        progress=False,
    )
    return res.model, res.losses


@eqx.filter_jit
def _sample(field, x0, steps):
    def one(x):
        return solve_ode(field, x, solver=dfx.Euler(), steps=steps).ys[-1]

    return jax.vmap(one)(x0)


def _arm(field, objective, w, cfg, x0):
    guided = (
        field if w == 0 else ClassifierGuidedVelocity(field, objective, scale=w, t_min=cfg["t_min"])
    )
    return _sample(guided, x0, cfg["euler_steps"])


def _arm_metrics(toy, x, key, seeds):
    """Mean on-target energy, mean min-gap and SR(1, -7) per seed (x split into equal groups)."""
    S = toy.dock(key, x)
    groups = jnp.split(S, seeds)
    return {
        "s_on": [float(jnp.mean(g[:, 0])) for g in groups],
        "gap": [float(jnp.nanmean(selectivity_gap(g))) for g in groups],
        "sr": [float(success_rate(g, margin=1.0, on_threshold=-7.0)) for g in groups],
        "panel_clean": [float(jnp.nanmean(panel_hits(g, margin=0.0) == 0)) for g in groups],
    }


def _surrogate(toy, n_lab, key):
    kx, ky = jr.split(key)
    x = toy.sample_prior(kx, n_lab)
    a = jax.vmap(toy.affinities)(x) + toy.noise_sd * jr.normal(ky, (n_lab, 1 + len(toy.off)))
    return Surrogate(
        KernelRidge(x, a[:, 0]), tuple(KernelRidge(x, a[:, k]) for k in range(1, a.shape[1]))
    )


def _guidance_part(cfg, key, rec):
    results, figures = {}, {}
    for rho in cfg["rhos"]:
        k_toy, k_field, k_x0, k_dock, k_lab = jr.split(jr.fold_in(key, int(100 * rho)), 5)
        toy = _toy(cfg, rho, k_toy)
        if cfg["learned_field"]:
            field, losses = _learned_field(toy, cfg, k_field)
            rec.metric(f"rho{rho}_fm_final_loss", float(np.mean(losses[-50:])))
        else:
            field = _exact_field(toy)
        n_total = cfg["n"] * cfg["seeds"]
        x0 = jr.normal(k_x0, (n_total, toy.dim))
        exact = {
            lam: SelectivityObjective(
                toy.on_affinity, toy.off_affinities, off_weight=lam, temperature=0.5
            )
            for lam in sorted({0.0, 0.5, 1.0, *cfg["sweep_lambda"]})
        }
        arms = {
            "unguided": (0.0, exact[0.0]),
            "on_only_w1": (1.0, exact[0.0]),
            "selectivity_w2_l1": (2.0, exact[1.0]),
            "selectivity_w2_l05": (2.0, exact[0.5]),
        }
        for n_lab in cfg["n_lab"]:
            sur = _surrogate(toy, n_lab, jr.fold_in(k_lab, n_lab))
            obj = SelectivityObjective(sur.on_fn, sur.off_fn, off_weight=1.0, temperature=0.5)
            arms[f"surrogate_nlab{n_lab}_w2_l1"] = (2.0, obj)
        row, samples = {}, {}
        for name, (w, obj) in arms.items():
            t0 = time.perf_counter()
            x = jax.block_until_ready(_arm(field, obj, w, cfg, x0))
            row[name] = _arm_metrics(toy, x, k_dock, cfg["seeds"])
            row[name]["wall_s"] = time.perf_counter() - t0
            samples[name] = np.asarray(x[: cfg["n"]])
        sweep = {}
        for lam in cfg["sweep_lambda"]:
            for w in cfg["sweep_w"]:
                x = _arm(field, exact[lam], w, cfg, x0)
                sweep[(lam, w)] = float(np.mean(_arm_metrics(toy, x, k_dock, cfg["seeds"])["sr"]))
        results[rho] = (row, sweep)
        figures[rho] = (toy, samples)
    return results, figures


def _peer_part(cfg, key, rec):
    """AUROC against scikit-learn, mid-ranks against scipy, and their speed."""
    out = {}
    with jax.enable_x64(True):
        k1, k2, k3 = jr.split(key, 3)
        n, T = cfg["peer_n"], 5
        C = jnp.round(jr.normal(k1, (n, T), jnp.float64) * 4) / 4  # ties on purpose
        labels = jr.randint(k2, (n,), 0, T)
        per, _ = jax.jit(cross_target_auroc)(C, labels)
        try:
            from sklearn.metrics import roc_auc_score

            C_np, lab = np.asarray(C), np.asarray(labels)
            ref = np.array([roc_auc_score(lab == a, -C_np[:, a]) for a in range(T)])
            out["sklearn_auroc_max_diff"] = float(np.max(np.abs(np.asarray(per) - ref)))
            # speed at scale: every target of an (n, T) matrix
            n_s, T_s = cfg["speed_n"], cfg["speed_targets"]
            Cs = jr.normal(k3, (n_s, T_s), jnp.float64)
            ls = jr.randint(k3, (n_s,), 0, T_s)
            ours = rec.time(jax.jit(cross_target_auroc), Cs, ls, repeats=3)
            Cs_np, ls_np = np.asarray(Cs), np.asarray(ls)
            t0 = time.perf_counter()
            for a in range(T_s):
                roc_auc_score(ls_np == a, -Cs_np[:, a])
            peer_s = time.perf_counter() - t0
            rec.peer(
                "sklearn.metrics.roc_auc_score",
                {
                    "max_abs_diff": out["sklearn_auroc_max_diff"],
                    "ours_s": ours["median_s"],
                    "peer_s": peer_s,
                    "speed_ratio_peer_over_ours": peer_s / ours["median_s"],
                    "shape": [n_s, T_s],
                },
            )
        except ImportError:
            rec.peer("sklearn.metrics.roc_auc_score", "not installed")
        try:
            from scipy.stats import rankdata

            from jaxgen.selectivity._metrics import _mid_ranks

            x = np.asarray(C[:, 0])
            out["rankdata_max_diff"] = float(
                np.max(np.abs(np.asarray(_mid_ranks(C[:, 0])) - rankdata(x)))
            )
            # the on-target mid-rank of a row equals scipy's rank of its column-0 entry
            row = np.asarray(C[0])
            ours_rank = float(on_target_rank(C[:1])[0])
            out["row_rank_diff"] = abs(ours_rank - float(rankdata(row)[0]))
            rec.peer(
                "scipy.stats.rankdata",
                {"max_abs_diff": out["rankdata_max_diff"], "row_rank_diff": out["row_rank_diff"]},
            )
        except ImportError:
            rec.peer("scipy.stats.rankdata", "not installed")
    return out


def _null_part(cfg, key):
    n, t = cfg["null_n"], 5
    S = jr.normal(key, (n, t))
    z_top1 = (float(top1_rate(S)) - 0.2) / np.sqrt(0.16 / n)
    labels = jr.randint(jr.fold_in(key, 1), (n,), 0, t)
    per, _ = cross_target_auroc(S, labels)
    z_auc = []
    for a in range(t):
        n_pos = int(jnp.sum(labels == a))
        n_neg = n - n_pos
        z_auc.append((float(per[a]) - 0.5) / np.sqrt((n_pos + n_neg + 1) / (12 * n_pos * n_neg)))
    return z_top1, max(z_auc, key=abs)


def run(config, key, rec):
    cfg = config
    k_guid, k_peer, k_null = jr.split(key, 3)
    results, figures = _guidance_part(cfg, k_guid, rec)
    rho0 = cfg["rhos"][0]
    row, sweep = results[rho0]
    for rho, (r, s) in results.items():
        for arm, m in r.items():
            for k, v in m.items():
                rec.metric(f"rho{rho}/{arm}/{k}", float(np.mean(v)) if k != "wall_s" else v)
                if k in ("sr", "s_on"):
                    rec.metric(f"rho{rho}/{arm}/{k}_sd", float(np.std(v)))
        rec.metric(f"rho{rho}/sr_vs_w", {f"lambda{lam}_w{w}": v for (lam, w), v in s.items()})
    mean = {arm: {k: float(np.mean(v)) for k, v in m.items()} for arm, m in row.items()}
    # The generator has learned (or is) the prior before guidance is read: unguided samples
    # score like prior draws at the on-target (exact field: equal up to Euler error).
    toy = figures[rho0][0]
    prior_s = toy.dock(jr.fold_in(k_guid, 9), toy.sample_prior(jr.fold_in(k_guid, 8), 4000))
    gen_gap = abs(mean["unguided"]["s_on"] - float(jnp.mean(prior_s[:, 0])))
    what = "|mean on-target energy: unguided samples - prior draws|"
    rec.claim("generator_learned", what, gen_gap, "<=", 0.1)
    rec.claim(
        "on_only_binding",
        "mean s_on(unguided) - mean s_on(on-only guidance, w=1)",
        mean["unguided"]["s_on"] - mean["on_only_w1"]["s_on"],
        ">=",
        0.2,
    )
    rec.claim(
        "on_only_selectivity",
        "SR(on-only, w=1) - SR(unguided) (on-target guidance is not selectivity)",
        mean["on_only_w1"]["sr"] - mean["unguided"]["sr"],
        "<=",
        0.02,
    )
    rec.claim(
        "selectivity_guidance",
        "SR(selectivity guidance, w=2, lambda=1) - SR(unguided)",
        mean["selectivity_w2_l1"]["sr"] - mean["unguided"]["sr"],
        ">=",
        0.08,
    )
    z_top1, z_auc = _null_part(cfg, k_null)
    rec.metric("null_top1_z", z_top1)
    rec.metric("null_auroc_worst_z", z_auc)
    rec.claim(
        "null_top1",
        "|z| of the top-1 rate under an exchangeable null (1/(K+1))",
        abs(z_top1),
        "<=",
        4.0,
    )
    rec.claim(
        "null_auroc",
        "max over targets of |z| of the cross-target AUROC under the null",
        abs(z_auc),
        "<=",
        4.0,
    )
    peers = _peer_part(cfg, k_peer, rec)
    if "sklearn_auroc_max_diff" in peers:
        rec.claim(
            "sklearn_auroc",
            "max |cross_target_auroc - sklearn roc_auc_score| (float64)",
            peers["sklearn_auroc_max_diff"],
            "<=",
            1e-9,
        )
    if "rankdata_max_diff" in peers:
        rec.claim(
            "rankdata",
            "max |mid-ranks - scipy rankdata| (float64)",
            peers["rankdata_max_diff"],
            "<=",
            1e-12,
        )
    sur = [a for a in row if a.startswith("surrogate")]
    rec.note(
        "Arms (mean over seeds): "
        + "; ".join(
            f"{a}: s_on {mean[a]['s_on']:.2f}, gap {mean[a]['gap']:.2f}, SR {mean[a]['sr']:.3f}"
            for a in row
        )
        + f". Surrogate arms ({', '.join(sur)}) use kernel-ridge models of few noisy labels: "
        "guidance is only as good as its surrogate."
    )
    toy, samples = figures[rho0]
    with rec.figure("samples", ncols=len(samples), figsize=(3.2 * len(samples), 3.4)) as (
        fig,
        axes,
    ):
        if toy.dim == 2:
            g = np.linspace(-4, 4, 120)
            X, Y = np.meshgrid(g, g)
            pts = jnp.asarray(np.stack([X.ravel(), Y.ravel()], 1))
            on = np.asarray(jax.vmap(toy.on)(pts)).reshape(X.shape)
            off = np.asarray(jax.vmap(toy.off[0])(pts)).reshape(X.shape)
        for ax, (name, x) in zip(np.atleast_1d(axes), samples.items(), strict=True):
            if toy.dim == 2:
                ax.contour(X, Y, on, levels=4, colors="tab:blue", linewidths=0.7)
                ax.contour(X, Y, off, levels=4, colors="tab:red", linewidths=0.7)
            ax.scatter(x[:, 0], x[:, 1], s=2, alpha=0.4, color="k")
            ax.set_title(f"{name}\nSR {mean[name]['sr']:.2f}", fontsize=8)
            ax.set_xlabel("x1")
            ax.set_ylabel("x2")
    with rec.figure("sr_vs_w") as (fig, ax):
        for lam in cfg["sweep_lambda"]:
            ax.plot(
                cfg["sweep_w"],
                [sweep[(lam, w)] for w in cfg["sweep_w"]],
                "o-",
                label=f"lambda = {lam}",
            )
        ax.axhline(mean["unguided"]["sr"], color="k", ls="--", label="unguided")
        ax.set_xlabel("guidance weight w")
        ax.set_ylabel("SR(gap >= 1, on <= -7)")
        ax.set_title("Selectivity success rate vs guidance weight")
        ax.legend()
