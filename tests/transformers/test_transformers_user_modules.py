"""A user's own equinox module in the LM slot (`jaxgen.nn.AbstractCausalLM`) and mixer slot
(`jaxgen.nn.AbstractChannelMixer`, `jaxgen.nn.AbstractAdaptableMixer`, plugged in through
``Transformer(..., mixer=factory)``): loss, trainer, sampler and adapters take it like the
built-ins."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax
import pytest

from jaxgen.core import fit, minibatches
from jaxgen.nn import (
    AbstractAdaptableMixer,
    AbstractCausalLM,
    AbstractChannelMixer,
    Transformer,
    make_mixer,
)
from jaxgen.transformers import (
    AbstractICLRegressor,
    attach_lora,
    evaluate_lm,
    fit_lm,
    icl_loss,
    lm_loss,
    sample_lm,
    task_batch,
)

V, L = 5, 6


class BigramLM(AbstractCausalLM):
    """Next-token logits from the current token only: a table ``(V, V)`` (causal by design)."""

    table: jax.Array
    vocab_size: int = eqx.field(static=True)
    out_size: int = eqx.field(static=True)
    max_len: int = eqx.field(static=True)
    causal: bool = eqx.field(static=True)

    def __init__(self, vocab_size: int, max_len: int):
        self.table = jnp.zeros((vocab_size, vocab_size))
        self.vocab_size = self.out_size = vocab_size
        self.max_len, self.causal = max_len, True

    def features(self, tokens):
        return self.table[tokens], jnp.zeros(())

    def logits(self, features):
        return features


class Wrapped(AbstractCausalLM):
    """A user module that delegates to a built-in Transformer (same maths)."""

    inner: Transformer

    @property
    def vocab_size(self):
        return self.inner.vocab_size

    @property
    def out_size(self):
        return self.inner.out_size

    @property
    def max_len(self):
        return self.inner.max_len

    @property
    def causal(self):
        return self.inner.causal

    def features(self, tokens):
        return self.inner.features(tokens)

    def logits(self, features):
        return self.inner.logits(features)


def _cyclic(n: int) -> jax.Array:
    """Sequences of the deterministic cycle 0 -> 1 -> ... -> V-1 -> 0 from random starts."""
    starts = np.arange(n) % V
    return jnp.asarray((starts[:, None] + np.arange(L)[None, :]) % V, jnp.int32)


def test_user_lm_loss_trainer_sampler():
    model = BigramLM(V, L)
    data = _cyclic(20)
    loss0 = float(lm_loss(model, data, jr.key(0)))
    np.testing.assert_allclose(loss0, np.log(V), rtol=1e-6)  # zero table: uniform law
    res = fit_lm(model, minibatches(data, 10), num_steps=30, key=jr.key(1), learning_rate=0.3)
    loss1 = float(lm_loss(res.model, data, jr.key(0)))
    assert np.isfinite(loss1) and loss1 < 0.5 * loss0
    draws = sample_lm(jr.key(2), res.model, 4, L, prompt=jnp.array([2]), temperature=0.1)
    assert draws.shape == (4, L) and draws.dtype == jnp.int32
    np.testing.assert_array_equal(
        np.asarray(draws), (2 + np.arange(L))[None, :] % V * np.ones((4, 1))
    )
    ev = evaluate_lm(res.model, np.asarray(data).reshape(-1), context=L - 1)
    assert np.isfinite(ev.nll) and ev.nll < loss0


def test_user_lm_wrapping_the_builtin_matches_it():
    base = Transformer(V, 8, 1, 2, L, key=jr.key(3))
    user = Wrapped(base)
    data = _cyclic(4)
    loss = eqx.filter_jit(lm_loss)
    np.testing.assert_allclose(loss(user, data, jr.key(0)), loss(base, data, jr.key(0)), rtol=1e-6)
    a = sample_lm(jr.key(4), user, 3, L, prompt=jnp.array([1]))
    b = sample_lm(jr.key(4), base, 3, L, prompt=jnp.array([1]))
    np.testing.assert_array_equal(a, b)


def test_lm_slot_rejects_a_non_conforming_module():
    class NotAnLM(eqx.Module):
        def __call__(self, tokens):
            return jnp.zeros((tokens.shape[0], V))

    with pytest.raises(TypeError, match=r"model[\s\S]*AbstractCausalLM"):
        lm_loss(NotAnLM(), _cyclic(2), jr.key(0))
    with pytest.raises(TypeError, match=r"model[\s\S]*AbstractCausalLM"):
        sample_lm(jr.key(0), NotAnLM(), 2, L, prompt=jnp.array([0]))


class ScaledMLPMixer(AbstractAdaptableMixer):
    """A user's adapter-capable mixer: ``2 W_out relu(W_in x)``."""

    w_in: jax.Array
    w_out: jax.Array
    dim: int = eqx.field(static=True)

    def __init__(self, dim: int, *, key):
        k1, k2 = jr.split(key)
        self.w_in = 0.1 * jr.normal(k1, (2 * dim, dim))
        self.w_out = 0.1 * jr.normal(k2, (dim, 2 * dim))
        self.dim = dim

    def __call__(self, x):
        return 2 * self.w_out @ jax.nn.relu(self.w_in @ x)

    def adapted_weights(self):
        return {"w_in": self.w_in, "w_out": self.w_out}

    def apply_sequence(self, h, adapter=None):
        if adapter is None:
            return jax.vmap(self)(h), jnp.zeros((), h.dtype)
        u = jax.nn.relu(h @ self.w_in.T + adapter("mixer.w_in", h))
        return 2 * (u @ self.w_out.T + adapter("mixer.w_out", u)), jnp.zeros((), h.dtype)


def test_user_adaptable_mixer_takes_lora():
    base = Transformer(V, 8, 1, 2, L, key=jr.key(5))
    mixer = ScaledMLPMixer(8, key=jr.key(6))
    base = eqx.tree_at(lambda m: m.blocks[0].mixer, base, mixer)
    lora = attach_lora(base, rank=2, key=jr.key(7))
    assert set(lora.adapters[0]) == {"attn.w_qkv", "mixer.w_in", "mixer.w_out"}
    x = _cyclic(1)[0]
    call = eqx.filter_jit(lambda m, x: m(x))
    # LoRA starts at B = 0: the adapted model computes exactly the base model
    np.testing.assert_allclose(call(lora, x), call(base, x), rtol=1e-6, atol=1e-7)
    bumped = eqx.tree_at(
        lambda m: m.adapters[0]["mixer.w_out"].B,
        lora,
        jnp.ones_like(lora.adapters[0]["mixer.w_out"].B),
    )
    assert not np.allclose(call(bumped, x), call(base, x))  # the hook reaches the user's mixer


class TanhMixer(AbstractChannelMixer):
    """A user's plain channel mixer (no adapter hook): ``W_out tanh(W_in x)``."""

    w_in: jax.Array
    w_out: jax.Array
    dim: int = eqx.field(static=True)

    def __init__(self, dim: int, *, key, hidden: int = 16):
        k1, k2 = jr.split(key)
        self.w_in = jr.normal(k1, (hidden, dim)) / np.sqrt(dim)
        self.w_out = 0.1 * jr.normal(k2, (dim, hidden)) / np.sqrt(hidden)
        self.dim = dim

    def __call__(self, x):
        return self.w_out @ jnp.tanh(self.w_in @ x)

    def apply_sequence(self, h):
        return jax.vmap(self)(h), jnp.zeros((), h.dtype)


def test_user_mixer_factory_trains_with_fit_lm_and_samples():
    model = Transformer(V, 8, 2, 2, L, key=jr.key(10), mixer=TanhMixer, mixer_kwargs={"hidden": 12})
    assert all(isinstance(b.mixer, TanhMixer) for b in model.blocks)
    assert model.blocks[0].mixer.w_in.shape == (12, 8)  # mixer_kwargs reach the factory
    # one factory call per block, each with its own key
    assert not np.allclose(model.blocks[0].mixer.w_in, model.blocks[1].mixer.w_in)
    data = _cyclic(20)
    loss = eqx.filter_jit(lm_loss)
    loss0 = float(loss(model, data, jr.key(0)))
    res = fit_lm(model, data, batch_size=10, num_steps=40, key=jr.key(11), learning_rate=3e-2,
                 progress=False)  # fmt: skip
    loss1 = float(loss(res.model, data, jr.key(0)))
    assert np.all(np.isfinite(res.losses)) and loss1 < 0.5 * loss0, (loss0, loss1)
    assert isinstance(res.model.blocks[0].mixer, TanhMixer)
    draws = sample_lm(jr.key(12), res.model, 3, L, prompt=jnp.array([1]))
    assert draws.shape == (3, L) and draws.dtype == jnp.int32
    assert int(draws.min()) >= 0 and int(draws.max()) < V
    # a plain mixer has no matrices for the adapter hook: LoRA names the slot and the interface
    with pytest.raises(TypeError, match=r"model\.blocks\[0\]\.mixer[\s\S]*AbstractAdaptableMixer"):
        attach_lora(model, rank=2, key=jr.key(13))


def test_user_adaptable_mixer_factory_takes_lora_and_trains():
    base = Transformer(V, 8, 1, 2, L, key=jr.key(14), mixer=ScaledMLPMixer)
    assert isinstance(base.blocks[0].mixer, ScaledMLPMixer)
    lora = attach_lora(base, rank=2, key=jr.key(15))
    assert set(lora.adapters[0]) == {"attn.w_qkv", "mixer.w_in", "mixer.w_out"}
    data = _cyclic(20)
    call = eqx.filter_jit(lambda m, x: m(x))
    np.testing.assert_allclose(call(lora, data[0]), call(base, data[0]), rtol=1e-6, atol=1e-7)
    draws = sample_lm(jr.key(16), lora, 2, L, prompt=jnp.array([3]))
    assert draws.shape == (2, L)


def test_mixer_factory_result_is_checked():
    class NotAMixer(eqx.Module):
        def __call__(self, x):
            return x

    with pytest.raises(TypeError, match=r"`mixer` must be a AbstractChannelMixer[\s\S]*NotAMixer"):
        Transformer(V, 8, 1, 2, L, key=jr.key(0), mixer=lambda dim, *, key: NotAMixer())
    with pytest.raises(ValueError, match=r"`mixer` must map R\^8 -> R\^8.*dim 4"):
        Transformer(V, 8, 1, 2, L, key=jr.key(0), mixer=lambda dim, *, key: TanhMixer(4, key=key))
    with pytest.raises(
        TypeError, match=r"`mixer` must be one of .* or a factory|parameter 'mixer'"
    ):
        make_mixer(3, 8, key=jr.key(0))
    # the names keep working
    assert make_mixer("mlp", 8, key=jr.key(0)).dim == 8


class ShrunkMean(AbstractICLRegressor):
    """A user's in-context regressor: ``w * mean(y over the context) + b`` at every query."""

    w: jax.Array
    b: jax.Array

    def _predict(self, x, y, xq, ctx):
        mean = jnp.sum(jnp.where(ctx, y, 0.0)) / jnp.maximum(jnp.sum(ctx), 1)
        return jnp.broadcast_to(self.w * mean + self.b, xq.shape[:-1])


def _icl_batches(key):
    return task_batch(key, batch=16, n_min=4, n_max=8, D=3, kappa=0.5, num_queries=2, J=4)


def test_user_icl_regressor_loss_and_fit():
    model = ShrunkMean(jnp.asarray(0.0), jnp.asarray(1.0))
    batch = jax.jit(_icl_batches)(jr.key(8))
    loss = eqx.filter_jit(icl_loss)
    l0 = float(loss(model, batch))
    res = fit(icl_loss, model, _icl_batches, optax.adam(0.1), num_steps=40, key=jr.key(9),
              progress=False)  # fmt: skip
    assert np.all(np.isfinite(res.losses)) and float(loss(res.model, batch)) < l0
    with pytest.raises(TypeError, match=r"model[\s\S]*AbstractICLRegressor"):
        icl_loss(BigramLM(V, L), batch)
