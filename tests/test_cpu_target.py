"""The host LLVM target: never the vector features that the CPU's name implies and the machine lacks."""
from tvm.target import Target, codegen

from cognate_tvm.kernels.cpu import _numpy_cpu_features, cpu_target, host_cpu, missing_features


def test_missing_features_maps_llvm_names_to_numpy_names():
    implied = {"avx2", "fma", "sse4.1", "avx512f", "avx512bf16", "gfni", "amx-tile"}
    host = {"AVX2": True, "FMA3": True, "SSE41": True, "AVX512F": False, "AVX512BF16": False, "GFNI": False}
    # amx-tile: numpy does not name it, so it stays as the CPU name implies
    assert missing_features(implied, host) == ["avx512bf16", "avx512f", "gfni"]
    assert missing_features(implied, {name: True for name in host}) == []


def test_a_masked_feature_is_off_in_the_target_and_a_named_cpu_is_kept_as_named():
    # a VM can hide AVX-512 from a CPU whose model LLVM names 'znver4'; the mattr entries turn it off
    target = Target({"kind": "llvm", "mcpu": "znver4", "mattr": ["-avx512f", "-gfni"]})
    features = codegen.llvm_get_cpu_features(target)
    assert not any(f.startswith("avx512") for f in features) and "gfni" not in features and "avx2" in features
    # an explicitly named CPU (cross-compiling) is taken as it is: no host mask
    assert "mattr" not in cpu_target(2, "skylake-avx512").attrs


def test_the_host_target_has_no_feature_this_machine_lacks():
    host = _numpy_cpu_features()
    assert host, "numpy reports no CPU features"
    target = cpu_target(2)
    assert target.attrs["mcpu"] == host_cpu()
    assert missing_features(codegen.llvm_get_cpu_features(target), host) == []
