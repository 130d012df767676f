"""Flows: velocity fields, straight-line processes, interpolants, flow matching, diagnostics,
normalizing-flow bijections.
"""

from ._bijections import (
    ConditionalAffineCoupling as ConditionalAffineCoupling,
    ConditionalMonotoneTanh as ConditionalMonotoneTanh,
    ConditionalSmoothCouplingFlow as ConditionalSmoothCouplingFlow,
    monotone_tanh as monotone_tanh,
    monotone_tanh_inverse as monotone_tanh_inverse,
)
from ._fit import flow_matching_loss as flow_matching_loss
from ._gaussian import (
    GaussianStraightProcess as GaussianStraightProcess,
    matrix_geometric_mean as matrix_geometric_mean,
)
from ._interpolants import (
    AbstractInterpolant as AbstractInterpolant,
    LinearInterpolant as LinearInterpolant,
    MixtureInterpolantVelocity as MixtureInterpolantVelocity,
    NoiseAugmentedInterpolant as NoiseAugmentedInterpolant,
)
from ._obstruction import (
    mixture_quantiles_1d as mixture_quantiles_1d,
    one_step_obstruction_w1 as one_step_obstruction_w1,
)
from ._splines import SplineAutoregressive as SplineAutoregressive, rq_spline as rq_spline
from ._straightness import (
    euler_pushforward as euler_pushforward,
    material_acceleration as material_acceleration,
    straightness as straightness,
)
from ._velocity import (
    AbstractVelocityField as AbstractVelocityField,
    MLPVelocityField as MLPVelocityField,
)
from .meanflow import (
    AbstractAverageVelocity as AbstractAverageVelocity,
    AbstractSRVelocityField as AbstractSRVelocityField,
    AbstractTimeEmbeddedVelocity as AbstractTimeEmbeddedVelocity,
    FeatureDiscriminator as FeatureDiscriminator,
    FrozenFeatures as FrozenFeatures,
    GaussianAverageVelocity as GaussianAverageVelocity,
    GaussianVelocity as GaussianVelocity,
    IntervalConditionedNet as IntervalConditionedNet,
    NoiseAtOneVelocity as NoiseAtOneVelocity,
    SRVelocityNet as SRVelocityNet,
    cosine_time_grid as cosine_time_grid,
    ema_update as ema_update,
    fake_score_loss as fake_score_loss,
    feature_matching_loss as feature_matching_loss,
    gan_optimizer as gan_optimizer,
    gan_refine_loss as gan_refine_loss,
    gaussian_average_velocity as gaussian_average_velocity,
    hinge_d_loss as hinge_d_loss,
    hinge_g_loss as hinge_g_loss,
    isc_target as isc_target,
    meanflow_loss as meanflow_loss,
    one_step_generate as one_step_generate,
    sample_average_velocity as sample_average_velocity,
    sample_velocity_euler as sample_velocity_euler,
    splitmeanflow_loss as splitmeanflow_loss,
    vsd_loss as vsd_loss,
    with_ema as with_ema,
)
from .ntm import (
    NTM as NTM,
    AbstractGaussianPredictor as AbstractGaussianPredictor,
    AbstractTransporter as AbstractTransporter,
    CausalTransformerConditioner as CausalTransformerConditioner,
    Denoiser as Denoiser,
    IdentityTransporter as IdentityTransporter,
    MADEConditioner as MADEConditioner,
    MLPPredictor as MLPPredictor,
    PosteriorResidualPredictor as PosteriorResidualPredictor,
    TarFlowBlock as TarFlowBlock,
    TarFlowTransporter as TarFlowTransporter,
    TransformerPredictor as TransformerPredictor,
    denoiser_loss as denoiser_loss,
    denoiser_targets as denoiser_targets,
    forward_trajectory as forward_trajectory,
    gaussian_cfg as gaussian_cfg,
    mean_alignment_loss as mean_alignment_loss,
    ntm_elbo as ntm_elbo,
    ntm_loss as ntm_loss,
    ntm_schedule as ntm_schedule,
    reverse_posterior_coeffs as reverse_posterior_coeffs,
    trajectory_covariance as trajectory_covariance,
    trajectory_score_denoise as trajectory_score_denoise,
)
