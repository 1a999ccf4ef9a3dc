"""Typed exceptions; each names the offending value."""
from __future__ import annotations


class CognateError(Exception):
    """Base class of every error raised on purpose by cognate_tvm."""


class MatrixFormatError(CognateError, ValueError):
    """A matrix file or array is malformed (bad header, non-numeric entry, NaN, ...)."""


class ShapeError(CognateError, ValueError):
    """Operands whose shapes do not fit together."""


class UnknownKindError(CognateError, ValueError):
    """A name (op, target, space, backend) that no factory knows."""

    def __init__(self, what: str, name: str, valid: list[str] | tuple[str, ...]):
        super().__init__(f"unknown {what} {name!r}; valid: {', '.join(sorted(valid))}")
        self.name = name
        self.valid = tuple(valid)


class InvalidConfigError(CognateError, ValueError):
    """A configuration outside its space or violating the space's rules."""


class ModelVersionError(CognateError, ValueError):
    """A saved model or dataset written by an incompatible format version."""


class DeviceUnavailableError(CognateError, RuntimeError):
    """A target needs hardware (e.g. an NVIDIA GPU) that this machine lacks."""


class PretrainedNotFoundError(CognateError, LookupError):
    """A shipped (pre-trained or fine-tuned) model was asked for that the package does not hold."""


class TuningError(CognateError, RuntimeError):
    """A search ended without a usable result (no successful record, or none with the right output).

    `trials` holds every measurement of the search in order, each (config, ms or None for a failed
    one), and `rejected` the records whose output was wrong, each (config, reason): the failures as
    MetaSchedule recorded them.
    """

    def __init__(self, message: str, *, trials: list | None = None, rejected: list | None = None):
        super().__init__(message)
        self.trials = list(trials or [])
        self.rejected = list(rejected or [])


class NotFittedError(CognateError, RuntimeError):
    """A model or baseline was asked to predict before it was fitted."""


class DTypeError(CognateError, TypeError):
    """A tensor of a data type the operation does not take (the kernels compute in float32)."""


class DeviceMismatchError(CognateError, ValueError):
    """Operands on different devices, or on a device the matrix's kernels were not built for."""


class LayoutError(CognateError, ValueError):
    """A tensor whose memory layout a kernel cannot read in place (e.g. not contiguous)."""


class IndexOutOfRangeError(CognateError, IndexError):
    """A sparse matrix index (column id, row pointer) outside the matrix's shape."""


class DatasetMismatchError(CognateError, ValueError):
    """A dataset's timings belong to a matrix other than the one its name builds now."""
