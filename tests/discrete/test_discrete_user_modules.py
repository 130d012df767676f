"""A user's own equinox modules in the denoiser slot (`AbstractRateModel`) and the schedule slot
(`AbstractSchedule`): losses, `jaxgen.core.fit` and `sample` take them like the built-ins."""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax
import pytest

import jaxgen.discrete as D
from jaxgen.core import fit, minibatches

N, L = 3, 4


class TokenTable(D.AbstractRateModel):
    """Per-position logits ``W[z_i] + t U[z_i]`` and exit scores ``e[z_i]``: no context."""

    w: jax.Array
    u: jax.Array
    e: jax.Array
    vocab_size: int = eqx.field(static=True)

    def __init__(self, vocab_size: int):
        self.w = jnp.zeros((vocab_size, vocab_size))
        self.u = jnp.zeros((vocab_size, vocab_size))
        self.e = jnp.zeros((vocab_size,))
        self.vocab_size = vocab_size

    def __call__(self, z, t):
        return self.e[z], self.w[z] + t * self.u[z]


class LinearUniform(D.AbstractSchedule):
    """The uniform family written by a user: ``alpha_t = 1 - t``, ``m_t = t / N``."""

    num_tokens: int = eqx.field(static=True)
    mask_id: None = eqx.field(static=True, default=None)

    def alpha_mixing(self, t):
        return 1 - t, jnp.full((self.num_tokens,), 1.0, t.dtype) * (t / self.num_tokens)


@eqx.filter_jit
def _ctmc_loss(model, schedule, x, key):
    return D.neural_ctmc_loss(model, x, key, schedule=schedule)


def test_user_rate_model_loss_fit_sample():
    schedule = D.masked_schedule(N)
    data = jnp.full((16, L), 1)  # a constant sequence: learnable without context
    model = TokenTable(schedule.vocab_size)
    loss = functools.partial(D.neural_ctmc_loss, schedule=schedule)  # plugs straight into fit
    l0 = float(_ctmc_loss(model, schedule, data, jr.key(0)))
    res = fit(
        loss,
        model,
        minibatches(data, 8),
        optax.adam(0.1),
        num_steps=40,
        key=jr.key(1),
        progress=False,
    )
    l1 = float(_ctmc_loss(res.model, schedule, data, jr.key(0)))
    assert np.isfinite(l0) and np.isfinite(l1) and l1 < 0.3 * l0
    draws = np.asarray(D.sample(jr.key(2), res.model, schedule, 5, L, 8))
    assert draws.shape == (5, L)
    assert np.mean(draws == 1) > 0.9  # the learned chain unmasks to the data token


def test_user_schedule_matches_the_builtin():
    ours, builtin = LinearUniform(N), D.uniform_schedule(N)
    t = jnp.asarray(0.3)
    for a, b in zip(ours.rates(t), builtin.rates(t), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    np.testing.assert_allclose(ours.prior(), builtin.prior(), rtol=1e-7)
    model = TokenTable(N)
    model = eqx.tree_at(lambda m: m.w, model, jr.normal(jr.key(3), (N, N)))
    x = jnp.array([[0, 1, 2, 1], [2, 2, 0, 1]])
    np.testing.assert_allclose(
        _ctmc_loss(model, ours, x, jr.key(4)), _ctmc_loss(model, builtin, x, jr.key(4)), rtol=1e-5
    )
    with pytest.raises(ValueError, match="MDLM needs the masked schedule"):
        D.mdlm_loss(
            model, x, jr.key(0), schedule=ours
        )  # a closed form of the built-in masked family


def test_slots_reject_non_conforming_modules():
    schedule = D.uniform_schedule(N)
    x = jnp.zeros((2, L), int)

    class Plain(eqx.Module):
        def __call__(self, z, t):
            return jnp.zeros(z.shape), jnp.zeros((*z.shape, N))

    with pytest.raises(TypeError, match=r"model[\s\S]*AbstractRateModel"):
        D.neural_ctmc_loss(Plain(), x, jr.key(0), schedule=schedule)
    with pytest.raises(TypeError, match=r"model[\s\S]*AbstractRateModel"):
        D.sample(jr.key(0), Plain(), schedule, 2, L, 2)
    with pytest.raises(TypeError, match=r"schedule[\s\S]*AbstractSchedule"):
        D.neural_ctmc_loss(TokenTable(N), x, jr.key(0), schedule=object())
