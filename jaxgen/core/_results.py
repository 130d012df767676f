"""Result flags shared by every iterative solver in jaxgen."""

import equinox as eqx


class RESULTS(eqx.Enumeration):
    """Outcome of an iterative solver, with a message that says what to do next."""

    successful = ""
    max_steps_reached = (
        "The solver reached `max_steps` before meeting its tolerance. Increase `max_steps`, loosen "
        "`tol`, or pass `throw=False` and inspect the partial result."
    )
    nonfinite = (
        "The solver produced a non-finite value (NaN or inf). Check the inputs for NaN/inf, lower "
        "the step size or learning rate, or use float64."
    )
