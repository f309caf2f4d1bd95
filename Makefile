# Kairos entry points. `make demo` runs the main job on the local lab; `make test` runs
# every check. Both install what they need first (`make setup` is idempotent).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
LAB_DIR := .lab
CASSANDRA_LIB := $(LAB_DIR)/cassandra/install/lib
CASSANDRA_VERSION := $(shell sed -n 's:.*<version>\(5\.[0-9.]*\)</version>.*:\1:p' lab/pom.xml)
ANSIBLE_PLAYBOOK := $(BIN)/ansible-playbook
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
# Molecule and ansible-lint call ansible-* by name: the venv comes first.
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export ANSIBLE_FORCE_COLOR := 0
export PYTHONDONTWRITEBYTECODE := 1

.PHONY: help setup setup-lab setup-lab-system setup-packages setup-system setup-system-then-cassandra setup-python \
        setup-cassandra lab-up lab-down lab-status \
        test test-unit test-integration test-molecule lint demo demo-redis clean

help:  ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-16s %s\n", $$1, $$2}'

setup: setup-python setup-system-then-cassandra  ## Install everything (idempotent)

# pip needs no Debian package, Maven does: under -j2 (.ci/run) the Python packages install
# beside the Debian packages and then the Cassandra jars.
setup-system-then-cassandra: setup-system
	@$(MAKE) -s setup-cassandra

# The demo needs the lab only; the tests also need Chromium (the report's browser test), cron
# (the autopilot's cron test) and promtool.
LAB_PACKAGES := openjdk-17-jre-headless maven redis-server redis-tools iproute2
setup-lab: setup-lab-system setup-python setup-cassandra  ## What the demo needs (idempotent)

setup-lab-system:
	@$(MAKE) -s setup-packages PACKAGES="$(LAB_PACKAGES)"

setup-packages:
	@missing=""; \
	for pkg in $(PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$pkg 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$pkg"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "setup: installing Debian packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	else echo "setup: Debian packages present"; fi

setup-system:  ## Debian packages: Java 17, Maven, Redis, Chromium, cron, promtool, the Redis exporter, sshd (only when missing)
	@$(MAKE) -s setup-packages PACKAGES="$(LAB_PACKAGES) chromium cron"
	@# promtool (tests of docs/prometheus) comes with Debian's prometheus, the Redis exporter
	@# (the Prometheus workload source, docs/prometheus.md) with prometheus-redis-exporter,
	@# sshd (molecule/cassandra reaches two nodes over SSH) with openssh-server.
	@# None of their services may run (the tests start their own processes): a policy-rc.d
	@# answering 101 (unless one exists) keeps the packages' services from starting, and under
	@# systemd the services installed here are disabled so that they do not start at boot either.
	@missing=""; \
	for pkg in prometheus prometheus-redis-exporter openssh-server; do \
	  dpkg-query -W -f='$${Status}' $$pkg 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$pkg"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "setup: installing Debian packages:$$missing (their services are not started)"; \
	  policy=""; \
	  if [ ! -e /usr/sbin/policy-rc.d ]; then \
	    policy=/usr/sbin/policy-rc.d; printf '#!/bin/sh\nexit 101\n' > $$policy; chmod 755 $$policy; \
	  fi; \
	  if apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	       apt-get install -y -qq --no-install-recommends $$missing >/dev/null; then rc=0; else rc=1; fi; \
	  if [ -n "$$policy" ]; then rm -f $$policy; fi; \
	  if [ -d /run/systemd/system ]; then \
	    for pkg in $$missing; do svc=$${pkg/#openssh-server/ssh}; \
	      systemctl disable --quiet $$svc 2>/dev/null || true; \
	      if systemctl is-active --quiet $$svc; then \
	        echo "setup: the $$svc service runs: stop it with systemctl stop $$svc" >&2; exit 1; fi; \
	    done; \
	  fi; \
	  exit $$rc; \
	fi

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	@echo "setup: installing Python packages into $(VENV)"
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

setup-python: $(VENV)/.installed  ## Python venv with the planner and dev tools

$(CASSANDRA_LIB)/cassandra-all-$(CASSANDRA_VERSION).jar: lab/pom.xml
	@echo "setup: resolving cassandra-all $(CASSANDRA_VERSION) from Maven Central"
	mkdir -p $(CASSANDRA_LIB)
	mvn -B -q -f lab/pom.xml dependency:copy-dependencies -DincludeScope=runtime \
	    -DoutputDirectory=$(CURDIR)/$(CASSANDRA_LIB)
	@ls $(CASSANDRA_LIB) | wc -l | xargs echo "setup: jars in $(CASSANDRA_LIB):"

setup-cassandra: $(CASSANDRA_LIB)/cassandra-all-$(CASSANDRA_VERSION).jar  ## Cassandra jars for the lab

lab-up: setup-lab  ## Start the lab (3 Cassandra nodes, 6-node Redis Cluster) and wait for it
	@start=$$(date +%s); \
	$(ANSIBLE_PLAYBOOK) playbooks/lab_up.yml; \
	echo "lab-up: Cassandra UN and Redis cluster_state ok after $$(( $$(date +%s) - start )) s"

lab-down:  ## Stop every lab process by its pid
	@if [ -x $(ANSIBLE_PLAYBOOK) ]; then $(ANSIBLE_PLAYBOOK) playbooks/lab_down.yml; fi
	@bash tests/lab_leftovers.sh && echo "lab-down: no lab process left"

lab-status:  ## Show the ring, the Redis cluster and each node's envelope (limits and use)
	$(ANSIBLE_PLAYBOOK) playbooks/lab_status.yml

lint: setup-python  ## ansible-lint (production profile), ruff, mypy
	$(BIN)/ruff check planner library module_utils plugins tests bench
	$(BIN)/mypy
	$(BIN)/ansible-lint

test-unit: setup-python  ## Unit tests (no servers)
	$(BIN)/pytest tests/unit -q -n 2

test-integration: setup  ## Integration tests against the lab (started once, stopped at the end)
	$(BIN)/pytest tests/integration -q --durations=25

test-molecule: setup  ## Molecule scenarios of the cassandra and redis roles
	$(BIN)/molecule test -s redis
	$(BIN)/molecule test -s cassandra

test: setup  ## Everything: lint, unit, integration, Molecule
	bash tests/run_all.sh

demo: setup-lab  ## The main job on the local lab
	bash tests/demo.sh

demo-redis: setup-lab  ## The closed loop on the lab's Redis Cluster (a step applied under load)
	bash tests/demo_redis.sh

clean: lab-down  ## Stop the lab and remove its data
	rm -rf $(LAB_DIR)/cassandra/cass* $(LAB_DIR)/redis $(LAB_DIR)/molecule-*
