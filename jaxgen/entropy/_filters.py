"""Per-document H_K scores, text-diversity metrics and training-data filters.

The filters keep the top ``keep`` documents by a score: H_K (model-free, `filter_by_entropy`),
a model's log-probability (`filter_by_logprob`, the usual "gold standard"), or a uniform random
score (`filter_random`, the control). They serve the collapse experiment of the paper: at each
self-training generation, only the kept synthetic documents are used for fine-tuning.
"""

import re
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax.random as jr
import numpy as np
from jaxtyping import PRNGKeyArray

from ._kontoyiannis import SymbolsLike, entropy_rate, to_symbols

_WORD = re.compile(r"[a-z']+")


class FilterResult(NamedTuple):
    """What a filter kept.

    Attributes:
        documents: the kept documents, in their original order (``K`` of them).
        indices: ``int64 (K,)`` their indices in the input, ascending.
        scores: ``float64 (M,)`` the score of every input document (higher is kept first).
    """

    documents: list[Any]
    indices: np.ndarray
    scores: np.ndarray


def score_documents(
    docs: Sequence[SymbolsLike],
    *,
    window: int | np.integer | None = None,
    form: str = "mean",
    unit: str = "bytes",
) -> np.ndarray:
    """H_K of every document, ``float64 (M,)`` bits per symbol (per byte by default).

    Each document is scored on its own: matches never cross document boundaries. Scores are
    comparable only between documents of similar length (the estimator's downward bias shrinks
    like ``1 / log n``).

    Args:
        docs: ``M >= 1`` documents, each text, bytes or a 1-D integer array.
        window, form: as in `entropy_rate` (default: increasing window, mean form).
        unit: ``"bytes"`` or ``"words"`` for text documents (see `to_symbols`).

    Raises:
        ValueError: no documents, or a document too short for the estimator (its index is named;
            no NaN sentinel is returned).
    """
    if isinstance(docs, str | bytes) or not isinstance(docs, Sequence):
        raise TypeError(f"`docs` must be a sequence of documents, got {type(docs).__name__}.")
    if len(docs) == 0:
        raise ValueError("`docs` is empty; need at least one document.")
    out = np.empty(len(docs), np.float64)
    for k, doc in enumerate(docs):
        symbols = to_symbols(doc, unit=unit, name=f"docs[{k}]")
        try:
            out[k] = entropy_rate(symbols, window=window, form=form)
        except ValueError as err:
            raise ValueError(f"document {k}: {err}") from None
    return out


def _words(doc: Any, k: int) -> list[str]:
    if isinstance(doc, bytes | bytearray):
        doc = bytes(doc).decode("utf-8", errors="replace")
    if not isinstance(doc, str):
        raise TypeError(
            f"diversity metrics need text documents; docs[{k}] is {type(doc).__name__}."
        )
    return _WORD.findall(doc.lower())


def _ngrams(words: list[str], n: int) -> list[tuple[str, ...]]:
    return [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]


def diversity_metrics(docs: Sequence[str | bytes], *, repetition_n: int = 4) -> dict[str, float]:
    """Text-diversity metrics of a sample of documents (words are lower-cased ``[a-z']+``).

    - ``unique_trigrams``: number of distinct word 3-grams over the whole sample (n-grams never
      cross documents);
    - ``vocabulary``: number of distinct word types;
    - ``repetition``: mean over documents of ``1 - distinct / total`` word ``repetition_n``-grams
      inside the document (0 for a document with fewer than ``repetition_n`` words);
    - ``distinct_1``, ``distinct_2``, ``distinct_3``: distinct / total n-grams over the sample
      (0 when there are none);
    - ``num_words``: total number of words.

    Compare samples of the same size: the counts grow with the sample.

    Examples:
        >>> m = diversity_metrics(["a b a b a b a b"])
        >>> m["vocabulary"], m["unique_trigrams"], round(m["repetition"], 3)
        (2.0, 2.0, 0.6)
    """
    if isinstance(docs, str | bytes) or not isinstance(docs, Sequence):
        raise TypeError(f"`docs` must be a sequence of documents, got {type(docs).__name__}.")
    if len(docs) == 0:
        raise ValueError("`docs` is empty; need at least one document.")
    if isinstance(repetition_n, bool) or not isinstance(repetition_n, int) or repetition_n < 1:
        raise ValueError(f"`repetition_n` must be an int >= 1, got {repetition_n!r}.")
    sets: dict[int, set[tuple[str, ...]]] = {1: set(), 2: set(), 3: set()}
    totals = {1: 0, 2: 0, 3: 0}
    reps = []
    for k, doc in enumerate(docs):
        words = _words(doc, k)
        for n in (1, 2, 3):
            grams = _ngrams(words, n)
            sets[n].update(grams)
            totals[n] += len(grams)
        grams = _ngrams(words, repetition_n)
        reps.append(1.0 - len(set(grams)) / len(grams) if grams else 0.0)
    out = {
        "unique_trigrams": float(len(sets[3])),
        "vocabulary": float(len(sets[1])),
        "repetition": float(np.mean(reps)),
        "num_words": float(totals[1]),
    }
    for n in (1, 2, 3):
        out[f"distinct_{n}"] = len(sets[n]) / totals[n] if totals[n] else 0.0
    return out


def _num_keep(keep: Any, m: int) -> int:
    if isinstance(keep, bool) or not isinstance(keep, int | float | np.integer | np.floating):
        raise TypeError(
            f"`keep` must be an int count or a float fraction, got {type(keep).__name__}."
        )
    if isinstance(keep, int | np.integer):
        if not 1 <= keep <= m:
            raise ValueError(
                f"`keep` as a count must be in [1, {m}] (the number of documents), got {keep}."
            )
        return int(keep)
    if not 0.0 < keep <= 1.0:
        raise ValueError(f"`keep` as a fraction must be in (0, 1], got {keep}.")
    return max(1, int(round(keep * m)))


def _select(docs: Sequence[Any], scores: np.ndarray, keep: Any) -> FilterResult:
    m = len(docs)
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    if scores.shape != (m,):
        raise ValueError(f"expected one score per document ({m}), got shape {scores.shape}.")
    if not np.all(np.isfinite(scores)):
        raise ValueError(
            f"scores must be finite; got {int(np.sum(~np.isfinite(scores)))} non-finite."
        )
    k = _num_keep(keep, m)
    top = np.sort(np.argsort(-scores, kind="stable")[:k])  # ties: earlier documents first
    return FilterResult([docs[i] for i in top], top.astype(np.int64), scores)


def _check_docs(docs: Any) -> None:
    if isinstance(docs, str | bytes) or not isinstance(docs, Sequence):
        raise TypeError(f"`docs` must be a sequence of documents, got {type(docs).__name__}.")
    if len(docs) == 0:
        raise ValueError("`docs` is empty; need at least one document.")


def filter_by_entropy(
    docs: Sequence[SymbolsLike],
    keep: int | float,
    *,
    window: int | np.integer | None = None,
    form: str = "mean",
    unit: str = "bytes",
    max_score: float | None = None,
) -> FilterResult:
    """Keep the ``keep`` documents with the highest H_K (model-free diversity filter).

    Args:
        docs: documents (text, bytes or integer arrays).
        keep: a count ``1 <= keep <= M`` (int) or a fraction ``0 < keep <= 1`` (float).
        window, form, unit: as in `score_documents`.
        max_score: optional quality guard: documents with H_K above it (e.g. the 99th
            percentile of real-data H_K; random gibberish scores highest) score ``-inf``-like
            (they are kept last). ``None``: no guard.

    References:
        The NeurIPS 2026 submission on H_K filtering against model collapse; the
        estimator: Gao, Kontoyiannis, Bienenstock, Entropy 10(2), 2008.
    """
    _check_docs(docs)
    scores = score_documents(docs, window=window, form=form, unit=unit)
    ranked = scores
    if max_score is not None:
        ranked = np.where(scores > max_score, np.min(scores) - 1.0 - scores, scores)
    res = _select(docs, ranked, keep)
    return FilterResult(res.documents, res.indices, scores)


def filter_by_logprob(
    docs: Sequence[Any], model: Callable[..., Any], keep: int | float, *, batched: bool = False
) -> FilterResult:
    """Keep the ``keep`` documents the model finds most likely (the log-probability filter).

    ``model`` is any scorer, so that this family needs no language-model code: with
    ``batched=False`` it is called once per document, ``model(doc) -> float``; with
    ``batched=True`` once, ``model(docs) -> (M,)``. Scores must increase with likelihood:
    return the mean per-token log-probability (or minus the per-token NLL) of the document,
    e.g. built from ``jaxgen.transformers.score_sequences(lm, tokens) / (L - 1)``.

    Args:
        docs: documents in whatever form ``model`` accepts.
        model: the scorer described above.
        keep: a count (int) or a fraction (float), as in `filter_by_entropy`.
        batched: call ``model`` on the whole list at once.
    """
    _check_docs(docs)
    if not callable(model):
        raise TypeError(f"`model` must be a callable scorer, got {type(model).__name__}.")
    if batched:
        scores = np.asarray(model(docs), dtype=np.float64)
    else:
        scores = np.asarray([float(model(d)) for d in docs], dtype=np.float64)
    return _select(docs, scores, keep)


def filter_random(key: PRNGKeyArray, docs: Sequence[Any], keep: int | float) -> FilterResult:
    """Keep ``keep`` documents uniformly at random (the control arm); scores are uniforms."""
    _check_docs(docs)
    scores = np.asarray(jr.uniform(key, (len(docs),)), dtype=np.float64)
    return _select(docs, scores, keep)
