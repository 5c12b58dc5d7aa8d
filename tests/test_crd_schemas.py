"""The CRD schemas' cache (recrunner/k8s/crd_schemas.py): what it gives is what the YAML
holds, a file's new bytes are read again, and a cache that cannot be used only costs time."""

import json
import shutil
from pathlib import Path

import pytest

from recrunner.k8s import crd_schemas

SMALL_CRD = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: things.example.com}
spec:
  group: example.com
  names: {kind: Thing, plural: things}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer, maximum: %d}
"""


@pytest.fixture(autouse=True)
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache"


def no_yaml(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(text: str) -> None:
        raise AssertionError("the YAML was parsed again")

    monkeypatch.setattr(crd_schemas, "parse", refuse)


def test_a_shipped_crd_comes_back_from_the_cache_as_its_yaml_holds_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = crd_schemas.default_crd_dir() / "paddlejob.crd.yaml"
    parsed = crd_schemas.parse(path.read_text())
    assert ("batch.paddlepaddle.org/v1", "PaddleJob") in parsed
    assert crd_schemas.schemas_in(path) == parsed  # read, and kept
    [kept] = crd_schemas.cache_dir().iterdir()
    no_yaml(monkeypatch)
    assert crd_schemas.schemas_in(path) == parsed  # from the cache alone
    assert [p.name for p in crd_schemas.cache_dir().iterdir()] == [kept.name]


def test_a_changed_file_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "thing.crd.yaml"
    path.write_text(SMALL_CRD % 5)
    schema = crd_schemas.schemas_in(path)[("example.com/v1", "Thing")]
    assert schema["properties"]["spec"]["properties"]["size"]["maximum"] == 5
    path.write_text(SMALL_CRD % 7)  # same size, same name: only the bytes differ
    schema = crd_schemas.schemas_in(path)[("example.com/v1", "Thing")]
    assert schema["properties"]["spec"]["properties"]["size"]["maximum"] == 7
    assert len(list(crd_schemas.cache_dir().iterdir())) == 2


def test_a_damaged_cache_entry_is_read_past_and_rewritten(tmp_path: Path) -> None:
    path = tmp_path / "thing.crd.yaml"
    path.write_text(SMALL_CRD % 5)
    want = crd_schemas.schemas_in(path)
    [kept] = crd_schemas.cache_dir().iterdir()
    for damage in ('[["example.com/v1", "Thing"', '{"not": "a list"}', "[[1]]"):
        kept.write_text(damage)
        assert crd_schemas.schemas_in(path) == want
        assert json.loads(kept.read_text()) == [["example.com/v1", "Thing",
                                                 want[("example.com/v1", "Thing")]]]


def test_without_a_usable_cache_the_schemas_still_come(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "thing.crd.yaml"
    path.write_text(SMALL_CRD % 5)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))  # the cache's folder cannot be made
    assert crd_schemas.schemas_in(path) == crd_schemas.parse(path.read_text())
    assert blocker.read_text() == ""


def test_what_json_cannot_hold_exactly_is_not_kept(tmp_path: Path) -> None:
    path = tmp_path / "thing.crd.yaml"
    # A YAML date (a datetime.date) and an integer key would come back from JSON changed.
    path.write_text((SMALL_CRD % 5) + "              since: {type: string, example: 2024-01-02}\n"
                    "              codes: {type: object, x-names: {1: one}}\n")
    schemas = crd_schemas.schemas_in(path)
    spec = schemas[("example.com/v1", "Thing")]["properties"]["spec"]["properties"]
    assert str(spec["since"]["example"]) == "2024-01-02" and spec["codes"]["x-names"] == {1: "one"}
    assert not crd_schemas.cache_dir().exists() or not any(crd_schemas.cache_dir().iterdir())


def test_the_directory_lookups_read_each_kind_from_its_file(tmp_path: Path) -> None:
    crds = tmp_path / "crds"
    crds.mkdir()
    shutil.copy(crd_schemas.default_crd_dir() / "sampleset.crd.yaml", crds)
    (crds / "thing.crd.yaml").write_text(SMALL_CRD % 5)
    every = crd_schemas.load_crd_schemas(str(crds))
    assert set(every) == {("example.com/v1", "Thing"), ("batch.paddlepaddle.org/v1alpha1",
                                                         "SampleSet")}
    assert crd_schemas.load_crd_schema(str(crds), "example.com/v1", "Thing") == \
        every[("example.com/v1", "Thing")]
    assert crd_schemas.load_crd_schema(str(crds), "example.com/v2", "Thing") is None
