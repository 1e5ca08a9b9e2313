# Entry points of the course. Everything (system packages when root, venv, Horovod build) is
# installed on first use and reused afterwards: both targets are idempotent.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= $(CURDIR)/.venv
PY := $(VENV)/bin/python
export VENV PYTHON
export PATH := $(VENV)/bin:$(PATH)
# tf.keras = tf-keras (Keras 2), which Horovod's Keras API needs (TensorFlow >= 2.16 defaults to Keras 3)
export TF_USE_LEGACY_KERAS := 1

.PHONY: help env gpu book test test-fast check bench exercises lab clean cluster-start cluster-stop newcomer-check lab-cluster container-check

help:
	@echo "make book   - set up everything, execute every lesson (2 MPI ranks) and build _build/html"
	@echo "make test   - set up everything and run the whole test suite (what CI runs)"
	@echo "make test-fast - the tests that start no ranks, service, cluster, browser or book build (minutes)"
	@echo "make check  - print what Horovod was built with and run it on 2 ranks"
	@echo "make gpu    - (NVIDIA GPU + CUDA toolkit) Horovod with PyTorch and NCCL in .venv-gpu; GPU_DRY_RUN=1: print the build only"
	@echo "make bench  - run the benchmark suite and update book/data/bench"
	@echo "make exercises - regenerate exercises/ and solutions/ from their sources"
	@echo "make lab    - JupyterLab on the course: lessons open as notebooks (LAB_ARGS='--port N --token T --ip A')"
	@echo "make cluster-start / cluster-stop - a 2-node Slurm cluster on this machine (see slurm/)"
	@echo "make lab-cluster INVENTORY=ansible/inventory.ini - (instructors) the course lab on your nodes (ansible/README.md)"
	@echo "make hub ROSTER=roster.csv - (root) JupyterHub for a class on this machine: an account per learner, on 127.0.0.1 (HUB_ARGS='--port N --memory 2G --cpus 1')"
	@echo "make hub-stop - stop the class hub, every learner's server and its proxy"
	@echo "make container-check - (root) build container/Containerfile with Podman (once per set-up change) and run make check + lesson 03 in it"
	@echo "make newcomer-check - (root) the README's set-up, make check and one 2-rank lesson on a fresh Debian 13 (chroot)"

env:
	@bash tools/setup_env.sh

# the GPU route (tools/setup_gpu.sh): its own venv, GPU_VENV; then $(GPU_VENV)/bin/hvdcourse-check --gpu
GPU_VENV ?= $(CURDIR)/.venv-gpu
export GPU_VENV
gpu:
	@bash tools/setup_gpu.sh

book: env
	$(PY) -m hvdcourse.course.book.book_build

# the tests also need the system packages that a learner does not (Chromium, shellcheck, Ansible):
# tools/setup_env.sh installs them as root when WITH_TEST_PACKAGES=1 (a prerequisite sees this too)
test: export WITH_TEST_PACKAGES = 1
# TEST_WORKERS=N (N > 0) runs the tests in N processes (pytest-xdist); tests/conftest.py keeps
# together the tests that share a module's runs or a service (the local Slurm cluster, Prometheus,
# Ray). The default, 0, runs them in one process: on the course's 2-core machine 3 workers beside the
# book build raised the load to 10-15, where Ray's raylet does not start (measured 2026-11-26).
TEST_WORKERS ?= 0
test: env
	$(PY) -m pytest $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder) tests

# the developer's loop: every test that starts no multi-rank job, service, cluster, hub, browser,
# container or book build (the markers in pyproject.toml, set in tests/conftest.py), in a few minutes;
# CI runs the whole `make test`
test-fast: export WITH_TEST_PACKAGES = 1
test-fast: env
	$(PY) -m pytest -m "not (book or hub or container or slurm or browser or service or ranks)" tests

check: env
	$(PY) -m hvdcourse.course.check.envcheck --ranks 2

bench: env
	$(PY) -m hvdcourse.course.bench.suite --out book/data/bench

exercises: env
	$(PY) -m hvdcourse.course.exercises.generate

# Ctrl-C stops the lab, its kernels and their MPI engines
lab: env
	$(PY) -m hvdcourse.course.services.lab $(LAB_ARGS)

cluster-start: env
	@bash tools/local_cluster_start.sh

cluster-stop:
	@bash tools/local_cluster_stop.sh

newcomer-check:
	@bash tools/debian13_check.sh

INVENTORY ?= ansible/inventory.ini
lab-cluster:
	@command -v ansible-playbook >/dev/null || { echo "lab-cluster: no ansible-playbook. Install it: sudo apt-get install ansible-core" >&2; exit 1; }
	@test -f "$(INVENTORY)" || { echo "lab-cluster: no inventory $(INVENTORY). Copy ansible/inventory.example.ini and put in your nodes (ansible/README.md)" >&2; exit 1; }
	cd ansible && ansible-playbook -i "$(abspath $(INVENTORY))" site.yml $(ANSIBLE_ARGS)

container-check:
	@bash tools/container_check.sh

# the class hub (hvdcourse/course/hub/): tools/setup_hub.sh installs it under /opt/hvdcourse-hub once
.PHONY: hub hub-stop
ROSTER ?= roster.csv
hub: env
	@bash tools/setup_hub.sh
	$(PY) -m hvdcourse.course.hub start --roster "$(ROSTER)" $(HUB_ARGS)

hub-stop:
	$(PY) -m hvdcourse.course.hub stop

clean:
	rm -rf _build .pytest_cache
