"""The live console's pure half: plain data in, one HTML page out.

The gateway already watches every InferenceDeployment; `figures` picks from each the few status
fields the page shows (kept on the gateway's slimmed informer objects), `History` keeps a small
time series per model for the last hour (one point per change of the figures, at least one a
minute), `key_rows` folds the gateway's per-key series into rows, and `render` writes the page.
The numbers are in the HTML (the page works with JavaScript off); a few lines of JavaScript
re-fetch it every `refresh_s` seconds and swap the body. No I/O here: consoleweb.py serves it.
"""

from __future__ import annotations

import dataclasses
import html
import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

WINDOW_S = 3600.0
EVERY_S = 60.0
MAX_POINTS = 240

# (status path, short name) of what a row and the history show.
FIELDS: tuple[tuple[str, str], ...] = (
    ("latency.ttftP50Ms", "ttftP50Ms"),
    ("latency.ttftP95Ms", "ttftP95Ms"),
    ("latency.itlP50Ms", "itlP50Ms"),
    ("latency.itlP95Ms", "itlP95Ms"),
    ("latency.outputTokensPerSecond", "outputTokensPerSecond"),
    ("latency.requestsPerSecond", "requestsPerSecond"),
    ("cost.hourlyUSD", "hourlyUSD"),
    ("cost.perMillionOutputTokensUSD", "perMillionOutputTokensUSD"),
    ("readyReplicas", "readyReplicas"),
    ("desiredReplicas", "desiredReplicas"),
    ("replicas", "replicas"),
)
SERIES = ("ttftP95Ms", "itlP95Ms", "outputTokensPerSecond", "readyReplicas")


def _get(node: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(node, Mapping):
            return None
        node = node.get(part)
    return node


def figures(infd: Mapping[str, Any]) -> dict[str, Any]:
    """What the console needs of one InferenceDeployment (kept on the gateway's slim copy)."""
    status = infd.get("status") or {}
    out: dict[str, Any] = {}
    for path, name in FIELDS:
        value = _get(status, path)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[name] = value
    plan = status.get("plan") or {}
    for key in ("tensorParallel", "pipelineParallel", "gpuProduct"):
        if plan.get(key) is not None:
            out[key] = plan[key]
    if isinstance(status.get("phase"), str):
        out["phase"] = status["phase"]
    slo = next((c for c in status.get("conditions") or () if isinstance(c, Mapping) and c.get("type") == "SLOMet"),
               None)
    if slo is not None:
        out["slo"] = {"status": slo.get("status"), "reason": slo.get("reason"), "message": slo.get("message", "")}
    out["model"] = _get(infd.get("spec") or {}, "model.name") or ""
    return out


@dataclasses.dataclass(frozen=True)
class Point:
    t: float
    values: Mapping[str, float]


class History:
    """Per model, the last hour of its headline figures: a point when they change, else one a minute."""

    def __init__(self, window_s: float = WINDOW_S, every_s: float = EVERY_S, max_points: int = MAX_POINTS) -> None:
        self.window_s, self.every_s = window_s, every_s
        self._points: dict[str, deque[Point]] = {}
        self._max = max_points

    def record(self, model: str, now: float, values: Mapping[str, Any]) -> None:
        kept = {k: float(values[k]) for k in SERIES if isinstance(values.get(k), (int, float))}
        points = self._points.setdefault(model, deque(maxlen=self._max))
        if points and points[-1].values == kept and now - points[-1].t < self.every_s:
            return
        points.append(Point(now, kept))
        while points and now - points[0].t > self.window_s:
            points.popleft()

    def forget_except(self, models: Iterable[str]) -> None:
        for gone in set(self._points) - set(models):
            del self._points[gone]

    def series(self, model: str) -> list[Point]:
        return list(self._points.get(model, ()))


@dataclasses.dataclass(frozen=True)
class KeyRow:
    key: str
    requests: float = 0
    rejected: float = 0  # 429s
    errors: float = 0  # 5xx
    prompt_tokens: float = 0
    completion_tokens: float = 0
    cost_usd: float = 0
    limited: Mapping[str, float] = dataclasses.field(default_factory=dict)  # limit -> 429s for it


def key_rows(samples: Iterable[tuple[str, Mapping[str, str], float]]) -> list[KeyRow]:
    """Fold (sample name, labels, value) of the gateway's per-key series into one row per key."""
    rows: dict[str, dict[str, Any]] = {}
    for name, labels, value in samples:
        key = labels.get("key")
        if key is None:
            continue
        row = rows.setdefault(key, {"key": key, "limited": {}})
        if name == "shardwise_gateway_key_requests_total":
            row["requests"] = row.get("requests", 0) + value
            code = labels.get("code", "")
            if code == "429":
                row["rejected"] = row.get("rejected", 0) + value
            elif code.startswith("5"):
                row["errors"] = row.get("errors", 0) + value
        elif name == "shardwise_gateway_key_tokens_total":
            field = "prompt_tokens" if labels.get("direction") == "prompt" else "completion_tokens"
            row[field] = row.get(field, 0) + value
        elif name == "shardwise_gateway_key_cost_usd_total":
            row["cost_usd"] = row.get("cost_usd", 0) + value
        elif name == "shardwise_gateway_rate_limited_total":
            limit = labels.get("limit", "")
            row["limited"][limit] = row["limited"].get(limit, 0) + value
    return [KeyRow(**row) for _, row in sorted(rows.items())]


@dataclasses.dataclass(frozen=True)
class EngineRow:
    model: str
    endpoint: str  # IP:PORT, as the response header x-gateway-destination-endpoint-served names it
    requests: float = 0


def engine_rows(samples: Iterable[tuple[str, Mapping[str, str], float]]) -> list[EngineRow]:
    """Rows from the gateway's served-requests series, one per (model, engine), in that order."""
    rows: dict[tuple[str, str], float] = {}
    for name, labels, value in samples:
        if name == "shardwise_gateway_served_requests_total" and labels.get("endpoint"):
            where = (labels.get("model", ""), labels["endpoint"])
            rows[where] = rows.get(where, 0) + value
    return [EngineRow(model, endpoint, value) for (model, endpoint), value in sorted(rows.items())]


@dataclasses.dataclass(frozen=True)
class ModelView:
    namespace: str
    name: str
    served: str
    figures: Mapping[str, Any]
    history: Sequence[Point] = ()


@dataclasses.dataclass(frozen=True)
class View:
    models: Sequence[ModelView]
    keys: Sequence[KeyRow] = ()
    keys_enabled: bool = False
    engines: Sequence[EngineRow] = ()
    generated_at: str = ""
    refresh_s: float = 10.0


def _num(value: Any) -> str:
    """A status figure as the status holds it (already rounded to what is meaningful)."""
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return str(value)


def _cell(field: str, value: Any, unit: str = "") -> str:
    if value is None:
        return f'<td class="num" data-field="{field}"><span class="none">-</span></td>'
    text = html.escape(_num(value))
    return (f'<td class="num" data-field="{field}" data-value="{text}">{text}'
            f'{"<small> " + unit + "</small>" if unit else ""}</td>')


def sparkline(points: Sequence[Point], field: str, width: int = 120, height: int = 24) -> str:
    """An inline SVG polyline of one figure over the window (server-drawn: no JavaScript needed)."""
    values = [(p.t, p.values[field]) for p in points if field in p.values and math.isfinite(p.values[field])]
    if len(values) < 2:
        return f'<svg class="spark" width="{width}" height="{height}" aria-label="{field}: not enough points"></svg>'
    t0, t1 = values[0][0], values[-1][0]
    lo, hi = min(v for _, v in values), max(v for _, v in values)
    span_t, span_v = (t1 - t0) or 1.0, (hi - lo) or 1.0
    coords = " ".join(f"{(t - t0) / span_t * (width - 2) + 1:.1f},{height - 1 - (v - lo) / span_v * (height - 2):.1f}"
                      for t, v in values)
    label = f"{field}: {_num(lo)} to {_num(hi)} over {round((t1 - t0) / 60)} min"
    return (f'<svg class="spark" width="{width}" height="{height}" role="img" aria-label="{html.escape(label)}">'
            f'<title>{html.escape(label)}</title><polyline fill="none" stroke="currentColor" stroke-width="1.5" '
            f'points="{coords}"/></svg>')


def _slo(fig: Mapping[str, Any]) -> str:
    slo = fig.get("slo")
    if not slo:
        return '<td data-field="slo" data-value="none"><span class="none">no SLO</span></td>'
    state = {"True": "met", "False": "missed"}.get(str(slo.get("status")), "unknown")
    return (f'<td data-field="slo" data-value="{state}" class="slo-{state}" title="{html.escape(slo.get("message") or "")}">'
            f'{state}<br><small>{html.escape(slo.get("message") or slo.get("reason") or "")}</small></td>')


def _model_row(m: ModelView) -> str:
    f = m.figures
    layout = (f"TP{f['tensorParallel']} x PP{f['pipelineParallel']}"
              if "tensorParallel" in f and "pipelineParallel" in f else "-")
    replicas = (f'<td class="num" data-field="replicas"><span data-field="readyReplicas" '
                f'data-value="{_num(f.get("readyReplicas", 0))}">{_num(f.get("readyReplicas", 0))}</span> / '
                f'<span data-field="desiredReplicas" data-value="{_num(f.get("desiredReplicas"))}">'
                f'{_num(f.get("desiredReplicas")) or "-"}</span><br><small data-field="layout" data-value="{layout}">'
                f'{layout}{" on " + html.escape(str(f["gpuProduct"])) if f.get("gpuProduct") else ""}</small></td>')
    return "".join([
        f'<tr data-deployment="{html.escape(m.namespace)}/{html.escape(m.name)}">',
        f'<th scope="row">{html.escape(m.name)}<br><small>{html.escape(m.namespace)} &middot; '
        f'{html.escape(str(f.get("model", "")))}</small></th>',
        f'<td data-field="phase" data-value="{html.escape(str(f.get("phase", "")))}">'
        f'{html.escape(str(f.get("phase", "-")))}</td>',
        _cell("ttftP50Ms", f.get("ttftP50Ms"), "ms"), _cell("ttftP95Ms", f.get("ttftP95Ms"), "ms"),
        _cell("itlP50Ms", f.get("itlP50Ms"), "ms"), _cell("itlP95Ms", f.get("itlP95Ms"), "ms"),
        _cell("outputTokensPerSecond", f.get("outputTokensPerSecond")),
        replicas,
        _cell("hourlyUSD", f.get("hourlyUSD")), _cell("perMillionOutputTokensUSD", f.get("perMillionOutputTokensUSD")),
        _slo(f),
        f'<td class="spark-cell">{sparkline(m.history, "ttftP95Ms")}<br>{sparkline(m.history, "outputTokensPerSecond")}'
        "</td></tr>",
    ])


def _engine_section(view: View) -> str:
    # The column carries the response header's own name: what a client sees is what is counted here.
    if not view.engines:
        return ('<section id="engines"><h2>Engines</h2><p class="note">No response from an engine through this '
                "gateway replica yet.</p></section>")
    rows = "".join(
        f'<tr data-endpoint="{html.escape(e.endpoint)}"><td>{html.escape(e.model)}</td>'
        f'<td data-field="x-gateway-destination-endpoint-served" data-value="{html.escape(e.endpoint)}">'
        f'<code>{html.escape(e.endpoint)}</code></td>'
        + _cell("requests", e.requests) + "</tr>" for e in view.engines)
    return ('<section id="engines"><h2>Engines</h2><p class="note">Responses by the engine that served them, as '
            "each response's <code>x-gateway-destination-endpoint-served</code> header names it, since this gateway "
            "replica started.</p><table><thead><tr><th>model</th><th>x-gateway-destination-endpoint-served</th>"
            f"<th>responses</th></tr></thead><tbody>{rows}</tbody></table></section>")


def _key_section(view: View) -> str:
    if not view.keys_enabled:
        return ('<section id="keys"><h2>API keys</h2><p class="note">API keys are not enabled on this gateway '
                "(<code>shardwise gateway serve --auth</code>): every caller is served, so there is no per-key "
                "usage to show.</p></section>")
    if not view.keys:
        return '<section id="keys"><h2>API keys</h2><p class="note">No request with an API key yet.</p></section>'
    rows = "".join(
        f'<tr data-key="{html.escape(k.key)}"><th scope="row">{html.escape(k.key or "(no valid key)")}</th>'
        + _cell("requests", k.requests) + _cell("rejected", k.rejected) + _cell("errors", k.errors)
        + _cell("promptTokens", k.prompt_tokens) + _cell("completionTokens", k.completion_tokens)
        + _cell("costUSD", round(k.cost_usd, 4))
        + f'<td data-field="limited">{html.escape(", ".join(f"{n}: {_num(v)}" for n, v in sorted(k.limited.items())) or "-")}</td></tr>'
        for k in view.keys)
    return ('<section id="keys"><h2>API keys</h2><p class="note">Since this gateway replica started.</p><table><thead><tr>'
            "<th>key</th><th>requests</th><th>429s</th><th>5xx</th><th>prompt tokens</th><th>completion tokens</th>"
            f"<th>cost $</th><th>rate limited by</th></tr></thead><tbody>{rows}</tbody></table></section>")


_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#1d2330;background:#fafbfc}
h1{font-size:1.3em;margin:0 0 .2em}h2{font-size:1.1em;margin:1.4em 0 .4em}
table{border-collapse:collapse;width:100%;background:#fff}th,td{padding:.35em .6em;border-bottom:1px solid #e3e6eb;
text-align:left;vertical-align:top}thead th{font-weight:600;font-size:.85em;color:#5a6272;background:#f1f3f6}
td.num{text-align:right;font-variant-numeric:tabular-nums}small{color:#6b7385}.none{color:#aab}
.slo-met{color:#137333}.slo-missed{color:#b3261e;font-weight:600}.slo-unknown{color:#7a6a00}
.open{color:#7a4f00;background:#fff4d6;padding:.3em .6em;margin-top:.4em}.spark{color:#3367d6;display:block}.note{color:#5a6272}header p{margin:0;color:#5a6272}
"""

_SCRIPT = """
(function(){var s=%d*1000;function tick(){fetch(location.href,{headers:{'accept':'text/html'}}).then(function(r){
return r.ok?r.text():null}).then(function(t){if(!t)return;var d=new DOMParser().parseFromString(t,'text/html');
var m=d.getElementById('live');if(m)document.getElementById('live').replaceWith(m)}).catch(function(){})
.finally(function(){setTimeout(tick,s)})}setTimeout(tick,s)})();
"""


def _access(view: View) -> str:
    if view.keys_enabled:
        return ""
    return ('<p class="open" id="access" data-field="access" data-value="open">Open console: anyone who can reach '
            "this port sees this page (API keys are off). With <code>shardwise gateway serve --auth</code> it asks "
            "for an API key whose APIKey has <code>console: true</code>.</p>")


def render(view: View) -> str:
    """The whole page."""
    rows = "".join(_model_row(m) for m in view.models) or (
        '<tr><td colspan="12" class="note">No InferenceDeployment is visible to this gateway.</td></tr>')
    total = sum(float(m.figures.get("hourlyUSD") or 0) for m in view.models)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<title>shardwise console</title><style>{_STYLE}</style></head>
<body><main id="live">
<header><h1>shardwise console</h1><p>{len(view.models)} models &middot; <span data-field="totalHourlyUSD"
data-value="{_num(round(total, 2))}">${_num(round(total, 2))}</span>/hour in all &middot; status as of
<time>{html.escape(view.generated_at)}</time><noscript> &middot; reload to refresh</noscript></p>{_access(view)}</header>
<section id="models"><h2>Models</h2><table><thead><tr><th>deployment</th><th>phase</th><th>TTFT p50</th>
<th>TTFT p95</th><th>ITL p50</th><th>ITL p95</th><th>tokens/s</th><th>ready / desired<br>layout</th><th>$/hour</th>
<th>$/1M tokens</th><th>SLO</th><th>last hour: TTFT p95, tokens/s</th></tr></thead><tbody>{rows}</tbody></table>
<p class="note">Latency and throughput are the InferenceDeployments' status figures (the operator's
sliding window, status.latency.window, over the engines' histograms); $/1M is per output token.</p></section>
{_engine_section(view)}
{_key_section(view)}
</main><script>{_SCRIPT % max(1, int(view.refresh_s))}</script></body></html>
"""
