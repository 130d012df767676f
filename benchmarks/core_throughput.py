"""Throughput of jaxgen's training loop and solver layer against hand-written JAX and a flax peer.

(1) Training steps per second on the same step (batch draw, loss, gradient, optax update) of
an MLP regression and of the `cofrgenet_lm` quick-size causal `jaxgen.nn.Transformer`:
`jaxgen.core.fit` with one step per compiled call, `fit` with chunked steps, a hand-written
``lax.scan`` over the same step (the plain-JAX floor), and, for the MLP, the usual flax loop (a
linen ``TrainState`` stepped by a jitted function from Python).
(2) Overhead of `jaxgen.core.solve_ode` / `solve_sde` against a bare `diffrax.diffeqsolve` of the
same problem (both jitted; the wrappers must add nothing to the compiled program).
"""

import time

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import lineax as lx
import numpy as np
import optax

from jaxgen.core import fit, solve_ode, solve_sde
from jaxgen.nn import Transformer
from jaxgen.transformers import lm_loss

NAME = "core_throughput"
PAPER = "jaxgen infrastructure: chunked training steps and the diffrax solver layer (issue 27)"
CONFIGS = {
    "quick": {
        "mlp_in": 8,
        "mlp_width": 64,
        "mlp_depth": 3,
        "mlp_batch": 256,
        "mlp_steps": 2000,
        "mlp_steps_k1": 400,
        "lm_dim": 32,
        "lm_layers": 2,
        "lm_heads": 2,
        "lm_context": 32,
        "lm_batch": 16,
        "lm_steps": 300,
        "lm_steps_k1": 100,
        "chunk": 500,
        "repeats": 3,
        "ode_batch": 4096,
        "sde_steps": 200,
        "solver_repeats": 15,
    },
    "full": {
        "mlp_in": 32,
        "mlp_width": 256,
        "mlp_depth": 3,
        "mlp_batch": 1024,
        "mlp_steps": 20000,
        "mlp_steps_k1": 2000,
        "lm_dim": 256,
        "lm_layers": 6,
        "lm_heads": 8,
        "lm_context": 256,
        "lm_batch": 64,
        "lm_steps": 2000,
        "lm_steps_k1": 300,
        "chunk": 1000,
        "repeats": 5,
        "ode_batch": 4096,
        "sde_steps": 1000,
        "solver_repeats": 31,
    },
}

# --full --smoke: the full configuration's code path, every size cut to the least that runs.
SMOKE = {
    "mlp_in": 4,
    "mlp_width": 8,
    "mlp_depth": 1,
    "mlp_batch": 8,
    "mlp_steps": 20,
    "mlp_steps_k1": 5,
    "lm_dim": 16,
    "lm_layers": 1,
    "lm_heads": 2,
    "lm_context": 8,
    "lm_batch": 2,
    "lm_steps": 6,
    "lm_steps_k1": 3,
    "chunk": 4,
    "repeats": 1,
    "ode_batch": 8,
    "sde_steps": 5,
    "solver_repeats": 1,
}


# --- the training problems (module level: `fit` reuses its compiled chunk across calls) ------


def _mlp_loss(model, batch, key):
    del key
    x, y = batch
    return jnp.mean((jax.vmap(model)(x)[:, 0] - y) ** 2)


def _mlp_sampler(batch_size: int, dim: int):
    weights = jnp.linspace(-1.0, 1.0, dim)

    def sample(key):
        x = jr.normal(key, (batch_size, dim))
        return x, jnp.sin(x @ weights)

    return sample


def _lm_sampler(stream: jax.Array, batch_size: int, context: int):
    def sample(key):
        starts = jr.randint(key, (batch_size,), 0, stream.shape[0] - context - 1)
        return jax.vmap(lambda s: jax.lax.dynamic_slice(stream, (s,), (context + 1,)))(starts)

    return sample


def _scan_train(loss_fn, sampler, optimizer, num_steps):
    """The plain-JAX floor: the same step inside one hand-written ``lax.scan``."""

    @eqx.filter_jit
    def run(params, static, opt_state, key):
        def body(carry, step):
            params, opt_state = carry
            batch_key, loss_key = jr.split(jr.fold_in(key, step))
            batch = sampler(batch_key)

            def loss(p):
                return loss_fn(eqx.combine(p, static), batch, loss_key)

            value, grads = jax.value_and_grad(loss)(params)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), value

        (params, opt_state), losses = jax.lax.scan(body, (params, opt_state), jnp.arange(num_steps))
        return params, opt_state, losses

    return run


def _steps_per_s(fn, num_steps: int, repeats: int) -> tuple[float, float]:
    """(steps/s from the median of ``repeats`` timed calls, first call s incl. compile)."""
    t0 = time.perf_counter()
    jax.block_until_ready(fn())
    first = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t0)
    return num_steps / float(np.median(times)), first


def _train_rows(name, model, loss_fn, sampler, cfg, steps, steps_k1, key, rec):
    optimizer = optax.adam(1e-3)
    repeats = cfg["repeats"]
    row = {}

    def run_fit(k, n):
        return lambda: (
            fit(
                loss_fn,
                model,
                sampler,
                optimizer,
                num_steps=n,
                key=key,
                steps_per_call=k,
                progress=False,
            ).losses
        )

    row["fit_k1_steps_per_s"], row["fit_k1_first_s"] = _steps_per_s(
        run_fit(1, steps_k1), steps_k1, repeats
    )
    row["fit_chunked_steps_per_s"], row["fit_chunked_first_s"] = _steps_per_s(
        run_fit(cfg["chunk"], steps), steps, repeats
    )
    params, static = eqx.partition(model, eqx.is_inexact_array)
    opt_state = optimizer.init(params)
    scan = _scan_train(loss_fn, sampler, optimizer, steps)
    row["scan_steps_per_s"], row["scan_first_s"] = _steps_per_s(
        lambda: scan(params, static, opt_state, key)[2], steps, repeats
    )
    # Same losses: the scan floor and chunked fit take the same steps (fold_in(key, step)).
    fit_losses = run_fit(cfg["chunk"], steps)()
    scan_losses = np.asarray(scan(params, static, opt_state, key)[2])
    row["max_rel_loss_diff_fit_vs_scan"] = float(
        np.max(np.abs(fit_losses - scan_losses) / np.maximum(np.abs(scan_losses), 1e-12))
    )
    row["chunked_over_k1"] = row["fit_chunked_steps_per_s"] / row["fit_k1_steps_per_s"]
    row["chunked_over_scan"] = row["fit_chunked_steps_per_s"] / row["scan_steps_per_s"]
    for k, v in row.items():
        rec.metric(f"{name}_{k}", v)
    return row


def _flax_peer(cfg, key, rec):
    try:
        import flax.linen as nn
        from flax.training import train_state
    except Exception:  # noqa: BLE001 - any import failure means the peer is unavailable
        return "not installed"

    class MLP(nn.Module):
        width: int
        depth: int

        @nn.compact
        def __call__(self, x):
            for _ in range(self.depth):
                x = jax.nn.silu(nn.Dense(self.width)(x))
            return nn.Dense(1)(x)

    sampler = _mlp_sampler(cfg["mlp_batch"], cfg["mlp_in"])
    net = MLP(cfg["mlp_width"], cfg["mlp_depth"])
    params = net.init(jr.PRNGKey(0), jnp.zeros((1, cfg["mlp_in"])))
    state = train_state.TrainState.create(apply_fn=net.apply, params=params, tx=optax.adam(1e-3))

    @jax.jit
    def step(state, key, i):
        x, y = sampler(jr.split(jr.fold_in(key, i))[0])

        def loss(p):
            return jnp.mean((state.apply_fn(p, x)[:, 0] - y) ** 2)

        value, grads = jax.value_and_grad(loss)(state.params)
        return state.apply_gradients(grads=grads), value

    base_key = jr.key_data(key)
    n = cfg["mlp_steps_k1"]

    def loop():
        s, losses = state, []
        for i in range(n):
            s, value = step(s, base_key, i)
            losses.append(value)
        return losses[-1]

    steps_per_s, first = _steps_per_s(loop, n, cfg["repeats"])
    return {"steps_per_s": steps_per_s, "first_call_s": first, "loop": "python + jit(step)"}


# --- solver layer ---------------------------------------------------------------------------


def _vector_field(t, y, args):
    return -y + jnp.sin(3.0 * t) * y[..., ::-1]


def _drift(t, y, args):
    return -y


def _diffusion(t, y, args):
    return 0.5 * jnp.ones_like(y)


def _interleaved_ratio(fn_ours, fn_bare, repeats: int) -> tuple[float, float, float]:
    """Median times of two jitted calls timed alternately (shared CPU noise hits both)."""
    jax.block_until_ready(fn_ours())
    jax.block_until_ready(fn_bare())
    ours, bare = [], []
    for _ in range(repeats):
        for fn, out in ((fn_ours, ours), (fn_bare, bare)):
            t0 = time.perf_counter()
            jax.block_until_ready(fn())
            out.append(time.perf_counter() - t0)
    m_ours, m_bare = float(np.median(ours)), float(np.median(bare))
    return m_ours, m_bare, m_ours / m_bare


def _solver_rows(cfg, key, rec):
    y0 = jr.normal(key, (cfg["ode_batch"], 2))
    ours_ode = jax.jit(lambda y: solve_ode(_vector_field, y, rtol=1e-8, atol=1e-8).ys)
    bare_ode = jax.jit(
        lambda y: (
            dfx.diffeqsolve(
                dfx.ODETerm(_vector_field),
                dfx.Tsit5(),
                0.0,
                1.0,
                None,
                y,
                None,
                saveat=dfx.SaveAt(t1=True),
                stepsize_controller=dfx.PIDController(rtol=1e-8, atol=1e-8),
                max_steps=4096,
                adjoint=dfx.RecursiveCheckpointAdjoint(),
            ).ys
        )
    )
    np.testing.assert_allclose(ours_ode(y0), bare_ode(y0), rtol=1e-12, atol=1e-12)
    t_ours, t_bare, ode_ratio = _interleaved_ratio(
        lambda: ours_ode(y0), lambda: bare_ode(y0), cfg["solver_repeats"]
    )
    rec.metric("ode_solve_ode_s", t_ours)
    rec.metric("ode_bare_diffrax_s", t_bare)
    rec.metric("ode_overhead_ratio", ode_ratio)

    steps = cfg["sde_steps"]
    y1 = y0.reshape(-1)
    sde_key = jr.fold_in(key, 1)
    ours_sde = jax.jit(lambda y, k: solve_sde(_drift, _diffusion, y, key=k, steps=steps).ys)

    def bare(y, k):
        dt = 1.0 / steps
        bm = dfx.VirtualBrownianTree(
            0.0, 1.0, tol=dt / 4, shape=jax.ShapeDtypeStruct(y.shape, y.dtype), key=k
        )

        def control(t, y, args):
            return lx.DiagonalLinearOperator(_diffusion(t, y, args))

        terms = dfx.MultiTerm(dfx.ODETerm(_drift), dfx.ControlTerm(control, bm))
        return dfx.diffeqsolve(
            terms,
            dfx.Euler(),
            0.0,
            1.0,
            dt,
            y,
            None,
            saveat=dfx.SaveAt(t1=True),
            stepsize_controller=dfx.ConstantStepSize(),
            max_steps=steps,
            adjoint=dfx.RecursiveCheckpointAdjoint(),
        ).ys

    bare_sde = jax.jit(bare)
    np.testing.assert_allclose(ours_sde(y1, sde_key), bare_sde(y1, sde_key), rtol=1e-12)
    t_ours, t_bare, sde_ratio = _interleaved_ratio(
        lambda: ours_sde(y1, sde_key), lambda: bare_sde(y1, sde_key), cfg["solver_repeats"]
    )
    rec.metric("sde_solve_sde_s", t_ours)
    rec.metric("sde_bare_diffrax_s", t_bare)
    rec.metric("sde_overhead_ratio", sde_ratio)
    return ode_ratio, sde_ratio


def run(config, key, rec):
    cfg = config
    mlp_key, lm_key, data_key, solver_key, fit_key = jr.split(key, 5)
    mlp = eqx.nn.MLP(cfg["mlp_in"], 1, cfg["mlp_width"], cfg["mlp_depth"], jax.nn.silu, key=mlp_key)
    mlp_sampler = _mlp_sampler(cfg["mlp_batch"], cfg["mlp_in"])
    mlp_row = _train_rows(
        "mlp", mlp, _mlp_loss, mlp_sampler, cfg, cfg["mlp_steps"], cfg["mlp_steps_k1"], fit_key, rec
    )
    # Trained enough to be a meaningful step: the loss falls well below its starting value.
    final = fit(
        _mlp_loss,
        mlp,
        mlp_sampler,
        optax.adam(1e-3),
        num_steps=cfg["mlp_steps"],
        key=fit_key,
        steps_per_call=cfg["chunk"],
        progress=False,
    ).losses
    learned = float(np.mean(final[-100:]) / np.mean(final[:10]))
    rec.claim("mlp_learned", "MLP loss, last 100 steps / first 10 steps", learned, "<=", 0.5)

    stream = jr.randint(data_key, (200_000,), 0, 256)
    lm = Transformer(
        256,
        cfg["lm_dim"],
        cfg["lm_layers"],
        cfg["lm_heads"],
        cfg["lm_context"],
        key=lm_key,
        mixer="mlp",
    )
    lm_sampler = _lm_sampler(stream, cfg["lm_batch"], cfg["lm_context"])
    lm_row = _train_rows(
        "transformer",
        lm,
        lm_loss,
        lm_sampler,
        cfg,
        cfg["lm_steps"],
        cfg["lm_steps_k1"],
        fit_key,
        rec,
    )

    peer = _flax_peer(cfg, fit_key, rec)
    rec.peer("flax.linen TrainState (python loop of a jitted step), same MLP", peer)
    if isinstance(peer, dict):
        rec.metric(
            "mlp_chunked_over_flax_loop", mlp_row["fit_chunked_steps_per_s"] / peer["steps_per_s"]
        )

    ode_ratio, sde_ratio = _solver_rows(cfg, solver_key, rec)

    rec.claim(
        "mlp_chunked_vs_scan",
        "MLP: chunked fit steps/s / hand-written lax.scan steps/s",
        mlp_row["chunked_over_scan"],
        ">=",
        0.9,
    )
    rec.claim(
        "transformer_chunked_vs_scan",
        "Transformer LM: chunked fit steps/s / hand-written lax.scan steps/s",
        lm_row["chunked_over_scan"],
        ">=",
        0.9,
    )
    rec.claim(
        "mlp_chunked_vs_k1",
        "MLP: chunked fit steps/s / fit with steps_per_call=1",
        mlp_row["chunked_over_k1"],
        ">=",
        1.5,
    )
    rec.claim(
        "fit_equals_scan",
        "max relative loss difference, chunked fit vs scan (MLP)",
        mlp_row["max_rel_loss_diff_fit_vs_scan"],
        "<=",
        1e-4,
    )
    rec.claim(
        "solve_ode_overhead",
        "solve_ode time / bare diffrax.diffeqsolve time",
        ode_ratio,
        "<=",
        1.05,
    )
    rec.claim(
        "solve_sde_overhead",
        "solve_sde time / bare diffrax.diffeqsolve time",
        sde_ratio,
        "<=",
        1.05,
    )

    with rec.figure("steps_per_s") as (_, ax):
        labels = ["fit K=1", f"fit K={cfg['chunk']}", "lax.scan"]
        x = np.arange(len(labels))
        for offset, (name, row) in zip(
            (-0.2, 0.2), (("MLP", mlp_row), ("Transformer", lm_row)), strict=True
        ):
            vals = [
                row["fit_k1_steps_per_s"],
                row["fit_chunked_steps_per_s"],
                row["scan_steps_per_s"],
            ]
            ax.bar(x + offset, vals, width=0.4, label=name)
        if isinstance(peer, dict):
            ax.axhline(peer["steps_per_s"], color="k", ls="--", label="flax loop (MLP)")
        ax.set_xticks(x, labels)
        ax.set_yscale("log")
        ax.set_ylabel("training steps / s")
        ax.set_title("Training throughput (same step)")
        ax.legend()
    rec.note(
        "All loops take the same steps (batch from fold_in(key, step), same loss, same optax "
        "update); fit's chunk length is traced, so the K=1 and chunked runs each compile once."
    )
