"""Error types with messages a user can act on. The CLI turns them into clean output in one place."""


class KernelwrightError(Exception):
    """Base class: a known failure with a message meant for the user."""

    exit_code = 2


class UsageError(KernelwrightError):
    """The command line or an argument is wrong."""


class ProblemLoadError(KernelwrightError):
    """A problem file is missing, malformed, or fails to build its model or inputs."""


class ProblemInputsError(ProblemLoadError):
    """`get_inputs()` returned a value that cannot be a forward argument (a string, an arbitrary object)."""


class UnsupportedOp(KernelwrightError):
    """An operator the compiler cannot handle natively (callers fall back to ATen)."""


class CaptureError(KernelwrightError):
    """A model could not be exported to the IR (callers fall back to the whole original forward)."""
