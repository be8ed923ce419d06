"""What a run measured: throughput, host and GPU load and energy over the trainer's measured window.

The window is the trainer's own: it opens at the `warmup_end` event and closes at `run_end` (docs/protocol.md).
Throughput comes from the trainer's per-step timings (`dt`, taken with the device synchronised) of the steps after
`warmup_end`, never from the process's wall time, which would also count interpreter start-up, imports, data loading
and warm-up. Host samples are cut to the same window, so start-up and tear-down do not dilute the averages.

Everything here is a pure function of the events and samples it is given, so the job can call it on the files
it just wrote and the tests on hand-made streams. The names it computes, their units and meanings are declared
in metric_registry.py.
"""
from __future__ import annotations

import math
from typing import Any, Iterable, Optional

import numpy as np

from orchestrator.job import batch_curve
from orchestrator.job.energy import counter_energy, gpu_notes, rapl_metrics, trapezoid_energy
from orchestrator.job.latency import inference_metrics, number as _number
from trainers.common import flops, inputs

class NoWindow(ValueError):
    """The event stream has no measured window (the message says why)."""


class Metrics(dict):
    """A run's metrics (name -> number), ready to be result.json's `metrics` as it is.

    It is a dict so the job can write it straight into the result file; `window` is the
    measured window it was computed over (None if there was none) and `reason` says why
    metrics are missing, when some are (None when nothing is missing).
    """

    def __init__(self, values: dict[str, float], window: Optional[dict[str, Any]] = None,
                 reason: Optional[str] = None, energy: Optional[dict[str, Any]] = None,
                 implausible: Optional[str] = None) -> None:
        super().__init__(values)
        self.window, self.reason = window, reason
        #: How energy was measured ({"method": "counter" | "trapezoid", "samples": n}); None if not.
        self.energy = energy
        #: Why the figures cannot be true (above the peak even at the fewest FLOPs of the
        #: algorithms production libraries use: utilisation), naming them; else None.
        self.implausible = implausible


def measured_window(events: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The measured window `{start, end, steps, images}` from `warmup_end` and `run_end`.

    Raises NoWindow naming what is missing: no `warmup_end`, no `run_end` (the trainer stopped
    early; its error, if it sent one, is quoted) or a window that closes before it opens.
    """
    warmup_end = run_end = error = None
    for ev in events:
        kind = ev.get("event")
        if kind == "warmup_end" and warmup_end is None:
            warmup_end = ev
        elif kind == "run_end" and run_end is None:
            run_end = ev
        elif kind == "error":
            error = ev
    if run_end is None:
        why = "the trainer sent no run_end event"
        if error is not None:
            why += f" (it reported {error.get('class', 'an error')}: {error.get('message', '')})"
        raise NoWindow(why)
    if warmup_end is None:
        raise NoWindow("the trainer sent run_end but no warmup_end event, so the window has no start")
    if not (_number(warmup_end.get("t")) and _number(run_end.get("t"))):
        raise NoWindow("warmup_end or run_end has no numeric time stamp 't'")
    start, end = float(warmup_end["t"]), float(run_end["t"])
    if end < start:
        raise NoWindow(f"run_end (t={end}) comes before warmup_end (t={start})")
    return {"start": start, "end": end, "steps": int(run_end.get("steps", 0)),
            "images": int(run_end.get("images", 0))}


def measured_steps(events: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The `step` events between `warmup_end` and `run_end`, in stream order."""
    steps, inside = [], False
    for ev in events:
        kind = ev.get("event")
        if kind == "warmup_end":
            inside = True
        elif kind == "run_end":
            break
        elif kind == "step" and inside:
            steps.append(ev)
    return steps


def throughput(events: Iterable[dict[str, Any]]) -> dict[str, float]:
    """Images/s and step times of the measured steps; empty if no measured step has a duration.

    `images_per_sec` (the headline) is measured images over the sum of measured step times, so
    a slow step weighs as much as the time it took; the mean, median, standard deviation
    (population) and MAD describe the per-step rates images/dt.
    """
    steps = [s for s in measured_steps(events)
             if _number(s.get("dt")) and s["dt"] > 0 and _number(s.get("images"))]
    if not steps:
        return {}
    dt = np.array([float(s["dt"]) for s in steps])
    images = np.array([float(s["images"]) for s in steps])
    rates = images / dt
    median_rate = float(np.median(rates))
    return {
        "images_per_sec": float(images.sum() / dt.sum()),
        "images_per_sec_mean": float(rates.mean()),
        "images_per_sec_median": median_rate,
        "images_per_sec_std": float(rates.std()),
        "images_per_sec_mad": float(np.median(np.abs(rates - median_rate))),
        "step_time_mean": float(dt.mean()),
        "step_time_median": float(np.median(dt)),
    }


def tokens(start: dict[str, Any], sequences_per_sec: Optional[float]) -> dict[str, float]:
    """tokens_per_sec of a sequence network's run (text-shaped data, input_shape [seq_len]): sequences/s x seq_len."""
    shape = start.get("input_shape") or ()
    text = sequences_per_sec and start.get("like") in inputs.TEXT and len(shape) == 1
    return {"tokens_per_sec": sequences_per_sec * float(shape[0])} if text else {}


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def window_samples(samples: Iterable[dict[str, Any]], start: float, end: float) -> list[dict[str, Any]]:
    """The samples stamped inside [start, end] (the same `time.time()` clock as the events)."""
    return [s for s in samples if _number(s.get("t")) and start <= s["t"] <= end]


def host_metrics(samples: Iterable[dict[str, Any]]) -> dict[str, float]:
    """Trainer-process and whole-host load from the host sampler's samples (others ignored).

    A figure is left out when no sample carries it, rather than reported as zero.
    """
    return _reduced([s for s in samples if s.get("sampler") == "host"], (
        ("cpu_percent_avg", "proc_cpu_percent", _mean),
        ("cpu_percent_peak", "proc_cpu_percent", max),
        ("rss_peak_bytes", "proc_rss_bytes", max),
        ("host_cpu_percent_avg", "host_cpu_percent", _mean),
        ("host_mem_used_peak_bytes", "host_mem_used_bytes", max),
    ))


def _reduced(samples: list[dict[str, Any]], table: Iterable[tuple[str, str, Any]]) -> dict[str, float]:
    """For each (metric, sample key, reduction): the reduction of the samples' numeric values of
    that key, left out when none has one."""
    out: dict[str, float] = {}
    for name, key, reduce in table:
        vals = [float(s[key]) for s in samples if _number(s.get(key))]
        if vals:
            out[name] = float(reduce(vals))
    return out


#: The averages and peaks over the window's GPU samples: (metric, the samples' field, how reduced).
GPU_REDUCTIONS = (
    ("gpu_mem_avg_bytes", "mem_used_bytes", _mean),
    ("gpu_mem_peak_bytes", "mem_used_bytes", max),
    ("gpu_proc_mem_avg_bytes", "proc_mem_bytes", _mean),
    ("gpu_proc_mem_peak_bytes", "proc_mem_bytes", max),
    ("gpu_util_avg", "util_gpu_percent", _mean),
    ("gpu_mem_util_avg", "util_mem_percent", _mean),
    ("gpu_sm_clock_avg_mhz", "sm_clock_mhz", _mean),
    ("gpu_temp_peak_c", "temp_c", max),
    ("gpu_power_avg_w", "power_w", _mean),
    ("gpu_power_peak_w", "power_w", max),
)


def gpu_metrics(samples: Iterable[dict[str, Any]], window: dict[str, Any],
                images_per_sec: Optional[float] = None) -> tuple[dict[str, float], Optional[dict[str, Any]]]:
    """GPU memory, power, utilisation and energy over the window, from the GPU sampler's samples.

    Averages and peaks use the samples inside the window; energy uses the samples around it
    too (to interpolate its ends): NVML's energy counter where every sample has one, else the
    trapezoid rule over power. Idle samples (`"phase": "idle"`, taken before the trainer
    started) give `gpu_idle_power_w` (the mean of their last third, once clocks have dropped),
    and net energy = energy - idle power x window length.
    Returns (metrics, how energy was measured or None).
    """
    gpu = [s for s in samples if s.get("sampler") == "gpu" and _number(s.get("t"))]
    run = sorted((s for s in gpu if s.get("phase") != "idle"), key=lambda s: s["t"])
    inside = window_samples(run, window["start"], window["end"])
    out = _reduced(inside, GPU_REDUCTIONS)
    idle_power = _idle_power([s for s in gpu if s.get("phase") == "idle"])
    if idle_power is not None:
        out["gpu_idle_power_w"] = idle_power
    energy, how = _gpu_energy(run, inside, window["start"], window["end"])
    if energy is not None:
        out.update(_energy_metrics(energy, out.get("gpu_idle_power_w"), window))
    if images_per_sec and out.get("gpu_power_avg_w"):
        out["images_per_sec_per_w"] = images_per_sec / out["gpu_power_avg_w"]
    return out, how


def _idle_power(idle: list[dict[str, Any]]) -> Optional[float]:
    """The GPU's idle power: the mean over the idle phase's last third. A GPU holds its clocks for
    a second or two after work (an H200 measured here fell from 126 W to 79 W over ~3 s after a
    run), so the first samples of the idle phase are not idle yet. None without power samples."""
    power = [float(s["power_w"]) for s in sorted(idle, key=lambda s: s["t"]) if _number(s.get("power_w"))]
    return _mean(power[len(power) * 2 // 3:]) if power else None


def _gpu_energy(run: list[dict[str, Any]], inside: list[dict[str, Any]], start: float,
                end: float) -> tuple[Optional[float], Optional[dict[str, Any]]]:
    """Joules over [start, end] and how they were measured: NVML's counter where every sample of
    the run has one (exact), else trapezoids over power; (None, None) where neither can."""
    energy, how = None, None
    counted = [s for s in run if _number(s.get("energy_mj"))]
    if counted and len(counted) == len(run):
        energy = counter_energy([s["t"] for s in counted], [s["energy_mj"] for s in counted], start, end)
        if energy is not None:
            how = {"method": "counter", "samples": len(counted)}
    powered = [s for s in run if _number(s.get("power_w"))]
    if energy is None and powered and inside:
        energy = trapezoid_energy([s["t"] for s in powered], [s["power_w"] for s in powered], start, end)
        how = {"method": "trapezoid", "samples": len(powered)}
    if how is not None:
        # the longest stretch of the window with no GPU sample (its ends count): energy bridges
        # it (the counter exactly, trapezoids by a straight line), averages cannot see into it
        edges = np.concatenate(([start], [s["t"] for s in inside], [end]))
        how["max_gap_s"] = round(float(np.max(np.diff(edges))), 3)
    return energy, how


def _energy_metrics(energy: float, idle_power: Optional[float], window: dict[str, Any]) -> dict[str, float]:
    """The window's energy, net of idle power where that was measured, and per image where the
    window counted its images."""
    out = {"energy_j": energy}
    if idle_power is not None:
        out["energy_net_j"] = energy - idle_power * (window["end"] - window["start"])
    if window.get("images"):
        out["energy_per_image_j"] = energy / window["images"]
        if "energy_net_j" in out:
            out["energy_net_per_image_j"] = out["energy_net_j"] / window["images"]
    return out


def utilisation(start: dict[str, Any], images_per_sec: float,
                peak_tflops: Optional[dict[str, Any]]) -> tuple[Optional[float], str, Optional[str]]:
    """Model FLOPs utilisation: images/s x training FLOPs per image (trainers/common/flops.py) /
    (the peak FLOP/s of one device at the run's precision x devices per node x nodes), with the
    sentence that states the figures, and the reason the figures are impossible or None: even the
    fewest FLOPs of the algorithms production libraries use (flops.fewest_training_flops: Winograd, FFT) would take
    more than the peak. An MFU above 1 alone is no such reason (a fast algorithm does fewer
    multiplies than the model count). (None, why, None) where the hardware declares no peak for
    the precision or the trainer's run_start event does not say what ran.

    `start` is the trainer's run_start event (model, input_shape, classes, precision, gpus, nodes);
    `peak_tflops` the hardware config's (TFLOP/s per GPU, a CPU node counting as one device).
    """
    precision = start.get("precision", "fp32")
    peak = (peak_tflops or {}).get(precision)
    if not _number(peak) or peak <= 0:
        declared = ", ".join(sorted(k for k, v in (peak_tflops or {}).items() if v is not None)) or "none"
        return None, (f"no mfu: the hardware declares no peak FLOP/s for {precision} (declared: {declared}; "
                      f"hardware.peak_tflops.{precision}=TFLOPS sets one)"), None
    try:
        shape = (start["model"], start["input_shape"], start["classes"], start.get("network"))
        per_image, fewest = flops.per_image(*shape, phase=start.get("phase", "train"))
    except (KeyError, TypeError, ValueError) as exc:  # flops' ValueError names the layer left without output
        return None, f"no mfu: run_start's network and input cannot be counted ({exc!r})", None
    devices = max(int(start["gpus"]), 1) * int(start["nodes"])
    ceiling = float(peak) * 1e12 * devices
    achieved = images_per_sec * per_image
    kind = "inference" if start.get("phase") == "inference" else "training"
    where = f"({start['model']} at {'x'.join(str(n) for n in start['input_shape'])})"
    against = f"{devices} x {float(peak):g} TFLOP/s {precision} peak"
    what = (f"{images_per_sec:.1f} images/s x {per_image / 1e9:.3f} GFLOP per {kind} image {where} = "
            f"{achieved / 1e12:.3f} TFLOP/s against {against}")
    bound = images_per_sec * fewest
    impossible = None if bound <= ceiling else (
        f"{bound / ceiling:.2f} x the peak even at the fewest FLOPs of the algorithms production libraries use: "
        f"{images_per_sec:.1f} images/s x {fewest / 1e9:.3f} GFLOP per {kind} image {where} "
        f"(Winograd/FFT where they apply; the model count is {per_image / 1e9:.3f}, mfu "
        f"{achieved / ceiling:.2f}) = {bound / 1e12:.3f} TFLOP/s against {against}")
    return achieved / ceiling, what, impossible


def compute(events: Iterable[dict[str, Any]], samples: Iterable[dict[str, Any]] = (),
            hardware: Optional[dict[str, Any]] = None) -> Metrics:
    """All metrics of a run: throughput over the measured steps, host load within the window,
    and, given the run's `hardware` config, the MFU against its `peak_tflops` (`utilisation`).

    With no window (the trainer failed, or sent no measured step) the result holds no
    throughput metrics and its `reason` says why; it never raises for a short or broken stream.
    """
    events = list(events)
    if batch_curve.is_search(events):  # batch_size=auto: each point measured as below, kept as one run
        return batch_curve.compute(events, compute, Metrics, samples=list(samples), hardware=hardware)
    try:
        window = measured_window(events)
    except NoWindow as exc:
        return Metrics({}, None, f"no measured window: {exc}")
    values: dict[str, float] = {}
    reasons = []
    rates = throughput(events)
    if rates:
        values.update(rates)
    else:
        reasons.append(f"no throughput: no step event with dt > 0 between warmup_end and run_end "
                       f"(run_end reports {window['steps']} steps)")
    samples = list(samples)
    inside = window_samples(samples, window["start"], window["end"])
    host = host_metrics(inside)
    if host:
        values.update(host)
    else:
        reasons.append(f"no host metrics: no host sample within the {window['end'] - window['start']:.3f} s window")
    served, notes = inference_metrics(events, measured_steps(events))
    values.update(served)
    reasons.extend(notes)
    learnt = accuracy(events)
    values.update(learnt)
    start = next((e for e in events if e.get("event") == "run_start"), {})
    values.update(tokens(start, values.get("images_per_sec")))
    if learnt and start.get("data_generated"):
        reasons.append(f"accuracy on generated data: {start['data_generated']}")
    gpu, energy = gpu_metrics(samples, window, values.get("images_per_sec"))
    values.update(gpu)
    values.update(rapl_metrics(samples, window))
    reasons.extend(gpu_notes(samples, inside, window, gpu, energy))
    implausible = None
    if hardware is not None and values.get("images_per_sec"):
        implausible = _mfu(start, values, hardware.get("peak_tflops") or {}, reasons)
    values = {k: v for k, v in values.items() if math.isfinite(v)}
    return Metrics(values, window, "; ".join(reasons) or None, energy, implausible)


def _mfu(start: dict[str, Any], values: dict[str, float], peaks: dict[str, Any], reasons: list[str]) -> Optional[str]:
    """Adds the run's mfu to `values` (or says in `reasons` why there is none, and notes an mfu above 1,
    which only a fast convolution algorithm allows); returns why the figures are implausible, or None."""
    mfu, what, impossible = utilisation(start, values["images_per_sec"], peaks)
    if mfu is None:
        if start.get("gpus") or any(v is not None for v in peaks.values()):
            reasons.append(what)  # a CPU node that declares no peak at all: MFU is not asked of it
        return None
    values["mfu"] = mfu
    if impossible:
        return (f"no algorithm could do this, a measurement error: {impossible}; the "
                f"trainer's step timing or the hardware's peak_tflops is wrong")
    if mfu > 1:
        reasons.append(f"mfu {mfu:.2f} is above the peak by model FLOPs: possible only with Winograd/FFT "
                       f"convolutions; check the timing")
    return None


def accuracy(events: Iterable[dict[str, Any]]) -> dict[str, float]:
    """Accuracy mode's metrics from the trainer's `epoch` events (none in throughput mode): final
    and best test top-1, final top-5 where measured, epochs done, mean training seconds per epoch
    and, for run_start's `target_accuracy`, the epochs to reach it, the training-step time to it
    (summed step times) and the wall time to it (evaluation included)."""
    events = list(events)
    epochs = [e for e in events if e.get("event") == "epoch" and _number(e.get("top1"))]
    if not epochs:
        return {}
    last = epochs[-1]
    values = {"top1_final": float(last["top1"]), "top1_best": max(float(e["top1"]) for e in epochs),
              "epochs": float(last.get("epoch", len(epochs)))}
    if _number(last.get("top5")):
        values["top5_final"] = float(last["top5"])
    seconds = [float(e["train_s"]) for e in epochs if _number(e.get("train_s"))]
    if seconds:
        values["epoch_time_s"] = _mean(seconds)
    start = next((e for e in events if e.get("event") == "run_start"), {})
    values.update(tokens(start, values.get("images_per_sec")))
    target = start.get("target_accuracy")
    if _number(target):
        values["target_accuracy"] = float(target)
        reached = next((e for e in epochs if float(e["top1"]) >= float(target)), None)
        if reached is not None:
            values["epochs_to_target"] = float(reached.get("epoch", epochs.index(reached) + 1))
            if _number(reached.get("train_s_total")):
                values["time_to_target_s"] = float(reached["train_s_total"])
            if _number(reached.get("elapsed_s")):
                values["wall_to_target_s"] = float(reached["elapsed_s"])
    return values
