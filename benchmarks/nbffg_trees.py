"""NBFFG on trees: exact linear-Gaussian agreement, BFFG vs NBFFG, path-subsampling cost.

1. Linear-Gaussian tree (discrete edges): backward-filter log-evidence vs the dense smoother,
   and vs hyperiax's discrete BFFG sweep (peer, timed side by side).
2. Nonlinear double-well SDE b(x) = x - x^3 on a balanced tree, leaves simulated from the model:
   BFFG (theta = 0), NBFFG full-tree and NBFFG path-subsampled; ELBO, ESS, log-evidence,
   ancestral-state RMSE against the simulated truth.
3. Time per training step vs tree size (balanced trees) for full-tree and path-subsampled losses,
   with fitted log-log slopes.
"""

import time

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from jaxgen.bridges import (
    ControlNet,
    GuidedTree,
    LinearKernels,
    LinearSDEs,
    ResidualFlow,
    TreeKernel,
    TreeSDE,
    TreeTopology,
    backward_filter,
    dense_tree_smoother,
    fit_nbffg,
    full_tree_loss,
    importance_sample,
    log_evidence,
    path_loss,
    simulate_tree,
)

NAME = "nbffg_trees"
PAPER = "Neural Backward Filtering Forward Guiding (Yang, van der Meulen, Sommer, arXiv 2601.23030)"
CONFIGS = {
    "quick": {
        "lg_depth": 4,
        "dw_depth": 3,
        "dw_steps_per_edge": 8,
        # 1000 steps (was 300) and 1024 IS samples (was 256): steps cost ~15 ms here, compile
        # dominates; the ELBO gain on offer is ~0.27 nats, so the comparison needs both.
        "train_steps": 1000,
        # Path mode: 2000 steps of B = 4 stratified leaves (12 edges a step vs 14 for the whole
        # tree): its gradient has ~2x the full-tree variance (measured 90 vs 46), and at 1000
        # steps it was a coin flip against BFFG (ablation note).
        "train_steps_path": 2000,
        "batch_paths": 4,
        "batch_full": 1,
        "is_samples": 1024,
        "timing_depths": [3, 5, 7],
        "timing_steps": 4,
        "timing_edges": "discrete",
    },
    "full": {
        "lg_depth": 6,
        "dw_depth": 5,
        "dw_steps_per_edge": 50,
        "train_steps": 2000,
        "train_steps_path": 4000,
        "batch_paths": 8,
        "batch_full": 1,
        "is_samples": 4096,
        "timing_depths": [4, 5, 6, 7, 8, 9, 10],
        "timing_steps": 50,
        "timing_edges": "sde",
    },
    # CPU-feasible reference at the scale where subsampling should pay (32 leaves: 8 paths cost
    # 40 edges a step vs 62 for the whole tree); ~10-15 minutes on 2 shared cores.
    "paper_cpu": {
        "lg_depth": 6,
        "dw_depth": 5,
        "dw_steps_per_edge": 8,
        "train_steps": 2000,
        "train_steps_path": 4000,
        "batch_paths": 8,
        "batch_full": 1,
        "is_samples": 2048,
        "timing_depths": [3, 5, 7],
        "timing_steps": 4,
        "timing_edges": "discrete",
    },
}

# --full --smoke: the full configuration's code path, every size cut to the least that runs.
SMOKE = {
    "lg_depth": 3,
    "dw_depth": 2,
    "dw_steps_per_edge": 4,
    "train_steps": 3,
    "train_steps_path": 3,
    "batch_paths": 2,
    "is_samples": 16,
    "timing_depths": [2, 3],
    "timing_steps": 4,
}

SIGMA = 0.6


def _dw_drift(t, x):
    return x - x**3


def _dw_sigma(t, x):
    return SIGMA * jnp.eye(1, dtype=x.dtype)


def _dw_step_mean(x, tau):
    return x + tau * _dw_drift(0.0, x)


def _dw_step_cov(x, tau):
    return SIGMA**2 * tau * jnp.eye(1, dtype=x.dtype)


def _lg_part(cfg, key, rec):
    topo = TreeTopology.balanced(cfg["lg_depth"], branch_length=0.5)
    n, d = topo.num_nodes, 2
    k = jr.split(key, 2)
    Phi = jnp.array([[0.9, 0.2], [-0.1, 0.8]])
    beta = jnp.array([0.1, -0.2])
    Q = jnp.array([[0.3, 0.05], [0.05, 0.2]])
    kern = LinearKernels(
        jnp.broadcast_to(Phi, (n, d, d)),
        jnp.broadcast_to(beta, (n, d)),
        jnp.broadcast_to(Q, (n, d, d)),
    )
    y = jr.normal(k[0], (topo.num_leaves, d))
    obs_var = 0.1
    R = obs_var * jnp.eye(d)
    x0 = jnp.array([0.3, -0.2])

    @jax.jit
    def ours(y):
        f = backward_filter(topo, y, kern, R=R)
        return log_evidence(jax.tree_util.tree_map(lambda a: a[0], f.node), x_root=x0)

    ev = ours(y)
    _, _, ref = eqx.filter_jit(dense_tree_smoother)(topo, kern, y, R=R, x_root=x0)
    err = abs(float(ev - ref))
    rec.metric("lg_log_evidence", float(ev))
    rec.metric("lg_abs_error_vs_dense", err)
    rec.claim(
        "lg_exact",
        "linear-Gaussian tree: filter log-evidence equals the dense Kalman smoother (float64)",
        err,
        "<=",
        1e-8,
    )
    # Tens of microseconds per call: many repeats, so the median is not one scheduler hiccup.
    t_ours = rec.time(ours, y, repeats=cfg.get("lg_time_repeats", 200))
    rec.metric("lg_filter_time_s", t_ours["median_s"])
    try:
        import hyperiax
        from hyperiax.prebuilt import bffg as hb

        htopo = hyperiax.symmetric_topology(cfg["lg_depth"], 2)
        bf = hb.discrete_bf_sweep(lambda a, p: Phi, lambda a, p: beta, lambda a, p: Q)
        empty = hyperiax.Tree.empty(htopo, hb.discrete_schema(d))

        @jax.jit
        def peer(y):
            tree = hb.init_discrete_tree(empty, y, obs_var, d=d, root_val=x0)
            tree = bf(tree, params=None)
            H, F, c = tree.prec[0], tree.ptnl[0], tree.log_norm[0]
            return c + F @ x0 - 0.5 * x0 @ H @ x0

        ev_peer = peer(y)
        t_peer = rec.time(peer, y, repeats=cfg.get("lg_time_repeats", 200))
        ratio = t_ours["median_s"] / t_peer["median_s"]
        rec.claim(
            "lg_filter_speed",
            "linear-Gaussian filter time / hyperiax discrete BFFG sweep time (same tree, jitted)",
            ratio,
            "<=",
            1.0,
        )
        rec.peer(
            "hyperiax.prebuilt.bffg",
            {
                "log_evidence": float(ev_peer),
                "abs_diff_vs_ours": abs(float(ev_peer - ev)),
                "median_s": t_peer["median_s"],
                "first_call_s": t_peer["first_call_s"],
                "time_ratio_ours_over_peer": ratio,
            },
        )
    except ImportError:
        rec.peer("hyperiax.prebuilt.bffg", "not installed")
    except Exception as e:  # noqa: BLE001 - a peer API change must not stop the benchmark
        rec.peer("hyperiax.prebuilt.bffg", {"error": f"{type(e).__name__}: {e}"[:300]})


_filter = eqx.filter_jit(backward_filter)
_simulate_tree = eqx.filter_jit(simulate_tree)


def _dw_problem(cfg, key):
    """The double-well tree: topology, simulated truth, guided tree, and the fit/IS/net keys."""
    topo = TreeTopology.balanced(cfg["dw_depth"], branch_length=0.25)
    n, K = topo.num_nodes, cfg["dw_steps_per_edge"]
    k_sim, k_obs, k_fit, k_is, k_net = jr.split(key, 5)
    x_root = jnp.zeros(1)
    truth = _simulate_tree(k_sim, topo, TreeSDE(_dw_drift, _dw_sigma), x_root, K)
    R = jnp.array([[0.01]])
    y = truth[topo.leaves] + 0.1 * jr.normal(k_obs, (topo.num_leaves, 1))
    a = jnp.full((n, 1, 1), SIGMA**2)
    px = LinearSDEs(jnp.zeros((n, 1, 1)), jnp.zeros((n, 1)), a, a)
    filt = _filter(topo, y, px, R=R, num_steps=K)
    gt = GuidedTree(
        topo=topo, model=TreeSDE(_dw_drift, _dw_sigma), filt=filt, proxy=px, x_root=x_root
    )
    return topo, truth, gt, (k_fit, k_is, k_net)


def _dw_part(cfg, key, rec):
    topo, truth, gt, (k_fit, k_is, k_net) = _dw_problem(cfg, key)
    M = cfg["is_samples"]
    isj = eqx.filter_jit(lambda k, g, c: importance_sample(k, g, M, c))
    internal = np.flatnonzero(~topo.is_leaf)[1:]

    def evaluate(tag, control, lw_ref=None):
        out = isj(k_is, gt, control)
        rmse = float(jnp.sqrt(jnp.mean((out.posterior_mean[internal] - truth[internal]) ** 2)))
        res = {
            "elbo": float(out.elbo),
            "log_evidence": float(out.log_evidence),
            "ess": float(out.ess),
            "ess_frac": float(out.ess) / M,
            "ancestral_rmse": rmse,
            "elbo_se": float(jnp.std(out.log_weights)) / np.sqrt(M),
        }
        if lw_ref is not None:  # same IS keys: the s.e. of the ELBO difference
            res["elbo_diff_paired_se"] = float(jnp.std(out.log_weights - lw_ref)) / np.sqrt(M)
        for k_, v in res.items():
            rec.metric(f"dw_{tag}_{k_}", v)
        return res, out.log_weights

    ctrl0 = ControlNet(1, 1, 64, 2, key=k_net)
    bffg, lw_bffg = evaluate("bffg", None)
    results = {"bffg": bffg}
    curves = {}
    for mode, bs, steps in (
        ("full", cfg["batch_full"], cfg["train_steps"]),
        ("path", cfg["batch_paths"], cfg["train_steps_path"]),
    ):
        t0 = time.perf_counter()
        # fit_nbffg's defaults: AdamW 3e-3, 5% warm-up, cosine; stratified leaves in path mode.
        res = fit_nbffg(ctrl0, gt, key=k_fit, num_steps=steps, mode=mode, batch_size=bs)
        rec.metric(f"dw_nbffg_{mode}_train_s", time.perf_counter() - t0)
        results[mode] = evaluate(f"nbffg_{mode}", res.model, lw_bffg)[0]
        curves[mode] = res.losses
    for mode in ("full", "path"):
        se, pse = results[mode]["elbo_se"], results[mode]["elbo_diff_paired_se"]
        rec.claim(
            f"nbffg_{mode}_learned",
            f"trained enough: NBFFG ({mode}) ELBO - its untrained initialisation's ELBO "
            f"(theta = 0 is BFFG; same IS keys; s.e. of the difference {pse:.3f}, "
            f"per-ELBO MC s.e. ~{se:.3f})",
            results[mode]["elbo"] - bffg["elbo"],
            ">=",
            0.0,
        )
    rec.claim(
        "nbffg_ess_gt_bffg",
        "double-well SDE: NBFFG (path-subsampled) ESS > BFFG ESS",
        results["path"]["ess"] - bffg["ess"],
        ">",
        0.0,
    )
    rec.claim(
        "nbffg_elbo_ge_bffg",
        "double-well SDE: NBFFG (path-subsampled) ELBO >= BFFG ELBO",
        results["path"]["elbo"] - bffg["elbo"],
        ">=",
        0.0,
    )
    with rec.figure("double_well", ncols=2, figsize=(10, 4)) as (fig, axes):
        for mode, c in curves.items():
            w = max(1, len(c) // 20)
            axes[0].plot(np.convolve(c, np.ones(w) / w, mode="valid"), label=f"NBFFG {mode}")
        axes[0].set(xlabel="step", ylabel="loss (moving average)", title="training loss")
        axes[0].legend()
        names = list(results)
        axes[1].bar(names, [results[k]["ess_frac"] for k in names])
        axes[1].set(ylabel="normalised ESS", title=f"ESS over {M} whole-tree samples")


@eqx.filter_jit
def _grad_full(control, gt, key):
    return eqx.filter_value_and_grad(lambda c: full_tree_loss(key, gt, c, 1))(control)


@eqx.filter_jit
def _grad_path(control, gt, key, rows):
    return eqx.filter_value_and_grad(lambda c: path_loss(key, gt, rows, c))(control)


def _timing_part(cfg, key, rec):
    K = cfg["timing_steps"]
    leaves, t_full, t_path = [], [], []
    for depth in rec.progress(cfg["timing_depths"]):
        topo = TreeTopology.balanced(depth, branch_length=1.0 / depth)
        n = topo.num_nodes
        a = jnp.full((n, 1, 1), SIGMA**2)
        px = LinearSDEs(jnp.zeros((n, 1, 1)), jnp.zeros((n, 1)), a, a)
        y = jnp.where(jnp.arange(topo.num_leaves)[:, None] % 2 == 0, 1.0, -1.0)
        if cfg["timing_edges"] == "sde":
            filt = _filter(topo, y, px, R=jnp.array([[0.01]]), num_steps=K)
            gt = GuidedTree(
                topo=topo,
                model=TreeSDE(_dw_drift, _dw_sigma),
                filt=filt,
                proxy=px,
                x_root=jnp.zeros(1),
            )
            ctrl = ControlNet(1, 1, 64, 2, key=key)
        else:  # one Euler step of the double well per edge, conditional-flow residual
            tau = jnp.asarray(topo.branch_length)[:, None, None]
            kern = LinearKernels(jnp.ones((n, 1, 1)), jnp.zeros((n, 1)), SIGMA**2 * tau)
            filt = _filter(topo, y, kern, R=jnp.array([[0.01]]))
            gt = GuidedTree(
                topo=topo,
                model=TreeKernel(_dw_step_mean, _dw_step_cov),
                filt=filt,
                proxy=kern,
                x_root=jnp.zeros(1),
            )
            ctrl = ResidualFlow(1, 2, 64, 2, key=key)
        rows = jnp.arange(cfg["batch_paths"])
        tf = rec.time(_grad_full, ctrl, gt, key, repeats=3)
        tp = rec.time(_grad_path, ctrl, gt, key, rows, repeats=3)
        leaves.append(topo.num_leaves)
        t_full.append(tf["median_s"])
        t_path.append(tp["median_s"])
    lx = np.log(np.array(leaves, float))
    s_full = float(np.polyfit(lx, np.log(t_full), 1)[0])
    s_path = float(np.polyfit(lx, np.log(t_path), 1)[0])
    rec.metric("timing_leaves", leaves)
    rec.metric("timing_full_step_s", t_full)
    rec.metric("timing_path_step_s", t_path)
    rec.metric("slope_full", s_full)
    rec.metric("slope_path", s_path)
    rec.claim(
        "subsampling_scaling",
        f"log-log slope of path-subsampled step time vs leaves is "
        f"below half the full-tree slope ({cfg['timing_edges']} edges)",
        s_path - 0.5 * s_full,
        "<",
        0.0,
        slope_full=s_full,
        slope_path=s_path,
    )
    with rec.figure("time_per_step", figsize=(5, 4)) as (fig, ax):
        ax.loglog(leaves, t_full, "o-", label=f"full tree (slope {s_full:.2f})")
        ax.loglog(
            leaves,
            t_path,
            "s-",
            label=f"path-subsampled, B={cfg['batch_paths']} (slope {s_path:.2f})",
        )
        ax.set(
            xlabel="number of leaves",
            ylabel="seconds per gradient step",
            title="training cost vs tree size",
        )
        ax.legend()


def run(config, key, rec):
    with jax.enable_x64(True):
        k1, k2, k3 = jr.split(key, 3)
        for part, k in ((_lg_part, k1), (_dw_part, k2), (_timing_part, k3)):
            t0 = time.perf_counter()
            part(config, k, rec)
            rec.metric(f"wall{part.__name__}_s", time.perf_counter() - t0)
    rec.note(
        "Quick mode times the training step on discrete (one Euler step per edge) edges "
        "with the ResidualFlow residual: per-depth recompilation of the SDE-edge gradient "
        "costs minutes on 2 CPU cores; --full times SDE edges with the ControlNet."
    )
    rec.note(
        "Root cause of nbffg_ess_gt_bffg / nbffg_elbo_ge_bffg / nbffg_path_learned (issue 26): "
        "no bug; a recipe (lr, leaf sampling, steps) on a gradient with little signal. "
        "(a) path_loss with all 8 leaves equals full_tree_loss on the same per-edge keys to "
        "1e-15 in value and gradient, and path B=4 is unbiased (2000 draws: 0.359 +- 0.030 vs "
        "full 0.381 +- 0.018 at theta = 0). (b) Little room: BFFG ELBO -5.720 vs log p^ -5.436 "
        "(seed 0), so <= 0.28 nats are on offer, against a per-step loss s.d. of ~0.8 (whole "
        "tree) / ~1.4 (4 paths). (c) Gradient variance (trace of the covariance, 300 draws at "
        "a random theta): full B1 46, path B4 uniform 102, path B4 stratified 90, path B2 "
        "uniform 205 / stratified 154; with the martingale term int theta dW in the loss "
        "(unbiased too) 69 vs 3.5 at theta = 0, so it is not used. (d) On 8 leaves, 4 paths "
        "cost 12 edges vs 14 for the whole tree: subsampling cannot pay at this size. "
        "Ablation (d = ELBO - BFFG ELBO on the same 1024 IS keys; paired s.e. of d 0.003-0.006, "
        "per-ELBO s.e. 0.024; ESS of 1024; 'key 2' = another training key): "
        "| run | seed 0 d | seed 0 ESS | seed 0 key 2 d | seed 1 d | "
        "| BFFG (theta = 0) | 0 | 643 | 0 | 0 (ESS 442) | "
        "| path B4 uniform, lr 1e-3, 1000 steps (old quick) | -0.020 | 642 | - | - | "
        "| same + EMA 0.99 of the weights | -0.028 | 641 | - | - | "
        "| path B4 uniform, lr 3e-3 + 5% warm-up, 1000 | +0.025 | 652 | +0.000 | +0.037 | "
        "| same + EMA 0.995 | +0.002 | 649 | - | +0.056 | "
        "| path B4 uniform, lr 1e-2 + warm-up + EMA 0.99, 1000 | -0.002 | 646 | - | +0.142 | "
        "| path B4 stratified, lr 3e-3 + warm-up, 1000 | -0.011 | 655 | -0.016 | +0.027 | "
        "| path B4 stratified, lr 3e-3 + warm-up, 2000 (new quick) | +0.011 | 676 | +0.049 | "
        "+0.135 (ESS 388) | "
        "| same + EMA 0.995 | +0.022 | 675 | +0.053 | - | "
        "| full B1, lr 1e-3, 1000 (old quick) | +0.027 | 650 | - | +0.081 | "
        "| full B1, lr 3e-3 + warm-up, 1000 (new quick) | +0.093 | 658 | - | +0.103 (ESS 509) |. "
        "Verdict: the old lr 1e-3 without warm-up was too slow for this noisy pathwise gradient "
        "(fixed as fit_nbffg's default: 3e-3, 5% warm-up, cosine) and the path model needs "
        "about twice the full model's steps (2x its gradient variance); stratified "
        "(systematic, depth-first) leaf sampling, now the default, removes the random "
        "inner-edge weights (-12% variance at B4, -25% at B2). With that the path model gets "
        "ahead of BFFG in ELBO in every run tried (+0.011 to +0.135), but on seed 0 by only "
        "~2 paired s.e. (0.5 per-ELBO s.e.), and ESS does not follow the ELBO everywhere "
        "(seed 1: ELBO +0.135, ESS 441 -> 388): the ESS and ELBO comparisons with BFFG are "
        "within training noise at this size, not the paper's clear win. Longer branches "
        "(0.75: BFFG ESS 3%) were tried last session: ELBO tie, ESS drop. Larger trees are "
        "where subsampling should pay: the 'paper_cpu' configuration (depth 5, 32 leaves, "
        "B=8, 2000 full / 4000 path steps) has a reference run in "
        "benchmarks/reference/nbffg_trees.md (seed 0, 315 s): there BFFG leaves room (ELBO "
        "-19.32, ESS 103/2048) and NBFFG gains +1.08 nats ELBO (path, s.e. 0.01) / +1.18 (full), "
        "log p^ -17.53 -> -16.23 / -16.08, ancestral RMSE 0.197 -> 0.187, path training 82 s "
        "for 4000 steps vs 93 s for 2000 full, step-time slope -0.16 vs 0.69; but ESS drops to "
        "82 / 80: the trained residual widens the weight spread (heavier tail) while raising "
        "the mean log-weight, so the paper's ESS win is not reproduced at CPU scale. --full "
        "(SDE timing, 50 Euler steps per edge) was not run."
    )
    rec.note(
        "Landmark shapes with Kunita noise are in notebooks/bridges/020_tree_guidance.ipynb, "
        "not in this benchmark (time)."
    )


def plan_stage(config, key, rec):
    """`python -m benchmarks plan`: the double-well tree, whose `fit_nbffg` is the run's training.

    The linear-Gaussian part and the importance-sampling baseline before the fit take minutes at
    ``--full`` sizes on a CPU and compile nothing the plan reports.
    """
    with jax.enable_x64(True):
        _, _, gt, (k_fit, _, k_net) = _dw_problem(config, jr.split(key, 3)[1])
        control = ControlNet(1, 1, 64, 2, key=k_net)  # as `_dw_part`'s, without its IS baseline
        steps, batch = config["train_steps"], config["batch_full"]
        fit_nbffg(control, gt, key=k_fit, num_steps=steps, mode="full", batch_size=batch)
