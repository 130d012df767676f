"""A user's own equinox module in the classifier slot (`AbstractClassifier`): `jem_loss`,
`fit_jem` and SGLD on its energy take it like the built-in classifiers."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax
import pytest

from jaxgen.energy import AbstractClassifier, JEMConfig, energy_marginal, fit_jem, jem_loss, sgld


class Quadratic(AbstractClassifier):
    """Logits ``W x + b - |x|^2 / 2``: linear classes with a confining energy."""

    w: jax.Array
    b: jax.Array

    def __call__(self, x):
        return self.w @ x + self.b - 0.5 * jnp.sum(x**2)


def _toy(n=64):
    y = jnp.arange(n) % 2
    x = jnp.where(y[:, None] == 1, 0.5, -0.5) + 0.1 * jr.normal(jr.key(0), (n, 3))
    return jnp.clip(x, -1, 1), y


def test_user_classifier_loss_fit_sgld():
    x, y = _toy()
    model = Quadratic(jnp.zeros((2, 3)), jnp.zeros(2))
    cfg = JEMConfig(mix=0.1, num_steps=5, step_size=0.1, noise=0.01)
    loss0, aux = jem_loss(model, x, y, x, cfg)
    np.testing.assert_allclose(aux["ce"], np.log(2), rtol=1e-6)  # zero weights: chance
    res = fit_jem(
        model,
        (x, y),
        cfg,
        optimizer=optax.adam(0.1),
        key=jr.key(1),
        num_steps=20,
        batch_size=16,
        buffer_size=32,
        progress=False,
    )
    trained = res.model
    assert isinstance(trained, Quadratic) and np.all(np.isfinite(res.losses))
    acc = float(jnp.mean(jnp.argmax(jax.vmap(trained)(x), -1) == y))
    assert acc > 0.95

    def energy(z):
        return energy_marginal(trained(z))

    x0 = jr.uniform(jr.key(2), (32, 3), minval=-1, maxval=1)
    xs = eqx.filter_jit(sgld)(jr.key(3), energy, x0, num_steps=20, step_size=0.1, noise=0.0)
    assert xs.shape == x0.shape and np.all(np.isfinite(xs))
    assert float(jnp.mean(jax.vmap(energy)(xs))) < float(jnp.mean(jax.vmap(energy)(x0)))


def test_classifier_slot_rejects_plain_callables():
    x, y = _toy(4)
    with pytest.raises(TypeError, match=r"model[\s\S]*AbstractClassifier"):
        jem_loss(lambda z: jnp.zeros(2), x, y, x, JEMConfig(mix=0.1))
