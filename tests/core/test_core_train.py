"""fit: convergence, one compilation, checkpoint/resume equality, sharded == single device."""

import os
import subprocess
import sys
import textwrap

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax
import pytest

from jaxgen.core import RESULTS, fit, iterate, latest_checkpoint, make_step, minibatches

TRUE_W = jnp.array([1.5, -2.0, 0.5])


class Linear(eqx.Module):
    weight: jax.Array

    def __call__(self, x):
        return x @ self.weight


def squared_loss(model, batch, key):
    x, y = batch
    return jnp.mean((jax.vmap(model)(x) - y) ** 2)


def regression_sampler(batch_size):
    def sample(key):
        x = jr.normal(key, (batch_size, 3))
        return x, x @ TRUE_W

    return sample


def test_fit_converges_and_compiles_once(getkey):
    model = Linear(jnp.zeros(3))
    optimizer = optax.adam(0.05)
    counted = eqx.filter_jit(eqx.debug.assert_max_traces(make_step, max_traces=1))
    opt_state = optimizer.init(model)
    for _ in range(3):
        model_, opt_state, _ = counted(
            model,
            opt_state,
            regression_sampler(8)(getkey()),
            getkey(),
            loss_fn=squared_loss,
            optimizer=optimizer,
        )
    result = fit(
        squared_loss,
        model,
        regression_sampler(16),
        optimizer,
        num_steps=300,
        key=getkey(),
        progress=False,
    )
    np.testing.assert_allclose(result.model.weight, TRUE_W, atol=1e-2)
    assert result.losses.shape == (300,) and result.resumed_from == 0


def test_checkpoint_resume_equals_uninterrupted_run(tmp_path, getkey):
    key, model = getkey(), Linear(jnp.zeros(3))
    data = regression_sampler(4)(getkey())
    batches = minibatches(data, 2)
    optimizer = optax.adam(0.05)
    full = fit(squared_loss, model, batches, optimizer, num_steps=12, key=key, progress=False)
    ckpt = str(tmp_path / "run")
    # "Killed" after step 5 (the run ends there with its checkpoint), then restarted to 12.
    fit(
        squared_loss,
        model,
        batches,
        optimizer,
        num_steps=5,
        key=key,
        checkpoint_dir=ckpt,
        checkpoint_every=5,
        progress=False,
    )
    assert latest_checkpoint(ckpt).endswith("step_00000005")
    resumed = fit(
        squared_loss,
        model,
        batches,
        optimizer,
        num_steps=12,
        key=key,
        checkpoint_dir=ckpt,
        checkpoint_every=5,
        progress=False,
    )
    assert resumed.resumed_from == 5
    np.testing.assert_array_equal(resumed.model.weight, full.model.weight)
    np.testing.assert_array_equal(resumed.losses, full.losses)
    with pytest.raises(ValueError, match="another `key`"):
        fit(
            squared_loss,
            model,
            batches,
            optimizer,
            num_steps=13,
            key=getkey(),
            checkpoint_dir=ckpt,
            progress=False,
        )


def test_fit_bad_input(getkey):
    model = Linear(jnp.zeros(3))
    with pytest.raises(ValueError, match="`num_steps` must be"):
        fit(squared_loss, model, regression_sampler(4), optax.sgd(0.1), num_steps=-1, key=getkey())
    with pytest.raises(TypeError, match="batches"):
        fit(squared_loss, model, np.zeros((4, 3)), optax.sgd(0.1), num_steps=1, key=getkey())
    with pytest.raises(ValueError, match="share its leading axis"):
        minibatches((np.zeros((4, 3)), np.zeros(5)), 2)


def test_iterate_flags():
    halve = lambda s: s / 2  # noqa: E731
    out = iterate(halve, jnp.array(1.0), converged_fn=lambda s: s < 1e-3, max_steps=100)
    assert int(out.num_steps) == 10 and out.result == RESULTS.successful
    out = iterate(halve, jnp.array(1.0), converged_fn=lambda s: s < 1e-3, max_steps=3, throw=False)
    assert out.result == RESULTS.max_steps_reached
    with pytest.raises(Exception, match="reached `max_steps`"):
        iterate(halve, jnp.array(1.0), converged_fn=lambda s: s < 1e-3, max_steps=3)
    with pytest.raises(ValueError, match="`max_steps` must be"):
        iterate(halve, jnp.array(1.0), converged_fn=lambda s: s < 1.0, max_steps=0)


SHARDED_SCRIPT = textwrap.dedent("""
    import jax, jax.numpy as jnp, jax.random as jr, optax, numpy as np
    jax.config.update("jax_enable_x64", True)
    from jaxgen.core import data_mesh, fit
    from tests.core.test_core_train import Linear, squared_loss, regression_sampler
    assert len(jax.devices()) == 4
    args = (squared_loss, Linear(jnp.zeros(3)), regression_sampler(8), optax.adam(0.05))
    one = fit(*args, num_steps=20, key=jr.key(3), progress=False)
    four = fit(*args, num_steps=20, key=jr.key(3), mesh=data_mesh(), progress=False)
    np.testing.assert_allclose(four.losses, one.losses, rtol=1e-5, atol=1e-12)
    print("OK")
""")


def test_data_parallel_fit_matches_single_device():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(
        os.environ,
        XLA_FLAGS="--xla_force_host_platform_device_count=4",
        JAX_PLATFORMS="cpu",
        PYTHONPATH=root,
    )
    proc = subprocess.run(
        [sys.executable, "-c", SHARDED_SCRIPT],
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
        timeout=300,
    )
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr[-2000:]


class MLP(eqx.Module):
    layers: tuple

    def __init__(self, key):
        k1, k2 = jr.split(key)
        self.layers = (eqx.nn.Linear(3, 8, key=k1), eqx.nn.Linear(8, 1, key=k2))

    def __call__(self, x):
        return self.layers[1](jnp.tanh(self.layers[0](x)))[0]


def noisy_loss(model, batch, key):
    """Uses its key (dropout-like noise), so a wrong step key changes the losses."""
    x, y = batch
    noise = 0.1 * jr.normal(key, y.shape)
    return jnp.mean((jax.vmap(model)(x) - y - noise) ** 2)


@pytest.fixture(scope="module")
def mlp_runs():
    model = MLP(jr.key(1))
    optimizer = optax.adam(1e-2)
    runs = {
        k: fit(
            noisy_loss,
            model,
            regression_sampler(16),
            optimizer,
            num_steps=120,
            key=jr.key(2),
            steps_per_call=k,
            progress=False,
        )
        for k in (1, 7, 100)
    }
    return model, optimizer, runs


def test_fit_any_steps_per_call_gives_the_same_run(mlp_runs):
    _, _, runs = mlp_runs
    ref = runs[1]
    assert ref.losses.shape == (120,) and ref.losses[-1] < 0.5 * ref.losses[0]
    for k in (7, 100):
        np.testing.assert_allclose(runs[k].losses, ref.losses, rtol=1e-10)
        for a, b in zip(
            jax.tree_util.tree_leaves(runs[k].model),
            jax.tree_util.tree_leaves(ref.model),
            strict=True,
        ):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-14)


def test_fit_chunked_resume_equals_uninterrupted(mlp_runs, tmp_path):
    model, optimizer, runs = mlp_runs
    ckpt = str(tmp_path / "chunked")
    kwargs = dict(key=jr.key(2), steps_per_call=7, checkpoint_dir=ckpt, progress=False)
    # Killed at step 50 (a checkpoint multiple, not a multiple of 7), then restarted.
    fit(
        noisy_loss,
        model,
        regression_sampler(16),
        optimizer,
        num_steps=50,
        checkpoint_every=25,
        **kwargs,
    )
    resumed = fit(
        noisy_loss,
        model,
        regression_sampler(16),
        optimizer,
        num_steps=120,
        checkpoint_every=25,
        **kwargs,
    )
    assert resumed.resumed_from == 50
    np.testing.assert_allclose(resumed.losses, runs[7].losses, rtol=1e-10)
    assert latest_checkpoint(ckpt).endswith("step_00000120")


def counting_loss(model, batch, key, state, *, step):
    """A carried state (running sum of batch means and a step log) and the step index."""
    total, last_step = state
    loss = squared_loss(model, batch, key)
    return loss, (total + jnp.mean(batch[1]), jnp.asarray(step, last_step.dtype))


def test_fit_threads_state_and_step_and_resumes(tmp_path, getkey):
    key, model = getkey(), Linear(jnp.zeros(3))
    state0 = (jnp.zeros(()), jnp.zeros((), jnp.int32))
    sampler = regression_sampler(4)
    evals = []

    def callback(step, m, s):
        evals.append(step)
        return {"total": float(s[0])}

    full = fit(
        counting_loss,
        model,
        sampler,
        optax.adam(0.05),
        num_steps=30,
        key=key,
        state=state0,
        pass_step=True,
        steps_per_call=8,
        callback=callback,
        callback_every=10,
        progress=False,
    )
    # The state is the sum over steps of each batch's mean target: recompute it step by step.
    expected = 0.0
    for k in range(30):
        batch_key, _ = jr.split(jr.fold_in(key, k))
        expected += float(jnp.mean(sampler(batch_key)[1]))
    np.testing.assert_allclose(full.state[0], expected, rtol=1e-10)
    assert int(full.state[1]) == 29
    assert evals == [10, 20, 30] and [s for s, _ in full.evaluations] == [10, 20, 30]
    np.testing.assert_allclose(full.evaluations[-1][1]["total"], expected, rtol=1e-10)
    ckpt = str(tmp_path / "stateful")
    common = dict(
        key=key,
        state=state0,
        pass_step=True,
        steps_per_call=8,
        checkpoint_dir=ckpt,
        checkpoint_every=12,
        progress=False,
    )
    fit(counting_loss, model, sampler, optax.adam(0.05), num_steps=12, **common)
    resumed = fit(counting_loss, model, sampler, optax.adam(0.05), num_steps=30, **common)
    assert resumed.resumed_from == 12
    np.testing.assert_allclose(resumed.state[0], full.state[0], rtol=1e-10)
    np.testing.assert_allclose(resumed.losses, full.losses, rtol=1e-10)
    np.testing.assert_allclose(resumed.model.weight, full.model.weight, rtol=1e-10)


def test_fit_keeps_the_callers_model_and_compiles_once(getkey):
    model = Linear(jnp.zeros(3))
    args = (squared_loss, model, regression_sampler(8), optax.sgd(0.1))
    first = fit(*args, num_steps=25, key=getkey(), steps_per_call=10, progress=False)
    np.testing.assert_array_equal(model.weight, jnp.zeros(3))  # not donated away
    assert first.losses.shape == (25,)
    from jaxgen.core.train import _chunk

    counted = eqx.filter_jit(eqx.debug.assert_max_traces(_chunk, max_traces=1))
    opt = optax.sgd(0.1)
    m, o, s, sampler = model, opt.init(model), None, regression_sampler(8)
    for start in (0, 10, 20):  # the last chunk is cut short: same executable
        step_kwargs = dict(loss_fn=squared_loss, batches=sampler, optimizer=opt, mesh=None)
        m, o, s, *_ = counted(
            (getkey(), step_kwargs),
            m,
            o,
            s,
            jnp.asarray(start, jnp.int32),
            jnp.asarray(10 if start < 20 else 5, jnp.int32),
            chunk_size=10,
        )


def test_minibatches_samplers_of_equal_shapes_share_one_compiled_chunk(getkey):
    """The sampler is a pytree holding the data: new data of the same shapes reuse the
    compiled chunk (a closure would be a new static argument and recompile)."""
    from jaxgen.core.train import _chunk

    counted = eqx.filter_jit(eqx.debug.assert_max_traces(_chunk, max_traces=1))
    opt = optax.sgd(0.1)
    model = Linear(jnp.zeros(3))
    for seed in (0, 1):
        x = jr.normal(jr.key(seed), (32, 3))
        sampler = minibatches((x, x @ TRUE_W), 8)
        key = getkey()
        idx = jr.randint(key, (8,), 0, 32)  # rows drawn with replacement, as documented
        np.testing.assert_array_equal(sampler(key)[0], x[idx])
        step_kwargs = dict(loss_fn=squared_loss, batches=sampler, optimizer=opt, mesh=None)
        counted(
            (key, step_kwargs),
            model,
            opt.init(model),
            None,
            jnp.asarray(0, jnp.int32),
            jnp.asarray(4, jnp.int32),
            chunk_size=4,
        )


def test_fit_never_donates_what_the_loss_closes_over(getkey):
    """A frozen teacher inside an `eqx.Partial` loss (same shape as the model, so a donated
    buffer could be aliased to an output) and the data stay valid across chunks and calls."""
    teacher, data = jnp.full(3, 2.0), jnp.ones((64, 3))

    def loss(model, batch, key, teacher):
        return jnp.mean((batch @ model.weight - jnp.sum(teacher)) ** 2)

    args = (eqx.Partial(loss, teacher=teacher), Linear(jnp.zeros(3)), minibatches(data, 8))
    for _ in range(2):
        fit(*args, optax.sgd(1e-2), num_steps=20, key=getkey(), steps_per_call=5, progress=False)
    assert not teacher.is_deleted() and not data.is_deleted()
    np.testing.assert_array_equal(teacher, jnp.full(3, 2.0))


def test_fit_chunking_bad_input(getkey):
    args = (squared_loss, Linear(jnp.zeros(3)), regression_sampler(4), optax.sgd(0.1))
    for bad in (0, -3, True):
        with pytest.raises(ValueError, match="`steps_per_call` must be an int >= 1"):
            fit(*args, num_steps=3, key=getkey(), steps_per_call=bad)
    # A float is refused by the annotation (TypeError under the jaxtyping hook) or by the check.
    with pytest.raises((TypeError, ValueError), match="steps_per_call"):
        fit(*args, num_steps=3, key=getkey(), steps_per_call=2.5)
    with pytest.raises(ValueError, match="`checkpoint_every` must be an int >= 1"):
        fit(*args, num_steps=3, key=getkey(), checkpoint_every=0)
    with pytest.raises(ValueError, match="`callback_every` is required"):
        fit(*args, num_steps=3, key=getkey(), callback=lambda *a: None)
    with pytest.raises(ValueError, match="`callback_every` must be an int >= 1"):
        fit(*args, num_steps=3, key=getkey(), callback=lambda *a: None, callback_every=0)
    with pytest.raises(ValueError, match="without a `callback`"):
        fit(*args, num_steps=3, key=getkey(), callback_every=2)


def test_adamw_cosine_checks_its_hyperparameters():
    from jaxgen.core import adamw_cosine

    bad = [
        ({"learning_rate": float("nan")}, ValueError, r"`learning_rate` must be finite and > 0"),
        ({"learning_rate": 0.0}, ValueError, r"`learning_rate` must be finite and > 0"),
        ({"learning_rate": -1e-3}, ValueError, r"`learning_rate` must be finite and > 0"),
        ({"learning_rate": jnp.array(-1.0)}, ValueError, r"`learning_rate` must be finite"),
        ({"learning_rate": optax.constant_schedule(1e-3)}, TypeError, r"learning_rate"),
        ({"num_steps": -1}, ValueError, r"`num_steps` must be an int >= 0, got -1"),
        ({"num_steps": 10.0}, (ValueError, TypeError), r"num_steps"),  # ours or jaxtyping's
        ({"warmup_steps": -2}, ValueError, r"`warmup_steps` must be an int >= 0"),
        ({"weight_decay": -1e-4}, ValueError, r"`weight_decay` must be finite and >= 0"),
        ({"weight_decay": float("inf")}, ValueError, r"`weight_decay` must be finite and >= 0"),
        ({"clip_norm": 0.0}, ValueError, r"`clip_norm` must be finite and > 0"),
        ({"clip_norm": float("nan")}, ValueError, r"`clip_norm` must be finite and > 0"),
        ({"b1": 1.0}, ValueError, r"`b1` must lie in \[0.0, 1.0\)"),
        ({"b2": float("nan")}, ValueError, r"`b2` must lie in \[0.0, 1.0\)"),
    ]
    for change, error, match in bad:
        kwargs = {"learning_rate": 1e-3, "num_steps": 10} | change
        with pytest.raises(error, match=match):
            adamw_cosine(**kwargs)
    # valid edge values: no steps, no decay, no clipping
    assert adamw_cosine(1e-3, 0, weight_decay=0.0, clip_norm=None) is not None
    # equal arguments give the same (cached) object; a concrete array learning rate is accepted
    assert adamw_cosine(2e-3, 5) is adamw_cosine(2e-3, 5)
    # closed form of the first step without warm-up, decay or clipping: Adam's bias-corrected
    # update is -lr g / (|g| + eps) = -lr sign(g) (up to eps = 1e-8)
    params, grads = jnp.ones(3), jnp.array([1.0, -2.0, 0.5])
    for lr in (0.1, jnp.asarray(0.1)):
        opt = adamw_cosine(lr, 10, weight_decay=0.0, clip_norm=None)
        updates, _ = opt.update(grads, opt.init(params), params)
        np.testing.assert_allclose(updates, -0.1 * jnp.sign(grads), rtol=1e-6)
