"""Use cases: multi-metric A/B testing with IPW pseudo-outcomes, and model comparison."""

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from ..core.checks import check_finite, is_traced
from ._checks import check_unit
from ._coverage import excluded_path
from ._regions import ConfidenceRegion, confidence_region

RULES = ("any_changed", "non_inferior")


def ipw_pseudo_outcomes(
    y: Float[Array, "T d"], a: Int[Array, " T"] | Bool[Array, " T"]
) -> Float[Array, "T d"]:
    """Rescaled IPW pseudo-outcomes of a Bernoulli(1/2) A/B test, in [0, 1]^d.

    psi_t = Y_t (2 A_t - 2 (1 - A_t)) lies in [-2, 2]^d and E[psi_t | past] is the ATE vector
    (treatment minus control mean) when A_t ~ Bernoulli(1/2) independently of the past; the
    rescaling (psi + 2)/4 maps the ATE tau to (tau + 2)/4, so "no change" is the point 1/2.

    Args:
        y: metrics in [0, 1], shape ``(T, d)``.
        a: assignments in {0, 1}, shape ``(T,)``.
    """
    y = check_unit(y, "y")
    if a.shape != y.shape[:1]:
        raise ValueError(f"a must have shape (T,) = ({y.shape[0]},), got {a.shape}.")
    sign = 2.0 * a.astype(y.dtype) - 2.0 * (1 - a.astype(y.dtype))
    return (y * sign[:, None] + 2.0) / 4.0


class ABTestResult(NamedTuple):
    """Decision path of a sequential A/B test.

    Attributes:
        times: the monitoring times ``(S,)``.
        decided: ``(S,)`` whether the rule fired at each monitoring time.
        stop_time: first monitoring time at which it fired, or -1.
        lower, upper: ``(S, d)`` projected bounds on the ATE (original scale, [-2, 2]); ``None``
            on the cheap exact path (``rule="any_changed"`` with a wealth-based kind).
    """

    times: Int[Array, " S"]
    decided: Bool[Array, " S"]
    stop_time: Int[Array, ""]
    lower: Float[Array, "S d"] | None
    upper: Float[Array, "S d"] | None


def ab_test(
    y: Float[Array, "T d"],
    a: Int[Array, " T"] | Bool[Array, " T"],
    alpha: float = 0.05,
    *,
    kind: str = "box_ellipsoid",
    rule: str = "any_changed",
    margin: Float[Array, " d"] | float = 0.0,
    times: Int[Array, " S"] | None = None,
    **region_kw,
) -> ABTestResult:
    """Sequential multi-metric A/B test on a time-uniform confidence region for the ATE.

    Rules (on the rescaled pseudo-outcomes of `ipw_pseudo_outcomes`):
    ``"any_changed"`` stops when the null point (1/2, ..., 1/2) leaves the region (for the
    portfolio region this is the exact membership test); ``"non_inferior"`` stops when the lower
    corner of the region exceeds (2 - margin_j)/4 in every coordinate, i.e. every ATE_j > -margin_j.
    Because the regions are confidence sequences, stopping at the first firing time keeps the
    error rate <= alpha under continuous monitoring.

    Returns:
        An `ABTestResult`.
    """
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}.")
    z = ipw_pseudo_outcomes(y, a)
    T, d = z.shape
    times = jnp.arange(1, T + 1) if times is None else jnp.asarray(times)
    null = jnp.full((d,), 0.5, z.dtype)
    margin = check_finite(jnp.asarray(margin, z.dtype), "margin")  # concrete: raises now
    if is_traced(margin):  # tie the check to `z`: "any_changed" never reads the margin
        z = eqx.error_if(z, ~jnp.all(jnp.isfinite(margin)), "`margin` must be finite (no NaN/inf).")
    thresh = (2.0 - jnp.broadcast_to(margin, (d,))) / 4.0

    if rule == "any_changed" and kind in ("portfolio", "max_wealth", "bonferroni"):
        # exact and cheap: the wealth at the null point along the whole path
        ex = excluded_path(z, null, alpha, kind=kind, **region_kw)
        decided = ex[times - 1]
        regs = None
    else:
        regs = jax.vmap(lambda t: confidence_region(z, alpha, kind=kind, t=t, **region_kw))(times)
        if rule == "any_changed":
            decided = ~jax.vmap(lambda r: r.contains(null))(regs)
        else:
            decided = jnp.all(regs.lower > thresh[None, :], axis=1) & ~regs.empty
    stop = jnp.where(jnp.any(decided), times[jnp.argmax(decided)], -1)
    if regs is None:
        return ABTestResult(times, decided, stop, None, None)
    return ABTestResult(times, decided, stop, 4 * regs.lower - 2, 4 * regs.upper - 2)


class ModelComparison(NamedTuple):
    """Result of `compare_models`.

    Attributes:
        region: the confidence region for (E[s_a - s_b] + 1)/2.
        lower, upper: ``(d,)`` bounds on the mean score difference E[s_a - s_b] in [-1, 1].
        a_better, b_better: ``(d,)`` metrics where the difference is confidently > 0 / < 0.
    """

    region: ConfidenceRegion
    lower: Float[Array, " d"]
    upper: Float[Array, " d"]
    a_better: Bool[Array, " d"]
    b_better: Bool[Array, " d"]


def compare_models(
    scores_a: Float[Array, "T d"],
    scores_b: Float[Array, "T d"],
    alpha: float = 0.05,
    *,
    kind: str = "box_ellipsoid",
    **region_kw,
) -> ModelComparison:
    """Compare two models on d bounded metrics (scores in [0, 1]) with a time-uniform region.

    Per-example differences s_a - s_b lie in [-1, 1]^d and are rescaled by (s + 1)/2 to [0, 1]^d;
    the region for their mean is mapped back. Valid under continuous monitoring as examples
    stream in (evaluate again at any time, stop whenever).
    """
    if scores_a.shape != scores_b.shape:
        raise ValueError(
            f"scores_a and scores_b must have equal shapes, got {scores_a.shape}, {scores_b.shape}."
        )
    sa, sb = check_unit(scores_a, "scores_a"), check_unit(scores_b, "scores_b")
    z = (sa - sb + 1.0) / 2.0
    region = confidence_region(z, alpha, kind=kind, **region_kw)
    lo, hi = 2 * region.lower - 1, 2 * region.upper - 1
    return ModelComparison(region, lo, hi, (lo > 0) & ~region.empty, (hi < 0) & ~region.empty)
