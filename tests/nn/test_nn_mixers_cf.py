"""Continued-fraction maths and layers against float64 numpy."""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax
import pytest
from jax.test_util import check_grads

from jaxgen.nn import (
    CffnMixer,
    GatedCFMixer,
    MLPMixer,
    SwiGLUMixer,
    capped_reciprocal,
    cf_bottom_up,
    cf_log_positive,
    cf_signed_logexp,
    cf_value,
    continuants,
    count_parameters,
    dyadic_active_depth,
    dyadic_schedule,
    dyadic_start_steps,
    recip_logexp,
)
from tests.reference.cofrgenet_logdomain import cf_log_positive_logaddexp


def np_ladder(a, eps=None):
    """float64 numpy bottom-up continued fraction over the last axis (independent oracle)."""
    a = np.asarray(a, dtype=np.float64)

    def recip(v):
        if eps is None:
            return 1.0 / v
        sign = np.where(v >= 0, 1.0, -1.0)
        return np.where(np.abs(v) >= eps, 1.0 / np.where(np.abs(v) >= eps, v, 1.0), sign / eps)

    t = a[..., -1]
    for k in range(a.shape[-1] - 2, -1, -1):
        t = a[..., k] + recip(t)
    return recip(t)


def _random_signed(key, shape):
    k1, k2 = jr.split(key)
    mag = jr.uniform(k1, shape, minval=0.5, maxval=3.0)
    return jnp.where(jr.bernoulli(k2, 0.5, shape), mag, -mag)


# Depths 1, 3 and 8 run by default; the rest with -m slow.
@pytest.mark.parametrize(
    "d", [d if d in (1, 3, 8) else pytest.param(d, marks=pytest.mark.slow) for d in range(1, 9)]
)
def test_f1_direct_equals_bottom_up(getkey, d):
    a = _random_signed(getkey(), (64, d))
    ref = np_ladder(np.asarray(a))
    keep = np.abs(np.asarray(continuants(a))[:, -1]) > 0.01  # away from the clamp
    np.testing.assert_allclose(np.asarray(cf_value(a))[keep], ref[keep], rtol=1e-10)
    np.testing.assert_allclose(np.asarray(cf_bottom_up(a)), ref, rtol=1e-10)


def test_f2_closed_forms():
    a, b, c = 1.7, -0.6, 2.3
    assert float(cf_value(jnp.array([a]))) == pytest.approx(1 / a, rel=1e-14)
    assert float(cf_value(jnp.array([a, b]))) == pytest.approx(b / (a * b + 1), rel=1e-14)
    assert float(continuants(jnp.array([a, b, c]))[-1]) == pytest.approx(a * b * c + a + c)
    fib = [1, 1]
    for _ in range(12):
        fib.append(fib[-1] + fib[-2])
    for d in range(1, 10):  # all ones -> F_d / F_{d+1}
        assert float(cf_value(jnp.ones(d))) == pytest.approx(fib[d - 1] / fib[d], rel=1e-14)
    assert float(cf_value(jnp.ones(5))) == pytest.approx(0.625)


def test_f3_custom_gradient(getkey):
    a = _random_signed(getkey(), (16, 5))
    kd = np.abs(np.asarray(continuants(a))[:, -1])
    a = a[kd > 0.1]
    g_custom = jax.grad(lambda x: jnp.sum(cf_value(x)))(a)
    g_auto = jax.grad(lambda x: jnp.sum(cf_bottom_up(x)))(a)
    np.testing.assert_allclose(g_custom, g_auto, rtol=1e-9)
    check_grads(jax.jit(cf_value), (a,), order=1, modes=["rev"], rtol=1e-5)
    a32 = a.astype(jnp.float32)
    g32 = jax.grad(lambda x: jnp.sum(cf_value(x)))(a32)
    assert g32.dtype == jnp.float32
    np.testing.assert_allclose(g32, g_auto, rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize(
    "d", [1, pytest.param(2, marks=pytest.mark.slow), pytest.param(5, marks=pytest.mark.slow), 16]
)
def test_f4_log_positive_equals_reference(getkey, d):
    logs = jr.normal(getkey(), (32, d))
    ref = np_ladder(np.exp(np.asarray(logs)))
    np.testing.assert_allclose(cf_log_positive(logs), ref, rtol=1e-12)
    out32 = cf_log_positive(logs.astype(jnp.float32))
    assert out32.dtype == jnp.float32
    np.testing.assert_allclose(out32, ref, rtol=1e-5)
    check_grads(jax.jit(cf_log_positive), (logs[:4],), order=1, modes=["rev"], rtol=1e-5)


def test_f5_deep_ladder_overflow():
    a = jr.uniform(jr.key(0), (64,), minval=5.0, maxval=20.0, dtype=jnp.float32)
    ref = np_ladder(np.asarray(a, np.float64))
    assert not np.isfinite(float(cf_value(a)))  # continuants overflow: inf / inf
    out = float(cf_log_positive(jnp.log(a)))
    assert np.isfinite(out) and out == pytest.approx(ref, rel=1e-5)
    g = jax.grad(lambda x: cf_log_positive(x))(jnp.log(a))
    assert bool(jnp.all(jnp.isfinite(g)))


def np_positive_grad(logs):
    """float64 numpy df/dl_k = (-1)^k a_k (K_{d-k}/K_d)^2 by plain continuants (Proposition 1)."""
    a = np.exp(np.asarray(logs, np.float64))
    d = a.shape[-1]
    k = [np.ones_like(a[..., 0]), a[..., -1]]
    for i in range(2, d + 1):
        k.append(a[..., d - i] * k[i - 1] + k[i - 2])
    return np.stack(
        [(-1.0) ** j * a[..., j - 1] * (k[d - j] / k[d]) ** 2 for j in range(1, d + 1)], axis=-1
    )


@pytest.fixture(scope="module")
def positive_grads():
    """jitted (value, grad) of the closed-form ladder and of the logaddexp reference."""

    def vg(f):
        return jax.jit(jax.vmap(jax.value_and_grad(f)))

    return vg(cf_log_positive), vg(cf_log_positive_logaddexp)


# Depths around the renormalisation points (every 4 levels past the first 5) and a deep one.
@pytest.mark.parametrize("d", [1, 4, 5, 6, 10, 24])
def test_f4b_closed_form_vjp_equals_logaddexp(positive_grads, getkey, d):
    """The ratio-form ladder and its custom VJP reproduce the logaddexp continuants and their
    autodiff: values to 1e-12 relative, gradients to 1e-10 of each row's largest (float64), and
    the exact gradient (float64 continuants) to 1e-10 relative, which the autodiff of logaddexp
    misses on the small deep-level entries."""
    logs = 2.0 * jr.normal(getkey(), (64, d))
    new, ref = positive_grads
    (v1, g1), (v0, g0) = new(logs), ref(logs)
    np.testing.assert_allclose(v1, v0, rtol=1e-12)
    scale = np.max(np.abs(np.asarray(g0)), axis=-1, keepdims=True)
    assert np.max(np.abs(np.asarray(g1 - g0)) / scale) < 1e-10
    np.testing.assert_allclose(g1, np_positive_grad(logs), rtol=1e-10)
    # float32: values within 1e-5 relative, gradients within 1e-4 of the row's largest.
    v32, g32 = new(logs.astype(jnp.float32))
    assert v32.dtype == g32.dtype == jnp.float32
    np.testing.assert_allclose(v32, v0, rtol=1e-5)
    assert np.max(np.abs(np.asarray(g32, np.float64) - g0) / scale) < 1e-4


def test_f4c_positive_ladder_extremes():
    """Far outside any trained range the float32 ladder stays finite where logaddexp gives inf/NaN
    gradients; |l| is clamped at B = (log(max) - 1)/5 - log 2 (float32 16.85)."""
    l32 = jnp.array(
        [[100.0, -100.0, 3.0], [-90.0, -90.0, -90.0], [50.0, -50.0, 50.0], [16.0, -16.0, 16.0]],
        jnp.float32,
    )
    val, grad = jax.vmap(jax.value_and_grad(cf_log_positive))(l32)
    assert bool(jnp.all(jnp.isfinite(val))) and bool(jnp.all(jnp.isfinite(grad)))
    np.testing.assert_allclose(val[3], np_ladder(np.exp(np.asarray(l32[3], np.float64))), 1e-5)
    bound = (math.log(float(jnp.finfo(jnp.float32).max)) - 1.0) / 5 - math.log(2.0)
    np.testing.assert_allclose(val[1], np_ladder(np.exp(np.full(3, -bound))), rtol=1e-5)
    np.testing.assert_array_equal(grad[1:3], 0.0)  # every entry clamped
    assert float(jnp.max(jnp.abs(grad[0]))) < 1e-12  # l_3 = 3 sits below a_1 = e^B
    deep = jr.normal(jr.key(3), (200, 64), dtype=jnp.float32) * 8.0  # renormalised 15 times
    v, g = jax.vmap(jax.value_and_grad(cf_log_positive))(deep)
    assert bool(jnp.all(jnp.isfinite(v))) and bool(jnp.all(jnp.isfinite(g)))


def test_f6_signed_logexp_equals_capped(getkey):
    eps = 0.01
    special = jnp.array([0.0, eps / 2, -eps / 2, eps, -eps, 1e-30, -1e-30, 3.0])
    np.testing.assert_allclose(
        recip_logexp(special, eps), capped_reciprocal(special, eps), rtol=1e-12
    )
    a = _random_signed(getkey(), (256, 6)) * jr.uniform(getkey(), (256, 6), maxval=2.0)
    a = a.at[:8, -1].set(special)
    np.testing.assert_allclose(cf_signed_logexp(a, eps), np_ladder(np.asarray(a), eps), rtol=1e-10)
    np.testing.assert_allclose(cf_signed_logexp(a, eps), cf_bottom_up(a, eps), rtol=1e-10)
    # 1e6 float32 inputs (including exact zeros): no NaN in values or gradients.
    v = jr.normal(getkey(), (250_000, 4), dtype=jnp.float32) * 0.02
    v = v.at[:1000].set(0.0)
    val, grad = jax.jit(jax.value_and_grad(lambda x: jnp.sum(cf_signed_logexp(x, eps))))(v)
    assert bool(jnp.isfinite(val)) and bool(jnp.all(jnp.isfinite(grad)))
    gz = jax.grad(lambda x: jnp.sum(recip_logexp(x, eps)))(jnp.zeros(3))
    np.testing.assert_array_equal(gz, 0.0)


def test_f7_parameter_counts(getkey):
    p = 768
    cffn = eqx.filter_eval_shape(lambda k: CffnMixer(p, 3, 5, key=k, ladder_bias=False), jr.key(0))
    assert count_parameters(cffn) == 1_193_472
    mlp = eqx.filter_eval_shape(lambda k: MLPMixer(p, key=k), jr.key(0))
    assert count_parameters(mlp) == 4_718_592
    for lad, d in [(3, 5), (2, 12)]:
        g = eqx.filter_eval_shape(lambda k, lad=lad, d=d: GatedCFMixer(p, lad, d, key=k), jr.key(0))
        assert count_parameters(g) == 3 * p**2 + lad * p * (2 * d + 1)


def np_gated_cf(m, x):
    """float64 numpy GatedCF forward with the ladder of the layer's division."""
    w, b, c = (np.asarray(t, np.float64) for t in (m.w, m.b, m.c))
    u = np.asarray(m.w_value) @ x
    g = np.asarray(m.w_gate) @ x
    g = g / (1 + np.exp(-g))
    pre = np.moveaxis(w * u + b, 1, -1)  # (ladders, dim, depth)
    if m.division == "log_positive":
        z = np_ladder(np.exp(pre))
    elif m.division == "signed_logexp":
        z = np_ladder(pre, m.eps)
    else:
        z = np_ladder(pre)
    return np.asarray(m.w_out) @ (g * (u + np.sum(c * z, axis=0)))


@pytest.mark.parametrize("division", ["log_positive", "signed_logexp", "direct"])
def test_gated_cf_layer_matches_numpy(getkey, division):
    m = GatedCFMixer(6, 2, 4, key=getkey(), division=division, c_std=0.5)
    m = eqx.tree_at(lambda t: t.w, m, jr.normal(getkey(), m.w.shape))
    x = jr.normal(getkey(), (6,))
    np.testing.assert_allclose(m(x), np_gated_cf(m, np.asarray(x)), rtol=1e-9)
    check_grads(jax.jit(lambda x: m(x)), (x,), order=1, modes=["rev"], rtol=1e-5)


def test_gated_cf_log_positive_equals_logaddexp_layer(getkey):
    """The default gated layer (closed-form ladder VJP) against the same layer built on the
    logaddexp ladder: outputs to 1e-12 and every parameter's gradient to 1e-10 (float64)."""
    m = GatedCFMixer(8, 3, 6, key=getkey(), c_std=0.5)
    m = eqx.tree_at(lambda t: (t.w, t.b), m, (jr.normal(getkey(), m.w.shape), m.b + 0.3))
    x = jr.normal(getkey(), (16, 8))

    def reference(m, x):
        u, g = m.w_value @ x, jax.nn.silu(m.w_gate @ x)
        pre = jnp.moveaxis(m.w * u[None, None, :] + m.b, 1, -1)
        return m.w_out @ (g * (u + jnp.sum(m.c * cf_log_positive_logaddexp(pre), axis=0)))

    def loss(m, f):
        return jnp.sum(jnp.sin(jax.vmap(lambda t: f(m, t))(x)))

    np.testing.assert_allclose(jax.vmap(m)(x), jax.vmap(lambda t: reference(m, t))(x), 1e-12)
    g_new = eqx.filter_grad(loss)(m, lambda m, t: m(t))
    g_ref = eqx.filter_grad(loss)(m, reference)
    for a, b in zip(jax.tree.leaves(g_new), jax.tree.leaves(g_ref), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10 * float(jnp.max(jnp.abs(b))))


def test_cffn_layer_matches_numpy(getkey):
    m = CffnMixer(5, 2, 3, key=getkey())
    m = eqx.tree_at(lambda t: t.w, m, jr.normal(getkey(), m.w.shape))
    x = jr.normal(getkey(), (5,))
    xh = np.asarray(x) / (1 + np.exp(-(np.asarray(m.g) @ np.asarray(x))))
    pre = np.moveaxis(np.asarray(m.w) * xh + np.asarray(m.b), 1, -1)
    ref = np.asarray(m.u) @ np.asarray(x) + np.sum(np.asarray(m.v) * np_ladder(pre), axis=0)
    np.testing.assert_allclose(m(x), ref, rtol=1e-9)


def test_f8_zero_ladders_is_swiglu(getkey):
    p = 8
    g = GatedCFMixer(p, 3, 5, key=getkey())  # c = 0 at init
    s = SwiGLUMixer(p, hidden=p, key=getkey())
    s = eqx.tree_at(lambda t: (t.w_gate, t.w_value, t.w_out), s, (g.w_gate, g.w_value, g.w_out))
    x = jr.normal(getkey(), (4, p))
    np.testing.assert_allclose(jax.vmap(g)(x), jax.vmap(s)(x), rtol=1e-12)
    g0 = GatedCFMixer(p, 0, 5, key=getkey())  # num_ladders = 0: r := 0 ablation
    assert count_parameters(g0) == 3 * p * p


def test_f9_dyadic_schedule():
    assert dyadic_start_steps(19073, 5) == [9537, 14305, 16689, 17881, 18477]
    assert int(dyadic_active_depth(9536, 19073, 5)) == 0
    assert int(dyadic_active_depth(9537, 19073, 5)) == 1
    assert int(dyadic_active_depth(19072, 19073, 5)) == 5
    with pytest.raises(ValueError, match="total_steps"):
        dyadic_start_steps(0, 5)
    m = CffnMixer(4, 2, 3, key=jr.key(0))
    opt = dyadic_schedule(optax.adamw(1e-2, weight_decay=0.5), total_steps=8, depth=3)
    params = eqx.filter(m, eqx.is_inexact_array)
    state = opt.init(params)
    x = jnp.linspace(-1, 1, 4)

    @eqx.filter_jit
    def train_step(m, state):
        grads = eqx.filter_grad(lambda mm: jnp.sum(mm(x) ** 2))(m)
        updates, state = opt.update(grads, state, eqx.filter(m, eqx.is_inexact_array))
        return eqx.apply_updates(m, updates), state

    for step in range(8):  # starts: [4, 6, 7]
        new, state = train_step(m, state)
        active = sum(step >= s for s in [4, 6, 7])
        dw = np.asarray(new.w - m.w)
        np.testing.assert_array_equal(dw[:, active:], 0.0)  # frozen levels: exactly no update
        np.testing.assert_array_equal(np.asarray(new.b - m.b)[:, active:], 0.0)
        if active:
            assert np.any(dw[:, :active] != 0)
        assert np.any(np.asarray(new.u - m.u) != 0)
        m = new


def test_cf_bad_input():
    with pytest.raises(ValueError, match="depth"):
        cf_value(jnp.zeros((3, 0)))
    with pytest.raises(ValueError, match="eps"):
        cf_value(jnp.ones(3), eps=0.0)
    with pytest.raises(ValueError, match="eps"):
        cf_signed_logexp(jnp.ones(3), eps=-1.0)
    with pytest.raises(ValueError, match="division"):
        GatedCFMixer(4, key=jr.key(0), division="magic")
    with pytest.raises(ValueError, match="num_ladders"):
        CffnMixer(4, 3, 0, key=jr.key(0))
    assert math.isfinite(float(cf_bottom_up(jnp.ones(3), 0.1)))
