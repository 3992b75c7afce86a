from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
import yaml

from sparkpoint.config import Settings, load_settings
from sparkpoint.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def test_precedence_flag_over_env_over_file_over_default(tmp_path):
    config = tmp_path / "sp.yaml"
    config.write_text("home: /from/file\ntransfer_workers: 3\nsavepoint_attempts: 7\n")
    env = {"SPARKPOINT_HOME": "/from/env", "SPARKPOINT_TRANSFER_WORKERS": "6"}
    settings = load_settings(str(config), {"home": "/from/flag"}, env)
    assert (settings.home, settings.transfer_workers, settings.savepoint_attempts) == ("/from/flag", 6, 7)
    assert load_settings(str(config), {}, env).home == "/from/env"
    assert load_settings(str(config), {}, {}).home == "/from/file"
    assert load_settings(None, {}, {}).savepoint_attempts == Settings().savepoint_attempts


def test_config_file_from_environment(tmp_path):
    config = tmp_path / "sp.yaml"
    config.write_text("home: /srv/sparkpoint\nsavepoints: s3://bucket/savepoints\n")
    settings = load_settings(None, {}, {"SPARKPOINT_CONFIG": str(config)})
    assert settings.savepoints_dir() == "s3://bucket/savepoints"
    assert Settings(home="/srv/sp").savepoints_dir() == "/srv/sp/savepoints"


def test_a_home_on_object_storage_is_refused_with_the_way_out():
    with pytest.raises(ConfigError, match="the 'savepoints' setting"):
        Settings(home="s3://bucket/sparkpoint").home_url()


@pytest.mark.parametrize(
    "text,message",
    [("home: [unclosed", "not valid YAML at line 1"), ("- a\n- b\n", "must hold a mapping"),
     ("homme: /x\n", "unknown key"), ("transfer_workers: many\n", "whole number"),
     ("transfer_workers: 0\n", "at least 1"), ("storage_options: 3\n", "mapping"),
     # int() would take these as 2 and 1: a typo must not pass as another number.
     ("transfer_workers: 2.5\n", "whole number"), ("savepoint_attempts: true\n", "whole number")],
)
def test_malformed_config_is_one_clear_error(tmp_path, text, message):
    config = tmp_path / "sp.yaml"
    config.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_settings(str(config), {}, {})


def test_missing_config_file_and_bad_env_value(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(str(tmp_path / "none.yaml"), {}, {})
    with pytest.raises(ConfigError, match="SPARKPOINT_TRANSFER_WORKERS"):
        load_settings(None, {}, {"SPARKPOINT_TRANSFER_WORKERS": "x"})


def test_a_relative_home_is_taken_from_where_the_command_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    settings = load_settings(None, {"home": "home-b"}, {})
    assert settings.home_url() == str(tmp_path / "home-b")
    assert settings.savepoints_dir() == str(tmp_path / "home-b" / "savepoints")


def test_a_whole_number_written_as_a_float_is_that_number(tmp_path):
    config = tmp_path / "sp.yaml"
    config.write_text("transfer_workers: 8.0\n")
    assert load_settings(str(config), {}, {}).transfer_workers == 8


def test_documented_defaults_match_the_code():
    documented = yaml.safe_load((REPO / "conf" / "sparkpoint.yaml").read_text())
    assert documented == {f.name: getattr(Settings(), f.name) for f in dataclasses.fields(Settings)}


def test_scratch_directories_are_private_and_below_the_home(tmp_path):
    import stat

    settings = Settings(home=str(tmp_path / "home"))
    first, second = settings.scratch_dir("sparkpoint-check-"), settings.scratch_dir("sparkpoint-check-")
    assert first != second and Path(first).parent == tmp_path / "home" / "tmp"
    assert Path(first).name.startswith("sparkpoint-check-")
    for directory in (first, tmp_path / "home" / "tmp"):
        assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
