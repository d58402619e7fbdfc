"""The vLLM plugin that lets a CPU engine load its compiled model: torch's inductor artifact gets
the `finalize_loading` vLLM 0.29 calls on every load, doing nothing, and vLLM finds the plugin."""

from __future__ import annotations

import pytest

from core.vllm_plugins import PLUGIN_GROUP
from engine import vllm_compile_cache

aot_compile_types = pytest.importorskip("torch._dynamo.aot_compile_types")
Bundled = aot_compile_types.BundledAOTAutogradSerializableCallable


@pytest.fixture
def torch_as_shipped():
    """The class as torch ships it during the test (vLLM may have loaded the plugin in this
    process already), and as it was before the test after it."""
    before = vars(Bundled).get("finalize_loading")
    if before is not None:
        delattr(Bundled, "finalize_loading")
    yield
    if "finalize_loading" in vars(Bundled):
        delattr(Bundled, "finalize_loading")
    if before is not None:
        Bundled.finalize_loading = before


class _InductorOutput:
    """What the artifact wraps: inductor's compiled function, serializable."""

    def serialize(self) -> bytes:
        return b""

    def __call__(self, x):
        return x + 1


def test_torch_as_shipped_fails_the_call_vllm_makes_on_every_load(torch_as_shipped):
    # The failure the plugin exists for: the instance looks the name up on the function it wraps.
    with pytest.raises(AttributeError, match="finalize_loading"):
        Bundled(_InductorOutput()).finalize_loading(object())


def test_after_register_the_call_does_nothing_and_the_artifact_still_runs(torch_as_shipped):
    vllm_compile_cache.register()
    artifact = Bundled(_InductorOutput())
    assert artifact.finalize_loading(object()) is None
    assert artifact(1) == 2
    vllm_compile_cache.register()  # idempotent: vLLM loads its plugins in several places of a process
    assert vars(Bundled)["finalize_loading"] is vllm_compile_cache._nothing_to_finalize


def test_a_method_torch_ships_itself_is_left_alone(torch_as_shipped):
    def shipped(self, vllm_config):
        return "torch's own"

    Bundled.finalize_loading = shipped
    vllm_compile_cache.register()
    assert vars(Bundled)["finalize_loading"] is shipped


def test_vllm_plugins_may_leave_it_out():
    assert vllm_compile_cache.registered({}), "no entry point: reinstall the package (make setup)"
    assert vllm_compile_cache.registered({"VLLM_PLUGINS": "lora_filesystem_resolver,trilemma_compile_cache"})
    assert not vllm_compile_cache.registered({"VLLM_PLUGINS": "lora_filesystem_resolver"})
    assert not vllm_compile_cache.registered({"VLLM_PLUGINS": ""})


def test_vllm_finds_the_plugin_where_it_loads_its_general_plugins():
    from vllm.plugins import DEFAULT_PLUGINS_GROUP, load_plugins_by_group

    assert DEFAULT_PLUGINS_GROUP == PLUGIN_GROUP
    plugins = load_plugins_by_group(DEFAULT_PLUGINS_GROUP)
    assert plugins[vllm_compile_cache.PLUGIN_NAME] is vllm_compile_cache.register
