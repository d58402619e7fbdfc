"""A CPU engine on its node. Its dtype: fp32 on every x86 CPU (bf16 changes greedy answers,
native or not), the config's own choice kept, vLLM's default where there are no x86 flags to
read. Its nice value: raised when asked, never lowered, left alone when unset."""

from __future__ import annotations

import logging

import pytest

from core.config import DEFAULT_CONFIG_PATH, ConfigError, TrilemmaConfig
from engine.cpu_engine import apply_cpu_niceness, choose_cpu_dtype, read_cpu_flags, with_cpu_dtype

AVX2_EPYC = frozenset("fpu sse2 avx avx2 fma f16c bmi2 sha_ni vaes".split())
ICE_LAKE = AVX2_EPYC | {"avx512f", "avx512bw", "avx512vl", "avx512_vnni"}       # AVX-512, no bf16
ZEN4 = ICE_LAKE | {"avx512_bf16"}
SAPPHIRE_RAPIDS = ZEN4 | {"amx_tile", "amx_bf16", "amx_int8"}


@pytest.mark.parametrize("flags, dtype, named", [
    (AVX2_EPYC, "float32", "none of avx512_bf16, amx_bf16"),
    (ICE_LAKE, "float32", "none of avx512_bf16, amx_bf16"),
    (ZEN4, "float32", "natively (avx512_bf16), but bf16's rounding changes greedy answers"),
    (SAPPHIRE_RAPIDS, "float32", "(avx512_bf16, amx_bf16), but"),
    (None, None, "vLLM's default"),
])
def test_every_x86_cpu_runs_float32_and_says_why(flags, dtype, named):
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


class FakeNice:
    def __init__(self, value: int) -> None:
        self.value, self.calls = value, []

    def __call__(self, increment: int) -> int:
        self.calls.append(increment)
        self.value += increment
        return self.value


@pytest.mark.parametrize("start, target, runs_at, increments", [
    (15, 19, 19, [0, 4]),      # Ray's workers start at 15: raised by the difference
    (15, None, 15, [0]),       # unset: as Ray started it
    (19, 19, 19, [0]),         # already there
])
def test_the_nice_value_is_raised_to_the_target(start, target, runs_at, increments):
    nice = FakeNice(start)
    assert apply_cpu_niceness(target, nice=nice) == runs_at
    assert nice.calls == increments


def test_a_target_below_the_current_value_is_left_with_a_warning(caplog):
    nice = FakeNice(15)
    with caplog.at_level(logging.WARNING):
        assert apply_cpu_niceness(5, nice=nice) == 15
    assert nice.calls == [0]
    assert "cpu_niceness 5 is below the replica's nice value 15" in caplog.text


def test_the_default_cpu_config_lets_the_long_pool_yield_to_chat():
    config = TrilemmaConfig.from_yaml(DEFAULT_CONFIG_PATH)
    assert config.pools["long"].cpu_niceness == 19 and config.pools["short"].cpu_niceness is None


def test_a_nice_value_outside_0_to_19_is_refused():
    raw = TrilemmaConfig.from_yaml(DEFAULT_CONFIG_PATH).model_dump()
    raw["pools"]["long"]["cpu_niceness"] = 20
    with pytest.raises(ConfigError, match="cpu_niceness"):
        TrilemmaConfig.from_dict(raw)
