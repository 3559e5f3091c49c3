# Quartermaster. `make demo` runs the main story, `make test` everything CI runs.
CARGO ?= cargo
QM := target/release/qm

.PHONY: compare-speed compare-evaluation dist clients nats-clients bench-console docs test-phases images-test fuzz bench-runtimes images-torch aws-clients chromium evaluate up down check-deploy demo simulate bins bench-services bench-fleet bench-checkpoint bench-peers test lint check-core-deps unit integration images images-infra bench bench-pass bench-sim build clean

## demo: the three-share story on a real Quartermaster (NATS + Garage in
## containers, the four services, the example trainer), live, with a summary
demo: images-infra bins
	@target/debug/qm-demo

## simulate: the same story on the simulator (virtual time, instant)
simulate: build
	@echo "== qm simulate examples/scenarios/three-shares.yaml"
	@$(QM) simulate examples/scenarios/three-shares.yaml

build:
	$(CARGO) build --release --locked -p qm

bins:
	$(CARGO) build --locked --workspace --bins

## test: formatting, lints, the purity rule, the deploy files, the book and
## its links, unit tests, and the integration tests against real servers in
## containers (builds the images they run); prints each phase's time at the end
TEST_PHASES := lint check-core-deps check-deploy docs unit clients bins images-test images-torch aws-clients nats-clients chromium integration
test:
	@tools/phases.sh $(TEST_PHASES)

test-phases:
	@echo $(TEST_PHASES)

## docs: the book (mdBook, into target/book) with every link checked, in the
## Markdown sources and in the rendered HTML
docs:
	docs/build.sh

## lint: formatting, clippy (functions over 150 lines refused, clippy.toml),
## and no source file over 800 lines outside tests
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --locked --workspace --all-targets -- -D warnings
	tools/check-file-sizes.sh

# The scheduling core, the wire types and the simulator must not depend on
# an async runtime, NATS, the AWS SDK, OpenTelemetry or any I/O crate: the
# live scheduler and the simulator share them unchanged.
PURE_CRATES := qm-core qm-wire qm-sim
check-core-deps:
	@for c in $(PURE_CRATES); do \
	  tree=$$($(CARGO) tree --locked -p $$c -e normal --prefix none --format '{p}') || exit 1; \
	  deps=$$(echo "$$tree" | awk '{print $$1}' | sort -u); \
	  bad=$$(echo "$$deps" | grep -E '^(tokio|async-nats|async-std|aws-|hyper|reqwest|mio|futures|opentelemetry|tracing-opentelemetry)' || true); \
	  if [ -n "$$bad" ]; then echo "$$c must stay pure, but depends on: $$(echo $$bad | tr '\n' ' ')"; exit 1; fi; \
	  echo "$$c is pure ($$(echo "$$deps" | wc -l) crates, none of them I/O)"; \
	done

## check-deploy: the Kubernetes manifests against the Kubernetes schemas
## (offline, kubernetes-validate --strict; no cluster is contacted), and the
## compose files as compose reads them
check-deploy:
	deploy/kubernetes/check.sh
	deploy/compose/check.sh

## unit: every test but the end-to-end ones, from one build of the whole
## workspace's tests (tools/test-binaries.sh: the unit tests, the end-to-end
## tests and `make bins` then share one feature set, so nothing builds twice)
unit:
	tools/test-binaries.sh unit

## fuzz: every decoder of outside bytes (wire messages, SigV4, the gateway's
## bodies, tenancy and settings files, scenarios, the ITP import) with
## FUZZ_CASES (20,000) cases each; `make test` runs 256. A failure is kept in
## proptest-regressions/ and replayed first: commit it with the fix.
FUZZ_CASES ?= 20000
fuzz:
	PROPTEST_CASES=$(FUZZ_CASES) $(CARGO) test --locked --release -p qm-fuzz
	PROPTEST_CASES=$(FUZZ_CASES) $(CARGO) test --locked --release -p qm-gateway fuzz

## images: every image, built locally: NATS and Garage (S3) for the tests, and
## one per service (quartermaster/qm-<service>:<version> and :local, from the
## release binaries; deploy/README.md)
images: images-infra
	deploy/images/services.sh

## clients: the Python client (clients/python) pip-installed from the
## checkout with its pinned tools (~/.cache/quartermaster): its models are
## what docs/asyncapi.yaml makes, its own tests pass, and the AsyncAPI
## document is valid (an AsyncAPI 3.0 parser, every reference, every golden
## fixture against the schema it claims)
clients:
	@venv=$$(clients/python/setup.sh) && \
	  "$$venv/bin/python" clients/python/tools/generate.py --check && \
	  (cd clients/python && "$$venv/bin/python" -m unittest discover -s tests) && \
	  "$$venv/bin/python" clients/python/tools/check_asyncapi.py

## dist: release files in dist/: a tarball of every binary with the systemd
## units and example configurations, a Debian package per service (hardened
## systemd unit, /etc/quartermaster/<service>.yaml) and one for qm, and
## the Python client's wheel, and SHA256SUMS (deploy/packages/build.sh;
## docs/packages.md)
dist:
	deploy/packages/build.sh

## up: the whole system on this host with the compose file (deploy/compose):
## three NATS servers, S3, every service in its own container; `make down`
## stops it (keeping its volumes)
up: images
	deploy/compose/up.sh

down:
	deploy/compose/down.sh

## images-test: the service images the container tests run (rolling upgrade,
## compose), from the debug binaries `make bins` built: the same images
## `make images` makes from release binaries, without a release build
images-test: images-infra bins
	QM_IMAGE_PROFILE=dev QM_SKIP_BUILD=1 deploy/images/services.sh

## images-torch: the PyTorch training image the container tests run
## (quartermaster/pytorch-trainer:local, or $QM_TORCH_IMAGE): a Debian root
## file system from this host's package sources with python3-torch, made
## once with mmdebstrap and cached in ~/.cache/quartermaster
images-torch:
	examples/pytorch/build-image.sh

## images-infra: the NATS and Garage images the integration tests and the demo run
images-infra:
	deploy/images/build.sh

## integration: end-to-end tests against real servers in containers, the
## services as processes and, for the story, the rolling upgrade and the
## compose file, in containers from their images (so it builds them)
integration: images-test images-torch bins aws-clients nats-clients chromium
	tools/test-binaries.sh integration

## chromium: headless Chromium, which renders the what-if report in the
## tests, and chromedriver, through which the console's tests drive it
chromium:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || { [ "$$(id -u)" = 0 ] && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || { echo "chromium: needed by the what-if report test (Debian's package chromium)" >&2; exit 2; }
	@command -v chromedriver >/dev/null || [ -x /usr/lib/chromium/chromedriver ] || { [ "$$(id -u)" = 0 ] && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium-driver >/dev/null; } || { echo "chromium: the console's tests need chromedriver (Debian's package chromium-driver)" >&2; exit 2; }

## evaluate: the what-if report on the full ITP-2021 trace (../shared/traces,
## or QM_TRACES), both mappings, into docs/evaluation/ (docs/evaluation.md)
QM_TRACES ?= ../shared/traces
evaluate:
	$(CARGO) build --release --locked -p qm
	bench/evaluate.sh "$(QM_TRACES)"

## compare-evaluation: the what-if figures at BASE (default HEAD~1) and at
## the working tree, both mappings, compared to the last digit (a change
## that should move nothing, such as a refactoring, shows it)
BASE ?= HEAD~1
compare-evaluation:
	bench/compare-evaluation.sh "$(BASE)"

## compare-speed: the pass benchmarks and the million-job simulation at
## BASE and at the working tree, alternately, with the ratio of medians
compare-speed:
	bench/compare-speed.sh "$(BASE)"

## nats-clients: NATS's own Python client (nats-py, pinned), which the
## tests connect with using the credentials `qm auth` writes
nats-clients:
	@integration-tests/nats-clients/setup.sh >/dev/null

## aws-clients: the pinned boto3 and AWS CLI the gateway tests drive, in a
## virtual environment of their own under ~/.cache/quartermaster
aws-clients:
	@integration-tests/aws/setup.sh >/dev/null

## bench: the scheduling-pass benchmarks and the simulator's throughput
bench: bench-pass bench-sim

bench-pass:
	$(CARGO) bench --locked -p qm-core --bench pass --bench environment

bench-sim:
	$(CARGO) bench --locked -p qm-sim --bench simulate

## bench-runtimes: what the container runtime adds to submit-to-RUNNING,
## against host processes, in the same run (the PyTorch image)
bench-runtimes: images-infra images-torch
	$(CARGO) build --locked --release --bins
	QM_BIN_DIR=target/release target/release/qm-bench-runtimes

## bench-services: jobs/s and submit-to-RUNNING latency of the real services
bench-services: images-infra
	$(CARGO) build --locked --release --bins
	QM_BIN_DIR=target/release target/release/qm-bench

## bench-fleet: the services at fleet scale (100 executors x 8, a 100,000-job
## backlog, 500 jobs/s steady, takeover after 1,000,000 finished jobs, stored
## messages a job); the QM_BENCH_* variables in
## integration-tests/src/bin/qm-bench-fleet.rs size it; QM_BENCH_PERF_DIR=dir
## adds flame graphs (perf; inferno is installed the first time)
bench-fleet: images-infra
	$(CARGO) build --locked --release --bins
	@if [ -n "$$QM_BENCH_PERF_DIR" ] && ! command -v inferno-flamegraph >/dev/null && [ ! -x "$$HOME/.cache/quartermaster/inferno/bin/inferno-flamegraph" ]; then \
		echo "bench-fleet: installing inferno (flame graphs) into ~/.cache/quartermaster/inferno"; \
		$(CARGO) install --quiet --root "$$HOME/.cache/quartermaster/inferno" inferno --version 0.12.8 --no-default-features --features cli,multithreaded; fi
	PATH="$$HOME/.cache/quartermaster/inferno/bin:$$PATH" QM_BIN_DIR=target/release target/release/qm-bench-fleet

## bench-console: the web console's server time per page, an empty queue
## against QM_BENCH_JOBS (100,000) waiting jobs, in the same run
bench-console: images-infra
	$(CARGO) build --locked --release --bins
	QM_BIN_DIR=target/release target/release/qm-bench-console

## bench-checkpoint: checkpoint upload and restore against rclone on the same
## S3 server (1 GiB as 8 and as 1,000 files, and an unchanged re-commit);
## QM_BENCH_CKPT_* in integration-tests/src/bin/qm-bench-checkpoint.rs size it
bench-checkpoint: images-infra
	command -v rclone >/dev/null || { [ "$$(id -u)" = 0 ] && apt-get update -qq && apt-get install -y -qq rclone >/dev/null; } || { echo "bench-checkpoint: needs rclone (Debian's package)" >&2; exit 2; }
	$(CARGO) build --locked --release --bins
	QM_BIN_DIR=target/release target/release/qm-bench-checkpoint

## bench-peers: the same 3,000 trivial jobs through a single-host Slurm
## (configured for high throughput) and through Quartermaster, interleaved
bench-peers: images-infra
	$(CARGO) build --locked --release --bins
	QM_BIN_DIR=target/release bench/peers/run.sh

clean:
	$(CARGO) clean
