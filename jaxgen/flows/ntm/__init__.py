"""Normalizing Trajectory Models (NTM): closed forms, transporters, predictors, model and losses."""

from ._closed import (
    forward_trajectory as forward_trajectory,
    gaussian_cfg as gaussian_cfg,
    ntm_schedule as ntm_schedule,
    reverse_posterior_coeffs as reverse_posterior_coeffs,
    trajectory_covariance as trajectory_covariance,
)
from ._model import (
    NTM as NTM,
    Denoiser as Denoiser,
    denoiser_loss as denoiser_loss,
    denoiser_targets as denoiser_targets,
    mean_alignment_loss as mean_alignment_loss,
    ntm_elbo as ntm_elbo,
    ntm_loss as ntm_loss,
    trajectory_score_denoise as trajectory_score_denoise,
)
from ._predict import (
    AbstractGaussianPredictor as AbstractGaussianPredictor,
    MLPPredictor as MLPPredictor,
    PosteriorResidualPredictor as PosteriorResidualPredictor,
    TransformerPredictor as TransformerPredictor,
)
from ._transport import (
    AbstractTransporter as AbstractTransporter,
    CausalTransformerConditioner as CausalTransformerConditioner,
    IdentityTransporter as IdentityTransporter,
    MADEConditioner as MADEConditioner,
    TarFlowBlock as TarFlowBlock,
    TarFlowTransporter as TarFlowTransporter,
)
