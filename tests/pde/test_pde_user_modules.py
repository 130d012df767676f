"""A user's own diffusion in the model slot (`AbstractDiffusionModel`): the exact transition
(its optional ``log_transition``), path simulation, likelihoods, and the transition-flow loss and
trainer take it like the built-in OU / CIR / Heston models."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from jax.scipy.stats import norm

from jaxgen.pde import (
    AbstractDiffusionModel,
    TransitionFlow,
    exact_log_transition,
    exact_path_loglik,
    fit_spacetime,
    simulate_path,
    spacetime_loss,
)


class DriftedBM(AbstractDiffusionModel):
    """``dX = mu dt + s dW``, ``lam = (mu, s)``: ``X_t | x0 ~ N(x0 + mu t, s^2 t)``."""

    dim: int = eqx.field(static=True, default=1)
    param_names: tuple[str, ...] = eqx.field(static=True, default=("mu", "s"))
    positive: tuple[bool, ...] = eqx.field(static=True, default=(False,))

    def drift(self, x, lam):
        return jnp.broadcast_to(lam[0], x.shape)

    def diffusion(self, x, lam):
        return jnp.reshape(lam[1] ** 2, (1, 1)).astype(x.dtype)

    def noise(self, x, lam):
        return jnp.reshape(lam[1], (1, 1)).astype(x.dtype)

    def check_params(self, lam):
        lam = self._check_lam_shape(lam)
        return eqx.error_if(lam, ~(lam[1] > 0), "`lam`: s must be > 0.")

    def log_transition(self, t, x, x0, lam):
        return norm.logpdf(x[0], x0[0] + lam[0] * t, lam[1] * jnp.sqrt(t))


class NoClosedForm(AbstractDiffusionModel):
    """The same SDE without a closed-form transition."""

    dim: int = eqx.field(static=True, default=1)
    param_names: tuple[str, ...] = eqx.field(static=True, default=("mu", "s"))
    positive: tuple[bool, ...] = eqx.field(static=True, default=(False,))

    def drift(self, x, lam):
        return jnp.broadcast_to(lam[0], x.shape)

    def diffusion(self, x, lam):
        return jnp.reshape(lam[1] ** 2, (1, 1)).astype(x.dtype)

    def noise(self, x, lam):
        return jnp.reshape(lam[1], (1, 1)).astype(x.dtype)

    def check_params(self, lam):
        return self._check_lam_shape(lam)


LAM = jnp.array([0.5, 0.8])


def test_user_diffusion_transition_simulation_likelihood():
    model = DriftedBM()
    x0, x = jnp.array([0.2]), jnp.array([0.9])
    want = norm.logpdf(0.9, 0.2 + 0.5 * 0.4, 0.8 * np.sqrt(0.4))
    np.testing.assert_allclose(exact_log_transition(model, 0.4, x, x0, LAM), want, rtol=1e-6)
    paths = eqx.filter_jit(
        jax.vmap(lambda k: simulate_path(k, model, x0, LAM, 0.25, 4, substeps=2))
    )(jr.split(jr.key(0), 400))
    assert paths.shape == (400, 5, 1) and np.all(np.isfinite(paths))
    end = np.asarray(paths[:, -1, 0])  # X_1 ~ N(0.7, 0.64): Euler is exact for this SDE
    assert abs(end.mean() - 0.7) < 4 * 0.8 / np.sqrt(400)
    ll = eqx.filter_jit(exact_path_loglik)(model, paths[0], LAM, 0.25)
    steps = paths[0, 1:, 0] - paths[0, :-1, 0]
    np.testing.assert_allclose(ll, jnp.sum(norm.logpdf(steps, 0.5 * 0.25, 0.8 * 0.5)), rtol=1e-5)


def _condition(key):
    return jnp.array([0.0]), LAM


def _flow():
    return TransitionFlow(
        DriftedBM(),
        jnp.array([-1.0, 0.0, 0.5]),
        jnp.array([1.0, 1.0, 1.0]),
        num_units=2,
        width=4,
        depth=1,
        time_range=(1e-2, 1.0),
        key=jr.key(1),
    )


def test_user_diffusion_transition_flow_loss():
    batch = (jnp.array([0.1, 0.5]), jnp.zeros((2, 1)), jnp.tile(LAM, (2, 1)), jnp.ones((2, 1)))
    assert np.isfinite(float(eqx.filter_jit(spacetime_loss)(_flow(), batch, jr.key(0))))


@pytest.mark.slow  # compiles a fit step with second derivatives (like test_fit_spacetime_runs)
def test_user_diffusion_transition_flow_trainer():
    flow = _flow()
    res = fit_spacetime(
        flow, _condition, key=jr.key(2), num_steps=3, batch_size=4, learning_rate=1e-2
    )
    trained, losses = res.model, res.losses
    assert losses.shape == (3,) and np.all(np.isfinite(losses))
    logp = trained.log_density(jnp.asarray(0.5), jnp.array([0.3]), jnp.array([0.0]), LAM)
    assert np.isfinite(float(logp))


def test_model_slot_errors():
    with pytest.raises(TypeError, match="no closed-form transition density for NoClosedForm"):
        exact_log_transition(NoClosedForm(), 0.4, jnp.array([0.1]), jnp.array([0.0]), LAM)
    with pytest.raises(TypeError, match=r"model[\s\S]*AbstractDiffusionModel"):
        exact_log_transition(object(), 0.4, jnp.array([0.1]), jnp.array([0.0]), LAM)
