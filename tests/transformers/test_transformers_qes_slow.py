"""QES checks Q8 (attack sanity, 3 seeds) and Q9 (QES target), T1/A1 at rho = 0.05.

Slow: a base pretrained on the generic tasks, then LoRA / full fine-tuning / QES runs at the
benchmark's quick sizes (cut for CPU).
"""

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from jaxgen.core import minibatches
from jaxgen.nn import Transformer
from jaxgen.transformers import (
    PRETRAIN_VOCAB_SIZE,
    QESConfig,
    attach_lora,
    attach_qes,
    attack_success_rate,
    backdoor_batches,
    clean_accuracy,
    clean_test_set,
    fit_finetune,
    fit_lm,
    fit_qes,
    greedy_decode,
    lm_tokens,
    make_pretrain_tasks,
    make_task,
    poison,
    shutdown,
    suspect_recall,
    triggered_test_set,
)

pytestmark = pytest.mark.slow
N_TRAIN, N_TEST, BATCH = 4000, 300, 64


@eqx.filter_jit
def _decode(model, x):
    return greedy_decode(model, x)


def _ca_asr(model, clean, trig):
    ca = clean_accuracy(_decode(model, jnp.asarray(clean[0])), clean[1])
    return ca, attack_success_rate(_decode(model, jnp.asarray(trig[0])), "reverse")


@pytest.fixture(scope="module")
def world():
    x, y = make_pretrain_tasks(jr.key(10), 3000)
    tokens, weights = lm_tokens(x, y)
    mask = jnp.concatenate([jnp.zeros_like(weights[:, :1]), weights], axis=1) > 0
    base = Transformer(PRETRAIN_VOCAB_SIZE, 64, 2, 4, 40, key=jr.key(11))
    base = fit_lm(
        base,
        minibatches((tokens, mask), BATCH),
        num_steps=600,
        key=jr.key(12),
        learning_rate=3e-3,
        weight_decay=0.0,
    ).model
    clean = clean_test_set(jr.key(13), "reverse", N_TEST)
    trig = triggered_test_set(jr.key(14), "reverse", "rare_token", N_TEST)
    return base, clean, trig


def _data(seed):
    x, y = make_task(jr.key(100 + seed), "reverse", N_TRAIN)
    return poison(jr.key(200 + seed), x, y, task="reverse", attack="rare_token", rate=0.05)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_q8_attack_sanity(world, seed):
    base, clean, trig = world
    x, y, poisoned = _data(seed)
    lora = attach_lora(base, rank=32, alpha=64.0, key=jr.key(300 + seed))
    b1 = fit_qes(lora, backdoor_batches(x, y, BATCH), num_steps=400, key=jr.key(seed)).model
    b4 = fit_qes(
        lora,
        backdoor_batches(x[~poisoned], y[~poisoned], BATCH),
        num_steps=400,
        key=jr.key(seed),
    ).model
    b0 = fit_finetune(base, backdoor_batches(x, y, BATCH), num_steps=300, key=jr.key(seed)).model
    (ca1, asr1), (ca4, asr4), (ca0, asr0) = (_ca_asr(m, clean, trig) for m in (b1, b4, b0))
    assert asr1 >= 0.95 and asr0 >= 0.95, (asr1, asr0)
    assert asr4 <= 0.02, asr4
    assert abs(ca1 - ca4) <= 0.02 + 3 * np.sqrt(0.25 / N_TEST), (ca1, ca4)


def test_q9_qes_channels_and_shutdown_is_selective(world):
    base, clean, trig = world
    x, y, poisoned = _data(0)
    # scale alpha / r = 2 E: matched to B1's scale 2 (gates sum to 1; see the benchmark)
    cfg = QESConfig(alpha=64.0)
    res = fit_qes(
        attach_qes(base, cfg, key=jr.key(400)),
        backdoor_batches(x, y, BATCH, poisoned),
        num_steps=800,
        key=jr.key(401),
        cfg=cfg,
    )
    m = res.model
    ca, asr = _ca_asr(m, clean, trig)
    ca_off, asr_off = _ca_asr(shutdown(m, 0), clean, trig)
    ca_ctrl, _ = _ca_asr(shutdown(m, 1), clean, trig)
    assert asr >= 0.6, asr
    assert asr_off <= 0.10, asr_off
    assert ca - ca_off <= 0.05, (ca, ca_off)
    assert suspect_recall(res) >= 0.9
    assert ca_off - ca_ctrl >= 0.2, (ca_off, ca_ctrl)
