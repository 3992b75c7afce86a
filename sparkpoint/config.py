"""Configuration, resolved in one place.

Precedence, highest first: a command-line flag > an environment variable ``SPARKPOINT_<KEY>``
> the configuration file > the defaults below. The file is the one named by ``--config``,
else by ``SPARKPOINT_CONFIG``, else ``~/.config/sparkpoint/sparkpoint.yaml`` when it exists.
``conf/sparkpoint.yaml`` in the repository documents every key with its default; a test keeps
the two in step.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sparkpoint.errors import ConfigError
from sparkpoint.paths import is_url, local_path

USER_CONFIG_PATH = Path("~/.config/sparkpoint/sparkpoint.yaml")


@dataclasses.dataclass(frozen=True)
class Settings:
    # Root of the job registry and the live checkpoints: a path (a local disk or a shared mount).
    home: str = "~/.sparkpoint"
    # Files transferred in parallel when a savepoint is written or restored.
    transfer_workers: int = 4
    # Fresh cuts tried when Spark purges files of a live checkpoint during a savepoint.
    savepoint_attempts: int = 5
    # The savepoint catalog: a path or any fsspec URL (s3://bucket/savepoints); {home} is the home.
    savepoints: str = "{home}/savepoints"
    # Where managed jobs keep their live checkpoints, each below its job id: a path or URL Spark writes
    # (hdfs://namenode:8020/sparkpoint, s3a://bucket/checkpoints); empty, each job's directory in the home.
    checkpoints: str = ""
    # The class data sharing archives of drivers' JVMs (`class-archive build`): a local path; {home} is the home.
    class_archives: str = "{home}/jvm"
    # Options for the fsspec file system of remote paths (endpoint, credentials).
    storage_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # The Kafka client that asks a broker whether a savepoint's input is still in the log (kafka-python's option
    # names): bootstrap_servers, and what the connection needs (security_protocol, sasl_*, ssl_*).
    kafka: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def savepoints_dir(self) -> str:
        location = self.savepoints.replace("{home}", self.home_url())
        return location if "://" in location else str(Path(location).expanduser())  # file:// URLs stay as given

    def home_url(self) -> str:
        """The home: the job registry and the live checkpoints. A path every driver can reach (a local
        disk, or a shared mount such as NFS): Spark writes checkpoints there through Hadoop's local file
        system, and the registry keeps owner-only tokens and process ids that object stores cannot."""
        return local_home(self.home)

    def class_archives_dir(self) -> str:
        """Where class archives are kept and looked up: a local path (the JVM maps them from a local file)."""
        location = self.class_archives.replace("{home}", self.home_url())
        if is_url(location):
            raise ConfigError(f"class_archives {location!r}: must be a local path (a JVM maps its archive from a "
                              "local file), not a URL")
        return _absolute(location)

    def private_dir(self, name: str) -> Path:
        """``<home>/<name>``, made owner-only if it is new: the home holds tokens, arguments and state."""
        directory = Path(self.home_url()) / name
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        return directory

    def scratch_dir(self, prefix: str) -> str:
        """A new private directory for sparkpoint's own throwaway work (a check's sandbox), below the home's
        ``tmp/``: on the device of the home's savepoints and checkpoints, so a restore there links files
        instead of copying them (``$TMPDIR`` is often a small tmpfs). Its creator removes it."""
        return tempfile.mkdtemp(prefix=prefix, dir=self.private_dir("tmp"))



def local_home(home: str) -> str:
    """The home as a local path; a URL of a remote file system is refused (see Settings.home_url)."""
    if is_url(home):
        raise ConfigError(f"home {home!r}: the home must be a path (a local disk or a shared mount); "
                          "put savepoints on object storage with the 'savepoints' setting instead")
    # Absolute: the registry records paths below it, and a driver resolves its checkpoint location from its own
    # working directory, so a relative home (--home home-b) must not depend on where a command ran.
    return _absolute(home)


def _absolute(path: str) -> str:
    return str(Path(local_path(path)).expanduser().absolute())


_FIELDS = {f.name: f for f in dataclasses.fields(Settings)}
FILE_ONLY = ("storage_options", "kafka")  # set in the file only: no environment variable carries a mapping


def _coerce(key: str, value: Any, origin: str) -> Any:
    expected = type(getattr(Settings(), key))
    if expected is int:
        try:
            # int() takes 2.5 as 2 and true as 1: a typo in a number must not pass as another number.
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError(value)
            number = int(value)
        except (TypeError, ValueError, OverflowError):  # OverflowError: .inf in YAML, 'inf' in the environment
            raise ConfigError(f"{origin}: '{key}' must be a whole number, got {value!r}") from None
        if number < 1:
            raise ConfigError(f"{origin}: '{key}' must be at least 1, got {number}")
        return number
    if expected is str:
        if not isinstance(value, (str, Path)) or not str(value) or "\0" in str(value):
            raise ConfigError(f"{origin}: '{key}' must be a non-empty string without NUL, got {value!r}")
        return str(value)
    if not isinstance(value, Mapping):
        raise ConfigError(f"{origin}: '{key}' must be a mapping, got {value!r}")
    return dict(value)


def _read_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"configuration file {path} does not exist") from None
    except OSError as exc:
        raise ConfigError(f"cannot read configuration file {path}: {exc.strerror}") from None
    import yaml  # here: only a command with a configuration file pays its import (20 ms of every command's start)

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise ConfigError(f"configuration file {path} is not valid YAML{where}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"configuration file {path} must hold a mapping of keys, not {type(data).__name__}")
    unknown = sorted(set(data) - set(_FIELDS))
    if unknown:
        raise ConfigError(
            f"configuration file {path}: unknown key(s) {', '.join(unknown)}; known: {', '.join(_FIELDS)}"
        )
    return {key: _coerce(key, value, str(path)) for key, value in data.items()}


def load_settings(
    config_path: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Resolve the settings: ``overrides`` (flags) > environment > file > defaults."""
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}

    path_text = config_path or environ.get("SPARKPOINT_CONFIG")
    if path_text:
        values.update(_read_file(Path(path_text).expanduser()))
    elif USER_CONFIG_PATH.expanduser().is_file():
        values.update(_read_file(USER_CONFIG_PATH.expanduser()))

    for key in _FIELDS:
        env_name = f"SPARKPOINT_{key.upper()}"
        if key not in FILE_ONLY and environ.get(env_name):
            values[key] = _coerce(key, environ[env_name], env_name)

    for key, value in (overrides or {}).items():
        if value is not None:
            values[key] = _coerce(key, value, f"--{key.replace('_', '-')}")
    return Settings(**values)
