"""Language-model core: corpora, tokenizer, sampler, loss, evaluation, sampling, scoring,
training."""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import jaxgen.data._text as text_mod
from jaxgen.core import minibatches
from jaxgen.data import (
    TEXT_CORPORA,
    BPETokenizer,
    ByteTokenizer,
    MissingDataError,
    debian_files,
    load_text_corpus,
    load_text_documents,
    random_windows,
)
from jaxgen.nn import MIXERS, Transformer
from jaxgen.transformers import (
    evaluate_lm,
    fit_lm,
    generative_perplexity,
    lm_loss,
    lm_optimizer,
    sample_lm,
    score_sequences,
    token_nll,
)

V = 13


@pytest.fixture(scope="module")
def model():
    return Transformer(V, 8, 1, 2, 8, key=jr.key(3), mixer="swiglu")


@pytest.fixture(scope="module")
def uniform_model(model):
    # zero embeddings -> zero hidden states -> zero (tied) logits -> uniform next-token law
    return eqx.tree_at(lambda m: m.embedding, model, jnp.zeros_like(model.embedding))


def test_corpus_split_is_deterministic_and_disjoint():
    a = load_text_corpus("python_stdlib", max_bytes=60_000)
    b = load_text_corpus("python_stdlib", max_bytes=60_000)
    assert a.train.dtype == np.uint8 and a.train.ndim == 1
    np.testing.assert_array_equal(a.train, b.train)
    np.testing.assert_array_equal(a.validation, b.validation)
    docs = a.train_documents + a.validation_documents
    assert (
        len(a.validation_documents) >= 1
        and len(set(a.validation_documents) & set(a.train_documents)) == 0
    )
    assert sum(len(d.encode()) for d in docs) == a.train.size + a.validation.size


@pytest.mark.parametrize("name", [n for n in TEXT_CORPORA if n != "python_stdlib"])
def test_debian_corpora(name):
    try:
        docs = load_text_documents(name)
    except MissingDataError as err:
        assert name in str(err)
        pytest.skip(f"Debian package {name} not installed")
    assert len(docs) > 100 and all(isinstance(d, str) and d for d in docs[:50])


def test_corpus_errors(monkeypatch):
    with pytest.raises(ValueError, match="unknown text corpus 'shakespeare'.*bible-kjv"):
        load_text_corpus("shakespeare")
    with pytest.raises(ValueError, match="val_fraction"):
        load_text_corpus("python_stdlib", val_fraction=1.5)
    with pytest.raises(ValueError, match="max_bytes"):
        load_text_corpus("python_stdlib", max_bytes=0)
    monkeypatch.setattr(text_mod, "debian_files", lambda pkg: debian_files("jaxgen-absent-" + pkg))
    with pytest.raises(MissingDataError, match="apt-get install jaxgen-absent-fortunes"):
        load_text_corpus("fortunes")


def test_tokenizer_and_windows(getkey):
    tok = ByteTokenizer(("<bos>", "<mask>"))
    assert tok.vocab_size == 258 and tok.special_id("<mask>") == 257
    ids = tok.encode("héllo")
    assert ids.dtype == np.int32 and len(ids) == 6
    assert tok.decode(np.concatenate([[256], ids, [257]])) == "héllo"
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 258\)"):
        tok.decode([300])
    with pytest.raises(ValueError, match="unknown special token"):
        tok.special_id("<eos>")
    stream = np.arange(100)
    batch = jax.jit(random_windows(stream, 4, 10))(getkey())
    assert batch.shape == (4, 10)
    np.testing.assert_array_equal(np.diff(np.asarray(batch), axis=1), 1)  # contiguous windows
    with pytest.raises(ValueError, match="length"):
        random_windows(stream, 4, 101)
    with pytest.raises(ValueError, match="1-D integer"):
        random_windows(np.zeros((3, 3)), 1, 2)


def test_bpe_tokenizer_round_trips_and_compresses():
    pytest.importorskip("tokenizers")
    docs = load_text_corpus("python_stdlib", max_bytes=40_000).train_documents
    tok = BPETokenizer(docs, vocab_size=400, special_tokens=("<mask>",))
    assert tok.vocab_size == 400 and tok.special_id("<mask>") == 399
    text = docs[0][:2000] + " héllo"
    ids = tok.encode(text)
    assert ids.dtype == np.int32 and int(ids.max()) < 400
    assert tok.decode(ids) == text  # byte-level: lossless
    assert len(ids) < 0.8 * len(text.encode())  # merges compress the training distribution
    with pytest.raises(ValueError, match="vocab_size"):
        BPETokenizer(docs, vocab_size=256)
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 400\)"):
        tok.decode([400])


def test_loss_eval_score_closed_forms(model, uniform_model, getkey):
    x = jr.randint(getkey(), (3, 7), 0, V)
    manual = jnp.mean(jax.vmap(lambda s: token_nll(model, s))(x))
    np.testing.assert_allclose(eqx.filter_jit(lm_loss)(model, x, jr.key(0)), manual, rtol=1e-10)
    mask = jnp.ones(x.shape, bool).at[:, 5:].set(False)
    masked = jnp.mean(jax.vmap(lambda s: token_nll(model, s))(x)[:, :4])
    np.testing.assert_allclose(
        eqx.filter_jit(lm_loss)(model, (x, mask), jr.key(0)), masked, rtol=1e-10
    )
    scores = score_sequences(model, x, mask)
    np.testing.assert_allclose(
        scores, -jax.vmap(lambda s: token_nll(model, s))(x)[:, :4].sum(1), rtol=1e-10
    )
    # uniform model: nll = log V exactly, perplexity = V
    ev = evaluate_lm(uniform_model, np.arange(40) % V, context=8, max_windows=3)
    assert ev.nll == pytest.approx(math.log(V), rel=1e-12)
    assert ev.bits_per_token == pytest.approx(math.log2(V), rel=1e-12)
    assert ev.num_tokens == 24
    assert float(generative_perplexity(uniform_model, x)) == pytest.approx(V, rel=1e-10)


def test_sampling(model, getkey):
    prompt = jnp.array([1, 2])
    s = sample_lm(getkey(), model, 3, 8, prompt=prompt, top_k=1)
    assert s.shape == (3, 8) and s.dtype == jnp.int32
    np.testing.assert_array_equal(s[:, :2], np.tile([1, 2], (3, 1)))
    greedy = np.zeros(8, np.int32)  # top_k = 1 is greedy decoding
    greedy[:2] = [1, 2]
    fwd = eqx.filter_jit(lambda m, x: m(x))
    for i in range(2, 8):
        greedy[i] = int(jnp.argmax(fwd(model, jnp.asarray(greedy))[i - 1]))
    np.testing.assert_array_equal(s[0], greedy)
    r = sample_lm(getkey(), model, 64, 8, prompt=prompt, temperature=2.0, top_k=3)
    assert int(r.min()) >= 0 and int(r.max()) < V
    assert len(np.unique(np.asarray(r[:, 2]))) <= 3  # top-k restricts the support
    with pytest.raises(ValueError, match="length"):
        sample_lm(getkey(), model, 1, 9, prompt=prompt)
    with pytest.raises(ValueError, match="temperature"):
        sample_lm(getkey(), model, 1, 4, prompt=prompt, temperature=0.0)
    with pytest.raises(ValueError, match="top_k"):
        sample_lm(getkey(), model, 1, 4, prompt=prompt, top_k=0)
    with pytest.raises(ValueError, match="prompt"):
        sample_lm(getkey(), model, 1, 4, prompt=jnp.zeros((0,), int))


def test_lm_bad_input(model):
    bidir = Transformer(V, 8, 1, 2, 8, key=jr.key(0), causal=False)
    with pytest.raises(ValueError, match="causal"):
        token_nll(bidir, jnp.zeros(4, int))
    with pytest.raises(ValueError, match=r"\(B, L\) with L >= 2"):
        lm_loss(model, jnp.zeros((2, 1), int), jr.key(0))
    with pytest.raises(ValueError, match="mask"):
        lm_loss(model, (jnp.zeros((2, 3), int), jnp.ones((2, 4), bool)), jr.key(0))
    with pytest.raises(ValueError, match="context"):
        evaluate_lm(model, np.arange(40) % V, context=9)
    with pytest.raises(ValueError, match="at least context"):
        evaluate_lm(model, np.arange(5), context=8)
    with pytest.raises(TypeError, match="AbstractCausalLM"):
        fit_lm(object(), None, num_steps=1, key=jr.key(0))
    with pytest.raises(ValueError, match="causal"):
        fit_lm(bidir, None, num_steps=1, key=jr.key(0))


TINY_TEXT = "the cat sat on the mat. " * 8


def _overfit(mixer: str) -> tuple[float, float]:
    tok = ByteTokenizer()
    ids = tok.encode(TINY_TEXT)
    kwargs = {"num_experts": 2, "top_k": 1} if mixer == "moe" else {}
    m = Transformer(256, 16, 1, 2, 16, key=jr.key(0), mixer=mixer, mixer_kwargs=kwargs)
    res = fit_lm(
        m,
        random_windows(ids, 8, 17),
        num_steps=80,
        key=jr.key(1),
        learning_rate=3e-2,
        warmup_steps=5,
        weight_decay=0.0,
    )
    return float(res.losses[0]), float(np.mean(res.losses[-5:]))


# The text has 11 distinct bytes with unigram entropy 2.14 nats; its next byte is determined by
# the previous few, so a memorising model approaches 0. Bound: the mean of the last 5 losses is
# below half the unigram entropy (1.07 nats) after 80 steps.
def test_overfits_tiny_text_gated_cofrgenet():
    first, last = _overfit("gated_cofrgenet")
    assert first > 5.0 and last < 1.07


@pytest.mark.slow
@pytest.mark.parametrize("mixer", MIXERS)
def test_overfits_tiny_text_every_mixer(mixer):
    first, last = _overfit(mixer)
    assert np.isfinite(last) and last < 1.07


@pytest.mark.slow
def test_fine_tune_on_samples_and_resume(model, tmp_path, getkey):
    """Fine-tune on own samples; a run resumed from its step-2 checkpoint equals an uninterrupted
    one."""
    samples = sample_lm(getkey(), model, 8, 8, prompt=jnp.array([1]))
    opt = lm_optimizer(1e-2, 4)  # the 4-step schedule, shared by the killed and the whole run
    batches = minibatches(samples, 4)
    whole = fit_lm(model, batches, num_steps=4, key=jr.key(5), optimizer=opt)
    # "Killed" after step 2 (its checkpoint is the last thing it wrote), then restarted to 4.
    fit_lm(
        model,
        batches,
        num_steps=2,
        key=jr.key(5),
        optimizer=opt,
        checkpoint_dir=str(tmp_path),
        checkpoint_every=2,
    )
    again = fit_lm(
        model, batches, num_steps=4, key=jr.key(5), optimizer=opt, checkpoint_dir=str(tmp_path)
    )
    assert again.resumed_from == 2 and again.losses.shape == (4,)
    np.testing.assert_allclose(again.losses, whole.losses, rtol=1e-10)
    for a, b in zip(
        jax.tree_util.tree_leaves(eqx.filter(again.model, eqx.is_array)),
        jax.tree_util.tree_leaves(eqx.filter(whole.model, eqx.is_array)),
        strict=True,
    ):
        np.testing.assert_allclose(a, b, rtol=1e-10)
