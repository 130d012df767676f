"""Flows: velocity fields, flow matching, normalizing-flow bijections."""

from ._bijections import (
    ConditionalAffineCoupling as ConditionalAffineCoupling,
    ConditionalMonotoneTanh as ConditionalMonotoneTanh,
    monotone_tanh as monotone_tanh,
    monotone_tanh_inverse as monotone_tanh_inverse,
)
