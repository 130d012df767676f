"""ICNN / ReLU+ depth: fitting MAX_n by depth and width, the ReLU+ corner floor, f_k separation.

Bakaev, Brunck, Hertrich, Reichman, Yehudayoff, "On the depth of monotone ReLU neural networks
and ICNNs", arXiv:2505.06169. Claims measured here: a depth-2 ICNN's error on
MAX_4 does not improve with width; depth n = 4 brings the error well below depth 2; no ReLU+
network beats the corner floor 1/4 at any depth; the exact constructions are exact. The f_k
separation experiment (section 2.5 candidate family) is reported as measurements, no claim.
"""

import functools as ft
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax

from jaxgen.core import fit
from jaxgen.nn import (
    ICNN,
    BoxSampler,
    ReLUNet,
    ReLUPlusNet,
    center_biases,
    corner_floor,
    fit_on_box,
    icnn_max_exact,
    icnn_separation_exact,
    lattice_points,
    max_n,
    relu_max_tree,
    separation_fk,
    sup_error,
)

NAME = "icnn_depth"
PAPER = "On the Depth of Monotone ReLU Neural Networks and ICNNs (arXiv:2505.06169)"

CONFIGS = {
    "quick": {
        "n_values": [4],
        "widths": [16, 64],
        "seeds": 2,
        "relu_plus_seeds": 1,
        # 3000 steps at lr 1e-2 (was 1000 at 3e-3): the depth-n ICNN was under-trained (issue 26
        # ablation in the notes); the sep and peer fits keep their own step counts.
        "steps": 3000,
        "batch": 256,
        "lr": 1e-2,
        "relu_plus_width": 64,
        "relu_plus_hidden": [1, 2, 3],
        "relu_width": 64,
        "test_points": 20000,
        "sup_samples": 2048,
        "sup_starts": 16,
        "sup_ascent": 40,
        "sep_k": [2, 3],
        "sep_icnn_hidden": [1, 3],
        "sep_icnn_width": 32,
        "sep_steps": 1000,
        "peer_hidden": [1, 3],
        "peer_width": 64,
        "peer_steps": 1000,
    },
    "full": {
        "n_values": [4, 6, 8],
        "widths": [32, 128, 512],
        "seeds": 3,
        "relu_plus_seeds": 3,
        "steps": 20000,
        "batch": 1024,
        "lr": 3e-3,
        "relu_plus_width": 128,
        "relu_plus_hidden": [1, 2, 3, 4],
        "relu_width": 128,
        "test_points": 50000,
        "sup_samples": 16384,
        "sup_starts": 128,
        "sup_ascent": 200,
        "sep_k": [2, 4, 8],
        "sep_icnn_hidden": [1, 2, 3, 4, 6, 8, 12],
        "sep_icnn_width": 256,
        "sep_steps": 20000,
        "peer_hidden": [1, 2, 3, 4],
        "peer_width": 128,
        "peer_steps": 20000,
    },
}

# --full --smoke: the full configuration's code path, every size cut to the least that runs.
SMOKE = {
    "n_values": [4],
    "widths": [8],
    "seeds": 1,
    "relu_plus_seeds": 1,
    "steps": 5,
    "batch": 16,
    "relu_plus_width": 8,
    "relu_plus_hidden": [1, 2],
    "relu_width": 8,
    "test_points": 64,
    "sup_samples": 64,
    "sup_starts": 2,
    "sup_ascent": 2,
    "sep_k": [2],
    "sep_icnn_hidden": [1, 2],
    "sep_icnn_width": 8,
    "sep_steps": 5,
    "peer_hidden": [1],
    "peer_width": 8,
    "peer_steps": 5,
}


@eqx.filter_jit
def _rmse(model, x, y):
    return jnp.sqrt(jnp.mean((jax.vmap(model)(x) - y) ** 2))


def _max_one(z):
    return jnp.max(z)


@eqx.filter_jit
def _sup_vs_max(model, key, n, samples, starts, ascent):
    return sup_error(
        key, model, _max_one, n, num_samples=samples, num_starts=starts, num_ascent=ascent
    )


def _evaluate(model, x_test, key, n, cfg):
    """Test RMSE and ascent-estimated sup error against MAX_n on [-1, 1]^n."""
    rmse = float(_rmse(model, x_test, max_n(x_test)))
    sup = float(
        _sup_vs_max(model, key, n, cfg["sup_samples"], cfg["sup_starts"], cfg["sup_ascent"])
    )
    return rmse, sup


def _fit(model, target, key, cfg, optimizer, steps):
    return fit_on_box(
        model, target, key=key, num_steps=steps, optimizer=optimizer, batch_size=cfg["batch"]
    ).model


def _ensemble_loss(models, batch, key):
    """Sum over the stacked seeds of each one's mean squared error (independent fits: the
    parameters are disjoint and Adam is per-parameter, so this is one compiled call for all seeds
    instead of one per seed).
    """
    del key
    x, y = batch
    pred = eqx.filter_vmap(lambda m: jax.vmap(m)(x))(models)
    return jnp.sum(jnp.mean((pred - y[None, :]) ** 2, axis=1))


def _joint_loss(groups, batch, key):
    """Sum of `_ensemble_loss` over groups of stacked ensembles of different architectures: the
    parameters are disjoint and Adam is per-parameter, so every (architecture, seed) member is
    trained independently, with one compiled step and one dispatch per step for the whole sweep
    (per-step dispatch, not arithmetic, dominated the per-architecture fits).
    """
    return sum(_ensemble_loss(g, batch, key) for g in groups)


def _fit_sweep(specs, n, target, key, cfg, optimizer, steps):
    """Train every ``(cls, widths, keys)`` of ``specs`` jointly on the same batches; returns, per
    entry, the list of trained members (one per key).
    """
    groups = tuple(
        eqx.filter_vmap(lambda k, c=cls, w=widths: c(n, w, key=k))(keys)
        for cls, widths, keys in specs
    )
    dtype = jax.tree_util.tree_leaves(groups)[0].dtype
    sampler = BoxSampler(target, n, cfg["batch"], dtype=dtype)
    groups = fit(
        _joint_loss, groups, sampler, optimizer, num_steps=steps, key=key, progress=False
    ).model
    return [
        [
            jax.tree_util.tree_map(lambda v, i=i: v[i] if eqx.is_array(v) else v, g)
            for i in range(len(keys))
        ]
        for g, (_, _, keys) in zip(groups, specs, strict=True)
    ]


def _fit_seeds(cls, n, widths, keys, target, key, cfg, optimizer, steps):
    """Train ``len(keys)`` independently initialised networks on the same batches; returns the
    list of trained members.
    """
    models = eqx.filter_vmap(lambda k: cls(n, widths, key=k))(keys)
    dtype = jax.tree_util.tree_leaves(models)[0].dtype
    if cfg.get("center_init", False):
        # data-dependent bias centring (zero-mean pre-activations at init, Hoedt & Klambauer)
        x0 = jr.uniform(jr.fold_in(key, 12345), (1024, n), dtype, -1.0, 1.0)
        models = eqx.filter_vmap(lambda m: center_biases(m, x0))(models)
    sampler = BoxSampler(target, n, cfg["batch"], dtype=dtype)
    models = fit(
        _ensemble_loss, models, sampler, optimizer, num_steps=steps, key=key, progress=False
    ).model
    return [
        jax.tree_util.tree_map(lambda v, i=i: v[i] if eqx.is_array(v) else v, models)
        for i in range(len(keys))
    ]


def _scaled_fk(k):
    """f_k on the bounding box of Lambda_k enlarged by 1, rescaled to u in [-1, 1]^2."""
    P = lattice_points(k)
    lo, hi = P.min(0) - 1.0, P.max(0) + 1.0
    centre, half = (lo + hi) / 2, (hi - lo) / 2

    def target(u):
        c = jnp.asarray(centre, u.dtype).reshape((1,) * (u.ndim - 1) + (2,))
        h = jnp.asarray(half, u.dtype).reshape((1,) * (u.ndim - 1) + (2,))
        return separation_fk(c + h * u, k)

    return target


def _peer_apply(net, params, z):
    return net.apply({"params": params}, z)


def _peer_loss(net, params, x):
    pred = jax.vmap(ft.partial(_peer_apply, net, params))(x)
    return jnp.mean((pred - max_n(x)) ** 2)


def _peer_step(net, opt, shape, dtype, params, opt_state, key):
    """One optax step of the ott/flax peer on a fresh uniform batch (the peer's own loop)."""
    x = jr.uniform(key, shape, dtype, -1.0, 1.0)
    grads = jax.grad(ft.partial(_peer_loss, net))(params, x)
    updates, opt_state = opt.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state


def _ott_peer(rec, n, cfg, key, x_test):
    try:
        from ott.neural.networks.icnn import ICNN as OttICNN
    except ImportError:
        rec.peer("ott-jax ICNN", "not installed")
        return None
    out = {}
    y_test = max_n(x_test)
    for L in cfg["peer_hidden"]:
        net = OttICNN(dim_data=n, dim_hidden=[cfg["peer_width"]] * L, pos_weights=True)
        k_init, k_fit = jr.split(jr.fold_in(key, L))
        params = net.init(k_init, jnp.zeros((n,), x_test.dtype))["params"]
        peer_steps = cfg.get("peer_steps", cfg["steps"])
        opt = optax.adam(optax.cosine_decay_schedule(cfg["lr"], peer_steps))
        state = opt.init(params)

        loss = ft.partial(_peer_loss, net)
        step = jax.jit(ft.partial(_peer_step, net, opt, (cfg["batch"], n), x_test.dtype))

        t0 = time.perf_counter()
        for i in range(peer_steps):
            params, state = step(params, state, jr.fold_in(k_fit, i))
        jax.block_until_ready(params)
        wall = time.perf_counter() - t0
        rmse = float(jnp.sqrt(loss(params, x_test)))
        pred = jax.jit(jax.vmap(ft.partial(_peer_apply, net, params)))(x_test)
        out[f"n_hidden={L + 1}"] = {
            "rmse": rmse,
            "max_err_test": float(jnp.max(jnp.abs(pred - y_test))),
            "train_wall_s": wall,
        }
    rec.peer(
        "ott-jax ICNN",
        {
            "note": "ott ICNN(dim_hidden=[w]*L, pos_weights=True): L+1 ReLU layers "
            "(the last of width "
            "1), plus quadratic PosDefPotentials skips; not piecewise linear, so not an ICNN "
            "in the paper's sense. Same data distribution and optimiser; `peer_steps` "
            "steps (quick: 1000, half the jaxgen sweep's, to fit the time budget).",
            **out,
        },
    )
    return out


def run(config, key, rec):
    cfg = config
    k_max, k_plus, k_sep, k_peer = jr.split(key, 4)
    dtype = jnp.result_type(float)
    n0 = cfg["n_values"][0]
    results = {}
    t_start = time.perf_counter()

    # exact constructions (float default dtype)
    for n in cfg["n_values"]:
        x = 10.0 * jr.normal(jr.fold_in(k_max, 999), (cfg["test_points"], n), dtype)
        for name, model in [
            ("icnn_max_exact", icnn_max_exact(n)),
            ("relu_max_tree", relu_max_tree(n)),
        ]:
            err = float(jnp.max(jnp.abs(jax.vmap(model)(x) - max_n(x)) / (1 + jnp.abs(max_n(x)))))
            rec.metric(f"{name}_n{n}_rel_err", err)
            rec.metric(f"{name}_n{n}_depth", model.depth)
            results[(name, n)] = err

    for n in cfg["n_values"]:
        x_test = jr.uniform(jr.fold_in(k_max, n), (cfg["test_points"], n), dtype, -1.0, 1.0)
        opt = optax.adam(optax.cosine_decay_schedule(cfg["lr"], cfg["steps"]))
        # ICNNs: width x depth x seed, all trained in ONE joint fit (one compile, one loop)
        specs, cells = [], []
        for width in cfg["widths"]:
            for L in range(1, n + 1):
                kk = jr.fold_in(k_max, 1000 * width + L)
                specs.append((ICNN, (width,) * L, jr.split(jr.fold_in(kk, 0), cfg["seeds"])))
                cells.append((width, L, kk))
        # ReLU+ (width relu_plus_width, several depths) and the plain ReLU net join the same fit
        for L in cfg["relu_plus_hidden"]:
            specs.append(
                (
                    ReLUPlusNet,
                    (cfg["relu_plus_width"],) * L,
                    jr.split(jr.fold_in(k_plus, L), cfg["relu_plus_seeds"]),
                )
            )
        specs.append(
            (ReLUNet, (cfg["relu_width"],) * 2, jr.split(jr.fold_in(k_plus, 77), cfg["seeds"]))
        )
        t_fit = time.perf_counter()
        trained = _fit_sweep(specs, n, max_n, jr.fold_in(k_max, 4242), cfg, opt, cfg["steps"])
        rec.metric(f"n{n}_sweep_fit_s", time.perf_counter() - t_fit)
        trained_plus = trained[len(cells) : len(cells) + len(cfg["relu_plus_hidden"])]
        trained_relu = trained[-1]
        table = {}
        for (width, L, kk), members in zip(cells, trained[: len(cells)], strict=True):
            rm, su = [], []
            for s, model in enumerate(members):
                r, u = _evaluate(model, x_test, jr.fold_in(kk, 2 + s), n, cfg)
                rm.append(r)
                su.append(u)
            table[(width, L + 1)] = (float(np.mean(rm)), float(np.mean(su)))
            rec.metric(f"n{n}_icnn_w{width}_depth{L + 1}_rmse", float(np.mean(rm)))
            rec.metric(f"n{n}_icnn_w{width}_depth{L + 1}_sup", float(np.mean(su)))
        results[("icnn", n)] = table
        # ReLU+ and plain ReLU
        plus = {}
        for L, members in zip(cfg["relu_plus_hidden"], trained_plus, strict=True):
            rm, su, cf, cf2 = [], [], [], []
            for s, model in enumerate(members):
                k_sup = jr.fold_in(jr.fold_in(k_plus, 1000 + L), s)
                r, u = _evaluate(model, x_test, k_sup, n, cfg)
                rm.append(r)
                su.append(u)
                cf.append(float(corner_floor(model, n, dtype=dtype)))
                cf2.append(float(corner_floor(model, n, low=-1.0, high=1.0, dtype=dtype)))
            plus[L + 1] = (float(np.mean(rm)), float(np.mean(su)), min(cf), min(cf2))
            rec.metric(f"n{n}_reluplus_depth{L + 1}_rmse", float(np.mean(rm)))
            rec.metric(f"n{n}_reluplus_depth{L + 1}_sup", float(np.mean(su)))
            rec.metric(f"n{n}_reluplus_depth{L + 1}_corner_floor_01", min(cf))
            rec.metric(f"n{n}_reluplus_depth{L + 1}_corner_floor_pm1", min(cf2))
        results[("plus", n)] = plus
        kk = jr.fold_in(k_plus, 78)
        members = trained_relu
        rm = [
            _evaluate(model, x_test, jr.fold_in(kk, 2 + s), n, cfg)
            for s, model in enumerate(members)
        ]
        results[("relu", n)] = tuple(float(v) for v in np.mean(rm, axis=0))
        # the best constant predictor's RMSE: the trivial baseline every fit must beat
        results[("const_rmse", n)] = float(jnp.std(max_n(x_test)))
        rec.metric(f"n{n}_constant_predictor_rmse", results[("const_rmse", n)])
        rec.metric(f"n{n}_relunet_depth3_rmse", results[("relu", n)][0])
        rec.metric(f"n{n}_relunet_depth3_sup", results[("relu", n)][1])
        rec.metric(f"n{n}_sweep_done_at_s", time.perf_counter() - t_start)
        if n == n0:
            _ott_peer(rec, n, cfg, k_peer, x_test)
            rec.metric("peer_done_at_s", time.perf_counter() - t_start)

    # f_k separation (measurements only)
    sep = {}
    for k in cfg["sep_k"]:
        target = _scaled_fk(k)
        x_test = jr.uniform(jr.fold_in(k_sep, k), (cfg["test_points"], 2), dtype, -1.0, 1.0)
        std = float(jnp.std(target(x_test)))
        exact = icnn_separation_exact(k)
        P = lattice_points(k)
        lo, hi = P.min(0) - 1.0, P.max(0) + 1.0
        xs = (lo + hi) / 2 + (hi - lo) / 2 * np.asarray(x_test)
        xs = jnp.asarray(xs, dtype)
        exact_err = float(jnp.max(jnp.abs(jax.vmap(exact)(xs) - separation_fk(xs, k))))
        rec.metric(f"fk{k}_exact_icnn_n_hidden", exact.n_hidden)
        rec.metric(f"fk{k}_exact_icnn_max_err", exact_err)
        opt = optax.adam(optax.cosine_decay_schedule(cfg["lr"], cfg["sep_steps"]))
        row = {}
        for L in cfg["sep_icnn_hidden"]:
            k_init, k_fit = jr.split(jr.fold_in(jr.fold_in(k_sep, 100 * k + L), 0))
            model = _fit(
                ICNN(2, (cfg["sep_icnn_width"],) * L, key=k_init),
                target,
                k_fit,
                cfg,
                opt,
                cfg["sep_steps"],
            )
            row[L + 1] = float(_rmse(model, x_test, target(x_test))) / std
            rec.metric(f"fk{k}_icnn_depth{L + 1}_rel_rmse", row[L + 1])
        k_init, k_fit = jr.split(jr.fold_in(k_sep, 5000 + k))
        width = 8 * (k + 1) ** 2
        model = _fit(
            ReLUNet(2, (width, width), key=k_init), target, k_fit, cfg, opt, cfg["sep_steps"]
        )
        relu_rel = float(_rmse(model, x_test, target(x_test))) / std
        rec.metric(f"fk{k}_relunet_2hidden_w{width}_rel_rmse", relu_rel)
        reach = [d for d, v in sorted(row.items()) if v <= 1e-2]
        rec.metric(f"fk{k}_smallest_icnn_depth_rel_rmse_le_1e-2", reach[0] if reach else None)
        sep[k] = (row, relu_rel)

    # claims on the first n
    icnn = results[("icnn", n0)]
    w_lo, w_hi = min(cfg["widths"]), max(cfg["widths"])
    # Trained enough to compare depths: the fits are far ahead of a constant predictor, and the
    # unconstrained ReLU net (which can represent MAX_n) fits it closely.
    const = results[("const_rmse", n0)]
    icnn_ratio = min(v[0] for v in icnn.values()) / const
    relu_ratio = results[("relu", n0)][0] / const
    rec.claim("icnn_learned", "best ICNN RMSE / constant-predictor RMSE", icnn_ratio, "<=", 0.3)
    rec.claim("relunet_learned", "ReLU net RMSE / constant-predictor RMSE", relu_ratio, "<=", 0.3)
    rec.claim(
        "depth2_width_saturation",
        f"depth-2 ICNN RMSE on MAX_{n0} does not improve with width: RMSE(w{w_hi}) / RMSE(w{w_lo})",
        icnn[(w_hi, 2)][0] / icnn[(w_lo, 2)][0],
        ">=",
        0.8,
    )
    rec.claim(
        "depth_n_vs_depth2",
        f"ICNN width {w_hi}: RMSE(depth {n0}) / RMSE(depth 2)",
        icnn[(w_hi, n0)][0] / icnn[(w_hi, 2)][0],
        "<=",
        0.6,
    )
    plus = results[("plus", n0)]
    rec.claim(
        "reluplus_corner_floor",
        "min over ReLU+ depths of max |N - MAX_n| at {0, e1, e2, e1+e2} (Cor. A2: >= 1/4)",
        min(v[2] for v in plus.values()),
        ">=",
        0.25,
    )
    rec.claim(
        "reluplus_rmse_floor",
        "min over ReLU+ depths of test RMSE on [-1,1]^n",
        min(v[0] for v in plus.values()),
        ">=",
        0.15,
    )
    rec.claim(
        "icnn_max_exact",
        f"icnn_max_exact({n0}) max relative error (depth {n0})",
        results[("icnn_max_exact", n0)],
        "<=",
        1e-5,
    )
    rec.claim(
        "relu_max_tree",
        f"relu_max_tree({n0}) max relative error",
        results[("relu_max_tree", n0)],
        "<=",
        1e-5,
    )
    rec.note(
        "Plain Adam does not reach the exact depth-n ICNN (error stays > 0); the d < n vs "
        "d = n contrast is a trend, the exact solution's basin is checked in the tests."
    )
    rec.note(
        "Root cause of depth_n_vs_depth2 = 0.99 in the old quick recipe (issue 26): optimisation "
        "budget, not representability. icnn_max_exact(4) has RMSE 0 at depth 4, and the trained "
        "depth-4 ICNN keeps improving with steps while depth 2 saturates at RMSE ~0.068. "
        "Standalone ablation (width 64, 2 seeds, batch 256, cosine Adam; RMSE on U[-1,1]^4): "
        "| recipe | depth 2 | depth 4 | ratio | "
        "| lr 3e-3, 1000 steps (old quick) | 0.117 | 0.090 | 0.77 | "
        "| + bias centring (center_biases) | 0.117 | 0.091 | 0.77 | "
        "| lr 1e-3, 4000 | 0.098 | 0.068 | 0.69 | "
        "| lr 3e-3, 4000 | 0.070 | 0.038 | 0.55 | "
        "| lr 3e-3, 8000 | 0.068 | 0.018 | 0.27 | "
        "| lr 1e-2, 2000 | 0.069 | 0.031 | 0.45 | "
        "| lr 1e-2, 3000 (new quick) | 0.068 | 0.021 | 0.31 | "
        "| lr 1e-2, 4000 | 0.068 | 0.013 | 0.19 |. "
        "Initialisation (data-dependent bias centring) changes nothing at this size; the learning "
        "rate and step count do. fit_on_box has no default optimiser, so the fix is the "
        "benchmark's recipe."
    )
    rec.note(
        "f_k (triangular-lattice candidate) is a jaxgen choice, not the paper's "
        "family; its ICNN-depth growth is reported, not claimed."
    )
    rec.metric("wall_before_plots_s", time.perf_counter() - t_start)

    with rec.figure("max_error_vs_depth", ncols=2, figsize=(10, 4)) as (fig, axes):
        for j, (idx, label) in enumerate([(0, "test RMSE"), (1, "sup error (ascent)")]):
            ax = axes[j]
            for width in cfg["widths"]:
                ds = sorted(d for (w, d) in icnn if w == width)
                ax.plot(ds, [icnn[(width, d)][idx] for d in ds], "o-", label=f"ICNN w{width}")
            ds = sorted(plus)
            ax.plot(ds, [plus[d][idx] for d in ds], "s--", label=f"ReLU+ w{cfg['relu_plus_width']}")
            ax.plot(
                [3],
                [results[("relu", n0)][idx]],
                "k*",
                ms=12,
                label=f"ReLU net w{cfg['relu_width']}",
            )
            ax.axvline(n0, color="grey", ls=":", lw=1)
            ax.set_yscale("log")
            ax.set_xlabel("depth (= hidden layers + 1)")
            ax.set_ylabel(label)
            ax.set_title(f"fitting MAX_{n0} on [-1,1]^{n0}: {label}")
            ax.legend(fontsize=8)
    with rec.figure("fk_separation", ncols=1, figsize=(6, 4)) as (fig, ax):
        for k, (row, relu_rel) in sep.items():
            ds = sorted(row)
            line = ax.plot(ds, [row[d] for d in ds], "o-", label=f"ICNN, k={k}")[0]
            ax.axhline(
                relu_rel,
                color=line.get_color(),
                ls="--",
                label=f"ReLU 2 hidden w{8 * (k + 1) ** 2}, k={k}",
            )
        ax.axhline(1e-2, color="grey", ls=":", lw=1)
        ax.set_yscale("log")
        ax.set_xlabel("ICNN depth")
        ax.set_ylabel("RMSE / std(f_k)")
        ax.set_title("f_k separation candidate (rescaled to [-1,1]^2)")
        ax.legend(fontsize=7)
