"""The Grafana dashboard, as code: the board's panels (observability/panels.py) laid out by row,
with variables for the Prometheus data source, the app, its pools and scenarios, each SLO and
threshold drawn as a dashed line, and the autoscaler's decisions as annotations.

Grafana reads it at start through the provisioning files beside it (observability/grafana/).
"""

from __future__ import annotations

from itertools import groupby
from typing import Any

from core import wire
from core.config import TrilemmaConfig
from observability.panels import Panel, board, scaling_annotation

UID = "trilemma-overview"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
GRID_WIDTH = 24
PANEL_WIDTH, PANEL_HEIGHT = 12, 8


def dashboard(config: TrilemmaConfig) -> dict[str, Any]:
    panels: list[dict[str, Any]] = []
    y = 0
    for row, members in groupby(board(config), key=lambda panel: panel.row):
        panels.append({"id": len(panels) + 1, "type": "row", "title": row, "collapsed": False, "panels": [],
                       "gridPos": {"x": 0, "y": y, "w": GRID_WIDTH, "h": 1}})
        y += 1
        for index, panel in enumerate(members):
            x = (index % 2) * PANEL_WIDTH
            if index and x == 0:
                y += PANEL_HEIGHT
            panels.append(_timeseries(len(panels) + 1, panel, {"x": x, "y": y, "w": PANEL_WIDTH, "h": PANEL_HEIGHT}))
        y += PANEL_HEIGHT
    return {
        "uid": UID,
        "title": f"Trilemma: latency, throughput and cost ({config.app_name})",
        "description": "Per pool and scenario: the three corners of the trade side by side.",
        "tags": ["trilemma", "ray-serve", "vllm"],
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "time": {"from": "now-1h", "to": "now"},
        "refresh": "10s",
        "timezone": "utc",
        "templating": {"list": _variables(config)},
        "annotations": {"list": [{
            "name": "Scaling decisions", "datasource": DATASOURCE, "enable": True, "iconColor": "orange",
            "expr": scaling_annotation(), "step": "60s",
            "titleFormat": "scale {{direction}}: {{pool}}", "textFormat": "policy {{policy}}",
        }]},
        "panels": panels,
    }


def _timeseries(panel_id: int, panel: Panel, grid: dict[str, int]) -> dict[str, Any]:
    targets = [{"refId": _ref(i), "datasource": DATASOURCE, "expr": t.expr, "legendFormat": t.legend}
               for i, t in enumerate(panel.targets)]
    overrides = []
    for legend, value in panel.thresholds.items():
        targets.append({"refId": _ref(len(targets)), "datasource": DATASOURCE, "expr": f"vector({value:g})",
                        "legendFormat": legend})
        overrides.append({
            "matcher": {"id": "byName", "options": legend},
            "properties": [{"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}},
                           {"id": "color", "value": {"mode": "fixed", "fixedColor": "red"}}],
        })
    return {
        "id": panel_id, "type": "timeseries", "title": panel.title, "description": panel.description,
        "datasource": DATASOURCE, "gridPos": grid, "targets": targets,
        "fieldConfig": {"defaults": {"unit": panel.unit, "custom": {"lineWidth": 1, "fillOpacity": 0}},
                        "overrides": overrides},
        "options": {"legend": {"displayMode": "table", "placement": "bottom", "calcs": ["lastNotNull", "max"]},
                    "tooltip": {"mode": "multi", "sort": "desc"}},
    }


def _variables(config: TrilemmaConfig) -> list[dict[str, Any]]:
    def query(name: str, label_query: str, current: str, *, all_values: bool) -> dict[str, Any]:
        variable = {
            "name": name, "label": name, "type": "query", "datasource": DATASOURCE, "refresh": 2,
            "definition": label_query, "query": {"query": label_query, "refId": name},
            "current": {"text": current, "value": current},
        }
        if all_values:
            variable.update(includeAll=True, multi=True, allValue=".*",
                            current={"text": "All", "value": "$__all"})
        return variable

    return [
        {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus",
         "current": {"text": "Prometheus", "value": "prometheus"}},
        query("app", "label_values(ray_serve_deployment_replica_healthy, application)", config.app_name,
              all_values=False),
        query("pool", f"label_values({wire.REQUESTS_TOTAL}, pool)", "", all_values=True),
        query("scenario", f"label_values({wire.REQUESTS_TOTAL}, scenario)", "", all_values=True),
    ]


def _ref(index: int) -> str:
    return chr(ord("A") + index)
