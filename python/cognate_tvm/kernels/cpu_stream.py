"""Streaming (non-temporal) stores of the SpMM output (`CPUConfig.stream`).

A kernel that writes each output row once, from register accumulators, can store it around the caches:
an ordinary store first reads the line it writes (read for ownership), so on a matrix whose output does
not fit in the cache, C costs two passes of memory traffic instead of one.

TensorIR has no non-temporal store, so the kernel calls a small LLVM IR function, linked into the
kernel's module (the ``pragma_import_llvm`` attribute) and inlined by LLVM: an aligned
``store ... !nontemporal`` (``vmovntps`` on x86), or an ordinary store where the address is not aligned
to the vector (a caller's output need not be; the test costs one predictable branch per vector).

Ordering: streaming stores are weakly ordered, but the thread pool's join is a locked atomic, which
drains the write-combining buffers on x86, so the caller sees the whole output when the kernel returns.
"""
from __future__ import annotations

PRAGMA = "pragma_import_llvm"


def store_function(lanes: int) -> str:
    """The name of the store function for vectors of `lanes` float32 values."""
    return f"cognate_stream_store_f32x{int(lanes)}"


def store_function_ir(lanes: int) -> str:
    """LLVM IR text of :func:`store_function` (`lanes` float32 values at an address)."""
    lanes = int(lanes)
    size = 4 * lanes
    vector = f"<{lanes} x float>"
    return (f"define internal void @{store_function(lanes)}(ptr %p, {vector} %v) #0 {{\n"
            "entry:\n"
            "  %a = ptrtoint ptr %p to i64\n"
            f"  %m = and i64 %a, {size - 1}\n"
            "  %c = icmp eq i64 %m, 0\n"
            "  br i1 %c, label %stream, label %plain\n"
            "stream:\n"
            f"  store {vector} %v, ptr %p, align {size}, !nontemporal !0\n"
            "  ret void\n"
            "plain:\n"
            f"  store {vector} %v, ptr %p, align 4\n"
            "  ret void\n"
            "}\n"
            "attributes #0 = { alwaysinline nounwind }\n"
            "!0 = !{i32 1}\n")


def store_statement(address: str, value: str, lanes: int) -> str:
    """The TVMScript statement storing vector `value` (`lanes` float32) at `address` (a T.address_of)."""
    return f'T.evaluate(T.call_extern("void", "{store_function(lanes)}", {address}, {value}))'
