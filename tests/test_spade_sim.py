"""The SPADE-like C++ model and the `spade` backend: exact tiny case, invariants, errors."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import scipy.sparse as sp

from cognate_tvm import _spade, backends
from cognate_tvm.errors import InvalidConfigError, UnknownKindError
from cognate_tvm.matrix import generate
from cognate_tvm.ops import SPMM
from cognate_tvm.simulator import HardwareParams, simulate
from cognate_tvm.space.spade import SpadeConfig, SpadeSpace


def cfg(rp=16, cp=1 << 20, split=1, barrier=False, bypass=False) -> SpadeConfig:
    return SpadeConfig(row_panel=rp, col_panel=cp, split=split, barrier=barrier, bypass=bypass)


@pytest.fixture(scope="module")
def stencil() -> sp.csr_matrix:
    return generate("stencil2d", 4000, seed=1)


@pytest.fixture(scope="module")
def graph() -> sp.csr_matrix:
    return generate("rmat", 6000, seed=2, permute=True)


MIXED = [cfg(), cfg(rp=4, cp=2048, split=2, barrier=True), cfg(rp=256, cp=16384, split=4, bypass=True),
         cfg(rp=64, cp=2048, split=8, barrier=True, bypass=True)]


def test_hardware_defaults_match_the_cpp_model():
    assert HardwareParams().to_dict() == _spade.hardware_defaults()


def test_tiny_case_matches_hand_computation():
    """2x2 SpMM [[1, 1], [0, 1]], N = 4, one PE; every term worked out by hand below."""
    hw = HardwareParams(pes=1, pes_per_core=1, clock_ghz=1.0, vector_width=4, l2_bytes=64, l2_assoc=4,
                        llc_bytes=128, llc_assoc=8, line_bytes=16, dram_gbps=1e6, dram_latency_ns=10.0,
                        l2_latency_cycles=2.0, llc_latency_cycles=4.0, mlp=1, stream_mlp=1,
                        barrier_cycles=100.0, tile_cycles=5.0, row_cycles=1.0, nnz_cycles=1.0)
    matrix = sp.csr_matrix(np.array([[1.0, 1.0], [0.0, 1.0]]))
    (r,) = simulate(matrix, "spmm", 4, [cfg(rp=2, cp=2)], hardware=hw, sampling=1)
    # One block = one dense row of 4 floats = 16 B = 1 line. Per-line costs: L2 hit 2,
    # LLC hit 2 + 4 = 6, DRAM 2 + 4 + 10 = 16; streamed bytes cost 10 / 16 = 0.625 each.
    # Tile: dispatch 5 (sync); compute = 2 rows x 1 + 3 nnz x (1 issue + 1 vector op) = 8;
    # memory = 10 (exposed stream start) + 12 B row pointers x 0.625 = 7.5
    #   row 0: C[0] first write (allocated, no fetch), B[0] miss 16, B[1] miss 16, 16 B of A -> 10
    #   row 1: C[1] first write, B[1] L2 hit 2, 8 B of A -> 5
    #   = 10 + 7.5 + 16 + 16 + 10 + 2 + 5 = 66.5 > compute: stall = 66.5 - 8 = 58.5.
    # End of the pass: one barrier, 100. Total 8 + 58.5 + (5 + 100) = 171.5 cycles.
    assert r.error is None
    assert r.cycles == 171.5
    b = r.breakdown
    assert (b["compute"], b["memory_stall"], b["sync"]) == (8.0, 58.5, 105.0)
    # DRAM: 12 (row pointers) + 24 (A) + 2 x 16 (B misses) + 2 x 16 (C written back) = 100.
    assert b["dram_bytes"] == 100.0
    assert b["l2_hit_rate"] == pytest.approx(1 / 3) and b["llc_hit_rate"] == 0.0
    assert (b["macs"], b["passes"], b["phases"]) == (12, 1, 1)


def test_deterministic_and_independent_of_threads(graph):
    a = simulate(graph, "spmm", 64, MIXED, threads=1)
    b = simulate(graph, "spmm", 64, MIXED, threads=1)
    c = simulate(graph, "spmm", 64, MIXED, threads=2)
    assert [r.cycles for r in a] == [r.cycles for r in b] == [r.cycles for r in c]
    assert [r.breakdown for r in a] == [r.breakdown for r in c]


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_macs_equal_nnz_times_feat(graph, op):
    configs = MIXED + [cfg(split=3)]  # 128 = 43 + 43 + 42 columns
    for r in simulate(graph, op, 128, configs):
        assert r.breakdown["macs"] == graph.nnz * 128
        assert 2 * r.breakdown["macs"] == SPMM.flops(graph.nnz, 128)


def test_breakdown_adds_up(graph):
    for r in simulate(graph, "sddmm", 64, MIXED):
        b = r.breakdown
        assert r.cycles == pytest.approx(b["compute"] + b["memory_stall"] + b["sync"])
        assert 0 <= b["llc_hit_rate"] <= 1 and 0 <= b["l2_hit_rate"] <= 1 and b["imbalance"] >= 1
        assert b["dram_bytes"] >= graph.nnz * 8  # A is read at least once


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_more_dram_bandwidth_is_never_slower(graph, op):
    runs = [simulate(graph, op, 64, MIXED, hardware=HardwareParams(dram_gbps=bw))
            for bw in (25.0, 50.0, 100.0, 200.0, 400.0, 1600.0)]
    for slower, faster in zip(runs, runs[1:]):
        for a, b in zip(slower, faster):
            assert b.cycles <= a.cycles
    # Bandwidth matters somewhere: the slowest memory is strictly slower.
    assert sum(r.cycles for r in runs[0]) > sum(r.cycles for r in runs[-1])


def test_more_pes_are_never_slower_when_compute_bound(stencil):
    # Scalar PEs with deep miss queues and ample bandwidth: compute dominates every tile.
    base = dict(vector_width=1, mlp=64, stream_mlp=64, dram_gbps=1e5, dram_latency_ns=0.0)
    configs = [cfg(rp=4), cfg(rp=16, cp=2048, barrier=True), cfg(rp=64, split=2, bypass=True)]
    previous = None
    for pes in (1, 2, 4, 8, 16, 32, 64, 224):
        runs = simulate(stencil, "spmm", 64, configs, hardware=HardwareParams(pes=pes, **base), sampling=1)
        for r in runs:
            assert r.breakdown["memory_stall"] == 0.0  # the premise: compute-bound
        cycles = [r.cycles for r in runs]
        if previous is not None:
            assert all(now <= before for now, before in zip(cycles, previous))
        previous = cycles
    single = simulate(stencil, "spmm", 64, configs[:1], hardware=HardwareParams(pes=1, **base))[0]
    assert previous[0] < single.cycles / 50  # and it scales


def test_knobs_change_the_answer(graph):
    """Each knob moves the cycle count on a power-law graph (the space is not inert)."""
    start = cfg(rp=16, cp=2048)
    cycles = {}
    for name, value in (("row_panel", 256), ("col_panel", 1 << 20), ("split", 4), ("barrier", True),
                        ("bypass", True)):
        cycles[name] = simulate(graph, "spmm", 128, [dataclasses.replace(start, **{name: value})])[0].cycles
    base = simulate(graph, "spmm", 128, [start])[0].cycles
    assert all(c != base for c in cycles.values()), cycles


def test_sampling_stays_close_to_exact():
    rng = np.random.default_rng(5)
    big = sp.random_array((40_000, 40_000), density=3e5 / 40_000**2, rng=rng, format="csr")
    exact = simulate(big, "spmm", 128, MIXED, sampling=1, threads=2)
    sampled = simulate(big, "spmm", 128, MIXED, sampling=8, threads=2)
    for e, s in zip(exact, sampled):
        assert s.cycles != e.cycles  # it did sample
        assert s.cycles == pytest.approx(e.cycles, rel=0.05)


def test_small_inputs_are_never_sampled(graph):
    exact = simulate(graph, "spmm", 128, MIXED, sampling=1)
    sampled = simulate(graph, "spmm", 128, MIXED, sampling=8)
    assert [r.cycles for r in exact] == [r.cycles for r in sampled]


def test_split_larger_than_feat_is_a_per_config_error(graph):
    a, b = simulate(graph, "spmm", 4, [cfg(split=8), cfg(split=4)])
    assert a.cycles is None and "split 8" in a.error and "feat=4" in a.error
    assert b.error is None and b.cycles > 0


def test_bad_inputs_raise_typed_errors(graph):
    with pytest.raises(InvalidConfigError, match="dram_gbps"):
        HardwareParams(dram_gbps=0)
    with pytest.raises(InvalidConfigError, match="pes"):
        HardwareParams(pes=-1)
    with pytest.raises(InvalidConfigError, match="bogus"):
        HardwareParams.from_dict({"bogus": 1})
    with pytest.raises(UnknownKindError, match="gemm"):
        simulate(graph, "gemm", 8, [cfg()])
    with pytest.raises(InvalidConfigError, match="sampling"):
        simulate(graph, "spmm", 8, [cfg()], sampling=3)
    with pytest.raises(InvalidConfigError, match="row_panel"):
        simulate(graph, "spmm", 8, [cfg(rp=0)])
    with pytest.raises(ValueError, match="out of range"):
        _spade.simulate(np.array([0, 1], np.int32), np.array([5], np.int32), 1, 2, "spmm", 8,
                        [(1, 1, 1, False, False)], {})


def test_empty_matrix_costs_only_overheads():
    empty = sp.csr_matrix((100, 50), dtype=np.float32)
    (r,) = simulate(empty, "spmm", 16, [cfg()])
    assert r.breakdown["macs"] == 0 and r.breakdown["compute"] == 0
    assert r.breakdown["dram_bytes"] == 100 * 16 * 4  # the dense output is still written


def test_backend_measures_and_reports_cycles(graph):
    backend = backends.create("spade", workers=2)
    space = SpadeSpace("spmm")
    configs = [space.baseline(), cfg(rp=5), cfg(rp=4, cp=2048, split=2, barrier=True)]
    results = backend.measure(SPMM, graph, configs, 64, check=True)
    assert [r.config for r in results] == configs
    good, bad, other = results
    assert bad.error and "row_panel=5" in bad.error and bad.time_ms is None
    for r in (good, other):
        assert r.ok and r.correct is None  # the model computes no outputs
        assert r.time_ms == pytest.approx(r.extra["cycles"] / (backend.hardware.clock_ghz * 1e6))
        assert set(r.extra["breakdown"]) >= {"compute", "memory_stall", "sync", "dram_bytes", "llc_hit_rate"}
        assert r.to_dict()["cycles"] == r.extra["cycles"]
    meta = backend.metadata()
    assert meta["target"] == "spade" and meta["hardware"]["pes"] == 224
    slow = backends.create("spade", hardware={"dram_gbps": 10.0}, workers=1)
    assert slow.measure("spmm", graph, configs[:1], 64)[0].time_ms > good.time_ms


def test_backend_says_once_that_it_cannot_check_outputs(graph, caplog):
    backend = backends.create("spade", workers=1)
    baseline = SpadeSpace("spmm").baseline()
    with caplog.at_level("INFO", logger="cognate_tvm.backends.spade"):
        for _ in range(3):
            backend.measure(SPMM, graph, [baseline], 32, check=True)
    assert sum("computes no outputs" in r.getMessage() for r in caplog.records) == 1


def test_backend_is_picklable():
    import pickle

    backend = backends.create("spade", workers=1, sampling=1)
    clone = pickle.loads(pickle.dumps(backend))
    assert clone.hardware == backend.hardware and clone.sampling == 1


TINY_HW = dict(clock_ghz=1.0, vector_width=4, l2_bytes=64, l2_assoc=4, llc_bytes=128, llc_assoc=8,
               line_bytes=16, dram_gbps=1e6, dram_latency_ns=10.0, l2_latency_cycles=2.0,
               llc_latency_cycles=4.0, mlp=1, stream_mlp=1, barrier_cycles=100.0, tile_cycles=5.0,
               row_cycles=1.0, nnz_cycles=1.0)


def test_tiny_barrier_case_matches_hand_computation():
    """Barrier: static row-panel owners, output rows held on chip across column panels.

    A = [[1, 1], [0, 1]], N = 4, 2 PEs on 2 cores, row panel 1, column panel 1 (two phases).
    Row panel r is owned by PE r mod 2 in every phase; each core may hold
    0.5 x 4 blocks = 2 blocks of output, so C[0] (PE 0) and C[1] (PE 1) are pinned
    and each core's LRU keeps 3 blocks. Costs as in the tiny case above: L2 hit 2,
    LLC hit 6, DRAM 16 per line; streamed bytes 0.625 each; a tile's stream start 10.
    Phase 0 (column 0): only PE 0 has a tile (row 0): dispatch 5; compute 1 row + 1 nnz x 2 = 3;
      memory 10 + 8 B pointers (5) + C[0] first write (pinned: no fetch) + B[0] DRAM 16
      + 8 B of A (5) = 36; PE 0 ends at 5 + 36 = 41; barrier 100.
    Phase 1 (column 1): PE 0 runs first in the round: row 0, C[0] pinned -> L2 hit 2,
      B[1] DRAM 16: memory 15 + 2 + 16 + 5 = 38, ends at 43. PE 1: row 1, C[1] first
      write, B[1] now in the LLC (6): memory 15 + 6 + 5 = 26, ends at 31. Critical: PE 0.
    Cycles: (3 + 33 + 105) + (3 + 35 + 105) = 284.
    DRAM: pointers 3 x 8 + A 3 x 8 + B 2 x 16 + C written back once 2 x 16 = 112 bytes;
    without the pinning C[0] would come back through the caches in phase 1.
    """
    hw = HardwareParams(pes=2, pes_per_core=1, l2_output_share=0.5, **TINY_HW)
    matrix = sp.csr_matrix(np.array([[1.0, 1.0], [0.0, 1.0]]))
    (r,) = simulate(matrix, "spmm", 4, [cfg(rp=1, cp=1, barrier=True)], hardware=hw, sampling=1)
    assert r.error is None and r.cycles == 284.0
    b = r.breakdown
    assert (b["compute"], b["memory_stall"], b["sync"]) == (6.0, 68.0, 210.0)
    assert b["dram_bytes"] == 112.0 and b["phases"] == 2
    # L2: three B misses and one pinned C hit; LLC: one of the three B lookups hits.
    assert b["l2_hit_rate"] == pytest.approx(1 / 4) and b["llc_hit_rate"] == pytest.approx(1 / 3)


def test_barrier_keeps_output_on_chip():
    """With barrier, owned output rows stay on chip: C costs one write-back however many column panels."""
    rng = np.random.default_rng(11)
    rows, cols = 3000, 16384  # 8 column panels of 2048
    matrix = sp.random_array((rows, cols), density=64 / cols, rng=rng, format="csr")
    feat = 128
    # Caches too small to keep 1.5 MB of C plus the B rows a phase gathers (128 KiB per core, 2 MiB LLC).
    small_llc = dict(l2_bytes=128 << 10, llc_bytes=2 << 20)
    config = [cfg(rp=4, cp=2048, barrier=True)]
    pinned = simulate(matrix, "spmm", feat, config, hardware=HardwareParams(**small_llc), sampling=1)[0]
    spilled = simulate(matrix, "spmm", feat, config,
                       hardware=HardwareParams(l2_output_share=0.0, **small_llc), sampling=1)[0]
    c_bytes = rows * feat * 4
    # Lower bound without C reuse: A, row pointers, every distinct B row once, C once.
    touched_b = np.unique(matrix.indices).size * feat * 4
    assert pinned.breakdown["dram_bytes"] >= matrix.nnz * 8 + touched_b + c_bytes
    # Spilled partial sums come back (read + write-back) in most of the later column panels.
    assert spilled.breakdown["dram_bytes"] > pinned.breakdown["dram_bytes"] + 4 * 2 * c_bytes
    assert spilled.cycles > pinned.cycles
    # Bypass streams C instead: its partial sums go to DRAM and back once per column panel.
    bypassed = simulate(matrix, "spmm", feat, [cfg(rp=4, cp=2048, barrier=True, bypass=True)],
                        hardware=HardwareParams(**small_llc), sampling=1)[0]
    assert bypassed.breakdown["dram_bytes"] >= pinned.breakdown["dram_bytes"] + 7 * 2 * c_bytes * 0.99


def test_barrier_assigns_row_panels_statically():
    """Under barrier, row panel r runs on PE r mod P in every phase; without it, on any idle PE.

    32 x 8192, row panels of 4 rows (8), column panels of 2048 (4 phases), 4 PEs.
    Panels 0 and 4 are dense (4 x 2048 nonzeros per tile); the other rows have one
    nonzero each. Memory is free (zero latencies, ample bandwidth), so a tile costs
    its compute: 4 rows x 1 + 8192 nonzeros x (1 issue + 64 / 16 vector ops) = 40964.
    Barrier: PE 0 owns panels 0 and 4, so in each phase it runs both dense tiles:
    the critical path computes 4 x 2 x 40964 = 327712 cycles. Without barrier PE 0
    takes panel 0 (4 dense tiles) while panel 4 goes to another, idle PE: 4 x 40964
    plus the light tiles (4 rows + 4 nonzeros x 5 = 24 cycles) that PE ran before.
    """
    dense = np.zeros((32, 8192))
    dense[0:4, :] = 1.0
    dense[16:20, :] = 1.0
    others = [r for r in range(32) if not (r < 4 or 16 <= r < 20)]
    dense[others, [(r * 37) % 8192 for r in others]] = 1.0
    matrix = sp.csr_matrix(dense)
    hw = HardwareParams(pes=4, pes_per_core=1, dram_gbps=1e6, dram_latency_ns=0.0, l2_latency_cycles=0.0,
                        llc_latency_cycles=0.0)
    barrier, free = simulate(matrix, "spmm", 64, [cfg(rp=4, cp=2048, barrier=True), cfg(rp=4, cp=2048)],
                             hardware=hw, sampling=1)
    assert barrier.breakdown["phases"] == 4 and free.breakdown["phases"] == 1
    assert barrier.breakdown["compute"] == 4 * 2 * 40964
    # The PE that ends last ran panel 4 after a few light tiles (24 cycles each).
    assert 4 * 40964 < free.breakdown["compute"] <= 4 * 40964 + 4 * 24
    assert barrier.breakdown["memory_stall"] == 0.0 and free.breakdown["memory_stall"] == 0.0


def test_output_share_is_validated():
    with pytest.raises(InvalidConfigError, match="l2_output_share"):
        HardwareParams(l2_output_share=1.5)
    with pytest.raises(ValueError, match="l2_output_share"):
        _spade.simulate(np.array([0, 0], np.int32), np.array([], np.int32), 1, 1, "spmm", 8,
                        [(1, 1, 1, True, False)], {"l2_output_share": -0.1})
