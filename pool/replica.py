"""Engine pools: one Ray Serve LLM deployment per configured pool, warmed up before ready."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import time
from typing import Any, AsyncGenerator, Callable

from ray import serve

from engine.preload import begin_if_pool_replica

# First, before this module imports vLLM (with Ray Serve LLM): in a pool replica, the engine
# core's forkserver imports vLLM while the replica does.
begin_if_pool_replica()

from ray.serve.llm import LLMConfig
from ray.serve.llm.deployment import LLMServer  # Ray 2.58 warns on the `ray.serve.llm` alias

from autoscaling.control_board import RayControlBoard, concurrency_key, replica_start_key
from contract.pool_faults import AdapterUnusable, BaseModelRefused, EngineDied, engine_death_reason
from contract.request_timeline import RequestTimeline
from contract.serving_metrics import PoolMetrics
from core.config import AdapterConfig, AdmissionConfig, IdleSleepConfig, PoolLoraConfig, StreamBatchingConfig
from core.model_store import default_cache_dir
from core.pool_config import engine_embeds
from core.price_catalog import ReplicaRate
from core.upstream import (
    ChatCompletionRequest,
    CompletionRequest,
    EmbeddingCompletionRequest,
    get_logger,
    report_llm_usage,
)
from core.wire import ReplicaStats
from engine.cpu_engine import DtypeChoice, apply_cpu_niceness, read_cpu_flags, with_cpu_dtype
from engine.pool_engine import PoolEngine
from engine.stat_loggers import EngineStageTimes, KvCacheProbe, attach
from pool.admission import AdmissionPolicy, request_priority
from pool.admission_queue import AdmissionQueue
from pool.engine_activity import EngineActivity
from pool.engine_sleep import EngineSleep
from pool.latency_window import LatencyWindow
from pool.request_metering import metered, prompt_tokens_hint, routed_max_tokens, with_timeline
from pool.resident_adapters import ResidentAdapters, base_model_config
from pool.stream_batching import StreamBatching, batched_stream
from pool.work_share import WorkShare

# Ray's LLM logger: its lines reach the replica logs that Serve collects.
logger = get_logger(__name__)
# The autoscaler's p99s and request rate cover the requests of this many seconds.
AUTOSCALING_WINDOW_S = 30.0
# Generation requests; they hold an engine slot from the admission queue.
ADMITTED_METHODS = ("chat", "completions")
# How often a replica adds its busy and idle time to the metrics; Ray exports them on its own
# schedule, so finer would not make the counters fresher.
ACTIVITY_EXPORT_INTERVAL_S = 2.0
# How often a replica looks for the engine concurrency the autoscaler set for its pool.
CONCURRENCY_READ_INTERVAL_S = 1.0
# Longest a health probe of the engine may take; vLLM's only reads a flag. A probe that times
# out says nothing: a busy event loop is not a dead engine.
ENGINE_PROBE_TIMEOUT_S = 5.0
# How an engine's stream begins an error event (vLLM's, in OpenAI's shape).
_ERROR_EVENT = 'data: {"error"'


class PoolServer(LLMServer):
    """Ray's LLMServer, which reports ready only after one streamed chat and one completion,
    admits requests to its engine through a bounded priority queue, clocks how busy its
    engine is, and prices every request's share of that busy time.

    The first requests of a fresh engine pay for kernel selection and compilation (27 s to a
    first token was seen on CPU); paying it here keeps it away from users.
    """

    # vLLM's engine with plain vLLM's process layout, unless the deployment binds another
    # (`engine_cls`: tests' fake engine) or Ray's RAYLLM_VLLM_ENGINE_CLS names one.
    _default_engine_cls = PoolEngine

    async def __init__(
        self, llm_config: LLMConfig, *, pool_name: str, replica_rate: dict, admission: dict,
        max_in_engine: int, max_in_engine_ceiling: int | None = None, cpu_niceness: int | None = None,
        cpu_engine: bool = False, stream_batching: dict | None = None, sleep_when_idle: dict | None = None,
        lora: dict | None = None, adapters: dict[str, dict] | None = None, adapter_only: str | None = None,
        **kwargs: Any
    ) -> None:
        self._constructed_at = time.monotonic()
        # Before the base constructor, which starts the engine: its processes inherit the value.
        apply_cpu_niceness(cpu_niceness, log=logger)
        if cpu_engine:
            # Here, on the node whose CPU will run the engine, not where the app was built.
            choice = choose_engine_dtype(llm_config, read_cpu_flags())
            logger.info("Pool %s: engine dtype %s: %s", pool_name, choice.dtype or "auto", choice.reason)
        # Set before the base constructor, which starts the replica.
        self._pool_name = pool_name
        self._engine_death: str | None = None  # why the engine died, once it has
        self._max_in_engine = (max_in_engine, max_in_engine_ceiling or max_in_engine)
        self._rate = ReplicaRate(**replica_rate)
        batching = StreamBatchingConfig(**(stream_batching or {}))
        self._stream_batching = StreamBatching(batching.interval_ms / 1000, batching.min_streams)
        self._sleep_config = IdleSleepConfig(**(sleep_when_idle or {}))
        self._sleep: EngineSleep | None = None
        self._metrics = PoolMetrics(pool_name)
        self._admission = AdmissionQueue(
            pool_name,
            AdmissionPolicy.from_config(AdmissionConfig(**admission), max_in_engine),
            on_shed=self._metrics.shed,
        )
        self._lora = PoolLoraConfig(**lora) if lora is not None else None
        self._resident = self._resident_adapters(llm_config, adapters or {})
        # Why the pool's engines may batch no request without an adapter beside adapter requests, if so.
        self._adapter_only = adapter_only
        await super().__init__(llm_config, **kwargs)

    def _resident_adapters(self, llm_config: LLMConfig, adapters: dict[str, dict]) -> ResidentAdapters | None:
        if self._lora is None:
            return None
        source = llm_config.model_loading_config.model_source
        return ResidentAdapters(
            self._pool_name, {name: AdapterConfig(**adapter) for name, adapter in adapters.items()},
            base_config=functools.partial(base_model_config, source), max_lora_rank=self._lora.max_lora_rank,
            cache_dir=default_cache_dir() / "adapters",
            load=lambda name, folder: self.engine.load_adapter(name, folder),
            unload=lambda name: self.engine.unload_adapter(name),
        )

    def _init_multiplex_loader(self, model_downloader_cls: Any = None) -> None:
        """A pool with `lora` loads its configured adapters through Ray Serve's multiplexing: a
        per-replica LRU of lora.max_resident adapters, which Serve's routers know of and send
        each adapter's requests to (router.replica_router). Ray Serve LLM's own loader takes
        cloud paths only and names adapters `base:suffix`, so it is not used."""
        if self._resident is None:
            return super()._init_multiplex_loader(model_downloader_cls)
        resident = self._resident

        async def load(name: str) -> Any:
            return await resident.load(name)

        self._load_model = serve.multiplexed(max_num_models_per_replica=self._lora.max_resident)(load)

    async def _maybe_resolve_lora_from_multiplex(self) -> None:
        """Loads the request's adapter (named by the router as its multiplexed model id) unless
        this replica holds it; the request that loads it pays the load (pool.request_metering)."""
        name = serve.get_multiplexed_model_id()
        if not name:
            return
        if self._resident is None:
            raise AdapterUnusable(self._pool_name, name, "the pool sets no `lora`", over_rank=False)
        await self._resident.checked(name)  # a refused adapter never evicts a resident one
        self._activity.begin()  # the engine is busy loading: the pool's busy time, this request's cost
        try:
            adapter = await self._load_model(name)
        finally:
            self._activity.end()
        pending = _PENDING_METER.get(None)
        if pending is not None:
            pending.adapter_load_s = adapter.take_load_s()

    async def start(self) -> None:
        started = time.monotonic()
        await super().start()
        engine_started = time.monotonic()
        await self._warm_up()
        # Where a replica's start goes, phase by phase: what every scale-up waits for.
        logger.info(
            "Pool %s: replica serving %.1f s after it was created: before the engine %.1f s, engine "
            "start (load, compile, KV cache) %.1f s, warm-up %.1f s", self._pool_name,
            time.monotonic() - self._constructed_at, started - self._constructed_at,
            engine_started - started, time.monotonic() - engine_started,
        )
        # Started after the warm-up: a replica's wall time counts from when it can serve.
        self._activity = EngineActivity()
        self._work = WorkShare()
        self._latency = LatencyWindow(AUTOSCALING_WINDOW_S)
        self._last_reported = self._activity.snapshot()
        kv_cache = KvCacheProbe()
        self._kv_cache = kv_cache if attach(self.engine, kv_cache) else None
        attach(self.engine, EngineStageTimes(self._metrics.engine_stage))
        self._concurrency_read_at = float("-inf")
        self._metrics_task = asyncio.create_task(self._export_activity())
        if self._sleep_config.after_s is not None:
            self._sleep = EngineSleep(
                self.engine, after_s=self._sleep_config.after_s, level=self._sleep_config.level,
                name=f"Pool {self._pool_name}", log=logger, on_wake=self._metrics.woke,
            )
            self._sleep_task = asyncio.create_task(self._sleep.run())
        self._start_s = time.monotonic() - self._constructed_at
        await self._publish_start_time(self._start_s)

    async def _start_engine(self) -> None:
        """Ray's engine start, less its wait on the usage-telemetry report.

        Ray's pushes the report before it returns, from the replica's event loop: the first
        replica of a cluster creates a detached agent actor, a Ray worker process of its own,
        and waits until it answers (4.5 s of a CPU replica's start, about 8.5 s of an H200's,
        bench/results/start-cpu-telemetry-ab). The report is the same here, sent from a thread
        once the engine is up; the replica serves meanwhile.
        """
        await self.engine.start()
        self._usage_report = asyncio.create_task(asyncio.to_thread(self._report_usage))

    def _report_usage(self) -> None:
        try:
            report_llm_usage(self._llm_config)
        except Exception as error:  # telemetry never stops a replica; a Ray upgrade may break it
            logger.warning("Pool %s: Ray's usage report was not sent: %r", self._pool_name, error)

    async def _publish_start_time(self, seconds: float) -> None:
        """How long this replica took to serve: what a router tells clients to wait when the
        pool is down and a replica is starting."""
        key = replica_start_key(serve.get_replica_context().app_name, self._pool_name)
        try:
            await asyncio.to_thread(RayControlBoard().put, key, {"start_s": round(seconds, 1)})
        except Exception as error:  # routers then say "no start time measured"; serving goes on
            logger.warning("could not publish the start time to %s: %r", key, error)

    async def _export_activity(self) -> None:
        """Turns the busy clock into busy and idle dollars on the metrics, interval by interval,
        with the admission queue's depth beside them."""
        last = self._activity.snapshot()
        while True:
            await asyncio.sleep(ACTIVITY_EXPORT_INTERVAL_S)
            now = self._activity.snapshot()
            self._metrics.queue(in_engine=self._admission.in_engine, waiting=self._admission.waiting,
                                asleep=self._sleep is not None and self._sleep.asleep)
            self._metrics.record(busy_s=now.busy_s - last.busy_s, wall_s=now.wall_s - last.wall_s,
                                 usd_per_s=self._rate.usd_per_s)
            last = now

    async def _run_request(self, request: Any, **kwargs: Any) -> AsyncGenerator[Any, None]:
        if kwargs.get("engine_method") not in ADMITTED_METHODS:  # tokenize and the like: no generation
            return await self._engine_stream(request, kwargs)
        if self._adapter_only is not None and not serve.get_multiplexed_model_id():
            raise BaseModelRefused(self._pool_name, self._adapter_only)
        headers = getattr(kwargs.get("raw_request_info"), "headers", None)
        timeline = RequestTimeline.asked_for(headers)
        if timeline is not None:
            timeline.stamp("pool_received")
        return self._admitted(request_priority(headers, request), request, kwargs, timeline)

    async def _admitted(
        self, priority: int, request: Any, kwargs: dict[str, Any], timeline: RequestTimeline | None,
    ) -> AsyncGenerator[Any, None]:
        """The request's stream once the admission queue gives it an engine slot, which it
        holds until the stream ends; a shed request raises PoolOverloaded before any chunk."""
        if self._engine_death is not None:
            raise EngineDied(self._pool_name, self._engine_death)
        arrived_at = time.monotonic()
        # The request keeps the engine awake from its arrival (a sleeping one wakes first) to its end.
        async with self._sleep.in_use() if self._sleep else contextlib.nullcontext(), self._admission.slot(priority):
            if timeline is not None:
                timeline.stamp("pool_admitted")
            try:
                # Closed here, not when collected: a client that leaves mid-stream must stop its
                # engine request before the slot goes to the next one.
                engine_stream = await self._engine_stream(request, kwargs, arrived_at, timeline)
                async with contextlib.aclosing(engine_stream) as stream:
                    async for item in stream:
                        # vLLM ends a stream whose engine died with an error event, not an error.
                        if _carries_error_event(item) and await self._probe_engine() is not None:
                            raise EngineDied(self._pool_name, self._engine_death)
                        yield item
            except Exception:
                # A dead engine fails every request: say so, so that the router sends this one
                # elsewhere and stops sending more.
                if await self._probe_engine() is not None:
                    raise EngineDied(self._pool_name, self._engine_death) from None
                raise

    async def _probe_engine(self) -> str | None:
        """Why the engine is dead, or None while it is alive; a death is remembered."""
        if self._engine_death is None:
            try:
                await asyncio.wait_for(self.engine.check_health(), ENGINE_PROBE_TIMEOUT_S)
            except asyncio.TimeoutError:
                logger.warning("Pool %s: engine health probe took over %.0f s", self._pool_name,
                               ENGINE_PROBE_TIMEOUT_S)
            except Exception as error:
                self._engine_death = engine_death_reason(error)
                logger.error("Pool %s: engine died (%s); refusing requests until Serve replaces "
                             "this replica", self._pool_name, self._engine_death)
        return self._engine_death

    async def check_health(self) -> None:
        """Serve's periodic health check: a dead engine makes the replica unhealthy, and Serve
        replaces it."""
        if self.engine is not None and await self._probe_engine() is not None:
            raise EngineDied(self._pool_name, self._engine_death)

    async def _engine_stream(
        self, request: Any, kwargs: dict[str, Any], arrived_at: float | None = None,
        timeline: RequestTimeline | None = None,
    ) -> AsyncGenerator[Any, None]:
        raw_request_info = kwargs.get("raw_request_info")
        pending = _PendingMeter(functools.partial(
            metered, activity=self._activity, work=self._work, rate=self._rate,
            latency=self._latency, arrived_at=arrived_at, timeline=timeline,
            prompt_tokens=prompt_tokens_hint(raw_request_info and raw_request_info.headers, request),
            max_tokens=routed_max_tokens(request),
        ), timeline)
        token = _PENDING_METER.set(pending)
        try:
            stream = await super()._run_request(request, **kwargs)
        finally:
            _PENDING_METER.reset(token)
        # Streams were metered below Ray's chunk batching; whole responses are metered here.
        return stream if pending.applied else pending.wrap(stream)

    def _batch_output_stream(self, generator: AsyncGenerator[Any, None]) -> AsyncGenerator[Any, None]:
        """In place of Ray's batcher, which holds every chunk, the first too, for its interval."""
        pending = _PENDING_METER.get(None)
        if pending is not None and not pending.applied:
            generator = pending.wrap(generator)
        batches = batched_stream(generator, self._stream_batching, lambda: self._admission.in_engine)
        if pending is not None and pending.timeline is not None:
            batches = with_timeline(batches, pending.timeline)
        return batches

    async def record_autoscaling_stats(self) -> ReplicaStats:
        """What the autoscaler reads from this replica (Ray Serve calls it periodically):
        recent p50/p99 TTFT and TPOT, requests and tokens per second, the engine's busy
        fraction and batch occupancy since the last call, its queue and KV cache, and its price
        (core.wire.ReplicaStats). The same call picks up the engine concurrency the
        autoscaler set for the pool."""
        if not hasattr(self, "_activity"):  # still warming up
            return {}
        await self._follow_concurrency()
        now = self._activity.snapshot()
        wall = now.wall_s - self._last_reported.wall_s
        utilization = (now.busy_s - self._last_reported.busy_s) / wall if wall > 0 else None
        batch = self._llm_config.engine_kwargs.get("max_num_seqs")
        occupancy = (now.request_s - self._last_reported.request_s) / (batch * wall) if wall > 0 and batch else None
        self._last_reported = now
        stats: ReplicaStats = {
            **self._latency.stats(), "waiting": float(self._admission.waiting),
            "running": float(self._admission.in_engine), "usd_per_hour": self._rate.usd_per_hour,
            "max_in_engine": float(self._admission.max_in_engine),
        }
        if utilization is not None:
            stats["utilization"] = utilization
        if occupancy is not None:
            # Requests beyond the batch wait in the engine's queue: a full batch is full.
            stats["batch_occupancy"] = min(1.0, occupancy)
        if self._kv_cache is not None and self._kv_cache.usage is not None:
            stats["kv_cache_usage"] = self._kv_cache.usage
        return stats

    async def _follow_concurrency(self) -> None:
        """Applies the engine concurrency the autoscaler's rule left on the control board,
        within the bounds this replica was deployed with."""
        base, ceiling = self._max_in_engine
        # Ray asks for stats several times per decision period; once a second is fresh enough.
        if ceiling == base or time.monotonic() - self._concurrency_read_at < CONCURRENCY_READ_INTERVAL_S:
            return
        self._concurrency_read_at = time.monotonic()
        key = concurrency_key(serve.get_replica_context().app_name, self._pool_name)
        try:
            directive = await asyncio.to_thread(RayControlBoard().get, key)
        except Exception as error:  # the board out of reach: keep serving at the current limit
            logger.warning("could not read %s: %r", key, error)
            return
        if directive:
            limit = max(base, min(ceiling, int(directive["max_in_engine"])))
            if limit != self._admission.max_in_engine:
                logger.info("engine concurrency %d -> %d: %s", self._admission.max_in_engine, limit,
                            directive.get("reason", ""))
                self._admission.set_max_in_engine(limit)

    async def engine_activity(self) -> dict[str, Any]:
        """This replica's busy clock; the router gathers it from every replica by broadcast."""
        return {
            "replica": serve.get_replica_context().replica_id.unique_id,
            **self._activity.snapshot().to_dict(),
            "prefill_s_per_token": self._work.prefill_s_per_token,
            "decode_s_per_token": self._work.decode_s_per_token,
            "max_in_engine": self._admission.max_in_engine,
            "in_engine": self._admission.in_engine,
            "waiting": self._admission.waiting,
            "engine_unfinished": self._engine_unfinished(),
            "prefix_cache_queries": self._kv_cache.prefix_queries if self._kv_cache is not None else None,
            "prefix_cache_hits": self._kv_cache.prefix_hits if self._kv_cache is not None else None,
            "start_s": round(self._start_s, 1),
            "asleep": self._sleep is not None and self._sleep.asleep,
            "falling_asleep": self._sleep is not None and self._sleep.falling_asleep,
            "last_sleep_s": self._sleep.last_sleep_s if self._sleep is not None else None,
            "last_wake_s": self._sleep.last_wake_s if self._sleep is not None else None,
        }

    def _engine_unfinished(self) -> int | None:
        """Requests vLLM's front end still tracks (None for an engine that is not vLLM's): a
        request our side ended but the engine never aborted stays here, holding a batch slot."""
        client = getattr(self.engine, "_engine_client", None)
        count = getattr(client, "get_num_unfinished_requests", None)
        return count() if callable(count) else None

    async def _warm_up(self) -> None:
        model = self._llm_config.model_id
        if engine_embeds(self._llm_config.engine_kwargs):  # an embedding engine has no chat
            async for _ in self.engine.embeddings(EmbeddingCompletionRequest(model=model, input="Hello!"), None):
                pass
            return
        chat = ChatCompletionRequest(
            model=model, messages=[{"role": "user", "content": "Hello!"}], max_tokens=4, stream=True
        )
        completion = CompletionRequest(model=model, prompt="Hello", max_tokens=4)
        async for _ in self.engine.chat(chat, None):
            pass
        async for _ in self.engine.completions(completion, None):
            pass


class _PendingMeter:
    """The meter of the request being set up, for the hook that sees its engine stream."""

    def __init__(
        self, meter: Callable[[AsyncGenerator[Any, None]], AsyncGenerator[Any, None]],
        timeline: RequestTimeline | None = None,
    ) -> None:
        self._meter = meter
        self.timeline = timeline
        self.applied = False
        self.adapter_load_s = 0.0  # set before the stream starts when the request loads its adapter

    def wrap(self, stream: AsyncGenerator[Any, None]) -> AsyncGenerator[Any, None]:
        self.applied = True
        return self._meter(stream, adapter_load_s=self.adapter_load_s)


# LLMServer._run_request creates the engine stream and batches it in one call; the batching
# hook learns which request it serves from this (set per request, task-local).
_PENDING_METER: contextvars.ContextVar[_PendingMeter] = contextvars.ContextVar("pending_meter")


def _carries_error_event(item: Any) -> bool:
    """Whether a streamed item (an SSE string, or a batch of them) holds an error event."""
    packets = item if isinstance(item, list) else (item,)
    return any(isinstance(packet, str) and _ERROR_EVENT in packet for packet in packets)


def choose_engine_dtype(llm_config: LLMConfig, cpu_flags: frozenset[str] | None) -> DtypeChoice:
    """Sets the engine's dtype from the CPU's flags (unless the config names one). Through
    `update_engine_kwargs`: the config keeps its own copy of the engine's arguments, made when
    the app was built, and a plain assignment would not reach the engine."""
    engine_kwargs, choice = with_cpu_dtype(llm_config.engine_kwargs, cpu_flags)
    if engine_kwargs is not llm_config.engine_kwargs:
        llm_config.update_engine_kwargs(dtype=engine_kwargs["dtype"])
    return choice
