"""PADL (parsimoniously activated dictionary learning) against scikit-learn's dictionary learners.

Planted-dictionary recovery, then 8x8 natural-image patches and digits: PADL with data-driven
(MDL) hyper-parameters and the lambda_0 path, against scikit-learn `DictionaryLearning` and
`MiniBatchDictionaryLearning` (OMP and lasso coding) at matched non-zeros per test sample, with
debiased codes; test PSNR (peak 1, patch mean added back), active atoms, storage bits, fit and
transform time; a token-selection proxy for the paper's VLM acceleration.
"""

import time

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from jaxgen.data import MissingDataError, extract_patches, load_digits, load_sample_images
from jaxgen.dictionary import debias_codes, fit_padl, storage_bits, transform

NAME = "padl_dictionary"
PAPER = (
    "Zhao, Tang, Li: On the Sparsity-Storage-Accuracy Tradeoff in Parsimoniously Activated "
    "Dictionary Learning (arXiv 2606.22352)"
)
CONFIGS = {
    "quick": {
        "planted": {"d": 32, "k_true": 20, "K": 100, "N": 3000, "lam1": 0.1, "lam0": 10.0},
        "patch_train": 2000,
        "patch_test": 500,
        "patch_K": 64,
        "digits_K": 32,
        "warmup": 3,
        "steps": 12,
        "ramp": 4,
        "prune_every": 4,
        "path_size": 4,
        "path_steps": 6,
        "sk_iter": 10,
        "vlm_crops": 6,
        "vlm_m": [4, 8, 16],
    },
    "full": {
        "planted": {"d": 32, "k_true": 20, "K": 100, "N": 3000, "lam1": 0.1, "lam0": 10.0},
        "patch_train": 10000,
        "patch_test": 2000,
        "patch_K": 256,
        "digits_K": 128,
        "warmup": 10,
        "steps": 40,
        "ramp": 10,
        "prune_every": 10,
        "path_size": 8,
        "path_steps": 15,
        "sk_iter": 50,
        "vlm_crops": 50,
        "vlm_m": [4, 8, 16, 32],
    },
}

# --full --smoke: the full configuration's code path, every size cut to the least that runs.
SMOKE = {
    "planted": {"d": 8, "k_true": 4, "K": 12, "N": 100},
    "patch_train": 200,
    "patch_test": 50,
    "patch_K": 16,
    "digits_K": 16,
    "warmup": 2,
    "steps": 4,
    "ramp": 2,
    "prune_every": 2,
    "path_size": 2,
    "path_steps": 2,
    "sk_iter": 2,
    "vlm_crops": 2,
    "vlm_m": [4, 8],
}


# Ablations (issue 26), measured offline at this commit on the quick configuration, seed 0,
# float32; they are printed as notes beside the claims they explain, not computed in the run.
PLANTED_DEFAULTS_ABLATION = """\
Planted problems the claims above do not use, `fit_padl(X, K, key)` with its defaults ("mdl"), \
float32, |A| / planted and recovery (|cos| > 0.95). Root cause of the excess atoms: the fixed-D \
prune test (re-code the samples of atom k with D fixed, accept if the cost rises by < lambda_0) \
keeps pairs of atoms that split one planted atom (cosines ~0.99): each is the better fit for its \
half, so removing either costs 1.6-4x lambda_0 (0.99-2.4 vs 0.60 on P4). Not the cause: the MDL \
lambda_0 (an atom that only fits noise gains ~ d sigma^2/2, far below its price b d ln2 sigma^2) \
and not too few prune rounds (P4 / P7 with 80 iterations: 22 / 26 atoms; pruning every 5: 21 / \
30). Fix (library): the removal test re-aligns the dictionary (one exact block sweep on both \
branches, accepted iff F_0 still drops; monotone) and repeats the pass until nothing is removed \
(<= 3 passes). Tested in tests/dictionary (fast: d = 16 and 12, K = 24, N ~ 500; slow: P4, \
P8).

| problem (d, planted, K, N, atoms per sample, noise) | before: fixed-D prune | after |
|---|---|---|
| P0 (16, 6, 18, 500, 2, 0.05) | 7/6, 1.00 | 6/6, 1.00 |
| P1 (24, 12, 36, 1500, 3, 0.1) | 13/12, 1.00 | 12/12, 1.00 |
| P2 (48, 30, 60, 1500, 4, 0.02) | 30/30, 1.00 | 30/30, 1.00 |
| P3 (24, 6, 24, 500, 3, 0.1) | 7/6, 1.00 | 6/6, 1.00 |
| P4 (16, 12, 48, 1500, 2, 0.02) | 22/12, 1.00 | 12/12, 1.00 |
| P5 (48, 6, 24, 1500, 4, 0.05) | 13/6, 0.67 | 12/6, 0.83 (not solved) |
| P6 (24, 30, 90, 1500, 3, 0.05) | 30/30, 1.00 | 30/30, 1.00 |
| P7 (32, 20, 100, 3000, 3, 0.05) | 27/20, 1.00 | 20/20, 1.00 |
| P8 (48, 12, 36, 1500, 4, 0.05) | 15/12, 1.00 | 12/12, 1.00 |
| P9 (16, 6, 24, 500, 4, 0.1) | 12/6, 1.00 | 7/6, 1.00 |

P5 (4 of 6 atoms in every sample: codes are not sparse) still keeps mixture atoms \
(cosines 0.78-0.93 to a planted atom) whose re-aligned removal costs 5-10 lambda_0; more \
re-alignment rounds per test (2, 3), a longer warm-up (20) or the universal lambda_1 did not \
help (12-13 atoms, or 24 with the universal lambda_1).
"""

PATCH_ABLATION = """\
Patches, the PSNR protocol and the code weight (issue 41, quick data, seed 0, float32; offline \
figures). The protocol compares like with like: PADL's test codes are lasso at its lambda_1 then \
debiased (least squares on each support); the baseline is the best of scikit-learn's \
DictionaryLearning / MiniBatch (64 atoms, alpha = PADL's lambda_1) coded by OMP at the same \
integer nnz or by lasso_cd bisected to PADL's mean nnz and debiased the same way. Debiased lasso \
is the stronger baseline (30.79 vs 26.37 dB for OMP at 5 nnz): the l1 codes spread the \
non-zeros over patches by their energy, OMP gives every patch 5. With the PPCA floor and the MAP \
weight lambda_1 = sigma2/beta = 0.052, PADL kept 23 atoms at 5.3 nnz, 27.96 dB, 2.8 dB below. \
Not the transform (scikit-learn's lasso on PADL's 23 atoms at matched nnz, debiased: 27.92 dB) \
and not a badly learned dictionary (scikit-learn's own 23-atom dictionary: 27.98 dB; 38 atoms: \
29.98): fewer atoms at the same nnz. The drop at fixed |A| grows with the nnz (scikit-learn \
23 atoms vs 64 at 5.3 / 8 / 12 nnz: 2.8 / 5.4 / 9.2 dB), because the high-energy patches use \
many atoms of a complete dictionary. A (lambda_1, lambda_0) sweep (fixed values, the run's \
schedule; baseline = scikit-learn DictionaryLearning, debiased lasso, alpha = lambda_1):

| lambda_1 | lambda_0 | active / 64 | test nnz | PADL PSNR | baseline PSNR | drop (dB) |
|---|---|---|---|---|---|---|
| 0.0515 | 0.8 | 44 | 8.14 | 31.53 | 33.57 | 2.03 |
| 0.0515 | 1.2 | 34 | 7.08 | 29.86 | 32.65 | 2.80 |
| 0.0515 | 1.8 | 26 | 5.79 | 28.48 | 31.23 | 2.74 |
| 0.08 | 0.8 | 40 | 5.22 | 29.43 | 30.24 | 0.81 |
| 0.08 | 1.2 | 31 | 4.51 | 28.46 | 29.87 | 1.41 |
| 0.08 | 1.8 | 21 | 3.63 | 27.21 | 29.08 | 1.87 |
| 0.12 | 0.8 | 33 | 2.99 | 27.54 | 28.04 | 0.50 |
| 0.12 | 1.2 | 27 | 2.63 | 27.03 | 27.74 | 0.71 |
| 0.12 | 1.8 | 20 | 2.37 | 26.50 | 27.45 | 0.95 |

Both claims need codes sparser than the MAP weight gives; no single noise level moves along \
the MAP line lambda_0 / lambda_1 = beta (b d ln2 + ...) = 47 into that region. The warm-up \
codes of an interpolating fit are dense (their density is the warm-up lambda_1's), so beta is \
not a sparsity scale there either. Default now (interpolating fits only): lambda_1 = \
sigma sqrt(2 ln K), the universal threshold (the largest correlation of K unit atoms with \
noise of that variance): 0.113, 16 of 64 atoms (0.25), 2.26 nnz, 26.23 dB vs 27.36 dB (drop \
1.13); re-estimating lambda_1 by the MAP rule at the end gives 0.119 (16 atoms, drop 1.04): \
the two rules agree at the fixed point. Other patch draws (seeds 1, 2; baseline DictionaryLearning \
only): 18 / 18 atoms, drop 0.96 / 1.07 dB. With fit_padl's own schedule (warm-up 10, 40 \
iterations, seed 0): 11 atoms, 1.83 nnz, drop 1.39 dB; its two lambda_0 re-estimates raise sigma2 \
from 1.5e-3 to 3.0e-3 as the sparser fit's residual grows (64 -> 17 -> 11 atoms). Planted \
problems and digits spend < 40% of the degrees of freedom and keep the MAP weight (unchanged). \
Before the floor (issue 26 analysis, kept below): \
Patches (quick data: 2000 train / 500 test 8x8 patches, K = 64). Root cause: a recipe limit \
of the MDL rule, not the pruning. Natural patches have no noise floor, so with K = d the warm-up \
lasso fits almost everything and sigma2_hat = RSS/dof ~ 1e-5; the MDL price lambda_0 = sigma2_hat \
(b d ln2 + ...) ~ 0.02 then keeps every atom and lambda_1 = sigma2_hat/beta_hat ~ 0.003 gives \
near-dense codes (nnz ~ 40 of 64 per patch). The fixed point follows the warm-up lambda_1 (factor \
0.1 / 0.3 / 0.6 of median max |D^T x|: 63 / 64 / 44 atoms), which is why the claim is not met \
by moving that factor (a tuning to this data, not a rule). At other prices the algorithm meets \
both targets: PSNR = PADL test PSNR (debiased codes), OMP = the better scikit-learn \
DictionaryLearning / MiniBatch (alpha = 0.1, 10 iterations) with OMP at the same nnz (the run's \
own baseline also tries debiased lasso with alpha = PADL's lambda_1, so its drop differs).

| setting | active / 64 | test nnz | PADL PSNR | OMP PSNR | drop (dB) |
|---|---|---|---|---|---|
| mdl, fixed-D prune (before) | 63 (0.98) | 39.5 | 59.99 | 36.97 | -23.0 |
| mdl, re-aligned prune (after) | 63 (0.98) | 39.5 | 59.99 | 36.97 | -23.0 |
| mdl, default schedule (warm-up 10, 40 iterations) | 64 (1.00) | 47.0 | 65.80 | 39.03 | -26.8 |
| path, 4 points (default grid from sigma2_hat) | 64 (1.00) | 39.6 | 60.19 | 37.23 | -23.0 |
| fixed lambda_1 = 0.0029 (mdl's), lambda_0 = 0.25 | 63 (0.98) | 39.1 | 59.81 | 36.97 | -22.9 |
| fixed lambda_1 = 0.0029, lambda_0 = 2.5 | 34 (0.53) | 24.2 | 30.52 | 33.07 | 2.6 |
| fixed lambda_1 = 0.03, lambda_0 = 2.5 | 25 (0.39) | 7.5 | 28.56 | 27.62 | -0.9 |
| fixed lambda_1 = 0.03, lambda_0 = 10 | 7 (0.11) | 2.6 | 24.77 | 25.59 | 0.8 |

The PSNR-drop claim fails in the run for the same reason: at nnz ~ 40 of 64 the run's debiased \
lasso baseline is a near-complete least-squares fit (62.3 dB), which PADL's lasso-then-debias \
codes on 63 atoms trail (60.0 dB); at a parsimonious price (rows 7-8) PADL is within 1 dB of OMP.
"""

NOISE_FLOOR_ABLATION = """\
Noise level of the MDL price (issue 41), quick patches (2000 train / 500 test, K = 64), float32, \
seed 0, test PSNR with debiased codes; offline figures at this commit. The residual estimate \
sigma2_fit = RSS/dof collapses on patches: the warm-up lasso spends 0.49 of the N d degrees of \
freedom (planted problems, noisy or noiseless: 0.11-0.36), sigma2_fit ~ 1e-4 -> 2e-5, and the \
atom price lambda_0 = sigma2 (b d ln2 + ...) ~ 0.02 keeps 63 atoms. Now, when the fit spends \
> 40% of the degrees of freedom, sigma2 is floored by the probabilistic-PCA noise with d/2 \
components (mean of the smaller half of the covariance eigenvalues: 1.5e-3 here; equal to the \
noise variance within 10% on planted problems with < d/2 atoms), for lambda_0 and (by the \
universal threshold, see the patch note) lambda_1; re-estimates never go below the warm-up's \
sigma2 (noiseless planted data: the residual keeps falling).

| noise level for the MDL price | active / 64 | test nnz | test PSNR |
|---|---|---|---|
| RSS/dof (before) | 63 | 39.5 | 59.99 |
| PPCA floor, smaller half, always | 29 | 9.6 | 29.30 (beta over nonzeros) |
| PPCA floor, smaller quarter, always | 45 | 17.1 | 33.50 (beta over nonzeros) |
| PPCA floor, smaller half, if dof used > 0.5 | 63 | 39.5 | 59.99 (floor only from round 2) |
| PPCA floor, smaller half, if dof used > 0.4, MAP lambda_1 | 23 | 5.3 | 27.96 |
| the same floor, universal lambda_1 = sigma sqrt(2 ln K) (default) | 16 | 2.3 | 26.23 |

Rejected: the floor without the switch over-prunes planted problems with more atoms than \
dimensions (30 in d = 24: floor 30x the noise, 22/30 atoms, recovery 0.60; smaller quarter: \
28/30, 0.93); a quantisation floor (8-bit pixels: 1.3e-6, below the collapse); the Laplace \
scale over the non-zeros (it would move every planted lambda_1). At the default's fixed point \
the plain residual estimate is 1.7e-3, the floor's level. Planted problems (float64 tests): \
noiseless (12, 6, 24, 480, 2), (16, 12, 48, 1500, 2), (24, 30, 90, 1500, 3) keep the planted \
count with recovery 1.0; noiseless (16, 6, 24, 500, 3) keeps 8/6 (two planted atoms split in \
two, cosines 0.94-0.99, that one re-aligning sweep does not merge; a known failure).
"""

VLM_ABLATION = """\
VLM token proxy (m = 8 kept vectors per 64-token crop, token PSNR in dB, 6 crops; a different \
crop draw from the run's, so compare within rows). Tried: the dictionary (mdl, 63 atoms, or \
fixed lambda_1 = 0.03, lambda_0 = 2.5, 25 atoms) and the selection rule (the run's top-m by \
lasso usage, or a per-crop greedy simultaneous OMP over the atoms). Neither closes the gap: \
k-means centroids and the top-norm tokens are built from the crop's own tokens, whereas PADL \
selects among generic atoms learned on other crops, so the proxy favours them structurally; \
the paper's VLM setting (a dictionary of visual features shared by a language model) is not \
reproducible offline.

| dictionary | PADL, top usage | PADL, greedy SOMP | k-means | top-norm tokens |
|---|---|---|---|---|
| mdl (63 atoms) | 39.24 | 39.47 | 44.29 | 43.75 |
| fixed 0.03 / 2.5 (25 atoms) | 40.30 | 40.95 | 44.29 | 43.75 |
"""


def _planted(seed, d, k_true, n, per_sample=3, noise=0.05):
    rng = np.random.default_rng(seed)
    D = rng.normal(size=(d, k_true))
    D /= np.linalg.norm(D, axis=0, keepdims=True)
    R = np.zeros((k_true, n))
    for i in range(n):
        R[rng.choice(k_true, per_sample, replace=False), i] = rng.laplace(size=per_sample)
    return (D @ R + noise * rng.normal(size=(d, n))).astype(np.float32), D


def _psnr(X, X_hat):
    return float(10 * np.log10(1.0 / np.mean((np.asarray(X) - np.asarray(X_hat)) ** 2)))


def _patches(key, n_train, n_test):
    images = load_sample_images(grey=True)
    keys = jr.split(key, len(images))
    per = (n_train + n_test) // len(images) + 1
    P = np.concatenate(
        [
            extract_patches(k, im, 8, num=per).reshape(per, 64)
            for im, k in zip(images, keys, strict=True)
        ]
    )
    P = P[np.asarray(jr.permutation(key, len(P)))][: n_train + n_test]
    P = P - P.mean(axis=1, keepdims=True)  # DC removed (added back exactly: PSNR of the rest)
    return P[:n_train].T.astype(np.float32), P[n_train:].T.astype(np.float32)


def _digits():
    images, _ = load_digits()
    X = images.reshape(len(images), 64) / 16.0
    train, test = X[:1400], X[1400:]
    mean = train.mean(axis=0)
    return (train - mean).T.astype(np.float32), (test - mean).T.astype(np.float32)


def _sk_lasso_matched(Xte, comps, target_nnz):
    """Bisect scikit-learn's lasso_cd alpha to the target non-zeros per sample; debias."""
    from sklearn.decomposition import sparse_encode

    lo, hi = 1e-4, 1.0
    for _ in range(10):
        alpha = np.sqrt(lo * hi)
        code = sparse_encode(
            Xte.T.astype(np.float64),
            comps.astype(np.float64),
            algorithm="lasso_cd",
            alpha=alpha,
            max_iter=300,
        )
        nnz = np.count_nonzero(code) / Xte.shape[1]
        if abs(nnz - target_nnz) <= 0.05 * target_nnz:
            break
        lo, hi = (alpha, hi) if nnz > target_nnz else (lo, alpha)
    return code.T, nnz


def _compare(name, Xtr, Xte, K, config, key, rec):
    """PADL (mdl) vs scikit-learn at matched test non-zeros; returns the table row dict."""
    import warnings

    out = {}
    t0 = time.perf_counter()
    padl = fit_padl(
        jnp.asarray(Xtr),
        K,
        key=key,
        hyper="mdl",
        warmup_steps=config["warmup"],
        max_steps=config["steps"],
        ramp_steps=config["ramp"],
        prune_every=config["prune_every"],
    )
    out["padl_fit_s"] = time.perf_counter() - t0
    lam1 = padl.hyperparameters["lam1"]
    t0 = time.perf_counter()
    R = jax.block_until_ready(transform(jnp.asarray(Xte), padl))
    out["padl_transform_s"] = time.perf_counter() - t0
    D = np.asarray(padl.dictionary)
    nnz = float(np.count_nonzero(np.asarray(R))) / Xte.shape[1]
    out.update(
        padl_active=padl.num_active,
        K=K,
        padl_nnz=nnz,
        padl_psnr=_psnr(Xte, D @ np.asarray(R)),
        padl_train_psnr=_psnr(Xtr, D @ np.asarray(padl.codes)),
        padl_storage_bits=storage_bits(
            np.asarray(R), dim=Xte.shape[0], active=np.asarray(padl.active)
        ),
        padl_hyper=padl.hyperparameters,
    )
    # Equal-iteration fit time: PADL at fixed (learned) hyper-parameters, compiled already.
    iters = config["sk_iter"]
    t0 = time.perf_counter()
    fit_padl(
        jnp.asarray(Xtr),
        K,
        key=key,
        hyper={"lam1": lam1, "lam0": padl.hyperparameters["lam0"]},
        warmup_steps=0,
        max_steps=iters,
        tol=0.0,
        throw=False,
    )
    out["padl_fit_equal_iters_s"] = time.perf_counter() - t0
    try:
        from sklearn.decomposition import DictionaryLearning, MiniBatchDictionaryLearning
    except ImportError:
        rec.peer(f"sklearn.DictionaryLearning[{name}]", "not installed")
        return out
    target = max(1, round(nnz))
    best = -np.inf
    for label, est in (
        (
            "DictionaryLearning",
            DictionaryLearning(
                n_components=K,
                alpha=lam1,
                max_iter=iters,
                fit_algorithm="cd",
                tol=1e-12,
                transform_algorithm="omp",
                random_state=0,
            ),
        ),
        (
            "MiniBatchDictionaryLearning",
            MiniBatchDictionaryLearning(
                n_components=K,
                alpha=lam1,
                batch_size=256,
                max_iter=iters,
                transform_algorithm="omp",
                random_state=0,
            ),
        ),
    ):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t0 = time.perf_counter()
            est.fit(Xtr.T.astype(np.float64))
            fit_s = time.perf_counter() - t0
            comps = est.components_
            est.set_params(transform_n_nonzero_coefs=target)
            t0 = time.perf_counter()
            omp = est.transform(Xte.T.astype(np.float64)).T
            omp_s = time.perf_counter() - t0
            lasso, lasso_nnz = _sk_lasso_matched(Xte, comps, nnz)
        lasso_db = np.asarray(
            debias_codes(
                jnp.asarray(Xte), jnp.asarray(comps.T, jnp.float32), jnp.asarray(lasso, jnp.float32)
            )
        )
        row = {
            "fit_s": fit_s,
            "omp_transform_s": omp_s,
            "omp_nnz": target,
            "psnr_omp": _psnr(Xte, comps.T @ omp),
            "lasso_nnz": lasso_nnz,
            "psnr_lasso": _psnr(Xte, comps.T @ lasso),
            "psnr_lasso_debiased": _psnr(Xte, comps.T @ lasso_db),
            "active_atoms": int(np.sum(np.any(omp != 0, axis=1))),
            "storage_bits_omp": storage_bits(omp, dim=Xte.shape[0]),
        }
        rec.peer(f"sklearn.{label}[{name}]", row)
        best = max(best, row["psnr_omp"], row["psnr_lasso_debiased"])
        out[f"{label}_fit_s"] = fit_s
    out["best_sklearn_psnr"] = best
    return out


def _path(Xtr, Xte, K, config, key):
    res = fit_padl(
        jnp.asarray(Xtr),
        K,
        key=key,
        hyper="path",
        path_size=config["path_size"],
        path_steps=config["path_steps"],
        warmup_steps=config["warmup"],
        throw=False,
        ramp_steps=config["ramp"],
        prune_every=config["prune_every"],
    )
    p = res.path
    return {
        "lam0": p["lam0"],
        "num_active": p["num_active"],
        "train_rel_error": p["rel_error"],
        "train_psnr": [float(10 * np.log10(Xtr.size / r)) for r in p["rss"]],
        "storage_bits": p["storage_bits"],
        "nnz_per_sample": p["nnz_per_sample"],
        "selected": int(p["selected"]),
        "test_psnr_selected": _psnr(
            Xte, np.asarray(res.dictionary) @ np.asarray(transform(jnp.asarray(Xte), res))
        ),
    }


def _span_psnr(T, B):
    """PSNR of the tokens T (n, 64) projected on the span of the rows of B (m, 64)."""
    coef, *_ = np.linalg.lstsq(B.T, T.T, rcond=None)
    return _psnr(T, (B.T @ coef).T)


def _vlm_proxy(padl_D, lam1, config, key):
    """Tokens = the 64 patches of a 64x64 crop; keep m basis vectors and project all tokens."""
    from sklearn.cluster import KMeans

    images = load_sample_images(grey=True)
    out = {m: {"padl": [], "kmeans": [], "norm": [], "random": []} for m in config["vlm_m"]}
    rng = np.random.default_rng(0)
    for c in range(config["vlm_crops"]):
        im = images[c % len(images)]
        r, s = rng.integers(0, im.shape[0] - 64), rng.integers(0, im.shape[1] - 64)
        crop = im[r : r + 64, s : s + 64]
        T = crop.reshape(8, 8, 8, 8).transpose(0, 2, 1, 3).reshape(64, 64)
        T = T - T.mean(axis=1, keepdims=True)
        codes = np.asarray(
            transform(jnp.asarray(T.T, jnp.float32), padl_D, lam1=lam1, debias=False)
        )
        usage = np.abs(codes).sum(axis=1)
        norms = np.linalg.norm(T, axis=1)
        for m in config["vlm_m"]:
            top = np.argsort(-usage)[:m]
            out[m]["padl"].append(_span_psnr(T, np.asarray(padl_D)[:, top].T))
            km = KMeans(m, n_init=1, random_state=c).fit(T)
            out[m]["kmeans"].append(_span_psnr(T, km.cluster_centers_))
            out[m]["norm"].append(_span_psnr(T, T[np.argsort(-norms)[:m]]))
            out[m]["random"].append(_span_psnr(T, T[rng.choice(64, m, replace=False)]))
    return {m: {k: float(np.mean(v)) for k, v in d.items()} for m, d in out.items()}


def run(config, key, rec):
    k_planted, k_patch, k_fit, k_digits = jr.split(key, 4)
    # 1. Planted dictionary: |A| and recovery against the planted atoms.
    p = config["planted"]
    X, D_true = _planted(0, p["d"], p["k_true"], p["N"])
    res = fit_padl(
        jnp.asarray(X), p["K"], key=k_planted, hyper={"lam1": p["lam1"], "lam0": p["lam0"]}
    )
    D = np.asarray(res.dictionary)[:, np.asarray(res.active)]
    cos = np.abs(D_true.T @ D) / np.linalg.norm(D, axis=0, keepdims=True)
    recovery = float(np.mean(cos.max(axis=1) > 0.95))
    h = res.history
    seq = np.stack(
        [h["objective_start"], h["objective_r"], h["objective_prune"], h["objective"]], 1
    )
    worst = float(np.max(np.diff(seq, axis=1) / np.abs(seq[:, :-1])))
    rec.metric("planted_active_atoms", res.num_active)
    rec.metric("planted_atom_recovery", recovery)
    rec.metric(
        "planted_rel_error",
        float(
            np.linalg.norm(X - np.asarray(res.dictionary) @ np.asarray(res.codes))
            / np.linalg.norm(X)
        ),
    )
    rec.claim(
        "planted_active_atoms_min",
        "count penalty keeps >= the 20 planted atoms",
        res.num_active,
        ">=",
        20,
    )
    rec.claim(
        "planted_active_atoms_max",
        "count penalty keeps <= 22 atoms (20 planted)",
        res.num_active,
        "<=",
        22,
    )
    what = "fraction of planted atoms with |cos| > 0.95"
    rec.claim("planted_atoms_learned", what, recovery, ">=", 0.95)
    rec.claim(
        "objective_monotone",
        "largest relative objective increase within an iteration (R-step, prune, D-step; float32)",
        worst,
        "<=",
        1e-6,
    )
    rec.note(PLANTED_DEFAULTS_ABLATION)
    rec.note(NOISE_FLOOR_ABLATION)
    print(f"planted done: {res.num_active} atoms", flush=True)
    # 2. Patches and digits at matched sparsity.
    try:
        Xtr, Xte = _patches(k_patch, config["patch_train"], config["patch_test"])
        Dtr, Dte = _digits()
    except MissingDataError as err:
        rec.note(f"image data unavailable: {err}")
        return
    rows = {}
    for name, (a, b, K, k) in {
        "patches": (Xtr, Xte, config["patch_K"], k_fit),
        "digits": (Dtr, Dte, config["digits_K"], k_digits),
    }.items():
        t0 = time.perf_counter()
        rows[name] = _compare(name, a, b, K, config, k, rec)
        print(f"{name}: {time.perf_counter() - t0:.1f} s", flush=True)
        rec.metric(f"{name}_table", rows[name])
    pr = rows["patches"]
    frac = pr["padl_active"] / pr["K"]
    rec.metric("active_atom_fraction_patches", frac)
    if "best_sklearn_psnr" in pr:
        drop = pr["best_sklearn_psnr"] - pr["padl_psnr"]
        rec.metric("psnr_drop_vs_sklearn_matched_nnz", drop)
        rec.claim(
            "active_atom_fraction_patches",
            "PADL (mdl) uses <= 60% of the atoms on patches",
            frac,
            "<=",
            0.6,
        )
        rec.claim(
            "psnr_drop_vs_sklearn_matched_nnz",
            "test PSNR drop vs the best scikit-learn "
            "baseline at matched nnz (debiased/OMP codes), dB",
            drop,
            "<=",
            1.5,
        )
        rec.note(PATCH_ABLATION)
        ratio = pr["padl_fit_equal_iters_s"] / pr["DictionaryLearning_fit_s"]
        rec.claim(
            "fit_time_ratio_vs_sklearn",
            "PADL fit time / scikit-learn DictionaryLearning "
            "fit time at equal iterations (patches)",
            ratio,
            "<=",
            1.0,
        )
    # 3. The trade-off curve (lambda_0 path) on patches.
    path = _path(Xtr, Xte, config["patch_K"], config, k_fit)
    rec.metric("patches_path", path)
    with rec.figure("tradeoff", ncols=2, figsize=(10, 4)) as (fig, axes):
        axes[0].plot(path["num_active"], path["train_psnr"], "o-", label="PADL path (train)")
        axes[0].scatter([pr["padl_active"]], [pr["padl_psnr"]], c="r", label="PADL mdl (test)")
        for label in ("DictionaryLearning", "MiniBatchDictionaryLearning"):
            peer = rec.peers.get(f"sklearn.{label}[patches]")
            if isinstance(peer, dict):
                axes[0].scatter(
                    [peer["active_atoms"]],
                    [peer["psnr_omp"]],
                    marker="x",
                    label=f"{label} OMP (test)",
                )
        axes[0].set(xlabel="active atoms |A|", ylabel="PSNR (dB)", title="PSNR vs active atoms")
        axes[0].legend(fontsize=7)
        axes[1].plot(np.asarray(path["storage_bits"]) / 8e3, path["train_psnr"], "o-")
        axes[1].set(xlabel="storage (kB)", ylabel="train PSNR (dB)", title="PSNR vs storage")
    print("path done", flush=True)
    # 4. VLM token-selection proxy.
    padl_patch = fit_padl(
        jnp.asarray(Xtr),
        config["patch_K"],
        key=k_fit,
        hyper="mdl",
        warmup_steps=config["warmup"],
        max_steps=config["steps"],
        ramp_steps=config["ramp"],
        prune_every=config["prune_every"],
    )
    vlm = _vlm_proxy(
        padl_patch.dictionary[:, padl_patch.active],
        padl_patch.hyperparameters["lam1"],
        config,
        k_fit,
    )
    rec.metric("vlm_proxy_psnr", vlm)
    holds_vlm = rec.claim(
        "vlm_proxy_psnr_padl_minus_kmeans_m8",
        "token-selection proxy: PADL atoms minus "
        "k-means centroids, PSNR at m=8 (paper's claim, unverified)",
        vlm[8]["padl"] - vlm[8]["kmeans"],
        ">=",
        0.0,
    )
    if not holds_vlm:
        rec.note(VLM_ABLATION)
    with rec.figure("vlm_proxy") as (fig, ax):
        for method in ("padl", "kmeans", "norm", "random"):
            ax.plot(config["vlm_m"], [vlm[m][method] for m in config["vlm_m"]], "o-", label=method)
        ax.set(
            xlabel="kept tokens / basis size m",
            ylabel="token PSNR (dB)",
            title="VLM token-selection proxy",
        )
        ax.legend()
    rec.note(
        "Quick mode uses much smaller K, N and iteration counts than --full (patches "
        "K=64 on 2000 patches, digits K=32, 12 outer iterations) to fit the CPU budget; "
        "full mode uses the paper-scale sizes (K=256, 10000 patches)."
    )


def plan(config, key):
    """`python -m benchmarks plan`: one PADL alternation on the ``--full`` natural patches
    (``fista_codes`` with its default 20 FISTA steps, then one `dict_update` sweep), counted
    ``steps`` times.
    """
    from jaxgen.dictionary import dict_update, fista_codes

    d, n, k = 64, config["patch_train"], config["patch_K"]
    kx, kd = jr.split(key)
    X = jr.normal(kx, (d, n))
    D = jr.normal(kd, (d, k)) / jnp.sqrt(d)
    R0, active = jnp.zeros((k, n)), jnp.ones(k, bool)

    def alternation(X, D, R0, active):
        R = fista_codes(X, D, R0, 0.1, 1.0, active)
        return dict_update(X, D, R, active), R

    label = f"one alternation (FISTA codes + atom sweep), d={d} N={n} K={k}"
    return [(label, alternation, (X, D, R0, active), config["steps"])]
