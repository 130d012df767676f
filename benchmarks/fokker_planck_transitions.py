"""Neural Galerkin flow transition densities for CIR/OU and Bayesian inference
(exact/Euler/surrogate).

Quick mode (CPU): one short Neural Galerkin training of the amortised CIR flow at Delta = 0.25,
its KL to the exact ncx2 transition on held-out (x0, lam), NUTS posteriors (exact, Euler,
surrogate likelihoods) on one exact CIR path and the surrogate corrected by delayed acceptance
(the flow screens, the exact ncx2 likelihood decides); the real Irates series with the exact
likelihood.
Full mode (accelerator): the full CPU/GPU scale, the OU flow too, Euler on the real data too.
paper_cpu (`--config paper_cpu`, ~30-40 min on 2 cores): the CIR part at the paper's scale (the
--full flow, n_obs 800, 4 chains); its committed result is under benchmarks/reference/.
"""

import math
import time

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

NAME = "fokker_planck_transitions"
PAPER = (
    "Saporiti and Nobile, Neural Galerkin Normalizing Flows for Bayesian Inference of "
    "Diffusions with Inaccessible Boundaries, arXiv 2606.04324 (2026)"
)
CONFIGS = {
    "quick": {
        # Flow width 16, 8 coupling units, 64 NG steps (was 8 / 4 / 32, issue 26): the smaller
        # flow's KL of 0.017 nats per transition left ng_flow_learned at 0.028 nats per
        # observation, above its 0.02 bar; this one reaches KL ~0.005 and ~0.011 (~30 s more).
        "width": 16,
        "units": 8,
        "colloc": 512,
        "ng_steps": 64,
        "solver": "Bosh3",
        "eps_rel": 1e-4,
        "n_obs": 250,
        "warmup": 100,
        "samples": 150,
        "chains": 2,
        "da_warmup": 200,
        "da_samples": 600,
        "held_out": 32,
        "ou": False,
        "real_data": (),
        "heston": None,
    },
    "full": {
        "width": 32,
        "units": 8,
        "colloc": 4096,
        "ng_steps": 120,
        "solver": "Bosh3",
        "eps_rel": 1e-4,
        "n_obs": 1000,
        "warmup": 1000,
        "samples": 2000,
        "chains": 4,
        "da_warmup": 1000,
        "da_samples": 4000,
        "held_out": 256,
        "ou": True,
        "real_data": ("exact", "euler"),
        "heston": {
            "units": 8,
            "width": 32,
            "colloc": 4096,
            "ng_steps": 120,
            "samples": 20000,
            "amortised": True,
        },
    },
    # Reference run (issue 26), CPU-feasible at the paper's scale: `--config paper_cpu`, ~6 CPU
    # minutes on a quiet box (30-45 min wall on the shared 2 cores); its result is committed under
    # benchmarks/reference/. The flow of --full (width 32, 8 units) with 1024 collocation points
    # and 96 NG steps (4096 points x 120 steps costs ~13 s per step here; this one reaches KL
    # ~0.004); n_obs 800 so that Euler's fixed kappa shift exceeds 2 exact-posterior sd
    # (euler_kappa_bias); 2 chains of 300 warmup + 500 draws (the exact ncx2 likelihood
    # dominates the cost); no Heston, OU or real data (they run in --full).
    "paper_cpu": {
        "width": 32,
        "units": 8,
        "colloc": 1024,
        "ng_steps": 96,
        "solver": "Bosh3",
        "eps_rel": 1e-4,
        "n_obs": 800,
        "warmup": 300,
        "samples": 500,
        "chains": 2,
        "da_warmup": 300,
        "da_samples": 1500,
        "held_out": 64,
        "ou": False,
        "real_data": (),
        "heston": None,
    },
}

# --full --smoke: the full configuration's code path, every size cut to the least that runs.
SMOKE = {
    "width": 4,
    "units": 2,
    "colloc": 16,
    "ng_steps": 3,
    "n_obs": 20,
    "warmup": 5,
    "samples": 5,
    "chains": 2,
    "da_warmup": 70,
    "da_samples": 5,
    "held_out": 4,
    "heston": {"units": 2, "width": 4, "colloc": 16, "ng_steps": 3, "samples": 50},
}
DELTA = 0.25
TRUTH = (2.0, 0.06, 4.0)  # kappa, theta, nu (sigma = sqrt(2 kappa theta / nu))
BOX = {"kappa": (0.5, 4.0), "theta": (0.02, 0.15), "nu": (2.0, 8.0)}


def _lam(p):
    """(kappa, log theta, nu) -> CIR lam (kappa, theta, sigma)."""
    kappa, theta, nu = p[0], jnp.exp(p[1]), p[2]
    return jnp.stack([kappa, theta, jnp.sqrt(2 * kappa * theta / nu)])


def _kl_table(pde, flow, trained, model, sample, t, keys, grid):
    """Per held-out condition: KL(exact || flow), KL(exact || reference), L1(exact, flow)."""

    def one(key):
        x0, lam = sample(key)
        le = jax.vmap(lambda x: pde.exact_log_transition(model, t, x[None], x0, lam))(grid)
        lf = jax.vmap(lambda x: trained.log_density(t, x[None], x0, lam))(grid)
        lr = jax.vmap(lambda x: flow.log_density(t, x[None], x0, lam))(grid)
        w = jnp.gradient(grid)
        pe = jnp.exp(le)
        return (
            jnp.sum(w * pe * (le - lf)),
            jnp.sum(w * pe * (le - lr)),
            jnp.sum(w * jnp.abs(pe - jnp.exp(lf))),
        )

    return [np.asarray(v) for v in jax.jit(jax.vmap(one))(keys)]


def _posterior(pde, logpost, init, key, cfg, rec, timed=True):
    """NUTS draws (unconstrained) and run statistics; time per ESS from a timed gradient call."""
    t0 = time.perf_counter()
    res = pde.run_nuts(
        key,
        logpost,
        init,
        num_warmup=cfg["warmup"],
        num_samples=cfg["samples"],
        num_chains=cfg["chains"],
    )
    jax.block_until_ready(res.samples)
    wall = time.perf_counter() - t0
    u = np.asarray(res.samples)
    min_ess = float(jnp.min(res.ess))
    out = {
        "wall_s_incl_compile": wall,
        "rhat_max": float(jnp.max(res.rhat)),
        "ess_min": min_ess,
        "grads_per_draw": float(res.num_grads),
    }
    if timed:
        grad_call = rec.time(jax.jit(jax.value_and_grad(logpost)), init)["median_s"]
        total_grads = float(res.num_grads) * cfg["samples"] * cfg["chains"]
        # A chain with no effective sample (ESS 0) has an infinite cost per effective sample.
        per_ess = grad_call * total_grads / min_ess if min_ess > 0 else float("inf")
        out.update(grad_call_s=grad_call, time_per_ess_s=per_ess)
    return u.reshape(-1, u.shape[-1]), out


def box_inverse_np(draws, lo, hi):
    """(kappa, theta, nu) draws -> the unconstrained u of the posteriors (theta logged)."""
    x = np.array(draws, dtype=np.float64)
    x[:, 1] = np.log(x[:, 1])
    q = (x - np.asarray(lo)) / (np.asarray(hi) - np.asarray(lo))
    return np.log(q) - np.log1p(-q)


# Delayed acceptance: leapfrog steps per surrogate HMC transition, surrogate transitions per
# exact decision, exact evaluations for the error model (run_delayed_acceptance's).
DA_LEAPFROG, DA_SURROGATE_STEPS, DA_ERROR_FIT = 5, 2, 32
NOTE_CORRECTION = (
    "Correction (issue 41): `pde.run_delayed_acceptance`, delayed-acceptance HMC (Christen "
    "and Fox 2005). Per iteration, 2 HMC transitions (5 leapfrog steps) on the flow's "
    "posterior plus a quadratic error model of exact - flow log-likelihood (fitted at 32 "
    "exact evaluations spread over the surrogate-only warm-up; Cui, Fox and O'Sullivan 2011) "
    "propose y; the exact ncx2 likelihood accepts with min(1, exp(w(y) - w(x))), w = exact - "
    "screen, so the chain targets the exact posterior whatever the flow's error (detailed "
    "balance, tested in tests/pde). Quick, seed 0 (figures in the metrics): uncorrected "
    "surrogate mean dev kappa / theta / nu 0.59 / 1.31 / 0.06 exact sd (sd ratio 0.95 / 0.74 "
    "/ 1.05); corrected 0.04 / 0.12 / 0.08 (sd ratio 0.94 / 0.97 / 0.93), exact-stage "
    "acceptance 0.95-0.98, ESS ~800 of 1200 draws, R-hat 1.002; time per effective sample "
    "0.02-0.09x the exact NUTS's in three runs on the loaded 2-core box (uncorrected "
    "0.006-0.02x; the exact gradient's timing moves most with the load): an iteration costs "
    "10 flow gradients and one "
    "exact value, no exact gradient, where an exact NUTS draw costs ~9 exact gradients. "
    "Importance reweighting of the 300 uncorrected NUTS draws instead (metric only): Kish "
    "ESS ~110 and theta still ~0.5 sd off, because the flow's posterior under-covers theta "
    "(sd ratio 0.74). Without the error model (error_model_degree=0, plain delayed "
    "acceptance) a surrogate 1.3-1.5 sd off makes the exact stage accept only 0.15-0.4 and "
    "the chain sticks where the surrogate under-weights the exact posterior (OU test "
    "problem: ESS 4-230 of 1200): the error model is what makes the correction cheap. The "
    "exact NUTS reference itself has ESS ~80 here (its mean is known to ~0.1 sd). Heston: no "
    "exact transition density exists; the correcting likelihood would be a finer Neural "
    "Galerkin solve (more steps and collocation points) or a sub-stepped Euler/Milstein "
    "likelihood, and the chain is then exact for that likelihood only (its own error is not "
    "corrected); no Heston posterior runs in this benchmark."
)
NOTE_HISTORY = (
    "Why the uncorrected surrogate is biased (issue 26 ablation, seed 0, flow-learned = "
    "|surrogate - exact| path log-likelihood at the truth per observation, 250 obs): "
    "| flow | KL (nats) | flow-learned (nats/obs) | surrogate dev kappa / theta / nu (exact "
    "sd) | "
    "| width 8, 4 units, 32 NG steps | 0.017 | 0.028 | 0.52 / 2.88 / 0.99 | "
    "| same, n_obs 600 | 0.017 | 0.031 | 0.45 / 4.11 / 1.41 | "
    "| width 16, 8 units, 64 NG steps (quick) | 0.0049 | 0.011 | 0.59 / 1.31 / 0.06 | "
    "| width 32, 1024 points, 96 NG steps (paper_cpu, n_obs 800) | 0.0045 | 0.009 | "
    "0.35 / 2.15 / 0.87 |. "
    "A per-transition error of ~0.01 nats adds up over n_obs transitions: the theta "
    "deviation grows with n_obs and falls with flow accuracy, which levels off near KL 0.004 "
    "at CPU scale, so no affordable flow makes the surrogate posterior right by itself at "
    "hundreds of observations; hence the correction. Euler: its kappa bias is a fixed shift "
    "(target (1 - exp(-kappa Delta)) / Delta = 1.57 vs kappa = 2) while the exact posterior "
    "sd shrinks like n_obs^(-1/2): the 2-sd separation of euler_kappa_bias needs n_obs >= ~400 "
    "(600 gives 2.06; paper_cpu 800 gives 2.48; quick's 250 gives ~1.6, a scale limit)."
)

HESTON_X0 = (0.0, 0.04)
HESTON_LAM = (0.05, 2.0, 0.06, 0.2449489742783178, -0.5)  # mu, kappa, theta, xi (nu = 4), rho


def _heston_check(pde, cfg, key, rec):
    """Heston surrogate v-marginal KS vs the exact CIR law, E[s - s0] and E v in SE.

    ``amortised`` trains over the Heston box of `heston_condition_sampler` (the BOX ranges);
    otherwise over the single condition (x0, lam) checked (a CPU-affordable scale).
    """
    import scipy.stats as st

    hes = pde.Heston()
    sample, lo, hi = pde.heston_condition_sampler(
        kappa=BOX["kappa"], theta=BOX["theta"], nu=BOX["nu"]
    )
    x0, lam = jnp.array(HESTON_X0), jnp.array(HESTON_LAM)
    if not cfg["amortised"]:

        def sample(k):  # noqa: F811
            del k
            return x0, lam

    flow = pde.TransitionFlow(
        hes, lo, hi, num_units=cfg["units"], width=cfg["width"], key=jr.fold_in(key, 0)
    )
    t0 = time.perf_counter()
    path = pde.integrate_ng(
        key,
        flow,
        sample,
        DELTA,
        num_steps=cfg["ng_steps"],
        num_colloc=cfg["colloc"],
        num_saves=2,
        eps_rel=1e-4,
    )
    jax.block_until_ready(path.thetas)
    rec.metric("heston_ng_train_s_incl_compile", time.perf_counter() - t0)
    rec.metric("heston_num_params", int(path.thetas.shape[1]))
    kappa, theta = HESTON_LAM[1], HESTON_LAM[2]
    v0, n = HESTON_X0[1], cfg["samples"]
    ev = theta + (v0 - theta) * math.exp(-kappa * DELTA)
    es = HESTON_LAM[0] * DELTA - 0.5 * (
        theta * DELTA + (v0 - theta) * (1 - math.exp(-kappa * DELTA)) / kappa
    )
    c, df, nc = (float(a) for a in pde.cir_transition_params(DELTA, v0, lam[1:4]))
    out = {}
    for name, f in (("reference", flow), ("flow", pde.flow_at(flow, path))):
        xs = np.asarray(jax.jit(lambda k, f=f: f.sample(k, DELTA, x0, lam, n))(jr.fold_in(key, 1)))
        s, v = xs[:, 0] - HESTON_X0[0], xs[:, 1]
        ok = np.all(np.isfinite(xs), axis=1)  # a diverged flow fails the claims, not the run
        s, v = s[ok], v[ok]
        out[name] = {
            "ks_v": float(st.kstest(2 * c * v, lambda y: st.ncx2.cdf(y, df, nc)).statistic)
            if ok.any()
            else 1.0,
            "ev_z": float((v.mean() - ev) / (v.std() / math.sqrt(ok.sum()))),
            "es_z": float((s.mean() - es) / (s.std() / math.sqrt(ok.sum()))),
            "finite_fraction": float(ok.mean()),
        }
        rec.metric(f"heston_{name}", out[name])
    fl = out["flow"]
    if fl["finite_fraction"] < 1.0:
        fl["ks_v"], fl["ev_z"], fl["es_z"] = 1.0, math.inf, math.inf
    rec.claim(
        "heston_ks_v",
        "Heston NG flow: KS distance of the v-marginal vs the exact CIR law <= 0.02",
        fl["ks_v"],
        "<=",
        0.02,
    )
    rec.claim(
        "heston_moments",
        "Heston NG flow: E v and E[s - s0] within 3 standard errors of the closed forms, max |z|",
        max(abs(fl["ev_z"]), abs(fl["es_z"])),
        "<=",
        3.0,
    )
    rec.note(
        "Heston check 7 at x0 = (0, 0.04), lam = (mu, kappa, theta, xi, rho) = "
        f"{HESTON_LAM}, Delta = {DELTA}, {n} flow samples; "
        + (
            "amortised over the box."
            if cfg["amortised"]
            else "trained on that single condition (CPU scale)."
        )
    )


def run(config, key, rec):
    with jax.enable_x64(True):
        _run(config, key, rec)


def _run(config, key, rec):
    import diffrax as dfx

    import jaxgen.pde as pde
    from jaxgen.data import MissingDataError, load_irates

    k_cir, k_ou, k_data, k_nuts, k_eval, k_real = jr.split(key, 6)
    if config.get("heston") is not None:
        _heston_check(pde, config["heston"], jr.fold_in(key, 7), rec)
    else:
        rec.note(
            "This configuration (quick, paper_cpu) skips the Heston coupling flow (~30 s of "
            "CPU even for a single condition at a tiny scale); it runs in --full."
        )
    cfg = config
    solver = getattr(dfx, cfg["solver"])()
    cir = pde.CoxIngersollRoss()
    sample, lo, hi = pde.cir_condition_sampler(kappa=BOX["kappa"], theta=BOX["theta"], nu=BOX["nu"])
    # ---- 1. NG training of the CIR transition flow over the parameter box --------------------
    flow = pde.TransitionFlow(
        cir, lo, hi, num_units=cfg["units"], width=cfg["width"], key=jr.fold_in(k_cir, 0)
    )
    t0 = time.perf_counter()
    path = pde.integrate_ng(
        k_cir,
        flow,
        sample,
        DELTA,
        num_steps=cfg["ng_steps"],
        num_colloc=cfg["colloc"],
        num_saves=2,
        eps_rel=cfg["eps_rel"],
        solver=solver,
    )
    jax.block_until_ready(path.thetas)
    rec.metric("cir_ng_train_s_incl_compile", time.perf_counter() - t0)
    rec.metric("num_params", int(path.thetas.shape[1]))
    trained = pde.flow_at(flow, path)
    grid = jnp.exp(jnp.linspace(math.log(1e-5), math.log(1.5), 2000))
    kl, kl_ref, l1 = _kl_table(
        pde, flow, trained, cir, sample, DELTA, jr.split(k_eval, cfg["held_out"]), grid
    )
    n_ho = cfg["held_out"]
    rec.metric("cir_kl_flow_mean", float(kl.mean()))
    rec.metric("cir_kl_flow_mean_se", float(kl.std() / math.sqrt(n_ho)))
    rec.metric("cir_kl_flow_median", float(np.median(kl)))
    rec.metric("cir_kl_flow_max", float(kl.max()))
    rec.metric("cir_kl_reference_mean", float(kl_ref.mean()))
    rec.metric("cir_l1_flow_mean", float(l1.mean()))
    rec.claim(
        "ng_kl_cpu_target",
        "mean KL(exact || NG flow) over held-out (x0, lam) <= 2e-2 nats (the CPU target)",
        float(kl.mean()),
        "<=",
        2e-2,
        se=float(kl.std() / math.sqrt(n_ho)),
    )
    rec.claim(
        "ng_beats_reference",
        "NG flow KL at most 1/4 of the frozen-Gaussian reference's "
        "(the time stepping learns the non-Gaussian part)",
        float(kl.mean() / kl_ref.mean()),
        "<=",
        0.25,
    )

    # ---- 2. OU (full only): the same machinery, conditioned on (x0, kappa, sigma, theta) -------
    if cfg["ou"]:
        ou = pde.OrnsteinUhlenbeck(1)

        def ou_sample(k):
            k1, k2, k3, k4 = jr.split(k, 4)
            kap = jr.uniform(k1, (), minval=0.5, maxval=2.0)
            sig = jr.uniform(k2, (), minval=0.2, maxval=1.0)
            th = jr.uniform(k3, (), minval=-1.0, maxval=1.0)
            x0 = th + jr.uniform(k4, (), minval=-2.0, maxval=2.0) * sig / jnp.sqrt(2 * kap)
            return x0[None], jnp.stack([kap, sig, th])

        ou_flow = pde.TransitionFlow(
            ou,
            jnp.array([-3.0, 0.5, 0.2, -1.0]),
            jnp.array([3.0, 2.0, 1.0, 1.0]),
            num_units=cfg["units"],
            width=cfg["width"],
            key=jr.fold_in(k_ou, 0),
        )
        ou_path = pde.integrate_ng(
            k_ou,
            ou_flow,
            ou_sample,
            1.0,
            num_steps=cfg["ng_steps"],
            num_colloc=cfg["colloc"],
            num_saves=2,
            eps_rel=cfg["eps_rel"],
            solver=solver,
        )
        ou_kl, ou_kl_ref, ou_l1 = _kl_table(
            pde,
            ou_flow,
            pde.flow_at(ou_flow, ou_path),
            ou,
            ou_sample,
            1.0,
            jr.split(jr.fold_in(k_eval, 1), cfg["held_out"]),
            jnp.linspace(-6.0, 6.0, 4000),
        )
        rec.metric("ou_kl_flow_mean", float(ou_kl.mean()))
        rec.metric("ou_kl_reference_mean", float(ou_kl_ref.mean()))
        rec.metric("ou_l1_flow_mean", float(ou_l1.mean()))
    else:
        rec.note(
            "This configuration (quick, paper_cpu) trains the CIR flow only; the OU flow (KL "
            "vs the Gaussian) runs in --full and in tests/pde (Neural Galerkin reproduces the "
            "exact OU law)."
        )

    # ---- 3. Posteriors on a synthetic exact CIR path --------------------------------------------
    truth = _lam(jnp.array([TRUTH[0], math.log(TRUTH[1]), TRUTH[2]]))
    xs = pde.sample_cir_exact(k_data, TRUTH[1], truth, DELTA, cfg["n_obs"])
    plo = jnp.array([BOX["kappa"][0], math.log(BOX["theta"][0]), BOX["nu"][0]])
    phi = jnp.array([BOX["kappa"][1], math.log(BOX["theta"][1]), BOX["nu"][1]])

    def make_logpost(loglik):
        def logpost(u):
            p, logdet = pde.box_transform(u, plo, phi)
            return loglik(_lam(p)) + logdet

        return logpost

    liks = {
        "exact": lambda lam: pde.exact_path_loglik(cir, xs, lam, DELTA),
        "euler": lambda lam: pde.euler_path_loglik(cir, xs, lam, DELTA),
        "surrogate": lambda lam: pde.surrogate_path_loglik(trained, xs, lam, DELTA),
    }
    # Trained enough, on the data the posteriors use: the surrogate's path log-likelihood at the
    # truth against the exact one, per observation (the KL target's budget, 2e-2 nats).
    ll_sur = float(liks["surrogate"](truth))
    ll_ex = float(liks["exact"](truth))
    rec.metric("path_loglik_at_truth", {"exact": ll_ex, "surrogate": ll_sur})
    rec.claim(
        "ng_flow_learned",
        "trained enough: |surrogate - exact| path log-likelihood at the true parameters, "
        "per observation, <= 2e-2 nats",
        abs(ll_sur - ll_ex) / cfg["n_obs"],
        "<=",
        2e-2,
        total_abs_nats=abs(ll_sur - ll_ex),
    )
    init = pde.box_inverse(jnp.array([1.0, math.log(0.05), 4.0]), plo, phi)
    post, stats = {}, {}
    for i, (name, lik) in enumerate(liks.items()):
        lp = make_logpost(lik)
        draws_u, stats[name] = _posterior(pde, lp, init, jr.fold_in(k_nuts, i), cfg, rec)
        draws = np.array(jax.vmap(lambda u: pde.box_transform(u, plo, phi)[0])(draws_u))
        draws[:, 1] = np.exp(draws[:, 1])
        post[name] = draws
        rec.metric(
            f"posterior_{name}",
            {"mean": draws.mean(0).tolist(), "sd": draws.std(0).tolist(), **stats[name]},
        )
    # ---- 3b. Correct the surrogate: delayed acceptance (the flow screens, ncx2 decides) -------
    lp_sur, lp_ex = make_logpost(liks["surrogate"]), make_logpost(liks["exact"])
    t0 = time.perf_counter()
    da = pde.run_delayed_acceptance(
        jr.fold_in(k_nuts, 10),
        lp_sur,
        lp_ex,
        init,
        num_warmup=cfg["da_warmup"],
        num_samples=cfg["da_samples"],
        num_chains=cfg["chains"],
        num_integration_steps=DA_LEAPFROG,
        num_surrogate_steps=DA_SURROGATE_STEPS,
        num_error_fit=DA_ERROR_FIT,
    )
    jax.block_until_ready(da.samples)
    da_wall = time.perf_counter() - t0
    u = np.asarray(da.samples)
    draws = np.array(jax.vmap(lambda u: pde.box_transform(u, plo, phi)[0])(u.reshape(-1, 3)))
    draws[:, 1] = np.exp(draws[:, 1])
    post["corrected"] = draws
    # Cost model of section 3 (compile and warm-up excluded for every sampler): surrogate
    # value_and_grad calls plus exact value calls (the error-model fit included).
    ev_call = rec.time(jax.jit(lp_ex), init)["median_s"]
    n_sur = DA_LEAPFROG * DA_SURROGATE_STEPS * cfg["da_samples"] * cfg["chains"]
    n_ex = (cfg["da_samples"] + DA_ERROR_FIT) * cfg["chains"]
    da_ess = float(jnp.min(da.ess))
    da_cost = stats["surrogate"]["grad_call_s"] * n_sur + ev_call * n_ex
    stats["corrected"] = {
        "wall_s_incl_compile": da_wall,
        "rhat_max": float(jnp.max(da.rhat)),
        "ess_min": da_ess,
        "exact_stage_acceptance": np.asarray(da.acceptance).tolist(),
        "surrogate_hmc_acceptance": np.asarray(da.surrogate_acceptance).tolist(),
        "error_model_rmse_nats": np.asarray(da.error_fit_rmse).tolist(),
        "surrogate_grads": n_sur,
        "exact_value_calls": n_ex,
        "exact_value_call_s": ev_call,
        "time_per_ess_s": da_cost / da_ess if da_ess > 0 else float("inf"),
    }
    rec.metric(
        "posterior_corrected",
        {"mean": draws.mean(0).tolist(), "sd": draws.std(0).tolist(), **stats["corrected"]},
    )
    # Importance reweighting of the uncorrected surrogate draws (the other correction; a
    # metric only): self-normalised weights exp(l - l~) and their Kish effective sample size.
    u_sur = jnp.asarray(box_inverse_np(post["surrogate"], plo, phi))
    logw = np.asarray(jax.jit(jax.vmap(lambda u: lp_ex(u) - lp_sur(u)))(u_sur))
    wts = np.exp(logw - logw.max())
    wts /= wts.sum()
    is_mean = wts @ post["surrogate"]
    is_sd = np.sqrt(wts @ (post["surrogate"] - is_mean) ** 2)
    sd_exact = post["exact"].std(0)
    rec.metric(
        "importance_reweighted_surrogate",
        {
            "mean_dev_in_exact_sd": (np.abs(is_mean - post["exact"].mean(0)) / sd_exact).tolist(),
            "sd_ratio": (is_sd / sd_exact).tolist(),
            "kish_ess": float(1.0 / np.sum(wts**2)),
            "draws": int(wts.size),
        },
    )

    dev_unc = np.abs(post["surrogate"].mean(0) - post["exact"].mean(0)) / sd_exact
    dev = np.abs(post["corrected"].mean(0) - post["exact"].mean(0)) / sd_exact
    dev_euler = (post["euler"].mean(0) - post["exact"].mean(0)) / sd_exact
    rec.metric("surrogate_mean_dev_in_exact_sd", dev_unc.tolist())
    rec.metric("surrogate_sd_ratio", (post["surrogate"].std(0) / sd_exact).tolist())
    rec.metric("corrected_mean_dev_in_exact_sd", dev.tolist())
    rec.metric("corrected_sd_ratio", (post["corrected"].std(0) / sd_exact).tolist())
    rec.metric("euler_mean_dev_in_exact_sd", dev_euler.tolist())
    rec.metric("euler_kappa_target_pred", (1 - math.exp(-TRUTH[0] * DELTA)) / DELTA)
    rec.claim(
        "surrogate_posterior_mean",
        "CIR surrogate posterior, corrected by delayed acceptance (flow screens, exact ncx2 "
        "decides): mean of kappa within 0.5 exact-posterior sd of the exact-likelihood "
        "posterior mean",
        float(dev[0]),
        "<=",
        0.5,
        uncorrected=float(dev_unc[0]),
    )
    rec.claim(
        "surrogate_posterior_all",
        "all of (kappa, theta, nu) corrected-surrogate posterior means within 0.5 exact sd",
        float(dev.max()),
        "<=",
        0.5,
        uncorrected=float(dev_unc.max()),
    )
    rec.claim(
        "euler_kappa_bias",
        "Euler posterior mean of kappa at least 2 exact sd below the "
        "exact posterior mean at kappa Delta = 0.5",
        float(-dev_euler[0]),
        ">=",
        2.0,
    )
    t_ex = stats["exact"]["time_per_ess_s"]
    ratio = stats["corrected"]["time_per_ess_s"] / t_ex
    ratio_unc = stats["surrogate"]["time_per_ess_s"] / t_ex
    rec.metric(
        "time_per_ess_s",
        {k: stats[k]["time_per_ess_s"] for k in liks}
        | {"corrected": stats["corrected"]["time_per_ess_s"]},
    )
    rec.metric("time_per_ess_ratio_corrected_over_exact", ratio)
    rec.metric("time_per_ess_ratio_surrogate_over_exact", ratio_unc)
    rec.claim(
        "surrogate_time_per_ess",
        "corrected-surrogate MCMC time per effective sample <= 2x the exact ncx2 NUTS's",
        ratio,
        "<=",
        2.0,
        uncorrected=ratio_unc,
    )
    rec.note(NOTE_CORRECTION)
    rec.note(NOTE_HISTORY)
    rec.note(
        "Time per effective sample = cost / min ESS over (kappa, theta, nu), compile and "
        "warm-up excluded for every sampler; NUTS cost = median value_and_grad time x mean "
        "leapfrog steps x draws; delayed acceptance cost = surrogate value_and_grad time x "
        "its gradients + exact value time x its exact calls (the error-model fit included). "
        "The Euler pseudo-likelihood with "
        "sub-stepping (simulated likelihood) baseline is not implemented: no claim made."
    )

    # ---- 4. Real data: Irates r1 (monthly) ------------------------------------------------------
    if cfg["real_data"]:
        try:
            r1 = load_irates("r1")
        except MissingDataError as err:
            rec.note(f"real data skipped: {err}")
        else:
            cir_free = pde.CoxIngersollRoss(require_feller=False)
            rx = jnp.asarray(r1)[:, None]
            rlo, rhi = jnp.array([0.005, 0.002, 0.005]), jnp.array([3.0, 0.3, 0.5])
            fns = {"exact": pde.exact_path_loglik, "euler": pde.euler_path_loglik}
            for i, name in enumerate(cfg["real_data"]):

                def lp(u, fn=fns[name]):
                    lam, logdet = pde.box_transform(u, rlo, rhi)
                    return fn(cir_free, rx, lam, 1.0 / 12.0) + logdet

                init_r = pde.box_inverse(jnp.array([0.3, 0.05, 0.08]), rlo, rhi)
                d_u, st = _posterior(pde, lp, init_r, jr.fold_in(k_real, i), cfg, rec, timed=False)
                d = np.asarray(jax.vmap(lambda u: pde.box_transform(u, rlo, rhi)[0])(d_u))
                nu = 2 * d[:, 0] * d[:, 1] / d[:, 2] ** 2
                rec.metric(
                    f"irates_{name}",
                    {
                        "mean (kappa, theta, sigma)": d.mean(0).tolist(),
                        "sd": d.std(0).tolist(),
                        "nu_mean": float(nu.mean()),
                        **st,
                    },
                )
            rec.note(
                "Irates (r1, Delta = 1/12): exact-likelihood posterior (and Euler in "
                "--full); the surrogate was trained for Delta = 0.25 on the synthetic box, "
                "so no Delta = 1/12 flow is used on the real series in this run."
            )
    try:
        import pymle  # noqa: F401

        rec.peer("pymle-diffusion", "installed but not wired")
    except ImportError:
        rec.peer("pymle-diffusion", "not installed")

    with rec.figure("posteriors", ncols=3, figsize=(12, 3.5)) as (fig, axes):
        for j, pname in enumerate(("kappa", "theta", "nu")):
            for name, d in post.items():
                axes[j].hist(d[:, j], bins=40, density=True, histtype="step", label=name)
            axes[j].set_title(f"CIR posterior of {pname} (Delta = {DELTA})")
            axes[j].set_xlabel(pname)
        axes[0].set_ylabel("density")
        axes[0].legend()


def plan(config, key):
    """`python -m benchmarks plan`: one Neural Galerkin right-hand side of the CIR flow at the
    ``--full`` collocation size (the training's unit of work: ``ng_steps`` steps of Bosh3 take
    about 3 evaluations each).
    """
    import jaxgen.pde as pde

    cir = pde.CoxIngersollRoss()
    sample, lo, hi = pde.cir_condition_sampler(kappa=BOX["kappa"], theta=BOX["theta"], nu=BOX["nu"])
    flow = pde.TransitionFlow(
        cir, lo, hi, num_units=config["units"], width=config["width"], key=jr.fold_in(key, 0)
    )
    n = config["colloc"]
    x0s, lams = jax.vmap(sample)(jr.split(key, n))
    xs = x0s

    def rhs(flow, xs, x0s, lams):
        return pde.ng_velocity(flow, jnp.asarray(DELTA / 2), xs, x0s, lams, config["eps_rel"])

    label = f"Neural Galerkin velocity, {n} collocation points"
    return [(label, rhs, (flow, xs, x0s, lams), 3 * config["ng_steps"])]
