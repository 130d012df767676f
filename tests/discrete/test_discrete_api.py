"""Public API of jaxgen.discrete: bad input, eager == jit, vmap == loop, gradients, C8."""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from jax.test_util import check_grads

import jaxgen.discrete as D
from jaxgen.core import adamw_cosine, fit


def test_bad_input(tiny):
    s, model = tiny["uniform"]
    x = jnp.array([0, 1, 2])
    with pytest.raises(ValueError, match="needs a `mask_id`"):
        D.InterpolatingSchedule("masked", 4)
    with pytest.raises(ValueError, match="unknown schedule `kind`"):
        D.InterpolatingSchedule("absorbing", 4)
    with pytest.raises(ValueError, match="`mask_id` must be num_tokens"):
        D.masked_schedule(4, mask_id=0)
    with pytest.raises(Exception, match="outside the vocabulary"):
        D.conditional_targets(s, x, jnp.array([0, 1, 3]), 0.5)
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
    with pytest.raises(ValueError, match="`weighting` must be"):
        D.gidd_loss(model, x[None, :], _rbg(0), schedule=s, weighting="snr")
    with pytest.raises(ValueError, match="`num_times` must be an int >= 1"):
        D.nelbo(model, x, _rbg(0), schedule=s, num_times=0)
    with pytest.raises(ValueError, match="`steps` must be an int >= 1"):
        D.sample(_rbg(0), model, s, 2, 3, 0)
    with pytest.raises(ValueError, match="`method` must be one of"):
        D.sample(_rbg(0), model, s, 2, 3, 4, method="midpoint")
    with pytest.raises(ValueError, match="vocab_size"):
        D.neural_ctmc_loss(model, x[None, :], _rbg(0), schedule=D.masked_schedule(3))
    with pytest.raises(ValueError, match="MDLM needs the masked schedule"):
        D.mdlm_loss(model, x[None, :], _rbg(0), schedule=s)
    with pytest.raises(Exception, match="outside the vocabulary"):
        D.neural_ctmc_loss(model, jnp.array([[0, 1, 7]]), _rbg(0), schedule=s)
    with pytest.raises(Exception, match="non-finite exit rate"):
        D.euler_jump_step(_rbg(0), x, jnp.array([0.0, jnp.nan, 0.0]), jnp.zeros((3, 3)), 0.1)


def _rbg(seed):
    """Keys whose random bits compile cheaply (XLA RngBitGenerator)."""
    return jr.key(seed, impl="unsafe_rbg")


def test_targets_properties_and_jit():
    rng = np.random.default_rng(0)
    x, u = jnp.asarray(rng.integers(0, 4, 5)), jnp.asarray(rng.uniform(size=5))

    @functools.partial(jax.jit, static_argnums=0)
    def run(s, x, u):
        q = s.marginal(x, 0.6)
        z = jnp.minimum(jnp.sum(jnp.cumsum(q, axis=-1) < u[:, None], axis=-1), s.vocab_size - 1)
        return q, z, s.rates_in(0.6), *D.conditional_targets(s, x, z, 0.6)

    for s in (D.uniform_schedule(4), D.masked_schedule(4), D.gidd_schedule(4, 0.3)):
        q, z, rho, log_lam, pi = map(np.asarray, run(s, x, u))
        np.testing.assert_allclose(pi[np.arange(5), z], 0.0)  # no mass on the current token
        active = np.isfinite(log_lam)
        np.testing.assert_allclose(np.where(active, pi.sum(-1), 1.0), 1.0, rtol=1e-12)
        # closed forms: lambda* = rho(z)(1 - q(z|x))/q(z|x), pi* = q(y|x)/(1 - q(z|x))
        qz = q[np.arange(5), z]
        np.testing.assert_allclose(
            np.exp(log_lam), np.maximum(rho[z], 0) * (1 - qz) / qz, rtol=1e-10, atol=1e-12
        )
        want = np.where(np.arange(s.vocab_size)[None, :] == z[:, None], 0.0, q / (1 - qz[:, None]))
        np.testing.assert_allclose(pi, want, rtol=1e-10, atol=1e-14)
        if s.kind == "masked":  # lambda* = 1/t at masks, 0 at clean tokens
            np.testing.assert_allclose(np.exp(log_lam), np.where(z == 4, 1 / 0.6, 0.0))


def test_vmap_equals_loop_and_grads():
    rng = np.random.default_rng(1)
    rate = jnp.asarray(np.exp(rng.normal(size=(3, 4))))
    pi = jnp.asarray(rng.dirichlet(np.ones(5), size=(3, 4)))
    llm = jnp.asarray(rng.normal(size=(3, 4)))
    lpm = jax.nn.log_softmax(jnp.asarray(rng.normal(size=(3, 4, 5))), axis=-1)
    batched = jax.jit(jax.vmap(D.path_kl))(rate, pi, llm, lpm)
    jitted = jax.jit(D.path_kl)
    loop = jnp.stack([jitted(rate[i], pi[i], llm[i], lpm[i]) for i in range(3)])
    np.testing.assert_allclose(batched, loop, rtol=1e-12)  # vmap == loop
    np.testing.assert_allclose(
        D.path_kl(rate[0], pi[0], llm[0], lpm[0]), loop[0], rtol=1e-12
    )  # eager == jit
    check_grads(
        jax.jit(lambda a, b: D.path_kl(rate[0], pi[0], a, b).sum()),
        (llm[0], lpm[0]),
        order=1,
        modes=["rev"],
    )
    check_grads(
        jax.jit(lambda r, a: D.poisson_kl(r, a).sum()), (rate[0], llm[0]), order=1, modes=["rev"]
    )


@pytest.fixture(scope="module")
def tiny():
    """Tiny networks (uniform: V = 3, masked: V = 4) shared by the model-level tests."""
    su, sm = D.uniform_schedule(3), D.masked_schedule(3)
    return {
        "uniform": (su, D.DiffusionTransformer(3, 8, 1, 2, 4, key=_rbg(0))),
        "masked": (sm, D.DiffusionTransformer(4, 8, 1, 2, 4, key=_rbg(1))),
    }


@eqx.filter_jit
def _model_losses(net, schedule, bias, x, key):
    """Every loss on one batch of the masked network; its exit bias is an input (finite diff.)."""
    net = eqx.tree_at(lambda m: m.exit_head.bias, net, bias)
    ctmc, grad = jax.value_and_grad(
        lambda b: D.neural_ctmc_loss(
            eqx.tree_at(lambda m: m.exit_head.bias, net, b),
            x,
            key,
            schedule=schedule,
        )
    )(bias)
    nelbo = jax.vmap(
        lambda xi, k: jnp.stack(
            [
                D.nelbo(net, xi, k, schedule=schedule, parameterization="ctmc", num_times=2),
                D.nelbo(net, xi, k, schedule=schedule, parameterization="x0", num_times=2),
            ]
        )
    )(x, jr.split(key, x.shape[0]))
    return {
        "ctmc": ctmc,
        "grad": grad,
        "mdlm": D.mdlm_loss(net, x, key, schedule=schedule),
        "nelbo": nelbo,
    }


def test_losses_nelbo_and_gradient(tiny):
    x = jnp.asarray(np.random.default_rng(2).integers(0, 3, (4, 4)))
    key = _rbg(2)
    b0 = jnp.zeros((1,))
    s, net = tiny["masked"]
    out = _model_losses(net, s, b0, x, key)
    for name, val in out.items():
        assert bool(jnp.all(jnp.isfinite(val))), name
    for name in ("ctmc", "mdlm", "nelbo"):
        assert bool(jnp.all(out[name] > 0)), name
    # C4 at model level: a zero exit head makes masked Neural CTMC exactly MDLM
    np.testing.assert_allclose(out["ctmc"], out["mdlm"], rtol=1e-10)
    # ... and the masked NELBO is the same through the two-head and the x0 reading
    np.testing.assert_allclose(out["nelbo"][:, 0], out["nelbo"][:, 1], rtol=1e-10)
    # at b = 0 the masked exit head sits at the target rate: the Poisson KL is stationary
    np.testing.assert_allclose(out["grad"][0], 0.0, atol=1e-9)
    # gradient in the exit bias away from it vs central finite differences (same compiled fn)
    b1, eps = jnp.array([0.3]), 1e-5
    g1 = _model_losses(net, s, b1, x, key)["grad"][0]
    fd = (
        _model_losses(net, s, b1 + eps, x, key)["ctmc"]
        - _model_losses(net, s, b1 - eps, x, key)["ctmc"]
    ) / (2 * eps)
    assert float(g1) > 1e-3  # too fast an exit clock is pushed back
    np.testing.assert_allclose(g1, fd, rtol=1e-5)
    # reduced C8: gradient descent on the exit bias alone (the rest frozen) from e^0.5 = 1.65
    # times the target rate brings lambda_theta / lambda* at masks into [0.9, 1.1]
    b = jnp.array([0.5])
    for i in range(15):
        b = b - 0.5 * _model_losses(net, s, b, x, _rbg(100 + i))["grad"]
    assert 0.9 <= float(jnp.exp(b[0])) <= 1.1, b


@pytest.mark.slow
def test_sedd_and_gidd_losses(tiny):
    s, net = tiny["uniform"]
    sm, nm = tiny["masked"]
    x = jnp.asarray(np.random.default_rng(5).integers(0, 3, (4, 4)))
    vals = eqx.filter_jit(
        lambda n, x, k: jnp.stack(
            [
                D.sedd_loss(n, x, k, schedule=s),
                D.gidd_loss(n, x, k, schedule=s, weighting="clip"),
                D.gidd_loss(n, x, k, schedule=s),
            ]
        )
    )(net, x, _rbg(5))
    assert bool(jnp.all(jnp.isfinite(vals) & (vals > 0))), vals
    # the dynamic weighting is defined on the GIDD schedule only (V = 4, as the masked net's)
    sg = D.gidd_schedule(3)
    dyn = eqx.filter_jit(D.gidd_loss)(nm, x, _rbg(5), schedule=sg, weighting="dynamic")
    assert bool(jnp.isfinite(dyn) & (dyn > 0)), dyn
    with pytest.raises(ValueError, match="dynamic weighting needs the gidd schedule"):
        D.gidd_loss(net, x, _rbg(5), schedule=s, weighting="dynamic")
    # GIDD's ELBO integrand on the masked schedule is MDLM's (same times and noise)
    gidd, mdlm = eqx.filter_jit(
        lambda n, x, k: (D.gidd_loss(n, x, k, schedule=sm), D.mdlm_loss(n, x, k, schedule=sm))
    )(nm, x, _rbg(6))
    np.testing.assert_allclose(gidd, mdlm, rtol=1e-10)


def test_sample_shapes_and_support(tiny):
    for kind in ("masked",):  # masked: the final fill must leave no mask; tau-leaping's step: C6
        s, net = tiny[kind]
        a = D.sample(_rbg(3), net, s, 5, 4, 3)
        b = D.sample(_rbg(3), net, s, 5, 4, 3)
        assert a.shape == (5, 4) and a.dtype == jnp.int32
        np.testing.assert_array_equal(a, b)
        assert int(a.min()) >= 0 and int(a.max()) < 3  # masks filled at the end
    # a single Euler step from the prior with exit rate ~0 keeps the prior draw
    s = D.uniform_schedule(3)
    z = jnp.array([0, 1, 2])
    out = D.euler_jump_step(_rbg(4), z, jnp.full((3,), -50.0), jnp.zeros((3, 3)), 0.1)
    np.testing.assert_array_equal(out, z)


class _Pair(eqx.Module):
    net: D.DiffusionTransformer
    schedule: D.InterpolatingSchedule


def _pair_loss(pair, x, key):
    return D.neural_ctmc_loss(pair.net, x, key, schedule=pair.schedule)


def _c8_ratios(num_steps, dim, batch, length):
    """Train a masked Neural CTMC from a mis-calibrated exit head (bias 0.5, i.e. lambda_theta =
    e^0.5 lambda*) on i.i.d. tokens; return the mean lambda_theta / lambda* at masks, t in
    {0.2, 0.5, 0.8}. For i.i.d. tokens the marginal exit rate at a mask equals lambda*."""
    s = D.masked_schedule(4)
    probs = jnp.array([0.4, 0.3, 0.2, 0.1])

    def batches(key):
        return jr.categorical(key, jnp.log(probs), shape=(batch, length)).astype(jnp.int32)

    net = D.DiffusionTransformer(5, dim, 1, 2, length, key=_rbg(10))
    net = eqx.tree_at(lambda m: m.exit_head.bias, net, jnp.array([0.5]))
    res = fit(
        _pair_loss,
        _Pair(net, s),
        batches,
        adamw_cosine(1e-2, num_steps),
        num_steps=num_steps,
        key=_rbg(11),
        progress=False,
    )

    @eqx.filter_jit
    def ratio(net, key, t):
        kx, kz = jr.split(key)
        x = batches(kx)
        z = jax.vmap(lambda k, xi: s.sample(k, xi, t))(jr.split(kz, batch), x)
        log_lam = jax.vmap(lambda zi: D.model_rates(net, s, zi, t)[0])(z)
        log_star = jax.vmap(lambda xi, zi: D.conditional_targets(s, xi, zi, t)[0])(x, z)
        m = z == 4
        return jnp.sum(jnp.where(m, jnp.exp(log_lam - log_star), 0.0)) / m.sum()

    return [float(ratio(res.model.net, _rbg(12 + i), t)) for i, t in enumerate((0.2, 0.5, 0.8))]


@pytest.mark.slow
def test_c8_learned_exit_head_calibrated():
    """Masked Neural CTMC: after training, lambda_theta / lambda* at masks stays in [0.9, 1.1]."""
    ratios = _c8_ratios(300, 16, 32, 6)
    assert 0.9 <= np.mean(ratios) <= 1.1, ratios
