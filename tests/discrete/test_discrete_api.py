"""Public API of jaxgen.discrete: bad input, eager == jit, vmap == loop, gradients, C8."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from jax.test_util import check_grads

import jaxgen.discrete as D
from jaxgen.core import adamw_cosine, fit


def test_bad_input(getkey):
    s = D.uniform_schedule(4)
    x = jnp.array([0, 1, 2])
    with pytest.raises(ValueError, match="needs a `mask_id`"):
        D.InterpolatingSchedule("masked", 4)
    with pytest.raises(ValueError, match="unknown schedule `kind`"):
        D.InterpolatingSchedule("absorbing", 4)
    with pytest.raises(ValueError, match="`mask_id` must be num_tokens"):
        D.masked_schedule(4, mask_id=0)
    with pytest.raises(Exception, match="outside the vocabulary"):
        D.conditional_targets(s, x, jnp.array([0, 1, 4]), 0.5)
    with pytest.raises(Exception, match="outside the vocabulary"):
        D.conditional_targets(s, jnp.array([0, -1, 2]), x, 0.5)
    with pytest.raises(Exception, match=r"`t` must lie in \[0, 1\]"):
        D.conditional_targets(s, x, x, 1.5)
    with pytest.raises(Exception, match="must be finite and >= 0"):
        D.poisson_kl(jnp.array([-1.0]), jnp.array([0.0]))
    with pytest.raises(Exception, match="must be finite and >= 0"):
        D.poisson_kl(jnp.array([jnp.nan]), jnp.array([0.0]))
    with pytest.raises(Exception, match="must not be NaN"):
        D.poisson_kl(jnp.array([1.0]), jnp.array([jnp.nan]))
    with pytest.raises(TypeError, match="log_rate_model"):  # jaxtyping's check comes first
        D.poisson_kl(jnp.ones(2), jnp.ones(3))
    model = D.DiffusionTransformer(4, 8, 1, 2, 4, key=getkey())
    with pytest.raises(ValueError, match="`steps` must be an int >= 1"):
        D.sample(model, s, getkey(), 2, 3, 0)
    with pytest.raises(ValueError, match="`method` must be one of"):
        D.sample(model, s, getkey(), 2, 3, 4, method="midpoint")
    with pytest.raises(ValueError, match="vocab_size"):
        D.neural_ctmc_loss(model, D.masked_schedule(4), x[None, :], getkey())
    with pytest.raises(ValueError, match="MDLM needs the masked schedule"):
        D.mdlm_loss(model, s, x[None, :], getkey())
    with pytest.raises(Exception, match="outside the vocabulary"):
        D.neural_ctmc_loss(model, s, jnp.array([[0, 1, 7]]), getkey())
    with pytest.raises(Exception, match="non-finite exit rate"):
        D.euler_jump_step(getkey(), x, jnp.array([0.0, jnp.nan, 0.0]), jnp.zeros((3, 4)), 0.1)


def test_targets_properties_and_jit(getkey):
    for s in (D.uniform_schedule(4), D.masked_schedule(4), D.gidd_schedule(4, 0.3)):
        x = jr.randint(getkey(), (5,), 0, 4)
        z = s.sample(getkey(), x, 0.6)
        log_lam, pi = D.conditional_targets(s, x, z, 0.6)
        log_lam_j, pi_j = eqx.filter_jit(D.conditional_targets)(s, x, z, 0.6)
        np.testing.assert_allclose(log_lam, log_lam_j, rtol=1e-12)
        np.testing.assert_allclose(pi, pi_j, rtol=1e-12)
        np.testing.assert_allclose(pi[jnp.arange(5), z], 0.0)  # no mass on the current token
        active = jnp.isfinite(log_lam)
        np.testing.assert_allclose(jnp.where(active, pi.sum(-1), 1.0), 1.0, rtol=1e-12)
        if s.kind == "masked":  # lambda* = 1/t at masks, 0 at clean tokens
            np.testing.assert_allclose(jnp.exp(log_lam), jnp.where(z == 4, 1 / 0.6, 0.0))


def test_vmap_equals_loop_and_grads(getkey):
    rate = jnp.exp(jr.normal(getkey(), (3, 4)))
    pi = jax.nn.softmax(jr.normal(getkey(), (3, 4, 5)), axis=-1)
    llm = jr.normal(getkey(), (3, 4))
    lpm = jax.nn.log_softmax(jr.normal(getkey(), (3, 4, 5)), axis=-1)
    batched = jax.vmap(D.path_kl)(rate, pi, llm, lpm)
    loop = jnp.stack([D.path_kl(rate[i], pi[i], llm[i], lpm[i]) for i in range(3)])
    np.testing.assert_allclose(batched, loop, rtol=1e-12)
    check_grads(lambda a, b: D.path_kl(rate[0], pi[0], a, b).sum(), (llm[0], lpm[0]), order=1,
                modes=["rev"])
    check_grads(lambda r, a: D.poisson_kl(r, a).sum(), (rate[0], llm[0]), order=1, modes=["rev"])


def test_loss_grad_finite_difference(getkey):
    s = D.uniform_schedule(3)
    model = D.DiffusionTransformer(3, 8, 1, 2, 4, key=getkey())
    x = jr.randint(getkey(), (2, 4), 0, 3)
    key = getkey()
    params, static = eqx.partition(model, eqx.is_inexact_array)
    head_b = params.exit_head.bias

    def f(b):
        m = eqx.combine(eqx.tree_at(lambda p: p.exit_head.bias, params, b), static)
        return D.neural_ctmc_loss(m, s, x, key)

    check_grads(jax.jit(f), (head_b,), order=1, modes=["rev"], eps=1e-5)


class _Pair(eqx.Module):
    net: D.DiffusionTransformer
    schedule: D.InterpolatingSchedule


def _pair_loss(pair, x, key):
    return D.neural_ctmc_loss(pair.net, pair.schedule, x, key)


@pytest.mark.slow
def test_c8_learned_exit_head_calibrated(getkey):
    """Masked Neural CTMC: after training, lambda_theta / lambda* at masks stays in [0.9, 1.1]."""
    s = D.masked_schedule(4)
    probs = jnp.array([0.4, 0.3, 0.2, 0.1])

    def batches(key):
        return jr.categorical(key, jnp.log(probs), shape=(32, 6)).astype(jnp.int32)

    net = D.DiffusionTransformer(5, 16, 1, 2, 6, key=getkey())
    # start away from calibration: exit bias 0.5 (lambda_theta = e^0.5 lambda*)
    net = eqx.tree_at(lambda m: m.exit_head.bias, net, jnp.array([0.5]))
    res = fit(_pair_loss, _Pair(net, s), batches, adamw_cosine(1e-2, 300), num_steps=300,
              key=getkey(), progress=False)
    x = batches(getkey())
    ratios = []
    for t in (0.2, 0.5, 0.8):
        z = jax.vmap(lambda k, xi: s.sample(k, xi, t))(jr.split(getkey(), 32), x)
        log_lam = jax.vmap(lambda zi: D.model_rates(res.model.net, s, zi, t)[0])(z)
        log_star = jax.vmap(lambda xi, zi: D.conditional_targets(s, xi, zi, t)[0])(x, z)
        m = z == 4
        ratios.append(float(jnp.sum(jnp.where(m, jnp.exp(log_lam - log_star), 0.0)) / m.sum()))
    assert 0.9 <= np.mean(ratios) <= 1.1, ratios
