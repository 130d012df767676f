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
