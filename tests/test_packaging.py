"""Dependencies as a library declares them, and the shipped weights checked before loading."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from videotext import weights

ROOT = Path(__file__).resolve().parents[1]
NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def pins(path: Path) -> dict[str, str]:
    """name -> exact version of a requirements/constraints file."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, rest = line.partition("==")
            out[canonical(name)] = rest.split()[0]
    return out


def test_dependencies_are_ranges_and_only_the_weight_packages_are_exact():
    declared = project()["dependencies"] + [d for extra, deps in project()["optional-dependencies"].items()
                                            if extra != weights.EXTRA for d in deps]
    exact = [d for d in declared if "==" in d]
    assert exact == [], f"exact pins belong in requirements/constraints.txt: {exact}"
    torch_spec = next(d for d in declared if canonical(NAME.match(d).group(1)) == "torch")
    assert ">=" in torch_spec and "2.14.1" not in torch_spec
    offline = {canonical(NAME.match(d).group(1)): d.split("==")[1] for d in project()["optional-dependencies"]["offline"]}
    # RapidOCR carries its own weights and declares opencv-python: installed --no-deps, not through the extra
    assert offline == {p.distribution: p.version for p in weights.PACKAGES.values() if not p.install}


def test_constraints_pin_every_declared_dependency_at_an_installed_version():
    from importlib.metadata import version

    constraints = pins(ROOT / "requirements" / "constraints.txt")
    declared = [canonical(NAME.match(d).group(1)) for d in project()["dependencies"]]
    declared += [canonical(NAME.match(d).group(1)) for deps in project()["optional-dependencies"].values() for d in deps]
    missing = sorted({n for n in declared if n not in constraints} - {"setuptools", "wheel"})
    assert missing == []
    assert constraints["torch"] == version("torch")
    hashed = pins(ROOT / "requirements" / "offline-weights.txt")
    assert hashed == {p.distribution: p.version for p in weights.PACKAGES.values()}
    assert all("--hash=sha256:" in line for line in (ROOT / "requirements" / "offline-weights.txt").read_text().splitlines()
               if line and not line.startswith("#"))


def test_every_shipped_weight_file_matches_its_recorded_sha256():
    for key in weights.PACKAGES:
        folder = weights.verified_folder(key)
        assert folder.is_dir()


def test_a_changed_weight_file_is_refused_naming_the_file_and_the_release(tmp_path, monkeypatch):
    (tmp_path / "wt" / "models").mkdir(parents=True)
    (tmp_path / "wt" / "__init__.py").write_text("")
    damaged = tmp_path / "wt" / "models" / "efficientnet-lite0-57934424.pth"
    damaged.write_bytes(b"not the weights")
    package = weights.WeightPackage("a test network", "wt-pkg", "1.0", "wt", "models",
                                    dict(weights.PACKAGES["efficientnet_lite0"].sha256))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(weights.PACKAGES, "efficientnet_lite0", package)
    with pytest.raises(weights.WeightsError, match=r"efficientnet-lite0-57934424\.pth: sha256 [0-9a-f]{64} is not "
                                                   r"5793442.* of wt-pkg==1\.0"):
        weights.verified_file("efficientnet_lite0", "efficientnet-lite0-57934424.pth")


def test_a_missing_weight_package_names_the_offline_extra(monkeypatch):
    package = weights.WeightPackage("the default text model", "no-such-weights", "0.1", "no_such_weights_module",
                                    "model", {})
    monkeypatch.setitem(weights.PACKAGES, "minilm", package)
    from videotext.text.encoder import default_text_model_path

    with pytest.raises(weights.WeightsError, match=r"no-such-weights==0\.1.*'offline' extra: pip install 'videotext\[offline\]'"):
        default_text_model_path()


def test_a_missing_ocr_package_says_how_to_install_it_without_its_opencv(monkeypatch):
    package = weights.PACKAGES["rapidocr"]
    monkeypatch.setitem(weights.PACKAGES, "rapidocr", weights.WeightPackage(
        package.name, package.distribution, package.version, "no_such_rapidocr_module", package.folder,
        package.sha256, package.install))
    from videotext.data.ocr.engines import ocr_engine

    with pytest.raises(weights.WeightsError, match=r"rapidocr-onnxruntime==1\.4\.4, which is not installed; pip install "
                                                   r"'videotext\[ocr\]' && pip install --no-deps"):
        ocr_engine("rapidocr")
