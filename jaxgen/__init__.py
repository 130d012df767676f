"""jaxgen: JAX implementations of the methods of 19 NeurIPS 2026 papers.

Families live in sub-packages (``jaxgen.core``, ``jaxgen.flows``, ``jaxgen.metrics``, ...);
this module only re-exports the most used entry points.
"""

from .core import fit as fit, solve_ode as solve_ode, solve_sde as solve_sde

__version__ = "0.1.0"
