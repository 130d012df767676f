"""Multivariate confidence regions: Bonferroni / max-wealth / portfolio lifts and outer
approximations.

Notation: K^j_t is the hedged wealth of coordinate j, w the simplex weights,
Kmin_j a certified lower bound on min_m K^j_t(m), c_j its argmin, g_j = K^j_t - Kmin_j and
kappa = 1/alpha - sum_j w_j Kmin_j.

- Bonferroni   B_t = prod_j {m_j : K^j_t(m_j) < 1/(alpha w_j)}
- max-wealth   M_t = {m : max_j w_j K^j_t(m_j) < 1/alpha}               (= B_t)
- portfolio    P_t = {m : sum_j w_j K^j_t(m_j) < 1/alpha}                (P_t in B_t)
- box          prod_j {m_j : w_j g_j(m_j) < kappa}                        (exact projection of P_t)
- ellipsoid    E_p = {m : sum_j ((|m_j - c_j| - delta)_+ / r_j^{+-})^p < 1} (P_t in E_p)
- box_ellipsoid  Box cap E_p.

References:
    Waudby-Smith, Ramdas. Estimating means of bounded random variables by betting. JRSSB 2024.
    Vovk, Wang. E-values: calibration, combination and applications. Ann. Stat. 2021.
"""

import dataclasses
import functools as ft
import math

import equinox as eqx
import jax
import jax.lax as lax
import jax.numpy as jnp
import jax.random as jr
from jax.scipy.special import gammaln, logsumexp
from jaxtyping import Array, Bool, Float, PRNGKeyArray

from ._betting import _agrapa_bets, _check_bet, _ons_bets, _prpl_bets, hedged_log_wealth_at
from ._checks import check_alpha, check_m, check_weights, check_x
from ._intervals import _cs_exact, _cs_grid, wealth_min_lower_bound

KINDS = (
    "bonferroni",
    "max_wealth",
    "portfolio",
    "box",
    "ellipsoid",
    "box_ellipsoid",
    "predmix_eb",
    "subgaussian_ball",
)
_CONVEX_ONLY = ("box", "ellipsoid", "box_ellipsoid")
DEFAULT_PS = (2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0, 48.0, 64.0)
_MC_MAX_DIM = 20
_CHUNK = 256


# ----------------------------------------------------------------------------- wealth at a point
def _coord_log_wealth_at(xj, lamj, m, mask, bet: str):
    """Log K^j_t(m) of one coordinate at one scalar m (exact, O(T))."""
    if bet == "hedged":
        return hedged_log_wealth_at(xj, lamj, m, mask)
    lam = _agrapa_bets(xj, m[None])[0] if bet == "agrapa" else _ons_bets(xj, m[None])[0]
    return jnp.sum(jnp.where(mask, jnp.log1p(lam * (xj - m)), 0.0))


def _log_wealths_at(x, lam, mask, m, bet: str):
    """(d,) per-coordinate log-wealth at the point m (d,)."""
    return jax.vmap(lambda xj, lj, mj: _coord_log_wealth_at(xj, lj, mj, mask, bet))(x.T, lam.T, m)


def _log_fft_prob_below_one(y: Float[Array, "d n"], num_bins: int) -> Float[Array, ""]:
    """Log P(sum_j Y_j < 1) for independent Y_j, each uniform over the n values of row j.

    Discretised densities on [0, 1] (``num_bins`` bins, nearest-bin rounding, mass at or above 1
    dropped) are convolved by FFT one coordinate at a time; the retained mass is renormalised
    each step and its log accumulated, so tiny probabilities in high d do not underflow.
    """
    n = y.shape[1]
    k = jnp.floor(jnp.where(jnp.isfinite(y), y, 2.0) * num_bins + 0.5).astype(jnp.int32)
    k = jnp.where(k >= num_bins, num_bins + 1, k)  # out of range -> dropped
    hist = jax.vmap(lambda kk: jnp.zeros((num_bins,), y.dtype).at[kk].add(1.0 / n, mode="drop"))(k)
    size = 2 * num_bins

    def step(carry, h):
        dens, logmass = carry
        conv = jnp.fft.irfft(jnp.fft.rfft(dens, size) * jnp.fft.rfft(h, size), size)[:num_bins]
        conv = jnp.clip(conv, 0.0, None)
        mass = jnp.sum(conv)
        ok = mass > 0
        dens = conv / jnp.where(ok, mass, 1.0)
        logmass = logmass + jnp.where(ok, jnp.log(jnp.where(ok, mass, 1.0)), -jnp.inf)
        return (dens, logmass), None

    init = (jnp.zeros((num_bins,), y.dtype).at[0].set(1.0), jnp.zeros((), y.dtype))
    (_, logmass), _ = lax.scan(step, init, hist)
    return logmass


def _unit_grid(n: int, dtype) -> Array:
    return (jnp.arange(n, dtype=dtype) + 0.5) / n


# ----------------------------------------------------------------------------- region object
class ConfidenceRegion(eqx.Module):
    """A confidence region for a mean in [0, 1]^d at one time t.

    Attributes:
        kind: which construction (see `confidence_region`).
        lower, upper: ``(d,)`` the coordinate-wise projection of the region (the region itself for
            the box-like kinds ``bonferroni``, ``max_wealth``, ``box``, ``predmix_eb``; the exact
            bounding box for ``portfolio`` and ``box_ellipsoid``).
        empty: True when the region is empty (possible with probability <= alpha).
        center: ``(d,)`` wealth minimisers c_j (betting kinds) or the sample mean (ball).
        r_plus, r_minus, p, delta: the l_p-ellipsoid (ellipsoid kinds; zeros otherwise).
        kappa: 1/alpha - sum_j w_j Kmin_j (betting kinds).
        radius: the l_2 radius of ``subgaussian_ball``.
    """

    kind: str = eqx.field(static=True)
    bet: str = eqx.field(static=True)
    lower: Float[Array, " d"]
    upper: Float[Array, " d"]
    empty: Bool[Array, ""]
    center: Float[Array, " d"]
    r_plus: Float[Array, " d"]
    r_minus: Float[Array, " d"]
    p: Float[Array, ""]
    delta: Float[Array, ""]
    kappa: Float[Array, ""]
    log_kmin: Float[Array, " d"]
    radius: Float[Array, ""]
    weights: Float[Array, " d"]
    alpha: Float[Array, ""]
    x: Float[Array, "T d"]
    lam: Float[Array, "T d"]
    mask: Bool[Array, " T"]

    @property
    def dim(self) -> int:
        """The dimension d."""
        return self.lower.shape[0]

    def as_kind(self, kind: str) -> "ConfidenceRegion":
        """The same construction read as another kind, without recomputation.

        A ``box_ellipsoid`` (or ``ellipsoid``) region holds the box, the ellipsoid and the
        portfolio data, so it can be read as ``"portfolio" | "box" | "ellipsoid" |
        "box_ellipsoid"``; a ``portfolio`` or ``box`` region as ``"portfolio" | "box"``.
        """
        family = ("portfolio", "box", "ellipsoid", "box_ellipsoid")
        allowed = family if self.kind in ("ellipsoid", "box_ellipsoid") else ("portfolio", "box")
        if self.kind not in family or kind not in allowed or self.bet != "hedged":
            raise ValueError(f"a {self.kind!r} region cannot be read as kind={kind!r}.")
        return dataclasses.replace(self, kind=kind)

    def log_wealths(self, m: Float[Array, " d"]) -> Float[Array, " d"]:
        """Exact per-coordinate log-wealth log K^j_t(m_j) (betting kinds)."""
        return _log_wealths_at(self.x, self.lam, self.mask, m, self.bet)

    def _in_box(self, m):
        return jnp.all((m > self.lower) & (m < self.upper))

    def _ellipsoid_stat(self, m):
        dev = m - self.center
        r = jnp.where(dev >= 0, self.r_plus, self.r_minus)
        a = jnp.clip(jnp.abs(dev) - self.delta, 0.0, None)
        term = jnp.where(jnp.isinf(r), 0.0, a / jnp.where(jnp.isinf(r), 1.0, r))
        return jnp.sum(term**self.p)

    def contains(self, m: Float[Array, " d"]) -> Bool[Array, ""]:
        """Whether the candidate mean ``m`` (``(d,)``) lies in the region (vmap over m)."""
        if m.shape != self.lower.shape:
            raise ValueError(f"m must have shape {self.lower.shape}, got {m.shape}.")
        m = m.astype(self.lower.dtype)
        kind = self.kind
        if kind in ("bonferroni", "box", "predmix_eb"):
            out = self._in_box(m)
        elif kind == "max_wealth":
            lw = self.log_wealths(m) + jnp.log(self.weights)
            out = jnp.max(lw) < -jnp.log(self.alpha)
        elif kind == "portfolio":
            lw = self.log_wealths(m) + jnp.log(self.weights)
            out = logsumexp(lw) < -jnp.log(self.alpha)
        elif kind == "ellipsoid":
            out = self._ellipsoid_stat(m) < 1
        elif kind == "box_ellipsoid":
            out = self._in_box(m) & (self._ellipsoid_stat(m) < 1)
        else:  # subgaussian_ball
            out = jnp.sum((m - self.center) ** 2) <= self.radius**2
        return out & ~self.empty

    def log_volume(
        self, *, key: PRNGKeyArray | None = None, n_mc: int = 20000, num_bins: int = 4096
    ) -> Float[Array, ""]:
        """Log Lebesgue volume of the region (``-inf`` when empty).

        Closed forms for boxes, the l_p-ellipsoid (asymmetric radii, the shift delta bounded
        by convexity) and the ball. ``portfolio`` and ``box_ellipsoid`` have none:
        vol = vol(Box) P(sum_j Y_j < 1) with U_j ~ Unif(I_j) independent; by Monte Carlo when
        ``key`` is given and d <= 20, otherwise by FFT convolution of the discretised Y_j.
        """
        return _log_volume(self, key, n_mc, num_bins)

    def _log_volume_impl(self, key, n_mc: int, num_bins: int) -> Float[Array, ""]:
        d = self.dim
        dtype = self.lower.dtype
        kind = self.kind
        neg_inf = jnp.asarray(-jnp.inf, dtype)
        log_box = jnp.sum(jnp.log(jnp.clip(self.upper - self.lower, 0.0, None)))
        if kind in ("bonferroni", "max_wealth", "box", "predmix_eb"):
            return jnp.where(self.empty, neg_inf, log_box)
        if kind == "subgaussian_ball":
            return (d / 2) * math.log(math.pi) + d * jnp.log(self.radius) - gammaln(d / 2 + 1)
        if kind == "ellipsoid":
            return jnp.where(self.empty, neg_inf, _ellipsoid_log_volume(self))
        if key is not None and d <= _MC_MAX_DIM:
            u = jr.uniform(key, (n_mc, d), dtype)
            pts = self.lower[None, :] + u * (self.upper - self.lower)[None, :]
            inside = lax.map(self.contains, pts, batch_size=_CHUNK)
            frac = jnp.mean(inside.astype(dtype))
            return jnp.where(self.empty, neg_inf, log_box + jnp.log(frac))
        y = self._y_on_grid(num_bins)
        return jnp.where(self.empty, neg_inf, log_box + _log_fft_prob_below_one(y, num_bins))

    def _y_on_grid(self, n: int) -> Float[Array, "d n"]:
        """Y_j evaluated on n stratified points of I_j (the FFT volume route)."""
        q = _unit_grid(n, self.lower.dtype)
        u = self.lower[:, None] + q[None, :] * (self.upper - self.lower)[:, None]
        if self.kind == "box_ellipsoid":
            return _ellipsoid_terms(u, self.center, self.r_plus, self.r_minus, self.p, self.delta)
        if self.bet != "hedged":
            raise ValueError(
                "the portfolio volume needs the exact box, i.e. bet='hedged'; "
                f"got bet={self.bet!r}. Pass key= for Monte Carlo (d <= 20)."
            )

        def per_coord(args):
            xj, lj, uj, kmin, w = args
            lw = jax.vmap(lambda mm: hedged_log_wealth_at(xj, lj, mm, self.mask))(uj)
            return w * jnp.clip(jnp.exp(lw) - jnp.exp(kmin), 0.0, None) / self.kappa

        return lax.map(per_coord, (self.x.T, self.lam.T, u, self.log_kmin, self.weights))


@eqx.filter_jit
def _log_volume(region: ConfidenceRegion, key, n_mc: int, num_bins: int) -> Float[Array, ""]:
    return region._log_volume_impl(key, n_mc, num_bins)


def _ellipsoid_terms(u, c, r_plus, r_minus, p, delta):
    """((|u - c| - delta)_+ / r^{sign})^p, elementwise over u ``(d, n)``; infinite r gives 0."""
    dev = u - c[:, None]
    r = jnp.where(dev >= 0, r_plus[:, None], r_minus[:, None])
    a = jnp.clip(jnp.abs(dev) - delta, 0.0, None)
    finite = jnp.isfinite(r)
    return jnp.where(finite, (a / jnp.where(finite, r, 1.0)) ** p, 0.0)


def _ellipsoid_log_volume(region: ConfidenceRegion) -> Float[Array, ""]:
    """V = Gamma(1+1/p)^d / Gamma(1+d/p) prod_j (R_j^+ + R_j^-) with the shift-inflated radii.

    The shifted E_p is the Minkowski sum of the unshifted one and [-delta, delta]^d; by convexity
    of t^p it lies in the ellipsoid with radii (r + delta)(1 + (d-1) delta/(r_min + delta))^(1/p).
    """
    d = region.dim
    p, delta = region.p, region.delta
    r_min = jnp.minimum(jnp.min(region.r_plus), jnp.min(region.r_minus))
    infl = jnp.log1p((d - 1) * delta / (r_min + delta)) / p
    log_sum_r = jnp.log(region.r_plus + delta + region.r_minus + delta) + infl
    return d * gammaln(1 + 1 / p) - gammaln(1 + d / p) + jnp.sum(log_sum_r)


# ----------------------------------------------------------------------------- construction
def _prefix_mask(T: int, t) -> Bool[Array, " T"]:
    steps = jnp.arange(1, T + 1)
    return steps <= (T if t is None else t)


def _bets(x, alpha_b, bet: str):
    if bet == "hedged":
        return jax.vmap(_prpl_bets, in_axes=(1, 0), out_axes=1)(x, alpha_b)
    return jnp.zeros_like(x)  # m-dependent bets are recomputed at each candidate mean


def _coord_min(x, lam, mask):
    """Per coordinate: certified lower bound on log Kmin and the argmin (exact mode)."""

    def one(args):
        xj, lj = args
        return wealth_min_lower_bound(lambda m: hedged_log_wealth_at(xj, lj, m, mask), x.dtype)

    return lax.map(one, (x.T, lam.T))


def _coord_intervals(x, lam, mask, level, center):
    def one(args):
        xj, lj, lev, c = args
        lo, hi, emp = _cs_exact(lambda m: hedged_log_wealth_at(xj, lj, m, mask), lev, c)
        return lo, hi, emp

    return lax.map(one, (x.T, lam.T, level, center))


def _grid_intervals(x, mask, alpha_b, level, bet: str, grid_size: int):
    grid = jnp.arange(grid_size + 1, dtype=x.dtype) / grid_size

    def one(args):
        xj, lev, ab = args
        lw = jax.vmap(lambda mm: _coord_log_wealth_at(xj, _prpl_bets(xj, ab), mm, mask, bet))(grid)
        return _cs_grid(lw, grid, lev)

    return lax.map(one, (x.T, level, alpha_b))


def _q_grid(n_geo: int, n_lin: int, dtype) -> Array:
    geo = jnp.geomspace(1e-6, 1.0, n_geo, dtype=dtype)
    lin = jnp.linspace(0.0, 1.0, n_lin + 1, dtype=dtype)[1:]
    return jnp.concatenate([geo, lin])


def _ellipsoid_radii(x, lam, mask, lower, upper, center, log_kmin, w, kappa, ps, delta, safety, q):
    """r_j^{+-}(p) for every p: (kappa/(w_j a_j^{+-}(p)))^(1/p), a = (1-safety) min_u
    g/(u-delta)^p.
    """
    ps_arr = jnp.asarray(ps, x.dtype)
    log_kappa = jnp.log(jnp.where(kappa > 0, kappa, 1.0))

    def one(args):
        xj, lj, lo, hi, c, lkmin, wj = args
        kmin = jnp.exp(lkmin)

        def side(h, sgn):
            span = h - delta
            du = jnp.clip(span, 0.0, None) * q  # u - delta
            m = jnp.clip(c + sgn * (delta + du), 0.0, 1.0)
            lw = jax.vmap(lambda mm: hedged_log_wealth_at(xj, lj, mm, mask))(m)
            g = jnp.clip(jnp.exp(lw) - kmin, 0.0, None)
            log_g = jnp.log(g)  # -inf where g == 0 -> a = 0 -> r = inf (no constraint)
            log_du = jnp.log(jnp.where(du > 0, du, 1.0))
            log_ratio = log_g[None, :] - ps_arr[:, None] * log_du[None, :]
            log_a = jnp.min(log_ratio, axis=1) + jnp.log1p(-safety)
            log_r = (log_kappa - jnp.log(wj) - log_a) / ps_arr
            r = jnp.exp(log_r)
            return jnp.where(span > 0, r, jnp.inf)

        return side(hi - c, 1.0), side(c - lo, -1.0)

    r_plus, r_minus = lax.map(one, (x.T, lam.T, lower, upper, center, log_kmin, w))
    return r_plus.T, r_minus.T  # (P, d)


@ft.partial(
    jax.jit,
    static_argnames=("group", "bet", "grid_size", "ps", "n_geo", "n_lin", "num_bins", "compat"),
)
def _build(
    x,
    alpha,
    w,
    t,
    max_form,
    *,
    group,
    bet,
    grid_size,
    ps,
    delta,
    safety,
    n_geo,
    n_lin,
    num_bins,
    rho,
    compat,
):
    """The arrays of a region; ``group`` shares one compilation between kinds of equal maths."""
    T, d = x.shape
    dtype = x.dtype
    mask = _prefix_mask(T, t)
    alpha_b = alpha * w
    lam = _bets(x, alpha_b, bet)
    zeros = jnp.zeros((d,), dtype)
    scal0 = jnp.zeros((), dtype)
    fields = dict(
        center=zeros,
        r_plus=zeros,
        r_minus=zeros,
        p=scal0,
        delta=scal0,
        kappa=scal0,
        log_kmin=zeros,
        radius=scal0,
        weights=w,
        alpha=jnp.asarray(alpha, dtype),
        x=x,
        lam=lam,
        mask=mask,
    )
    if group == "predmix_eb":
        from ._baselines import predmix_eb_bounds

        lo, hi = predmix_eb_bounds(x, alpha_b, mask, compat)
        return dict(lower=lo, upper=hi, empty=jnp.any(lo >= hi), **fields)
    if group == "subgaussian_ball":
        from ._baselines import subgaussian_ball_params

        center, radius = subgaussian_ball_params(x, alpha, mask, rho)
        fields.update(center=center, radius=radius)
        return dict(
            lower=center - radius, upper=center + radius, empty=jnp.asarray(False), **fields
        )

    if bet != "hedged":
        # m-dependent bets: grid mode for the Bonferroni box (valid for every lift's projection
        # up to one grid step); portfolio / max-wealth membership is exact.
        level = -jnp.log(alpha_b)
        lo, hi = _grid_intervals(x, mask, alpha_b, level, bet, grid_size)
        return dict(lower=lo, upper=hi, empty=jnp.asarray(False), **fields)

    log_kmin, center = _coord_min(x, lam, mask)
    fields.update(center=center, log_kmin=log_kmin)
    if group == "bonferroni":
        # Bonferroni: log K_j < log(1/(alpha w_j)); max-wealth: log K_j + log w_j < log(1/alpha).
        # The same set, computed from the two written forms (the identity is a test).
        shift = jnp.where(max_form, jnp.log(w), 0.0)
        level = jnp.where(max_form, -jnp.log(alpha), -jnp.log(alpha_b))

        def one(args):
            xj, lj, c, sh, lev = args
            f = lambda m: hedged_log_wealth_at(xj, lj, m, mask) + sh  # noqa: E731
            return _cs_exact(f, lev, c)

        lo, hi, emp = lax.map(one, (x.T, lam.T, center, shift, level))
        return dict(lower=lo, upper=hi, empty=jnp.any(emp), **fields)

    kappa = 1 / alpha - jnp.sum(w * jnp.exp(log_kmin))
    empty = ~(kappa > 0)
    safe_kappa = jnp.where(empty, 1.0, kappa)
    level = jnp.log(jnp.exp(log_kmin) + safe_kappa / w)
    lo, hi, _ = _coord_intervals(x, lam, mask, level, center)
    lo, hi = jnp.where(empty, center, lo), jnp.where(empty, center, hi)
    fields.update(kappa=kappa)
    if group == "box":
        return dict(lower=lo, upper=hi, empty=empty, **fields)

    # l_p ellipsoid: radii for every p, keep the p minimising vol(E_p cap Box) (FFT route).
    q = _q_grid(n_geo, n_lin, dtype)
    r_plus, r_minus = _ellipsoid_radii(
        x, lam, mask, lo, hi, center, log_kmin, w, safe_kappa, ps, delta, safety, q
    )
    ps_arr = jnp.asarray(ps, dtype)
    u = lo[:, None] + _unit_grid(num_bins, dtype)[None, :] * (hi - lo)[:, None]
    log_probs = jax.vmap(
        lambda rp, rm, p: _log_fft_prob_below_one(
            _ellipsoid_terms(u, center, rp, rm, p, delta), num_bins
        )
    )(r_plus, r_minus, ps_arr)
    best = jnp.argmin(log_probs)
    fields.update(
        r_plus=r_plus[best], r_minus=r_minus[best], p=ps_arr[best], delta=jnp.asarray(delta, dtype)
    )
    return dict(lower=lo, upper=hi, empty=empty, **fields)


_GROUPS = {
    "bonferroni": "bonferroni",
    "max_wealth": "bonferroni",
    "portfolio": "box",
    "box": "box",
    "ellipsoid": "ellipsoid",
    "box_ellipsoid": "ellipsoid",
    "predmix_eb": "predmix_eb",
    "subgaussian_ball": "subgaussian_ball",
}


def confidence_region(
    x: Float[Array, "T d"],
    alpha: float = 0.05,
    *,
    kind: str,
    weights: Float[Array, " d"] | None = None,
    bet: str = "hedged",
    t: int | Array | None = None,
    ps: tuple[float, ...] = DEFAULT_PS,
    delta: float = 1e-7,
    safety: float = 1e-3,
    grid_size: int = 1000,
    n_u: tuple[int, int] = (2000, 2000),
    num_bins: int = 4096,
    rho: float | None = None,
    confseq_compat: bool = False,
) -> ConfidenceRegion:
    """Time-uniform (1 - alpha) confidence region for the mean of x in [0, 1]^d at time t.

    Kinds (w = ``weights``, default 1/d; every betting kind uses hedged PrPl bets tuned to
    alpha w_j per coordinate, so all lifts share the same wealth processes):

    - ``"bonferroni"``: prod_j {m_j : K^j_t(m_j) < 1/(alpha w_j)}.
    - ``"max_wealth"``: {m : max_j w_j K^j_t(m_j) < 1/alpha}; the same set as Bonferroni.
    - ``"portfolio"``: {m : sum_j w_j K^j_t(m_j) < 1/alpha}; valid because sum_j w_j K^j_t(mu_j)
      is a nonnegative martingale with initial value 1 (Ville). ``lower``/``upper`` give its exact
      bounding box.
    - ``"box"``: prod_j {m_j : w_j (K^j_t(m_j) - Kmin_j) < kappa}, the exact projection of P_t
      (computed with a certified lower bound on Kmin_j, so it can only be larger).
    - ``"ellipsoid"``: the l_p-ellipsoid E_p containing P_t (outer approximation); p is chosen from
      ``ps`` to minimise vol(E_p cap Box), which keeps validity as P_t is in E_p for every p.
    - ``"box_ellipsoid"``: Box cap E_p.
    - ``"predmix_eb"``: baseline, Bonferroni of predictable-mixture empirical-Bernstein CSs.
    - ``"subgaussian_ball"``: baseline, the sub-Gaussian (sigma^2 = d/4) normal-mixture ball.

    Set relations: P in Box cap E_p in Box in B = M, and P in E_p; for d = 1 P = Box = B.

    Args:
        x: observations in [0, 1], shape ``(T, d)``.
        alpha: level in (0, 1).
        kind: one of the kinds above.
        weights: simplex weights ``(d,)``.
        bet: ``"hedged"`` (exact mode). ``"agrapa"``/``"ons"`` (m-dependent bets) are allowed for
            ``bonferroni`` (grid mode), ``max_wealth`` and ``portfolio`` (exact membership; their
            ``lower``/``upper`` are then the grid-mode Bonferroni box).
        t: use the first t observations (may be traced, so one compilation serves every t;
            vmap over t for a path). Default T.
        ps, delta, safety, n_u: the ellipsoid construction (see ``"ellipsoid"``).
        grid_size: grid of the m-dependent bets.
        num_bins: FFT bins for the p selection.
        rho: prior precision of the sub-Gaussian ball (default 100 d/4).
        confseq_compat: ``predmix_eb`` with ``confseq``'s variance convention (plain running mean,
            starting at 0).

    Returns:
        A `ConfidenceRegion` with ``contains(m)``, ``log_volume(key=...)``, ``lower``, ``upper``.

    References:
        Waudby-Smith, Ramdas (2024); Vovk, Wang (2021); Howard et al. (2021) for the ball.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}.")
    _check_bet(bet)
    if bet != "hedged" and kind in _CONVEX_ONLY + ("predmix_eb", "subgaussian_ball"):
        raise ValueError(
            f"kind={kind!r} needs the convex (m-independent) hedged wealth: bet must be 'hedged', "
            f"got bet={bet!r}."
        )
    x = check_x(x)
    alpha = jnp.asarray(check_alpha(alpha), x.dtype)
    w = check_weights(weights, x.shape[1], x.dtype)
    if t is not None and not isinstance(t, jax.core.Tracer):
        if not (1 <= int(t) <= x.shape[0]):
            raise ValueError(f"t must lie in [1, T] = [1, {x.shape[0]}], got {t}.")
    if any(p < 2 for p in ps):
        raise ValueError(f"ps must all be >= 2 (g grows quadratically near c_j), got {ps}.")
    if not 0.0 <= delta < 1.0:
        raise ValueError(f"`delta` must lie in [0, 1), got {delta}.")
    if not 0.0 <= safety < 1.0:
        raise ValueError(f"`safety` must lie in [0, 1), got {safety}.")
    group = _GROUPS[kind] if bet == "hedged" else "grid"
    fields = _build(
        x,
        alpha,
        w,
        jnp.asarray(x.shape[0] if t is None else t),
        jnp.asarray(kind == "max_wealth"),
        group=group,
        bet=bet,
        grid_size=grid_size,
        ps=tuple(float(p) for p in ps),
        delta=delta,
        safety=safety,
        n_geo=n_u[0],
        n_lin=n_u[1],
        num_bins=num_bins,
        rho=rho,
        compat=confseq_compat,
    )
    return ConfidenceRegion(kind=kind, bet=bet, **fields)


def region_log_wealth(
    x: Float[Array, "T d"],
    m: Float[Array, " d"],
    alpha: float = 0.05,
    *,
    weights: Float[Array, " d"] | None = None,
) -> Float[Array, " T"]:
    """Log of the portfolio wealth sum_j w_j K^j_t(m_j) along t (hedged bets); an e-process at
    mu.
    """
    from ._betting import log_wealth

    x = check_x(x)
    m = check_m(m, x)
    w = check_weights(weights, x.shape[1], x.dtype)
    lw = log_wealth(x, m, alpha=alpha, weights=w)
    return logsumexp(lw + jnp.log(w)[None, :], axis=1)
