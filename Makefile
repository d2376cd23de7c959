# Two entry points for a fresh clone: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# matplotlib for the demo's plots only: `make test` does not need it.
PLOT_STAMP := $(VENV)/.plot-installed

.PHONY: demo test install extension clean

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

# The latency run reproduces the paper's comparison (torch-paper first). The frontier runs
# --quick on torch-deploy (a few runs per model, no ONNX export of the 19 models: about 40 s
# less) to keep the demo under 6 minutes: its ms are a sketch; `dcd-bench --frontier` is
# the measurement (ONNX Runtime).
demo: $(PLOT_STAMP) extension
	$(BIN)/dcd-bench --complexity
	mkdir -p out
	$(BIN)/dcd-export mobilenetv2_100_dcd -o out/mobilenetv2_100_dcd.onnx
	$(BIN)/dcd-validate mobilenetv2_100_dcd out/mobilenetv2_100_dcd.onnx --batch-sizes 1,4
	$(BIN)/dcd-export mobilenetv2_100_dcd --mode fused -o out/mobilenetv2_100_dcd.fused.onnx
	$(BIN)/dcd-bench --threads 1 --json out/bench.json --markdown out/bench.md --plot out/bench.png
	$(BIN)/dcd-bench --frontier --quick --backends torch-deploy --json out/frontier.json --markdown out/frontier.md --plot out/frontier.png

test: $(STAMP) extension
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) out .pytest_cache dcd_deploy/openvino/_build
