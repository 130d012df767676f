"""A user's own equinox module in the autoencoder slot (`AbstractAutoencoder`): `ncae_loss`,
`jaxgen.core.fit` and the metrics take it like the built-in models."""

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax
import pytest

from jaxgen.autoencoders import (
    AbstractAutoencoder,
    decoder_condition,
    left_inverse_error,
    ncae_loss,
)
from jaxgen.core import fit, minibatches


class LinearAE(AbstractAutoencoder):
    """``z = A x``, ``x_hat = B z`` (the context is ignored)."""

    a: jax.Array
    b: jax.Array

    def encode(self, x, c=None):
        return self.a @ x

    def decode(self, z, c=None):
        return self.b @ z

    def project(self, x, c=None):
        return self.decode(self.encode(x, c), c)


def test_user_autoencoder_loss_fit_metrics():
    kx, ka, kb = jr.split(jr.key(0), 3)
    basis = jnp.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [1.0, -1.0]])  # a 2-D plane in R^4
    X = jr.normal(kx, (128, 2)) @ basis.T
    C = jnp.zeros((128, 1))
    model = LinearAE(0.1 * jr.normal(ka, (2, 4)), 0.1 * jr.normal(kb, (4, 2)))
    l0 = float(ncae_loss(model, (X, C), None))
    res = fit(
        ncae_loss,
        model,
        minibatches((X, C), 32),
        optax.adam(3e-2),
        num_steps=150,
        key=jr.key(1),
        progress=False,
    )
    l1 = float(ncae_loss(res.model, (X, C), None))
    assert np.isfinite(l1) and l1 < 0.1 * l0  # a rank-2 linear AE recovers the plane
    assert np.isfinite(float(left_inverse_error(res.model, X[:16], C[:16])))
    assert np.isfinite(float(decoder_condition(res.model, X[:16], C[:16])))


def test_autoencoder_slot_rejects_other_modules():
    X, C = jnp.zeros((4, 4)), jnp.zeros((4, 1))
    with pytest.raises(TypeError, match=r"model[\s\S]*AbstractAutoencoder"):
        ncae_loss(object(), (X, C), None)
