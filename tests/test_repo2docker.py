"""The image a class runs on JupyterHub: repo2docker's plan for it, and its two scripts run in a sandbox.

No image is built here (that needs a container engine and conda-forge); `repo2docker --no-build --debug`
prints the Dockerfile it would build, without a Docker daemon.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from workbook import REPO_ROOT

BINDER = REPO_ROOT / "binder"
REPO2DOCKER = Path(sys.executable).parent / "repo2docker"


@pytest.fixture(scope="module")
def dockerfile():
    if not REPO2DOCKER.exists():
        pytest.skip("repo2docker is not installed here (requirements.txt has it; environment.yml leaves it out)")
    done = subprocess.run(
        [str(REPO2DOCKER), "--no-build", "--debug", "--user-id", "1000", "--user-name", "jovyan", str(REPO_ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr


def test_the_image_environment_is_environment_yml(dockerfile):
    assert (BINDER / "environment.yml").resolve() == (REPO_ROOT / "environment.yml").resolve()
    assert "Building conda environment for python=3.11" in dockerfile
    # A file named in COPY is copied with its link followed, so the image gets environment.yml's content.
    assert "COPY --chown=1000:1000 src/binder/environment.yml ${REPO_DIR}/binder/environment.yml" in dockerfile
    assert 'env update -p ${NB_PYTHON_PREFIX} --file "binder/environment.yml"' in dockerfile


def test_the_image_installs_the_debian_packages_of_apt_txt(dockerfile):
    packages = [line.split("#")[0].strip() for line in (BINDER / "apt.txt").read_text().splitlines()]
    packages = sorted(package for package in packages if package)
    assert "g++" in packages
    assert f"apt-get install --yes --no-install-recommends {' '.join(packages)}" in dockerfile


def test_the_image_runs_postbuild_and_starts_with_start(dockerfile):
    assert "RUN ./binder/postBuild" in dockerfile
    assert 'ENV R2D_ENTRYPOINT="${REPO_DIR}/binder/start"' in dockerfile


def test_a_working_copys_build_products_stay_out_of_the_image():
    from docker.utils.build import exclude_paths

    ignored = [line for line in (BINDER / ".dockerignore").read_text().splitlines() if line and line[0] != "#"]
    sent = exclude_paths(str(REPO_ROOT), ignored)
    assert "notebooks/00_setup_check.ipynb" in sent and "binder/start" in sent
    assert not [path for path in sent if path.split("/")[0] in (".venv", "build") or "__pycache__" in path]


@pytest.mark.parametrize("repo_dir", ["/srv/workbook", "home"], ids=["hub-image", "binder-default"])
def test_each_learner_gets_a_writable_workbook_and_jupyterlab_in_its_notebooks(tmp_path, repo_dir):
    """postBuild and start, run as the image runs them, in a sandbox: a conda environment stands in as a venv,
    the home folder and the image's copy of the repository as folders under tmp_path."""
    home = tmp_path / "home" / "jovyan"
    home.mkdir(parents=True)
    repo = home if repo_dir == "home" else tmp_path / repo_dir.lstrip("/")
    for part in ("workbook", "binder"):
        shutil.copytree(REPO_ROOT / part, repo / part, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    (repo / "notebooks").mkdir(parents=True)
    shutil.copy(REPO_ROOT / "notebooks" / "00_setup_check.ipynb", repo / "notebooks")
    prefix = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(prefix)], check=True)
    env = dict(
        {key: value for key, value in os.environ.items() if not key.startswith(("WORKBOOK_", "PYTHON", "MAX_JOBS"))},
        HOME=str(home),
        REPO_DIR=str(repo),
        NB_PYTHON_PREFIX=str(prefix),
        PATH=f"{prefix / 'bin'}{os.pathsep}{os.environ['PATH']}",
    )
    subprocess.run([str(repo / "binder" / "postBuild")], cwd=repo, env=env, check=True)

    learner = home / "workbook" if repo_dir != "home" else home
    config = json.loads((prefix / "etc/jupyter/jupyter_server_config.d/workbook.json").read_text())
    assert config == {"ServerApp": {"root_dir": f"{learner}/notebooks", "default_url": "/lab"}}
    overrides = prefix / "share/jupyter/lab/settings/overrides.json"
    assert overrides.read_text() == (REPO_ROOT / "workbook/jupyterlab_settings/overrides.json").read_text()

    def start(*command):
        done = subprocess.run(
            [str(repo / "binder" / "start"), *command], cwd=home, env=env, capture_output=True, text=True, check=True
        )
        return done.stdout

    where = "import workbook, os; print(workbook.REPO_ROOT, workbook.BUILD_DIR, os.access(workbook.BUILD_DIR.parent, os.W_OK))"
    assert start("python", "-c", where).split() == [str(learner), str(learner / "build"), "True"]
    assert (learner / "notebooks" / "00_setup_check.ipynb").exists()

    # A learner's edit survives the next start, and a file a new image brings appears.
    edited = learner / "notebooks" / "00_setup_check.ipynb"
    edited.write_text("the learner's version")
    (repo / "notebooks" / "new_chapter.ipynb").write_text("{}")
    start("true")
    assert edited.read_text() == "the learner's version"
    assert (learner / "notebooks" / "new_chapter.ipynb").exists()

    # Builds run as many compiler jobs as the server's CPU quota allows (none set: as torch and ninja choose).
    cpu_max = Path("/sys/fs/cgroup/cpu.max")
    quota, period = cpu_max.read_text().split() if cpu_max.exists() else ("max", "100000")
    expected = "unset" if quota == "max" else str(-(-int(quota) // int(period)))
    assert start("sh", "-c", "echo ${MAX_JOBS:-unset}").strip() == expected
