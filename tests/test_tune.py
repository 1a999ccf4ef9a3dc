"""The tune CLI: shipped-model ranking, --budget fine-tuning, the output check, --oracle, --out, errors."""
import contextlib
import io
import json
import shutil

import numpy as np
import pytest
import torch

from cognate_tvm import backends, space, tune, tuning
from cognate_tvm.matrix import EXAMPLE_MATRIX
from cognate_tvm.backends.base import WRONG_OUTPUT, MeasureResult, check_output
from cognate_tvm.backends.spade import SpadeBackend
from cognate_tvm.matrix import generate, load_matrix, save_matrix
from cognate_tvm.model import CognateCostModel
from cognate_tvm.model.cognate import WEIGHTS_FILE
from cognate_tvm.ops import get_op
from tiny_models import ship, tiny_cpu_model

FEAT = 32
TOP_K = 3
SPADE = ["--target", "spade", "--feat", str(FEAT), "--quiet"]


def _main(*argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = tune.main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def matrix_path(tmp_path_factory):
    return save_matrix(generate("rmat", 600, seed=4), tmp_path_factory.mktemp("m") / "powerlaw.mtx")


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    """A directory of 'shipped' models: a tiny CPU model for spmm and sddmm, no SPADE model."""
    return ship(tiny_cpu_model(), tmp_path_factory.mktemp("pretrained"))


@pytest.fixture(scope="module")
def spade_run(matrix_path, shipped):
    code, out, err = _main("spmm", "--matrix", matrix_path, *SPADE, "--top-k", TOP_K, "--oracle",
                           "--pretrained-dir", shipped, "--json")
    assert code == 0, err
    return json.loads(out)


def _check_consistent(report):
    """Invariants of every report: best = fastest correct measured, speedups are the right ratios."""
    measured = report["measured"]
    assert report["samples_measured"] == len(measured)
    assert report["failed"] == sum(r["error"] is not None for r in measured)
    assert measured[0]["config"] == report["baseline"]["config"]
    ok = [r for r in measured if r["error"] is None]
    assert all(r["time_ms"] > 0 for r in ok) and all(r["time_ms"] is None for r in measured if r["error"])
    best = report["best"]
    finalists = [f for f in report["finalists"] if f["config"] in [r["config"] for r in ok]]
    if finalists:  # re-timed side by side before the choice: the lowest median wins
        assert best["config"] == min(finalists, key=lambda f: f["median_ms"])["config"]
    else:
        assert best["time_ms"] == min(r["time_ms"] for r in ok)
    assert best["speedup_vs_baseline"] == pytest.approx(report["baseline"]["time_ms"] / best["time_ms"])
    configs = [json.dumps(r["config"], sort_keys=True) for r in measured]
    assert len(set(configs)) == len(configs), "a config was measured twice"
    confirmed = report["confirmed"]
    if best["config"] == report["baseline"]["config"]:
        assert confirmed is None and report["chosen"] == best["config"]
    else:  # re-timed side by side; the faster of the two is chosen
        assert confirmed["speedup_vs_baseline"] == pytest.approx(confirmed["baseline_ms"] / confirmed["best_ms"])
        faster = best["config"] if confirmed["best_ms"] < confirmed["baseline_ms"] else report["baseline"]["config"]
        assert report["chosen"] == faster


def test_spade_default_mode_json(spade_run, matrix_path, shipped):
    """No SPADE model ships: the CPU model ranks zero-shot (noted); baseline + k picks of its ranking are
    measured, each the best-ranked config 2 knobs away from the earlier picks (SPADE's pick_distance)."""
    report = spade_run
    matrix = load_matrix(matrix_path)
    assert report["op"] == "spmm" and report["target"] == "spade" and report["feat"] == FEAT
    assert report["matrix"] == {"path": str(matrix_path), "rows": 600, "cols": 600, "nnz": int(matrix.nnz)}
    assert report["mode"] == "ranked" and report["budget"] == 0 and report["saved_model"] is None
    assert report["model"] == str(shipped / "spmm-cpu")
    assert any("zero-shot" in n and "'spade'" in n for n in report["notes"])
    _check_consistent(report)
    spade = space.create("spade", "spmm")
    ranked = CognateCostModel.load(shipped / "spmm-cpu").rank(matrix, spade.configs(), space=spade, feat=FEAT)
    assert report["diversity"] == spade.pick_distance == 2
    expected = [spade.baseline()] + space.diverse_top([c for c in ranked if c != spade.baseline()], TOP_K, 2)
    assert [r["config"] for r in report["measured"]] == [c.to_dict() for c in expected]
    assert [r["predicted_rank"] for r in report["measured"]] == [ranked.index(c) + 1 for c in expected]
    assert report["best"]["correct"] is None and report["rejected"] == []
    assert any("computes no outputs" in n for n in report["notes"])
    # the simulator is deterministic: every time reported is the time it gives
    sim = SpadeBackend().measure("spmm", matrix, expected, FEAT)
    assert [r["time_ms"] for r in report["measured"]] == [r.time_ms for r in sim]


def test_spade_oracle_is_the_best_of_the_whole_space(spade_run, matrix_path):
    report = spade_run
    spade = space.create("spade", "spmm")
    every = SpadeBackend().measure("spmm", load_matrix(matrix_path), spade.configs(), FEAT)
    best = min((r for r in every if r.ok), key=lambda r: r.time_ms)
    oracle = report["oracle"]
    assert oracle["whole_space"] and oracle["configs_measured"] == oracle["space_size"] == len(spade) == 256
    assert oracle["time_ms"] == best.time_ms
    assert spade.config_from_dict(oracle["config"]) == best.config or \
        next(r.time_ms for r in every if r.config.to_dict() == oracle["config"]) == best.time_ms
    chosen = next(r.time_ms for r in every if r.config.to_dict() == report["chosen"])
    assert oracle["chosen_ms"] == chosen
    assert report["oracle_fraction"] == pytest.approx(best.time_ms / chosen)


class _KnownRanking:
    """A model that ranks by given times (ascending, or descending with `reverse`); finetune is a no-op."""

    def __init__(self, times, reverse=False):
        self.times, self.reverse = times, reverse

    def rank(self, matrix, configs, *, space, feat):
        return sorted(configs, key=lambda c: self.times[c], reverse=self.reverse)

    def finetune(self, groups, *, space):
        return self


def test_tune_picks_what_the_ranking_puts_first(matrix_path):
    """The choice follows the model: a perfect ranking reaches the oracle, a reversed one does not.

    (Replaces the old `speedup >= 1` assertion, which held by construction since the baseline is measured.)
    """
    matrix = load_matrix(matrix_path)
    spade = space.create("spade", "spmm")
    backend = SpadeBackend(workers=1)
    times = {r.config: r.time_ms for r in backend.measure("spmm", matrix, spade.configs(), FEAT)}
    perfect = tuning.tune("spmm", matrix, backend=backend, feat=FEAT,
                          options=tuning.TuneOptions(model=_KnownRanking(times), top_k=2, oracle=True))
    oracle_ms = min(times.values())
    assert perfect.best.time_ms == oracle_ms and perfect.oracle.fraction == 1.0
    assert perfect.predicted_rank[1:] == [1, 2] or perfect.predicted_rank[1] == 1
    worst = tuning.tune("spmm", matrix, backend=backend, feat=FEAT,
                        options=tuning.TuneOptions(model=_KnownRanking(times, reverse=True), top_k=2, oracle=True,
                                                   diversity=1))
    baseline_ms = times[spade.baseline()]
    assert worst.best.time_ms == baseline_ms  # the two slowest configs lose to the baseline
    assert worst.chosen.config == spade.baseline()
    assert worst.oracle.fraction == pytest.approx(oracle_ms / baseline_ms) and worst.oracle.fraction < 1.0


class _WrongForOne(SpadeBackend):
    """The simulator's times, with outputs computed by numpy; `wrong`'s output is off and it looks 100x faster."""

    def __init__(self, wrong):
        super().__init__(workers=1)
        self.wrong = wrong
        self.checked = []

    def measure(self, op, matrix, configs, feat, *, check=False, seed=0):
        op = get_op(op)
        dense = op.make_dense_inputs(matrix, feat, seed=seed)
        out = []
        for r in super().measure(op, matrix, configs, feat, seed=seed):
            correct = None
            if check:
                output = op.reference(matrix, *dense)
                if r.config == self.wrong:
                    output = output.copy()
                    output.flat[0] += 1.0
                correct = check_output(op, matrix, dense, output)
                self.checked.append(r.config)
            time_ms = r.time_ms * 0.01 if r.config == self.wrong else r.time_ms
            out.append(MeasureResult(r.config, time_ms, correct=correct, extra=r.extra))
        return out


def test_a_fast_wrong_config_is_rejected_and_the_next_best_chosen(matrix_path, shipped, monkeypatch):
    matrix = load_matrix(matrix_path)
    spade = space.create("spade", "spmm")
    ranked = CognateCostModel.load(shipped / "spmm-cpu").rank(matrix, spade.configs(), space=spade, feat=FEAT)
    wrong = next(c for c in ranked if c != spade.baseline())  # the model's favourite
    backend = _WrongForOne(wrong)
    monkeypatch.setattr(backends, "create", lambda target, **_: backend)
    code, out, err = _main("spmm", "--matrix", matrix_path, *SPADE, "--top-k", TOP_K, "--pretrained-dir",
                           shipped, "--json")
    assert code == 0, err
    report = json.loads(out)
    _check_consistent(report)
    # it was the fastest measured, so it was checked first (beside the baseline, re-timed with it)
    assert backend.checked[:2] == [spade.baseline(), wrong]
    assert report["rejected"] == [{"config": wrong.to_dict(), "error": WRONG_OUTPUT}]
    entry = next(r for r in report["measured"] if r["config"] == wrong.to_dict())
    assert entry["error"] == WRONG_OUTPUT and entry["correct"] is False and entry["time_ms"] is None
    honest = {r.config: r.time_ms for r in SpadeBackend(workers=1).measure(
        "spmm", matrix, [spade.config_from_dict(r["config"]) for r in report["measured"]], FEAT)}
    expected = min((c for c in honest if c != wrong), key=honest.get)
    assert report["best"]["config"] == expected.to_dict() and report["best"]["correct"] is True
    assert report["chosen"] != wrong.to_dict() and report["failed"] == 1
    assert any("rejected" in n and WRONG_OUTPUT in n for n in report["notes"])


def test_budget_finetunes_from_the_shipped_weights(matrix_path, shipped, tmp_path, monkeypatch):
    shipped_state = torch.load(shipped / "spmm-cpu" / WEIGHTS_FILE, weights_only=True)
    started_from = []
    original = CognateCostModel.finetune

    def spy(self, groups, **kwargs):
        started_from.append(({k: v.clone() for k, v in self.net.state_dict().items()}, groups))
        return original(self, groups, **kwargs)

    monkeypatch.setattr(CognateCostModel, "finetune", spy)
    saved = tmp_path / "finetuned"
    budget = 8
    code, out, err = _main("spmm", "--matrix", matrix_path, *SPADE, "--budget", budget, "--top-k", TOP_K,
                           "--pretrained-dir", shipped, "--save-model", saved, "--json")
    assert code == 0, err
    report = json.loads(out)
    _check_consistent(report)
    assert report["mode"] == "finetuned" and report["saved_model"] == str(saved)
    assert report["samples_measured"] == 1 + budget + TOP_K
    assert [r["sampled"] for r in report["measured"]] == [False] + [True] * budget + [False] * TOP_K
    # fine-tuning started from the shipped weights, on the baseline and the sample
    (state, groups), = started_from
    for name, tensor in shipped_state.items():
        if name in state:
            assert torch.equal(state[name], tensor), name
    assert groups[0].configs == tuple(space.create("spade", "spmm").config_from_dict(r["config"])
                                      for r in report["measured"][:1 + budget])
    # the saved model is the fine-tuned one: it changed, and its ranking is what chose the top-k
    tuned_model = CognateCostModel.load(saved)
    changed = [n for n, t in tuned_model.net.state_dict().items() if n in shipped_state
               and not torch.equal(t, shipped_state[n])]
    assert changed
    spade = space.create("spade", "spmm")
    ranked = tuned_model.rank(load_matrix(matrix_path), spade.configs(), space=spade, feat=FEAT)
    sample = {spade.config_from_dict(r["config"]) for r in report["measured"][:1 + budget]}
    assert [r["config"] for r in report["measured"][1 + budget:]] == \
        [c.to_dict() for c in space.diverse_top([c for c in ranked if c not in sample], TOP_K, spade.pick_distance)]


def _run_llvm_kernel(library, op, matrix, config, feat):
    """Load an exported kernel and run it on seeded operands; returns (output, expected)."""
    import tvm

    from cognate_tvm.kernels.cpu_operands import kernel_arguments, unpad_output

    op = get_op(op)
    dense = op.make_dense_inputs(matrix, feat, seed=11)
    args = kernel_arguments(op, matrix, config, feat, dense)
    lib = tvm.runtime.load_module(str(library))
    call = [a if isinstance(a, int) else tvm.runtime.tensor(a, tvm.cpu()) for a in args]
    lib["main"](*call)
    return unpad_output(op, call[-1].numpy(), feat), op.reference(matrix, *dense)


def test_llvm_json_budget_vendor_and_out(tmp_path, small_matrices, shipped):
    """The real CPU target end to end on a tiny matrix; --out's kernel loads and computes the right thing."""
    path = save_matrix(small_matrices["empty_rows"], tmp_path / "tiny.mtx")
    out_dir = tmp_path / "out"
    code, out, err = _main("sddmm", "--matrix", path, "--feat", 16, "--budget", 2, "--top-k", 2, "--vendor",
                           "--pretrained-dir", shipped, "--out", out_dir, "--json", "--quiet")
    assert code == 0, err
    report = json.loads(out)
    assert report["target"] == "llvm" and report["op"] == "sddmm" and report["matrix"]["rows"] == 37
    assert report["model"] == str(shipped / "sddmm-cpu") and report["mode"] == "finetuned"
    assert report["samples_measured"] == 5 and report["failed"] == 0
    _check_consistent(report)
    assert report["best"]["correct"] is True  # checked against scipy before it was chosen
    cpu = space.create("cpu", "sddmm")
    assert cpu.config_from_dict(report["measured"][0]["config"]) == cpu.baseline()
    vendor = report["vendor"]
    assert vendor["name"] and vendor["time_ms"] > 0
    chosen_ms = report["confirmed"]["best_ms"] if report["confirmed"] and report["chosen"] == \
        report["best"]["config"] else (report["confirmed"] or {}).get("baseline_ms", report["best"]["time_ms"])
    assert vendor["speedup_vs_vendor"] == pytest.approx(vendor["time_ms"] / chosen_ms)
    # --out: report, config, and an exported kernel that loads and runs
    assert json.loads((out_dir / "report.json").read_text())["chosen"] == report["chosen"]
    written = json.loads((out_dir / "config.json").read_text())
    assert written["config"] == report["chosen"] and written["op"] == "sddmm" and written["feat"] == 16
    config = cpu.config_from_dict(written["config"])
    output, expected = _run_llvm_kernel(out_dir / written["kernel"]["library"], "sddmm",
                                        small_matrices["empty_rows"], config, 16)
    np.testing.assert_allclose(output, expected, rtol=1e-4, atol=1e-4)


def test_spade_out_writes_config_and_report(matrix_path, shipped, tmp_path):
    out_dir = tmp_path / "out"
    code, out, err = _main("spmm", "--matrix", matrix_path, *SPADE, "--top-k", 1, "--pretrained-dir", shipped,
                           "--out", out_dir)
    assert code == 0, err
    assert f"written to {out_dir}" in out and "zero-shot" in out
    written = json.loads((out_dir / "config.json").read_text())
    assert "simulated" in written["kernel"]["note"]
    assert written["config"] == json.loads((out_dir / "report.json").read_text())["chosen"]


def test_default_pretrained_dir_is_used_without_the_flag(matrix_path, shipped, monkeypatch):
    import cognate_tvm.model.pretrained as pretrained

    monkeypatch.setattr(pretrained, "PRETRAINED_DIR", shipped)
    code, out, err = _main("spmm", "--matrix", matrix_path, *SPADE, "--top-k", 1, "--json")
    assert code == 0, err
    assert json.loads(out)["model"] == str(shipped / "spmm-cpu")
    monkeypatch.setattr(pretrained, "PRETRAINED_DIR", shipped / "nothing_here")
    code, out, err = _main("spmm", "--matrix", matrix_path, *SPADE)
    assert code == 2 and out == ""
    assert "no shipped model for op 'spmm'" in err and "shipped: none" in err and "--model" in err


def test_search_flag_adaptive_by_default_and_oneshot(matrix_path, shipped):
    """Default: baseline + 7 in rounds of 3, 2, 2; --search oneshot: baseline + 5 in one batch."""
    code, out, err = _main("spmm", "--matrix", matrix_path, *SPADE, "--pretrained-dir", shipped, "--json")
    assert code == 0, err
    report = json.loads(out)
    assert (report["search"], report["rounds"], report["top_k"], report["samples_measured"]) == \
        ("adaptive", [3, 2, 2], 7, 8)
    code, out, err = _main("spmm", "--matrix", matrix_path, *SPADE, "--pretrained-dir", shipped, "--json",
                           "--search", "oneshot")
    assert code == 0, err
    report = json.loads(out)
    assert (report["search"], report["rounds"], report["top_k"], report["samples_measured"]) == \
        ("oneshot", [5], 5, 6)
    code, out, err = _main("spmm", "--matrix", matrix_path, *SPADE, "--pretrained-dir", shipped)
    assert code == 0, err
    assert "measured in rounds of 3, 2, 2, the model fine-tuned on this matrix's measurements" in out


class _Flaky(SpadeBackend):
    """The simulator, except that the configs in `failing` (None: all) report an error."""

    def __init__(self, failing=None):
        super().__init__(workers=1)
        self.failing = failing

    def measure(self, op, matrix, configs, feat, *, check=False, seed=0):
        real = super().measure(op, matrix, configs, feat, check=check, seed=seed)
        return [MeasureResult(r.config, None, error="injected failure")
                if self.failing is None or r.config in self.failing else r for r in real]


def test_failing_configs_are_reported_not_fatal(matrix_path, shipped, monkeypatch):
    spade = space.create("spade", "spmm")
    ranked = CognateCostModel.load(shipped / "spmm-cpu").rank(load_matrix(matrix_path), spade.configs(),
                                                             space=spade, feat=FEAT)
    favourite = next(c for c in ranked if c != spade.baseline())
    monkeypatch.setattr(backends, "create", lambda target, **_: _Flaky({favourite}))
    code, out, err = _main("spmm", "--matrix", matrix_path, *SPADE, "--top-k", TOP_K, "--pretrained-dir", shipped,
                           "--json")
    assert code == 0, err
    report = json.loads(out)
    _check_consistent(report)
    failed = [r for r in report["measured"] if r["error"]]
    assert report["failed"] == 1 and failed[0]["config"] == favourite.to_dict()
    assert failed[0]["error"] == "injected failure" and failed[0]["predicted_rank"] == ranked.index(favourite) + 1

    code, out, err = _main("spmm", "--matrix", matrix_path, *SPADE, "--top-k", TOP_K, "--pretrained-dir", shipped)
    assert code == 0 and "(1 failed)" in out and "injected failure" in out


def test_every_config_failing(matrix_path, shipped, monkeypatch):
    monkeypatch.setattr(backends, "create", lambda target, **_: _Flaky(None))
    code, out, err = _main("spmm", "--matrix", matrix_path, *SPADE, "--budget", 3, "--top-k", 2,
                           "--pretrained-dir", shipped, "--json")
    assert code == 1 and "no configuration could be measured" in err
    report = json.loads(out)
    assert report["best"] is None and report["samples_measured"] == 6 and report["failed"] == 6
    assert report["baseline"]["error"] == "injected failure" and report["mode"] == "ranked"
    assert any("not fine-tuned" in n for n in report["notes"])


def _bad_model(shipped, tmp_path, how):
    bad = tmp_path / "bad_model"
    shutil.copytree(shipped / "spmm-cpu", bad)
    if how == "version":
        meta = json.loads((bad / "meta.json").read_text())
        meta["format_version"] = 999
        (bad / "meta.json").write_text(json.dumps(meta))
    elif how == "weights":
        (bad / WEIGHTS_FILE).write_bytes(b"not a torch file")
    elif how == "meta":
        (bad / "meta.json").write_text("{not json")
    elif how == "missing":
        shutil.rmtree(bad)
    return bad


@pytest.mark.parametrize("how, message", [
    ("version", "model format version 999"),
    ("weights", "cannot read the model"),
    ("meta", "cannot read the model"),
    ("missing", "no saved model"),
])
def test_bad_model_files(shipped, matrix_path, tmp_path, how, message):
    bad = _bad_model(shipped, tmp_path, how)
    code, out, err = _main("spmm", "--matrix", matrix_path, *SPADE, "--model", bad)
    assert code == 2 and out == "" and err.startswith("error: ") and message in err, err


def test_shipped_model_of_another_version(shipped, matrix_path, tmp_path):
    root = tmp_path / "old"
    shutil.copytree(shipped, root)
    meta = json.loads((root / "spmm-cpu" / "meta.json").read_text())
    meta["format_version"] = 1
    (root / "spmm-cpu" / "meta.json").write_text(json.dumps(meta))
    code, out, err = _main("spmm", "--matrix", matrix_path, *SPADE, "--pretrained-dir", root)
    assert code == 2 and "model format version 1" in err and str(root / "spmm-cpu") in err


def test_bad_flags_and_matrix(matrix_path, tmp_path, shipped):
    cases = [
        (["--budget", -1], "--budget must be >= 0"),
        (["--top-k", 0], "--top-k must be >= 1"),
        (["--feat", 0], "--feat must be >= 1"),
        (["--oracle-sample", 0], "--oracle-sample must be >= 1"),
        (["--diversity", 0], "--diversity must be >= 1"),
        (["--arch", "sm_80"], "does not take option"),
        (["--compile-only"], "give --out DIR"),
        (["--compile-only", "--out", tmp_path, "--oracle"], "--oracle needs timed runs"),
    ]
    for extra, message in cases:
        code, out, err = _main("spmm", "--matrix", matrix_path, "--target", "spade", "--quiet",
                               "--pretrained-dir", shipped, *extra)
        assert code == 2 and out == "" and message in err, (extra, err)
    code, out, err = _main("spmm", "--matrix", tmp_path / "nope.mtx", "--target", "spade")
    assert code == 2 and "matrix file not found" in err and "nope.mtx" in err
    bad = tmp_path / "bad.mtx"
    bad.write_text("%%MatrixMarket matrix coordinate real general\n2 2 1\n1 1 x\n")
    code, out, err = _main("spmm", "--matrix", bad, "--target", "spade")
    assert code == 2 and "malformed Matrix Market" in err


def test_unknown_target_and_op(capsys):
    for argv, message in ((["spmm", "--target", "tpu"], "invalid choice: 'tpu'"),
                          (["spmv"], "invalid choice: 'spmv'")):
        with pytest.raises(SystemExit) as exc:
            tune.main(argv)
        assert exc.value.code == 2 and message in capsys.readouterr().err


def _gpu_visible() -> bool:
    import tvm

    return bool(tvm.cuda(0).exist)


@pytest.mark.skipif("_gpu_visible()", reason="this machine has a GPU: the no-GPU error cannot happen")
def test_cuda_without_a_gpu_suggests_compile_only(matrix_path, shipped):
    code, out, err = _main("spmm", "--matrix", matrix_path, "--target", "cuda", "--quiet",
                           "--pretrained-dir", shipped)
    assert code == 2 and out == ""
    assert "no CUDA GPU" in err and "--compile-only --out DIR" in err


def test_cuda_compile_only_writes_top_k_sources_and_ptx(matrix_path, shipped, tmp_path):
    from cognate_tvm.kernels.cuda import find_nvcc

    out_dir = tmp_path / "cuda"
    code, out, err = _main("spmm", "--matrix", matrix_path, "--target", "cuda", "--compile-only", "--top-k", 2,
                           "--feat", FEAT, "--pretrained-dir", shipped, "--out", out_dir, "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["compile_only"] and len(report["kernels"]) == 2
    assert any("zero-shot" in n and "'gpu'" in n for n in report["notes"])
    gpu = space.create("gpu", "spmm")
    ranked = CognateCostModel.load(shipped / "spmm-cpu").rank(load_matrix(matrix_path), gpu.configs(), space=gpu,
                                                             feat=FEAT)
    assert [k["config"] for k in report["kernels"]] == [c.to_dict() for c in ranked[:2]]
    for n, kernel in enumerate(report["kernels"], start=1):
        source = (out_dir / kernel["files"]["source"]).read_text()
        assert "__global__" in source and all(name in source for name in kernel["files"]["kernels"])
        if find_nvcc() is not None:
            assert kernel["error"] is None
            ptx = (out_dir / f"top{n}.ptx").read_text()
            assert ".entry" in ptx
    assert json.loads((out_dir / "report.json").read_text())["kernels"] == report["kernels"]


def test_cuda_compile_only_ranks_with_a_shipped_gpu_model_and_notes_another_arch(matrix_path, tmp_path):
    from cognate_tvm.model.pretrained import write_trained_on

    root = ship(tiny_cpu_model(), tmp_path / "models", ops=("spmm",))
    gpu_model = ship(tiny_cpu_model(seed=1), tmp_path / "models", ops=("spmm",), platform="gpu") / "spmm-gpu"
    write_trained_on(gpu_model, {"target": "cuda", "arch": "sm_90", "device": "NVIDIA H200"})
    code, out, err = _main("spmm", "--matrix", matrix_path, "--target", "cuda", "--compile-only", "--top-k", 1,
                           "--arch", "sm_80", "--feat", FEAT, "--pretrained-dir", root, "--out", tmp_path / "k",
                           "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["model"] == str(gpu_model) and not any("zero-shot" in n for n in report["notes"])
    assert any("NVIDIA H200 (arch sm_90)" in n and "arch is sm_80" in n for n in report["notes"])
    gpu = space.create("gpu", "spmm")
    ranked = CognateCostModel.load(gpu_model).rank(load_matrix(matrix_path), gpu.configs(), space=gpu, feat=FEAT)
    assert report["kernels"][0]["config"] == ranked[0].to_dict()


def test_chosen_falls_back_to_the_baseline_when_retiming_says_so():
    cpu = space.create("cpu", "spmm")
    base, other = cpu.baseline(), cpu.configs()[0]
    sweep = [MeasureResult(base, 2.0), MeasureResult(other, 1.0)]
    tuned = tuning.TuneResult(baseline=sweep[0], measured=sweep, predicted_rank=[None, 1])
    assert tuned.chosen is tuned.best and tuned.best.config == other
    tuned.confirmed = (MeasureResult(base, 1.5, correct=True), MeasureResult(other, 1.6, correct=True))
    assert tuned.chosen.config == base
    tuned.confirmed = (MeasureResult(base, 1.5, correct=True), MeasureResult(other, 1.1, correct=True))
    assert tuned.chosen.config == other
    # a baseline whose output is wrong is never chosen, however fast
    tuned.confirmed = (MeasureResult(base, 1.0, correct=False), MeasureResult(other, 1.6, correct=True))
    assert tuned.chosen.config == other


def test_summary_prints_the_side_by_side_medians_the_choice_was_made_on():
    """On a busy machine one timing can contradict the re-timed medians; the summary shows the medians."""
    base, best = {"a": 1}, {"a": 2}
    report = {"op": "spmm", "target": "llvm", "feat": 8, "mode": "ranked", "model": "m",
              "matrix": {"rows": 4, "cols": 4, "nnz": 5},
              "baseline": {"config": base, "time_ms": 0.3, "error": None},
              "best": {"config": best, "time_ms": 1.9, "predicted_rank": 3, "correct": True,
                       "speedup_vs_baseline": 0.3 / 1.9},
              "measured": [{"config": base, "best_fixed": False, "error": None},
                           {"config": best, "best_fixed": False, "error": None},
                           {"config": {"a": 3}, "best_fixed": False, "error": None}],
              "finalists": [{"config": base, "median_ms": 4.1}, {"config": best, "median_ms": 1.7}],
              "chosen": best, "confirmed": {"baseline_ms": 4.0, "best_ms": 1.6, "speedup_vs_baseline": 2.5},
              "samples_measured": 3, "failed": 0, "notes": [], "saved_model": None}
    lines = tune.format_summary(report).splitlines()
    assert lines[1].startswith("best      1.6000 ms (median side by side; first timing 1.9000 ms)")
    assert lines[2].startswith("baseline  4.0000 ms (median side by side; first timing 0.3000 ms)")
    assert "2.50x" in lines[3]
    report["confirmed"] = None  # re-timed, not confirmed (the baseline was best): the rounds' medians
    lines = tune.format_summary(report).splitlines()
    assert lines[1].startswith("best      1.7000 ms (median") and lines[2].startswith("baseline  4.1000 ms (median")
    report["finalists"] = []  # not re-timed (a deterministic target): the one timing
    lines = tune.format_summary(report).splitlines()
    assert lines[1].startswith("best      1.9000 ms  {") and lines[2].startswith("baseline  0.3000 ms  {")


def test_parser_defaults():
    args = tune.make_parser().parse_args(["spmm"])
    assert args.matrix == EXAMPLE_MATRIX and args.target == "llvm" and args.model is None
    assert args.budget == 0 and args.top_k is None and args.fixed == 1 and not args.oracle and args.out is None
    assert args.search == "adaptive" and tune.make_parser().parse_args(["spmm", "--search", "oneshot"]).search \
        == "oneshot"
    assert args.diversity is None  # the platform's Space.pick_distance


def test_llvm_bfloat16_tune_and_out(tmp_path, small_matrices, shipped):
    """--dtype bfloat16: tune measures bfloat16 kernels, and --out's kernel reads bfloat16 operands."""
    from cognate_tvm.kernels.cpu_operands import dense_numpy_dtype, kernel_arguments, unpad_output

    import tvm

    matrix = small_matrices["banded"]
    path = save_matrix(matrix, tmp_path / "banded.mtx")
    out_dir = tmp_path / "out"
    code, out, err = _main("spmm", "--matrix", path, "--feat", 16, "--search", "oneshot", "--top-k", 2,
                           "--dtype", "bfloat16", "--pretrained-dir", shipped, "--out", out_dir, "--json", "--quiet")
    assert code == 0, err
    report = json.loads(out)
    assert report["dtype"] == "bfloat16" and report["best"]["correct"] is True
    written = json.loads((out_dir / "config.json").read_text())
    assert written["kernel"]["dense_dtype"] == "bfloat16"
    config = space.create("cpu", "spmm").config_from_dict(written["config"])
    module = tvm.runtime.load_module(str(out_dir / written["kernel"]["library"]))
    dense = [np.random.default_rng(0).standard_normal((matrix.shape[1], 16)).astype(np.float32)]
    args = kernel_arguments("spmm", matrix, config, 16, dense, dtype="bfloat16")
    args = [a if isinstance(a, int) else tvm.runtime.tensor(a, tvm.cpu()) for a in args]
    module["main"](*args)
    rounded = dense[0].astype(dense_numpy_dtype("bfloat16")).astype(np.float32)
    np.testing.assert_allclose(unpad_output("spmm", args[-1].numpy(), 16), matrix @ rounded, rtol=1e-4, atol=1e-4)
