import json
from pathlib import Path

import pytest

import denv
from denv import ConfigError, config_path, load_config


def write(path: Path, data: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def test_default_path_is_under_home(isolated_config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(isolated_config))
    assert config_path() == isolated_config / ".config" / "denv" / "config.json"


def test_xdg_config_home(isolated_config: Path) -> None:
    assert config_path() == isolated_config / "config" / "denv" / "config.json"


def test_denv_config_names_the_file(isolated_config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DENV_CONFIG", str(isolated_config / "elsewhere.json"))
    assert config_path() == isolated_config / "elsewhere.json"


def test_precedence_file_then_env_then_arguments(
    isolated_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(config_path(), {"url": "http://file:1/", "token": "file-t", "project": "file-p"})
    conf = load_config()
    assert (conf.url, conf.token, conf.project) == ("http://file:1", "file-t", "file-p")

    monkeypatch.setenv("DENV_URL", "http://env:2")
    monkeypatch.setenv("DENV_TOKEN", "env-t")
    conf = load_config()
    assert (conf.url, conf.token, conf.project) == ("http://env:2", "env-t", "file-p")

    conf = load_config(url="http://arg:3", project="arg-p")
    assert (conf.url, conf.token, conf.project) == ("http://arg:3", "env-t", "arg-p")


def test_empty_values_count_as_unset(
    isolated_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(config_path(), {"url": "http://file:1", "project": ""})
    monkeypatch.setenv("DENV_URL", "")
    conf = load_config(token="")
    assert conf.url == "http://file:1"
    assert conf.token is None
    assert conf.project is None


def test_missing_file_is_fine(isolated_config: Path) -> None:
    conf = load_config(url="http://x")
    assert conf.url == "http://x"
    assert not conf.path.exists()


def test_invalid_json_names_the_file(isolated_config: Path) -> None:
    path = config_path()
    path.parent.mkdir(parents=True)
    path.write_text("{nope")
    with pytest.raises(ConfigError, match=str(path)):
        load_config()


def test_non_string_value_is_refused(isolated_config: Path) -> None:
    write(config_path(), {"url": 7})
    with pytest.raises(ConfigError, match="'url' is not a string"):
        load_config()


def test_client_without_url_says_how_to_set_it(isolated_config: Path) -> None:
    with pytest.raises(ConfigError, match="DENV_URL"):
        denv.Client()


def test_client_uses_the_config_file(isolated_config: Path) -> None:
    write(config_path(), {"url": "http://cp:7070", "token": "s3cret", "project": "shop"})
    with denv.Client() as client:
        assert client.url == "http://cp:7070"
        assert client.project == "shop"
        assert "s3cret" not in repr(client.config)


def test_missing_project_says_how_to_set_it(isolated_config: Path) -> None:
    with denv.Client("http://cp") as client, pytest.raises(ConfigError, match="DENV_PROJECT"):
        client.list_environments()
