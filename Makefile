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

# The system tier: suites tagged `.system` (headless Chromium, SeaweedFS, the built binary as a child process).
# They run after the unit and integration tiers, in a `swift test` of their own, so that browsers timing a
# video do not share the two cores with every other test (TierTests keeps this list equal to the tags). A test's
# id is `Target.Suite/test()/File.swift:line`: the pattern names suites, not the files they are in.
SYSTEM_SUITES = AlphaVideoEnginesTests|AlphaVideoOutputTests|AnimatedAVIFFileTests|AnimatedFormatsTests|AnimatedWebPOutputTests|BatchTests|BrowserRouteTests|BrowserTimingTests|ChildProcessTests|ConvertCommandTests|CorpusTests|DemoPageTests|DeployTests|NegotiatedImageTests|OperationsTests|PageBytesTests|PageFidelityTests|PlayerScriptTests|PostgresBatchTests|PostgresQueueTests|S3StoreTests|ThreadedEncodeTests|TracingTests

# Of the system tier, the suites that make AVIFs (tens of CPU-seconds each in a debug build) run last, in a `swift test`
# of their own: beside them, the timing-bound system tests (descriptor limits, SIGTERM drains, the fleet's job table
# read from another node) starved and failed.
HEAVY_SUITES = AnimatedAVIFFileTests|BatchTests|NegotiatedImageTests|PageBytesTests|PageFidelityTests

test: test-deps lint
	swift build --build-tests
	swift test --skip-build --skip '\.($(SYSTEM_SUITES))/'
	swift test --skip-build --filter '\.($(SYSTEM_SUITES))/' --skip '\.($(HEAVY_SUITES))/'
	swift test --skip-build --filter '\.($(HEAVY_SUITES))/'
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
