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


class EnvironmentFailure(KernelwrightError):
    """The machine, not the code, failed: out of GPU memory held by other work, a build that could not be
    published, a timeout under contention. Never a verdict on a kernel: retried alone, or reported as such."""

    exit_code = 4

    def __init__(self, message: str, cause: str = "environment") -> None:
        super().__init__(message)
        self.cause = cause  # "oom", "timeout", "build", ...
