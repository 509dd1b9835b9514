"""The groups that keep a chapter's notebooks and the tests sharing its files on one pytest-xdist worker."""

from pathlib import Path

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


def test_without_kept_times_the_group_with_most_tests_goes_first():
    _, (first, second) = schedule(kept={})
    assert (first.handed, second.handed) == (["test_many"], ["test_slow"])


def test_with_kept_times_the_longest_group_goes_first_and_a_worker_gets_more_only_at_its_last_test():
    scheduler, (first, second) = schedule(kept={"test_many": 1.0, "test_slow": 30.0, "test_medium": 5.0})
    assert (first.handed, second.handed) == (["test_slow"], ["test_medium"])
    slow = [COLLECTION.index(nodeid) for nodeid in COLLECTION if "test_slow" in nodeid]
    scheduler.mark_test_complete(first, slow[0])
    assert first.handed == ["test_slow"]  # two tests left: no more yet
    scheduler.mark_test_complete(first, slow[1])
    assert first.handed == ["test_slow", "test_many"]  # down to its last test: the next group
    assert second.handed == ["test_medium"]


def test_a_group_with_no_kept_time_is_expected_to_take_its_tests_times_the_kept_seconds_per_test():
    assert suite_groups.expected_seconds({"a": 10.0, "b": 2.0}, {"a": 5, "b": 1, "c": 3}) == {
        "a": 10.0,
        "b": 2.0,
        "c": 6.0,
    }
    assert suite_groups.expected_seconds({}, {"c": 3}) == {"c": 3.0}


def test_each_groups_seconds_are_added_up_and_kept_with_the_groups_this_run_did_not_run():
    cache = FakeCache({suite_groups.SECONDS_KEY: {"test_other": 7.0, "test_slow": 99.0}})
    recorder = suite_groups.GroupSeconds(cache)
    for nodeid, seconds in [("tests/test_slow.py::test_a", 1.5), ("tests/test_slow.py::test_b", 2.0)]:
        recorder.pytest_runtest_logreport(type("Report", (), {"nodeid": nodeid, "duration": seconds})())
    recorder.pytest_sessionfinish()
    assert cache[suite_groups.SECONDS_KEY] == {"test_other": 7.0, "test_slow": 3.5}
