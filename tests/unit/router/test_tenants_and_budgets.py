"""Tenant keys (hashed at rest) and daily budget windows."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from core.config import ConfigError
from router.spend_ledger import DailySpend, next_reset
from router.tenants import TenantDirectory, add_tenant, hash_key, read_tenants_file
from tests.support import ManualClock


def test_keys_are_stored_hashed_and_resolve_to_their_tenant(tmp_path, monkeypatch):
    path = tmp_path / "tenants.yaml"
    key = add_tenant(path, "acme", daily_budget_usd=5.0)
    assert key.startswith("tk-") and key not in path.read_text()
    assert read_tenants_file(path).tenants["acme"].key_sha256 == hash_key(key)
    monkeypatch.setenv("TEST_KEYS", "beta:beta-secret, acme:rotated")
    directory = TenantDirectory.load(path, "TEST_KEYS")
    assert directory.enabled
    assert directory.tenant_for("beta-secret") == "beta"
    assert directory.tenant_for("rotated") == "acme" and directory.daily_budget_usd("acme") == 5.0
    assert directory.tenant_for(key) is None   # the environment re-keyed acme
    assert directory.tenant_for("nope") is None and directory.tenant_for(None) is None


def test_no_keys_means_an_open_app_but_a_missing_keys_file_is_an_error(tmp_path):
    assert not TenantDirectory.load(None, "UNSET_VARIABLE_FOR_TEST").enabled
    with pytest.raises(ConfigError, match="tenants.keys_file .*absent.yaml' does not exist"):
        TenantDirectory.load(tmp_path / "absent.yaml", None)


def test_rekeying_keeps_the_budget_unless_given(tmp_path):
    path = tmp_path / "tenants.yaml"
    add_tenant(path, "acme", daily_budget_usd=5.0)
    add_tenant(path, "acme", daily_budget_usd=None)
    assert read_tenants_file(path).tenants["acme"].daily_budget_usd == 5.0
    add_tenant(path, "acme", daily_budget_usd=7.0)
    assert read_tenants_file(path).tenants["acme"].daily_budget_usd == 7.0


@pytest.mark.parametrize("text, message", [
    ("tenants: {acme: {key_sha256: short}}", "tenants.acme.key_sha256"),
    ("tenants: {acme: {key_sha256: " + "a" * 64 + ", budget: 3}}", "budget"),
    ("tenants: [", "cannot read tenants"),
])
def test_a_bad_tenants_file_is_refused_by_key(tmp_path, text, message):
    path = tmp_path / "tenants.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        TenantDirectory.load(path, None)


def test_a_bad_key_variable_is_refused(monkeypatch):
    monkeypatch.setenv("TEST_KEYS", "no-colon")
    with pytest.raises(ConfigError, match="name:key"):
        TenantDirectory.load(None, "TEST_KEYS")


def test_budget_is_per_utc_day_and_names_limit_and_reset():
    clock = ManualClock(datetime.fromisoformat("2026-11-30T23:59:00+00:00"))
    spend = DailySpend(clock)
    spend.add("acme", 4.0)
    assert spend.over_budget("acme", 5.0) is None
    spend.add("acme", 1.5)
    reason = spend.over_budget("acme", 5.0)
    assert reason == ("tenant 'acme' has spent $5.500000 of its daily budget of $5; "
                      "the budget resets at 2026-12-01T00:00:00Z")
    assert spend.over_budget("acme", None) is None and spend.over_budget("other", 5.0) is None
    clock.now = datetime.fromisoformat("2026-12-01T00:00:01+00:00")
    assert spend.of("acme") == 0.0 and spend.over_budget("acme", 5.0) is None


def test_reset_is_next_midnight_utc_from_any_zone():
    local = datetime.fromisoformat("2026-11-30T20:00:00-05:00")   # 01:00 UTC on Dec 1
    assert next_reset(local) == datetime(2026, 12, 2, tzinfo=timezone.utc)


def test_a_tenants_default_adapter_is_kept_when_it_is_rekeyed_or_keyed_by_the_environment(tmp_path, monkeypatch):
    path = tmp_path / "tenants.yaml"
    add_tenant(path, "acme", 5.0, "tagged")
    add_tenant(path, "acme", None)  # a new key: budget and adapter stay
    monkeypatch.setenv("TEST_KEYS", "acme:tk-from-env")
    directory = TenantDirectory.load(path, "TEST_KEYS")
    assert directory.default_adapter("acme") == "tagged" and directory.daily_budget_usd("acme") == 5.0
    assert directory.tenant_for("tk-from-env") == "acme"
    directory.check_adapters(["tagged", "jsonish"])
    with pytest.raises(ConfigError, match=r"default_adapter 'tagged' is not in the config's adapters \['jsonish'\]"):
        directory.check_adapters(["jsonish"])
