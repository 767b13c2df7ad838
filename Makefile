# The two commands of the README, and a few helpers.
.PHONY: demo test test-unit bench heap heap-write fuzz chaos crd reference model-check mutants cluster-up cluster-down release plugin

## Run GKO on the local control plane with a sample Gluesync install.
demo:
	hack/demo.sh

## Run the whole test suite: unit and cluster tests (cargo-nextest, concurrently), then the full model
## check. `hack/test.sh update::` runs one module of the cluster tests, `hack/test.sh <name>` one test.
test:
	hack/test.sh

## The tests that need no cluster (every crate's unit tests, the model check's quick runs): the inner loop.
test-unit:
	hack/test.sh --unit

## Fuzz the Conductor API's request parsing (SECONDS=60).
fuzz:
	hack/fuzz.sh $${SECONDS:-60}

## Random fault schedules: generated histories against GKO's invariants (SECONDS=120, CHAOS_SEED=<time>).
chaos:
	hack/chaos.sh $${SECONDS:-120}

## Model-check the update deeper than the test suite does (GKO_MODEL_STATES distinct states, default 2,000,000).
model-check:
	GKO_MODEL_STATES=$${GKO_MODEL_STATES:-2000000} GKO_MODEL_CRASHES=$${GKO_MODEL_CRASHES:-3} \
	  cargo test --profile mutants -p gluesync-engine --lib update::model -- --include-ignored --nocapture

## Mutation testing of the update engine (cargo-mutants; hours for every file: FILES=<paths> for some).
mutants:
	hack/mutants.sh $(FILES)

## Write the CRD generated from the Rust types into the chart (deploy/crd.yaml links to it), and the
## reference generated from it.
crd: reference
	cargo run -q -p gluesync-operator --bin crdgen > charts/gluesync-operator/files/gluesyncplatforms.crd.yaml

## Write docs/reference.md, the GluesyncPlatform reference generated from the CRD.
reference:
	cargo run -q -p gluesync-operator --bin reference > docs/reference.md

cluster-up:
	hack/controlplane.sh up

cluster-down:
	hack/controlplane.sh down

## Print GKO's figures on the local control plane (reaction, overhead, 10,000 pipelines, memory).
bench:
	hack/controlplane.sh up
	cargo build -q --release -p gluesync-operator -p gko-bench
	target/release/gko-bench

## The heap of the hot paths at 100,000 pipelines, counted by the allocator, checked against
## crates/heap/figures.tsv (CI fails on a figure more than 10 % over it).
heap:
	cargo run -q --locked -p gko-heap -- --check crates/heap/figures.tsv

## Write the heap figures of this build into crates/heap/figures.tsv (say why in the commit).
heap-write:
	cargo run -q --locked -p gko-heap -- --write crates/heap/figures.tsv

## `kubectl gluesync` for release, packed for krew: target/plugin/ (see docs/kubectl-plugin.md).
plugin:
	hack/plugin.sh

## The release binary the image copies (see Dockerfile): target/release/gluesync-operator.
release:
	cargo build --release --locked -p gluesync-operator --bin gluesync-operator
	@ls -l target/release/gluesync-operator
