"""``kbroker format --release-version``: Kafka's release names to metadata.version levels, the
levels a new cluster may start at, and the controller starting at the chosen one."""

import subprocess
import sys

import pytest

from kbroker.kraft.controller import METADATA_VERSION, METADATA_VERSION_FEATURE, Controller
from kbroker.kraft.metadata_versions import ReleaseVersionError, level_of, name_of
from kbroker.security import bootstrap


@pytest.mark.parametrize("release,level", [
    ("3.3", 7), ("3.3-IV0", 4), ("3.5", 11), ("3.5-IV1", 10), ("3.7", 19), ("3.7-IV2", 17),
    ("3.8", 20), ("3.9", 21), ("3.9-IV0", 21), ("3.7.1", 19)])
def test_release_names_map_to_kafkas_levels(release, level):
    assert level_of(release, METADATA_VERSION) == level


@pytest.mark.parametrize("release,why", [
    ("3.2", "metadata.version 3.2-IV0 is too old to be supported."),
    ("3.0-IV1", "metadata.version 3.0-IV1 is too old to be supported."),
    ("4.0", "metadata.version 4.0-IV3 is not supported by kbroker"),
    ("2.8", "Unknown release version '2.8'"),
    ("banana", "Unknown release version 'banana'")])
def test_refused_release_versions_say_why(release, why):
    with pytest.raises(ReleaseVersionError, match=why.replace(".", r"\.")):
        level_of(release, METADATA_VERSION)


def test_names_cover_every_served_level():
    assert name_of(METADATA_VERSION) == "3.9-IV0" and name_of(1) == "3.0-IV1"
    assert all(name_of(level) != f"level {level}" for level in range(1, METADATA_VERSION + 1))


def _format(tmp_path, *args):
    cfg = [f"--override=log.dirs={tmp_path / 'data'}", "--override=node.id=1",
           "--override=process.roles=broker,controller"]
    return subprocess.run([sys.executable, "-m", "kbroker", "format", "-t", "kbrokerclusterAAAAAAAAA", *cfg, *args],
                          capture_output=True, text=True, timeout=60)


def test_format_records_the_chosen_level_and_the_controller_starts_there(tmp_path):
    r = _format(tmp_path, "--release-version", "3.7")
    assert r.returncode == 0 and "metadata.version 3.7-IV4" in r.stdout, r
    records = bootstrap.read(str(tmp_path / "data"))
    c = Controller(1, {})
    c.bootstrap_records = records
    levels = [(x.name, x.feature_level) for x in c.bootstrap(0).records if type(x).__name__ == "FeatureLevelRecord"]
    assert levels == [(METADATA_VERSION_FEATURE, 19)]


def test_without_a_release_version_a_new_cluster_starts_at_the_newest_level(tmp_path):
    r = _format(tmp_path)
    assert r.returncode == 0 and "metadata.version 3.9-IV0" in r.stdout, r
    assert bootstrap.read(str(tmp_path / "data")) == []
    levels = [x.feature_level for x in Controller(1, {}).bootstrap(0).records]
    assert levels == [METADATA_VERSION]


def test_format_refuses_scram_before_3_5_iv2_and_writes_nothing(tmp_path):
    r = _format(tmp_path, "--release-version", "3.4", "--add-scram", "SCRAM-SHA-512=[name=a,password=b]")
    assert r.returncode == 1 and "SCRAM is only supported in metadata.version 3.5-IV2 or later." in r.stderr, r
    assert not (tmp_path / "data").exists() or not any((tmp_path / "data").iterdir())
    r = _format(tmp_path, "--release-version", "4.0")
    assert r.returncode == 1 and "not supported by kbroker" in r.stderr, r
