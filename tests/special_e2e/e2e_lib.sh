# shellcheck shell=bash
# Shared body of the GPU end-to-end scripts (sourced, never run on its own).
#
# The caller sets E2E_BACKEND (sandbox_fusion | daytona), then calls `e2e_main "$@"`.
# What a run does: check for a GPU, start `sandbox-emulator serve` on a free port, convert GSM8K to verl parquet for
# the code tool, write a tool config pointing at the emulator, run one GRPO step of verl's trainer with the sglang
# rollout and the tool agent loop, dump the rollout, and exit with `sandbox-emulator validate`'s status.
#
# Two side modes exist so CI can check the scripts without a GPU (tests/e2e_config):
#   --print-overrides            print the Hydra overrides the trainer would get, one per line, and exit
#   --write-tool-config FILE     write the tool config the run would write (for E2E_EMULATOR_URL) and exit
# Any other argument is an extra Hydra override, appended last (so it wins).

E2E_LIB_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
E2E_REPO_ROOT="$(cd "$E2E_LIB_DIR/../.." && pwd)"

e2e_log() {
    printf 'e2e[%s]: %s\n' "${E2E_BACKEND:-?}" "$*" >&2
}

e2e_die() {
    e2e_log "error: $*"
    exit 1
}

e2e_usage() {
    cat <<EOF
usage: $(basename "$0") [--print-overrides | --write-tool-config FILE] [HYDRA_OVERRIDE ...]

One GRPO step of verl (sglang rollout, tool agent loop, GSM8K) whose code tool talks to a local
sandbox-emulator (backend: $E2E_BACKEND); the rollout dump must pass 'sandbox-emulator validate'.

Environment (defaults in brackets):
  MODEL_PATH            local HF model dir [\$HOME/models/Qwen2.5-0.5B-Instruct]
  NUM_GPUS              GPUs to use [all that nvidia-smi lists]
  TRAIN_BATCH_SIZE      prompts per step [8]        ROLLOUT_N  responses per prompt [4]
  MICRO_BATCH_SIZE      per-GPU micro batch [1]     ROLLOUT_TP sglang tensor parallel size [1]
  GPU_MEMORY_UTILIZATION  sglang KV-cache share [0.5]
  MAX_PROMPT_LENGTH / MAX_RESPONSE_LENGTH  [1024 / 1024]   MAX_TURNS  assistant and user turns [5]
  GSM8K_JSONL           raw GSM8K JSONL [fixtures/gsm8k/problems.jsonl]   GSM8K_LIMIT  rows used [256]
  FAULTS                emulator fault profile or plan file [$(e2e_default_faults)]; empty for none
  E2E_WORK_DIR          where data, tool config, logs and dump go [\$TMPDIR/sandbox-emulator-e2e/<backend>-<run id>]
  DATA_DIR / ROLLOUT_DATA_DIR   [\$E2E_WORK_DIR/data / \$E2E_WORK_DIR/rollout]
  E2E_HOST / E2E_PORT   emulator bind address and port [127.0.0.1 / a free port]
  PYTHON                interpreter with verl, sglang and sandbox-emulator installed [python3]
  SANDBOX_EMULATOR      the sandbox-emulator command [sandbox-emulator, else \$PYTHON -m harness.cli]
  E2E_TRAINER           the trainer command [\$PYTHON -m verl.trainer.main_ppo]; CI puts a CPU stand-in here
  E2E_ALLOW_SKIP=1      exit 0 ("skipped") instead of 1 when there is no GPU
EOF
}

# Backend-specific facts: the fixture the tool config starts from and the default fault profile.
e2e_default_faults() {
    case "$E2E_BACKEND" in
        sandbox_fusion) echo "vefaas-gateway" ;;
        daytona) echo "calm" ;;
        *) e2e_die "unknown E2E_BACKEND '$E2E_BACKEND' (sandbox_fusion or daytona)" ;;
    esac
}

e2e_tool_fixture() {
    echo "$E2E_REPO_ROOT/fixtures/tools/${E2E_BACKEND}_tool_config.yaml"
}

# Number of NVIDIA GPUs nvidia-smi lists; 0 when it is missing or fails (no driver).
e2e_detect_gpus() {
    local smi="${NVIDIA_SMI:-nvidia-smi}" listing
    if ! command -v "$smi" >/dev/null 2>&1; then
        echo 0
        return
    fi
    if ! listing="$("$smi" --query-gpu=index --format=csv,noheader 2>/dev/null)"; then
        echo 0
        return
    fi
    grep -c '[0-9]' <<<"$listing" || true
}

# Every setting, from the environment or its default. Nothing is created here.
e2e_settings() {
    E2E_DETECTED_GPUS="$(e2e_detect_gpus)"
    PYTHON="${PYTHON:-python3}"
    MODEL_PATH="${MODEL_PATH:-$HOME/models/Qwen2.5-0.5B-Instruct}"
    if [[ -n "${NUM_GPUS:-}" ]]; then
        [[ "$NUM_GPUS" =~ ^[0-9]+$ ]] || e2e_die "NUM_GPUS must be a whole number, got '$NUM_GPUS'"
    elif ((E2E_DETECTED_GPUS > 0)); then
        NUM_GPUS="$E2E_DETECTED_GPUS"
    else
        NUM_GPUS=1 # only reached by the print modes; a run without a GPU stops in e2e_require_gpu
    fi
    TRAIN_BATCH_SIZE="${TRAIN_BATCH_SIZE:-8}"
    ROLLOUT_N="${ROLLOUT_N:-4}"
    MICRO_BATCH_SIZE="${MICRO_BATCH_SIZE:-1}"
    ROLLOUT_TP="${ROLLOUT_TP:-1}"
    GPU_MEMORY_UTILIZATION="${GPU_MEMORY_UTILIZATION:-0.5}"
    MAX_PROMPT_LENGTH="${MAX_PROMPT_LENGTH:-1024}"
    MAX_RESPONSE_LENGTH="${MAX_RESPONSE_LENGTH:-1024}"
    MAX_TURNS="${MAX_TURNS:-5}"
    local name
    for name in TRAIN_BATCH_SIZE ROLLOUT_N MICRO_BATCH_SIZE ROLLOUT_TP MAX_PROMPT_LENGTH MAX_RESPONSE_LENGTH MAX_TURNS; do
        [[ "${!name}" =~ ^[1-9][0-9]*$ ]] || e2e_die "$name must be a positive whole number, got '${!name}'"
    done
    GSM8K_JSONL="${GSM8K_JSONL:-$E2E_REPO_ROOT/fixtures/gsm8k/problems.jsonl}"
    GSM8K_LIMIT="${GSM8K_LIMIT:-256}"
    FAULTS="${FAULTS-$(e2e_default_faults)}"
    E2E_RUN_ID="${E2E_RUN_ID:-$(date +%Y%m%d-%H%M%S)-$$}"
    E2E_WORK_DIR="${E2E_WORK_DIR:-${TMPDIR:-/tmp}/sandbox-emulator-e2e/${E2E_BACKEND}-${E2E_RUN_ID}}"
    DATA_DIR="${DATA_DIR:-$E2E_WORK_DIR/data}"
    ROLLOUT_DATA_DIR="${ROLLOUT_DATA_DIR:-$E2E_WORK_DIR/rollout}"
    E2E_TOOL_CONFIG="$E2E_WORK_DIR/${E2E_BACKEND}_tool_config.yaml"
    E2E_HOST="${E2E_HOST:-127.0.0.1}"
    E2E_PORT="${E2E_PORT:-}"
    E2E_DAYTONA_API_KEY="${E2E_DAYTONA_API_KEY:-dtn_e2e_emulator_key}"
    if [[ -n "${E2E_TRAINER:-}" ]]; then
        read -r -a E2E_TRAINER_CMD <<<"$E2E_TRAINER"
    else
        E2E_TRAINER_CMD=("$PYTHON" -m verl.trainer.main_ppo)
    fi
    if [[ -n "${SANDBOX_EMULATOR:-}" ]]; then
        read -r -a E2E_EMULATOR_CMD <<<"$SANDBOX_EMULATOR"
    elif command -v sandbox-emulator >/dev/null 2>&1; then
        E2E_EMULATOR_CMD=(sandbox-emulator)
    else
        E2E_EMULATOR_CMD=("$PYTHON" -m harness.cli)
    fi
}

# The trainer's Hydra overrides (verl 0.9.1 keys, composed onto its own ppo_trainer config), in E2E_OVERRIDES.
e2e_build_overrides() {
    E2E_OVERRIDES=(
        "algorithm.adv_estimator=grpo"
        "algorithm.use_kl_in_reward=False"
        "critic.enable=False"
        "data.train_files=$DATA_DIR/train.parquet"
        "data.val_files=$DATA_DIR/test.parquet"
        "data.train_batch_size=$TRAIN_BATCH_SIZE"
        "data.max_prompt_length=$MAX_PROMPT_LENGTH"
        "data.max_response_length=$MAX_RESPONSE_LENGTH"
        "data.filter_overlong_prompts=True"
        "data.truncation=error"
        "data.return_raw_chat=True"
        "actor_rollout_ref.model.path=$MODEL_PATH"
        "actor_rollout_ref.model.use_remove_padding=True"
        "actor_rollout_ref.model.enable_gradient_checkpointing=True"
        "actor_rollout_ref.actor.optim.lr=1e-6"
        "actor_rollout_ref.actor.ppo_mini_batch_size=$TRAIN_BATCH_SIZE"
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=$MICRO_BATCH_SIZE"
        "actor_rollout_ref.actor.use_kl_loss=False"
        "actor_rollout_ref.actor.entropy_coeff=0"
        "actor_rollout_ref.actor.fsdp_config.param_offload=False"
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload=False"
        "actor_rollout_ref.rollout.name=sglang"
        "actor_rollout_ref.rollout.mode=async"
        "actor_rollout_ref.rollout.tensor_model_parallel_size=$ROLLOUT_TP"
        "actor_rollout_ref.rollout.gpu_memory_utilization=$GPU_MEMORY_UTILIZATION"
        "actor_rollout_ref.rollout.n=$ROLLOUT_N"
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=$MICRO_BATCH_SIZE"
        "actor_rollout_ref.rollout.multi_turn.enable=True"
        "actor_rollout_ref.rollout.multi_turn.format=hermes"
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=$MAX_TURNS"
        "actor_rollout_ref.rollout.multi_turn.max_user_turns=$MAX_TURNS"
        "actor_rollout_ref.rollout.multi_turn.tool_config_path=$E2E_TOOL_CONFIG"
        "actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent"
        "trainer.critic_warmup=0"
        "trainer.logger=[console]"
        "trainer.project_name=sandbox-emulator-e2e"
        "trainer.experiment_name=gsm8k-${E2E_BACKEND}-${E2E_RUN_ID}"
        "trainer.default_local_dir=$E2E_WORK_DIR/checkpoints"
        "trainer.n_gpus_per_node=$NUM_GPUS"
        "trainer.nnodes=1"
        "trainer.val_before_train=False"
        "trainer.test_freq=-1"
        "trainer.save_freq=-1"
        "trainer.total_epochs=1"
        "trainer.total_training_steps=1"
        "trainer.rollout_data_dir=$ROLLOUT_DATA_DIR"
    )
    E2E_OVERRIDES+=("$@")
}

# Write the backend's tool config: the project's fixture with its endpoint (and Daytona key) set to the emulator.
e2e_write_tool_config() {
    local out="$1" base_url="$2" fixture
    fixture="$(e2e_tool_fixture)"
    [[ -f "$fixture" ]] || e2e_die "tool config fixture not found: $fixture"
    mkdir -p "$(dirname "$out")"
    "$PYTHON" - "$fixture" "$out" "$E2E_BACKEND" "$base_url" "$E2E_DAYTONA_API_KEY" <<'PY'
import sys

import yaml

fixture, out, backend, base_url, api_key = sys.argv[1:]
with open(fixture, encoding="utf-8") as handle:
    document = yaml.safe_load(handle)
tools = document.get("tools") if isinstance(document, dict) else None
if not isinstance(tools, list) or len(tools) != 1 or not isinstance(tools[0].get("config"), dict):
    sys.exit(f"{fixture}: expected exactly one tool with a config mapping")
config = tools[0]["config"]
base_url = base_url.rstrip("/")
if backend == "sandbox_fusion":
    config["sandbox_fusion_url"] = f"{base_url}/run_code"
else:
    config["api_url"] = f"{base_url}/api"
    config["api_key"] = api_key
header = f"# Written by the e2e script from {fixture.rsplit('/', 1)[-1]}: the {backend} tool against {base_url}\n"
with open(out, "w", encoding="utf-8") as handle:
    handle.write(header)
    yaml.safe_dump(document, handle, sort_keys=False)
PY
}

e2e_require_gpu() {
    if ((E2E_DETECTED_GPUS > 0 && NUM_GPUS > 0)); then
        return 0
    fi
    local why="no NVIDIA GPU found (nvidia-smi missing, failing or listing no GPU)"
    if ((E2E_DETECTED_GPUS > 0)); then
        why="NUM_GPUS=0"
    fi
    if [[ "${E2E_ALLOW_SKIP:-0}" == "1" ]]; then
        echo "e2e[$E2E_BACKEND]: skipped: $why; this script needs a GPU"
        exit 0
    fi
    e2e_die "$why; this script trains on a GPU. Run it on a GPU machine, or set E2E_ALLOW_SKIP=1 to skip instead."
}

e2e_check_prerequisites() {
    [[ -d "$MODEL_PATH" ]] || e2e_die "MODEL_PATH '$MODEL_PATH' is not a directory: put a local copy of \
Qwen/Qwen2.5-0.5B-Instruct there (the run reaches no model hub) or point MODEL_PATH at another local model"
    [[ -f "$GSM8K_JSONL" ]] || e2e_die "GSM8K_JSONL '$GSM8K_JSONL' is not a file"
    ((NUM_GPUS <= E2E_DETECTED_GPUS)) || e2e_die "NUM_GPUS=$NUM_GPUS but nvidia-smi lists $E2E_DETECTED_GPUS GPU(s)"
    local modules="verl, harness"
    if [[ -z "${E2E_TRAINER:-}" ]]; then
        modules="$modules, sglang"
    fi
    if [[ "$E2E_BACKEND" == "daytona" ]]; then
        modules="$modules, daytona"
    fi
    "$PYTHON" -c "import $modules" 2>/dev/null || e2e_die "$PYTHON cannot import $modules: install \
verl[sglang]==0.9.1 and this project (with its [daytona] extra for the Daytona script) into that environment"
    if [[ -e "$ROLLOUT_DATA_DIR" ]] && [[ -n "$(ls -A "$ROLLOUT_DATA_DIR")" ]]; then
        e2e_die "ROLLOUT_DATA_DIR '$ROLLOUT_DATA_DIR' is not empty; give an empty or new directory"
    fi
}

e2e_free_port() {
    "$PYTHON" - "$E2E_HOST" <<'PY'
import socket
import sys

with socket.socket() as sock:
    sock.bind((sys.argv[1], 0))
    print(sock.getsockname()[1])
PY
}

E2E_EMULATOR_PID=""
E2E_TRAINER_PID=""

# Stop what this script started (the trainer if still running, then the emulator); the EXIT trap.
e2e_cleanup() {
    local pid
    for pid in "$E2E_TRAINER_PID" "$E2E_EMULATOR_PID"; do
        if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
            kill "$pid" 2>/dev/null || true
            wait "$pid" 2>/dev/null || true
        fi
    done
    E2E_TRAINER_PID=""
    E2E_EMULATOR_PID=""
}

e2e_ping() {
    "$PYTHON" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2).read()' "$1" \
        >/dev/null 2>&1
}

# Start the emulator on E2E_PORT (or a free port) and wait until /v1/ping answers; sets E2E_EMULATOR_URL.
e2e_start_emulator() {
    local port="${E2E_PORT:-$(e2e_free_port)}" log="$E2E_WORK_DIR/emulator.log" waited=0
    local -a args=(serve --host "$E2E_HOST" --port "$port" --daytona-api-key "$E2E_DAYTONA_API_KEY")
    if [[ -n "$FAULTS" ]]; then
        args+=(--faults "$FAULTS")
    fi
    E2E_EMULATOR_URL="http://$E2E_HOST:$port"
    e2e_log "starting the emulator: ${E2E_EMULATOR_CMD[*]} ${args[*]} (log: $log)"
    "${E2E_EMULATOR_CMD[@]}" "${args[@]}" >"$log" 2>&1 &
    E2E_EMULATOR_PID=$!
    until e2e_ping "$E2E_EMULATOR_URL/v1/ping"; do
        if ! kill -0 "$E2E_EMULATOR_PID" 2>/dev/null; then
            cat "$log" >&2
            E2E_EMULATOR_PID=""
            e2e_die "the emulator exited before answering $E2E_EMULATOR_URL/v1/ping"
        fi
        if ((waited >= ${E2E_EMULATOR_START_TIMEOUT:-60} * 5)); then
            cat "$log" >&2
            e2e_die "the emulator did not answer $E2E_EMULATOR_URL/v1/ping in ${E2E_EMULATOR_START_TIMEOUT:-60} s"
        fi
        sleep 0.2
        waited=$((waited + 1))
    done
    e2e_log "emulator up at $E2E_EMULATOR_URL (faults: ${FAULTS:-none})"
}

e2e_prepare_data() {
    mkdir -p "$DATA_DIR"
    local split
    for split in train test; do
        "${E2E_EMULATOR_CMD[@]}" gsm8k-convert "$GSM8K_JSONL" "$DATA_DIR/$split.parquet" --split "$split" \
            --limit "$GSM8K_LIMIT" || e2e_die "gsm8k-convert failed on $GSM8K_JSONL"
    done
    local rows
    rows="$("$PYTHON" -c 'import sys, pyarrow.parquet as pq; print(pq.ParquetFile(sys.argv[1]).metadata.num_rows)' \
        "$DATA_DIR/train.parquet")"
    ((rows >= TRAIN_BATCH_SIZE)) || e2e_die "$DATA_DIR/train.parquet has $rows rows, fewer than \
TRAIN_BATCH_SIZE=$TRAIN_BATCH_SIZE: give a bigger GSM8K_JSONL or GSM8K_LIMIT, or a smaller TRAIN_BATCH_SIZE"
    e2e_log "data: $rows training prompts in $DATA_DIR"
}

# What reached the emulator, for the log: the journal's stats (informational; the verdict is the validator's).
e2e_report_emulator() {
    "$PYTHON" -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())' \
        "$E2E_EMULATOR_URL/_emulator/stats" >&2 || e2e_log "could not read the emulator's stats"
}

e2e_run() {
    e2e_require_gpu
    e2e_check_prerequisites
    mkdir -p "$E2E_WORK_DIR" "$ROLLOUT_DATA_DIR"
    trap 'exit 130' INT
    trap 'exit 143' TERM
    trap e2e_cleanup EXIT
    e2e_start_emulator
    e2e_prepare_data
    e2e_write_tool_config "$E2E_TOOL_CONFIG" "$E2E_EMULATOR_URL"
    e2e_log "trainer: ${E2E_TRAINER_CMD[*]} with ${#E2E_OVERRIDES[@]} overrides"
    local status=0
    # In the background so that a signal to this script runs its traps at once (bash defers them while a
    # foreground child runs); the EXIT trap then stops the trainer too.
    "${E2E_TRAINER_CMD[@]}" "${E2E_OVERRIDES[@]}" &
    E2E_TRAINER_PID=$!
    wait "$E2E_TRAINER_PID" || status=$?
    E2E_TRAINER_PID=""
    e2e_report_emulator
    if ((status != 0)); then
        tail -n 50 "$E2E_WORK_DIR/emulator.log" >&2 || true
        e2e_die "the trainer failed (exit $status); work dir: $E2E_WORK_DIR"
    fi
    e2e_log "validating the rollout dump in $ROLLOUT_DATA_DIR"
    status=0
    "${E2E_EMULATOR_CMD[@]}" validate "$ROLLOUT_DATA_DIR" || status=$?
    if ((status == 0)); then
        e2e_log "pass: the dump in $ROLLOUT_DATA_DIR is valid"
    else
        e2e_log "FAIL: sandbox-emulator validate exited $status for $ROLLOUT_DATA_DIR"
    fi
    exit "$status"
}

e2e_main() {
    local mode=run tool_out=""
    local -a extra=()
    while (($#)); do
        case "$1" in
            --print-overrides) mode=print-overrides ;;
            --write-tool-config)
                [[ $# -ge 2 ]] || e2e_die "--write-tool-config needs a FILE"
                mode=write-tool-config
                tool_out="$2"
                shift
                ;;
            -h | --help)
                e2e_usage
                exit 0
                ;;
            --)
                shift
                extra+=("$@")
                break
                ;;
            -*) e2e_die "unknown option '$1' (see --help)" ;;
            *) extra+=("$1") ;;
        esac
        shift
    done
    e2e_settings
    e2e_build_overrides "${extra[@]}"
    case "$mode" in
        print-overrides) printf '%s\n' "${E2E_OVERRIDES[@]}" ;;
        write-tool-config)
            e2e_write_tool_config "$tool_out" "${E2E_EMULATOR_URL:-http://$E2E_HOST:${E2E_PORT:-8080}}"
            ;;
        run) e2e_run ;;
    esac
}
