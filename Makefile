# Extending PyTorch: a workbook.
#   make lab    set up what is missing, then serve JupyterLab on notebooks/
#   make test   set up what is missing, then run the whole test suite
# Set-up is idempotent: when nothing changed it takes a second or two.

SHELL := /bin/bash
PYTHON ?= python3
# TORCH_VERSION (set by `make test-torch`) selects another torch than requirements.txt's, in a venv of its own.
TORCH_VERSION ?=
VENV := $(if $(TORCH_VERSION),.venv-torch-$(TORCH_VERSION),.venv)
PY := $(VENV)/bin/python
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

# What each Debian package provides, as "package:probe" (the probe tells whether it is present).
SYSTEM_NEEDS := g++:g++ cmake:cmake ninja-build:ninja ccache:ccache make:make \
                libopencv-dev:/usr/include/opencv4/opencv2/core.hpp python3-venv:ensurepip \
                chromium:chromium

.PHONY: setup lab test test-torch notebooks bench compile-times system-packages

setup: system-packages $(VENV)/.installed

# workbook/jupyterlab_settings/overrides.json changes JupyterLab's defaults (a learner's own settings still win):
# it turns off the news feed, so a first start does not ask about it. tests/test_browser.py runs this recipe.
lab: setup
	$(PY) -m jupyter lab --no-browser --ip=127.0.0.1 --notebook-dir=notebooks --LabApp.app_settings_dir=$(CURDIR)/workbook/jupyterlab_settings $(if $(filter 0,$(shell id -u)),--allow-root)

# pytest-xdist workers: one compiles while another runs Python. workbook/course/suite_groups.py chooses how many
# for -n auto (two, or three where the last run found its builds done; see README) and hands them whole chapters
# (a chapter's notebooks and the tests that share its files under build/ run on one).
# PYTEST_ARGS replaces the default arguments, e.g. make test PYTEST_ARGS=tests/test_build.py
PYTEST_ARGS ?= -n auto
test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

# The whole suite against another torch, outside `make test`:  make test-torch VERSION=2.14.1
# That torch as pip picks it (on Linux: its CUDA wheel, with the triton that torch requires rather than
# requirements.txt's pin) and the rest of requirements.txt go into .venv-torch-<VERSION>/; everything is
# built under build-torch-<VERSION>/, never in build/ (both are git-ignored).
# Stored notebook outputs are the pinned torch's: see README's "Other torch versions" for what differs.
test-torch:
	@[ -n "$(VERSION)" ] || { echo "Say which torch: make test-torch VERSION=2.14.1"; exit 1; }
	TORCH_VERSION=$(VERSION) WORKBOOK_BUILD_DIR=$(CURDIR)/build-torch-$(VERSION) $(MAKE) --no-print-directory test

# Regenerate notebooks/ from solutions/ (never over a learner's edits) and store real outputs.
notebooks: setup
	$(PY) -m workbook.course.generate --execute

# C++ ops against Python and native ones, side by side; prints a table (not a test).
bench: setup
	$(PY) -m workbook.bench

# Each translation unit's compile time (latest and slowest build) from the ninja logs under build/.
compile-times: setup
	$(PY) -m workbook.diagnostics.compile_times

# Your exercises, chapter by chapter: passed, failed, not attempted, or changed since last checked (from the
# record the checks keep in build/progress.json). Standard library only, so it needs no set-up.
.PHONY: progress
progress:
	@$(if $(wildcard $(PY)),$(PY),$(PYTHON)) -m workbook.course.progress

system-packages:
	@missing=""; \
	for need in $(SYSTEM_NEEDS); do \
	  package=$${need%%:*}; probe=$${need#*:}; \
	  case $$probe in \
	    /*) [ -e "$$probe" ] ;; \
	    ensurepip) $(PYTHON) -c 'import ensurepip' 2>/dev/null ;; \
	    *) command -v "$$probe" >/dev/null ;; \
	  esac || missing="$$missing $$package"; \
	done; \
	[ -z "$$missing" ] && exit 0; \
	if ! command -v apt-get >/dev/null; then \
	  echo "Missing system tools (Debian names):$$missing. Install them with your package manager," \
	       "or use the conda route: conda env create -f environment.yml"; exit 1; \
	fi; \
	if [ "$$(id -u)" = 0 ]; then sudo=""; \
	elif sudo -n true 2>/dev/null; then sudo="sudo"; \
	else echo "Missing system packages. Run:  sudo apt-get install -y$$missing  and then this command again."; exit 1; fi; \
	echo "Installing system packages:$$missing"; \
	$$sudo apt-get update -qq && \
	DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends$$missing >/dev/null || \
	  { echo "apt-get could not install:$$missing"; exit 1; }

$(VENV)/.installed: requirements.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV) || { echo "Could not create $(VENV) with $(PYTHON) -m venv."; exit 1; }
	@# On a terminal pip shows its download progress (torch is a large download); in logs it stays quiet.
	@# pip would compile each installed module to bytecode, one file after another (about 40 s of CPU here);
	@# compileall does the same work on every core. Like pip, it goes on past a file that does not compile, and
	@# one does: torch/testing/_internal/py312_intrinsics.py is Python 3.12, so compileall exits 1 on 3.11.
	$(PY) -m pip install $$([ -t 1 ] || echo --quiet) --disable-pip-version-check --no-compile \
	  $(if $(TORCH_VERSION),torch==$(TORCH_VERSION) -r <(grep -vE '^(torch|triton)==' requirements.txt),-r requirements.txt)
	@$(PY) -m compileall -qq -j 0 "$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" || true
	@$(PY) -c 'import sysconfig, pathlib; pathlib.Path(sysconfig.get_paths()["purelib"], "workbook.pth").write_text("$(CURDIR)\n")'
	@cp requirements.txt $@

# The CPU scatter kernels built with AddressSanitizer and UndefinedBehaviorSanitizer (and -Wall -Wextra -Werror),
# running their unit tests and the fuzz test. Not part of `make test`: about 2.5 minutes on 2 cores the first time
# (2 of them the build), 25 seconds later. Python is not instrumented, so the ASan runtime is preloaded, with
# libstdc++ (whose exceptions ASan intercepts); LeakSanitizer is off, as Python frees little at exit.
.PHONY: sanitize
sanitize: setup
	WORKBOOK_SANITIZE=1 ASAN_OPTIONS=detect_leaks=0 \
	LD_PRELOAD="$$(g++ -print-file-name=libasan.so) $$(g++ -print-file-name=libstdc++.so.6)" \
	$(PY) -m pytest -p no:cacheprovider tests/test_scatter.py tests/test_fuzz.py
