"""Discrete diffusion with CTMC rates: schedules, conditional reverse targets, path KL, the
Neural CTMC two-head parameterisation and the MDLM / GIDD / SEDD baselines expressed in the same
(exit rate, jump distribution) terms, samplers (Euler, tau-leaping, Gillespie) and the NELBO.
"""

from ._ctmc import (
    NEG as NEG,
)
from ._ctmc import (
    categorical_kl as categorical_kl,
)
from ._ctmc import (
    conditional_targets as conditional_targets,
)
from ._ctmc import (
    gidd_integrand as gidd_integrand,
)
from ._ctmc import (
    mdlm_integrand as mdlm_integrand,
)
from ._ctmc import (
    path_kl as path_kl,
)
from ._ctmc import (
    poisson_kl as poisson_kl,
)
from ._ctmc import (
    rates_from_score as rates_from_score,
)
from ._ctmc import (
    rates_from_x0 as rates_from_x0,
)
from ._ctmc import (
    score_entropy as score_entropy,
)
from ._losses import (
    gidd_loss as gidd_loss,
)
from ._losses import (
    mdlm_loss as mdlm_loss,
)
from ._losses import (
    nelbo as nelbo,
)
from ._losses import (
    neural_ctmc_loss as neural_ctmc_loss,
)
from ._losses import (
    sedd_loss as sedd_loss,
)
from ._losses import (
    stratified_times as stratified_times,
)
from ._models import (
    PARAMETERIZATIONS as PARAMETERIZATIONS,
)
from ._models import (
    DiffusionTransformer as DiffusionTransformer,
)
from ._models import (
    model_log_x0 as model_log_x0,
)
from ._models import (
    model_rates as model_rates,
)
from ._models import (
    reference_log_exit_rate as reference_log_exit_rate,
)
from ._samplers import (
    METHODS as METHODS,
)
from ._samplers import (
    euler_jump_step as euler_jump_step,
)
from ._samplers import (
    sample as sample,
)
from ._samplers import (
    sample_rates as sample_rates,
)
from ._samplers import (
    tau_leap_step as tau_leap_step,
)
from ._schedules import (
    KINDS as KINDS,
)
from ._schedules import (
    InterpolatingSchedule as InterpolatingSchedule,
)
from ._schedules import (
    gidd_schedule as gidd_schedule,
)
from ._schedules import (
    masked_schedule as masked_schedule,
)
from ._schedules import (
    uniform_schedule as uniform_schedule,
)
