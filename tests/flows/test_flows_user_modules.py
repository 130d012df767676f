"""A user's own equinox module in the velocity slots (`AbstractVelocityField`, and the SMFSR
teacher slot `AbstractSRVelocityField`): loss, `jaxgen.core.fit`, sampler and the frozen
feature backbone take it like the built-ins."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax
import pytest

from jaxgen.core import fit, minibatches, solve_ode
from jaxgen.flows import (
    AbstractSRVelocityField,
    AbstractVelocityField,
    FeatureDiscriminator,
    FrozenFeatures,
    LinearInterpolant,
    NoiseAtOneVelocity,
    flow_matching_loss,
    sample_velocity_euler,
)

DIM = 3


class AffineSR(AbstractSRVelocityField):
    """``v = tanh-features -> linear``: one hidden layer on ``(z, cond, emb)``."""

    hidden: eqx.nn.Linear
    out: eqx.nn.Linear
    dim: int = eqx.field(static=True)
    emb_dim: int = eqx.field(static=True)

    def __init__(self, dim: int, *, key):
        k1, k2 = jr.split(key)
        self.dim, self.emb_dim = dim, 2
        self.hidden = eqx.nn.Linear(2 * dim + 2, 8, key=k1)
        self.out = eqx.nn.Linear(8, dim, key=k2)

    def embed_time(self, t):
        t = jnp.asarray(t)
        return jnp.stack([t, t**2])

    def features_from_embedding(self, emb, z, cond):
        return (jnp.tanh(self.hidden(jnp.concatenate([z, jnp.asarray(cond, z.dtype), emb]))),)

    def velocity_from_embedding(self, emb, z, cond=None):
        return self.out(self.features_from_embedding(emb, z, cond)[0])


def _teacher_loss(model, batch, key):
    x, cond = batch
    noise = jr.normal(jr.fold_in(key, 1), x.shape, x.dtype)
    return flow_matching_loss(model, (noise, x, cond), key, interpolant=LinearInterpolant())


_teacher_loss_jit = eqx.filter_jit(_teacher_loss)


def test_user_sr_field_loss_fit_features_sampler():
    key = jr.key(0)
    cond = jr.normal(key, (64, DIM))
    x = 2.0 * cond  # the HR image is a fixed function of the condition
    net = AffineSR(DIM, key=jr.key(1))
    l0 = float(_teacher_loss_jit(net, (x, cond), jr.key(2)))
    res = fit(
        _teacher_loss,
        net,
        minibatches((x, cond), 32),
        optax.adam(3e-2),
        num_steps=60,
        key=jr.key(3),
        progress=False,
    )
    l1 = float(_teacher_loss_jit(res.model, (x, cond), jr.key(2)))
    assert np.isfinite(l1) and l1 < 0.5 * l0
    teacher = NoiseAtOneVelocity(res.model)
    features = FrozenFeatures(teacher, tau=0.1)
    disc = FeatureDiscriminator((8,), DIM, width=4, key=jr.key(4))
    feats, logit = eqx.filter_jit(lambda f, d, x, c: (f(x, c), d(f(x, c), c)))(
        features, disc, x[0], cond[0]
    )
    assert [f.shape for f in feats] == [(8,)] and logit.shape == ()
    draw = eqx.filter_jit(sample_velocity_euler)(jr.key(5), teacher, cond[0], DIM, steps=8)
    assert draw.shape == (DIM,) and np.all(np.isfinite(draw))
    # the trained teacher carries noise to (close to) the target 2 c, far from where it started
    err0 = float(jnp.linalg.norm(jr.normal(jr.key(5), (DIM,)) - x[0]))
    assert float(jnp.linalg.norm(draw - x[0])) < 0.5 * err0


class Linear(AbstractVelocityField):
    """A user's plain velocity field ``v(t, x) = A x + b + t c``."""

    a: jax.Array
    b: jax.Array
    c: jax.Array
    dim: int = eqx.field(static=True)

    def __init__(self, dim: int):
        self.a, self.b, self.c = jnp.zeros((dim, dim)), jnp.zeros(dim), jnp.zeros(dim)
        self.dim = dim

    def __call__(self, t, x, args=None):
        return self.a @ x + self.b + t * self.c


def _fm_loss(model, batch, key):
    noise = jr.normal(jr.fold_in(key, 1), batch.shape, batch.dtype)
    return flow_matching_loss(model, (noise, batch), key, interpolant=LinearInterpolant())


def test_user_velocity_field_loss_fit_sampler():
    data = 1.5 + 0.1 * jr.normal(jr.key(6), (64, DIM))
    res = fit(
        _fm_loss,
        Linear(DIM),
        minibatches(data, 32),
        optax.adam(5e-2),
        num_steps=60,
        key=jr.key(7),
        progress=False,
    )
    assert res.losses[-5:].mean() < 0.5 * res.losses[:5].mean()
    x1 = solve_ode(res.model, jr.normal(jr.key(8), (DIM,))).ys[-1]
    assert np.all(np.isfinite(x1)) and abs(float(jnp.mean(x1)) - 1.5) < 1.0


def test_sr_teacher_slot_rejects_other_fields():
    with pytest.raises(TypeError, match=r"teacher[\s\S]*AbstractSRVelocityField"):
        FrozenFeatures(Linear(DIM))
    with pytest.raises(TypeError, match=r"teacher[\s\S]*AbstractSRVelocityField"):
        FrozenFeatures(NoiseAtOneVelocity(Linear(DIM)))
