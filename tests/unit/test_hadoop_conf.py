"""Hadoop's client configuration as sparkpoint reads it (adapters/hadoop_conf.py, adapters/hdfs.py): references
resolved as Hadoop does, NameNodes found as its clients find them, and a hostile or broken site file one clear
error, never a hang."""

from __future__ import annotations

import time

import pytest

from sparkpoint.adapters.hadoop_conf import client_address, read_site
from sparkpoint.adapters.hdfs import namenode_addresses
from sparkpoint.errors import ConfigError


def site(directory, name: str, properties: dict[str, str]) -> None:
    (directory / name).write_text("<configuration>" + "".join(
        f"<property><name>{key}</name><value>{value}</value></property>" for key, value in properties.items())
        + "</configuration>")


def test_references_are_resolved_and_a_loop_stays_as_it_is(tmp_path):
    site(tmp_path, "yarn-site.xml", {"yarn.resourcemanager.hostname": "rm.example",
                                     "yarn.resourcemanager.webapp.address": "${yarn.resourcemanager.hostname}:8088",
                                     "a": "${b}", "b": "${a}"})
    values = read_site(str(tmp_path), "yarn-site.xml")
    assert values["yarn.resourcemanager.webapp.address"] == "rm.example:8088"
    assert "${" in values["a"]
    assert read_site(str(tmp_path), "core-site.xml") == {}  # no such file: nothing configured


def test_references_that_multiply_are_refused_at_once(tmp_path):
    # Each level holds the next ten times: 10^9 copies at depth 9, were it expanded.
    levels = {f"l{n}": ("${l" + str(n + 1) + "}") * 10 for n in range(9)}
    site(tmp_path, "hdfs-site.xml", {**levels, "l9": "x" * 64})
    started = time.monotonic()
    with pytest.raises(ConfigError, match="expand past"):
        read_site(str(tmp_path), "hdfs-site.xml")
    assert time.monotonic() - started < 5


def test_references_that_multiply_unevenly_are_refused_before_they_are_built(tmp_path):
    # Each level under the cap (l4 is about 640 KB), and a value of 5,000 references to it: 3.2 GB, were it built.
    levels = {f"l{n}": ("${l" + str(n - 1) + "}") * 10 for n in range(1, 5)}
    site(tmp_path, "core-site.xml", {"l0": "x" * 64, **levels, "top": "${l4}" * 5000})
    started = time.monotonic()
    with pytest.raises(ConfigError, match="expand past"):
        read_site(str(tmp_path), "core-site.xml")
    assert time.monotonic() - started < 5


def test_entities_that_multiply_and_broken_xml_are_one_clear_error(tmp_path):
    laughs = "".join(f'<!ENTITY l{n} "{f"&l{n - 1};" * 10}">' for n in range(1, 10))
    (tmp_path / "core-site.xml").write_text(f'<?xml version="1.0"?><!DOCTYPE c [<!ENTITY l0 "lol">{laughs}]>'
                                            "<configuration><property><name>x</name><value>&l9;</value>"
                                            "</property></configuration>")
    with pytest.raises(ConfigError, match="not XML"):
        read_site(str(tmp_path), "core-site.xml")
    (tmp_path / "yarn-site.xml").write_text("<configuration><property>")
    with pytest.raises(ConfigError, match="not XML"):
        read_site(str(tmp_path), "yarn-site.xml")


def test_namenodes_of_an_ha_nameservice_and_of_a_single_namenode(tmp_path, monkeypatch):
    monkeypatch.setenv("HADOOP_CONF_DIR", str(tmp_path))
    site(tmp_path, "hdfs-site.xml", {"dfs.ha.namenodes.prod": "nn1, nn2, nn3",
                                     "dfs.namenode.http-address.prod.nn1": "nn1.example:9870",
                                     # a wildcard: every interface of that NameNode's host, its RPC address's
                                     "dfs.namenode.http-address.prod.nn2": "0.0.0.0:9871",
                                     "dfs.namenode.rpc-address.prod.nn2": "nn2.example:8020",
                                     "dfs.namenode.http-address.prod.nn3": "nn3.example",  # no port: not used
                                     "dfs.namenode.http-address": "0.0.0.0:50070"})
    assert namenode_addresses("prod", {}) == ["nn1.example:9870", "nn2.example:9871"]
    # A wildcard is every interface of the NameNode's host: the URL's host, on the configured port.
    assert namenode_addresses("127.0.0.1:8020", {}) == ["127.0.0.1:50070"]
    assert namenode_addresses("nn.example:8020", {}) == ["nn.example:50070"]
    site(tmp_path, "hdfs-site.xml", {"dfs.namenode.http-address": "nn.example:50070"})
    assert namenode_addresses("nn.example", {}) == ["nn.example:50070"]
    # Another cluster's NameNode is not given this one's HTTP address: the default port.
    assert namenode_addresses("other.example:8020", {}) == ["other.example:9870"]
    assert namenode_addresses("prod", {"webhdfs": "gateway:14000"}) == ["gateway:14000"]
    assert client_address("0.0.0.0:8088") == "127.0.0.1:8088" and client_address("rm:8088") == "rm:8088"
    site(tmp_path, "hdfs-site.xml", {"dfs.namenode.http-address": "nn.example"})  # no port: the default
    assert namenode_addresses("nn.example:8020", {}) == ["nn.example:9870"]
