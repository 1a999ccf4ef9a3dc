"""Check that cognate_tvm.tvm_intrinsics registers the same TVM tensor intrinsics as a plain import.

Each mode runs in a fresh process with torch and TVM loaded, imports
``tvm.s_tir.tensor_intrin`` (plainly, or through ``load_tensor_intrinsics``), and
prints the script of every registered intrinsic (desc and impl, found through the
``*_INTRIN`` names of the package's modules) and of every TVMScript function those
modules hold; the two dumps must be identical. The plain import takes minutes.

    python scripts/check_tensor_intrinsics.py
"""
from __future__ import annotations

import json
import subprocess
import sys
import time

DUMP = """
import json, sys
import torch, tvm
if sys.argv[1] == "fast":
    from cognate_tvm.tvm_intrinsics import load_tensor_intrinsics
    load_tensor_intrinsics()
else:
    import tvm.s_tir.tensor_intrin
from tvm.s_tir import TensorIntrin
out = {}
for name, module in list(sys.modules.items()):
    if name.startswith("tvm.s_tir.tensor_intrin"):
        for attr, value in vars(module).items():
            if isinstance(value, tvm.tirx.PrimFunc):
                out[f"{name}.{attr}"] = value.script()
            elif isinstance(value, str) and attr.endswith("_INTRIN"):
                intrin = TensorIntrin.get(value)
                out[f"intrin:{value}"] = intrin.desc.script() + intrin.impl.script()
print(json.dumps(out))
"""


def dump(mode: str) -> dict:
    start = time.perf_counter()
    run = subprocess.run([sys.executable, "-c", DUMP, mode], capture_output=True, text=True, check=True)
    print(f"{mode}: {time.perf_counter() - start:.0f} s", file=sys.stderr)
    return json.loads(run.stdout.splitlines()[-1])


def main() -> int:
    fast, plain = dump("fast"), dump("plain")
    differ = sorted(k for k in fast.keys() | plain.keys() if fast.get(k) != plain.get(k))
    print(f"{len(plain)} intrinsics and TVMScript functions; {len(differ)} differ" + (f": {differ}" if differ else ""))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
