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
