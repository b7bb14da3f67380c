from __future__ import annotations

import pytest

from infra.errors import SettingsError
from infra.settings import VARIABLES, Auth, Mode, Policy, Settings, with_host


def test_defaults() -> None:
    settings = Settings.from_env({})
    assert settings.frames.back_frame_ms == 10
    assert settings.edge.reply_timeout_s == 5


def test_reads_variables() -> None:
    settings = Settings.from_env(
        {"BACK_FRAME_MS": "2.5", "POOL_MAX": "8", "DATABASE_URL": "postgresql://x/y"}
    )
    assert (settings.frames.back_frame_ms, settings.database.pool_max) == (2.5, 8)
    assert settings.database.database_url == "postgresql://x/y"


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"BACK_FRAME_MS": "soon"}, "BACK_FRAME_MS"),
        ({"BACK_FRAME_MS": "0"}, "BACK_FRAME_MS"),
        ({"BACK_FRAME_MS": "20000"}, "BACK_FRAME_MS"),
        ({"POOL_MAX": "2.5"}, "POOL_MAX"),
        ({"REPLY_TIMEOUT_S": "-1"}, "REPLY_TIMEOUT_S"),
        ({"DATABASE_URL": "mysql://x"}, "DATABASE_URL"),
        ({"MODE": "kinesis"}, "MODE"),
        ({"STREAM_NAME": "has space"}, "STREAM_NAME"),
        ({"REPLY_TABLE": ""}, None),
        ({"SHARDS": "0"}, "SHARDS"),
        ({"PARTITION_SPREAD": "-2"}, "PARTITION_SPREAD"),
        ({"READ_INTERVAL_MS": "fast"}, "READ_INTERVAL_MS"),
        ({"REPLY_LAG_MS": "-5"}, "REPLY_LAG_MS"),
    ],
)
def test_bad_settings_name_the_variable(env: dict[str, str], variable: str | None) -> None:
    if variable is None:  # empty means unset: the default stands
        assert Settings.from_env(env) == Settings.of()
        return
    with pytest.raises(SettingsError, match=variable) as caught:
        Settings.from_env(env)
    assert caught.value.variable == variable


def test_settings_are_frozen() -> None:
    settings = Settings.of()
    with pytest.raises(AttributeError):
        settings.frames.back_frame_ms = 1  # type: ignore[misc]


def test_to_env_round_trips() -> None:
    settings = Settings.of(back_frame_ms=3, database_url="postgresql://h/d")
    assert Settings.from_env(settings.to_env()) == settings


def test_database_url_takes_an_rds_secret_as_ecs_hands_it_over() -> None:
    secret = (
        '{"username": "app", "password": "p@ss/w:rd", "host": "db.example", "port": 5433,'
        ' "dbname": "numerator", "engine": "postgres"}'
    )
    settings = Settings.from_env({"DATABASE_URL": secret})
    assert (
        settings.database.database_url
        == "postgresql://app:p%40ss%2Fw%3Ard@db.example:5433/numerator"
    )
    plain = Settings.from_env({"DATABASE_URL": "postgresql://u@h/db"})
    assert plain.database.database_url == "postgresql://u@h/db"
    with pytest.raises(SettingsError, match="not an RDS secret"):
        Settings.from_env({"DATABASE_URL": '{"user": "x"}'})


def test_each_setting_belongs_to_one_group_and_round_trips_by_its_variable() -> None:
    seen = set(VARIABLES)
    assert (
        "MODE" in seen and "WORKERS" in seen and len(seen) == 53
    )  # 49, the two of `tracing`, `TIERS` and `HUB`
    for variable, (group, name, _) in VARIABLES.items():
        value = getattr(getattr(Settings.of(), group), name) if group else Settings.of().mode
        assert Settings.from_env({variable: str(value)}) == Settings.of(), variable


def test_closed_sets_are_enums_and_a_typo_is_refused() -> None:
    settings = Settings.of(mode="aws", frame_policy="fixed", auth="none")
    assert settings.mode is Mode.AWS
    assert settings.frames.frame_policy is Policy.FIXED
    assert settings.edge.auth is Auth.NONE
    with pytest.raises(SettingsError, match="FRAME_POLICY: must be one of fixed, auto"):
        Settings.of(frame_policy="fxed")
    with pytest.raises(TypeError, match="no setting named 'back_frame'"):
        Settings.of(back_frame=5)


def test_but_changes_only_what_it_names_and_checks_the_result() -> None:
    base = Settings.of(back_frame_ms=3)
    changed = base.but(reply_timeout_s=1.5)
    assert (changed.frames.back_frame_ms, changed.edge.reply_timeout_s) == (3, 1.5)
    assert base.edge.reply_timeout_s == 5
    with pytest.raises(SettingsError, match="KEYS_REFRESH_S: must be at most 5"):
        base.but(keys_refresh_s=6)


def test_dev_only_knobs_are_apart_from_what_a_deployment_sets() -> None:
    local = {name for group, name, _ in VARIABLES.values() if group == "local"}
    assert local == {"workers", "lambda_containers", "tiers", "hub"}


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("garbage", "must be auto, off or an IPv4 address"),
        ("::1", "must be auto, off or an IPv4 address"),
        ("0.0.0.0", "must name one address of this host"),  # records would name it as it is
        ("224.0.0.1", "must name one address of this host"),
        ("198.51.100.77", "is not an address of this host"),  # TEST-NET-2: nobody's
    ],
)
def test_reply_push_must_be_one_address_of_this_host(value: str, says: str) -> None:
    """REPLY_PUSH is refused at start, naming the variable, when no inbox could be opened on it
    (each worker would otherwise fail to bind it, over and over)."""
    with pytest.raises(SettingsError, match=f"REPLY_PUSH: .*{says}"):
        Settings.from_env({"REPLY_PUSH": value})
    for good in ("auto", "off", "127.0.0.1"):
        assert Settings.from_env({"REPLY_PUSH": good}).edge.reply_push == good


def test_database_pooler_says_its_choices() -> None:
    assert not Settings.of().database.pooled
    assert Settings.from_env({"DATABASE_POOLER": "transaction"}).database.pooled
    with pytest.raises(SettingsError, match="DATABASE_POOLER: must be one of none, transaction"):
        Settings.from_env({"DATABASE_POOLER": "session"})


def test_database_host_replaces_the_host_the_url_or_the_secret_names() -> None:
    secret = '{"username": "u", "password": "p", "host": "db.internal", "port": 5432}'
    moved = Settings.from_env({"DATABASE_URL": secret, "DATABASE_HOST": "proxy.internal"})
    assert moved.database.database_url == "postgresql://u:p@proxy.internal:5432/postgres"
    assert Settings.from_env(moved.to_env()) == moved  # to a child, once
    assert with_host("postgresql://u@/db?host=%2Ftmp%2Fs&port=5433", "h") == (
        "postgresql://u@h/db?port=5433"
    )
    assert with_host("postgresql://u@db:6432/n", "") == "postgresql://u@db:6432/n"
