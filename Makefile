# The two commands of the README: `make run` starts the service, `make test` runs every test.
# Both install the Debian packages they need first (scripts/install-deps).

HOST ?= 127.0.0.1
PORT ?= 8080
CACHE_DIR ?= $(CURDIR)/cache

.PHONY: deps test-deps build run test lint bench dist

deps:
	@scripts/install-deps

test-deps:
	@scripts/install-deps --test

build: deps
	swift build -c release --product transcode-server

run: build
	.build/release/transcode-server serve --host $(HOST) --port $(PORT) --cache-directory $(CACHE_DIR)

lint:
	swift format lint --strict -r Sources Tests Package.swift Client/Sources Client/Tests Client/Package.swift
	node --check Sources/TranscodeServer/Resources/player.js
	node --check Sources/TranscodeServer/Resources/demo.js

# Three tiers, derived from each test's tags by scripts/test-tiers (this Swift cannot filter by tag; the tags are in
# Tests/TestSupport/Tags.swift): tier 1, the tests that run in the test process alone; the system tier, those that
# start another program (a browser, PostgreSQL, SeaweedFS, a child process), in a `swift test` of their own so that
# browsers timing a video do not share the two cores with every other test; and last the `.heavy` ones (tens of
# CPU-seconds each in a debug build), beside which the timing-bound system tests (descriptor limits, SIGTERM drains,
# the fleet's job table read from another node) starved and failed. `--check` first: every test `swift test list`
# gives is in exactly one tier.
test: test-deps lint
	swift build --build-tests
	scripts/test-tiers --check
	tier=$$(scripts/test-tiers fast) && swift test --skip-build $$tier
	tier=$$(scripts/test-tiers system) && swift test --skip-build $$tier
	tier=$$(scripts/test-tiers heavy) && swift test --skip-build $$tier
	# The client package (Client/, a package of its own: an app that adds it resolves swift-crypto alone); its tests
	# start the server binary built above.
	cd Client && swift build --build-tests && swift test --skip-build
	# Fuzz smoke: each libFuzzer target under AddressSanitizer; a crash on the seeds fails the run.
	scripts/fuzz-coverage gif-prescan 60
	scripts/fuzz-coverage gif-path 60
	scripts/fuzz-coverage apng-path 30
	scripts/fuzz-coverage webp-path 30

bench: deps
	scripts/bench

# A tarball that runs without Swift (static Swift runtime; Debian's FFmpeg libraries): dist/*.tar.gz.
dist: deps
	scripts/dist
