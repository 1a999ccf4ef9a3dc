"""Loading cost models: a saved one (`load_model`), or the shipped model of an op and platform
(`load_shipped_model`, with the notes a user should see about how well it fits their hardware)."""
from __future__ import annotations

import os
import pickle

from ..errors import ModelVersionError, PretrainedNotFoundError
from ..ops import Op, get_op

SOURCE_PLATFORM = "cpu"  # whose shipped model ranks a platform that has none (zero-shot)


def load_model(path: str | os.PathLike):
    """A saved CognateCostModel; ModelVersionError for another format version, ValueError if unreadable."""
    from .cognate import CognateCostModel

    try:
        return CognateCostModel.load(path)
    except (ModelVersionError, FileNotFoundError):
        raise
    except (OSError, RuntimeError, EOFError, KeyError, TypeError, ValueError, pickle.UnpicklingError) as exc:
        raise ValueError(f"cannot read the model in {path}: {type(exc).__name__}: {exc}") from None


def load_shipped_model(op: Op | str, platform: str, *, root: str | os.PathLike | None = None,
                       threads: int | None = None, hardware: dict | None = None) -> tuple[object, str, list[str]]:
    """(model, where it came from, notes): the shipped model of (`op`, `platform`) for kernels on
    `threads` threads (None: the target has no thread setting).

    The model of the closest thread count that ships is taken (a note says so when it is not
    `threads`). A platform without one gets the shipped CPU model, used zero-shot (a note says
    so). With `hardware` (the backend's `metadata()`), a note names each value it differs in from
    the hardware the model was trained on (`model.pretrained.hardware_notes`, e.g. another GPU arch).
    PretrainedNotFoundError when neither ships, naming what does.
    """
    from .pretrained import hardware_notes, load_pretrained, pretrained_path, thread_variants

    op = get_op(op)
    first = None
    for name, trained_threads in thread_variants(platform, threads, root=root):
        try:
            model = load_pretrained(op.name, name, root=root)
        except PretrainedNotFoundError as exc:
            first = first or str(exc)
            continue
        notes = []
        if threads is not None and trained_threads != max(1, int(threads)):
            notes.append(f"no shipped {op.name} model for {platform} kernels on {threads} thread(s): the one "
                         f"trained on {trained_threads}-thread timings ({name}) ranks the configs")
        path = pretrained_path(op.name, name, root=root)
        notes += hardware_notes(path, hardware or {}, op=op.name)
        return model, str(path), notes
    if platform == SOURCE_PLATFORM:
        raise PretrainedNotFoundError(f"{first}. Pass a saved model with --model PATH (library: model=...), "
                                      f"or build one with benchmarks/pretrain.py") from None
    try:
        model = load_pretrained(op.name, SOURCE_PLATFORM, root=root)
    except PretrainedNotFoundError as exc:
        raise PretrainedNotFoundError(f"{first}; no {SOURCE_PLATFORM} model to fall back on either: {exc}. "
                                      f"Pass a saved model with --model PATH") from None
    note = (f"no shipped {op.name} model for platform {platform!r}: the {SOURCE_PLATFORM} model is used, "
            f"pre-trained on {SOURCE_PLATFORM} measurements only; without a budget (--budget N) it ranks "
            f"{platform} configs zero-shot")
    return model, str(pretrained_path(op.name, SOURCE_PLATFORM, root=root)), [note]
