"""Every metric the orchestrator measures, declared once.

A metric's name is how it appears in result.json's `metrics` and in the database's `metrics`
table; its unit is stored beside each value; `column` names its column in the `results` view
(shown there divided by `divisor`: bytes as MB), if it has one; `larger_is_better` says which way
a comparison goes (None for figures that describe a run rather than score it); `description` is
the line a report or a table header shows; `across_nodes` says how a cell across nodes combines
its nodes' values (orchestrator/job/node_group.py). The metrics code computes these names, the collector
stores their units, the database pivots the view's columns from them, and the CLI types its
filters by them. Adding a metric is one line here (and, if it gets a view column, a schema
revision: orchestrator/store/migrations).

This module imports nothing heavy: the CLI reads it on every start.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

#: Bytes per MB as the `results` view shows memory (MiB, as `nvidia-smi` and `ps` count).
MB = 1048576.0


#: The minimum effect, in percent: a change of a metric smaller than this is no change, however sure
#: the test (`compare --threshold`'s default, and the report's builds section).
MIN_EFFECT_PCT = 5.0

#: How a cell across nodes combines its nodes' values of a metric. Every node's is computed over
#: node 0's measured window (its trainer leads the run).
LEAD = "lead"    # the run's own, from node 0's trainer: throughput, accuracy
SUM = "sum"      # the job's total: energy (per image too), power, memory of the job's GPUs
MEAN = "mean"    # the mean over nodes: utilisation, CPU load
MAX = "max"      # the largest node's: peaks
RATIO = "ratio"  # computed again from the combined figures (`ratio_of`)


@dataclass(frozen=True)
class MetricDef:
    """One metric: its stored name and unit, its view column, its direction and meaning."""

    name: str
    unit: str
    larger_is_better: Optional[bool]
    description: str
    column: Optional[str] = None
    divisor: float = 1.0
    across_nodes: str = LEAD
    ratio_of: Optional[tuple[str, str]] = None

    @property
    def column_unit(self) -> str:
        """The unit of the view column (values divided by `divisor`)."""
        return "MB" if self.divisor == MB and self.unit == "B" else self.unit


#: In the order the `results` view shows their columns.
METRICS = (
    # throughput, from the trainer's per-step timings over the measured window
    MetricDef("images_per_sec", "img/s", True, "measured images / sum of measured step times (the headline)",
       "images_per_sec"),
    MetricDef("images_per_sec_mean", "img/s", True, "mean of the per-step rates"),
    MetricDef("images_per_sec_median", "img/s", True, "median of the per-step rates", "images_per_sec_median"),
    MetricDef("images_per_sec_std", "img/s", False, "standard deviation of the per-step rates (population)",
       "images_per_sec_std"),
    MetricDef("images_per_sec_mad", "img/s", False,
       "median absolute deviation of the per-step rates (tf_cnn_benchmarks' jitter)",
       "images_per_sec_mad"),
    # a sequence network's images are sequences (images_per_sec is sequences/s): each seq_len tokens
    MetricDef("tokens_per_sec", "tok/s", True, "sequence networks (lstm): images_per_sec (sequences/s) x the "
       "tokens of each sequence (seq_len)", "tokens_per_sec"),
    MetricDef("step_time_mean", "s", False, "mean measured step time"),
    MetricDef("step_time_median", "s", False, "median measured step time"),
    # the ceiling: trainers/common/flops.py's FLOPs per image against the hardware's peak_tflops
    MetricDef("mfu", "fraction", True, "model FLOPs utilisation: images_per_sec x training FLOPs per image / "
       "(peak FLOP/s at the run's precision x devices), by the direct count; a fast convolution "
       "(Winograd, FFT) may take it above 1. Refused as implausible only above the fewest FLOPs of the "
       "algorithms production libraries use (trainers/common/flops.py)", "mfu"),
    # host: the trainer's process tree, and the whole host
    MetricDef("cpu_percent_avg", "%", None, "trainer process tree CPU, mean (100 = one core)", "cpu_percent",
       across_nodes=MEAN),
    MetricDef("cpu_percent_peak", "%", None, "trainer process tree CPU, peak", across_nodes=MAX),
    MetricDef("rss_peak_bytes", "B", False, "trainer process tree resident memory, peak", "peak_rss_mb", MB,
       across_nodes=MAX),
    MetricDef("host_cpu_percent_avg", "%", None, "whole host CPU, mean", across_nodes=MEAN),
    MetricDef("host_mem_used_peak_bytes", "B", None, "whole host memory used, peak", across_nodes=MAX),
    # the job's GPUs (NVML): memory and power summed over them, utilisation and clocks their mean
    MetricDef("gpu_mem_peak_bytes", "B", False, "device memory used on the job's GPUs, peak", "gpu_mem_peak_mb", MB,
       across_nodes=SUM),
    MetricDef("gpu_mem_avg_bytes", "B", False, "device memory used on the job's GPUs, mean", "gpu_mem_avg_mb", MB,
       across_nodes=SUM),
    MetricDef("gpu_proc_mem_peak_bytes", "B", False, "of it, what the trainer's process tree holds, peak",
       "gpu_proc_mem_peak_mb", MB, across_nodes=SUM),
    MetricDef("gpu_proc_mem_avg_bytes", "B", False, "of it, what the trainer's process tree holds, mean",
       across_nodes=SUM),
    MetricDef("gpu_util_avg", "%", True, "GPU utilisation (kernel busy time), mean over GPUs", "gpu_util",
       across_nodes=MEAN),
    MetricDef("gpu_mem_util_avg", "%", None, "memory-controller busy time, mean over GPUs", across_nodes=MEAN),
    MetricDef("gpu_sm_clock_avg_mhz", "MHz", None, "SM clock, mean over GPUs", across_nodes=MEAN),
    MetricDef("gpu_temp_peak_c", "°C", None, "hottest GPU", across_nodes=MAX),
    MetricDef("gpu_power_avg_w", "W", None, "power draw, mean", "gpu_power_avg_w", across_nodes=SUM),
    MetricDef("gpu_power_peak_w", "W", None, "power draw, peak", "gpu_power_peak_w", across_nodes=SUM),
    MetricDef("gpu_idle_power_w", "W", None, "the same GPUs before the trainer started (idle phase's last third)",
       "gpu_idle_power_w", across_nodes=SUM),
    # energy over the measured window (NVML's counter, else trapezoids over power)
    MetricDef("energy_j", "J", False, "gross GPU energy over the measured window (energy_method says how)",
       "energy_j", across_nodes=SUM),
    MetricDef("energy_per_image_j", "J/img", False, "gross GPU energy / measured images", "energy_per_image_j",
       across_nodes=SUM),
    MetricDef("energy_net_j", "J", False, "energy_j - gpu_idle_power_w x window length", "energy_net_j",
       across_nodes=SUM),
    MetricDef("energy_net_per_image_j", "J/img", False, "net GPU energy / measured images", across_nodes=SUM),
    # the CPU packages' energy over the measured window (RAPL's counters, job/monitor/rapl.py)
    MetricDef("cpu_energy_j", "J", False, "CPU package energy over the measured window (RAPL: every process on "
       "the node's packages)", across_nodes=SUM),
    MetricDef("cpu_energy_per_image_j", "J/img", False, "CPU package energy / measured images", across_nodes=SUM),
    MetricDef("images_per_sec_per_w", "img/s/W", True, "images_per_sec / gpu_power_avg_w", "images_per_sec_per_w",
       across_nodes=RATIO, ratio_of=("images_per_sec", "gpu_power_avg_w")),
    # inference (phase=inference; orchestrator/job/latency.py): images_per_sec above is its samples/s. Each
    # batch's latency is timed alone, the device synchronised; a percentile where the count supports it
    # (latency.SUPPORTED_FROM), else no row (n/a) beside the count
    MetricDef("latency_mean_s", "s", False, "inference: mean batch latency"),
    MetricDef("latency_p50_s", "s", False, "inference: median batch latency (LoadGen's rank rule)", "latency_p50_s"),
    MetricDef("latency_p90_s", "s", False, "inference: 90th percentile batch latency"),
    MetricDef("latency_p95_s", "s", False, "inference: 95th percentile batch latency (from 20 batches)"),
    MetricDef("latency_p97_s", "s", False, "inference: 97th percentile batch latency (from 34 batches)"),
    MetricDef("latency_p99_s", "s", False, "inference: 99th percentile batch latency (from 100 batches)",
       "latency_p99_s"),
    MetricDef("latency_p999_s", "s", False, "inference: 99.9th percentile batch latency (from 1,000 batches)",
       "latency_p999_s"),
    MetricDef("latency_jitter_s", "s", False, "inference: 1.4826 x the median absolute deviation of the batch "
       "latencies (the standard deviation, were they normal)"),
    MetricDef("latency_batches", "batches", None, "inference: timed batches the percentiles are over",
       "latency_batches"),
    MetricDef("first_batch_s", "s", False, "inference: the first batch alone (graph building, compilation, "
       "autotuning), apart from the steady state", "first_batch_s"),
    MetricDef("first_batch_cold", "flag", None, "inference: 1 where the first batch compiled from nothing (no "
       "persistent compile cache, or an empty one), 0 where a cache held compiled work"),
    MetricDef("below_rule", "flag", False, "inference: 1 where the run timed fewer batches or seconds than the "
       "validity rule (latency.RULE: 64 batches and 10 s); its figures are indicative only", "below_rule"),
    # batch_size=auto (orchestrator/job/batch_curve.py): the run's figures above are its fastest point's; each
    # point's own as auto.b<batch>.<metric>, which batch_curve.curve reads
    MetricDef("auto_batch", "images", None, "batch_size=auto: the batch of the fastest point, whose figures the "
       "run's are", "auto_batch"),
    MetricDef("auto_points", "points", None, "batch_size=auto: batches measured (1, 2, 4, ...)"),
    MetricDef("auto_oom_batch", "images", None, "batch_size=auto: the batch the device could not hold (none "
       "where throughput stopped the search)"),
    # accuracy mode (mode=accuracy): the test split after each epoch (trainers/common/accuracy.py)
    MetricDef("top1_final", "fraction", True, "test top-1 after the last epoch", "top1"),
    MetricDef("top5_final", "fraction", True, "test top-5 after the last epoch (datasets of more than 10 classes)",
       "top5"),
    MetricDef("top1_best", "fraction", True, "best test top-1 over the epochs", "top1_best"),
    MetricDef("epochs", "epochs", None, "epochs trained"),
    MetricDef("epoch_time_s", "s", False, "training-step time per epoch, mean (evaluation excluded)", "epoch_s"),
    MetricDef("target_accuracy", "fraction", None, "the test top-1 the time and epochs to target are for"),
    MetricDef("epochs_to_target", "epochs", False, "epochs until the test top-1 first reached target_accuracy",
       "epochs_to_target"),
    MetricDef("time_to_target_s", "s", False, "summed training-step time until target_accuracy was reached",
       "time_to_target_s"),
    MetricDef("wall_to_target_s", "s", False, "wall time from the first step until target_accuracy was reached, "
       "evaluations included", "wall_to_target_s"),
)

#: name -> its declaration.
BY_NAME = {m.name: m for m in METRICS}
#: metric -> (numerator, denominator) of the ratios a cell across nodes computes again
RATIOS = {m.name: m.ratio_of for m in METRICS if m.ratio_of}
#: The metrics with a column in the `results` view, in the view's order.
VIEW_METRICS = tuple(m for m in METRICS if m.column)

#: For a name not declared above (a sampler added later): the unit its suffix implies.
_SUFFIX_UNITS = (("_bytes", "B"), ("_per_sec", "1/s"), ("_percent", "%"), ("_w", "W"), ("_j", "J"),
                 ("_mhz", "MHz"), ("_s", "s"))


def unit_of(name: str) -> Optional[str]:
    """The unit a metric is stored with; None when neither its declaration nor its name tells."""
    if name in BY_NAME:
        return BY_NAME[name].unit
    for suffix, unit in _SUFFIX_UNITS:
        if name.endswith(suffix):
            return unit
    return None


def across_nodes(name: str) -> str:
    """How a cell across nodes combines a metric (LEAD for one no declaration names)."""
    found = BY_NAME.get(name)
    return found.across_nodes if found is not None else LEAD
