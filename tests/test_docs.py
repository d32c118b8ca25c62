"""The documentation site builds, the README's links land on its pages, and the stand-in
servers' `--help` explains every option. (The pages' code blocks run in tests/test_readme.py.)"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def mkdocs_config() -> dict:
    # mkdocs.yml may use `!!python/name:` tags (material's emoji, superfences): read it leniently.
    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("", lambda loader, suffix, node: None)
    return yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=Loader)


SITE_URL = mkdocs_config()["site_url"]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site, built as CI builds it: `mkdocs build --strict` (a warning is an error)."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--config-file",
            str(ROOT / "mkdocs.yml"),
            "--site-dir",
            str(out),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, (
        'mkdocs build --strict failed (pip install -e ".[docs]" for mkdocs):\n' + run.stdout + run.stderr
    )
    return out


def nav_pages(nav) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in nav_pages(value)]
    return [page for item in nav for page in nav_pages(item)]


@pytest.mark.slow
def test_the_site_builds_with_strict_and_has_a_page_for_each_markdown_file(site):
    pages = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
    assert sorted(nav_pages(mkdocs_config()["nav"])) == pages
    for page in pages:
        built = site / ("index.html" if page == "index.md" else page.removesuffix(".md") + "/index.html")
        assert built.is_file(), page
    assert (site / "report.png").is_file()  # the HTML report's screenshot, shown on the reports page
    assert not list(site.rglob("*.py"))  # docs/report_screenshot.py makes the screenshot; it is no page


def readme_links_to_the_site() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return [t for t in re.findall(r"\]\(([^)\s]+)\)", text) if t.startswith(SITE_URL)]


def test_the_readme_links_to_every_page_of_the_site():
    linked = {urlsplit(url).path for url in readme_links_to_the_site()}
    for page in nav_pages(mkdocs_config()["nav"]):
        path = urlsplit(SITE_URL).path + ("" if page == "index.md" else page.removesuffix(".md") + "/")
        assert path in linked, f"the README links to no {page}: add {SITE_URL.rstrip('/')}{path}"


@pytest.mark.slow
def test_each_readme_link_to_the_site_names_a_page_and_heading_that_exist(site):
    links = readme_links_to_the_site()
    assert links
    for url in links:
        parts = urlsplit(url)
        page = site / parts.path.removeprefix(urlsplit(SITE_URL).path) / "index.html"
        assert page.is_file(), f"{url}: no such page"
        if parts.fragment:
            assert f'id="{parts.fragment}"' in page.read_text(encoding="utf-8"), f"{url}: no such heading"


def test_the_site_url_is_the_documented_placeholder():
    # Nothing is published yet: the README and mkdocs.yml name this one address for the docs.
    assert SITE_URL == "https://toolcall-reflection.readthedocs.io/"
    assert "https://toolcall-reflection.readthedocs.io/" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_package_metadata_and_read_the_docs_name_the_same_site():
    # The index page links to the docs through [project.urls]; Read the Docs builds that site
    # from mkdocs.yml with the `docs` extra, strictly, as this file's build test does.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["urls"]["Documentation"] == SITE_URL
    assert "docs" in project["optional-dependencies"]
    rtd = yaml.safe_load((ROOT / ".readthedocs.yaml").read_text(encoding="utf-8"))
    assert rtd["version"] == 2
    assert rtd["mkdocs"] == {"configuration": "mkdocs.yml", "fail_on_warning": True}
    assert rtd["python"]["install"] == [{"method": "pip", "path": ".", "extra_requirements": ["docs"]}]


# --- the stand-in servers' --help ---------------------------------------------------------------

STAND_INS = ["reflection.testing.server", "reflection.testing.upstream", "reflection.testing.hostile_upstream"]


class _Parsed(Exception):
    def __init__(self, parser: argparse.ArgumentParser):
        self.parser = parser


def parser_of(module_name: str, monkeypatch) -> argparse.ArgumentParser:
    """The argument parser a stand-in's `main()` builds, caught before it parses anything."""
    module = __import__(module_name, fromlist=["main"])

    def catch(self, *args, **kwargs):
        raise _Parsed(self)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", catch)
    with pytest.raises(_Parsed) as caught:
        module.main([])
    return caught.value.parser


@pytest.mark.parametrize("module_name", STAND_INS)
def test_a_stand_in_servers_help_explains_every_option_and_the_idle_exit(module_name, monkeypatch):
    parser = parser_of(module_name, monkeypatch)
    options = [action for action in parser._actions if action.option_strings and action.dest != "help"]
    assert options
    unexplained = [action.option_strings[0] for action in options if len((action.help or "").split()) < 4]
    assert not unexplained, f"{module_name} --help: say what these do: {unexplained}"
    assert parser.prog == f"python -m {module_name}"
    text = parser.format_help()
    assert "Idle exit" in text and "--idle-timeout" in text and "127.0.0.1" in text, text


def test_the_docs_describe_each_stand_in_and_its_idle_exit():
    page = (DOCS / "testing.md").read_text(encoding="utf-8")
    assert "**Idle exit.**" in page
    for module_name in STAND_INS:
        assert f"python -m {module_name} --idle-timeout" in page, module_name


def test_the_fast_lane_is_declared_and_documented():
    import tomllib

    markers = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]
    assert any(marker.startswith("slow:") for marker in markers)
    for page in (ROOT / "README.md", DOCS / "getting-started.md"):
        assert 'pytest -m "not slow"' in page.read_text(encoding="utf-8"), page
