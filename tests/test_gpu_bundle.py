"""The GPU payload (scripts/gpu_bundle.py): trimming, archives, parts, call planning, unpacking.

Runs on a tiny fake wheel in seconds; the real 100 MB bundle is built by
`bash scripts/gpu_bundle.sh` (docs/gpu.md), never by the test suite.
"""
from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


FAKE_FILES = {
    "tvm/__init__.py": b"VERSION = 'fake'\n",
    "tvm/lib/libtvm_compiler.so": bytes(range(256)) * 64,
    "tvm/lib/libtvm_runtime_cuda.so": b"\x7fELF" + b"\x01" * 500,
    "tvm/3rdparty/cutlass/include/cutlass.h": b"// header\n" * 100,
    "tvm/src/runtime/cuda/cuda_module.cc": b"// source\n" * 100,
    "tvm/include/tvm/runtime/base.h": b"// tvm header\n",
    "tvm/web/tvmjs.js": b"js\n" * 50,
    "tvm/s_tir/__init__.py": b"",
    "tvm/s_tir/__pycache__/__init__.cpython-311.pyc": b"\x00" * 30,
    "tvm_ffi/lib/libtvm_ffi.so": b"\x7fELF" + b"\x02" * 300,
    "tvm_ffi/lib/libtvm_ffi_testing.so": b"\x7fELF" + b"\x03" * 300,
    "tvm_ffi/include/tvm/ffi/c_api.h": b"// c api\n",
    "apache_tvm-0.27.0.post1.dist-info/METADATA": b"Name: apache-tvm\n",
}
DROPPED = {"tvm/3rdparty/cutlass/include/cutlass.h", "tvm/src/runtime/cuda/cuda_module.cc",
           "tvm/include/tvm/runtime/base.h", "tvm/web/tvmjs.js", "tvm/s_tir/__pycache__/__init__.cpython-311.pyc",
           "tvm_ffi/include/tvm/ffi/c_api.h"}


def fake_wheel(path: Path) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in FAKE_FILES.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (0o755 if name.endswith(".so") else 0o644) << 16
            zf.writestr(info, data)
    return path


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_drop_rules_keep_what_a_cuda_run_needs(gb):
    for kept in ("tvm/lib/libtvm_compiler.so", "tvm/lib/libtvm_runtime_cuda.so", "tvm/support/nvcc.py",
                 "tvm_ffi/lib/libtvm_ffi.so", "tvm_ffi/lib/libtvm_ffi_testing.so",  # import tvm loads it
                 "tvm_ffi/core.cpython-312-x86_64-linux-gnu.so",
                 "apache_tvm-0.27.0.post1.dist-info/RECORD", "tvm/srcfoo.py"):
        assert not gb.is_dropped(kept), kept
    for dropped in DROPPED | {"tvm_ffi/CMakeLists.txt", "tvm_ffi/3rdparty/dlpack/include/dlpack.h", "x/y.pyc"}:
        assert gb.is_dropped(dropped), dropped


def test_unpack_wheel_trims_and_keeps_modes(gb, tmp_path):
    site = tmp_path / "site"
    stats = gb.unpack_wheel(fake_wheel(tmp_path / "fake-1.0-py3-none-any.whl"), site)
    got = tree(site)
    assert set(got) == set(FAKE_FILES) - DROPPED
    assert all(got[name] == FAKE_FILES[name] for name in got)
    assert stats["dropped_bytes"] == sum(len(FAKE_FILES[n]) for n in DROPPED)
    assert stats["kept_bytes"] == sum(len(v) for v in got.values())
    assert "tvm/3rdparty" in stats["dropped"]
    assert (site / "tvm/lib/libtvm_compiler.so").stat().st_mode & 0o111  # still executable


def test_unsafe_wheel_paths_are_refused(gb, tmp_path):
    wheel = tmp_path / "evil.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("../outside.py", b"x")
    with pytest.raises(ValueError, match="unsafe path"):
        gb.unpack_wheel(wheel, tmp_path / "site")


def test_split_file_cuts_at_the_given_sizes_and_reassembles(gb, tmp_path):
    data = bytes(range(256)) * 41 + b"tail"
    src = tmp_path / "blob.bin"
    src.write_bytes(data)
    out = tmp_path / "parts"
    out.mkdir()
    parts = gb.split_file(src, out, [4000, 4000, len(data) - 8000])
    assert [p.name for p in parts] == [f"blob.bin.part-{n:02d}" for n in range(3)]
    assert [p.stat().st_size for p in parts] == [4000, 4000, len(data) - 8000]
    assert b"".join(p.read_bytes() for p in parts) == data
    with pytest.raises(ValueError, match="do not cut"):
        gb.split_file(src, out, [4000])


def test_plan_calls_evens_the_calls_and_cuts_only_at_their_edges(gb):
    # the real payload's shape: a large tvm archive, then the small core one
    calls = gb.plan_calls([("tvm", 576), ("core", 30)], room=470, max_calls=2)
    assert calls == [[("tvm", 303)], [("tvm", 273), ("core", 30)]]
    assert gb.plan_calls([("tvm", 576), ("core", 30)], room=700, max_calls=2) == [[("tvm", 576), ("core", 30)]]
    three = gb.plan_calls([("tvm", 50), ("extra", 45), ("core", 10)], room=40, max_calls=3)
    assert [sum(size for _, size in call) for call in three] == [35, 35, 35]
    assert [piece for call in three for piece in call] == [("tvm", 35), ("tvm", 15), ("extra", 20), ("extra", 25),
                                                           ("core", 10)]
    with pytest.raises(gb.PayloadTooLarge, match="needs 3 calls"):
        gb.plan_calls([("tvm", 576), ("core", 30)], room=250, max_calls=2)
    with pytest.raises(gb.PayloadTooLarge, match="no room"):
        gb.plan_calls([("tvm", 1)], room=0, max_calls=2)


def _git_tree(root: Path, files: dict[str, int]) -> Path:
    """A git checkout with files of the given sizes (tracked, untracked and ignored ones)."""
    root.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    for name, size in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(b"x" * size)
    (root / ".gitignore").write_text("build/\n")
    subprocess.run(["git", "add", "docs", ".gitignore"], cwd=root, check=True)
    return root


def test_tree_size_counts_what_a_call_sends_and_names_the_heaviest_folders(gb, tmp_path):
    mib = gb.MIB
    repo = _git_tree(tmp_path / "repo", {"docs/results/a.png": 3 * mib, "docs/results/b.png": 2 * mib,
                                         "docs/gpu.md": 1000, "data/gpu/x.parquet": mib // 2,
                                         "build/huge.o": 40 * mib, "shared/notes.md": 100})
    (repo / ".git" / "info" / "exclude").write_text("shared/\n")
    # tracked docs, untracked-not-ignored data, shared/ even though ignored; never the ignored build/
    gitignore = (repo / ".gitignore").stat().st_size
    assert gb.tree_bytes(repo) == 5 * mib + 1000 + mib // 2 + 100 + gitignore
    heaviest = gb.heaviest_folders(repo)
    assert heaviest[0] == ("docs/results", 5 * mib)  # not "docs": nearly all of it is docs/results
    assert ("data/gpu", mib // 2) in heaviest and not any(f.startswith("build") for f, _ in heaviest)


def test_a_payload_that_needs_more_than_two_calls_fails_naming_the_folders(gb, tmp_path):
    mib = gb.MIB
    repo = _git_tree(tmp_path / "repo", {"docs/results/big.bin": 40 * mib, "python/x.py": 100})
    archives = {}
    for name, size in (("tvm", 57 * mib), ("core", 3 * mib)):
        archives[name] = tmp_path / f"{name}.tar.xz"
        archives[name].write_bytes(bytes(size))
    report = {"groups": {"tvm": {}, "core": {}}}
    with pytest.raises(gb.PayloadTooLarge, match=r"needs 3 calls.*docs/results/ 40\.0 MiB"):
        gb.lay_out(tmp_path / "out", archives, "cp312", gb.tree_bytes(repo), report, repo=repo)
    # planned for a 15 MiB tree, the same payload takes two even calls; `check` then judges the real tree
    gb.lay_out(tmp_path / "out", archives, "cp312", 15 * mib, report)
    assert report["calls"] == [["call1/tvm.tar.xz.part-00"], ["call2/tvm.tar.xz.part-01", "call2/core-cp312.tar.xz"]]
    assert report["call_bytes"] == [30 * mib, 30 * mib]
    assert json.loads((tmp_path / "out" / "call2" / "manifest.json").read_text())["calls"] == report["calls"]
    problems = gb.check(tmp_path / "out", repo)
    assert len(problems) == 2 and all("heaviest folders: docs/results/ 40.0 MiB" in p for p in problems)
    (repo / "docs/results/big.bin").write_bytes(b"")
    assert gb.check(tmp_path / "out", repo) == []
    (tmp_path / "out" / "call2" / "core-cp312.tar.xz").write_bytes(b"stale")
    assert any("differs from the manifest" in p for p in gb.check(tmp_path / "out", repo))


def _bundle(gb, tmp_path: Path, part_bytes: int) -> tuple[Path, Path, dict[str, bytes]]:
    """A fake payload: trimmed wheel -> tar.xz -> parts -> manifest, as `build` writes them."""
    site = tmp_path / "stage"
    gb.unpack_wheel(fake_wheel(tmp_path / "fake-1.0-py3-none-any.whl"), site)
    expected = tree(site)
    calls = tmp_path / "calls"
    calls.mkdir()
    archive = calls / "tvm.tar.xz"
    gb.make_archive(site, archive, gb.XZSettings(preset=1))
    size = archive.stat().st_size
    parts = gb.split_file(archive, calls, [min(part_bytes, size - start) for start in range(0, size, part_bytes)])
    archive.unlink()
    manifest = {"groups": {"tvm": gb.group_entry(archive, parts)}}
    (calls / "manifest.json").write_text(json.dumps(manifest))
    return calls, calls / "manifest.json", expected


def test_unpack_reassembles_checks_and_skips_done_groups(gb, tmp_path):
    calls, manifest, expected = _bundle(gb, tmp_path, 200)
    assert len(json.loads(manifest.read_text())["groups"]["tvm"]["parts"]) >= 2
    site = tmp_path / "site"
    out = gb.unpack(manifest, [calls, tmp_path / "missing-dir"], site)
    assert out == {"tvm": site / "tvm"} and tree(site / "tvm") == expected
    (site / "tvm" / "tvm" / "__init__.py").write_text("# untouched on a second run\n")
    gb.unpack(manifest, [calls], site)  # same archive already there: not extracted again
    assert (site / "tvm" / "tvm" / "__init__.py").read_text() == "# untouched on a second run\n"


def test_unpack_names_missing_and_corrupt_parts(gb, tmp_path):
    calls, manifest, _ = _bundle(gb, tmp_path, 200)
    part = sorted(calls.glob("*.part-*"))[-1]
    data = part.read_bytes()
    part.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(ValueError, match="sha256 differs"):
        gb.unpack(manifest, [calls], tmp_path / "site")
    part.unlink()
    with pytest.raises(FileNotFoundError, match=part.name):
        gb.unpack(manifest, [calls], tmp_path / "site")


def test_unpack_cli_as_gpu_run_calls_it(gb, tmp_path):
    calls, manifest, expected = _bundle(gb, tmp_path, 10_000)
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "gpu_bundle.py"), "unpack", "--manifest",
                           str(manifest), "--from", str(calls), "--site", str(tmp_path / "site")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"tvm={tmp_path / 'site' / 'tvm'}"
    assert tree(tmp_path / "site" / "tvm") == expected


def test_xz_settings_use_the_x86_filter_and_decode_with_plain_tarfile(gb, tmp_path):
    import lzma
    import tarfile

    settings = gb.XZSettings()
    assert settings.filters()[0]["id"] == lzma.FILTER_X86 and settings.key() == "p9-x86"
    assert gb.XZSettings(preset=6, x86=False).key() == "p6"
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "lib.so").write_bytes(b"\x7fELF" + bytes(range(256)) * 8)
    gb.make_archive(tmp_path / "d", tmp_path / "a.tar.xz", gb.XZSettings(preset=1))
    with tarfile.open(tmp_path / "a.tar.xz", "r:xz") as tar:  # what the device's Python reads it with
        member = tar.getmember("lib.so")
        assert member.mtime == 0 and tar.extractfile(member).read() == (tmp_path / "d" / "lib.so").read_bytes()


def test_payload_directory_is_ignored_by_git():
    """The payload is copied beside the checkout, never committed: git must ignore it."""
    proc = subprocess.run(["git", "check-ignore", "-q", ".gpu_bundle/cp312/call1/tvm.tar.xz.part-00"],
                          cwd=REPO, capture_output=True)
    assert proc.returncode == 0, "add .gpu_bundle/ to .gitignore"


def test_wheel_tags_that_fit_a_python(gb):
    assert gb._fits("numpy-2.4.6-cp312-cp312-manylinux_2_28_x86_64.whl", "cp312")
    assert not gb._fits("numpy-2.4.6-cp311-cp311-manylinux_2_28_x86_64.whl", "cp312")
    assert gb._fits("tzdata-2026.6-py2.py3-none-any.whl", "cp312")
    assert gb._fits("apache_tvm-0.27.0.post1-py3-none-manylinux_2_28_x86_64.whl", "cp312")
