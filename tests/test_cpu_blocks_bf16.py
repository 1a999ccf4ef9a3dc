"""Register blocks of rows (the `block_rows` knob) and bfloat16 dense operands on the CPU.

Blocked kernels are checked against scipy on every matrix kernels must handle (empty rows, one
nonzero, tall, wide, power law, banded) at dense widths that do and do not divide the tiles. The
bfloat16 kernels are checked two ways: against scipy on the operands rounded to bfloat16 (what the
kernel multiplies: float32 tolerance), and against scipy on the float32 operands within the stated
tolerance of one bfloat16 rounding per operand: |out - ref| <= 2^-7 * (|A| @ |B|) (SpMM; each rounding
is within 2^-8 relatively) and 2^-7 * |A| * (|X| @ |Y|^T) on A's pattern (SDDMM: two roundings),
plus the float32 tolerance.
"""
import dataclasses

import numpy as np
import pytest

from cognate_tvm.backends.base import check_output
from cognate_tvm.backends.cpu import LLVMBackend
from cognate_tvm.errors import InvalidConfigError, ModelVersionError
from cognate_tvm.formats import row_blocks
from cognate_tvm.kernels.cpu import kernel_source
from cognate_tvm.kernels.cpu_operands import pad_dense, paired_lanes
from cognate_tvm.ops import get_op
from cognate_tvm.space.cpu import BLOCK_ROWS, BLOCKED_ORDER, CPUConfig, CPUSpace

from conftest import SMALL_MATRICES

BF16_RELATIVE = 2.0 ** -7

BLOCKED = [CPUConfig(i_tile=i, k_panel=0, k_parts=1, j_tile=j, loop_order=BLOCKED_ORDER, vector=v, unroll=u,
                     parallel=p, chunk=c, block_rows=r)
           for i, j, v, u, p, c, r in [(1, 16, 16, False, False, 0, 2), (8, 64, 16, True, True, 4, 4),
                                       (4, 32, 8, True, True, 0, 2), (2, 8, 4, True, False, 0, 4),
                                       (256, 128, 16, False, True, 4, 2)]]


@pytest.fixture(scope="module")
def backend():
    return LLVMBackend(num_threads=2, cache_dir=None, repeats=1, warmup=0, min_seconds=0.0)


@pytest.fixture(scope="module")
def bf16_backend():
    return LLVMBackend(num_threads=2, cache_dir=None, repeats=1, warmup=0, min_seconds=0.0, dtype="bfloat16")


@pytest.mark.parametrize("rows", [2, 3, 4])
def test_row_blocks_hold_the_matrix(small_matrix, rows):
    blocks = row_blocks(small_matrix, rows)
    m, n = small_matrix.shape
    assert blocks.blocks == -(-m // rows) and blocks.indptr[-1] == blocks.indices.size
    dense = np.zeros((blocks.blocks * rows, n), dtype=np.float64)
    for g in range(blocks.blocks):
        for slot in range(blocks.indptr[g], blocks.indptr[g + 1]):
            dense[g * rows:(g + 1) * rows, blocks.indices[slot]] += blocks.data[slot * rows:(slot + 1) * rows]
    np.testing.assert_array_equal(dense[:m], small_matrix.toarray())
    real = blocks.pos >= 0
    np.testing.assert_array_equal(blocks.data[real], small_matrix.data[blocks.pos[real]])
    assert np.all(blocks.data[~real] == 0) and sorted(blocks.pos[real]) == list(range(small_matrix.nnz))
    assert blocks.fill >= 1.0


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_blocked_configs_match_scipy(backend, bf16_backend, dtype):
    """Every block size, vector width, chunking and a row tile larger than some matrices."""
    space = CPUSpace("spmm")
    for config in BLOCKED:
        space.check(config)
    failures = []
    for name, build in SMALL_MATRICES.items():
        for feat in (20, 128):
            measuring = backend if dtype == "float32" else bf16_backend  # bfloat16: checked on the rounded B
            for result in measuring.measure("spmm", build(), BLOCKED, feat, check=True):
                if result.correct is not True:
                    failures.append((name, feat, result.config.to_json(), result.error))
    assert not failures, failures[:3]


def test_the_space_has_blocks_for_spmm_only():
    spmm, sddmm = CPUSpace("spmm"), CPUSpace("sddmm")
    assert {c.block_rows for c in spmm.configs()} == set(BLOCK_ROWS)
    assert {c.block_rows for c in sddmm.configs()} == {1}
    column = spmm.knob_names.index("log2_block_rows")
    assert spmm.knob_names == sddmm.knob_names
    assert np.all(sddmm.knob_matrix()[:, column] == 0)
    with pytest.raises(InvalidConfigError, match="block_rows 2 not in"):
        sddmm.check(dataclasses.replace(BLOCKED[0], block_rows=2))
    with pytest.raises(InvalidConfigError, match="needs plain CSR"):
        spmm.check(dataclasses.replace(BLOCKED[0], k_parts=2))
    with pytest.raises(InvalidConfigError, match="needs plain CSR"):
        spmm.check(dataclasses.replace(BLOCKED[1], j_tile=128))  # 4 x 128 lanes: too many accumulators


def test_unblocked_configs_keep_their_stored_form():
    """Datasets stored before the knob existed name the same configs."""
    config = dataclasses.replace(BLOCKED[0], block_rows=1)
    assert "block_rows" not in config.to_json()
    assert CPUSpace("spmm").config_from_json(config.to_json()) == config
    assert CPUSpace("spmm").config_from_json(BLOCKED[1].to_json()) == BLOCKED[1]


def _bf16_bound(op, matrix, dense):
    absolute = abs(matrix).astype(np.float64)
    if op.name == "spmm":
        return BF16_RELATIVE * (absolute @ np.abs(dense[0]).astype(np.float64))
    rows = np.repeat(np.arange(matrix.shape[0]), np.diff(matrix.indptr))
    dots = np.einsum("ij,ij->i", np.abs(dense[0][rows]).astype(np.float64),
                     np.abs(dense[1][matrix.indices]).astype(np.float64))
    return BF16_RELATIVE * absolute.data * dots


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_bfloat16_matches_scipy_within_the_stated_tolerance(op, backend, bf16_backend):
    op = get_op(op)
    configs = [CPUSpace(op).baseline()] + CPUSpace(op).sample_covering(24, seed=3)
    # both layouts run: int32 words of two values (paired) and one bfloat16 element per lane
    assert {paired_lanes(op, config, 20, "bfloat16") > 0 for config in configs} == {True, False}
    failures = []
    for name, build in SMALL_MATRICES.items():
        matrix = build()
        dense = op.make_dense_inputs(matrix, 20, seed=1)
        results = bf16_backend.measure(op, matrix, configs, 20, check=True, seed=1)
        failures += [(name, r.config.to_json(), r.error) for r in results if r.correct is not True]
        for config in configs[:6]:
            output = bf16_backend.run(op, config, matrix, dense).astype(np.float64)
            expected = op.reference(matrix, *dense)
            error = np.abs(output - expected)
            if not np.all(error <= _bf16_bound(op, matrix, dense) + 1e-5 * max(1.0, np.abs(expected).max())):
                failures.append((name, config.to_json(), "beyond the bfloat16 bound"))
            # and not the float32 result: the operands really are rounded (matrices with products)
            if matrix.nnz > 100 and np.array_equal(output, backend.run(op, config, matrix, dense)):
                failures.append((name, config.to_json(), "same as float32"))
    assert not failures, failures[:3]


def test_paired_bfloat16_layout():
    """Word g * P + p holds column g * 2P + p in its low half and g * 2P + P + p in its high half, as the
    kernels split it; numpy and torch pack the same words."""
    import torch

    from cognate_tvm.torch.runners import pair_columns

    dense = np.random.default_rng(0).standard_normal((5, 40)).astype(np.float32)
    lanes, width = 8, 48
    words = pad_dense(dense, width, "bfloat16", lanes)
    assert words.dtype == np.int32 and words.shape == (5, width // 2)
    rounded = pad_dense(dense, width, "bfloat16").astype(np.float32)
    bits = words.view(np.uint32)
    low, high = (bits << np.uint32(16)).view(np.float32), (bits & np.uint32(0xFFFF0000)).view(np.float32)
    for g in range(width // (2 * lanes)):
        np.testing.assert_array_equal(low[:, g * lanes:(g + 1) * lanes], rounded[:, 2 * g * lanes:(2 * g + 1) * lanes])
        np.testing.assert_array_equal(high[:, g * lanes:(g + 1) * lanes],
                                      rounded[:, (2 * g + 1) * lanes:(2 * g + 2) * lanes])
    np.testing.assert_array_equal(pad_dense(words, width, "bfloat16", lanes), words)  # already paired
    padded = torch.nn.functional.pad(torch.from_numpy(dense).to(torch.bfloat16), (0, width - 40))
    np.testing.assert_array_equal(pair_columns(padded, lanes).numpy(), words)


def test_which_kernels_read_pairs():
    """Vectorized kernels whose dense tile holds an even number of chunks read int32 pairs; a tile of one
    chunk, the scalar orders and float32 read plain elements."""
    spmm = get_op("spmm")
    paired, single = BLOCKED[4], BLOCKED[0]  # 128 lanes in 8 chunks of 16; 16 lanes in one chunk
    assert paired_lanes(spmm, paired, 128, "bfloat16") == 16 and paired_lanes(spmm, paired, 128, "float32") == 0
    assert paired_lanes(spmm, single, 128, "bfloat16") == 0
    scalar = next(c for c in CPUSpace(spmm).sample_covering(40, seed=0) if c.loop_order[-1] == "k0")
    assert paired_lanes(spmm, scalar, 128, "bfloat16") == 0
    source = kernel_source(spmm, paired, 128, workers=2, dtype="bfloat16")
    assert '"int32")' in source and "T.reinterpret" in source and "bfloat16" not in source
    assert '"bfloat16")' in kernel_source(spmm, single, 128, workers=2, dtype="bfloat16")


def test_check_catches_a_wrong_bfloat16_result():
    op = get_op("spmm")
    matrix = SMALL_MATRICES["powerlaw"]()
    dense = op.make_dense_inputs(matrix, 8, seed=0)
    output = op.reference(matrix, *dense).astype(np.float32)
    output[3] += 0.5
    assert not check_output(op, matrix, dense, output)


def test_unknown_dtype_is_refused():
    with pytest.raises(ValueError, match="float16.*not one of"):
        LLVMBackend(num_threads=1, cache_dir=None, dtype="float16")


def test_a_model_fitted_before_the_knob_ranks_blocked_configs_as_unblocked():
    from cognate_tvm.model import load_pretrained

    model = load_pretrained("spmm", "cpu")
    space = CPUSpace("spmm")
    matrix = SMALL_MATRICES["banded"]()
    twins = [dataclasses.replace(BLOCKED[1], block_rows=1), BLOCKED[1]]
    scores = model.predict(matrix, twins, space=space, feat=64)
    assert scores[0] == pytest.approx(scores[1])
    encoder = model.encoder_for(space)
    assert encoder.width == space.first_knobs < len(space.knob_names)


def test_a_model_whose_encoder_is_too_narrow_is_refused():
    from cognate_tvm.model.cognate import CognateCostModel
    from cognate_tvm.model.latent import create_encoder

    model = CognateCostModel()
    model.net.set_encoder("cpu", create_encoder("latent", 3))
    with pytest.raises(ModelVersionError, match="takes 3 knobs"):
        model.encoder_for(CPUSpace("spmm"))


def test_refitting_the_encoder_of_a_model_from_before_the_knob():
    """pretrain.py --init refits the knob encoder on all the knobs: blocked twins then differ."""
    from cognate_tvm.model import load_pretrained

    model = load_pretrained("spmm", "cpu")
    space = CPUSpace("spmm")
    assert model.refit_knob_encoder(space).width == len(space.knob_names)
    twins = [dataclasses.replace(BLOCKED[1], block_rows=1), BLOCKED[1]]
    scores = model.predict(SMALL_MATRICES["banded"](), twins, space=space, feat=64)
    assert scores[0] != pytest.approx(scores[1])


def test_a_new_model_sees_the_knob():
    from cognate_tvm.model.cognate import CognateCostModel

    model = CognateCostModel()
    space = CPUSpace("spmm")
    assert model.encoder_for(space).width == len(space.knob_names)
    shared, knobs, _ = model.inputs(space, BLOCKED[:2], rows=100, cols=100, feat=64)
    column = space.knob_names.index("log2_block_rows")
    assert knobs.shape[1] == len(space.knob_names) and knobs[0, column] != knobs[1, column]



def test_torch_bfloat16_kernels(tmp_path):
    """cognate_tvm.torch with bfloat16 dense operands: forward and gradients within the bound."""
    import torch

    from cognate_tvm.torch import SparseMatrix, TunedKernels

    kernels = TunedKernels("cpu", num_threads=1, cache_dir=tmp_path, tune=False, dtype="bfloat16")
    matrix = SMALL_MATRICES["powerlaw"]()
    a = SparseMatrix.from_scipy(matrix, kernels=kernels)
    x = torch.randn(matrix.shape[1], 24, generator=torch.Generator().manual_seed(0), requires_grad=True)
    out = a @ x
    want = matrix.astype(np.float64) @ x.detach().double().numpy()
    bound = _bf16_bound(get_op("spmm"), matrix, [x.detach().numpy()]) + 1e-5 * np.abs(want).max()
    error = np.abs(out.detach().double().numpy() - want)
    assert out.dtype == torch.float32 and np.all(error <= bound) and error.max() > 0
    out.sum().backward()
    grad_want = matrix.T.astype(np.float64) @ np.ones((matrix.shape[0], 24))
    assert np.allclose(x.grad.double().numpy(), grad_want, rtol=1e-2, atol=1e-2 * np.abs(grad_want).max())
    with pytest.raises(ValueError, match="only the CPU kernels"):
        TunedKernels("cuda", cache_dir=tmp_path, dtype="bfloat16")
