"""QES building blocks: checks Q1-Q6 (Q1 also against peft), eager == jit, vmap == loop."""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from jaxgen.transformers import (
    LoRALinear,
    MoLoRALinear,
    QESConfig,
    TokenRouter,
    route_loss,
    shutdown_mask,
    switch_load_loss,
    trim_suspects,
)

D_IN, D_OUT, R, E = 6, 5, 3, 4


def _randomise_B(layer, key):
    return eqx.tree_at(lambda m: m.B, layer, jr.normal(key, layer.B.shape))


def test_q1_lora_zero_init_and_merge(getkey):
    W = jr.normal(getkey(), (D_OUT, D_IN))
    x = jr.normal(getkey(), (D_IN,))
    lora = LoRALinear(W, R, key=getkey())
    assert lora.scale == 16.0 / R
    np.testing.assert_array_equal(lora(x), W @ x)  # B = 0: exactly the base
    lora = _randomise_B(lora, getkey())
    np.testing.assert_allclose(lora.merge() @ x, lora(x), rtol=0, atol=1e-12)
    np.testing.assert_allclose(jax.jit(lora.__call__)(x), lora(x), atol=1e-12)


@pytest.mark.slow  # torch + peft import; fast twin: test_q1_lora_zero_init_and_merge; the
# benchmark checks the same parity (claim peft_parity) on every run
def test_q1_lora_matches_peft(getkey):
    torch = pytest.importorskip("torch")
    peft = pytest.importorskip("peft")
    W = jr.normal(getkey(), (D_OUT, D_IN), jnp.float32)
    lora = _randomise_B(LoRALinear(W, R, alpha=16.0, key=getkey()), getkey())
    lora = jax.tree.map(lambda a: a.astype(jnp.float32), lora)
    net = torch.nn.Sequential(torch.nn.Linear(D_IN, D_OUT, bias=False))
    cfg = peft.LoraConfig(r=R, lora_alpha=16.0, target_modules=["0"], lora_dropout=0.0)
    pm = peft.get_peft_model(net, cfg)
    layer = pm.base_model.model[0]
    with torch.no_grad():
        layer.base_layer.weight.copy_(torch.tensor(np.asarray(W)))
        layer.lora_A["default"].weight.copy_(torch.tensor(np.asarray(lora.A)))
        layer.lora_B["default"].weight.copy_(torch.tensor(np.asarray(lora.B)))
    x = np.asarray(jr.normal(getkey(), (7, D_IN)), np.float32)
    with torch.no_grad():
        ref = pm(torch.tensor(x)).numpy()
        merged = pm.merge_and_unload()[0].weight.numpy()
    np.testing.assert_allclose(jax.vmap(lora)(jnp.asarray(x)), ref, atol=1e-5)
    np.testing.assert_allclose(lora.merge(), merged, atol=1e-5)


def test_q2_single_expert_equals_lora(getkey):
    W = jr.normal(getkey(), (D_OUT, D_IN))
    lora = _randomise_B(LoRALinear(W, R, key=getkey()), getkey())
    mo = MoLoRALinear(W, 1, R, key=getkey())
    mo = eqx.tree_at(lambda m: (m.A, m.B), mo, (lora.A[None], lora.B[None]))
    x = jr.normal(getkey(), (D_IN,))
    one = jnp.ones((1,))
    np.testing.assert_allclose(mo(x, one, one), lora(x), atol=1e-12)


@pytest.fixture(scope="module")
def moe():
    key = jr.key(1)
    k1, k2, k3, k4 = jr.split(key, 4)
    W = jr.normal(k1, (D_OUT, D_IN))
    mo = _randomise_B(MoLoRALinear(W, E, R, key=k2), k3)
    x = jr.normal(k4, (8, D_IN))
    gates = jax.nn.softmax(jr.normal(jr.fold_in(key, 9), (8, E)), -1)
    return mo, x, gates


def test_q3_shutdown_equals_zero_B_without_recompiling(moe):
    mo, x, gates = moe
    mask = jnp.ones((E,))
    off = shutdown_mask(mask, 0)
    np.testing.assert_array_equal(off, jnp.array([0.0, 1, 1, 1]))
    zeroed = eqx.tree_at(lambda m: m.B, mo, mo.B.at[0].set(0.0))
    f = jax.vmap(lambda m, x, g, mu: m(x, g, mu), in_axes=(None, 0, 0, None))
    np.testing.assert_allclose(f(mo, x, gates, off), f(zeroed, x, gates, mask), atol=1e-12)
    fj = eqx.filter_jit(eqx.debug.assert_max_traces(f, max_traces=1))
    fj(mo, x, gates, mask)
    fj(mo, x, gates, off)  # only an array leaf changed: no second trace
    np.testing.assert_allclose(fj(mo, x, gates, off), f(mo, x, gates, off), atol=1e-12)


def test_q4_channelling_masks_non_quarantine_gradients(moe):
    mo, x, gates = moe
    mask = jnp.ones((E,))

    def loss(m, keep):
        out = jax.vmap(lambda xi, gi, ki: m(xi, gi, mask, ki, 0))(x, gates, keep)
        return jnp.sum(jnp.sin(out))

    keep1 = jnp.ones((8,))
    keep0 = keep1.at[3].set(0.0)
    np.testing.assert_allclose(loss(mo, keep0), loss(mo, keep1), atol=1e-12)
    # Gradient from sample 3 alone: non-q experts get exactly zero; q unchanged.
    only3 = jnp.zeros((8,)).at[3].set(1.0)

    def loss3(m, keep):
        out = jax.vmap(lambda xi, gi, ki: m(xi, gi, mask, ki, 0))(x, gates, keep)
        return jnp.sum(jnp.sin(out) * only3[:, None])

    g_off = eqx.filter_grad(loss3)(mo, keep0)
    g_on = eqx.filter_grad(loss3)(mo, keep1)
    assert np.all(np.asarray(g_off.A[1:]) == 0) and np.all(np.asarray(g_off.B[1:]) == 0)
    assert np.abs(np.asarray(g_on.B[1:])).max() > 0
    np.testing.assert_allclose(g_off.A[0], g_on.A[0], atol=1e-12)
    np.testing.assert_allclose(g_off.B[0], g_on.B[0], atol=1e-12)


def test_moe_vmap_equals_loop(moe):
    mo, x, gates = moe
    mask = jnp.array([1.0, 0.0, 1.0, 1.0])
    batched = jax.jit(jax.vmap(lambda xi, gi: mo(xi, gi, mask)))(x, gates)
    loop = jnp.stack([mo(x[i], gates[i], mask) for i in range(8)])
    np.testing.assert_allclose(batched, loop, atol=1e-12)


@pytest.mark.parametrize("rho", [0.0, 0.1, 0.2, 0.25, 0.5])
def test_q5_trimming_count_and_ties(rho, getkey):
    losses = jnp.array([0.3, 2.0, 2.0, 0.1, 5.0, 2.0, 0.0, 1.0])
    keep = trim_suspects(losses, rho)
    n = math.ceil(rho * 8)
    assert int((keep == 0).sum()) == n
    expected = [4, 1, 2, 5, 7, 0, 3, 6][:n]  # descending loss, lower index first on ties
    assert sorted(np.flatnonzero(np.asarray(keep) == 0).tolist()) == sorted(expected)
    np.testing.assert_array_equal(jax.jit(trim_suspects)(losses, rho), keep)


def test_q6_router_and_route_loss(getkey):
    router = TokenRouter(D_IN, E, key=getkey())
    h = 10 * jr.normal(getkey(), (5, D_IN))
    g = jax.vmap(router)(h)
    np.testing.assert_allclose(g.sum(-1), 1.0, atol=1e-6)
    valid = jnp.ones((2, 5))
    keep = jnp.array([0.0, 1.0])
    for extreme in (0.0, 1.0):
        val = route_loss(jnp.full((2, 5), extreme), keep, valid)
        grad = jax.grad(lambda q: route_loss(q, keep, valid))(jnp.full((2, 5), extreme))
        assert np.isfinite(val) and np.all(np.isfinite(grad))


def test_switch_load_loss_closed_form():
    gates = jnp.array([[0.1, 0.6, 0.3], [0.2, 0.2, 0.6], [0.5, 0.4, 0.1]])
    # exclude 0: tops among {1, 2} are 1, 2, 1 -> f = (2/3, 1/3); P = (0.4, 1/3)
    expected = 2 * (2 / 3 * 0.4 + 1 / 3 * 1 / 3)
    np.testing.assert_allclose(switch_load_loss(gates, exclude=0), expected, atol=1e-12)


def test_bad_input(getkey):
    W = jnp.ones((D_OUT, D_IN))
    with pytest.raises(ValueError, match="rank"):
        LoRALinear(W, 0, key=getkey())
    with pytest.raises(ValueError, match="rank"):
        MoLoRALinear(W, E, D_OUT + 1, key=getkey())
    with pytest.raises(ValueError, match="num_experts"):
        TokenRouter(D_IN, 1, key=getkey())
    with pytest.raises(ValueError, match="num_experts"):
        QESConfig(num_experts=1)
    with pytest.raises(ValueError, match="rho_hat"):
        trim_suspects(jnp.zeros(4), 1.0)
    with pytest.raises(ValueError, match="expert"):
        shutdown_mask(jnp.ones(E), E)
    mo = MoLoRALinear(W, E, R, key=getkey())
    with pytest.raises((ValueError, TypeError), match="gates"):
        mo(jnp.ones(D_IN), jnp.ones(E - 1), jnp.ones(E))
    with pytest.raises((ValueError, TypeError), match="mask"):
        mo(jnp.ones(D_IN), jnp.ones(E), jnp.ones((E, 1)))
    with pytest.raises(ValueError, match="quarantine"):
        mo(jnp.ones(D_IN), jnp.ones(E), jnp.ones(E), 1.0, E)
