"""Typed errors a user can cause. Each says what is wrong and what to do.

The CLI maps ``BadInputError`` subclasses to exit code 2 and ``CheckFailed``
subclasses to exit code 1.
"""


class WorkbenchError(Exception):
    """Base class for every error the workbench raises on purpose."""

    exit_code = 1


class BadInputError(WorkbenchError):
    """The user's input (a file, a name, an option) cannot be used."""

    exit_code = 2


class ModelLoadError(BadInputError):
    """The file is missing, unreadable, not ONNX, or fails the ONNX checker."""


class UnknownModelError(BadInputError):
    """A name that is neither a file nor a bundled model."""


class UnsafeModelError(BadInputError):
    """The model points outside its folder (external data) or exceeds a budget."""


class ShapeError(BadInputError):
    """Some tensor shape cannot be made static."""


class NotSymbolic(ShapeError):
    """The model does not import as one program for every size of its symbols."""


class UnsupportedOpError(BadInputError):
    """One or more ONNX nodes have no implementation.

    ``missing`` maps each unsupported op type to the node names that use it,
    so a user sees all of them at once.
    """

    def __init__(self, missing: dict, detail: str = ""):
        self.missing = {k: list(v) for k, v in sorted(missing.items())}
        lines = [f"  {op}: {', '.join(names[:8])}{' ...' if len(names) > 8 else ''}"
                 for op, names in self.missing.items()]
        msg = (f"the model uses {len(self.missing)} operator type(s) the workbench does not "
               f"implement:\n" + "\n".join(lines))
        if detail:
            msg += "\n" + detail
        msg += "\nRemove or replace these nodes, or add an implementation in workbench/ops/."
        super().__init__(msg)


class NoGradientRuleError(UnsupportedOpError):
    """Operators on the path from the parameters to the loss have no gradient rule
    (``workbench/training/rules/``); ``missing`` as in UnsupportedOpError."""

    def __init__(self, missing: dict):
        self.missing = {k: list(v) for k, v in sorted(missing.items())}
        lines = [f"  {op}: {', '.join(names[:8])}{' ...' if len(names) > 8 else ''}"
                 for op, names in self.missing.items()]
        BadInputError.__init__(
            self, f"a training program needs the gradient of {len(self.missing)} operator "
                  f"type(s) that have no gradient rule:\n" + "\n".join(lines) +
                  "\nTrain only parameters whose gradients do not pass through them (params=..., "
                  "--params), or "
                  "add a rule in workbench/training/rules/.")


class UnsupportedCaseError(BadInputError):
    """An implemented op meets an attribute, dtype or shape it cannot handle."""

    def __init__(self, node_name: str, op_type: str, why: str):
        self.node_name, self.op_type = node_name, op_type
        super().__init__(f"node '{node_name}' ({op_type}): {why}")


class NoCudaDeviceError(BadInputError):
    """A GPU run was asked for where no CUDA device can be used."""

    def __init__(self, why: str):
        super().__init__(
            f"no CUDA device is available here ({why}), so the GPU program cannot be run "
            f"and compared with onnxruntime. Run it on a machine with an NVIDIA GPU and its "
            f"driver, or verify on the CPU (without --target gpu); 'python app.py optimize "
            f"MODEL --target gpu -o FOLDER' still generates and compiles the CUDA program "
            f"without a GPU.")


class CheckFailed(WorkbenchError):
    """A check the workbench ran did not pass (build, verification)."""

    exit_code = 1


class BuildError(CheckFailed):
    """Code generation or compilation failed; carries the compiler's first error."""


class VerificationError(CheckFailed):
    """Outputs do not match the reference."""


class ProgramCrashed(CheckFailed):
    """The compiled program died while running (a segmentation fault, an abort, ...) or
    reported a failure. It ran in a worker process (``workbench.runtime.isolated``): the session
    keeps every step. ``program`` and ``folder`` name the build, ``step`` the last step
    applied, ``cause`` what happened."""

    def __init__(self, message: str, program: str = "", folder: str = "", step: str = "",
                 cause: str = ""):
        self.program, self.folder, self.step, self.cause = program, folder, step, cause
        super().__init__(message)


class ProgramTimedOut(ProgramCrashed):
    """The compiled program ran longer than the run timeout (a hang) and was stopped."""


class TransformationError(WorkbenchError):
    """A transformation does not apply (any more) or broke the program.

    The session is left exactly as it was before the step.
    """

    exit_code = 1


class InvalidGraphError(ModelLoadError):
    """The graph is malformed: a cycle, a dangling input, a name written twice,
    an unknown domain, an attribute of the wrong type, data that does not match
    its dims. ``node`` / ``tensor`` name what is wrong (empty when not one)."""

    def __init__(self, message: str, node: str = "", tensor: str = ""):
        self.node, self.tensor = node, tensor
        super().__init__(message)


class MemoryBudgetError(UnsafeModelError):
    """The model's tensors need more memory than the budget allows (checked
    before anything that size is allocated)."""

    def __init__(self, needed: int, budget: int, biggest=(), what: str = "the model's tensors",
                 advice: str = "Fix the input shapes (--shape) if they are wrong; t"):
        self.needed, self.budget = needed, budget
        biggest = [(n, size) for n, size in biggest if size != needed]  # not the total again
        top = ", ".join(f"'{name}' {_gib(size)}" for name, size in biggest)
        super().__init__(
            f"{_gib(needed)} for {what} exceeds the memory budget of {_gib(budget)}"
            f"{f' (largest: {top})' if top else ''}. {advice or 'T'}o allow more, set "
            f"WORKBENCH_MEMORY_BUDGET (e.g. WORKBENCH_MEMORY_BUDGET=32G) or pass "
            f"memory_budget= to workbench.open.")


def _gib(size: int) -> str:
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.3g} {unit}"
    return f"{size} B"


class UntrustedSDFGError(BadInputError):
    """SDFG files that this workbench did not write (for this user) were about to be loaded.

    Loading an SDFG evaluates its symbolic expressions with Python, and
    building it compiles and runs the C++ in its tasklets: opening one is
    running a program. ``path`` is what was opened.
    """

    def __init__(self, path, why: str):
        self.path = str(path)
        super().__init__(
            f"'{path}' holds SDFGs that this workbench did not write ({why}). Loading an SDFG "
            f"evaluates its symbolic expressions with Python, and building it compiles and runs "
            f"the C++ code in its tasklets on this machine: open it only if you trust where it "
            f"came from. To accept it: --trust on the command line, trust=True in Python "
            f"(workbench.open / workbench.open_session), or the dialog in the desktop window.")


class CompileError(BuildError):
    """The C++ compiler rejected the generated code.

    ``node`` is the ONNX node whose code failed (None when the failing line
    belongs to no operator), ``first_error`` the compiler's first error line,
    ``sources`` the folder with the generated code.
    """

    def __init__(self, message: str, node: str = None, first_error: str = "", sources=None):
        self.node, self.first_error, self.sources = node, first_error, sources
        super().__init__(message)


class Cancelled(WorkbenchError):
    """The user cancelled a long call (build, verification, profile); nothing changed."""
