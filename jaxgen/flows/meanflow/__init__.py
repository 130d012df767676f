"""Mean flows: average velocities, SplitMeanFlow / MeanFlow losses, one-step super-resolution."""

from ._mean_flow import (
    AbstractAverageVelocity as AbstractAverageVelocity,
    AbstractTimeEmbeddedVelocity as AbstractTimeEmbeddedVelocity,
    GaussianAverageVelocity as GaussianAverageVelocity,
    GaussianVelocity as GaussianVelocity,
    IntervalConditionedNet as IntervalConditionedNet,
    NoiseAtOneVelocity as NoiseAtOneVelocity,
    cosine_time_grid as cosine_time_grid,
    gaussian_average_velocity as gaussian_average_velocity,
    isc_target as isc_target,
    meanflow_loss as meanflow_loss,
    sample_average_velocity as sample_average_velocity,
    splitmeanflow_loss as splitmeanflow_loss,
)
from ._smfsr import (
    AbstractSRVelocityField as AbstractSRVelocityField,
    FeatureDiscriminator as FeatureDiscriminator,
    FrozenFeatures as FrozenFeatures,
    SRVelocityNet as SRVelocityNet,
    ema_update as ema_update,
    fake_score_loss as fake_score_loss,
    feature_matching_loss as feature_matching_loss,
    gan_optimizer as gan_optimizer,
    gan_refine_loss as gan_refine_loss,
    hinge_d_loss as hinge_d_loss,
    hinge_g_loss as hinge_g_loss,
    one_step_generate as one_step_generate,
    sample_velocity_euler as sample_velocity_euler,
    vsd_loss as vsd_loss,
    with_ema as with_ema,
)
