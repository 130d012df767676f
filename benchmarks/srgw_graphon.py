"""srGW graphon / SBM estimation: node MSE vs n against USVT, SAS, network histogram and POT;
rounding gap; real networkx graphs; speed against POT on one large graph and on a batch.
"""

import functools
import time

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from jaxgen.graphs import (
    GRAPHONS,
    adjusted_rand_index,
    estimate_graphon,
    hold_out_pairs,
    link_auc,
    network_histogram,
    node_mse,
    sample_graphon,
    sample_sbm,
    sas,
    usvt,
)
from jaxgen.transport import srgw_barycenter, srgw_objective

NAME = "srgw_graphon"
PAPER = (
    "Dufour, Naepels, Santoro. Network learning with semi-relaxed Gromov-Wasserstein "
    "(arXiv 2606.02223)"
)
CONFIGS = {
    # quick (compilation-bound): every estimator shape is compiled once (graphons of one n share
    # one vmapped call); n in {200, 400, 800}; the planted SBM at n = 400 and 800 only; link AUC
    # on les miserables only; small speed runs. full adds n = 100 and n up to 2000.
    "quick": {
        "ns": [200, 400, 800],
        "sbm_ns": [400, 800],
        "reps": 2,
        "starts": 2,
        "pot_reps": 1,
        "pot_ns": [200],
        "speed_n": 500,
        "batch_size": 8,
        "batch_n": 150,
        "real_reps": 1,
        "auc_graphs": ["les_miserables"],
        "davis_starts": 30,
        # karate K = 4: 100 k-means starts (was 10) reach the objective's best minimum
        # (0.07174) for every seed tried, so the ARI no longer depends on the seed.
        "karate_starts": 100,
    },
    "full": {
        "ns": [100, 200, 400, 800, 1200, 1600, 2000],
        "sbm_ns": [100, 200, 400, 800, 1200, 1600, 2000],
        "reps": 5,
        "starts": 2,
        "pot_reps": 2,
        "pot_ns": [100, 200, 400, 800, 1200, 1600, 2000],
        "speed_n": 2000,
        "batch_size": 32,
        "batch_n": 500,
        "real_reps": 5,
        "auc_graphs": ["karate", "les_miserables", "florentine", "davis"],
        "davis_starts": 30,
        # karate K = 4: 100 k-means starts (was 10) reach the objective's best minimum
        # (0.07174) for every seed tried, so the ARI no longer depends on the seed.
        "karate_starts": 100,
    },
}

# --full --smoke: the full configuration's code path, every size cut to the least that runs.
SMOKE = {
    "ns": [50, 100],
    "sbm_ns": [50, 100],
    "reps": 1,
    "starts": 1,
    "pot_reps": 1,
    "pot_ns": [50],
    "speed_n": 100,
    "batch_size": 2,
    "batch_n": 50,
    "real_reps": 1,
    "davis_starts": 2,
    "karate_starts": 2,
}
B3 = np.array([[0.8, 0.1, 0.2], [0.1, 0.7, 0.15], [0.2, 0.15, 0.6]])
PI3 = np.array([0.3, 0.3, 0.4])
MODELS = ("abs_diff", "product", "sbm3")


def _fit(A, K, key, starts):
    est = estimate_graphon(key, A, K, num_starts=starts, throw=False)
    return (
        est.edge_probabilities(),
        est.labels,
        est.rounding_gap,
        est.frac_deterministic,
        est.converged,
    )


@functools.partial(jax.jit, static_argnums=(1, 3))
def _fit_batch(A, K, keys, starts):
    return jax.vmap(lambda a, k: _fit(a, K, k, starts))(A, keys)


@functools.partial(jax.jit, static_argnums=1)
def _baselines_batch(A, K, keys):
    """USVT, SAS and the network histogram on a batch of graphs (one compiled call)."""
    one = lambda a, k: (usvt(a), sas(a), network_histogram(k, a, K)[0])  # noqa: E731
    return jax.vmap(one)(A, keys)


@jax.jit
def _node_mse_batch(P_hat, P):
    return jax.vmap(node_mse)(P_hat, P)


def _pot_bcd(ot, A, T0, tol, max_steps=1000):
    """POT's srGW barycenter loop (warm-started T-solves, closed-form W) from a given T0."""
    n = A.shape[0]
    h = np.full(n, 1.0 / n)
    T = T0
    q = T.sum(0)
    W = ot.gromov.update_barycenter_structure([T], [A], np.ones(1), q[None, :], nx=None)
    for _ in range(max_steps):
        W_prev = W
        T = ot.gromov.semirelaxed_gromov_wasserstein(
            A, W, h, symmetric=True, G0=T, max_iter=1000, tol_rel=tol, tol_abs=0.0
        )
        W = ot.gromov.update_barycenter_structure([T], [A], np.ones(1), T.sum(0)[None, :], nx=None)
        if np.linalg.norm(W - W_prev) <= tol:
            break
    return T, W


def _sample(key, model, n):
    if model == "sbm3":
        A, P, z = sample_sbm(key, n, jnp.asarray(B3), jnp.asarray(PI3))
        return A, P, z
    A, P, _ = sample_graphon(key, n, GRAPHONS[model])
    return A, P, None


def run(config, key, rec):
    try:
        import ot
    except ImportError:
        ot = None
    rec.peer("graspologic", "not installed")
    t_start = time.perf_counter()
    key_mse, key_real, key_speed = jr.split(key, 3)
    ns, reps = config["ns"], config["reps"]
    mse = {m: {meth: [] for meth in ("srgw", "usvt", "sas", "nethist", "pot")} for m in MODELS}
    gaps, fracs, sbm_ari, pot_rows = [], [], {}, []
    for n in rec.progress(ns):
        K = int(np.floor(np.sqrt(n)))
        graphon_models = [m for m in MODELS if m != "sbm3"]
        # all graphon models of this n share one compiled fit (same n, same K)
        batch = {}
        for model in graphon_models:
            keys = jr.split(jr.fold_in(key_mse, n * 7 + MODELS.index(model)), 2 * reps)
            batch[model] = ([_sample(k, model, n) for k in keys[:reps]], keys)
        if n in config["sbm_ns"]:
            keys = jr.split(jr.fold_in(key_mse, n * 7 + MODELS.index("sbm3")), 2 * reps)
            batch["sbm3"] = ([_sample(k, "sbm3", n) for k in keys[:reps]], keys)
        for group, Kg in ((graphon_models, K), (["sbm3"], 3)):
            group = [m for m in group if m in batch]
            if not group:
                continue
            A = jnp.stack([s[0] for m in group for s in batch[m][0]])
            P = jnp.stack([s[1] for m in group for s in batch[m][0]])
            fit_keys = jnp.concatenate([batch[m][1][reps:] for m in group])
            P_hat, labels, gap, frac, _ = _fit_batch(A, Kg, fit_keys, config["starts"])
            base = _baselines_batch(A, Kg, jnp.concatenate([batch[m][1][:reps] for m in group]))
            errs = {"srgw": _node_mse_batch(P_hat, P)}
            for name, P_b in zip(("usvt", "sas", "nethist"), base, strict=True):
                errs[name] = _node_mse_batch(P_b, P)
            gaps += list(np.asarray(gap) * n)
            fracs += list(np.asarray(frac))
            for g, model in enumerate(group):
                sl = slice(g * reps, (g + 1) * reps)
                for meth, e in errs.items():
                    mse[model][meth].append([float(v) for v in np.asarray(e[sl])])
                if model == "sbm3":
                    sbm_ari[n] = [
                        float(adjusted_rand_index(batch[model][0][r][2], labels[g * reps + r]))
                        for r in range(reps)
                    ]
            if ot is not None and n in config["pot_ns"]:
                for model in group:
                    row = []
                    for r in range(config["pot_reps"]):
                        A_np = np.asarray(batch[model][0][r][0], dtype=np.float64)
                        t0 = time.perf_counter()
                        best = None
                        for s_ in range(config["starts"]):  # best of the same number of starts
                            W, log = ot.gromov.semirelaxed_gromov_barycenters(
                                Kg,
                                [A_np],
                                [np.full(n, 1.0 / n)],
                                [1.0],
                                loss_fun="square_loss",
                                symmetric=True,
                                G0="kmeans",
                                log=True,
                                tol=1e-6,
                                warmstartT=True,
                                random_state=100 * r + s_,
                            )
                            T = log["T"][0]
                            F = float(
                                srgw_objective(jnp.asarray(A_np), jnp.asarray(T), jnp.asarray(W))
                            )
                            if best is None or F < best[0]:
                                best = (F, W, T)
                        _, W, T = best
                        z = np.argmax(T, axis=1)
                        P_r = batch[model][0][r][1]
                        row.append(float(node_mse(jnp.asarray(W[z][:, z], dtype=P_r.dtype), P_r)))
                        pot_rows.append(
                            {
                                "model": model,
                                "n": n,
                                "starts": config["starts"],
                                "wall_s": time.perf_counter() - t0,
                            }
                        )
                    mse[model]["pot"].append(row)
    # ---- rates
    slopes = {}
    model_ns = {m: (config["sbm_ns"] if m == "sbm3" else ns) for m in MODELS}
    for model in MODELS:
        for meth, rows in mse[model].items():
            if len(rows) >= 2:
                means = [float(np.mean(r)) for r in rows]
                rec.metric(f"mse_{model}_{meth}", means)
                slopes[f"{model}_{meth}"] = float(
                    np.polyfit(np.log(model_ns[model][: len(means)]), np.log(means), 1)[0]
                )
    rec.metric("mse_slopes", slopes)
    rec.metric("ns", ns)
    rec.metric("sbm_ns", config["sbm_ns"])
    rec.metric("sbm3_ari", {str(k): v for k, v in sbm_ari.items()})
    with rec.figure("mse_vs_n", ncols=3, figsize=(15, 4.5)) as (fig, axes):
        for ax, model in zip(axes, MODELS, strict=True):
            for meth, rows in mse[model].items():
                if len(rows) >= 2:
                    means = [np.mean(r) for r in rows]
                    ax.loglog(
                        model_ns[model][: len(means)],
                        means,
                        "o-",
                        label=f"{meth} (slope {slopes[f'{model}_{meth}']:.2f})",
                    )
            ax.set_title(f"node MSE vs n: {model}")
            ax.set_xlabel("n")
            ax.set_ylabel("node MSE (i != j)")
            ax.legend(fontsize=8)
    gap_max = float(np.max(gaps))
    rec.metric("frac_deterministic_rows_min", float(np.min(fracs)))
    rec.claim(
        "mse_slope_abs_graphon",
        "log-log slope of srGW node MSE vs n on |u - v| <= -0.7",
        slopes["abs_diff_srgw"],
        "<=",
        -0.7,
    )
    rec.claim(
        "rounding_gap_times_n_max",
        "max over runs of n x (rounded - relaxed objective) <= 1",
        gap_max,
        "<=",
        1.0,
    )
    rec.claim(
        "frac_deterministic_rows",
        "mean fraction of one-hot rows of the relaxed coupling",
        float(np.mean(fracs)),
        ">=",
        0.99,
    )
    n_sbm = 400 if 400 in sbm_ari else max(sbm_ari)
    rec.claim(
        "planted_sbm_ari",
        f"min ARI over reps, planted 3-block SBM, n = {n_sbm} (= 1)",
        float(np.min(sbm_ari[n_sbm])),
        ">=",
        1.0 - 1e-9,
    )
    rec.claim(
        "mse_ratio_srgw_vs_usvt_abs",
        "srGW / USVT node MSE on |u - v| at the largest n",
        np.mean(mse["abs_diff"]["srgw"][-1]) / np.mean(mse["abs_diff"]["usvt"][-1]),
        "<",
        1.0,
    )

    rec.metric("sweep_done_at_s", time.perf_counter() - t_start)
    # ---- real graphs
    _real_graphs(config, key_real, rec)
    rec.metric("real_graphs_done_at_s", time.perf_counter() - t_start)

    # ---- speed against POT: same graphs, same starts, same tolerance
    if ot is None:
        rec.peer("pot", "not installed")
        return
    rec.peer(
        "pot",
        {
            "barycenter_runs": pot_rows,
            "mse_by_model": {m: [float(np.mean(r)) for r in mse[m]["pot"]] for m in MODELS},
        },
    )
    _speed(config, key_speed, rec, ot)


def _real_graphs(config, key, rec):
    try:
        from jaxgen.data import (
            load_davis_southern_women,
            load_florentine_families,
            load_karate_club,
            load_les_miserables,
        )

        graphs = {
            "karate": load_karate_club(),
            "les_miserables": load_les_miserables(),
            "florentine": load_florentine_families(),
            "davis": load_davis_southern_women(),
        }
    except Exception as err:  # networkx missing
        rec.note(f"real graphs skipped: {err}")
        return
    davis = graphs["davis"]
    est = estimate_graphon(
        jr.fold_in(key, 1),
        davis.adjacency,
        2,
        init="random",
        num_starts=config["davis_starts"],
        throw=False,
    )
    davis_ari = float(adjusted_rand_index(jnp.asarray(davis.labels), est.labels))
    karate = graphs["karate"]
    est = estimate_graphon(
        jr.fold_in(key, 2),
        karate.adjacency,
        4,
        num_starts=config["karate_starts"],
        throw=False,
    )
    karate_ari = float(adjusted_rand_index(jnp.asarray(karate.labels), est.labels))
    rec.metric(
        "karate_k4_objective",
        {"best": float(est.objective), "starts": [float(v) for v in est.start_objectives]},
    )
    rec.note(
        "karate K = 4: srGW minimises the squared loss, and the lowest objective found over "
        "many starts (about 0.07174, relaxed = rounded) splits the club into two cores plus "
        "two hub pairs with ARI about 0.49 against `club`; partitions with ARI 0.7 (an "
        "earlier numpy prototype's partition) have a higher objective (about 0.0723). The "
        "claim depends on which local minimum the starts reach."
    )
    rec.note(
        "Root cause of karate_ari_k4 < 0.5 (issue 26): the criterion, not the optimiser. "
        "Standalone ablation (best objective / ARI of the kept start, 3 seeds each): "
        "| K, init | 1 start | 10 starts | 100 starts | "
        "| 4, kmeans | 0.0827/0.08, 0.0835/0.64, 0.0868/0.73 | 0.0718/0.53, 0.0719/0.34, "
        "0.0717/0.49 | 0.0717/0.49 (x3) | "
        "| 4, spectral | 0.0737/0.43, 0.0717/0.49, 0.0723/0.68 | 0.0717/0.49 (x3) | "
        "0.0717/0.49 (x3) | "
        "| 4, random | 0.0831/0.17, 0.0868/-0.04, 0.0857/-0.03 | 0.0831/0.17, 0.0828/0.06, "
        "0.0719/0.34 | 0.0719/0.34, 0.0717/0.49 (x2) | "
        "| 3, kmeans | 0.0894/-0.02, 0.0840/0.49, 0.1000/0.67 | 0.0840/0.49 (x3) | "
        "0.0840/0.49 (x3) | "
        "| 2, any | 0.0952/-0.01 (hubs vs periphery) | same | same |. "
        "Every route that reaches the lowest objective (0.07174) gets ARI 0.49; the ARIs of 0.64 "
        "to 0.73 (an earlier numpy prototype's 0.73) come from single starts stuck at higher "
        "objectives (0.0835 to 0.0868). More starts or a better initialisation therefore "
        "cannot lift the claim: the srGW squared-loss minimiser at K = 4 is 0.01 short of the "
        "0.5 threshold. The benchmark now uses 100 starts so the value is the minimiser's, not "
        "a seed's."
    )
    rec.claim(
        "davis_ari_k2",
        "Davis women, K = 2 (best of 30 random starts): ARI vs bipartite",
        davis_ari,
        ">=",
        1.0 - 1e-9,
    )
    rec.claim(
        "karate_ari_k4",
        f"karate club, K = 4 ({config['karate_starts']} k-means starts): ARI vs club",
        karate_ari,
        ">=",
        0.5,
    )
    aucs = {}
    for name in config["auc_graphs"]:
        g = graphs[name]
        A = jnp.asarray(g.adjacency)
        n = A.shape[0]
        K = max(2, int(np.floor(np.sqrt(n))))
        vals, vals_usvt = [], []
        for r in range(config["real_reps"]):
            k_mask, k_fit = jr.split(jr.fold_in(key, 100 + r))
            A_train, mask = hold_out_pairs(k_mask, A, 0.1)
            est = estimate_graphon(k_fit, A_train, K, num_starts=10, throw=False)
            vals.append(float(link_auc(est.edge_probabilities(), A, mask)))
            vals_usvt.append(float(link_auc(usvt(A_train, regime="sparse"), A, mask)))
        aucs[name] = {
            "srgw": float(np.mean(vals)),
            "usvt_sparse": float(np.mean(vals_usvt)),
            "K": K,
        }
    rec.metric("link_auc_real", aucs)
    rec.metric("ari_real", {"davis_k2": davis_ari, "karate_k4": karate_ari})


def _speed(config, key, rec, ot):
    from jaxgen.graphs import init_coupling

    tol = 1e-6
    n = config["speed_n"]
    K = int(np.floor(np.sqrt(n)))
    k_g, k_i = jr.split(key)
    A, _, _ = sample_graphon(k_g, n, GRAPHONS["abs_diff"])
    T0, _ = jax.jit(init_coupling, static_argnums=(2, 3))(k_i, A, K, "kmeans")
    solve = jax.jit(lambda A, T0: srgw_barycenter(A, T0, tol=tol, throw=False))
    timing = rec.time(solve, A, T0, repeats=3)
    ours = solve(A, T0)
    A_np, T0_np = np.asarray(A, np.float64), np.asarray(T0, np.float64)
    t0 = time.perf_counter()
    T_pot, W_pot = _pot_bcd(ot, A_np, T0_np, tol)
    pot_s = time.perf_counter() - t0
    F_pot = float(srgw_objective(jnp.asarray(A_np), jnp.asarray(T_pot), jnp.asarray(W_pot)))
    rec.metric(
        "speed_single",
        {
            "n": n,
            "K": K,
            "jaxgen": timing,
            "pot_s": pot_s,
            "objective_jaxgen": float(ours.objective),
            "objective_pot": F_pot,
            "outer_steps_jaxgen": int(ours.num_steps),
        },
    )
    rec.claim(
        "speed_ratio_single_vs_pot",
        f"POT time / jaxgen time (after compilation), one graph n = {n}, same start",
        pot_s / timing["median_s"],
        ">=",
        1.0,
    )

    # batch: one vmapped compiled call against a Python loop over POT
    bs, nb = config["batch_size"], config["batch_n"]
    Kb = int(np.floor(np.sqrt(nb)))
    keys = jr.split(jr.fold_in(key, 7), bs)
    A_b = jnp.stack([sample_graphon(k, nb, GRAPHONS["abs_diff"])[0] for k in keys])
    init_b = jax.jit(jax.vmap(lambda A, k: init_coupling(k, A, Kb, "kmeans")[0]))
    T0_b = init_b(A_b, jr.split(jr.fold_in(key, 8), bs))
    solve_b = jax.jit(jax.vmap(lambda A, T0: srgw_barycenter(A, T0, tol=tol, throw=False)))
    timing_b = rec.time(solve_b, A_b, T0_b, repeats=3)
    ours_b = solve_b(A_b, T0_b)
    t0 = time.perf_counter()
    F_pot_b = []
    for b in range(bs):
        T_p, W_p = _pot_bcd(
            ot, np.asarray(A_b[b], np.float64), np.asarray(T0_b[b], np.float64), tol
        )
        F_pot_b.append(
            float(
                srgw_objective(
                    jnp.asarray(np.asarray(A_b[b], np.float64)), jnp.asarray(T_p), jnp.asarray(W_p)
                )
            )
        )
    pot_b = time.perf_counter() - t0
    rec.metric(
        "speed_batch",
        {
            "batch": bs,
            "n": nb,
            "K": Kb,
            "jaxgen": timing_b,
            "pot_s": pot_b,
            "objective_mean_jaxgen": float(jnp.mean(ours_b.objective)),
            "objective_mean_pot": float(np.mean(F_pot_b)),
        },
    )
    rec.claim(
        "speed_ratio_batch_vs_pot",
        f"POT loop time / jaxgen vmapped time, {bs} graphs of n = {nb}, same starts",
        pot_b / timing_b["median_s"],
        ">=",
        5.0,
    )
    rec.note(
        "Speed: jaxgen runs in the default float dtype (float32 unless x64) and POT in "
        "float64 numpy; both use the same T0, tolerance 1e-6 and the same stopping rule "
        "(||W - W_prev|| <= tol). jaxgen also stops on a relative objective decrease <= tol."
    )


def plan(config, key):
    """`python -m benchmarks plan`: the batched srGW fit at the largest ``n`` of the ``--full``
    sweep (all graphon models of one size share one compiled call; the largest size dominates).
    XLA's cost analysis counts its conditional-gradient loop body once.
    """
    n, reps = max(config["ns"]), config["reps"]
    K = int(np.floor(np.sqrt(n)))
    models = [m for m in MODELS if m != "sbm3"]
    keys = jr.split(key, len(models) * reps)
    A = jnp.stack([_sample(k, models[i % len(models)], n)[0] for i, k in enumerate(keys)])

    def fit(A, keys):
        return _fit_batch(A, K, keys, config["starts"])

    return [(f"srGW fit of {A.shape[0]} graphs, n={n}, K={K}", fit, (A, keys), 1)]
