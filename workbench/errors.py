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


class UnsupportedCaseError(BadInputError):
    """An implemented op meets an attribute, dtype or shape it cannot handle."""

    def __init__(self, node_name: str, op_type: str, why: str):
        self.node_name, self.op_type = node_name, op_type
        super().__init__(f"node '{node_name}' ({op_type}): {why}")


class CheckFailed(WorkbenchError):
    """A check the workbench ran did not pass (build, verification)."""

    exit_code = 1


class BuildError(CheckFailed):
    """Code generation or compilation failed; carries the compiler's first error."""


class VerificationError(CheckFailed):
    """Outputs do not match the reference."""


class TransformationError(WorkbenchError):
    """A transformation does not apply (any more) or broke the program.

    The session is left exactly as it was before the step.
    """

    exit_code = 1
