"""convMMD deconvolution and empirical-Bayes denoising against NPMLE, deconvolution KDE, naive.

Stages: 1-D deconvolution of a Laplace-mixture latent under heteroscedastic
Laplace and Gaussian noise (convMMD with a Gaussian-mixture sieve and a spline-flow sieve;
ISE and W1 against the truth); 1-D denoising on the Gaussian-noise data (posterior means;
MSE against the oracle posterior mean under the true prior); the heteroscedastic bookkeeping
design (noise sds 0.25 / 1.5: own scales vs one common RMS scale); 2-D moons under
heteroscedastic Gaussian noise (sliced W1, denoising MSE); the baseball batting table (Brown
2008, binomial thinning: TSE / TSE(naive)). Peers in the same run: our NPMLE (EM in JAX),
`npeb.GLMixture` (needs cvxpy or mosek), `deconv_kde` with the oracle-ISE bandwidth (flagged:
it favours the baseline), scipy's `gaussian_kde` of X (naive) and z_hat = x. ``--full`` adds
the rate sweep n in {1e3, ..., 1e5} x 5 seeds (log ISE vs log n per noise) and a 5-D latent.
"""

import math
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from jaxgen.data import (
    laplace_mixture_1d,
    laplace_mixture_1d_density,
    load_baseball,
    sample_toy_2d,
)
from jaxgen.deconvolution import (
    FlowPrior,
    NoiseModel,
    deconv_kde,
    fit_convmmd,
    init_gaussian_mixture,
    npmle_em,
    npmle_posterior_mean,
    posterior_mean_gmm,
)
from jaxgen.metrics import ise_1d, sliced_w1, w1_1d

NAME = "convmmd_deconvolution"
PAPER = (
    "Vashistha, Sarkar, Farahi. Nonparametric Deconvolution and Denoising using Simulation "
    "Based Inference (arXiv 2606.21907); convMMD (arXiv 2604.12022)"
)
CONFIGS = {
    "quick": {
        "n": 4000,
        "gmm": {"K": 8, "batch": 64, "steps": 200, "lr": 2e-2},
        "flow": {"layers": 2, "bins": 8, "width": 32, "batch": 256, "steps": 250, "lr": 1e-2},
        "npmle": {"grid": 400, "max_steps": 300},
        "kde_bandwidths": [0.3, 0.4, 0.5, 0.6, 0.8, 1.0, 1.3],
        "w1_samples": 20000,
        "moons": {"n": 2000, "K": 10, "steps": 200, "atoms": 1000},
        "baseball": {"steps": 150, "K": 8, "npmle_grid": 300, "npmle_steps": 200},
        "npeb_n": 2000,
        "rates": None,
        "latent_dims": [],
    },
    "full": {
        "n": 50000,
        "gmm": {"K": 16, "batch": 512, "steps": 5000, "lr": 1e-2},
        "flow": {"layers": 4, "bins": 16, "width": 64, "batch": 2048, "steps": 5000, "lr": 1e-3},
        "npmle": {"grid": 400, "max_steps": 2000},
        "kde_bandwidths": [0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0, 1.3],
        "w1_samples": 20000,
        "moons": {"n": 20000, "K": 16, "steps": 5000, "atoms": 1000},
        "baseball": {"steps": 3000, "K": 16, "npmle_grid": 400, "npmle_steps": 2000},
        "npeb_n": 2000,
        "rates": {"ns": [1000, 3000, 10000, 30000, 100000], "seeds": 5},
        "latent_dims": [5],
    },
}
# --full --smoke: the full configuration's code path, every size cut to the least that runs.
SMOKE = {
    "n": 400,
    "gmm": {"K": 3, "batch": 32, "steps": 5},
    "flow": {"layers": 1, "bins": 4, "width": 8, "batch": 32, "steps": 5},
    "npmle": {"grid": 50, "max_steps": 5},
    "kde_bandwidths": [0.5, 1.0],
    "w1_samples": 400,
    "moons": {"n": 200, "K": 3, "steps": 5, "atoms": 50},
    "baseball": {"steps": 5, "K": 3, "npmle_grid": 30, "npmle_steps": 5},
    "npeb_n": 100,
    "rates": {"ns": [300, 600], "seeds": 1},
}

GAUSS, LAPLACE = NoiseModel("gaussian"), NoiseModel("laplace")
GRID = np.linspace(-8.0, 10.0, 2000)  # ISE grid
QUAD = np.linspace(-10.0, 12.0, 6000)  # oracle quadrature


def _naive_kde(x):
    import scipy.stats as st

    return st.gaussian_kde(np.asarray(x)[:, 0], bw_method="silverman")(GRID)


def _fit_gmm(x, s, noise, key, cfg, *, loss="marginal"):
    ikey, fkey = jr.split(key)
    init = init_gaussian_mixture(ikey, x, cfg["K"], s)
    kernel = "laplace" if noise.kind == "laplace" else "gaussian"
    t0 = time.perf_counter()
    res = fit_convmmd(
        init,
        (x, s),
        key=fkey,
        noise=noise,
        loss=loss,
        kernel=kernel,
        num_steps=cfg["steps"],
        batch_size=cfg["batch"],
        learning_rate=cfg["lr"],
        progress=False,
    )
    return init, res, time.perf_counter() - t0


def _fit_flow(x, s, noise, key, cfg):
    ikey, fkey = jr.split(key)
    noise_var = jnp.mean(s**2, 0)
    scale = jnp.sqrt(jnp.maximum(jnp.var(x, 0) - noise_var, 0.1 * jnp.var(x, 0)))
    init = FlowPrior(
        x.shape[1],
        key=ikey,
        num_layers=cfg["layers"],
        num_bins=cfg["bins"],
        width=cfg["width"],
        loc=jnp.mean(x, 0),
        scale=scale,
    )
    kernel = "laplace" if noise.kind == "laplace" else "gaussian"
    t0 = time.perf_counter()
    res = fit_convmmd(
        init,
        (x, s),
        key=fkey,
        noise=noise,
        loss="sample",
        kernel=kernel,
        num_steps=cfg["steps"],
        batch_size=cfg["batch"],
        learning_rate=cfg["lr"],
        progress=False,
    )
    return init, res, time.perf_counter() - t0


@eqx.filter_jit
def _log_prob(prior, z):
    return prior.log_prob(z)


def _density(prior):
    return np.asarray(jnp.exp(_log_prob(prior, jnp.asarray(GRID)[:, None])))


def _ise(f):
    return float(
        ise_1d(jnp.asarray(f), laplace_mixture_1d_density(jnp.asarray(GRID)), jnp.asarray(GRID))
    )


def _clip_renorm(f):
    f = np.clip(np.asarray(f), 0.0, None)
    return f / np.trapezoid(f, GRID)


def _npmle(x, s, noise, cfg):
    pad = 3.0 * float(jnp.mean(s))
    grid = jnp.linspace(float(x.min()) - pad, float(x.max()) + pad, cfg["grid"])[:, None]
    t0 = time.perf_counter()
    res = npmle_em(x, s, grid, noise=noise, max_steps=cfg["max_steps"], throw=False)
    jax.block_until_ready(res.weights)
    return grid, res, time.perf_counter() - t0


def _oracle(x, s, noise):
    w = laplace_mixture_1d_density(jnp.asarray(QUAD))
    return npmle_posterior_mean(x, s, jnp.asarray(QUAD)[:, None], w, noise=noise)


def _mse(a, b):
    return float(jnp.mean(jnp.sum((a - b) ** 2, -1)))


def _sieve_rows(rec, tag, name, label, init_kind, init, prior, wall):
    """ISE of a fitted sieve and of its initialisation, fit time, its trained-enough claim."""
    ise_init, ise_fit = _ise(_density(init)), _ise(_density(prior))
    rec.metric(f"{tag}/{name}_ise", ise_fit)
    rec.metric(f"{tag}/{name}_init_ise", ise_init)
    rec.metric(f"{tag}/{name}_fit_s", wall)
    rec.claim(
        f"{name}_{tag}_learned",
        f"{label} ({tag} noise) ISE below its {init_kind} init",
        ise_fit / ise_init,
        "<",
        1.0,
    )
    return ise_fit


def _deconvolution_1d(rec, key, cfg, noise):
    """One noise family: GMM and flow sieves, deconv_kde (oracle h), NPMLE, naive KDE."""
    tag = noise.kind
    kd, kg, kf, kw = jr.split(key, 4)
    x, z, s = laplace_mixture_1d(kd, cfg["n"], noise=tag)
    truth = laplace_mixture_1d_density(jnp.asarray(GRID))
    out = {"data": (x, z, s)}
    init, res, wall = _fit_gmm(x, s, noise, kg, cfg["gmm"])
    ise_gmm = _sieve_rows(rec, tag, "gmm", "convMMD-GMM", "moment", init, res.model, wall)
    finit, fres, fwall = _fit_flow(x, s, noise, kf, cfg["flow"])
    ise_flow = _sieve_rows(rec, tag, "flow", "convMMD-flow", "Gaussian", finit, fres.model, fwall)
    m = cfg["w1_samples"]
    zt = laplace_mixture_1d(jr.fold_in(kw, 1), m, noise=tag)[1][:, 0]
    for name, prior in (("gmm", res.model), ("flow", fres.model)):
        rec.metric(f"{tag}/{name}_w1", float(w1_1d(prior.sample(kw, m)[:, 0], zt)))
    # deconv_kde with the oracle-ISE bandwidth (favours the baseline).
    t0 = time.perf_counter()
    kde_ise = {}
    for h in cfg["kde_bandwidths"]:
        f = deconv_kde(x, s, jnp.asarray(GRID), h, noise=noise)
        kde_ise[h] = _ise(_clip_renorm(f))
    h_best = min(kde_ise, key=kde_ise.get)
    rec.metric(f"{tag}/deconv_kde_ise_by_h", {str(h): v for h, v in kde_ise.items()})
    rec.peer(
        f"deconv_kde[{tag}] (oracle-ISE h, favours baseline)",
        {"ise": kde_ise[h_best], "h": h_best, "wall_s": time.perf_counter() - t0},
    )
    grid, npm, nwall = _npmle(x, s, noise, cfg["npmle"])
    # ISE of a Gaussian-smoothed NPMLE (bandwidth 0.2).
    g, w = np.asarray(grid[:, 0]), np.asarray(npm.weights)
    smooth = (w[None] * np.exp(-0.5 * ((GRID[:, None] - g[None]) / 0.2) ** 2)).sum(1)
    smooth = smooth / (0.2 * math.sqrt(2 * math.pi))
    rec.peer(
        f"npmle_em[{tag}] (own, JAX)",
        {
            "ise_smoothed_0.2": _ise(smooth),
            "kkt_gap": float(npm.kkt_gap),
            "num_steps": int(npm.num_steps),
            "wall_s": nwall,
        },
    )
    t0 = time.perf_counter()
    naive = _naive_kde(x)
    rec.peer(
        f"scipy.gaussian_kde[{tag}] (naive, ignores noise)",
        {"ise": _ise(naive), "wall_s": time.perf_counter() - t0},
    )
    rec.metric(f"{tag}/truth_mass_on_grid", float(jnp.trapezoid(truth, jnp.asarray(GRID))))
    out.update(
        gmm=res.model,
        flow=fres.model,
        ise_gmm=ise_gmm,
        ise_flow=ise_flow,
        ise_kde=kde_ise[h_best],
        ise_naive=_ise(naive),
        grid=grid,
        npmle=npm,
        curves={
            "truth": np.asarray(truth),
            "gmm": _density(res.model),
            "flow": _density(fres.model),
            "naive": naive,
            f"deconv_kde h={h_best}": _clip_renorm(
                deconv_kde(x, s, jnp.asarray(GRID), h_best, noise=noise)
            ),
        },
    )
    return out


def _npeb_peer(rec, x, s, ours, cfg, key, grid):
    """npeb.GLMixture on a subsample, posterior means vs our NPMLE's.

    npeb starts from our NPMLE grid as its atoms (its default, atoms = data, solves an n x n
    problem: 449 s at n = 2000 under load, against 11 s on the 400-point grid) and then moves
    them by its own EM, so the comparison is like for like.
    """
    try:
        import contextlib
        import io

        with contextlib.redirect_stdout(io.StringIO()):
            import npeb
    except ImportError:
        rec.peer("npeb.GLMixture", "not installed")
        return None
    idx = np.asarray(jr.permutation(key, x.shape[0])[: cfg["npeb_n"]])
    xs, ss = np.asarray(x)[idx], np.asarray(s)[idx]
    prec = 1.0 / ss**2
    try:
        import contextlib
        import io

        t0 = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            model = npeb.GLMixture(prec_type="diagonal", atoms_init=np.asarray(grid))
            model.fit(xs, prec)
            pm = model.posterior_mean(xs, prec)
        wall = time.perf_counter() - t0
    except Exception as err:  # cvxpy / mosek missing: npeb cannot solve
        rec.peer("npeb.GLMixture", f"not installed (fit failed: {type(err).__name__}: {err})")
        rec.note(
            "npeb.GLMixture needs cvxpy or mosek to solve its weights; neither is "
            "installed, so the 'own NPMLE within 0.05 RMS of npeb' claim is not evaluated."
        )
        return None
    rms = float(np.sqrt(np.mean((np.asarray(ours)[idx] - pm) ** 2)))
    rec.peer("npeb.GLMixture", {"wall_s": wall, "rms_vs_own_npmle": rms, "n": len(idx)})
    rec.claim(
        "npmle_matches_npeb", "own NPMLE posterior means within 0.05 RMS of npeb's", rms, "<=", 0.05
    )
    return rms


def _denoising(rec, key, cfg, gauss):
    x, z, s = gauss["data"]
    oracle = _oracle(x, s, GAUSS)
    pm_gmm = posterior_mean_gmm(gauss["gmm"], x, s)
    pm_npmle = npmle_posterior_mean(x, s, gauss["grid"], gauss["npmle"].weights, noise=GAUSS)
    mse = {
        "oracle": _mse(oracle, z),
        "naive": _mse(x, z),
        "convmmd_gmm": _mse(pm_gmm, z),
        "npmle": _mse(pm_npmle, z),
    }
    n = x.shape[0]
    for k, v in mse.items():
        se = float(
            jnp.std(
                jnp.sum(
                    (
                        {"oracle": oracle, "naive": x, "convmmd_gmm": pm_gmm, "npmle": pm_npmle}[k]
                        - z
                    )
                    ** 2,
                    -1,
                )
            )
            / math.sqrt(n)
        )
        rec.metric(f"denoise/mse_{k}", v)
        rec.metric(f"denoise/mse_{k}_se", se)
    rec.claim(
        "denoise_convmmd_near_oracle",
        "convMMD-GMM denoising MSE <= 1.15 x oracle",
        mse["convmmd_gmm"] / mse["oracle"],
        "<=",
        1.15,
    )
    rec.claim(
        "denoise_npmle_near_oracle",
        "NPMLE denoising MSE <= 1.15 x oracle",
        mse["npmle"] / mse["oracle"],
        "<=",
        1.15,
    )
    _npeb_peer(rec, x, s, pm_npmle, cfg, key, gauss["grid"])
    return mse


def _bookkeeping(rec, key, cfg):
    """Check 9: noise sds 0.25 / 1.5; own scales vs one common RMS scale."""
    kd, kf = jr.split(key)
    x, z, s = laplace_mixture_1d(kd, cfg["n"], noise="gaussian", sd_values=(0.25, 1.5))
    rms = jnp.full_like(s, jnp.sqrt(jnp.mean(s**2)))
    _, own, _ = _fit_gmm(x, s, GAUSS, kf, cfg["gmm"])
    _, common, _ = _fit_gmm(x, rms, GAUSS, kf, cfg["gmm"])
    mse_own = _mse(posterior_mean_gmm(own.model, x, s), z)
    mse_rms = _mse(posterior_mean_gmm(own.model, x, rms), z)
    oracle_own, oracle_rms = _mse(_oracle(x, s, GAUSS), z), _mse(_oracle(x, rms, GAUSS), z)
    ise_own, ise_rms = _ise(_density(own.model)), _ise(_density(common.model))
    rec.metric("hetero/mse_own_scales", mse_own)
    rec.metric("hetero/mse_common_rms_scale", mse_rms)
    rec.metric("hetero/oracle_mse_own", oracle_own)
    rec.metric("hetero/oracle_mse_common", oracle_rms)
    rec.metric("hetero/ise_fit_own_scales", ise_own)
    rec.metric("hetero/ise_fit_common_scale", ise_rms)
    rec.claim(
        "hetero_scale_gap",
        "convMMD denoising MSE(common RMS scale)/MSE(own scales) - 1",
        mse_rms / mse_own - 1.0,
        ">=",
        0.15,
    )
    rec.claim(
        "hetero_ise_direction",
        "ISE fitted with own scales / ISE with common RMS scale",
        ise_own / ise_rms,
        "<",
        1.0,
    )


def _moons(n, key):
    """scikit-learn's ``make_moons(noise=0.05)`` distribution, drawn by `sample_toy_2d`: its
    ``"two_moons"`` is the same half circles centred by (1/2, 1/4) and scaled by 2, noise 0.1.
    """
    return sample_toy_2d(key, "two_moons", n) / 2 + jnp.array([0.5, 0.25])


def _mixture_latent(n, d, key):
    kc, km, kz = jr.split(key, 3)
    means = 3.0 * jr.normal(km, (4, d))
    comp = jr.randint(kc, (n,), 0, 4)
    return means[comp] + 0.5 * jr.normal(kz, (n, d))


def _multivariate(rec, key, cfg, d):
    """2-D moons (or a d-dim Gaussian-mixture latent): sliced W1 and denoising MSE."""
    kd, ks, ke, kf, kw = jr.split(key, 5)
    mc = cfg["moons"]
    z = _moons(mc["n"], kd) if d == 2 else _mixture_latent(mc["n"], d, kd)
    sd = jr.uniform(ks, (mc["n"], 1), minval=0.2, maxval=0.6)
    s = jnp.broadcast_to(sd, z.shape)
    x = z + GAUSS.sample(ke, s)
    gcfg = dict(cfg["gmm"], K=mc["K"], steps=mc["steps"])
    init, res, wall = _fit_gmm(x, s, GAUSS, kf, gcfg)
    tag = "moons" if d == 2 else f"mixture{d}d"
    sw = {}
    for name, samples in (
        ("convmmd_gmm", res.model.sample(kw, mc["n"])),
        ("init", init.sample(kw, mc["n"])),
        ("naive_x", x),
    ):
        sw[name] = float(sliced_w1(jr.fold_in(kw, 7), samples, z, 500)) * math.sqrt(d)
        rec.metric(f"{tag}/sliced_w1_x_sqrt_d/{name}", sw[name])
    rec.claim(
        f"{tag}_gmm_learned",
        f"convMMD-GMM sliced W1 ({tag}) below its moment init",
        sw["convmmd_gmm"] / sw["init"],
        "<",
        1.0,
    )
    atoms = x[np.asarray(jr.permutation(kw, mc["n"])[: mc["atoms"]])]
    npm = npmle_em(x, s, atoms, noise=GAUSS, max_steps=cfg["npmle"]["max_steps"], throw=False)
    mse = {
        "convmmd_gmm": _mse(posterior_mean_gmm(res.model, x, s), z),
        "naive": _mse(x, z),
        "npmle": _mse(npmle_posterior_mean(x, s, atoms, npm.weights, noise=GAUSS), z),
    }
    for k, v in mse.items():
        rec.metric(f"{tag}/mse_{k}", v)
    rec.metric(f"{tag}/gmm_fit_s", wall)
    return x, z, res.model


def _baseball(rec, key, cfg):
    try:
        table = load_baseball()
    except Exception as err:
        rec.note(f"baseball arm skipped: {err}")
        return None
    ab, h = table["at_bats"], table["hits"]
    rng = np.random.default_rng(int(jr.randint(key, (), 0, 2**31 - 1)))
    ab1 = ab // 2
    h1 = rng.hypergeometric(h, ab - h, ab1)  # binomial thinning: two independent halves
    ab2, h2 = ab - ab1, h - h1

    def brown(hits, at_bats):
        return np.arcsin(np.sqrt((hits + 0.25) / (at_bats + 0.5))), np.sqrt(1.0 / (4 * at_bats))

    x1, s1 = brown(h1, ab1)
    x2, s2 = brown(h2, ab2)
    x, s = jnp.asarray(x1)[:, None], jnp.asarray(s1)[:, None]
    bcfg = dict(
        cfg["gmm"],
        K=cfg["baseball"]["K"],
        steps=cfg["baseball"]["steps"],
        lr=cfg["gmm"]["lr"] * 0.25,
    )
    _, res, wall = _fit_gmm(x, s, GAUSS, key, bcfg)
    pad = 3 * float(s.mean())
    grid = jnp.linspace(float(x.min()) - pad, float(x.max()) + pad, cfg["baseball"]["npmle_grid"])[
        :, None
    ]
    npm = npmle_em(x, s, grid, noise=GAUSS, max_steps=cfg["baseball"]["npmle_steps"], throw=False)

    def tse(zhat):
        return float(np.sum((np.asarray(zhat)[:, 0] - x2) ** 2) - np.sum(s2**2))

    naive = tse(x)
    ratios = {
        "convmmd_gmm": tse(posterior_mean_gmm(res.model, x, s)) / naive,
        "npmle": tse(npmle_posterior_mean(x, s, grid, npm.weights, noise=GAUSS)) / naive,
    }
    for k, v in ratios.items():
        rec.metric(f"baseball/tse_ratio_{k}", v)
    rec.metric("baseball/n_player_seasons", int(len(ab)))
    rec.metric("baseball/gmm_fit_s", wall)
    rec.claim(
        "baseball_tse_ratio",
        "baseball TSE(convMMD) / TSE(naive z_hat = x)",
        ratios["convmmd_gmm"],
        "<",
        1.0,
    )
    return ratios


def _rates(rec, key, cfg):
    """--full: log ISE vs log n per noise family (GMM sieve); the Laplace slope is steeper."""
    slopes = {}
    table = {}
    for noise in (LAPLACE, GAUSS):
        rows = []
        for n in cfg["rates"]["ns"]:
            for seed in range(cfg["rates"]["seeds"]):
                k = jr.fold_in(jr.fold_in(key, n), seed)
                x, _, s = laplace_mixture_1d(k, n, noise=noise.kind)
                _, res, _ = _fit_gmm(x, s, noise, jr.fold_in(k, 1), cfg["gmm"])
                rows.append((n, _ise(_density(res.model))))
        arr = np.array(rows)
        slopes[noise.kind] = float(np.polyfit(np.log(arr[:, 0]), np.log(arr[:, 1]), 1)[0])
        table[noise.kind] = rows
    rec.metric("rates/log_ise_vs_log_n", table)
    rec.metric("rates/slopes", slopes)
    rec.claim(
        "rate_laplace_steeper",
        "slope of log ISE vs log n: Laplace minus Gaussian noise",
        slopes["laplace"] - slopes["gaussian"],
        "<",
        0.0,
    )
    return table


def run(config, key, rec):
    """Run every stage of the configuration; see the module docstring."""
    t0 = time.perf_counter()
    k_lap, k_gau, k_het, k_moon, k_ball, k_rate, k_npeb, k_dim = jr.split(key, 8)
    lap = _deconvolution_1d(rec, k_lap, config, LAPLACE)
    gau = _deconvolution_1d(rec, k_gau, config, GAUSS)
    # Density claims use the spline-flow sieve (the paper code's sieve; either would
    # do): the GMM sieve's ISE is reported as metrics, with its own learned claims.
    rec.claim(
        "ise_laplace_vs_naive",
        "ISE(convMMD-flow, Laplace noise) / ISE(naive KDE of X)",
        lap["ise_flow"] / lap["ise_naive"],
        "<=",
        0.5,
    )
    for tag, out in (("laplace", lap), ("gaussian", gau)):
        rec.claim(
            f"ise_vs_deconv_kde_{tag}",
            f"ISE(convMMD-flow) / ISE(deconv_kde, oracle h), {tag} noise",
            out["ise_flow"] / out["ise_kde"],
            "<=",
            1.0,
        )
    rec.note(
        "The GMM sieve (k-means init minus the mean noise covariance, eigenvalues floored) keeps "
        "narrow components in the quick budget: its ISE is reported as metrics "
        "(laplace/gmm_ise, gaussian/gmm_ise) and its denoising MSE is close to the oracle, but "
        "its density is spiky; the ISE claims use the flow sieve."
    )
    mse = _denoising(rec, k_npeb, config, gau)
    _bookkeeping(rec, k_het, config)
    mx, mz, mprior = _multivariate(rec, k_moon, config, 2)
    for d in config["latent_dims"]:
        _multivariate(rec, jr.fold_in(k_dim, d), config, d)
    _baseball(rec, k_ball, config)
    if config["rates"]:
        table = _rates(rec, k_rate, config)
        with rec.figure("rates", figsize=(5, 4)) as (fig, ax):
            for kind, rows in table.items():
                arr = np.array(rows)
                ax.loglog(arr[:, 0], arr[:, 1], "o", label=f"{kind} noise")
            ax.set(xlabel="n", ylabel="ISE", title="convMMD-GMM: ISE vs n")
            ax.legend()
    rec.metric("wall_s_run", time.perf_counter() - t0)
    with rec.figure("densities", ncols=2, figsize=(11, 4)) as (fig, axes):
        for ax, (tag, out) in zip(axes, (("Laplace", lap), ("Gaussian", gau)), strict=True):
            for name, f in out["curves"].items():
                ax.plot(GRID, f, label=name, lw=2.5 if name == "truth" else 1.2)
            ax.set(xlabel="z", ylabel="density", title=f"1-D deconvolution, {tag} noise")
            ax.legend(fontsize=7)
    with rec.figure("denoising_moons", ncols=2, figsize=(11, 4)) as (fig, axes):
        names = list(mse)
        axes[0].bar(names, [mse[k] for k in names])
        axes[0].set(ylabel="MSE", title="1-D denoising (Gaussian noise sd ~ U(0.5, 1))")
        draws = np.asarray(mprior.sample(jr.key(0), mz.shape[0]))
        axes[1].scatter(*np.asarray(mx).T, s=2, alpha=0.3, label="noisy x")
        axes[1].scatter(*np.asarray(mz).T, s=2, alpha=0.5, label="clean z")
        axes[1].scatter(*draws.T, s=2, alpha=0.5, label="convMMD-GMM draws")
        axes[1].set(xlabel="z1", ylabel="z2", title="2-D moons, noise sd ~ U(0.2, 0.6)")
        axes[1].legend(fontsize=7, markerscale=4)


def plan_stage(config, key, rec):
    """`python -m benchmarks plan`: the spline-flow sieve under Laplace noise (the main fit)."""
    x, _, s = laplace_mixture_1d(key, config["n"], noise=LAPLACE.kind)
    _fit_flow(x, s, LAPLACE, key, config["flow"])
