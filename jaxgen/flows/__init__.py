"""Flows: velocity fields, straight-line processes, interpolants, flow matching, diagnostics,
normalizing-flow bijections.
"""

from ._bijections import (
    ConditionalAffineCoupling as ConditionalAffineCoupling,
)
from ._bijections import (
    ConditionalMonotoneTanh as ConditionalMonotoneTanh,
)
from ._bijections import (
    ConditionalSmoothCouplingFlow as ConditionalSmoothCouplingFlow,
)
from ._bijections import (
    monotone_tanh as monotone_tanh,
)
from ._bijections import (
    monotone_tanh_inverse as monotone_tanh_inverse,
)
from ._fit import flow_matching_loss as flow_matching_loss
from ._gaussian import (
    GaussianStraightProcess as GaussianStraightProcess,
)
from ._gaussian import (
    matrix_geometric_mean as matrix_geometric_mean,
)
from ._interpolants import (
    AbstractInterpolant as AbstractInterpolant,
)
from ._interpolants import (
    LinearInterpolant as LinearInterpolant,
)
from ._interpolants import (
    MixtureInterpolantVelocity as MixtureInterpolantVelocity,
)
from ._interpolants import (
    NoiseAugmentedInterpolant as NoiseAugmentedInterpolant,
)
from ._obstruction import (
    mixture_quantiles_1d as mixture_quantiles_1d,
)
from ._obstruction import (
    one_step_obstruction_w1 as one_step_obstruction_w1,
)
from ._straightness import (
    euler_pushforward as euler_pushforward,
)
from ._straightness import (
    material_acceleration as material_acceleration,
)
from ._straightness import (
    straightness as straightness,
)
from ._velocity import (
    AbstractVelocityField as AbstractVelocityField,
)
from ._velocity import (
    MLPVelocityField as MLPVelocityField,
)
