"""Deconvolution and empirical Bayes: convMMD sieve fitting, NPMLE, denoisers.

From X_i = Z_i + eps_i with known (heteroscedastic) Gaussian or Laplace noise, fit a sampleable
prior by minimising the convolutional MMD between the data and simulated noisy prior draws,
then denoise by posterior means under the fitted prior.
"""

from ._baselines import (
    NPMLEResult as NPMLEResult,
    deconv_kde as deconv_kde,
    npmle_em as npmle_em,
    npmle_posterior_mean as npmle_posterior_mean,
)
from ._denoise import (
    posterior_mean_gmm as posterior_mean_gmm,
    posterior_mean_snis as posterior_mean_snis,
    tweedie as tweedie,
)
from ._fit import ConvMMDResult as ConvMMDResult, fit_convmmd as fit_convmmd
from ._losses import (
    convmmd_loss as convmmd_loss,
    convmmd_loss_gmm_closed as convmmd_loss_gmm_closed,
    convmmd_loss_gmm_marginal as convmmd_loss_gmm_marginal,
    gaussian_conv_kernel as gaussian_conv_kernel,
    quantile_bandwidths as quantile_bandwidths,
)
from ._noise import (
    AbstractNoiseModel as AbstractNoiseModel,
    GaussianNoise as GaussianNoise,
    LaplaceNoise as LaplaceNoise,
    NoiseModel as NoiseModel,
    noise_covariances as noise_covariances,
)
from ._priors import (
    AbstractPrior as AbstractPrior,
    FlowPrior as FlowPrior,
    GaussianMixture as GaussianMixture,
    init_gaussian_mixture as init_gaussian_mixture,
)
