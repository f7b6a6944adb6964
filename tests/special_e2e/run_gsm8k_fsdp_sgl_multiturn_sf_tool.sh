#!/usr/bin/env bash
# One GRPO step of verl 0.9.1 on GSM8K (FSDP, sglang rollout, multi-turn tool agent loop) whose code_interpreter
# tool is harness.tools.sandbox_fusion's, talking to a local sandbox-emulator; passes when the rollout dump validates.
# Needs an NVIDIA GPU; see docs/e2e.md and --help for the environment it reads.
set -euo pipefail

E2E_BACKEND=sandbox_fusion
# shellcheck source=tests/special_e2e/e2e_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/e2e_lib.sh"
e2e_main "$@"
