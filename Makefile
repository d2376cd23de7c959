# Two entry points for a fresh clone: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# matplotlib for the demo's plots only: `make test` does not need it.
PLOT_STAMP := $(VENV)/.plot-installed

.PHONY: demo test test-aarch64 install extension clean lint lint-cpp

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[test,openvino]'
	touch $(STAMP)

$(PLOT_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[plot]'
	touch $(PLOT_STAMP)

# The OpenVINO extension (csrc/openvino), compiled against the installed openvino wheel; a
# no-op when the library for these sources and this openvino release exists already.
extension: $(STAMP)
	$(BIN)/python -m dcd_deploy.openvino._build

install: $(STAMP) extension

# The story on one screen: every long table goes to a file in out/ (one line says where),
# progress lines are dropped (-q; errors still print), and the last step,
# `dcd-bench summary out/`, tells the result from the JSON files the steps wrote. The
# latency run reproduces the paper's comparison (torch-paper first); the frontier runs
# --quick on the fastest runtime (openvino-fused, the extension built above), a few runs
# per model to keep the demo near 5 minutes: its ms are a sketch, `dcd-bench frontier` is
# the measurement.
demo: $(PLOT_STAMP) extension
	mkdir -p out
	$(BIN)/dcd-bench complexity -q --markdown out/complexity.md --json out/complexity.json
	$(BIN)/dcd-export mobilenetv2_100_dcd -o out/mobilenetv2_100_dcd.onnx
	$(BIN)/dcd-validate mobilenetv2_100_dcd out/mobilenetv2_100_dcd.onnx --batch-sizes 1,4
	$(BIN)/dcd-export mobilenetv2_100_dcd --mode fused -o out/mobilenetv2_100_dcd.fused.onnx
	@echo "timing static vs DCD MobileNetV2 x0.5 and x1.0 on five backends, one thread (about 2.5 minutes) ..."
	$(BIN)/dcd-bench latency -q --threads 1 --json out/bench.json --markdown out/bench.md --plot out/bench.png > out/bench.txt
	@echo "the latency tables: out/bench.txt (also out/bench.md, out/bench.png)"
	@echo "timing the 19 models of Table 4 with the fused kernels, --quick (about 1.5 minutes) ..."
	$(BIN)/dcd-bench frontier -q --quick --backend openvino-fused --json out/frontier.json --markdown out/frontier.md --plot out/frontier.png > out/frontier.txt
	@echo "the frontier table: out/frontier.txt (also out/frontier.md, out/frontier.png)"
	@echo
	$(BIN)/dcd-bench summary out/bench.json out/frontier.json

# Two pytest workers (pytest-xdist), one per core of the 2-core CI machine; a test file's
# tests stay on one worker (--dist loadfile), so module fixtures are built once.
# `make test TEST_WORKERS=0` runs in one process.
TEST_WORKERS ?= 2
test: $(STAMP) extension lint
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile

# ruff (pyflakes, pycodestyle, bugbear, pyupgrade, import order) and ruff's formatter
# over the Python, configured in pyproject.toml; clang-format over csrc/ (lint-cpp).
lint: $(STAMP) lint-cpp
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The kernels' portable path cross-built for aarch64 and tested under qemu-user
# (tests/openvino/test_aarch64.py). The two Debian packages are installed when missing and
# this runs as root; otherwise they are named and the target fails.
test-aarch64: $(STAMP)
	@missing="$$($(BIN)/python -m dcd_deploy.openvino._cross --missing)"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing $$missing (apt-get)"; \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing || exit 1; \
	  else \
	    echo "make test-aarch64 needs the Debian packages: $$missing (as root: apt-get install $$missing)" >&2; \
	    exit 1; \
	  fi; \
	fi
	DCD_DEPLOY_REQUIRE_AARCH64=1 $(BIN)/python -m pytest -q tests/openvino/test_aarch64.py

# The C++ of csrc/ against its format (csrc/.clang-format; clang-format from the test
# extra, pinned in constraints.txt) and the 80-line limit on a function.
CPP_SOURCES = $(shell find csrc -name '*.cpp' -o -name '*.hpp' -o -name '*.inc' | sort)
lint-cpp: $(STAMP)
	$(BIN)/clang-format --dry-run --Werror $(CPP_SOURCES)
	$(BIN)/python csrc/function_lengths.py 80 $(CPP_SOURCES)

clean:
	rm -rf $(VENV) out .pytest_cache dcd_deploy/openvino/_build
