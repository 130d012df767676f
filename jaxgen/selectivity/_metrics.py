r"""Selectivity metrics over score matrices: pure JAX, jit- and vmap-compatible.

Conventions. ``S`` has shape ``(n, K+1)``: one row per molecule, column 0 the
on-target, columns ``1..K`` the off-targets; entries are energies (kcal/mol, Vina-like): LOWER is
better binding. Affinity-type inputs (higher = better) go through `to_energy` once at entry.
``valid`` (bool, same shape) marks the entries that were scored; a failed docking is NaN in ``S``
and False in ``valid``. A row is *evaluable* when its on-target and at least one off-target are
valid. Per-molecule outputs are float ``(n,)`` with NaN on rows that are not evaluable; rates
average over the evaluable rows (`summarize` reports the others as failures).

With :math:`s_i = S_{i0}`, :math:`o_{ik} = S_{ik}` and the valid off set :math:`V_i`:
the off aggregate is :math:`\min_{k\in V_i} o_{ik}`, the mean, or the soft minimum
:math:`-\tau\log\frac{1}{|V_i|}\sum_{k\in V_i} e^{-o_{ik}/\tau}`; the selectivity gap is
aggregate minus :math:`s_i` (positive = selective).

References:
    SelectBench (NeurIPS 2026; abstract only, metric forms reconstructed from it); Gao et al.,
    Delta Score, arXiv 2311.12035; thresholds from the public TheSelective evaluation code.
"""

import functools as ft
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, ArrayLike, Bool, Float, Int, PRNGKeyArray

from ..core.checks import check_finite, check_positive

AGGREGATES = ("min", "mean", "soft")


def _check_scores(
    S: ArrayLike, valid: ArrayLike | None
) -> tuple[Float[Array, "n t"], Bool[Array, "n t"]]:
    """Shape checks at trace time, then a value check: NaN only where ``valid`` is False."""
    S = jnp.asarray(S)
    if S.ndim != 2 or S.shape[1] < 2:
        raise ValueError(
            f"`S` must have shape (n, K+1) with K >= 1 off-targets (column 0 = on-target), got "
            f"{S.shape}."
        )
    if S.shape[0] < 1:
        raise ValueError(f"`S` must have at least one row (molecule), got shape {S.shape}.")
    if not jnp.issubdtype(S.dtype, jnp.floating):
        S = S.astype(jnp.result_type(float))
    if valid is None:
        valid = ~jnp.isnan(S)
    valid = jnp.asarray(valid)
    if valid.shape != S.shape:
        raise ValueError(f"`valid` must have the shape of `S` {S.shape}, got {valid.shape}.")
    if valid.dtype != jnp.bool_:
        raise TypeError(f"`valid` must be a boolean array, got dtype {valid.dtype}.")
    S = eqx.error_if(
        S,
        jnp.any(valid & ~jnp.isfinite(S)),
        "`S` has NaN/inf entries marked valid; mark failed scorings False in `valid`.",
    )
    return S, valid


def _check_level(value: Any, name: str) -> Any:
    """A threshold or margin: finite (``None`` passes through, for the optional ones).

    A NaN threshold makes every comparison false and would read as a 0% rate. A Python number is
    checked now and returned as it is; an array comes back carrying its run-time check.
    """
    if value is None:
        return None
    checked = check_finite(value, name)
    return value if isinstance(value, int | float) else checked


def _split(S: Array, valid: Array) -> tuple[Array, Array, Array, Array, Array]:
    """(s, o, on_ok, off_ok, evaluable) with invalid entries of ``o`` replaced by +inf."""
    s, o = S[:, 0], S[:, 1:]
    on_ok, off_ok = valid[:, 0], valid[:, 1:]
    o = jnp.where(off_ok, o, jnp.inf)
    evaluable = on_ok & jnp.any(off_ok, axis=1)
    return s, o, on_ok, off_ok, evaluable


def _masked_rate(hit: Array, evaluable: Array) -> Float[Array, ""]:
    """Mean of ``hit`` over the evaluable rows (NaN when there is none)."""
    num = jnp.sum(jnp.where(evaluable, hit, 0).astype(jnp.result_type(float)))
    den = jnp.sum(evaluable)
    return jnp.where(den > 0, num / jnp.maximum(den, 1), jnp.nan)


def to_energy(S: Float[ArrayLike, "n t"], *, higher_is_better: bool = False) -> Float[Array, "n t"]:
    """Scores in the energy convention of this module (lower = better): negate affinities once."""
    S = jnp.asarray(S)
    return -S if higher_is_better else S


def off_aggregate(
    S: Float[ArrayLike, "n t"],
    valid: Bool[ArrayLike, "n t"] | None = None,
    *,
    how: str = "min",
    tau: float = 0.5,
) -> Float[Array, " n"]:
    r"""Aggregate of each row's valid off-target scores: min, mean or soft minimum.

    ``"soft"`` is :math:`-\tau\log\operatorname{mean}_k e^{-o_k/\tau}` (the min as
    :math:`\tau\to0`, the mean as :math:`\tau\to\infty`). NaN on rows that are not evaluable.

    Args:
        S: scores ``(n, K+1)``, column 0 the on-target, lower = better.
        valid: bool ``(n, K+1)``; default: the non-NaN entries.
        how: ``"min"``, ``"mean"`` or ``"soft"``.
        tau: temperature of ``"soft"`` (> 0), in the units of ``S``.

    Returns:
        ``(n,)`` floats.
    """
    if how not in AGGREGATES:
        raise ValueError(f"`how` must be one of {AGGREGATES}, got {how!r}.")
    tau = check_positive(tau, "tau")  # checked for every `how`: a NaN is a mistake anyway
    S, valid = _check_scores(S, valid)
    tau = tau.astype(S.dtype)
    _, o, _, off_ok, evaluable = _split(S, valid)
    count = jnp.sum(off_ok, axis=1)
    if how == "min":
        agg = jnp.min(o, axis=1)
    elif how == "mean":
        agg = jnp.sum(jnp.where(off_ok, o, 0.0), axis=1) / jnp.maximum(count, 1)
    else:
        logits = jnp.where(off_ok, -o / tau, -jnp.inf)
        lse = jax.nn.logsumexp(logits, axis=1)
        agg = -tau * (lse - jnp.log(jnp.maximum(count, 1).astype(S.dtype)))
    return jnp.where(evaluable, agg, jnp.nan)


def selectivity_gap(
    S: Float[ArrayLike, "n t"],
    valid: Bool[ArrayLike, "n t"] | None = None,
    *,
    how: str = "min",
    tau: float = 0.5,
) -> Float[Array, " n"]:
    """Off aggregate minus the on-target score (positive = selective); NaN where not evaluable."""
    agg = off_aggregate(S, valid, how=how, tau=tau)
    return agg - jnp.asarray(S)[:, 0].astype(agg.dtype)


def success_rate(
    S: Float[ArrayLike, "n t"],
    valid: Bool[ArrayLike, "n t"] | None = None,
    *,
    margin: float = 1.0,
    on_threshold: float | None = -7.0,
) -> Float[Array, ""]:
    """Fraction of evaluable rows with min-gap >= ``margin`` and on-target <= ``on_threshold``.

    ``on_threshold=None`` drops the second test. Defaults from TheSelective's code (gap > 1
    kcal/mol, on-target < -7).
    """
    margin, on_threshold = (
        _check_level(margin, "margin"),
        _check_level(on_threshold, "on_threshold"),
    )
    S, valid = _check_scores(S, valid)
    s, o, _, _, evaluable = _split(S, valid)
    hit = (jnp.min(o, axis=1) - s) >= margin
    if on_threshold is not None:
        hit = hit & (s <= on_threshold)
    return _masked_rate(hit, evaluable)


def selective_hit_rate(
    S: Float[ArrayLike, "n t"],
    valid: Bool[ArrayLike, "n t"] | None = None,
    *,
    on_threshold: float = -7.0,
    off_threshold: float = -7.0,
) -> Float[Array, ""]:
    """Fraction of evaluable rows binding the on-target (<= on) and no valid off-target (<= off)."""
    on_threshold = _check_level(on_threshold, "on_threshold")
    off_threshold = _check_level(off_threshold, "off_threshold")
    S, valid = _check_scores(S, valid)
    s, o, _, _, evaluable = _split(S, valid)
    hit = (s <= on_threshold) & jnp.all(o > off_threshold, axis=1)
    return _masked_rate(hit, evaluable)


def _counts(S: Array, valid: Array) -> tuple[Array, Array, Array]:
    s, o, _, off_ok, evaluable = _split(S, valid)
    better = jnp.sum(off_ok & (o < s[:, None]), axis=1)
    ties = jnp.sum(off_ok & (o == s[:, None]), axis=1)
    return better, ties, evaluable


def on_target_rank(
    S: Float[ArrayLike, "n t"], valid: Bool[ArrayLike, "n t"] | None = None
) -> Float[Array, " n"]:
    """Mid-rank of the on-target among the valid targets: ``1 + #{o < s} + #{o = s}/2``.

    1 is best; ties split (a row ``[-8, -8, -9]`` has rank 2.5). NaN where not evaluable.
    """
    S, valid = _check_scores(S, valid)
    better, ties, evaluable = _counts(S, valid)
    rank = 1.0 + better + 0.5 * ties
    return jnp.where(evaluable, rank.astype(S.dtype), jnp.nan)


def top1_rate(
    S: Float[ArrayLike, "n t"], valid: Bool[ArrayLike, "n t"] | None = None
) -> Float[Array, ""]:
    """Mean over evaluable rows of ``1[#{o < s} = 0] / (1 + #{o = s})`` (1/(K+1) under a null)."""
    S, valid = _check_scores(S, valid)
    better, ties, evaluable = _counts(S, valid)
    top = jnp.where(better == 0, 1.0 / (1.0 + ties), 0.0).astype(S.dtype)
    return _masked_rate(top, evaluable)


def _panel_hit_matrix(S: Array, valid: Array, margin: float, absolute: float | None) -> Array:
    s, o, _, off_ok, _ = _split(S, valid)
    bound = s[:, None] + margin if absolute is None else jnp.full_like(o, absolute)
    return off_ok & (o <= bound)


def panel_hits(
    S: Float[ArrayLike, "n t"],
    valid: Bool[ArrayLike, "n t"] | None = None,
    *,
    margin: float = 0.0,
    absolute: float | None = None,
) -> Float[Array, " n"]:
    """Off-targets that bind within ``margin`` of the on-target, ``#{o <= s + margin}``.

    With ``absolute`` given: ``#{o <= absolute}`` (a liability threshold). NaN where not
    evaluable (float, so that it can carry NaN).
    """
    margin, absolute = _check_level(margin, "margin"), _check_level(absolute, "absolute")
    S, valid = _check_scores(S, valid)
    hits = jnp.sum(_panel_hit_matrix(S, valid, margin, absolute), axis=1)
    evaluable = _split(S, valid)[4]
    return jnp.where(evaluable, hits.astype(S.dtype), jnp.nan)


def hit_frequency(
    S: Float[ArrayLike, "n t"],
    valid: Bool[ArrayLike, "n t"] | None = None,
    *,
    margin: float = 0.0,
    absolute: float | None = None,
) -> Float[Array, " K"]:
    """Per off-target: fraction of rows (on-target and that target valid) where it is a hit.

    Shows WHICH liabilities are hit (`panel_hits` counts them per molecule). NaN for a target
    with no valid pair.
    """
    margin, absolute = _check_level(margin, "margin"), _check_level(absolute, "absolute")
    S, valid = _check_scores(S, valid)
    hit = _panel_hit_matrix(S, valid, margin, absolute)
    pair_ok = valid[:, :1] & valid[:, 1:]
    num = jnp.sum(hit & pair_ok, axis=0).astype(S.dtype)
    den = jnp.sum(pair_ok, axis=0)
    return jnp.where(den > 0, num / jnp.maximum(den, 1), jnp.nan)


def zscore_scores(
    S: Float[ArrayLike, "n t"], ref_mean: Float[ArrayLike, " t"], ref_std: Float[ArrayLike, " t"]
) -> Float[Array, "n t"]:
    """Target-normalised scores ``(S - mu_k) / sd_k`` (removes pocket-size bias).

    ``mu_k``, ``sd_k`` come from reference molecules scored on target k. NaN stays NaN.
    """
    S = jnp.asarray(S)
    ref_mean, ref_std = jnp.asarray(ref_mean, S.dtype), jnp.asarray(ref_std, S.dtype)
    if S.ndim != 2 or ref_mean.shape != (S.shape[1],) or ref_std.shape != (S.shape[1],):
        raise ValueError(
            f"`ref_mean` and `ref_std` must have shape ({S.shape[-1]},), one per column of `S` "
            f"{S.shape}; got {ref_mean.shape} and {ref_std.shape}."
        )
    ref_mean = check_finite(ref_mean, "ref_mean")
    ref_std = check_positive(ref_std, "ref_std")
    return (S - ref_mean[None, :]) / ref_std[None, :]


def _mid_ranks(x: Float[Array, " n"]) -> Float[Array, " n"]:
    """1-based ranks with ties averaged (scipy's ``rankdata(method="average")``), O(n log n).

    One sort; each run of equal values gets the mean of its first and last sorted position
    (run ends found by cumulative maxima, no search).
    """
    n = x.shape[0]
    order = jnp.argsort(x)
    v = x[order]
    idx = jnp.arange(n)
    differs = v[1:] != v[:-1]
    first = jnp.concatenate([jnp.array([True]), differs])
    last = jnp.concatenate([differs, jnp.array([True])])
    start = jax.lax.cummax(jnp.where(first, idx, 0))
    end = (n - 1 - jax.lax.cummax(jnp.where(last[::-1], idx, 0)))[::-1]
    mid = (start + end).astype(x.dtype) / 2 + 1
    return jnp.zeros_like(mid).at[order].set(mid)


def cross_target_auroc(
    C: Float[ArrayLike, "n T"], labels: Int[ArrayLike, " n"]
) -> tuple[Float[Array, " T"], Float[Array, ""]]:
    r"""Cross-target specificity: per target a, :math:`P(C_{ia} < C_{ja}) + \tfrac12 P(=)`.

    Molecule i was generated for target ``labels[i]``; ``C[i, a]`` is its score at target a
    (lower = better). For each a, i ranges over molecules labelled a and j over the others
    (Mann-Whitney with mid-ranks, O(n log n) per target). The macro value averages the targets
    that have both classes.

    Args:
        C: finite scores ``(n, T)``, every molecule scored at every target.
        labels: ints in ``[0, T)``, shape ``(n,)``.

    Returns:
        ``(per_target (T,), macro ())``; NaN for a target without positives or negatives.
    """
    C = jnp.asarray(C)
    labels = jnp.asarray(labels)
    if C.ndim != 2:
        raise ValueError(f"`C` must have shape (n, T), got {C.shape}.")
    if labels.shape != (C.shape[0],):
        raise ValueError(f"`labels` must have shape ({C.shape[0]},), got {labels.shape}.")
    if not jnp.issubdtype(labels.dtype, jnp.integer):
        raise TypeError(f"`labels` must be integers, got dtype {labels.dtype}.")
    if not jnp.issubdtype(C.dtype, jnp.floating):
        C = C.astype(jnp.result_type(float))
    T = C.shape[1]
    labels = eqx.error_if(
        labels, jnp.any((labels < 0) | (labels >= T)), f"`labels` must lie in [0, T={T})."
    )
    C = eqx.error_if(C, ~jnp.all(jnp.isfinite(C)), "`C` must be finite (score every pair).")

    def one(column: Array, a: Array) -> Array:
        pos = labels == a
        n_pos = jnp.sum(pos).astype(C.dtype)
        n_neg = C.shape[0] - n_pos
        ranks = _mid_ranks(-column)  # higher rank = better (lower) score
        u = jnp.sum(jnp.where(pos, ranks, 0.0)) - n_pos * (n_pos + 1) / 2
        ok = (n_pos > 0) & (n_neg > 0)
        return jnp.where(ok, u / jnp.maximum(n_pos * n_neg, 1.0), jnp.nan)

    per_target = jax.vmap(one, in_axes=(1, 0))(C, jnp.arange(T))
    return per_target, jnp.nanmean(per_target)


def diagonal_dominance(G: Float[ArrayLike, "T T"]) -> Float[Array, ""]:
    """Fraction of rows a of the mean score matrix with ``G[a, a] < min_{b != a} G[a, b]``."""
    G = jnp.asarray(G)
    if G.ndim != 2 or G.shape[0] != G.shape[1] or G.shape[0] < 2:
        raise ValueError(f"`G` must be a square (T, T) matrix with T >= 2, got {G.shape}.")
    G = check_finite(G, "G")
    off = jnp.where(jnp.eye(G.shape[0], dtype=bool), jnp.inf, G)
    return jnp.mean((jnp.diagonal(G) < jnp.min(off, axis=1)).astype(jnp.result_type(float)))


@ft.partial(jax.jit, static_argnames=("margin", "on_threshold", "off_threshold", "tau"))
def _summary_arrays(
    S: Array,
    valid: Array,
    *,
    margin: float,
    on_threshold: float | None,
    off_threshold: float | None,
    tau: float,
) -> dict[str, Array]:
    """The metrics of :func:`summarize` as device arrays, in one compiled program."""
    on = jnp.where(valid[:, 0], S[:, 0], jnp.nan)
    evaluable = _split(S, valid)[4]
    return {
        "num_evaluable": jnp.sum(evaluable),
        "failures_per_target": jnp.sum(~valid, axis=0),
        "on_target_mean": jnp.nanmean(on),
        "on_target_median": jnp.nanmedian(on),
        "gap_min_mean": jnp.nanmean(selectivity_gap(S, valid, how="min")),
        "gap_mean_mean": jnp.nanmean(selectivity_gap(S, valid, how="mean")),
        "gap_soft_mean": jnp.nanmean(selectivity_gap(S, valid, how="soft", tau=tau)),
        "success_rate": success_rate(S, valid, margin=margin, on_threshold=on_threshold),
        "success_rate_gap_only": success_rate(S, valid, margin=margin, on_threshold=None),
        "selective_hit_rate": selective_hit_rate(
            S, valid, on_threshold=on_threshold, off_threshold=off_threshold
        ),
        "mean_rank": jnp.nanmean(on_target_rank(S, valid)),
        "top1_rate": top1_rate(S, valid),
        "panel_clean_rate": _masked_rate(panel_hits(S, valid, margin=0.0) == 0, evaluable),
        "hit_frequency": hit_frequency(S, valid, margin=0.0),
    }


def summarize(
    S: Float[ArrayLike, "n t"],
    valid: Bool[ArrayLike, "n t"] | None = None,
    *,
    margin: float = 1.0,
    on_threshold: float = -7.0,
    off_threshold: float = -7.0,
    tau: float = 0.5,
) -> dict[str, Any]:
    """Every metric of a task in one dict (host floats), with failure counts per target.

    The metrics are computed in one compiled program (one compilation per score shape and
    threshold setting), then brought to the host.

    Raises:
        ValueError: no row has a valid on-target score (nothing to summarise).
    """
    for name, value in (("margin", margin), ("on_threshold", on_threshold)):
        _check_level(value, name)  # host floats: raise now
    _check_level(off_threshold, "off_threshold")
    check_positive(tau, "tau")
    S, valid = _check_scores(S, valid)
    if not bool(jax.device_get(valid)[:, 0].any()):
        raise ValueError("no molecule has a valid on-target score: every docking failed.")
    arrays = jax.device_get(
        _summary_arrays(
            S,
            valid,
            margin=float(margin),
            on_threshold=None if on_threshold is None else float(on_threshold),
            off_threshold=None if off_threshold is None else float(off_threshold),
            tau=float(tau),
        )
    )
    out: dict[str, Any] = {"num_molecules": int(S.shape[0])}
    for name, value in arrays.items():
        if name in ("num_evaluable",):
            out[name] = int(value)
        elif name == "failures_per_target":
            out[name] = [int(v) for v in value]
        elif name == "hit_frequency":
            out[name] = [float(v) for v in value]
        else:
            out[name] = float(value)
    return out


def bootstrap_ci(
    key: PRNGKeyArray,
    metric_fn: Callable[[Array, Array], Array],
    S: Float[ArrayLike, "n t"],
    valid: Bool[ArrayLike, "n t"] | None = None,
    *,
    n_boot: int = 1000,
    level: float = 0.95,
) -> tuple[float, float]:
    """Percentile bootstrap interval of ``metric_fn(S, valid)`` over molecules (rows).

    ``metric_fn`` maps a score matrix and its mask to a scalar (e.g. `success_rate`); it is
    vmapped over the ``n_boot`` resamples, so it must be traceable.
    """
    if not isinstance(n_boot, int) or n_boot < 2:
        raise ValueError(f"`n_boot` must be an int >= 2, got {n_boot!r}.")
    if not 0.0 < level < 1.0:
        raise ValueError(f"`level` must lie in (0, 1), got {level}.")
    S, valid = _check_scores(S, valid)
    n = S.shape[0]
    idx = jr.randint(key, (n_boot, n), 0, n)
    stats = jax.vmap(lambda i: metric_fn(S[i], valid[i]))(idx)
    lo, hi = jnp.nanquantile(stats, jnp.array([(1 - level) / 2, (1 + level) / 2]))
    return float(lo), float(hi)
