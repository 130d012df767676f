"""QES on the LM core: attach_qes/attach_lora, shutdown without recompiling, trainable filter,
qes_loss, a masked training step under assert_max_traces, LM helpers, fine-pruning; Q8-Q9 slow.
"""

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu
import numpy as np
import pytest

from jaxgen.nn import Transformer
from jaxgen.transformers import (
    ABLResult,
    BackdoorVocab,
    FinePruneResult,
    MoLoRALinear,
    QESConfig,
    QESTransformer,
    adapter_optimizer,
    adapter_task_loss,
    attach_lora,
    attach_qes,
    backdoor_batches,
    evaluate_lm,
    fit_abl,
    fit_fine_prune,
    fit_qes,
    make_task,
    poison,
    qes_loss,
    restore,
    sample_lm,
    sample_losses,
    shutdown,
    suspect_recall,
    token_nll,
    trainable_filter,
)

V = BackdoorVocab()
CFG = QESConfig(num_experts=3, rank=2, total_steps=20)


def _randomise(model, key):
    """Non-zero B everywhere (so the experts matter) and non-uniform routers."""
    leaves, treedef = jtu.tree_flatten(model)
    filt = jtu.tree_leaves(trainable_filter(model))
    keys = jr.split(key, len(leaves))
    new = [
        leaf + 0.3 * jr.normal(k, leaf.shape, leaf.dtype) if f else leaf
        for leaf, f, k in zip(leaves, filt, keys, strict=True)
    ]
    return jtu.tree_unflatten(treedef, new)


@pytest.fixture(scope="module")
def setup():
    key = jr.key(0)
    kb, kq, kl, kr, kd, kp = jr.split(key, 6)
    base = Transformer(V.size, 8, 1, 2, 40, key=kb)
    qes = _randomise(attach_qes(base, CFG, key=kq), kr)
    x, y = make_task(kd, "reverse", 64)
    x, y, poisoned = poison(kp, x, y, task="reverse", attack="rare_token", rate=0.125)
    batch = backdoor_batches(x, y, 8, poisoned)(jr.key(3))
    forward = eqx.filter_jit(jax.vmap(lambda m, t: m.forward(t), in_axes=(None, 0)))
    return base, qes, batch, forward


def test_attach_starts_as_the_base_and_lora_equals_merged(setup, getkey):
    """B = 0: exactly the base. Plain LoRA == the base with W -> W + scale B A (closed form)."""
    base, _, batch, forward = setup
    tokens = batch["tokens"][:2]
    base_fwd = eqx.filter_jit(jax.vmap(lambda m, t: m(t), in_axes=(None, 0)))
    ref = base_fwd(base, tokens)
    np.testing.assert_allclose(
        forward(attach_qes(base, CFG, key=getkey()), tokens)[0], ref, rtol=1e-12, atol=1e-12
    )
    lora = attach_lora(base, rank=4, alpha=8.0, key=getkey())
    np.testing.assert_allclose(base_fwd(lora, tokens), ref, rtol=1e-12, atol=1e-12)
    lora = _randomise(lora, getkey())
    merged = base
    for i, block in enumerate(lora.adapters):
        for name, layer in block.items():
            part, field = name.split(".")
            w = layer.weight + layer.scale * (layer.B[0] @ layer.A[0])
            merged = eqx.tree_at(
                lambda m, i=i, part=part, field=field: getattr(getattr(m.blocks[i], part), field),
                merged,
                w,
            )
    np.testing.assert_allclose(base_fwd(lora, tokens), base_fwd(merged, tokens), atol=1e-10)


def test_forward_eager_jit_vmap_loop_and_gates(setup):
    _, qes, batch, forward = setup
    tokens = batch["tokens"][:3]
    logits, gates = forward(qes, tokens)
    assert logits.shape == (3, tokens.shape[1], V.size)
    assert gates.shape == (3, 1, tokens.shape[1], CFG.num_experts)
    np.testing.assert_allclose(gates.sum(-1), 1.0, atol=1e-12)
    eager = qes.forward(tokens[1])
    np.testing.assert_allclose(logits[1], eager[0], atol=1e-10)
    np.testing.assert_allclose(gates[1], eager[1], atol=1e-12)
    single = eqx.filter_jit(lambda m, t: m(t))
    loop = jnp.stack([single(qes, t) for t in tokens])
    np.testing.assert_allclose(logits, loop, atol=1e-10)


def test_shutdown_only_changes_mask_and_does_not_recompile(setup):
    _, qes, batch, _ = setup
    tokens = batch["tokens"][:2]
    f = eqx.filter_jit(
        eqx.debug.assert_max_traces(jax.vmap(lambda m, t: m(t), in_axes=(None, 0)), max_traces=1)
    )
    on = f(qes, tokens)
    off_model = shutdown(qes, 0)
    off = f(off_model, tokens)
    np.testing.assert_array_equal(off_model.mask, [0.0, 1.0, 1.0])
    back = f(restore(off_model), tokens)
    np.testing.assert_array_equal(back, on)
    assert np.abs(np.asarray(on - off)).max() > 1e-6
    # shutting q == zeroing every q expert's B (Q3 on the whole model)
    zeroed = jtu.tree_map(
        lambda n: (
            eqx.tree_at(lambda a: a.B, n, n.B.at[0].set(0.0)) if isinstance(n, MoLoRALinear) else n
        ),
        qes,
        is_leaf=lambda n: isinstance(n, MoLoRALinear),
    )
    np.testing.assert_allclose(off, f(zeroed, tokens), atol=1e-12)
    # only the mask leaf differs
    diff = jtu.tree_map(lambda a, b: bool(jnp.any(a != b)), qes, off_model)
    assert sum(jtu.tree_leaves(diff)) == 1 and jtu.tree_leaves(diff.mask) == [True]


def test_trainable_filter_marks_adapters_and_routers_only(setup):
    _, qes, _, _ = setup
    train, frozen = eqx.partition(qes, trainable_filter(qes))
    n_ab = sum(a.A.size + a.B.size for blk in qes.adapters for a in blk.values())
    n_router = sum(x.size for x in jtu.tree_leaves(qes.routers))
    assert sum(x.size for x in jtu.tree_leaves(train)) == n_ab + n_router
    assert all(x is None for x in jtu.tree_leaves(eqx.filter(train.base, eqx.is_array)))
    assert train.mask is None and frozen.mask is not None


def test_qes_loss_and_masked_training_step(setup):
    """qes_loss (trimming, warm-up, composition) and 3 optimiser steps traced once; the base,
    the weight copies and the mask never move; a NaN loss raises."""
    _, qes, batch, _ = setup
    opt = adapter_optimizer(qes, 1e-2, 10)

    def make_step(model, opt_state, batch, step):
        (loss, aux), grads = eqx.filter_value_and_grad(
            lambda m: qes_loss(m, batch, jr.key(0), cfg=CFG, step=step), has_aux=True
        )(model)
        updates, opt_state = opt.update(grads, opt_state, eqx.filter(model, eqx.is_inexact_array))
        return eqx.apply_updates(model, updates), opt_state, loss, aux

    step_fn = eqx.filter_jit(eqx.debug.assert_max_traces(make_step, max_traces=1))
    state = opt.init(eqx.filter(qes, eqx.is_inexact_array))
    _, _, _, aux0 = step_fn(qes, state, batch, jnp.asarray(0))
    assert np.all(np.asarray(aux0["keep"]) == 1)  # warm-up start: rho = 0, nobody trimmed
    model, losses = qes, []
    for i in range(3):
        model, state, loss, aux = step_fn(model, state, batch, jnp.asarray(i + 10))
        losses.append(float(loss))
        if i == 0:  # after the warm-up: ceil(rho_hat B) suspects, the largest l_off
            B, L = batch["tokens"].shape
            assert aux["keep"].shape == (B,) and aux["gbar_q"].shape == (B, L - 1)
            n = int(np.ceil(CFG.rho_hat * B))
            assert int((aux["keep"] == 0).sum()) == n
            worst = np.argsort(-np.asarray(aux["l_off"]), kind="stable")[:n]
            assert np.all(np.asarray(aux["keep"])[worst] == 0)
            expected = (
                aux["task"]
                + CFG.lambda_keep * aux["keep_loss"]
                + CFG.lambda_route * aux["route"]
                + CFG.lambda_bal * aux["balance"]
            )
            np.testing.assert_allclose(loss, expected, rtol=1e-12)
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0]
    moved = jtu.tree_map(lambda a, b: bool(jnp.any(a != b)), qes, model)
    filt = trainable_filter(qes)
    for m, f in zip(jtu.tree_leaves(moved), jtu.tree_leaves(filt), strict=True):
        assert not (m and not f)  # nothing frozen moved (base, weight copies, mask)
    assert any(jtu.tree_leaves(moved))
    # a NaN loss raises (same compiled step: only values change)
    bad = eqx.tree_at(lambda m: m.routers[0].b, qes, jnp.full_like(qes.routers[0].b, jnp.nan))
    with pytest.raises(Exception, match="not finite"):
        jax.block_until_ready(step_fn(bad, state, batch, jnp.asarray(11)))


@pytest.mark.slow  # fast twin: test_qes_loss_and_masked_training_step / forward
def test_train_qes_through_fit_reports_recall(setup):
    _, qes, _, _ = setup
    x, y = make_task(jr.key(5), "reverse", 32)
    x, y, poisoned = poison(jr.key(6), x, y, task="reverse", attack="rare_token", rate=0.125)
    res = fit_qes(
        qes,
        backdoor_batches(x, y, 8, poisoned),
        num_steps=3,
        key=jr.key(7),
        cfg=CFG,
        steps_per_call=3,
    )
    assert res.losses.shape == (3,) and np.all(np.isfinite(res.losses))
    assert set(res.state) == {"poisoned_seen", "poisoned_trimmed", "last"}
    recall = suspect_recall(res)
    assert np.isnan(recall) or 0.0 <= recall <= 1.0
    np.testing.assert_array_equal(res.model.mask, qes.mask)


@pytest.mark.slow  # fast twin: test_qes_loss_and_masked_training_step / forward
def test_token_nll_accepts_qes(setup):
    _, qes, batch, _ = setup
    seq = batch["tokens"][0]
    nll = token_nll(qes, seq)
    assert nll.shape == (seq.shape[0] - 1,) and np.all(np.isfinite(nll))


@pytest.mark.slow
def test_evaluate_and_sample_accept_qes(setup):
    _, qes, batch, _ = setup
    stream = np.asarray(batch["tokens"]).reshape(-1)
    ev = evaluate_lm(qes, stream, context=8, max_windows=4, batch_size=4)
    assert np.isfinite(ev.bits_per_token)
    s = sample_lm(jr.key(0), qes, 2, 6, prompt=jnp.array([V.bos]))
    assert s.shape == (2, 6)


def test_bad_input(setup, getkey):
    base, qes, batch, _ = setup
    with pytest.raises(ValueError, match="expert"):
        shutdown(qes, CFG.num_experts)
    with pytest.raises(ValueError, match="expert"):
        shutdown(qes, -1)
    with pytest.raises(TypeError, match="model"):
        attach_qes(qes, CFG, key=getkey())
    with pytest.raises(ValueError, match="cfg"):
        qes_loss(qes, batch, getkey(), cfg=dataclasses.replace(CFG, num_experts=4), step=0)
    with pytest.raises(ValueError, match="weights"):
        qes_loss(qes, {**batch, "weights": batch["weights"][:, 1:]}, getkey(), cfg=CFG, step=0)
    with pytest.raises(TypeError, match="QESTransformer"):
        qes_loss(base, batch, getkey(), cfg=CFG, step=0)
    with pytest.raises(TypeError, match="mixer"):
        attach_qes(Transformer(V.size, 8, 1, 2, 40, mixer="moe", key=getkey()), CFG, key=getkey())
    assert isinstance(qes, QESTransformer)
    # A hand-built model must agree with its experts (a quarantine index of -1 or a mask of
    # the wrong length was stored silently).
    fields = {f: getattr(qes, f) for f in ("base", "adapters", "routers", "mask")}
    with pytest.raises(ValueError, match=r"`quarantine` must be an expert index in \[0, 3\)"):
        QESTransformer(**fields, quarantine=-1)
    with pytest.raises(ValueError, match="`mask` has 2 experts but adapter"):
        QESTransformer(**{**fields, "mask": qes.mask[:2]}, quarantine=0)
    # Per-sample losses: the weights must cover the B x (L-1) predictions (B-1 rows passed).
    with pytest.raises(ValueError, match="`weights` must have shape"):
        sample_losses(qes, batch["tokens"], batch["weights"][:-1])
    # Fine-pruning's accuracy budget: a NaN compared False and pruned to max_frac.
    x, y = make_task(getkey(), "reverse", 4)
    with pytest.raises(ValueError, match=r"`max_drop` must lie in \[0.0, 1.0\]"):
        fit_fine_prune(base, (x, y), key=getkey(), num_steps=1, max_drop=float("nan"))


def test_adapter_task_loss_signs_isolated_samples(setup):
    """ABL's loss is `adapter_task_loss` with an ``isolated`` entry: mean_i s_i l_i, s = -1 on
    the isolated samples (closed form from the per-sample losses)."""
    _, qes, batch, _ = setup
    batch = {k: v for k, v in batch.items() if k != "poisoned"}
    per = np.asarray(sample_losses(qes, batch["tokens"], batch["weights"])[0])
    iso = np.arange(per.shape[0]) % 3 == 0
    plain = adapter_task_loss(qes, batch, jr.key(0))
    signed = adapter_task_loss(qes, {**batch, "isolated": jnp.asarray(iso)}, jr.key(0))
    np.testing.assert_allclose(plain, per.mean(), rtol=1e-12)
    np.testing.assert_allclose(signed, np.mean(np.where(iso, -per, per)), rtol=1e-12)


@pytest.mark.slow  # fast twin: test_adapter_task_loss_signs_isolated_samples
def test_fit_abl_and_fit_fine_prune_return_fit_results(setup):
    base, _, _, _ = setup
    x, y = make_task(jr.key(8), "reverse", 32)
    lora = attach_lora(base, rank=2, alpha=4.0, key=jr.key(9))
    abl = fit_abl(lora, (x, y), key=jr.key(10), num_steps=4, batch_size=8, isolate_after=2)
    assert isinstance(abl, ABLResult) and abl.losses.shape == (4,)
    assert abl.isolated.shape == (32,) and abl.isolated.sum() == 1
    fp = fit_fine_prune(lora, (x, y), key=jr.key(11), num_steps=2, batch_size=8)
    assert isinstance(fp, FinePruneResult) and fp.losses.shape == (2,)
    assert 0.0 <= fp.pruned_frac <= 0.6 and fp.ca_pruned >= fp.ca_before - 0.05
