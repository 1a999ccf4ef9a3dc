"""The tune CLI: few-shot and model-driven tuning, its JSON contract, failures and errors."""
import contextlib
import io
import json
import shutil

import pytest

from cognate_tvm import backends, measure, space, tune
from cognate_tvm.backends.base import MeasureResult
from cognate_tvm.backends.spade import SpadeBackend
from cognate_tvm.matrix import generate, load_matrix, save_matrix
from cognate_tvm.model import CognateCostModel

FEAT = 32
BUDGET, TOP_K = 12, 3
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
def few_shot(matrix_path, tmp_path_factory):
    """One few-shot run on the simulator, its fitted model saved."""
    model_dir = tmp_path_factory.mktemp("model") / "fitted"
    code, out, err = _main("spmm", "--matrix", matrix_path, *SPADE, "--budget", BUDGET, "--top-k", TOP_K,
                           "--save-model", model_dir, "--json")
    assert code == 0, err
    return json.loads(out), model_dir


def _check_consistent(report):
    """The invariants every report keeps: best = fastest measured, speedup = baseline / best."""
    measured = report["measured"]
    assert report["samples_measured"] == len(measured)
    assert report["failed"] == sum(r["error"] is not None for r in measured)
    assert measured[0]["config"] == report["baseline"]["config"]
    assert report["baseline"]["time_ms"] == measured[0]["time_ms"]
    ok = [r for r in measured if r["error"] is None]
    assert all(r["time_ms"] > 0 for r in ok) and all(r["time_ms"] is None for r in measured if r["error"])
    best = report["best"]
    assert best["time_ms"] == min(r["time_ms"] for r in ok)
    assert best["config"] in [r["config"] for r in ok if r["time_ms"] == best["time_ms"]]
    assert best["speedup_vs_baseline"] == pytest.approx(report["baseline"]["time_ms"] / best["time_ms"])
    assert best["speedup_vs_baseline"] >= 1.0  # the baseline is among the measured configs
    configs = [json.dumps(r["config"], sort_keys=True) for r in measured]
    assert len(set(configs)) == len(configs), "a config was measured twice"
    confirmed = report["confirmed"]
    if best["config"] == report["baseline"]["config"]:
        assert confirmed is None  # nothing to compare
        assert report["chosen"] == best["config"]
    else:  # the baseline and the winner re-timed side by side; the faster of the two is chosen
        assert confirmed["baseline_ms"] > 0 and confirmed["best_ms"] > 0
        assert confirmed["speedup_vs_baseline"] == pytest.approx(confirmed["baseline_ms"] / confirmed["best_ms"])
        faster = best["config"] if confirmed["best_ms"] < confirmed["baseline_ms"] else report["baseline"]["config"]
        assert report["chosen"] == faster


def test_few_shot_json_contract(few_shot, matrix_path):
    report, model_dir = few_shot
    matrix = load_matrix(matrix_path)
    assert report["op"] == "spmm" and report["target"] == "spade" and report["feat"] == FEAT
    assert report["matrix"] == {"path": str(matrix_path), "rows": 600, "cols": 600, "nnz": int(matrix.nnz)}
    assert report["mode"] == "few_shot" and report["model"] is None and report["saved_model"] == str(model_dir)
    assert report["samples_measured"] == BUDGET + TOP_K and report["failed"] == 0
    _check_consistent(report)
    # the seeded sample (baseline first) then the model's top-k of the rest, ranked 1..k
    spade_space = space.create("spade", "spmm")
    sample = tune.few_shot_sample(spade_space, BUDGET, 0)
    assert [r["config"] for r in report["measured"][:BUDGET]] == [c.to_dict() for c in sample]
    assert [r["predicted_rank"] for r in report["measured"]] == [None] * BUDGET + list(range(1, TOP_K + 1))
    # every time was measured: the deterministic simulator gives the same time again
    best = spade_space.config_from_dict(report["best"]["config"])
    again = SpadeBackend().measure("spmm", matrix, [best], FEAT)[0]
    assert again.time_ms == report["best"]["time_ms"]
    if report["confirmed"] is not None:  # the deterministic simulator re-times to the same figures
        assert report["confirmed"]["best_ms"] == report["best"]["time_ms"]
        assert report["confirmed"]["baseline_ms"] == report["baseline"]["time_ms"]
    assert (model_dir / "model.pt").is_file()


def test_saved_model_round_trip(few_shot, matrix_path):
    """--model ranks the whole space with the saved model and measures the baseline + its top-k."""
    report, model_dir = few_shot
    spade_space = space.create("spade", "spmm")
    matrix = load_matrix(matrix_path)
    ranked = CognateCostModel.load(model_dir).rank(matrix, spade_space.configs(), space=spade_space, feat=FEAT)
    # the few-shot run measured exactly the saved model's favourites among the configs it had not sampled
    sample = set(tune.few_shot_sample(spade_space, BUDGET, 0))
    assert [r["config"] for r in report["measured"][BUDGET:]] == \
        [c.to_dict() for c in ranked if c not in sample][:TOP_K]

    code, out, err = _main("spmm", "--matrix", matrix_path, *SPADE, "--model", model_dir, "--top-k", TOP_K,
                           "--json")
    assert code == 0, err
    loaded = json.loads(out)
    assert loaded["mode"] == "model" and loaded["model"] == str(model_dir)
    _check_consistent(loaded)
    baseline = spade_space.baseline()
    expected = [baseline] + [c for c in ranked[:TOP_K] if c != baseline]
    assert [r["config"] for r in loaded["measured"]] == [c.to_dict() for c in expected]
    assert [r["predicted_rank"] for r in loaded["measured"]] == [ranked.index(c) + 1 for c in expected]

    code, out, err = _main("spmm", "--matrix", matrix_path, *SPADE, "--model", model_dir, "--top-k", TOP_K)
    assert code == 0, err
    assert f"speedup over the baseline: {loaded['best']['speedup_vs_baseline']:.2f}x" in out
    assert f"best      {loaded['best']['time_ms']:.4f} ms" in out
    assert f"target measurements: {len(expected)} (0 failed)" in out


class _Flaky(SpadeBackend):
    """The simulator, except that the configs in `failing` (None: all) report an error."""

    def __init__(self, failing=None):
        super().__init__(workers=1)
        self.failing = failing

    def measure(self, op, matrix, configs, feat, *, check=False, seed=0):
        real = super().measure(op, matrix, configs, feat, check=check, seed=seed)
        return [MeasureResult(r.config, None, error="injected failure")
                if self.failing is None or r.config in self.failing else r for r in real]


def test_failing_configs_are_reported_not_fatal(few_shot, matrix_path, monkeypatch):
    _, model_dir = few_shot
    spade_space = space.create("spade", "spmm")
    ranked = CognateCostModel.load(model_dir).rank(load_matrix(matrix_path), spade_space.configs(),
                                                  space=spade_space, feat=FEAT)
    favourite = next(c for c in ranked if c != spade_space.baseline())
    monkeypatch.setattr(backends, "create", lambda target, **_: _Flaky({favourite}))
    code, out, err = _main("spmm", "--matrix", matrix_path, *SPADE, "--model", model_dir, "--top-k", TOP_K,
                           "--json")
    assert code == 0, err
    report = json.loads(out)
    _check_consistent(report)
    failed = [r for r in report["measured"] if r["error"]]
    assert report["failed"] == 1 and failed[0]["config"] == favourite.to_dict()
    assert failed[0]["error"] == "injected failure" and failed[0]["predicted_rank"] == ranked.index(favourite) + 1
    assert report["best"]["config"] != favourite.to_dict()

    code, out, err = _main("spmm", "--matrix", matrix_path, *SPADE, "--model", model_dir, "--top-k", TOP_K)
    assert code == 0 and "(1 failed)" in out and "injected failure" in out


def test_every_config_failing(matrix_path, monkeypatch):
    monkeypatch.setattr(backends, "create", lambda target, **_: _Flaky(None))
    code, out, err = _main("spmm", "--matrix", matrix_path, *SPADE, "--budget", 4, "--json")
    assert code == 1 and "no configuration could be measured" in err
    report = json.loads(out)
    assert report["best"] is None and report["samples_measured"] == 4 and report["failed"] == 4
    assert report["baseline"]["time_ms"] is None and report["baseline"]["error"] == "injected failure"
    assert any("no model was fitted" in n for n in report["notes"])


def test_llvm_tiny(tmp_path, small_matrices):
    """The real CPU target end to end, on a tiny matrix with a tiny budget, with the vendor library."""
    path = save_matrix(small_matrices["empty_rows"], tmp_path / "tiny.mtx")
    code, out, err = _main("sddmm", "--matrix", path, "--feat", 16, "--budget", 3, "--top-k", 2, "--vendor",
                           "--json", "--quiet")
    assert code == 0, err
    report = json.loads(out)
    assert report["target"] == "llvm" and report["op"] == "sddmm" and report["matrix"]["rows"] == 37
    assert report["samples_measured"] == 5 and report["failed"] == 0
    _check_consistent(report)
    cpu_space = space.create("cpu", "sddmm")
    assert cpu_space.config_from_dict(report["measured"][0]["config"]) == cpu_space.baseline()
    vendor = report["vendor"]
    assert vendor["name"] and vendor["time_ms"] > 0
    best_ms = (report["confirmed"] or {}).get("best_ms", report["best"]["time_ms"])
    assert vendor["speedup_vs_vendor"] == pytest.approx(vendor["time_ms"] / best_ms)


def _bad_model(few_shot, tmp_path, how):
    _, model_dir = few_shot
    bad = tmp_path / "bad_model"
    shutil.copytree(model_dir, bad)
    if how == "version":
        meta = json.loads((bad / "meta.json").read_text())
        meta["format_version"] = 999
        (bad / "meta.json").write_text(json.dumps(meta))
    elif how == "weights":
        (bad / "model.pt").write_bytes(b"not a torch file")
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
def test_bad_model_files(few_shot, matrix_path, tmp_path, how, message):
    bad = _bad_model(few_shot, tmp_path, how)
    code, out, err = _main("spmm", "--matrix", matrix_path, *SPADE, "--model", bad)
    assert code == 2 and out == "" and err.startswith("error: ") and message in err, err


def test_bad_flags_and_matrix(matrix_path, tmp_path):
    cases = [
        (["--budget", 1], "--budget must be >= 2"),
        (["--top-k", 0], "--top-k must be >= 1"),
        (["--feat", 0], "--feat must be >= 1"),
        (["--model", tmp_path, "--save-model", tmp_path / "x"], "cannot be used with --model"),
        (["--arch", "sm_80"], "does not take option"),
    ]
    for extra, message in cases:
        code, out, err = _main("spmm", "--matrix", matrix_path, "--target", "spade", "--quiet", *extra)
        assert code == 2 and out == "" and message in err, (extra, err)
    code, out, err = _main("spmm", "--matrix", tmp_path / "nope.mtx", "--target", "spade")
    assert code == 2 and "matrix file not found" in err
    bad = tmp_path / "bad.mtx"
    bad.write_text("%%MatrixMarket matrix coordinate real general\n2 2 1\n1 1 x\n")
    code, out, err = _main("spmm", "--matrix", bad, "--target", "spade")
    assert code == 2 and "malformed Matrix Market" in err


def test_few_shot_sample_rules():
    spade_space = space.create("spade", "spmm")
    sample = tune.few_shot_sample(spade_space, 10, 3)
    assert len(sample) == 10 and sample[0] == spade_space.baseline() and len(set(sample)) == 10
    assert sample == tune.few_shot_sample(spade_space, 10, 3)
    assert sample != tune.few_shot_sample(spade_space, 10, 4)
    assert len(tune.few_shot_sample(spade_space, 10_000, 0)) == len(spade_space)
    with pytest.raises(ValueError, match="budget must be >= 2"):
        tune.few_shot_sample(spade_space, 1, 0)


def test_default_is_the_bundled_matrix_on_llvm():
    args = tune.make_parser().parse_args(["spmm"])
    assert args.matrix == measure.EXAMPLE_MATRIX and args.target == "llvm" and args.model is None
    assert args.budget == tune.DEFAULT_BUDGET and args.top_k == tune.DEFAULT_TOP_K


def test_chosen_falls_back_to_the_baseline_when_retiming_says_so():
    cpu = space.create("cpu", "spmm")
    base, other = cpu.baseline(), cpu.configs()[0]
    sweep = [MeasureResult(base, 2.0), MeasureResult(other, 1.0)]
    tuned = tune.TuneResult(baseline=sweep[0], measured=sweep, predicted_rank=[None, 1])
    assert tuned.chosen is tuned.best and tuned.best.config == other
    tuned.confirmed = (MeasureResult(base, 1.5), MeasureResult(other, 1.6))
    assert tuned.chosen.config == base
    tuned.confirmed = (MeasureResult(base, 1.5), MeasureResult(other, 1.1))
    assert tuned.chosen.config == other
