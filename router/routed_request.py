"""One request on its way through the router: what the client sent, what each stage of the
pipeline (router/pipeline.py) decided of it, and what the answer will say."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fastapi import Request

from contract.request_timeline import RequestTimeline
from core import wire
from core.config import NO_ADAPTER, ScenarioConfig
from router.route_plan import RoutePlan
from router.scenarios import AppliedProfile
from router.token_counter import PromptSize


@dataclass
class RoutedRequest:
    body: Any            # the OpenAI request; the stages set its model, max_tokens and priority
    call_method: str     # the pool's method: "chat", "completions"
    http: Request        # the client's HTTP request: its headers, and whether it is still there
    scenario_name: str
    scenario_in_path: bool  # /api/<scenario>, else the X-Scenario header or the default
    timeline: RequestTimeline | None = None  # stamped on the way when the client asked for it

    # admit
    tenant: str = "unauthenticated"
    adapter: str | None = None  # the LoRA adapter applied on the body's model, by name or the tenant's default
    scenario: ScenarioConfig | None = None
    # The cost profile's tighter max_tokens cap, when it cut the scenario's: the answer then
    # says what the cap gives up on the pool that served it.
    profile_cap: int | None = None
    # shape
    requested_max_tokens: int | None = None  # as the client asked, before the scenario's cap
    applied: AppliedProfile | None = None
    size: PromptSize | None = None
    client_priority: int = 0
    # route and forward
    moves: list[str] = field(default_factory=list)  # earlier attempts, for the route's reason
    # What the answer (or the refusal) says of the route, as far as it was decided.
    answer_headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def received(
        cls, body: Any, call_method: str, http: Request, *, scenario_in_path: str | None, default_scenario: str,
    ) -> RoutedRequest:
        """A request as it arrives: its scenario named by the path, the header, or the default."""
        timeline = RequestTimeline.asked_for(http.headers)
        if timeline is not None:
            timeline.stamp("router_received")
        name = scenario_in_path or http.headers.get(wire.SCENARIO_HEADER, default_scenario)
        return cls(body=body, call_method=call_method, http=http, scenario_name=name,
                   scenario_in_path=scenario_in_path is not None, timeline=timeline)

    @property
    def adapter_label(self) -> str:
        """The `adapter` label of the request's metrics: a configured name, or NO_ADAPTER."""
        return self.adapter or NO_ADAPTER

    @property
    def pinned_pool(self) -> str | None:
        """The pool the client named (X-Pool), if any."""
        return self.http.headers.get(wire.POOL_HEADER)

    def name_route(self, plan: RoutePlan) -> None:
        """Where the request went, why, and its prompt's size: named on the exact count only."""
        self.answer_headers.update({
            wire.POOL_HEADER: plan.decision.pool,
            wire.ROUTE_REASON_HEADER: plan.decision.reason + "".join(f"; {move}" for move in self.moves),
            wire.PROMPT_TOKENS_HEADER: str(plan.prompt_tokens),
        })
