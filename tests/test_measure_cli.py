"""The measure CLI: its JSON contract and its errors on bad input."""
import json

import pytest

from cognate_tvm import measure
from cognate_tvm.matrix import EXAMPLE_MATRIX
from cognate_tvm.matrix import save_matrix


def _run(capsys, *argv):
    code = measure.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_json_contract_llvm(capsys, tmp_path, small_matrices):
    path = save_matrix(small_matrices["empty_rows"], tmp_path / "m.mtx")
    code, out, err = _run(capsys, "spmm", "--target", "llvm", "--matrix", str(path), "--feat", "16",
                          "--configs", "sample:3", "--check", "--vendor", "--json", "--quiet")
    assert code == 0, err
    report = json.loads(out)
    assert report["op"] == "spmm" and report["target"] == "llvm" and report["feat"] == 16
    assert report["matrix"] == {"path": str(path), "rows": 37, "cols": 41,
                                "nnz": small_matrices["empty_rows"].nnz}
    assert len(report["results"]) == 4  # baseline + 3 sampled
    assert report["baseline"]["config"] == report["results"][0]["config"]
    assert report["vendor"]["time_ms"] > 0 and report["vendor"]["name"]
    for r in report["results"]:
        assert set(r) >= {"config", "time_ms", "correct", "error"}
        assert r["error"] is None and r["correct"] is True and r["time_ms"] > 0


def test_table_output_sddmm(capsys, tmp_path, small_matrices):
    path = save_matrix(small_matrices["wide"], tmp_path / "w.npz")
    code, out, err = _run(capsys, "sddmm", "--matrix", str(path), "--feat", "8", "--configs", "baseline",
                          "--check", "--quiet")
    assert code == 0, err
    assert "sddmm on llvm: 40x700" in out and "ok" in out


@pytest.mark.parametrize("content, message", [
    (None, "matrix file not found"),
    ("%%MatrixMarket matrix coordinate real general\n2 2 1\n1 1 x\n", "malformed Matrix Market"),
    ("%%MatrixMarket matrix coordinate real general\n2 2 1\n1 1 nan\n", "non-finite"),
])
def test_bad_matrix_files(capsys, tmp_path, content, message):
    path = tmp_path / "bad.mtx"
    if content is not None:
        path.write_text(content)
    code, out, err = _run(capsys, "spmm", "--matrix", str(path))
    assert code == 2 and message in err and out == ""


def test_bad_flags(capsys, tmp_path, small_matrices):
    path = save_matrix(small_matrices["tall"], tmp_path / "t.mtx")
    for argv, message in [
        (["spmm", "--matrix", str(path), "--configs", "some"], "--configs must be"),
        (["spmm", "--matrix", str(path), "--feat", "0"], "--feat must be >= 1"),
        (["spmm", "--matrix", str(path), "--arch", "sm_80"], "does not take option"),
        (["spmm", "--matrix", str(path), "--target", "spade", "--dtype", "bfloat16"], "does not take option"),
    ]:
        code, _, err = _run(capsys, *argv)
        assert code == 2 and message in err, (argv, err)


@pytest.mark.parametrize("argv, message", [
    (["spmv"], "invalid choice: 'spmv'"),
    (["spmm", "--target", "tpu"], "invalid choice: 'tpu'"),
])
def test_unknown_op_or_target(capsys, argv, message):
    with pytest.raises(SystemExit) as exc:
        measure.main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_default_matrix_is_bundled():
    assert EXAMPLE_MATRIX.is_file()


def test_bfloat16_dense_operands(capsys, tmp_path, small_matrices):
    """--dtype bfloat16: the kernels read bfloat16 operands, are checked against scipy, and say so."""
    path = save_matrix(small_matrices["powerlaw"], tmp_path / "p.mtx")
    code, out, err = _run(capsys, "sddmm", "--matrix", str(path), "--feat", "24", "--configs", "sample:2",
                          "--check", "--json", "--quiet", "--dtype", "bfloat16")
    assert code == 0, err
    report = json.loads(out)
    assert report["dtype"] == "bfloat16"
    assert all(r["correct"] is True for r in report["results"])
