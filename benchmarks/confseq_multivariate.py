"""Multivariate betting confidence sequences: coverage, effective width vs d and t, A/B stopping,
and the 1-D CS speed against the peer ``confseq`` (Waudby-Smith & Ramdas betting CSs).
"""

import functools as ft
import math
import time
import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from jaxgen.confseq import (
    ab_test,
    betting_cs,
    confidence_region,
    excluded_path,
    predmix_eb_bonferroni,
    subgaussian_ball,
)

NAME = "confseq_multivariate"
PAPER = "lifts of one-dimensional betting confidence sequences to bounded vector means"

CONFIGS = {
    "quick": {
        "alpha": 0.05,
        "T": 1000,
        "dims": [1, 2, 5, 10, 20, 50],
        "coverage_dims": [1, 5, 20],
        "coverage_runs": 500,
        "volume_runs": 1,
        "times": [50, 200, 1000],
        "width_t": 500,
        "width_vs_t_dim": 10,
        "n_u": [200, 200],
        "num_bins": 1024,
        "setrel_dims": [2, 5, 10],
        "setrel_points": 2000,
        "ab_T": 10000,
        "ab_every": 1000,
        "speed_T": 10000,
        "speed_grid": 1000,
        "device_sampling": False,
    },
    "full": {
        "alpha": 0.05,
        "T": 100000,
        "dims": [1, 2, 5, 10, 20, 50, 100, 200, 500],
        "coverage_dims": [1, 5, 20, 100, 500],
        "coverage_runs": 10000,
        "volume_runs": 20,
        "times": [100, 1000, 10000, 100000],
        "width_t": 10000,
        "width_vs_t_dim": 50,
        "n_u": [2000, 2000],
        "num_bins": 4096,
        "setrel_dims": [2, 5, 10, 20],
        "setrel_points": 20000,
        "ab_T": 50000,
        "ab_every": 500,
        "speed_T": 10000,
        "speed_grid": 1000,
        "device_sampling": True,
    },
}

# --full --smoke: the full configuration's code path, every size cut to the least that runs.
SMOKE = {
    "T": 200,
    "dims": [1, 2, 5],
    "coverage_dims": [1, 5],
    "coverage_runs": 20,
    "volume_runs": 2,
    "times": [100, 200],
    "width_t": 100,
    "width_vs_t_dim": 5,
    "n_u": [50, 50],
    "num_bins": 64,
    "setrel_dims": [2],
    "setrel_points": 100,
    "ab_T": 200,
    "ab_every": 50,
    "speed_T": 200,
    "speed_grid": 20,
}

BETTING = ("bonferroni", "box", "ellipsoid", "box_ellipsoid", "portfolio")
ALL_KINDS = BETTING + ("predmix_eb", "subgaussian_ball")


# ----------------------------------------------------------------------------- data
DISTS = ("bernoulli", "beta", "correlated")


def true_mean(d: int):
    return jnp.linspace(0.2, 0.8, d) if d > 1 else jnp.array([0.5])


def _gamma_int(key, shape, a: int):
    """Gamma(a, 1) for an integer shape a, exactly, as a sum of a exponentials (cheap on CPU,
    where ``jax.random.beta``'s rejection sampler costs microseconds per draw).
    """
    return -jnp.sum(jnp.log(jr.uniform(key, (a, *shape), minval=1e-300)), axis=0)


def sample_one(dist, key, T: int, d: int):
    """One (T, d) data set in [0, 1]; ``dist`` indexes DISTS (may be traced).

    (i) independent Bernoulli(mu_j); (ii) Beta(8, 8) shifted by mu_j - 1/2 and clipped;
    (iii) correlated Bernoulli via a Gaussian copula with rho = 0.5. mu_j evenly spaced in
    [0.2, 0.8].
    """
    mu = true_mean(d)

    def bernoulli(k):
        return (jr.uniform(k, (T, d)) < mu[None, :]).astype(mu.dtype)

    def beta(k):
        k1, k2 = jr.split(k)
        g1, g2 = _gamma_int(k1, (T, d), 8), _gamma_int(k2, (T, d), 8)
        return jnp.clip(g1 / (g1 + g2) + mu[None, :] - 0.5, 0.0, 1.0)

    def correlated(k):
        k1, k2 = jr.split(k)
        z = math.sqrt(0.5) * jr.normal(k1, (T, 1)) + math.sqrt(0.5) * jr.normal(k2, (T, d))
        return (z < jax.scipy.special.ndtri(mu)[None, :]).astype(mu.dtype)

    return jax.lax.switch(dist, (bernoulli, beta, correlated), key)


def sample(dist: str, key, R: int, T: int, d: int):
    """(R, T, d) data and its mean."""
    keys = jr.split(key, R)
    x = jax.vmap(lambda k: sample_one(DISTS.index(dist), k, T, d))(keys)
    return x, true_mean(d)


COVERAGE_KINDS = ("portfolio", "max_wealth", "predmix_eb", "subgaussian_ball")


def _misses(x, mu, alpha):
    return jnp.stack([jnp.any(excluded_path(x, mu, alpha, kind=k)) for k in COVERAGE_KINDS])


@ft.partial(jax.jit, static_argnames=("R", "T", "d", "chunk"))
def coverage_study(key, dist, alpha, *, R: int, T: int, d: int, chunk: int):
    """(4,) time-uniform miscoverage rates over R runs with the data drawn on the device: ONE
    compiled call per d for the whole R x T x d study (runs vmapped in chunks of ``chunk`` so
    that the GPU configuration's R x T x d never sits in memory at once).
    """
    mu = true_mean(d)
    keys = jr.split(key, R).reshape(R // chunk, chunk)

    def one_chunk(ks):
        return jax.vmap(lambda k: _misses(sample_one(dist, k, T, d), mu, alpha))(ks)

    miss = jax.lax.map(one_chunk, keys)
    return jnp.mean(miss.reshape(R, len(COVERAGE_KINDS)).astype(mu.dtype), axis=0)


@ft.partial(jax.jit, static_argnames=("chunk",))
def coverage_from_data(x, alpha, *, chunk: int):
    """The same study on given (R, T, d) data (CPU route: numpy draws Beta(8, 8) ~100x faster
    than ``jax.random`` on CPU, so quick mode ships host-drawn data into one compiled call).
    """
    R, T, d = x.shape
    mu = true_mean(d)
    miss = jax.lax.map(
        jax.vmap(lambda xr: _misses(xr, mu, alpha)), x.reshape(R // chunk, chunk, T, d)
    )
    return jnp.mean(miss.reshape(R, len(COVERAGE_KINDS)).astype(mu.dtype), axis=0)


def sample_numpy(dist: str, rng, R: int, T: int, d: int):
    """``sample_one``'s three distributions drawn on the host, shape (R, T, d)."""
    mu = np.asarray(true_mean(d))
    if dist == "bernoulli":
        return (rng.random((R, T, d)) < mu).astype(np.float64)
    if dist == "beta":
        return np.clip(rng.beta(8.0, 8.0, (R, T, d)) + mu - 0.5, 0.0, 1.0)
    z = math.sqrt(0.5) * rng.standard_normal((R, T, 1)) + math.sqrt(0.5) * rng.standard_normal(
        (R, T, d)
    )
    from scipy.special import ndtri

    return (z < ndtri(mu)).astype(np.float64)


def _chunk(R: int, T: int, d: int, budget: int = 25_000_000) -> int:
    """Largest divisor of R whose chunk of data stays under ``budget`` numbers."""
    c = max(1, min(R, budget // (T * d)))
    while R % c:
        c -= 1
    return c


# ----------------------------------------------------------------------------- widths
@ft.partial(eqx.filter_jit)
def _widths_jit(x, alpha, t, n_u, num_bins):
    """Log-volumes of every region at time t, one compiled call per d."""
    d = x.shape[1]
    be = confidence_region(x, alpha, kind="box_ellipsoid", n_u=n_u, num_bins=num_bins, t=t)
    bonf = confidence_region(x, alpha, kind="bonferroni", t=t)
    lv = {
        "bonferroni": bonf.log_volume(),
        "box": be.as_kind("box").log_volume(),
        "ellipsoid": be.as_kind("ellipsoid").log_volume(),
        "box_ellipsoid": be.log_volume(num_bins=num_bins),
        "portfolio": be.as_kind("portfolio").log_volume(num_bins=num_bins),
    }
    pm = predmix_eb_bonferroni(x, alpha)[t - 1]
    lv["predmix_eb"] = jnp.sum(jnp.log(pm[:, 1] - pm[:, 0]))
    _, radius = subgaussian_ball(x, alpha)
    r = radius[t - 1]
    lv["subgaussian_ball"] = (d / 2) * math.log(math.pi) + d * jnp.log(r) - math.lgamma(d / 2 + 1)
    return lv, be, bonf


def widths_at(x, alpha, t, cfg, key):
    """Effective widths vol^(1/d) of every region at time t (one data set)."""
    d = x.shape[1]
    lv, be, bonf = _widths_jit(
        x, jnp.asarray(alpha, x.dtype), jnp.asarray(t), tuple(cfg["n_u"]), cfg["num_bins"]
    )
    out = {k: float(jnp.exp(v / d)) for k, v in lv.items()}
    out["p"] = float(be.p)
    out["empty"] = bool(be.empty)
    return out, (be, bonf)


@ft.partial(eqx.filter_jit)
def _memberships(be, bonf, pts):
    P = jax.lax.map(be.as_kind("portfolio").contains, pts, batch_size=256)
    BE = jax.vmap(be.contains)(pts)
    E = jax.vmap(be.as_kind("ellipsoid").contains)(pts)
    BX = jax.vmap(be.as_kind("box").contains)(pts)
    B = jax.vmap(bonf.contains)(pts)
    viol = jnp.sum(P & ~BE) + jnp.sum(P & ~E) + jnp.sum(BE & ~BX) + jnp.sum(BX & ~B)
    return viol, jnp.sum(P)


def set_relation_violations(be, bonf, key, n):
    """Count MC points (uniform in the Bonferroni box) breaking P in BoxE in Box in B, P in E."""
    d = bonf.dim
    pts = bonf.lower[None, :] + jr.uniform(key, (n, d)) * (bonf.upper - bonf.lower)[None, :]
    viol, inside = _memberships(be, bonf, pts)
    return int(viol), int(inside)


# ----------------------------------------------------------------------------- peer
def import_confseq():
    """The peer, with the ``np.float_`` alias it still needs under NumPy 2 (benchmark only)."""
    if not hasattr(np, "float_"):
        np.float_ = np.float64
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import confseq.betting
        import confseq.predmix
    return confseq


def run(config, key, rec):
    # The confidence-sequence code wants float64 (wealth products over long streams, bisection to
    # 1e-12); the benchmark turns it on for its own body only (jaxgen never flips the switch).
    with jax.enable_x64(True):
        _run(config, key, rec)


def _run(config, key, rec):
    alpha, T = config["alpha"], config["T"]
    k_cov, k_vol, k_set, k_ab, k_speed = jr.split(key, 5)
    walls, t_sec = {}, time.perf_counter()

    # ------------------------------------------------------------------ coverage
    names = ("portfolio", "bonferroni", "predmix_eb", "subgaussian_ball")
    R = config["coverage_runs"]
    se = math.sqrt(alpha * (1 - alpha) / R)
    table, worst = {}, {n: 1.0 for n in names}
    for i, dist in enumerate(rec.progress(DISTS, desc="coverage")):
        for d in config["coverage_dims"]:
            chunk = _chunk(R, T, d)
            if config["device_sampling"]:
                miss = coverage_study(
                    jr.fold_in(k_cov, 100 * d + i),
                    jnp.asarray(i),
                    alpha,
                    R=R,
                    T=T,
                    d=d,
                    chunk=chunk,
                )
            else:
                seed = int(jr.randint(jr.fold_in(k_cov, 100 * d + i), (), 0, 2**31 - 1))
                x = sample_numpy(dist, np.random.default_rng(seed), R, T, d)
                miss = coverage_from_data(jnp.asarray(x), alpha, chunk=chunk)
                del x
            miss = np.asarray(miss)
            for n, m in zip(names, miss, strict=True):
                table[f"{dist}_d{d}_{n}"] = 1 - float(m)
                worst[n] = min(worst[n], 1 - float(m))
    rec.metric("coverage_table", table)
    rec.metric("coverage_mc_se", se)
    threshold = 1 - alpha - 3 * se
    for n in names:
        rec.claim(
            f"coverage_{n}",
            f"time-uniform coverage of {n} (min over data sets and d, "
            f"R={R}, T={T}) >= 1 - alpha - 3 s.e. (s.e. {se:.4f})",
            worst[n],
            ">=",
            threshold,
        )
    rec.claim(
        "coverage_box_ellipsoid",
        "time-uniform coverage of Box cap E_p >= 1 - alpha - 3 s.e. (implied by the "
        "portfolio's, since P is inside Box cap E_p; checked by setrel_violations)",
        worst["portfolio"],
        ">=",
        threshold,
    )

    walls["coverage"], t_sec = time.perf_counter() - t_sec, time.perf_counter()
    rec.metric("section_wall_s", dict(walls))
    # ------------------------------------------------------------------ widths vs d and t
    n_runs = config["volume_runs"]
    tw = config["width_t"]
    vs_d = {k: [] for k in ALL_KINDS}
    chosen_p = []
    setrel, setrel_inside = 0, 0
    for d in rec.progress(config["dims"], desc="width vs d"):
        acc = {k: [] for k in ALL_KINDS}
        for r in range(n_runs):
            kk = jr.fold_in(k_vol, 1000 * d + r)
            x, _ = sample("beta", kk, 1, T, d)
            w, (be, bonf) = widths_at(x[0], alpha, tw, config, kk)
            for k in ALL_KINDS:
                acc[k].append(w[k])
            chosen_p.append(w["p"])
            if r == 0 and d in config["setrel_dims"]:
                v, inside = set_relation_violations(
                    be, bonf, jr.fold_in(k_set, d), config["setrel_points"]
                )
                setrel += v
                setrel_inside += inside
        for k in ALL_KINDS:
            vs_d[k].append(float(np.mean(acc[k])))
    rec.metric("effwidth_vs_d", {"d": config["dims"], "t": tw, **vs_d})
    rec.metric("ellipsoid_p_chosen", chosen_p)

    dv = config["width_vs_t_dim"]
    vs_t = {k: [] for k in ALL_KINDS}
    for t in rec.progress(config["times"], desc="width vs t"):
        acc = {k: [] for k in ALL_KINDS}
        for r in range(n_runs):
            kk = jr.fold_in(k_vol, 1000 * dv + r)  # same data sets as the d = dv column
            x, _ = sample("beta", kk, 1, T, dv)
            w, _ = widths_at(x[0], alpha, t, config, kk)
            for k in ALL_KINDS:
                acc[k].append(w[k])
        for k in ALL_KINDS:
            vs_t[k].append(float(np.mean(acc[k])))
    rec.metric("effwidth_vs_t", {"t": config["times"], "d": dv, **vs_t})

    dims = config["dims"]
    i50 = dims.index(50) if 50 in dims else len(dims) - 1
    i20 = dims.index(20) if 20 in dims else len(dims) - 1
    i10 = dims.index(10) if 10 in dims else len(dims) - 1
    rec.claim(
        "setrel_violations",
        "MC points breaking P in Box cap E_p in Box in Bonferroni or "
        f"P in E_p (d in {config['setrel_dims']}, {setrel_inside} points in P)",
        setrel,
        "==",
        0,
    )
    rec.claim(
        "effwidth_ratio_boxE_vs_bonf_d50",
        f"Box cap E_p effective width at d = {dims[i50]} over Bonferroni's (t = {tw})",
        vs_d["box_ellipsoid"][i50] / vs_d["bonferroni"][i50],
        "<=",
        0.9,
    )
    rec.claim(
        "effwidth_ratio_boxE_vs_portfolio_d20",
        f"Box cap E_p effective width over the portfolio region's at d = {dims[i20]}",
        vs_d["box_ellipsoid"][i20] / vs_d["portfolio"][i20],
        "<=",
        1.10,
    )
    rec.claim(
        "effwidth_ratio_subgauss_vs_boxE_d10",
        f"sub-Gaussian ball effective width over Box cap E_p's at d = {dims[i10]}",
        vs_d["subgaussian_ball"][i10] / vs_d["box_ellipsoid"][i10],
        ">=",
        2.0,
    )
    ratios = [vs_d["subgaussian_ball"][i] / vs_d[k][i] for i in range(len(dims)) for k in BETTING]
    rec.claim(
        "subgauss_larger_than_every_betting_region",
        "min over d and betting regions of (ball width / region width)",
        min(ratios),
        ">",
        1.0,
    )

    with rec.figure("width", ncols=2, figsize=(11, 4.2)) as (fig, axes):
        for k in ALL_KINDS:
            axes[0].plot(dims, vs_d[k], marker="o", label=k)
            axes[1].plot(config["times"], vs_t[k], marker="o", label=k)
        axes[0].set(
            xscale="log",
            yscale="log",
            xlabel="dimension d",
            ylabel="effective width vol^(1/d)",
            title=f"Beta(8,8) data, t = {tw}",
        )
        axes[1].set(
            xscale="log",
            yscale="log",
            xlabel="time t",
            ylabel="effective width vol^(1/d)",
            title=f"d = {dv}",
        )
        axes[0].legend(fontsize=7)

    walls["widths"], t_sec = time.perf_counter() - t_sec, time.perf_counter()
    rec.metric("section_wall_s", dict(walls))
    # ------------------------------------------------------------------ A/B demo
    Tab, d_ab = config["ab_T"], 5
    ka, ky = jr.split(k_ab)
    a = jr.bernoulli(ka, 0.5, (Tab,)).astype(jnp.int32)
    p0 = jnp.full((d_ab,), 0.3)
    p1 = p0.at[0].add(0.1).at[1].add(0.06)  # two metrics with a true effect
    y = (jr.uniform(ky, (Tab, d_ab)) < jnp.where(a[:, None] == 1, p1[None, :], p0[None, :])).astype(
        jnp.float64
    )
    times = jnp.arange(config["ab_every"], Tab + 1, config["ab_every"])
    stops = {}
    for k in ("portfolio", "bonferroni"):
        stops[k] = int(ab_test(y, a, alpha, kind=k).stop_time)
    res = ab_test(
        y,
        a,
        alpha,
        kind="box_ellipsoid",
        times=times,
        n_u=tuple(config["n_u"]),
        num_bins=config["num_bins"],
    )
    stops["box_ellipsoid"] = int(res.stop_time)
    rec.metric("ab_stop_time_any_changed", stops)
    # T = 2000 (the previous quick setting) is too short for this effect: the rescaled
    # pseudo-outcome has sd ~0.29 and the effect moves its mean by 0.10/4 = 0.025, so even the
    # 1-D test of metric 0 needs a few thousand samples; the rule itself was never at fault.
    rec.claim(
        "ab_portfolio_detects_effect",
        f"first time the 'any metric changed' rule fires on the portfolio region (T = {Tab}; "
        f"T + 1 when it never fires)",
        stops["portfolio"] if stops["portfolio"] > 0 else Tab + 1,
        "<=",
        Tab,
    )
    rec.note(
        f"A/B demo (d = 5, effects +0.10 and +0.06 on two metrics, base rate 0.3): stopping "
        f"times of the 'any metric changed' rule: {stops} (Box cap E_p checked every "
        f"{config['ab_every']} steps, wealth kinds at every step; -1 = never)."
    )

    walls["ab_demo"], t_sec = time.perf_counter() - t_sec, time.perf_counter()
    rec.metric("section_wall_s", dict(walls))
    # ------------------------------------------------------------------ speed vs confseq
    Ts, B = config["speed_T"], config["speed_grid"]
    xs = jr.beta(k_speed, 2.0, 5.0, (Ts,))
    jt = rec.time(lambda v: betting_cs(v, alpha, grid_size=B, confseq_compat=True), xs)
    jt_h = rec.time(lambda v: betting_cs(v, alpha, grid_size=B), xs)
    lo, hi = betting_cs(xs, alpha, grid_size=B, confseq_compat=True)
    rec.metric("jaxgen_betting_cs_s", jt["median_s"])
    rec.metric("jaxgen_betting_cs_first_call_s", jt["first_call_s"])
    rec.metric("jaxgen_betting_cs_convex_s", jt_h["median_s"])
    try:
        cs = import_confseq()
    except Exception as err:  # not installed or broken build
        rec.peer("confseq", "not installed")
        rec.note(
            f"confseq could not be imported ({type(err).__name__}: {err}); speed claim skipped."
        )
        return
    xn = np.asarray(xs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        plo, phi = cs.betting.hedged_cs(xn, alpha, breaks=B, running_intersection=False)
        peer_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        elo, ehi = cs.predmix.predmix_empbern_twosided_cs(xn, alpha, truncation=0.5)
        peer_eb_s = time.perf_counter() - t0
    pm = predmix_eb_bonferroni(xs[:, None], alpha, confseq_compat=True)
    rec.peer(
        "confseq.betting.hedged_cs",
        {
            "wall_s": peer_s,
            "width_T": float(phi[-1] - plo[-1]),
            "jaxgen_width_T": float(hi[-1] - lo[-1]),
            "max_endpoint_diff": float(
                max(np.abs(plo - np.asarray(lo)).max(), np.abs(phi - np.asarray(hi)).max())
            ),
        },
    )
    rec.peer(
        "confseq.predmix.predmix_empbern_twosided_cs",
        {
            "wall_s": peer_eb_s,
            "width_T": float(ehi[-1] - elo[-1]),
            "jaxgen_width_T": float(pm[-1, 0, 1] - pm[-1, 0, 0]),
        },
    )
    rec.claim(
        "speedup_vs_confseq_hedged_cs",
        f"1-D hedged CS, T = {Ts}, {B}-point grid: confseq.hedged_cs wall time over "
        "jaxgen's compiled median (same process, same data, same conventions)",
        peer_s / jt["median_s"],
        ">=",
        20.0,
    )


def plan(config, key):
    """`python -m benchmarks plan`: the device-sampled coverage study at the largest ``d``.

    XLA's cost analysis counts the body of the study's ``lax.map`` over chunks of runs once, so
    the row is one chunk, counted ``R / chunk`` times per data set.
    """
    R, T, d = config["coverage_runs"], config["T"], max(config["coverage_dims"])
    chunk = _chunk(R, T, d)

    def study(key, dist):
        return coverage_study(key, dist, config["alpha"], R=R, T=T, d=d, chunk=chunk)

    label = f"coverage study, one chunk of {chunk} runs (R={R} T={T} d={d})"
    return [(label, study, (key, jnp.asarray(0)), len(DISTS) * (R // chunk))]
