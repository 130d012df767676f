"""Discrete diffusion with CTMC rates: schedules, conditional reverse targets, path KL, the
Neural CTMC two-head parameterisation and the MDLM / GIDD / SEDD baselines expressed in the same
(exit rate, jump distribution) terms, samplers (Euler, tau-leaping, Gillespie) and the NELBO.
"""

from ._ctmc import (
    NEG as NEG,
    categorical_kl as categorical_kl,
    conditional_targets as conditional_targets,
    gidd_integrand as gidd_integrand,
    mdlm_integrand as mdlm_integrand,
    path_kl as path_kl,
    poisson_kl as poisson_kl,
    rates_from_score as rates_from_score,
    rates_from_x0 as rates_from_x0,
    score_entropy as score_entropy,
)
from ._losses import (
    gidd_loss as gidd_loss,
    mdlm_loss as mdlm_loss,
    nelbo as nelbo,
    neural_ctmc_loss as neural_ctmc_loss,
    sedd_loss as sedd_loss,
    stratified_times as stratified_times,
)
from ._models import (
    PARAMETERIZATIONS as PARAMETERIZATIONS,
    AbstractRateModel as AbstractRateModel,
    DiffusionTransformer as DiffusionTransformer,
    model_log_x0 as model_log_x0,
    model_rates as model_rates,
    reference_log_exit_rate as reference_log_exit_rate,
)
from ._samplers import (
    METHODS as METHODS,
    euler_jump_step as euler_jump_step,
    jump_step as jump_step,
    sample as sample,
    sample_rates as sample_rates,
    tau_leap_step as tau_leap_step,
)
from ._schedules import (
    KINDS as KINDS,
    AbstractSchedule as AbstractSchedule,
    InterpolatingSchedule as InterpolatingSchedule,
    gidd_schedule as gidd_schedule,
    masked_schedule as masked_schedule,
    uniform_schedule as uniform_schedule,
)
