# The two commands of the README: `make run` starts the service, `make test` runs every test.
# Both install the Debian packages they need first (scripts/install-deps).

HOST ?= 127.0.0.1
PORT ?= 8080
CACHE_DIR ?= $(CURDIR)/cache

.PHONY: deps test-deps build run test lint bench

deps:
	@scripts/install-deps

test-deps:
	@scripts/install-deps --test

build: deps
	swift build -c release --product transcode-server

run: build
	.build/release/transcode-server serve --host $(HOST) --port $(PORT) --cache-directory $(CACHE_DIR)

lint:
	swift format lint --strict -r Sources Tests Package.swift

test: test-deps lint
	swift build --build-tests
	swift test
	# Fuzz smoke: each libFuzzer target under AddressSanitizer; a crash on the seeds fails the run.
	scripts/fuzz-coverage gif-prescan 60
	scripts/fuzz-coverage gif-path 60
	scripts/fuzz-coverage apng-path 30
	scripts/fuzz-coverage webp-path 30

bench: deps
	scripts/bench
