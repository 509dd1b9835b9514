"""The groups that keep a chapter's notebooks and the tests sharing its files on one pytest-xdist worker."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from workbook import REPO_ROOT
from workbook.course import generate, suite_groups


def test_both_copies_of_a_chapter_share_a_group():
    for name in generate.chapter_names():
        groups = {suite_groups.group_of(REPO_ROOT / folder / f"{name}.ipynb") for folder in ("notebooks", "solutions")}
        assert groups == {f"chapter-{name[:2]}"}, name


def test_tests_that_share_a_chapters_files_join_its_group():
    chapters = {name[:2] for name in generate.chapter_names()}
    for stem, chapter in suite_groups.CHAPTER_OF_TEST.items():
        assert (REPO_ROOT / "tests" / f"{stem}.py").exists(), f"{stem}.py is listed but does not exist"
        assert chapter in chapters, f"{stem} joins chapter {chapter}, which does not exist"
        assert suite_groups.group_of(REPO_ROOT / "tests" / f"{stem}.py") == f"chapter-{chapter}"


def test_any_other_test_file_is_its_own_group():
    assert suite_groups.group_of(Path("tests/test_scatter.py")) == "test_scatter"


def test_node_ids_map_to_their_files_group():
    assert suite_groups.group_of_test("notebooks/02_cpp_extensions.ipynb::Cell 12") == "chapter-02"
    assert suite_groups.group_of_test("tests/test_example_app.py::test_program[scripted.pt-linked]") == "chapter-06"
    assert suite_groups.group_of_test("tests/test_scatter.py::test_sum[float32]") == "test_scatter"


class FakeCache(dict):
    def get(self, key, default):
        return super().get(key, default)

    def set(self, key, value):
        self[key] = value


class FakeConfig:
    """What xdist's scheduler reads of pytest's config: two workers, its reorder option, the cache."""

    def __init__(self, kept):
        self.cache = FakeCache({suite_groups.SECONDS_KEY: kept} if kept else {})
        self.option = type("Options", (), {"loadscopereorder": True})()

    def getvalue(self, name):
        assert name == "tx"
        return ["2*popen"]


class FakeWorker:
    def __init__(self, name, collection):
        self.name, self.collection, self.shutting_down, self.handed = name, collection, False, []
        self.gateway = type("Gateway", (), {"id": name})()

    def send_runtest_some(self, indexes):
        self.handed.append(suite_groups.group_of_test(self.collection[indexes[0]]))

    def shutdown(self):
        self.shutting_down = True


COLLECTION = [
    *(f"tests/test_many.py::test_{i}" for i in range(6)),  # the most tests, but quick
    "tests/test_slow.py::test_a",
    "tests/test_slow.py::test_b",
    "tests/test_slow.py::test_c",
    "tests/test_medium.py::test_a",
    "tests/test_medium.py::test_b",
]


def schedule(kept):
    scheduler = suite_groups.pytest_xdist_make_scheduler(FakeConfig(kept), log=None)
    workers = [FakeWorker(f"gw{i}", COLLECTION) for i in range(2)]
    for worker in workers:
        scheduler.add_node(worker)
        scheduler.add_node_collection(worker, COLLECTION)
    scheduler.schedule()
    return scheduler, workers


def seconds_of(group: str, seconds: float) -> dict[str, float]:
    return {nodeid: seconds for nodeid in COLLECTION if suite_groups.group_of_test(nodeid) == group}


def test_with_kept_times_the_longest_group_goes_first_and_a_worker_gets_more_only_at_its_last_test():
    kept = {**seconds_of("test_many", 0.1), **seconds_of("test_slow", 10.0), **seconds_of("test_medium", 2.5)}
    scheduler, (first, second) = schedule(kept)
    assert (first.handed, second.handed) == (["test_slow"], ["test_medium"])
    slow = [COLLECTION.index(nodeid) for nodeid in COLLECTION if "test_slow" in nodeid]
    scheduler.mark_test_complete(first, slow[0])
    assert first.handed == ["test_slow"]  # two tests left: no more yet
    scheduler.mark_test_complete(first, slow[1])
    assert first.handed == ["test_slow", "test_many"]  # down to its last test: the next group
    assert second.handed == ["test_medium"]


def test_a_group_is_expected_to_take_its_tests_kept_seconds_and_the_average_for_a_test_with_none():
    groups = {"a": ["a1", "a2"], "b": ["b1", "b2", "b3"]}
    assert suite_groups.expected_seconds({"a1": 1.0, "a2": 2.0, "b1": 6.0, "gone": 100.0}, groups) == {
        "a": 3.0,
        "b": 6.0 + 3.0 + 3.0,  # b2 and b3: the average of a1, a2 and b1
    }
    assert suite_groups.expected_seconds({}, groups) == {"a": 2.0, "b": 3.0}


def test_each_tests_seconds_are_added_up_and_kept_with_those_of_tests_this_run_did_not_run():
    cache = FakeCache(
        {suite_groups.SECONDS_KEY: {"tests/test_other.py::test_x": 7.0, "tests/test_slow.py::test_a": 99.0}}
    )
    recorder = suite_groups.SecondsPerTest(cache)
    for phase_seconds in (0.5, 1.0, 0.25):  # setup, call, teardown
        recorder.pytest_runtest_logreport(
            type("Report", (), {"nodeid": "tests/test_slow.py::test_a", "duration": phase_seconds})()
        )
    session = type("Session", (), {"config": type("Config", (), {"cache": cache})()})()
    recorder.pytest_sessionfinish(session)
    assert cache[suite_groups.SECONDS_KEY] == {"tests/test_other.py::test_x": 7.0, "tests/test_slow.py::test_a": 1.75}
    assert cache[suite_groups.BUILDS_KEY] == suite_groups.builds_in_use()


@pytest.mark.parametrize(
    "stored", [None, [1, 2], "text", {"t::a": "1"}, {"t::a": None}, {"t::a": float("inf")}, {"t::a": 10**400}]
)
def test_a_cache_entry_of_another_shape_counts_as_no_kept_times(stored):
    config = type("Config", (), {"cache": FakeCache({suite_groups.SECONDS_KEY: stored})})()
    assert suite_groups.kept_seconds(config) == {}


def test_the_seconds_are_kept_in_a_real_run_and_the_next_run_starts_three_workers(tmp_path):
    (tmp_path / "test_a.py").write_text("def test_one():\n    pass\n\ndef test_two():\n    pass\n")
    (tmp_path / "test_b.py").write_text("def test_three():\n    pass\n")
    (tmp_path / "build").mkdir()
    # the plugin before xdist, as `make test` loads them (addopts, then installed plugins): its hook must still win
    run = [sys.executable, "-m", "pytest", "-p", "workbook.course.suite_groups", "-p", "xdist", "-n", "auto"]
    env = dict(os.environ, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1", WORKBOOK_BUILD_DIR=str(tmp_path / "build"))
    env.pop("PYTEST_XDIST_AUTO_NUM_WORKERS", None)
    done = subprocess.run(run, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0 and "3 passed" in done.stdout, done.stdout + done.stderr
    assert "created: 2/2 workers" in done.stdout  # nothing kept yet
    kept = json.loads((tmp_path / ".pytest_cache" / "v" / "workbook" / "test-seconds").read_text())
    assert set(kept) == {"test_a.py::test_one", "test_a.py::test_two", "test_b.py::test_three"}

    done = subprocess.run(run, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0 and "3 passed" in done.stdout, done.stdout + done.stderr
    assert "created: 3/3 workers" in done.stdout  # the kept seconds add up to far less than a cold suite's

    done = subprocess.run([*run, "-p", "no:cacheprovider"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0 and "3 passed" in done.stdout, done.stdout + done.stderr
    assert "created: 2/2 workers" in done.stdout  # without the cache, nothing is known of the last run


class IniConfig:
    """What the worker-count hook reads of pytest's config: the root folder, the cache_dir setting, --cache-clear."""

    def __init__(self, root, cache_dir=".pytest_cache", cache_clear=False):
        self.rootpath, self.cache_dir, self.cache_clear = root, cache_dir, cache_clear

    def getini(self, name):
        assert name == "cache_dir"
        if self.cache_dir is None:
            raise ValueError("unknown configuration value: 'cache_dir'")  # as pytest says with no:cacheprovider
        return self.cache_dir

    def getoption(self, name, default):
        assert name == "cacheclear"
        return self.cache_clear


@pytest.fixture
def last_run(tmp_path, monkeypatch):
    """Writes what a finished run keeps (its seconds per test, and where and with which torch it built) into
    tmp_path/.pytest_cache, with this run building in tmp_path/build."""
    monkeypatch.delenv("PYTEST_XDIST_AUTO_NUM_WORKERS", raising=False)
    monkeypatch.setattr(suite_groups, "BUILD_DIR", tmp_path / "build")
    (tmp_path / "build").mkdir()
    values = tmp_path / ".pytest_cache" / "v"

    def write(kept, builds="this run's"):
        for key, value in ((suite_groups.SECONDS_KEY, kept), (suite_groups.BUILDS_KEY, builds)):
            if value is None:
                continue
            value = suite_groups.builds_in_use() if value == "this run's" else value
            (values / key).parent.mkdir(parents=True, exist_ok=True)
            (values / key).write_text(value if isinstance(value, str) else json.dumps(value))

    return write


@pytest.mark.parametrize(
    ("kept", "workers"),
    [
        (None, 2),  # no file: a first run
        ("not json", 2),
        ({"t::a": 600.0, "t::b": 500.0}, 3),  # 1,100 s: the last run's builds were done
        ({"t::a": 600.0, "t::b": 599.9}, 3),
        ({"t::a": 600.0, "t::b": 600.0}, 2),  # 1,200 s: it compiled
        ({"t::a": 900.0, "t::b": "300"}, 3),  # what is not a number does not count
        ({"t::a": 900.0, "t::b": 10**400}, 3),  # nor what no float can hold
    ],
)
def test_auto_starts_three_workers_only_after_a_run_whose_tests_took_under_the_warm_total(
    tmp_path, last_run, kept, workers
):
    last_run(kept)
    assert suite_groups.pytest_xdist_auto_num_workers(IniConfig(tmp_path)) == workers


def test_three_workers_only_where_the_last_run_built_here_with_this_torch(tmp_path, last_run):
    warm = {"t::a": 100.0}
    last_run(warm, builds=None)  # kept by a version that did not say where it built
    assert suite_groups.pytest_xdist_auto_num_workers(IniConfig(tmp_path)) == 2
    last_run(warm, builds={**suite_groups.builds_in_use(), "build_dir": str(tmp_path / "build-torch-2.14.1")})
    assert suite_groups.pytest_xdist_auto_num_workers(IniConfig(tmp_path)) == 2  # make test-torch built elsewhere
    last_run(warm, builds={**suite_groups.builds_in_use(), "torch": "2.12.0"})
    assert suite_groups.pytest_xdist_auto_num_workers(IniConfig(tmp_path)) == 2  # torch changed since
    last_run(warm)
    assert suite_groups.pytest_xdist_auto_num_workers(IniConfig(tmp_path)) == 3
    assert suite_groups.pytest_xdist_auto_num_workers(IniConfig(tmp_path, cache_clear=True)) == 2
    (tmp_path / "build").rmdir()
    assert suite_groups.pytest_xdist_auto_num_workers(IniConfig(tmp_path)) == 2  # the builds were deleted


def test_the_cache_is_found_where_pytest_keeps_it_and_no_cache_means_two(tmp_path, last_run, monkeypatch):
    last_run({"t::a": 1.0})
    (tmp_path / ".pytest_cache").rename(tmp_path / "elsewhere")
    assert suite_groups.pytest_xdist_auto_num_workers(IniConfig(tmp_path, "elsewhere")) == 3
    monkeypatch.setenv("WHERE_THE_CACHE_IS", str(tmp_path / "elsewhere"))
    assert suite_groups.pytest_xdist_auto_num_workers(IniConfig(tmp_path, "$WHERE_THE_CACHE_IS")) == 3
    monkeypatch.setenv("HOME", str(tmp_path))
    assert suite_groups.pytest_xdist_auto_num_workers(IniConfig(Path("/"), "~/elsewhere")) == 3
    assert suite_groups.pytest_xdist_auto_num_workers(IniConfig(tmp_path, None)) == 2


def test_xdists_own_variable_chooses_when_it_is_a_number(tmp_path, last_run, monkeypatch):
    last_run({"t::a": 1.0})
    monkeypatch.setenv("PYTEST_XDIST_AUTO_NUM_WORKERS", "5")
    assert suite_groups.pytest_xdist_auto_num_workers(IniConfig(tmp_path)) is None  # xdist's hook then reads it
    monkeypatch.setenv("PYTEST_XDIST_AUTO_NUM_WORKERS", "three")  # xdist would count the CPUs
    assert suite_groups.pytest_xdist_auto_num_workers(IniConfig(tmp_path)) == 3
