"""The two set-up routes (pip + apt, conda) install the same versions."""

import re

from workbook import REPO_ROOT

# pip name -> conda-forge name, where they differ
CONDA_NAMES = {"torch": "pytorch", "opencv-python-headless": "opencv", "playwright": "playwright-python"}
# pip requirements that environment.yml leaves out, and why
PIP_ONLY = {
    "jupyter-repo2docker": "an instructor's tool that builds the learners' image, whose environment is "
    "environment.yml (binder/environment.yml links to it): the image has no use for it"
}


# conda-forge versions have at most three parts; opencv-python-headless adds a build number
def _release(version):
    return ".".join(version.split(".")[:3])


def pip_pins():
    pins = {}
    for line in (REPO_ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            if name not in PIP_ONLY:
                pins[CONDA_NAMES.get(name, name)] = _release(version)
    return pins


def conda_pins():
    """conda-forge packages (`- name=version`) and those its pip section installs (`- name==version`)."""
    text = (REPO_ROOT / "environment.yml").read_text()
    return dict(re.findall(r"^\s+- ([A-Za-z0-9_.-]+)==?([0-9][^\s=]*)\s*$", text, re.MULTILINE))


def test_every_pip_requirement_is_pinned_exactly():
    for line in (REPO_ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        assert not line or re.fullmatch(r"[A-Za-z0-9_.-]+==[0-9][0-9A-Za-z.+]*", line), line


def test_conda_environment_matches_requirements():
    conda = conda_pins()
    conda.pop("python")
    assert conda == pip_pins()
