"""The operator's own /metrics as a dict, for the tests and benchmarks that watch it work."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def operator_metrics(port: int) -> dict[str, float]:
    """Every sample, keyed as the exposition writes it (`name` or `name{k="v",...}`); {} while the
    operator does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return {}
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sample.labels.items())
            out[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return out
