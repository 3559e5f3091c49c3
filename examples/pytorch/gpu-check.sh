#!/usr/bin/env bash
# Runs one container job on this machine's GPU through a whole Quartermaster
# (NATS and S3 in containers, the services as processes, an executor with
# the container runtime and one GPU per instance) and checks that the job
# sees exactly the GPU it was given. Needs an NVIDIA GPU, its driver and the
# NVIDIA Container Toolkit (`docker run --gpus all` must work), a Rust
# toolchain, and the images `make images-infra images-torch` builds.
set -euo pipefail
cd "$(dirname "$0")/../.."
docker info --format '{{json .Runtimes}}' | grep -q nvidia \
  || { echo "gpu-check: this Docker engine has no nvidia runtime (install the NVIDIA Container Toolkit)" >&2; exit 2; }
make images-infra images-torch
cargo build --locked --bins
cargo test --locked -p qm-integration-tests --test containers \
  on_a_gpu_node_a_container_job_sees_exactly_its_gpus -- --ignored --nocapture
