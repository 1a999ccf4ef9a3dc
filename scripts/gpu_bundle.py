"""Build the payload that brings TVM and the GPU check's other missing pieces to a GPU host without network access.

Such a host may have a Python with torch (and nvcc) but no TVM, and nothing
can be fetched there: what it lacks is built here and copied beside the
checkout (docs/gpu.md, "Hosts without network access"). The apache-tvm wheel
alone is 100 MB, so the payload is trimmed, compressed with xz (x86 branch
filter + LZMA2) and, where the transfer is limited in size (``--call-mib``,
default 64 MiB with the checkout), cut into parts that may come over in
several copies; `scripts/gpu_run.sh` gathers the parts on a stage outside the
repository, checks and unpacks them.

Groups (each one .tar.xz, split into parts when needed):

- ``tvm``: the apache-tvm wheel (pure Python + prebuilt libraries, the same for
  every Python version), minus what a CUDA build and run never reads
  (`DROP_PREFIXES`). Compressing its 259 MB compiler library is the slow step,
  so the archive is cached (`DEFAULT_CACHE`, outside the work tree) by wheel
  hash, trim rules and xz settings.
- ``core``: what depends on the Python version or is small: apache-tvm-ffi,
  ml_dtypes, tqdm, pyamg, the project's C++ extension ``_formats`` compiled for
  that Python (when an interpreter of that version is found here) and the
  pybind11 headers (so the device can compile it itself otherwise).
- ``extra`` (only with ``--extra``): numpy, scipy, pandas and their pure
  dependencies; `gpu_run.sh` puts them on the path *after* the machine's own
  packages, so they are used only where the machine lacks one.

Output (``--out``, default ``.gpu_bundle/cp312``): ``manifest.json`` (files,
sizes, sha256, what was dropped) and ``call1/``, ``call2/``, ...: the files of
each transfer. The archives, laid end to end, are dealt over the
fewest calls that each fit in ``--call-mib`` beside the working tree (its
tracked and untracked-not-ignored files, measured here, or ``--tree-mib``),
as evenly as possible; more than ``--max-calls`` (default 2) fails, naming the
tree's heaviest folders. ``check`` (run in the checkout that will be copied)
says whether each transfer still fits beside that tree and prints what each
brings.

    nice -n 19 python scripts/gpu_bundle.py build --python 3.12 [--tree-mib 20]
    python scripts/gpu_bundle.py check [--bundle .gpu_bundle/cp312]
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

try:
    import lzma
except ImportError:  # a Python built without lzma can still unpack (with the xz binary), not build
    lzma = None

log = logging.getLogger("gpu_bundle")

REPO = Path(__file__).resolve().parent.parent
MIB = 1 << 20
DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "cognate-gpu-bundle"
CALL_LIMIT_MIB = 64  # what one transfer holds by default, working tree included
MARGIN_MIB = 2       # left free in each call (the tree grows, transfer overheads)

TVM_WHEELS = ("apache-tvm==0.27.0.post1",)
CORE_WHEELS = ("apache-tvm-ffi==0.1.14.post1", "ml_dtypes==0.6.0", "tqdm==4.70.1", "pyamg==5.4.1")
EXTRA_WHEELS = ("numpy==2.4.6", "scipy==1.17.1", "pandas==3.1.1", "python-dateutil==4.0.0", "tzdata==2026.6")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")

# Paths (relative to site-packages) that neither `import tvm`, nor building a
# CUDA module, nor compiling and running it reads: C++ sources and headers of
# TVM and its FFI (the generated CUDA code includes only CUDA's own headers),
# CUTLASS, the web runtime and CMake files.
DROP_PREFIXES = (
    "tvm/3rdparty/", "tvm/src/", "tvm/include/", "tvm/web/", "tvm/cmake/", "tvm/lib64/",
    "tvm_ffi/include/", "tvm_ffi/3rdparty/", "tvm_ffi/src/", "tvm_ffi/cython/", "tvm_ffi/share/",
    "tvm_ffi/CMakeLists.txt",
)
# Kept although their names suggest otherwise: tvm_ffi/lib/libtvm_ffi_testing.so (`import tvm`
# fails without it) and tvm/lib/libtvm_runtime_extra.so.
DROP_DIR_NAMES = ("__pycache__",)


@dataclasses.dataclass(frozen=True)
class XZSettings:
    """How the archives are compressed; part of the cache key."""

    preset: int = 9
    extreme: bool = False
    x86: bool = True  # branch-call-jump filter: ~10% smaller x86-64 libraries

    def filters(self) -> list[dict]:
        preset = self.preset | (lzma.PRESET_EXTREME if self.extreme else 0)
        chain = [{"id": lzma.FILTER_X86}] if self.x86 else []
        return chain + [{"id": lzma.FILTER_LZMA2, "preset": preset}]

    def key(self) -> str:
        return f"p{self.preset}{'e' if self.extreme else ''}{'-x86' if self.x86 else ''}"


# -- trimming ---------------------------------------------------------------------------
def is_dropped(relpath: str, prefixes: tuple[str, ...] = DROP_PREFIXES) -> bool:
    """True for a site-packages-relative path (posix) that the payload leaves out."""
    parts = relpath.split("/")
    if any(p in DROP_DIR_NAMES for p in parts[:-1]) or relpath.endswith(".pyc"):
        return True
    return any(relpath == p.rstrip("/") or relpath.startswith(p) for p in prefixes)


def unpack_wheel(wheel: Path, site: Path, prefixes: tuple[str, ...] = DROP_PREFIXES) -> dict:
    """Extract `wheel` into `site` without the dropped paths; returns byte counts kept/dropped."""
    kept = dropped = 0
    dropped_top: dict[str, int] = {}
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            if info.is_dir():
                continue
            name = info.filename
            if name.startswith("/") or ".." in Path(name).parts:
                raise ValueError(f"{wheel.name}: unsafe path {name!r}")
            if is_dropped(name, prefixes):
                dropped += info.file_size
                top = "/".join(name.split("/")[:2])
                dropped_top[top] = dropped_top.get(top, 0) + info.file_size
                continue
            target = site / name
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            mode = (info.external_attr >> 16) & 0o777
            os.chmod(target, mode or 0o644)
            kept += info.file_size
    return {"wheel": wheel.name, "kept_bytes": kept, "dropped_bytes": dropped,
            "dropped": dict(sorted(dropped_top.items(), key=lambda kv: -kv[1]))}


# -- archives and parts -------------------------------------------------------------------
def make_archive(root: Path, archive: Path, xz: XZSettings) -> None:
    """Deterministic tar.xz of everything under `root` (sorted names, fixed mtime and owner)."""
    def clean(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
        return info

    tmp = archive.with_name(archive.name + ".tmp")
    with lzma.open(tmp, "wb", format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64, filters=xz.filters()) as raw:
        with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for path in sorted(p for p in root.rglob("*") if p.is_file() or p.is_symlink()):
                tar.add(path, arcname=path.relative_to(root).as_posix(), recursive=False, filter=clean)
    tmp.replace(archive)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def split_file(path: Path, out_dir: Path, part_sizes: list[int]) -> list[Path]:
    """Cut `path` into parts of `part_sizes` bytes (they sum to its size): NAME.part-00, ..."""
    size = path.stat().st_size
    if sum(part_sizes) != size or min(part_sizes) < 1:
        raise ValueError(f"{path.name}: part sizes {part_sizes} do not cut its {size} bytes")
    parts = []
    with open(path, "rb") as f:
        for n, left in enumerate(part_sizes):
            part = out_dir / f"{path.name}.part-{n:02d}"
            with open(part, "wb") as dst:
                while left > 0:
                    block = f.read(min(left, 1 << 20))
                    dst.write(block)
                    left -= len(block)
            parts.append(part)
    return parts


def group_entry(archive: Path, parts: list[Path]) -> dict:
    """A group's manifest entry: the whole archive's name and sha256, and each part's."""
    digest = hashlib.sha256()
    for part in parts:
        with open(part, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return {"archive": archive.name, "bytes": sum(p.stat().st_size for p in parts), "sha256": digest.hexdigest(),
            "parts": [{"file": p.name, "bytes": p.stat().st_size, "sha256": sha256(p)} for p in parts]}


class PayloadTooLarge(RuntimeError):
    """The payload and the working tree need more transfers than allowed."""


def plan_calls(groups: list[tuple[str, int]], room: int, max_calls: int) -> list[list[tuple[str, int]]]:
    """Deal the archives `groups` ((name, bytes), in order) over the fewest calls of at most `room`
    bytes each, the calls as even as they can be: call k carries bytes [k*T, (k+1)*T) of the
    archives laid end to end (T = total / calls), so an archive is cut only at a call's edge.

    Returns, per call, its pieces as (group name, bytes); a group's pieces in order are its parts.
    Raises PayloadTooLarge when more than `max_calls` calls are needed, ValueError when `room` <= 0.
    """
    if room <= 0:
        raise PayloadTooLarge(f"the working tree leaves no room for the payload in a call (room {room} bytes)")
    total = sum(size for _, size in groups)
    count = max(1, -(-total // room))
    if count > max_calls:
        raise PayloadTooLarge(f"the payload ({total / MIB:.1f} MiB) needs {count} calls of {room / MIB:.1f} MiB "
                              f"room each, more than --max-calls {max_calls}")
    target = -(-total // count)
    calls: list[list[tuple[str, int]]] = [[] for _ in range(count)]
    offset = 0
    for name, size in groups:
        left = size
        while left > 0:
            call = min(offset // target, count - 1)
            piece = min(left, (call + 1) * target - offset) if call < count - 1 else left
            calls[call].append((name, piece))
            offset += piece
            left -= piece
    return calls


def heaviest_folders(repo: Path = REPO, *, depth: int = 2, top: int = 6) -> list[tuple[str, int]]:
    """The folders (up to `depth` levels) of the copied working tree that weigh most."""
    weights: dict[str, int] = {}
    for name, size in tree_files(repo):
        parts = name.split("/")[:-1]
        for level in range(1, min(depth, len(parts)) + 1):
            folder = "/".join(parts[:level])
            weights[folder] = weights.get(folder, 0) + size
    ranked = sorted(weights.items(), key=lambda kv: (-kv[1], kv[0]))
    # a folder whose weight is nearly all in one subfolder says less than that subfolder
    return [(f, w) for f, w in ranked if not any(o.startswith(f + "/") and ow >= 0.9 * w for o, ow in ranked)][:top]


def describe_tree(repo: Path = REPO) -> str:
    return ", ".join(f"{folder}/ {size / MIB:.1f} MiB" for folder, size in heaviest_folders(repo))


def tree_files(repo: Path = REPO) -> list[tuple[str, int]]:
    """(path, bytes) of the working tree that is copied: tracked and untracked-not-ignored files,
    plus a `shared/` folder inside the checkout (it travels even when ignored)."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=repo,
                         capture_output=True, check=True).stdout
    names = {name for name in out.decode().split("\0") if name}
    shared = repo / "shared"
    if shared.is_dir():
        names |= {p.relative_to(repo).as_posix() for p in shared.rglob("*") if p.is_file()}
    return [(name, (repo / name).stat().st_size) for name in sorted(names)
            if (repo / name).is_file() and not (repo / name).is_symlink()]


def tree_bytes(repo: Path = REPO) -> int:
    """Bytes of the working tree that is copied (`tree_files`)."""
    return sum(size for _, size in tree_files(repo))


# -- wheels ---------------------------------------------------------------------------------
def download(requirements: tuple[str, ...], dest: Path, python: str) -> list[Path]:
    """cp<XY> manylinux wheels of `requirements` (no dependencies) into `dest`; their paths."""
    dest.mkdir(parents=True, exist_ok=True)
    tag = "cp" + python.replace(".", "")
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
           "--python-version", python, "--implementation", "cp", "--abi", tag, "--abi", "abi3",
           "--abi", "none", "-d", str(dest)]
    for platform in PLATFORMS:
        cmd += ["--platform", platform]
    subprocess.run(cmd + ["--platform", "any", *requirements], check=True)
    wheels = []
    for req in requirements:
        name, version = req.split("==")
        stem = re.sub(r"[-_.]+", "_", name).lower()
        found = [w for w in dest.glob("*.whl") if re.sub(r"[-_.]+", "_", w.name.split("-")[0]).lower() == stem
                 and w.name.split("-")[1] == version and _fits(w.name, tag)]
        if not found:
            raise FileNotFoundError(f"no wheel of {req} for {tag} in {dest}")
        wheels.append(sorted(found)[0])
    return wheels


def _fits(wheel_name: str, tag: str) -> bool:
    python_tag, abi_tag = wheel_name[:-4].split("-")[-3:-1]
    return any(t == tag or t.startswith("py3") for t in python_tag.split(".")) or abi_tag == "abi3"


# -- the project's C++ extension ----------------------------------------------------------------
def find_python(version: str) -> Path | None:
    """An interpreter of `version` (e.g. "3.12") on PATH or under pyenv, or None."""
    candidates = [shutil.which(f"python{version}")]
    candidates += sorted(str(p) for p in Path.home().glob(f".pyenv/versions/{version}.*/bin/python{version}"))
    for exe in candidates:
        if not exe:
            continue
        try:
            out = subprocess.run([exe, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                 capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out.returncode == 0 and out.stdout.strip() == version:
            return Path(exe)
    return None


def build_formats(python_exe: Path, out_dir: Path, repo: Path = REPO) -> Path:
    """Compile src/formats into cognate_tvm's `_formats` extension for `python_exe`."""
    import pybind11

    info = subprocess.run([str(python_exe), "-c", "import sysconfig; print(sysconfig.get_paths()['include']); "
                           "print(sysconfig.get_config_var('EXT_SUFFIX'))"],
                          capture_output=True, text=True, check=True).stdout.split()
    include, suffix = info[0], info[1]
    out = out_dir / f"_formats{suffix}"
    sources = sorted(str(p) for p in (repo / "src" / "formats").glob("*.cc"))
    # libstdc++ stays dynamic: linked statically it pulls in arc4random (glibc 2.36), while this
    # needs glibc 2.34 and GLIBCXX 3.4.29 (Ubuntu 22.04 and later); gpu_run.sh compiles it on the
    # device when the import fails there.
    cmd = [os.environ.get("CXX", "g++"), "-O3", "-shared", "-fPIC", "-std=c++17", "-fvisibility=hidden",
           f"-I{include}", f"-I{pybind11.get_include()}",
           f"-I{repo / 'src' / 'formats'}", *sources, "-o", str(out)]
    subprocess.run(cmd, check=True)
    return out


def glibc_needed(library: Path, prefix: str = "GLIBC") -> str | None:
    """The newest `prefix`_x.y symbol version (GLIBC, GLIBCXX) `library` needs (objdump), or None."""
    try:
        text = subprocess.run(["objdump", "-T", str(library)], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    versions = {tuple(int(x) for x in v.split(".")) for v in re.findall(rf"\b{prefix}_(\d+\.\d+(?:\.\d+)*)", text)}
    return ".".join(map(str, max(versions))) if versions else None


# -- the whole build --------------------------------------------------------------------------------
def build_group(name: str, wheels: list[Path], work: Path, archive: Path, xz: XZSettings,
                extra_files: dict[str, Path] | None = None) -> dict:
    """Unpack + trim `wheels` (plus `extra_files`: arcname -> path) and compress to `archive`."""
    site = work / name
    shutil.rmtree(site, ignore_errors=True)
    site.mkdir(parents=True)
    stats = [unpack_wheel(w, site) for w in wheels]
    for arcname, path in (extra_files or {}).items():
        target = site / arcname
        target.parent.mkdir(parents=True, exist_ok=True)
        if path.is_dir():
            shutil.copytree(path, target)
        else:
            shutil.copy2(path, target)
    unpacked = sum(p.stat().st_size for p in site.rglob("*") if p.is_file())
    log.info("%s: %d wheels, %.1f MB unpacked after trimming; compressing (%s)", name, len(wheels),
             unpacked / 1e6, xz.key())
    make_archive(site, archive, xz)
    shutil.rmtree(site)
    return {"wheels": stats, "unpacked_bytes": unpacked}


def build(args) -> dict:
    python = args.python
    tag = "cp" + python.replace(".", "")
    out = args.out or REPO / ".gpu_bundle" / tag
    cache = args.cache
    xz = XZSettings(preset=args.xz_preset, extreme=args.extreme, x86=not args.no_x86)
    wheel_dir = cache / "wheels" / tag
    work = Path(tempfile.mkdtemp(prefix="gpu_bundle_", dir=args.tmp))
    archives: dict[str, Path] = {}
    report: dict = {"python": python, "tag": tag, "xz": xz.key(), "groups": {}}
    try:
        # tvm: one wheel for every Python; cached, since compressing it takes minutes
        tvm_wheels = download(TVM_WHEELS, wheel_dir, python)
        tvm_rules = [p for p in DROP_PREFIXES if p.startswith("tvm/")]  # the rules this wheel can match
        trim_key = hashlib.sha256(json.dumps([tvm_rules, DROP_DIR_NAMES]).encode()).hexdigest()[:10]
        key = f"{sha256(tvm_wheels[0])[:16]}-{trim_key}-{xz.key()}"
        cached = cache / "archives" / f"tvm-{key}.tar.xz"
        cached_stats = cached.with_suffix(".json")
        if cached.is_file() and cached_stats.is_file():
            log.info("tvm: cached archive %s", cached)
            stats = json.loads(cached_stats.read_text())
        else:
            cached.parent.mkdir(parents=True, exist_ok=True)
            stats = build_group("tvm", tvm_wheels, work, cached, xz)
            cached_stats.write_text(json.dumps(stats, indent=1))
        archives["tvm"] = cached
        report["groups"]["tvm"] = stats

        # core: version-specific wheels, the _formats extension, pybind11 headers
        core_wheels = download(CORE_WHEELS, wheel_dir, python)
        import pybind11

        extra_files = {"_cognate/pybind11/include": Path(pybind11.get_include())}
        exe = Path(args.python_exe) if args.python_exe else find_python(python)
        if exe is None:
            log.warning("no Python %s interpreter here: _formats is left for gpu_run.sh to compile on "
                        "the device (needs g++ and Python headers there)", python)
            report["formats_extension"] = None
        else:
            ext = build_formats(exe, work)
            extra_files[f"_cognate/{ext.name}"] = ext
            report["formats_extension"] = {"file": ext.name, "built_with": str(exe),
                                           "glibc_needed": glibc_needed(ext),
                                           "glibcxx_needed": glibc_needed(ext, "GLIBCXX")}
            log.info("built %s with %s (needs glibc %s, GLIBCXX %s)", ext.name, exe,
                     report["formats_extension"]["glibc_needed"], report["formats_extension"]["glibcxx_needed"])
        archives["core"] = work / f"core-{tag}.tar.xz"
        report["groups"]["core"] = build_group("core", core_wheels, work, archives["core"], xz, extra_files)

        if args.extra:
            extra_wheels = download(EXTRA_WHEELS, wheel_dir, python)
            archives["extra"] = work / f"extra-{tag}.tar.xz"
            report["groups"]["extra"] = build_group("extra", extra_wheels, work, archives["extra"], xz)

        # parts and calls
        tree = tree_bytes() if args.tree_mib is None else int(args.tree_mib * MIB)
        report["tree_source"] = "this checkout" if args.tree_mib is None else "--tree-mib"
        lay_out(out, archives, tag, tree, report, call_mib=args.call_mib, max_calls=args.max_calls)
        return report
    finally:
        shutil.rmtree(work, ignore_errors=True)


def call_room(tree: int, call_mib: int = CALL_LIMIT_MIB) -> int:
    """Bytes of payload one call can carry beside a working tree of `tree` bytes."""
    return call_mib * MIB - tree - MARGIN_MIB * MIB


def lay_out(out: Path, archives: dict[str, Path], tag: str, tree: int, report: dict, *,
            call_mib: int = CALL_LIMIT_MIB, max_calls: int = 2, repo: Path | None = None) -> None:
    """Cut the `archives` into parts and write them to `out`/callN/ with the manifest (`report`,
    updated in place); PayloadTooLarge, naming the tree's heaviest folders, when they need more
    than `max_calls` calls beside a working tree of `tree` bytes."""
    order = [name for name in ("tvm", "extra", "core") if name in archives]  # core last: it is small
    names = {name: f"{name}-{tag}.tar.xz" if name != "tvm" else "tvm.tar.xz" for name in order}
    room = call_room(tree, call_mib)
    try:
        calls = plan_calls([(name, archives[name].stat().st_size) for name in order], room, max_calls)
    except PayloadTooLarge as err:
        raise PayloadTooLarge(f"{err}; the working tree is {tree / MIB:.1f} MiB of the {call_mib} MiB a call "
                              f"carries. Heaviest folders of the tree: {describe_tree(repo or REPO)}. Make the tree "
                              f"smaller (ignore or move what a GPU run does not read) and build again") from None
    shutil.rmtree(out, ignore_errors=True)
    staging = out / "all"
    staging.mkdir(parents=True)
    files: dict[str, list[Path]] = {}
    for name in order:
        whole = staging / names[name]
        shutil.copy2(archives[name], whole)
        sizes = [size for call in calls for group, size in call if group == name]
        files[name] = split_file(whole, staging, sizes) if len(sizes) > 1 else [whole]
        if len(sizes) > 1:
            whole.unlink()
        report["groups"][name].update(group_entry(whole, files[name]))
    listing = []
    for n, call in enumerate(calls, 1):
        call_dir = out / f"call{n}"
        call_dir.mkdir()
        listing.append([])
        for group, _ in call:
            part = files[group].pop(0)
            part.rename(call_dir / part.name)
            listing[-1].append(f"call{n}/{part.name}")
    staging.rmdir()
    report.update({"tree_bytes": tree, "call_budget_bytes": room, "calls": listing,
                   "call_bytes": [sum(size for _, size in call) for call in calls],
                   "total_bytes": sum(archives[name].stat().st_size for name in order)})
    manifest = json.dumps(report, indent=1)
    for n in range(1, len(calls) + 1):  # every call carries the manifest
        (out / f"call{n}" / "manifest.json").write_text(manifest)
    (out / "manifest.json").write_text(manifest)


def check(bundle: Path, repo: Path = REPO, call_mib: int = CALL_LIMIT_MIB) -> list[str]:
    """Problems of a built payload for the working tree of `repo` ([] when every call fits and every
    part is there with its sha256); the caller prints them."""
    manifest = json.loads((bundle / "manifest.json").read_text())
    tree = tree_bytes(repo)
    problems = []
    for n, listed in enumerate(manifest["calls"], 1):
        call_dir = bundle / f"call{n}"
        size = sum(p.stat().st_size for p in call_dir.iterdir() if p.is_file()) if call_dir.is_dir() else 0
        if tree + size > call_mib * MIB:
            problems.append(f"call {n}: tree {tree / MIB:.1f} MiB + payload {size / MIB:.1f} MiB > {call_mib} MiB; "
                            f"heaviest folders: {describe_tree(repo)}")
        for rel in listed:
            if not (bundle / rel).is_file():
                problems.append(f"call {n}: {rel} is missing")
    for name, group in manifest["groups"].items():
        for part in group["parts"]:
            path = next(iter(bundle.glob(f"call*/{part['file']}")), None)
            if path is not None and sha256(path) != part["sha256"]:
                problems.append(f"{name}: {path} differs from the manifest")
    return problems


# -- on the device: verify and unpack ----------------------------------------------------------------
def unpack(manifest_path: Path, sources: list[Path], site: Path) -> dict[str, Path]:
    """Reassemble each group of `manifest_path` from parts found in `sources`, check sha256, extract.

    Group `g` goes to `site`/`g`; a group already extracted from the same archive
    (stamp file) is skipped. Returns {group: directory}. Raises FileNotFoundError
    naming the missing parts (e.g. a call whose files never arrived).
    """
    report = json.loads(manifest_path.read_text())
    found = {p.name: p for src in sources if src.is_dir() for p in src.iterdir() if p.is_file()}
    out: dict[str, Path] = {}
    for name, group in report["groups"].items():
        target = site / name
        stamp = site / f".{name}.sha256"
        out[name] = target
        if stamp.is_file() and stamp.read_text().strip() == group["sha256"] and target.is_dir():
            log.info("%s: already unpacked", name)
            continue
        missing = [p["file"] for p in group["parts"] if p["file"] not in found]
        if missing:
            raise FileNotFoundError(f"group {name}: missing {missing} (looked in {[str(s) for s in sources]}); "
                                    f"carry every call{{N}} directory of the manifest first")
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        digest = hashlib.sha256()
        with tempfile.TemporaryFile() as whole:
            for part in group["parts"]:
                path = found[part["file"]]
                if sha256(path) != part["sha256"]:
                    raise ValueError(f"{path}: sha256 differs from the manifest (a stale or truncated part)")
                with open(path, "rb") as f:
                    for block in iter(lambda: f.read(1 << 20), b""):
                        digest.update(block)
                        whole.write(block)
            if digest.hexdigest() != group["sha256"]:
                raise ValueError(f"group {name}: reassembled archive's sha256 differs from the manifest")
            whole.seek(0)
            _extract(whole, target)
        stamp.write_text(group["sha256"])
        log.info("%s: unpacked %s into %s", name, group["archive"], target)
    return out


def _extract(fileobj, target: Path) -> None:
    if lzma is None:
        subprocess.run(f"xz -dc | tar -x -C '{target}'", shell=True, stdin=fileobj, check=True)
        return
    with tarfile.open(fileobj=fileobj, mode="r:xz") as tar:
        tar.extractall(target, filter="data")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the payload here")
    b.add_argument("--python", default="3.12", help="Python version of the GPU host (default 3.12)")
    b.add_argument("--python-exe", help="an interpreter of that version, to compile _formats with")
    b.add_argument("--out", type=Path, help="output directory (default .gpu_bundle/cpXY)")
    b.add_argument("--cache", type=Path, default=DEFAULT_CACHE,
                   help=f"downloaded wheels and the compressed tvm archive (default {DEFAULT_CACHE}: outside "
                        "the work tree, so it survives a fresh checkout)")
    b.add_argument("--tmp", type=Path, default=None, help="scratch directory (needs ~400 MB)")
    b.add_argument("--call-mib", type=int, default=CALL_LIMIT_MIB, help="what one transfer may hold, checkout included (MiB)")
    b.add_argument("--max-calls", type=int, default=2,
                   help="fail, naming the tree's heaviest folders, when the payload needs more calls (default 2)")
    b.add_argument("--tree-mib", type=float, default=None,
                   help="plan for a working tree of this size instead of this checkout's (the checkout "
                        "that is copied may differ; `check` there confirms the fit)")
    b.add_argument("--xz-preset", type=int, default=9, choices=range(10))
    b.add_argument("--extreme", action="store_true", help="xz --extreme (slower, ~1%% smaller)")
    b.add_argument("--no-x86", action="store_true", help="without the x86 branch filter")
    b.add_argument("--extra", action="store_true", help="also bring numpy, scipy, pandas (extra group)")
    u = sub.add_parser("unpack", help="on the GPU host: check and extract the parts")
    u.add_argument("--manifest", type=Path, required=True)
    u.add_argument("--from", dest="sources", type=Path, nargs="+", required=True,
                   help="directories holding the parts (call dirs, staging dir)")
    u.add_argument("--site", type=Path, required=True, help="where each group is extracted")
    c = sub.add_parser("check", help="before copying: does the built payload fit beside this tree?")
    c.add_argument("--bundle", type=Path, default=REPO / ".gpu_bundle" / "cp312")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if args.command == "check":
        problems = check(args.bundle)
        manifest = json.loads((args.bundle / "manifest.json").read_text())
        print(f"working tree {tree_bytes() / MIB:.1f} MiB; heaviest folders: {describe_tree()}")
        for n, files in enumerate(manifest["calls"], 1):
            rel = (args.bundle / f"call{n}").resolve()
            where = rel.relative_to(REPO) if rel.is_relative_to(REPO) else rel
            print(f"  call {n}: carry {where}  ({manifest['call_bytes'][n - 1] / MIB:.1f} MiB)")
        for problem in problems:
            print(f"PROBLEM: {problem}", file=sys.stderr)
        return 1 if problems else 0
    if args.command == "unpack":
        for name, path in unpack(args.manifest, args.sources, args.site).items():
            print(f"{name}={path}")
        return 0
    try:
        report = build(args)
    except PayloadTooLarge as err:
        print(f"gpu_bundle: {err}", file=sys.stderr)
        return 3
    calls = report["calls"]
    out = args.out or REPO / ".gpu_bundle" / report["tag"]
    where = out.resolve().relative_to(REPO) if out.resolve().is_relative_to(REPO) else out
    print(f"payload for Python {report['python']}: {report['total_bytes'] / MIB:.1f} MiB in {len(calls)} "
          f"call(s); working tree {report['tree_bytes'] / MIB:.1f} MiB; per-call budget "
          f"{report['call_budget_bytes'] / MIB:.1f} MiB")
    for n, files in enumerate(calls, 1):
        print(f"  call {n}: carry {where}/call{n}  ({', '.join(Path(f).name for f in files)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
