"""A CPU engine's dtype: bf16 where the CPU multiplies bf16 natively, fp32 on other x86 CPUs,
the config's own choice kept, vLLM's default where there are no x86 flags to read."""

from __future__ import annotations

import pytest

from deployments.cpu_dtype import choose_cpu_dtype, read_cpu_flags, with_cpu_dtype

AVX2_EPYC = frozenset("fpu sse2 avx avx2 fma f16c bmi2 sha_ni vaes".split())
ICE_LAKE = AVX2_EPYC | {"avx512f", "avx512bw", "avx512vl", "avx512_vnni"}       # AVX-512, no bf16
ZEN4 = ICE_LAKE | {"avx512_bf16"}
SAPPHIRE_RAPIDS = ZEN4 | {"amx_tile", "amx_bf16", "amx_int8"}


@pytest.mark.parametrize("flags, dtype, named", [
    (AVX2_EPYC, "float32", "none of avx512_bf16, amx_bf16"),
    (ICE_LAKE, "float32", "none of avx512_bf16, amx_bf16"),
    (ZEN4, "bfloat16", "(avx512_bf16)"),
    (SAPPHIRE_RAPIDS, "bfloat16", "(avx512_bf16, amx_bf16)"),
    (None, None, "vLLM's default"),
])
def test_the_dtype_follows_native_bf16_arithmetic(flags, dtype, named):
    choice = choose_cpu_dtype(flags)
    assert choice.dtype == dtype and named in choice.reason


def test_a_dtype_the_config_names_is_kept():
    kwargs, choice = with_cpu_dtype({"dtype": "bfloat16", "max_num_seqs": 8}, AVX2_EPYC)
    assert kwargs == {"dtype": "bfloat16", "max_num_seqs": 8}
    assert (choice.dtype, choice.reason) == ("bfloat16", "set in the pool's engine_kwargs")


def test_the_chosen_dtype_is_added_without_touching_the_rest():
    given = {"max_num_seqs": 8}
    kwargs, choice = with_cpu_dtype(given, AVX2_EPYC)
    assert kwargs == {"max_num_seqs": 8, "dtype": "float32"} and given == {"max_num_seqs": 8}
    assert with_cpu_dtype(given, None)[0] == given


def test_flags_are_read_from_cpuinfo(tmp_path):
    x86 = tmp_path / "x86"
    x86.write_text("processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx avx2 fma\n\nprocessor\t: 1\n")
    assert read_cpu_flags(x86) == {"fpu", "avx", "avx2", "fma"}
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd bf16\n")
    assert read_cpu_flags(arm) is None
    assert read_cpu_flags(tmp_path / "missing") is None
