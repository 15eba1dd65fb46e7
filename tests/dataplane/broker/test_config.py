"""Broker configuration from a TOML file and flags; invalid input names the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from dataplane.broker.app import BrokerApp
from dataplane.broker.config import BrokerConfig, ConfigError, load_config
from dataplane.broker.main import config_from_args, parse_args
from dataplane.records import TimestampType
from dataplane.storage.config import Durability

FULL = """
id = 3
region = "eu-west"
cluster_id = "prod-eu"
listen = "0.0.0.0:9092"
data_dir = "/var/lib/meridian/3"
metrics_listen = ""
offsets_topic_partitions = 4
control_plane_url = "http://cp:8000"
[peers]
1 = "b1:9092"
2 = "b2:9092"
[log]
durability = "always"
timestamp_type = "LogAppendTime"
retention_ms = 3600000
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "broker.toml"
    path.write_text(text)
    return path


def test_a_full_file_is_read(tmp_path):
    config = load_config(write(tmp_path, FULL))
    assert (config.broker_id, config.region, config.cluster_id) == (3, "eu-west", "prod-eu")
    assert (config.listen_host, config.listen_port, config.host) == ("0.0.0.0", 9092, "127.0.0.1")
    assert config.data_dir == Path("/var/lib/meridian/3")
    assert config.peers == {1: "b1:9092", 2: "b2:9092"}
    assert config.all_broker_ids == [1, 2, 3]
    assert (config.metrics_listen, config.offsets_topic_partitions) == ("", 4)
    assert config.log.durability is Durability.ALWAYS
    assert config.log.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert config.log.retention_ms == 3_600_000


def test_flags_override_the_file(tmp_path):
    config = load_config(
        write(tmp_path, FULL), broker_id=5, listen="127.0.0.1:0", peers={9: "h:1"}, region=None
    )
    assert (config.broker_id, config.listen_port, config.peers) == (5, 0, {9: "h:1"})
    assert config.region == "eu-west", "an unset flag keeps the file's value"


def test_flags_alone_suffice():
    config = load_config(broker_id=1, data_dir="d")
    assert config == BrokerConfig(broker_id=1, data_dir=Path("d"))


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ('data_dir = "d"', "id"),
        ("id = 1", "data_dir"),
        ('id = true\ndata_dir = "d"', "id"),
        ('id = 1\ndata_dir = "d"\ncolour = "red"', "colour"),
        ('id = 1\ndata_dir = "d"\nlisten = "9092"', "listen"),
        ('id = 1\ndata_dir = "d"\n[peers]\n1 = "h:1"', "peers"),
        ('id = 1\ndata_dir = "d"\n[peers]\n2 = "h:0"', "peers.2"),
        ('id = 1\ndata_dir = "d"\n[log]\ndurability = "maybe"', "log"),
        ('id = 1\ndata_dir = "d"\n[log]\nsize = 3', "size"),
        ('id = 1\ndata_dir = "d"\n[log]\ntimestamp_type = "Now"', "timestamp_type"),
        ('id = 1\ndata_dir = "d"\noffsets_topic_partitions = 0', "offsets_topic_partitions"),
        ('id = 1\ndata_dir = "d"\nregion = 5', "region"),
        ("id = [", r"broker\.toml"),
    ],
)
def test_invalid_files_name_the_field(tmp_path, text, named):
    with pytest.raises(ConfigError, match=named):
        load_config(write(tmp_path, text))


def test_a_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match=r"nothing\.toml"):
        load_config(tmp_path / "nothing.toml")


def test_max_open_files_comes_from_the_file_or_the_flag(tmp_path):
    path = write(tmp_path, 'id = 1\ndata_dir = "d"\nmax_open_files = 4096')
    assert load_config(path).max_open_files == 4096
    args = parse_args(["--config", str(path), "--max-open-files", "512"])
    assert config_from_args(args).max_open_files == 512
    assert load_config(broker_id=1, data_dir="d").max_open_files == 0, "0: the default"


def test_a_negative_max_open_files_is_refused():
    with pytest.raises(ConfigError, match="max_open_files"):
        load_config(broker_id=1, data_dir="d", max_open_files=-1)


@pytest.mark.parametrize(("configured", "passed"), [(4096, 4096), (0, None)])
def test_the_app_gives_max_open_files_to_its_log_manager(tmp_path, configured, passed):
    app = BrokerApp(BrokerConfig(broker_id=1, data_dir=tmp_path, max_open_files=configured))
    try:
        assert app.manager.max_open_files == passed
    finally:
        app.executor.shutdown()


def test_replica_lag_time_comes_from_the_file_or_the_flag(tmp_path):
    path = write(tmp_path, 'id = 1\ndata_dir = "d"\nreplica_lag_time_max_ms = 3000')
    assert load_config(path).replica_lag_time_max_ms == 3000
    args = parse_args(["--config", str(path), "--replica-lag-time-max-ms", "700"])
    assert config_from_args(args).replica_lag_time_max_ms == 700
    assert load_config(broker_id=1, data_dir="d").replica_lag_time_max_ms == 10_000
    with pytest.raises(ConfigError, match="replica_lag_time_max_ms"):
        load_config(broker_id=1, data_dir="d", replica_lag_time_max_ms=0)
