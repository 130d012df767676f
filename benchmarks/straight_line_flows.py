"""Straight-line flows: one Euler step is exact for the Gaussian construction, not for the
linear interpolant; learned fields inherit the gap; separated modes obstruct every process.

Panels: (a) W2 to the target vs Euler steps for the exact fields (closed-form W2 of the affine
pushforward); (b) the same two processes learned by flow matching with `jaxgen.core.fit` (W2 of
the moment-matched pushforward, straightness); (c) the bimodal obstruction, W1 after 1 and 4 Euler
steps vs the mode separation. Peer: torchcfm's independent and mini-batch-OT flow matchers on the
same data, with the same MLP and budget.
"""

import functools as ft
import time

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from benchmarks._peers import (
    cosine,
    import_torchcfm,
    torch_euler,
    torch_mlp,
    torch_threads,
    torchcfm_train,
)
from jaxgen.core import adamw_cosine, fit, solve_ode
from jaxgen.flows import (
    GaussianStraightProcess,
    LinearInterpolant,
    MLPVelocityField,
    euler_pushforward,
    flow_matching_loss,
    one_step_obstruction_w1,
    straightness,
)
from jaxgen.metrics import empirical_gaussian_w2, gaussian_w2

NAME = "straight_line_flows"
PAPER = "One-Shot Generative Flows: Existence and Obstructions (Tsimpos, Sharp, Marzouk)"
CONFIGS = {
    "quick": {
        "dims": [2, 8],
        "steps": [1, 2, 4, 8, 16, 32, 64],
        "learn_dim": 2,
        "train_steps": 1500,
        "batch": 256,
        "width": 64,
        "depth": 3,
        "eval_samples": 4000,
        "separations": [0.0, 0.5, 1.0, 2.0, 3.0, 4.0],
        "quantiles": 20000,
    },
    "full": {
        "dims": [2, 8, 32, 64],
        "steps": [1, 2, 4, 8, 16, 32, 64],
        "learn_dim": 8,
        "train_steps": 20000,
        "batch": 1024,
        "width": 256,
        "depth": 3,
        "eval_samples": 100000,
        "separations": [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0],
        "quantiles": 200000,
    },
}

# --full --smoke: the full configuration's code path, every size cut to the least that runs.
SMOKE = {
    "dims": [2, 8],
    "steps": [1, 2],
    "learn_dim": 2,
    "train_steps": 5,
    "batch": 16,
    "width": 8,
    "depth": 1,
    "eval_samples": 256,
    "separations": [0.0, 1.0],
    "quantiles": 1000,
}


def random_gaussian_pair(key, dim):
    k = jr.split(key, 4)
    a, b = jr.normal(k[0], (dim, dim)), jr.normal(k[1], (dim, dim))
    return (
        jr.normal(k[2], (dim,)),
        a @ a.T / dim + 0.3 * jnp.eye(dim),
        jr.normal(k[3], (dim,)),
        b @ b.T / dim + 0.3 * jnp.eye(dim),
    )


@ft.partial(jax.jit, static_argnums=(2,))
def affine_pushforward_w2(field, endpoints, num_steps):
    """Exact W2 of the K-step Euler pushforward of N(m0, S0) when the field is affine in x."""
    m0, s0, m1, s1 = endpoints
    dim = m0.shape[0]
    points = jnp.concatenate([m0[None, :], m0[None, :] + jnp.eye(dim)], axis=0)
    pushed = jax.vmap(lambda x: euler_pushforward(field, x, num_steps))(points)
    matrix = (pushed[1:] - pushed[:1]).T
    return gaussian_w2(pushed[0], matrix @ s0 @ matrix.T, m1, s1)


def pair_sampler(endpoints, batch_size):
    m0, s0, m1, s1 = endpoints
    c0, c1 = jnp.linalg.cholesky(s0), jnp.linalg.cholesky(s1)

    def sample(key):
        k0, k1 = jr.split(key)
        return (
            m0[None, :] + jr.normal(k0, (batch_size, m0.shape[0])) @ c0.T,
            m1[None, :] + jr.normal(k1, (batch_size, m0.shape[0])) @ c1.T,
        )

    return sample


@ft.partial(eqx.filter_jit)
def evaluate_learned(model, x0, num_steps):
    ends = jax.vmap(lambda x: euler_pushforward(model, x, num_steps))(x0)
    return ends


def torchcfm_peer(config, endpoints, x0_eval, steps):
    """Train torchcfm's CFM and OT-CFM with a torch MLP of the same size; Euler-K W2
    (`benchmarks._peers`).
    """
    mods = import_torchcfm()
    if mods is None:
        return "not installed"
    torch, cfm = mods
    m0, s0, m1, s1 = (np.asarray(a) for a in endpoints)
    dim = m0.shape[0]
    rng = np.random.default_rng(0)

    def draw(step):
        x0 = torch.from_numpy(rng.multivariate_normal(m0, s0, config["batch"]))
        x1 = torch.from_numpy(rng.multivariate_normal(m1, s1, config["batch"]))
        return x0, x1, None

    results = {}
    with torch_threads(torch.get_num_threads()):
        for label, matcher in (
            ("cfm", cfm.ConditionalFlowMatcher(sigma=0.0)),
            ("ot_cfm", cfm.ExactOptimalTransportConditionalFlowMatcher(sigma=0.0)),
        ):
            net = torch_mlp(dim + 1, dim, config["width"], config["depth"], double=True)
            times = torchcfm_train(
                net,
                matcher,
                draw,
                config["train_steps"],
                lr=1e-3,
                schedule=cosine(config["train_steps"]),
            )
            w2 = {}
            for k in steps:
                x = torch_euler(net, torch.from_numpy(np.array(x0_eval, dtype=np.float64)), k)
                w2[k] = float(
                    empirical_gaussian_w2(jnp.asarray(x.numpy()), jnp.asarray(m1), jnp.asarray(s1))
                )
            results[label] = {"train_s": sum(times), "w2_by_steps": w2}
    return results


def learn_fields(config, key_gauss, key_learn, key_eval):
    """Part (b): the straight and linear fields learned by flow matching at ``learn_dim``.

    Returns the Gaussian endpoints, the evaluation sources, per-label figures and loss curves.
    """
    dim, steps = config["learn_dim"], config["steps"]
    endpoints = random_gaussian_pair(jr.fold_in(key_gauss, 1000 + dim), dim)
    process = GaussianStraightProcess(*endpoints)
    x0_eval = (
        endpoints[0][None, :]
        + jr.normal(key_eval, (config["eval_samples"], dim)) @ jnp.linalg.cholesky(endpoints[1]).T
    )
    learned = {}
    curves = {}
    for label, interpolant in (
        ("straight", process.interpolant()),
        ("linear", LinearInterpolant()),
    ):
        model_key, fit_key = jr.split(jr.fold_in(key_learn, len(learned)))
        model = MLPVelocityField(dim, config["width"], config["depth"], key=model_key)
        start = time.perf_counter()
        result = fit(
            ft.partial(flow_matching_loss, interpolant=interpolant),
            model,
            pair_sampler(endpoints, config["batch"]),
            adamw_cosine(1e-3, config["train_steps"]),
            num_steps=config["train_steps"],
            key=fit_key,
        )
        train_s = time.perf_counter() - start
        w2 = {
            k: float(
                empirical_gaussian_w2(
                    evaluate_learned(result.model, x0_eval, k), endpoints[2], endpoints[3]
                )
            )
            for k in steps
        }
        straight = float(
            jnp.mean(
                eqx.filter_jit(eqx.filter_vmap(straightness, in_axes=(None, 0, None)))(
                    result.model, x0_eval[:512], 16
                )
            )
        )
        learned[label] = {
            "train_s": train_s,
            "w2_by_steps": w2,
            "straightness": straight,
            "final_loss": float(np.mean(result.losses[-50:])),
        }
        curves[label] = result.losses
    return endpoints, x0_eval, learned, curves


def run(config, key, rec):
    key_gauss, key_learn, key_eval = jr.split(key, 3)
    steps = config["steps"]

    # (a) exact fields, in float64: W2 takes a square root of a trace, so float32 round-off of
    # 1e-7 in the covariances shows as ~1e-3 in W2 and would hide the exactness being measured.
    exact = {}
    with jax.enable_x64(True):
        for dim in config["dims"]:
            endpoints = jax.tree.map(
                lambda a: a.astype(jnp.float64),
                random_gaussian_pair(jr.fold_in(key_gauss, dim), dim),
            )
            process = GaussianStraightProcess(*endpoints)
            linear = LinearInterpolant().gaussian_velocity(*endpoints)
            exact[dim] = {
                "straight": [
                    float(affine_pushforward_w2(process.velocity, endpoints, k)) for k in steps
                ],
                "linear": [float(affine_pushforward_w2(linear, endpoints, k)) for k in steps],
                "sqrt_tr_s1": float(jnp.sqrt(jnp.trace(endpoints[3]))),
            }
    rec.metric("exact_w2_by_steps", {str(d): v for d, v in exact.items()})
    worst_straight = max(max(v["straight"]) for v in exact.values())
    collapse_err = max(
        abs(v["linear"][0] - v["sqrt_tr_s1"]) / v["sqrt_tr_s1"] for v in exact.values()
    )
    rec.claim(
        "exact_straight_one_step",
        "exact straight-line field: W2 after K Euler steps (max over d and K, float64)",
        worst_straight,
        "<",
        1e-6,
    )
    rec.claim(
        "linear_one_step_collapse",
        "linear interpolant Euler-1 W2 = sqrt(tr S1) (relative error)",
        collapse_err,
        "<",
        1e-8,
    )

    # timing: one Euler step vs adaptive Tsit5 on the same exact straight field
    dim = config["dims"][-1]
    endpoints = random_gaussian_pair(jr.fold_in(key_gauss, dim), dim)
    process = GaussianStraightProcess(*endpoints)
    x0 = (
        endpoints[0][None, :]
        + jr.normal(key_eval, (config["eval_samples"], dim)) @ jnp.linalg.cholesky(endpoints[1]).T
    )
    one_step = jax.jit(jax.vmap(lambda x: euler_pushforward(process.velocity, x, 1)))
    adaptive = jax.jit(
        jax.vmap(
            lambda x: solve_ode(process.velocity, x, solver=dfx.Tsit5(), rtol=1e-6, atol=1e-6).ys[
                -1
            ]
        )
    )
    t_one, t_adapt = rec.time(one_step, x0), rec.time(adaptive, x0)
    err = float(jnp.max(jnp.abs(one_step(x0) - adaptive(x0))))
    rec.metric(
        "timing_euler1_vs_tsit5",
        {
            "euler1": t_one,
            "tsit5": t_adapt,
            "speedup": t_adapt["median_s"] / t_one["median_s"],
            "max_abs_diff": err,
            "dim": dim,
        },
    )

    # (b) learned fields
    endpoints, x0_eval, learned, curves = learn_fields(config, key_gauss, key_learn, key_eval)
    rec.metric("learned", learned)
    # Trained enough to compare: each learned field, integrated finely, moves the source most of
    # the way to the target (trivial baseline: not moving, W2(source, target)).
    w2_none = float(gaussian_w2(*endpoints))
    rec.metric("w2_source_target", w2_none)
    fine = {label: learned[label]["w2_by_steps"][max(steps)] / w2_none for label in learned}
    what = f"W2(Euler-{max(steps)} samples, target) / W2(source, target)"
    rec.claim(
        "straight_field_learned", f"learned straight field: {what}", fine["straight"], "<=", 0.2
    )
    rec.claim("linear_field_learned", f"learned linear field: {what}", fine["linear"], "<=", 0.2)
    rec.claim(
        "learned_straight_beats_linear_1_step",
        "learned straight-line field Euler-1 W2 / learned linear interpolant Euler-1 W2",
        learned["straight"]["w2_by_steps"][1] / learned["linear"]["w2_by_steps"][1],
        "<",
        1.0,
    )

    peer = torchcfm_peer(config, endpoints, x0_eval, steps)
    rec.peer("torchcfm", peer)

    # (c) obstruction
    obstruction = {
        p: {
            k: [
                float(
                    one_step_obstruction_w1(
                        mu, process=p, num_steps=k, num_quantiles=config["quantiles"]
                    )
                )
                for mu in config["separations"]
            ]
            for k in (1, 4)
        }
        for p in ("linear", "straight")
    }
    rec.metric("obstruction_w1", {"separations": config["separations"], **obstruction})
    mu_max = config["separations"][-1]
    rec.claim(
        "obstruction_one_step",
        f"Euler-1 W1 / separation at mu = {mu_max}, min over both "
        "independent-endpoint processes (theory: grows like mu)",
        min(obstruction[p][1][-1] for p in obstruction) / mu_max,
        ">=",
        0.75,
    )

    with rec.figure("w2_vs_steps", ncols=2, figsize=(11, 4)) as (fig, axes):
        for dim, v in exact.items():
            axes[0].loglog(steps, np.maximum(v["linear"], 1e-16), "o-", label=f"linear, d={dim}")
            axes[0].loglog(
                steps,
                np.maximum(v["straight"], 1e-16),
                "s--",
                label=f"straight construction, d={dim}",
            )
        axes[0].set(
            title="exact fields: W2 after K Euler steps",
            xlabel="Euler steps K",
            ylabel="W2 to target",
        )
        for label, v in learned.items():
            axes[1].loglog(
                steps, [v["w2_by_steps"][k] for k in steps], "o-", label=f"learned {label} (jaxgen)"
            )
        if isinstance(peer, dict):
            for label, v in peer.items():
                axes[1].loglog(
                    steps, [v["w2_by_steps"][k] for k in steps], "^:", label=f"torchcfm {label}"
                )
        axes[1].set(
            title=f"learned fields (d={config['learn_dim']})",
            xlabel="Euler steps K",
            ylabel="W2 (moment-matched)",
        )
        for ax in axes:
            ax.legend(fontsize=7)
    with rec.figure("obstruction", ncols=2, figsize=(11, 4)) as (fig, axes):
        for p, by_k in obstruction.items():
            for k, vals in by_k.items():
                axes[0].plot(config["separations"], vals, "o-", label=f"{p}, {k} Euler step(s)")
        axes[0].plot(config["separations"], config["separations"], "k:", label="W1 = mu")
        axes[0].set(
            title="bimodal target: W1 vs mode separation",
            xlabel="separation mu",
            ylabel="W1 to target",
        )
        axes[0].legend(fontsize=7)
        for label, losses in curves.items():
            axes[1].semilogy(losses, label=label)
        axes[1].set(title="flow-matching loss", xlabel="step", ylabel="loss")
        axes[1].legend()


def plan_stage(config, key, rec):
    """`python -m benchmarks plan`: the learned fields (part (b)), the run's only training.

    Part (a)'s float64 pushforwards and its timing at ``--full`` sizes take minutes on a CPU and
    compile nothing that the plan reports.
    """
    key_gauss, key_learn, key_eval = jr.split(key, 3)
    learn_fields(config, key_gauss, key_learn, key_eval)
