"""NcAE: exactly idempotent context-dependent projections vs six baselines, pendulum and Lorenz96.

For each system (16-DoF coupled pendulum, context log10 kappa; Lorenz96 N = 8 across its Hopf
bifurcation, context F), NcAE and the baselines B1-B6 (`jaxgen.autoencoders`) are trained with
the same widths, steps and batches through `jaxgen.core.fit`, then measured on held-out points of
the training contexts and on unseen contexts: relative reconstruction error, idempotency error
on data and off the manifold, trustworthiness of the latent coordinates against the true
intrinsic ones, and the context-Lipschitz ratio. Peers from scikit-learn in the same run: PCA(2)
per context and global, KernelPCA with its pre-image map (not a projection), Isomap.
"""

import time

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from jaxgen.autoencoders import (
    ConcatAE,
    ConcatCAE,
    ConstrainedAE,
    FiLMAE,
    FiLMCAE,
    MLPAutoencoder,
    NcAE,
    context_lipschitz,
    idempotency_error,
    ncae_loss,
)
from jaxgen.core import adamw_cosine, fit, minibatches
from jaxgen.data import lorenz96_manifold_dataset, pendulum_manifold_dataset

NAME = "ncae"
PAPER = (
    "Adriaens, Drion, Sacré. Context-dependent manifold learning: a neuromodulated constrained "
    "autoencoder approach (arXiv 2603.11673)"
)
CONFIGS = {
    "quick": {
        "pendulum": {
            "dims": [32, 16, 8, 2],
            "train": [0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0],
            "test": [0.15, 0.7, 3.0, 7.0, 15.0],
            "n_amp": 24,
            "n_t": 24,
        },
        "lorenz96": {
            "dims": [8, 4, 2],
            "N": 8,
            "train": [0.8, 0.85, 0.9, 0.95, 1.05, 1.1, 1.15, 1.2],
            "test": [0.875, 1.0, 1.125, 1.25],
            "n_ic": 24,
            "n_t": 40,
        },
        "steps": 3000,
        "batch": 512,
        "lr": 3e-3,
        "hyper_width": 32,
        "trust_points": 400,
        "seeds": 1,
    },
    "full": {
        "pendulum": {
            "dims": [32, 32, 16, 8, 2],
            "train": list(np.round(np.logspace(-1, 1, 20), 4)),
            "test": [0.15, 0.7, 3.0, 7.0, 15.0],
            "n_amp": 256,
            "n_t": 256,
        },
        "lorenz96": {
            "dims": [40, 16, 8, 2],
            "N": 40,
            "train": list(np.round(np.linspace(0.8, 1.0, 20), 4)),
            "test": [0.85, 0.894, 0.95, 1.0],
            "n_ic": 256,
            "n_t": 256,
        },
        "steps": 50000,
        "batch": 512,
        "lr": 1e-3,
        "hyper_width": 64,
        "trust_points": 2000,
        "seeds": 5,
    },
}
# --full --smoke: the full configuration's code path, every size cut to the least that runs.
SMOKE = {
    "pendulum": {"train": [0.5, 2.0], "test": [1.0], "n_amp": 5, "n_t": 6},
    "lorenz96": {"train": [0.85, 0.95], "test": [0.9], "n_ic": 5, "n_t": 6},
    "steps": 5,
    "batch": 16,
    "trust_points": 30,
    "seeds": 1,
}

BASELINES = {
    "B1_mlp_ae": MLPAutoencoder,
    "B2_concat_ae": ConcatAE,
    "B3_film_ae": FiLMAE,
    "B4_cae": ConstrainedAE,
    "B5_concat_cae": ConcatCAE,
    "B6_film_cae": FiLMCAE,
}


def _data(system, cfg, key, contexts):
    sc = cfg[system]
    with jax.enable_x64(True):  # simulate in float64, train in float32
        if system == "pendulum":
            X, C, coords = pendulum_manifold_dataset(
                key, contexts, n_amp=sc["n_amp"], n_t=sc["n_t"]
            )
        else:
            X, C, coords = lorenz96_manifold_dataset(
                key, contexts, N=sc["N"], n_ic=sc["n_ic"], n_t=sc["n_t"]
            )
    return X.astype(np.float32), C.astype(np.float32), coords


def _standardise(C, ref):
    return (C - ref.mean()) / max(float(ref.std()), 1e-6)


def _build(name, dims, key, cfg):
    if name == "NcAE":
        return NcAE(dims, 1, key=key, hyper_width=cfg["hyper_width"])
    if name == "B4_cae":
        return ConstrainedAE(dims, key=key)
    return BASELINES[name](dims, 1, key=key)


@eqx.filter_jit
def _metrics(model, X, C, noise):
    mse = jnp.mean(jnp.sum((jax.vmap(model.project)(X, C) - X) ** 2, -1))
    return (
        mse,
        idempotency_error(model.project, X, C),
        idempotency_error(model.project, X + noise, C),
    )


def _per_context(model, X, C, key):
    """(recon, idem on data, idem off manifold) for each distinct context, as dicts."""
    out = {"recon": {}, "idem": {}, "idem_off": {}}
    # relative to the spread of the whole split: below the Hopf point the Lorenz96 states of one
    # context sit close to F 1, and a per-context variance would divide by almost nothing
    total = float(np.mean(np.sum((X - X.mean(0)) ** 2, -1)))
    scale = 0.1 * np.sqrt(np.var(X, axis=0, keepdims=True))
    for i, c in enumerate(np.unique(C[:, 0])):
        m = C[:, 0] == c
        noise = scale * np.asarray(jr.normal(jr.fold_in(key, i), X[m].shape), np.float32)
        r, idem, off = _metrics(model, jnp.asarray(X[m]), jnp.asarray(C[m]), jnp.asarray(noise))
        out["recon"][float(c)] = float(r) / total
        out["idem"][float(c)] = float(idem)
        out["idem_off"][float(c)] = float(off)
    return out


def _trust(model, X, C, coords, n, key):
    from sklearn.manifold import trustworthiness

    idx = np.asarray(jr.choice(key, X.shape[0], (min(n, X.shape[0]),), replace=False))
    Z = np.asarray(jax.vmap(model.encode)(jnp.asarray(X[idx]), jnp.asarray(C[idx])))
    per = []
    for c in np.unique(C[idx, 0]):
        m = C[idx, 0] == c
        if m.sum() > 12:
            per.append(trustworthiness(coords[idx][m], Z[m], n_neighbors=10))
    return float(np.mean(per))


def _peers(Xtr, Ctr, Xte, Cte, coords_te, cfg, key):
    try:
        from sklearn.decomposition import PCA, KernelPCA
        from sklearn.manifold import Isomap, trustworthiness
    except ImportError:
        return "not installed"
    out = {}
    t0 = time.perf_counter()
    glob = PCA(2).fit(Xtr)
    den = np.mean(np.sum((Xte - Xte.mean(0)) ** 2, -1))
    rec = glob.inverse_transform(glob.transform(Xte))
    out["global_pca2_recon"] = float(np.mean(np.sum((rec - Xte) ** 2, -1)) / den)
    per = []
    for c in np.unique(Cte[:, 0]):
        m = Cte[:, 0] == c
        p = PCA(2).fit(Xte[m])
        rc = p.inverse_transform(p.transform(Xte[m]))
        per.append(
            np.mean(np.sum((rc - Xte[m]) ** 2, -1))
            / np.mean(np.sum((Xte[m] - Xte[m].mean(0)) ** 2, -1))
        )
    out["per_context_pca2_recon"] = float(np.mean(per))
    n = min(cfg["trust_points"], Xtr.shape[0])
    idx = np.asarray(jr.choice(key, Xtr.shape[0], (n,), replace=False))
    kp = KernelPCA(2, kernel="rbf", fit_inverse_transform=True).fit(Xtr[idx])
    once = kp.inverse_transform(kp.transform(Xte[:n]))
    twice = kp.inverse_transform(kp.transform(once))
    out["kernel_pca_idempotency"] = float(
        np.mean(np.linalg.norm(twice - once, axis=-1)) / np.mean(np.linalg.norm(once, axis=-1))
    )
    iso = Isomap(n_neighbors=10, n_components=2)
    m = Cte[:, 0] == np.unique(Cte[:, 0])[0]
    emb = iso.fit_transform(Xte[m][: cfg["trust_points"]])
    out["isomap_trustworthiness_first_test_context"] = float(
        trustworthiness(coords_te[m][: cfg["trust_points"]], emb, n_neighbors=10)
    )
    out["wall_s"] = time.perf_counter() - t0
    return out


def _system(system, cfg, key, rec):
    sc = cfg[system]
    k_tr, k_ho, k_te, k_fit, k_eval = jr.split(key, 5)
    Xtr, Ctr_raw, _ = _data(system, cfg, k_tr, sc["train"])
    Xho, Cho_raw, coords_ho = _data(system, cfg, k_ho, sc["train"])  # held-out, seen contexts
    Xte, Cte_raw, coords_te = _data(system, cfg, k_te, sc["test"])  # unseen contexts
    # contexts come as log10 kappa (pendulum) or F (Lorenz96); standardise with the training ones
    Ctr, Cho, Cte = (
        _standardise(c, Ctr_raw).astype(np.float32) for c in (Ctr_raw, Cho_raw, Cte_raw)
    )
    batches = minibatches((jnp.asarray(Xtr), jnp.asarray(Ctr)), cfg["batch"])
    optimizer = adamw_cosine(cfg["lr"], cfg["steps"], warmup_steps=min(100, cfg["steps"] // 10))
    results = {}
    for name in ["NcAE", *BASELINES]:
        seeds = []
        for s in range(cfg["seeds"]):
            t0 = time.perf_counter()
            model = _build(name, tuple(sc["dims"]), jr.fold_in(k_fit, 100 * s + len(results)), cfg)
            res = fit(
                ncae_loss,
                model,
                batches,
                optimizer,
                num_steps=cfg["steps"],
                key=jr.fold_in(k_fit, s),
                progress=False,
            )
            seen = _per_context(res.model, Xho, Cho, jr.fold_in(k_eval, 1))
            unseen = _per_context(res.model, Xte, Cte, jr.fold_in(k_eval, 2))
            seeds.append((res, seen, unseen, time.perf_counter() - t0))
        res, seen, unseen, wall = seeds[0]
        row = {
            "recon_seen": float(np.mean([np.mean(list(s[1]["recon"].values())) for s in seeds])),
            "recon_unseen": float(np.mean([np.mean(list(s[2]["recon"].values())) for s in seeds])),
            "idem_max": max(max(s[1]["idem"].values()) for s in seeds) if seeds else float("nan"),
            "idem_max_unseen": max(max(s[2]["idem"].values()) for s in seeds),
            "idem_off_max": max(
                max(list(s[1]["idem_off"].values()) + list(s[2]["idem_off"].values()))
                for s in seeds
            ),
            "final_loss": float(np.mean(res.losses[-50:])),
            "train_s": wall,
        }
        if name == "NcAE":
            row["trust"] = _trust(
                res.model, Xte, Cte, coords_te, cfg["trust_points"], jr.fold_in(k_eval, 3)
            )
            Z = jax.vmap(res.model.encode)(jnp.asarray(Xte[:256]), jnp.asarray(Cte[:256]))
            a = context_lipschitz(res.model, Z, jnp.asarray(Cte[:256]), 1e-2)
            b = context_lipschitz(res.model, Z, jnp.asarray(Cte[:256]), 1e-3)
            row["lipschitz_ratio_change"] = abs(float(a / b) - 1.0)
            row["per_context_recon_unseen"] = unseen["recon"]
            row["model"] = res.model
        results[name] = row
        for k, v in row.items():
            if k != "model":
                rec.metric(f"{system}/{name}/{k}", v)
    peers = _peers(Xtr, Ctr, Xte, Cte, coords_te, cfg, jr.fold_in(k_eval, 4))
    rec.peer(f"scikit-learn ({system})", peers)
    return results, peers, (Xte, Cte)


def _claims(system, results, peers, rec):
    nc = results["NcAE"]
    idem_nc = max(nc["idem_max"], nc["idem_max_unseen"], nc["idem_off_max"])
    if isinstance(peers, dict):
        # trained enough: the 2-D NcAE beats the best linear 2-D reconstruction of all contexts
        ratio = nc["recon_unseen"] / peers["global_pca2_recon"]
        what = "NcAE recon (unseen) / global PCA(2) recon"
        rec.claim("ncae_learned_" + system, what, ratio, "<=", 1.0)
    rec.claim(
        f"{system}_ncae_idempotent",
        "NcAE max idempotency error, every seen and unseen "
        "context, on data and off-manifold (float32)",
        idem_nc,
        "<=",
        1e-5,
    )
    others = ["B1_mlp_ae", "B2_concat_ae", "B3_film_ae", "B5_concat_cae", "B6_film_cae"]
    worst_ratio = min(
        max(results[b]["idem_max"], results[b]["idem_max_unseen"]) / max(idem_nc, 1e-12)
        for b in others
    )
    rec.claim(
        f"{system}_idempotency_vs_baselines",
        "min over B1-B3, B5, B6 of their idempotency error / NcAE's",
        worst_ratio,
        ">=",
        100.0,
    )
    rec.claim(
        f"{system}_cae_needs_context",
        "B4 (cAE, no context) recon / NcAE recon (unseen)",
        results["B4_cae"]["recon_unseen"] / nc["recon_unseen"],
        ">=",
        3.0,
    )
    best_seen = min(results[b]["recon_seen"] for b in BASELINES)
    best_unseen = min(results[b]["recon_unseen"] for b in BASELINES)
    rec.claim(
        f"{system}_recon_seen",
        "NcAE recon / best baseline recon, seen contexts",
        nc["recon_seen"] / best_seen,
        "<=",
        1.25,
    )
    rec.claim(
        f"{system}_recon_unseen",
        "NcAE recon / best baseline recon, unseen contexts",
        nc["recon_unseen"] / best_unseen,
        "<=",
        2.0,
    )
    rec.claim(
        f"{system}_trustworthiness",
        "NcAE latent trustworthiness vs true coordinates",
        nc["trust"],
        ">=",
        0.9,
    )
    concat_film = min(results[b]["idem_max_unseen"] for b in ("B5_concat_cae", "B6_film_cae"))
    rec.claim(
        f"{system}_concat_film_not_idempotent",
        "min over ConcatCAE, FiLMCAE of the idempotency error on unseen contexts",
        concat_film,
        ">=",
        1e-3,
    )
    rec.claim(
        f"{system}_context_smooth",
        "NcAE context-Lipschitz ratio change, delta 1e-2 vs 1e-3",
        nc["lipschitz_ratio_change"],
        "<",
        0.1,
    )


def run(config, key, rec):
    cfg = config
    all_results = {}
    for i, system in enumerate(("pendulum", "lorenz96")):
        results, peers, test = _system(system, cfg, jr.fold_in(key, i), rec)
        _claims(system, results, peers, rec)
        all_results[system] = (results, test)
    with rec.figure("idempotency_recon", ncols=2, figsize=(12, 4.5)) as (fig, axes):
        for ax, (system, (results, _)) in zip(axes, all_results.items(), strict=True):
            names = list(results)
            idem = [max(results[n]["idem_max"], results[n]["idem_max_unseen"], 1e-9) for n in names]
            recon = [results[n]["recon_unseen"] for n in names]
            ax.scatter(recon, idem)
            for n, x, y in zip(names, recon, idem, strict=True):
                ax.annotate(n, (x, y), fontsize=7)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("relative reconstruction error (unseen contexts)")
            ax.set_ylabel("idempotency error (max over contexts)")
            ax.set_title(system)
    with rec.figure("recon_per_context", ncols=2, figsize=(12, 4)) as (fig, axes):
        for ax, (system, (results, _)) in zip(axes, all_results.items(), strict=True):
            per = results["NcAE"]["per_context_recon_unseen"]
            ax.bar([f"{c:.2f}" for c in per], list(per.values()))
            ax.set_xlabel("unseen context (standardised)")
            ax.set_ylabel("NcAE relative reconstruction error")
            ax.set_title(f"{system}: NcAE on unseen contexts")
    rec.note(
        "Contexts are standardised (log10 kappa; F) with the training contexts' mean and sd; "
        "idempotency off the manifold uses x + N(0, (0.1 sd)^2) per coordinate."
    )
