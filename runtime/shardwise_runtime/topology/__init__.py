"""NVLink topology of a GPU node, read through NVML and published as node labels.

`nvml` is the small interface to the driver (with the real pynvml implementation), `recorded`
replays topologies recorded as YAML, `derive` turns a topology into NVLink domains and labels
(pure), `labeler` is the DaemonSet process that applies them, `bandwidth` the optional measured
all-reduce probe.
"""
