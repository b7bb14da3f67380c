from __future__ import annotations

import pytest

from infra.errors import SettingsError
from infra.settings import Settings


def test_defaults() -> None:
    settings = Settings.from_env({})
    assert settings.back_frame_ms == 10
    assert settings.reply_timeout_s == 5


def test_reads_variables() -> None:
    settings = Settings.from_env(
        {"BACK_FRAME_MS": "2.5", "POOL_MAX": "8", "DATABASE_URL": "postgresql://x/y"}
    )
    assert (settings.back_frame_ms, settings.pool_max) == (2.5, 8)
    assert settings.database_url == "postgresql://x/y"


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
    ],
)
def test_bad_settings_name_the_variable(env: dict[str, str], variable: str | None) -> None:
    if variable is None:  # empty means unset: the default stands
        assert Settings.from_env(env) == Settings()
        return
    with pytest.raises(SettingsError, match=variable) as caught:
        Settings.from_env(env)
    assert caught.value.variable == variable


def test_settings_are_frozen() -> None:
    settings = Settings()
    with pytest.raises(AttributeError):
        settings.back_frame_ms = 1  # type: ignore[misc]


def test_to_env_round_trips() -> None:
    settings = Settings(back_frame_ms=3, database_url="postgresql://h/d")
    assert Settings.from_env(settings.to_env()) == settings


def test_database_url_takes_an_rds_secret_as_ecs_hands_it_over() -> None:
    secret = (
        '{"username": "app", "password": "p@ss/w:rd", "host": "db.example", "port": 5433,'
        ' "dbname": "numerator", "engine": "postgres"}'
    )
    settings = Settings.from_env({"DATABASE_URL": secret})
    assert settings.database_url == "postgresql://app:p%40ss%2Fw%3Ard@db.example:5433/numerator"
    plain = Settings.from_env({"DATABASE_URL": "postgresql://u@h/db"})
    assert plain.database_url == "postgresql://u@h/db"
    with pytest.raises(SettingsError, match="not an RDS secret"):
        Settings.from_env({"DATABASE_URL": '{"user": "x"}'})
