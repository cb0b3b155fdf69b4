"""How long a training job will take and what it will cost on each machine, before it runs.

The model, in plain terms:
- A model's forward FLOPs come from Ultralytics itself, measured once per architecture at 640 px
  in a subprocess (`python -m training.flops`, torch stays out of the web process) and scaled by
  imgsz²; training costs ~3× a forward pass (forward + backward).
- An epoch takes max(compute, data loading) plus validation and a fixed overhead (checkpoint,
  plots). Compute runs at fp16_tflops × UTILISATION; a data loader feeds LOADER_IMAGES_PER_SECOND
  at 640 px (more at smaller sizes). A job adds start-up (provisioning, model build).
- "This machine" on a CPU has no spec sheet: its rate and per-epoch overhead are fitted to past
  local epochs (EpochMetric.seconds); before any history a conservative CPU figure is used.
- Calibration: each GpuType's finished jobs give actual / predicted training time
  (first_batch_at → finished_at); their geometric mean corrects the next estimate, and the range
  narrows with their number. The job rows are the truth; the cache holds what was computed from
  them with a fingerprint of those rows, so a new finished job is seen on the next read.
"""

import json
import math
import statistics
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime
from importlib import metadata

from django.conf import settings
from django.core.cache import cache
from django.db import connection
from django.db.models import Count, Max

from core.money import per_hour_to_micro
from datasets.models import DatasetVersion, Task
from training.models import GpuType, JobState, ModelFamily, ModelSize, TrainingJob
from training.services.arguments import model_yaml_name
from training.services.catalog import LOCAL_SLUG, gpu_choices, local_device
from training.services.version_cache import version_cache_get, version_cache_set

REFERENCE_IMGSZ = 640
TRAIN_TO_FORWARD = 3  # forward + backward ≈ 3 forward passes
UTILISATION = 0.35  # share of a GPU's dense FP16 throughput YOLO training reaches
LOADER_IMAGES_PER_SECOND = 600  # mosaic + augmentation at 640 px on a typical cloud VM's CPUs
EPOCH_OVERHEAD_SECONDS = 3.0  # checkpoint save, plots, validation set-up
CLOUD_STARTUP_SECONDS = 90.0  # provisioning, image pull, model build
# This machine's job start before any history: spawning the trainer, importing torch and
# Ultralytics, building the model and loaders (7.6-14 s, median 10 s, over four jobs here).
LOCAL_STARTUP_SECONDS = 10.0
# This machine before any history: an effective training rate per CPU core (GFLOP/s) and the
# per-epoch overhead, both on the slow side so a first estimate does not promise too much.
CPU_GFLOPS_PER_CORE = 8.0
CPU_EPOCH_OVERHEAD_SECONDS = 4.0
# Training memory: weights, gradients and AdamW's two moments (fp32, ~16 bytes per parameter),
# activations per image at 640 px by size (GB, with AMP), a task factor, CUDA's own context.
BYTES_PER_PARAM = 16
ACTIVATION_GB_640 = {"n": 0.15, "s": 0.24, "m": 0.42, "l": 0.55, "x": 0.85}
# Semantic and depth: not measured yet, set like segment's (their heads keep per-pixel maps at
# 1/8 of the image, and the loss runs over every pixel of them).
TASK_MEMORY = {
    "detect": 1.0,
    "segment": 1.35,
    "pose": 1.1,
    "obb": 1.1,
    "classify": 0.4,
    "semantic": 1.35,
    "depth": 1.35,
}
CUDA_CONTEXT_GB = 0.6
HEADROOM = 1.2
AUTOBATCH_FRACTION = 0.6  # Ultralytics' AutoBatch default
# Range: ±50% with no calibration job, narrowing by 7 points per job to ±15%.
RANGE_WIDEST, RANGE_NARROWEST, RANGE_STEP = 0.5, 0.15, 0.07

FLOPS_TIMEOUT_SECONDS = 120
_flops_memory: dict[str, "ModelCost"] = {}
flops_measurements = 0  # subprocesses run by this process (tests count them)


# --- FLOPs -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelCost:
    gflops: float  # forward pass, one image at REFERENCE_IMGSZ
    params: int

    def forward_gflops(self, imgsz: int) -> float:
        """Convolutions cost ∝ pixels: the reference measure scaled by (imgsz / 640)²."""
        return self.gflops * (imgsz / REFERENCE_IMGSZ) ** 2


def _flops_key(yaml_name: str, imgsz: int) -> str:
    # The installed distribution's version: read without starting Ultralytics' probe (seconds).
    return f"estimator:flops:{metadata.version('ultralytics')}:{yaml_name}:{imgsz}"


def flops_measure(yaml_name: str, imgsz: int = REFERENCE_IMGSZ) -> ModelCost:
    """Ultralytics' own count, in a subprocess (it imports torch). Not cached."""
    global flops_measurements
    flops_measurements += 1
    result = subprocess.run(  # noqa: S603  (our interpreter, our module, a checked name)
        [sys.executable, "-m", "training.flops", yaml_name, str(int(imgsz))],
        capture_output=True,
        text=True,
        timeout=FLOPS_TIMEOUT_SECONDS,
        check=True,
        cwd=settings.BASE_DIR,
    )
    data = json.loads(result.stdout.strip().splitlines()[-1])
    return ModelCost(gflops=float(data["gflops"]), params=int(data["params"]))


class FlopsNotMeasured(LookupError):
    """Asked not to measure, and no figure is cached."""


def model_cost(family: str, size: str, task: str, *, measure: bool = True) -> ModelCost:
    """Forward GFLOPs at 640 px and parameters: this process's memory, the cache, or a
    measurement (then kept in both, without expiry: it changes only with Ultralytics).
    measure=False: never start the (seconds-long) measurement; FlopsNotMeasured instead."""
    yaml_name = model_yaml_name(family, size, task)
    key = _flops_key(yaml_name, REFERENCE_IMGSZ)
    if key in _flops_memory:
        return _flops_memory[key]
    cached = cache.get(key)
    if cached is None and (cached := version_cache_get(key)) is not None:
        cache.set(key, cached, timeout=None)  # measured on this machine before
    if cached is not None:
        cost = ModelCost(**cached)
    elif not measure:
        raise FlopsNotMeasured(yaml_name)
    else:
        cost = flops_measure(yaml_name, REFERENCE_IMGSZ)
        figures = {"gflops": cost.gflops, "params": cost.params}
        cache.set(key, figures, timeout=None)
        version_cache_set(key, figures)
    _flops_memory[key] = cost
    return cost


def flops_warm() -> list[tuple[str, ModelCost | str]]:
    """Measure every family × size × task at 640 px that is not cached yet."""
    done = []
    for family in ModelFamily.values:
        for task in Task.values:
            for size in ModelSize.values:
                name = model_yaml_name(family, size, task)
                try:
                    done.append((name, model_cost(family, size, task)))
                except (subprocess.SubprocessError, ValueError, KeyError) as e:
                    done.append((name, f"not measured: {e}"))
    return done


# --- what is estimated -------------------------------------------------------------------------


@dataclass(frozen=True)
class EstimateConfig:
    task: str
    model_family: str
    model_size: str
    imgsz: int
    epochs: int
    batch: int  # -1: AutoBatch
    train_images: int
    val_images: int


def version_images(version: DatasetVersion) -> tuple[int, int]:
    """(train, val) image counts of a version; val falls back to test, as Ultralytics does."""
    splits = (version.summary or {}).get("splits") or {}
    val = splits.get("val") or splits.get("test") or 0
    return int(splits.get("train") or 0), int(val)


def config_of_job(job: TrainingJob) -> EstimateConfig:
    train, val = version_images(job.dataset_version)
    return EstimateConfig(
        task=job.task,
        model_family=job.model_family,
        model_size=job.model_size,
        imgsz=job.imgsz,
        epochs=job.epochs,
        batch=job.batch,
        train_images=train,
        val_images=val,
    )


def _epoch_gflop(config: EstimateConfig, cost: ModelCost) -> tuple[float, float]:
    """(training, validation) GFLOP of one epoch."""
    forward = cost.forward_gflops(config.imgsz)
    return config.train_images * TRAIN_TO_FORWARD * forward, config.val_images * forward


# --- calibration -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Calibration:
    jobs: int = 0
    factor: float = 1.0  # actual / predicted training time, geometric mean
    spread: float = 0.0  # largest |log(actual / predicted) - log(factor)|, as a fraction
    startup_seconds: float | None = None  # median started_at → first_batch_at
    # At a provider (SkyPilot), the medians of its phases in that start-up: renting the
    # machine, then its set-up until the trainer's first report (first attempts only).
    provisioning_seconds: float | None = None
    setup_seconds: float | None = None
    startups: int = 0  # jobs the start-up figures come from
    cpu_gflops: float | None = None  # this machine's fitted training rate (CPU only)
    cpu_overhead: float | None = None  # and its per-epoch overhead


def _is_cpu(gpu: GpuType) -> bool:
    return gpu.slug == LOCAL_SLUG and gpu.vram_gb == 0


def _calibration_jobs(gpu: GpuType):
    return TrainingJob.objects.filter(
        gpu_type=gpu,
        state=JobState.SUCCEEDED,
        is_quick_test=False,
        first_batch_at__isnull=False,
        finished_at__isnull=False,
    ).select_related("dataset_version")


def _fingerprint(gpu: GpuType) -> list:
    agg = _calibration_jobs(gpu).aggregate(n=Count("pk"), last=Max("pk"))
    return [gpu.pk, gpu.vram_gb, agg["n"], agg["last"]]


def _fit_cpu(jobs: list[TrainingJob]) -> tuple[float, float] | None:
    """(GFLOP/s, overhead s per epoch) by least squares on seconds = overhead + gflop / rate
    over past local epochs; None with fewer than two distinct workloads."""
    points = []
    for job in jobs:
        config = config_of_job(job)
        if not config.train_images:
            continue
        train, val = _epoch_gflop(config, _job_cost(job))
        seconds = [m.seconds for m in job.epoch_metrics.all() if m.seconds]
        points += [(train + val, s) for s in seconds]
    if len({round(x, 6) for x, _ in points}) < 2:
        return None
    xs, ys = [x for x, _ in points], [y for _, y in points]
    slope, intercept = statistics.linear_regression(xs, ys)
    if slope <= 0:
        return None
    return 1 / slope, max(intercept, 0.0)


def _provider_phase_seconds(job: TrainingJob) -> tuple[float | None, float | None]:
    """(provisioning, setting up) seconds of the job's first attempt, from the provider's
    phases the supervisor kept on it; None where the provider reported no such phase."""
    first = next((a for a in job.attempt_rows.all() if a.number == 1), None)
    at: dict[str, datetime] = {}
    for phase in (first.provider_phases if first else None) or []:
        at.setdefault(phase.get("phase"), datetime.fromisoformat(phase["at"]))
    provisioning, setting_up, running = (
        at.get("provisioning"),
        at.get("setting_up"),
        at.get("running"),
    )
    after_provisioning = setting_up or running
    rent = (
        (after_provisioning - provisioning).total_seconds()
        if provisioning and after_provisioning
        else None
    )
    setup = (running - setting_up).total_seconds() if setting_up and running else None
    return rent, setup


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _job_cost(job: TrainingJob) -> ModelCost:
    return model_cost(job.model_family, job.model_size, job.task)


def _calibration_compute(gpu: GpuType) -> Calibration:
    jobs = list(
        _calibration_jobs(gpu).prefetch_related("epoch_metrics", "attempt_rows").order_by("pk")
    )
    base = Calibration()
    if _is_cpu(gpu):
        fit = _fit_cpu(jobs)
        if fit is not None:
            base = Calibration(cpu_gflops=fit[0], cpu_overhead=fit[1])
    ratios = []
    startups, rents, setups = [], [], []
    for job in jobs:
        config = config_of_job(job)
        if not config.train_images or job.epochs_done != job.epochs:
            continue
        predicted = _training_seconds(config, gpu, _job_cost(job), base)
        actual = (job.finished_at - job.first_batch_at).total_seconds()
        if predicted > 0 and actual > 0:
            ratios.append(math.log(actual / predicted))
        if job.started_at:
            startups.append((job.first_batch_at - job.started_at).total_seconds())
        rent, setup = _provider_phase_seconds(job)
        rents += [rent] if rent is not None else []
        setups += [setup] if setup is not None else []
    start_up = {
        "startup_seconds": _median(startups),
        "provisioning_seconds": _median(rents),
        "setup_seconds": _median(setups),
        "startups": len(startups),
        "cpu_gflops": base.cpu_gflops,
        "cpu_overhead": base.cpu_overhead,
    }
    if not ratios:
        return Calibration(**start_up)
    mean = statistics.fmean(ratios)
    return Calibration(
        jobs=len(ratios),
        factor=math.exp(mean),
        spread=math.exp(max(abs(r - mean) for r in ratios)) - 1,
        **start_up,
    )


def _calibration_key(gpu: GpuType) -> str:
    # The database's name too: one Redis may serve several databases (tests, benches).
    database = connection.settings_dict["NAME"]
    return f"estimator:calibration:{database}:{gpu.slug}"


def calibration_for(gpu: GpuType) -> Calibration:
    """The cached calibration if it was computed from the same finished jobs, else recomputed."""
    fingerprint = _fingerprint(gpu)
    cached = cache.get(_calibration_key(gpu))
    if cached and cached.get("fingerprint") == fingerprint:
        return Calibration(**cached["calibration"])
    calibration = _calibration_compute(gpu)
    cache.set(
        _calibration_key(gpu),
        {"fingerprint": fingerprint, "calibration": calibration.__dict__},
        timeout=None,
    )
    return calibration


# --- the estimate ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Estimate:
    seconds_low: int
    seconds: int
    seconds_high: int
    credits: int  # micro-credits
    credits_high: int
    fits_in_memory: bool
    vram_needed_gb: float
    bottleneck: str  # "compute", "data loading" or "start-up"
    explanation: str
    calibration_jobs: int


@dataclass(frozen=True)
class _Parts:
    compute: float  # per epoch, training pass
    loading: float  # per epoch, data-loading floor
    validation: float
    overhead: float


def _parts(config: EstimateConfig, gpu: GpuType, cost: ModelCost, cal: Calibration) -> _Parts:
    train_gflop, val_gflop = _epoch_gflop(config, cost)
    if _is_cpu(gpu):
        rate = cal.cpu_gflops or CPU_GFLOPS_PER_CORE * max(local_device().count, 1)
        overhead = cal.cpu_overhead if cal.cpu_gflops else CPU_EPOCH_OVERHEAD_SECONDS
        return _Parts(train_gflop / rate, 0.0, val_gflop / rate, overhead)
    rate = max(gpu.fp16_tflops, 1.0) * 1000 * UTILISATION
    loader = LOADER_IMAGES_PER_SECOND * (REFERENCE_IMGSZ / config.imgsz) ** 2
    return _Parts(
        compute=train_gflop / rate,
        loading=config.train_images / loader,
        validation=max(val_gflop / rate, config.val_images / (loader * 2)),
        overhead=EPOCH_OVERHEAD_SECONDS,
    )


def _training_seconds(
    config: EstimateConfig, gpu: GpuType, cost: ModelCost, cal: Calibration
) -> float:
    """Uncorrected first batch → end: the epochs and one final validation."""
    p = _parts(config, gpu, cost, cal)
    epoch = max(p.compute, p.loading) + p.validation + p.overhead
    return config.epochs * epoch + p.validation


def _vram_needed_gb(config: EstimateConfig, cost: ModelCost, batch: int) -> float:
    states = cost.params * BYTES_PER_PARAM / 1e9
    per_image = ACTIVATION_GB_640[config.model_size] * TASK_MEMORY.get(config.task, 1.0)
    activations = batch * per_image * (config.imgsz / REFERENCE_IMGSZ) ** 2
    return (states + activations) * HEADROOM + CUDA_CONTEXT_GB


def _size_words(config: EstimateConfig) -> str:
    label = ModelSize(config.model_size).label.split("(")[-1].rstrip(")")
    article = "An" if label[0] in "aeiou" else "A"
    return f"{article} {label} model at {config.imgsz} px"


def _startup_words(startup: float, cal: Calibration) -> str:
    """How long a machine of this type takes to be ready, and what that is made of."""
    from training.templatetags.training_format import duration

    if cal.startup_seconds is None:
        return (
            f"Getting a machine ready counts {duration(startup)} (renting it, installing the "
            "trainer, building the model): a first guess until a job has run on this type."
        )
    parts = []
    if cal.provisioning_seconds is not None:
        parts.append(f"{duration(cal.provisioning_seconds)} renting the machine")
    if cal.setup_seconds is not None:
        parts.append(f"{duration(cal.setup_seconds)} setting it up")
    made_of = f" ({' and '.join(parts)})" if parts else ""
    n = cal.startups
    return (
        f"Getting a machine ready counts {duration(startup)}{made_of}, the median of "
        f"{n} past job{'s' if n != 1 else ''} on this type; the credit hold covers it."
    )


def microcredits(seconds: float, gpu: GpuType) -> int:
    """What the estimate shows for `seconds` on `gpu`: whole seconds, as the estimate reads."""
    return per_hour_to_micro(round(seconds), gpu.hourly_price)


def estimate(config: EstimateConfig, gpu: GpuType, *, measure: bool = True) -> Estimate:
    cost = model_cost(config.model_family, config.model_size, config.task, measure=measure)
    cal = calibration_for(gpu)
    p = _parts(config, gpu, cost, cal)
    training = _training_seconds(config, gpu, cost, cal) * cal.factor
    if cal.startup_seconds is not None:
        startup = cal.startup_seconds
    else:
        startup = LOCAL_STARTUP_SECONDS if gpu.provider == "local" else CLOUD_STARTUP_SECONDS
    seconds = training + startup
    width = max(RANGE_WIDEST - RANGE_STEP * cal.jobs, RANGE_NARROWEST)
    if cal.jobs:
        width = max(width, min(cal.spread, RANGE_WIDEST))

    what = _size_words(config)
    if _is_cpu(gpu):
        fits, vram = True, 0.0
        bottleneck = "start-up" if startup > training else "compute"
        explanation = f"{what} trains on this machine's CPU, far slower than on a GPU."
    else:
        if config.batch == -1:
            vram = round(gpu.vram_gb * AUTOBATCH_FRACTION, 1)
            fits = True
            memory_words = (
                f"Batch “auto” picks a batch that fills about {AUTOBATCH_FRACTION:.0%} "
                f"of the {gpu.vram_gb} GB, so it fits."
            )
        else:
            vram = round(_vram_needed_gb(config, cost, config.batch), 1)
            fits = vram <= gpu.vram_gb
            memory_words = (
                f"Batch {config.batch} needs about {vram} GB of {gpu.vram_gb} GB."
                if fits
                else f"Batch {config.batch} needs about {vram} GB, more than its "
                f"{gpu.vram_gb} GB: lower the batch or the image size, or use “auto”."
            )
        if startup > training:
            bottleneck = "start-up"
            explanation = (
                f"{what} for {config.epochs} epoch{'s' if config.epochs != 1 else ''} is short: "
                "starting the machine takes longer than training, so a faster GPU saves little."
            )
        elif p.loading >= p.compute:
            bottleneck = "data loading"
            explanation = f"{what} is limited by data loading: a faster GPU saves little."
        else:
            bottleneck = "compute"
            explanation = f"{what} is limited by the GPU's compute: a faster GPU finishes sooner."
        explanation += " " + memory_words
    if gpu.provider != "local":
        explanation += " " + _startup_words(startup, cal)
    if cal.jobs:
        explanation += (
            f" Corrected by {cal.jobs} finished job{'s' if cal.jobs != 1 else ''} "
            f"on this machine (×{cal.factor:.2f})."
        )
    else:
        explanation += (
            " A first guess: no job has finished on this machine type yet, so it comes from "
            f"its specifications alone (±{RANGE_WIDEST:.0%}); each finished job narrows it."
        )
    low, high = seconds * (1 - width), seconds * (1 + width)
    return Estimate(
        seconds_low=round(low),
        seconds=round(seconds),
        seconds_high=round(high),
        credits=microcredits(seconds, gpu),
        credits_high=microcredits(high, gpu),
        fits_in_memory=fits,
        vram_needed_gb=vram,
        bottleneck=bottleneck,
        explanation=explanation,
        calibration_jobs=cal.jobs,
    )


# --- one row per machine -----------------------------------------------------------------------


@dataclass
class EstimateRow:
    gpu: GpuType
    available: bool
    reason: str
    estimate: Estimate
    cheapest: bool = False
    fastest: bool = False
    best_value: bool = False


def estimates_for(config: EstimateConfig, workspace) -> list[EstimateRow]:
    """Every machine of the catalog, in its order, with the marks among those this workspace may
    use that fit in memory: cheapest (fewest credits; ties: faster), fastest, and best value —
    the lowest time × cost among paid machines (a free machine is already the cheapest)."""
    rows = [
        EstimateRow(
            gpu=c.gpu, available=c.available, reason=c.reason, estimate=estimate(config, c.gpu)
        )
        for c in gpu_choices(workspace=workspace)
    ]
    usable = [r for r in rows if r.available and r.estimate.fits_in_memory]
    if usable:
        min(usable, key=lambda r: (r.estimate.credits, r.estimate.seconds)).cheapest = True
        min(usable, key=lambda r: (r.estimate.seconds, r.estimate.credits)).fastest = True
        paid = [r for r in usable if r.estimate.credits > 0]
        if paid:
            best = min(paid, key=lambda r: r.estimate.seconds * r.estimate.credits)
            best.best_value = True
    return rows


# --- after the first epoch ---------------------------------------------------------------------

RECENT_EPOCHS = 5  # the re-estimate follows the latest epochs (a resumed run may be faster)


@dataclass(frozen=True)
class Reestimate:
    after_epoch: int
    epoch_seconds: float  # mean of the recent measured epochs
    seconds_used: int  # machine time so far, all attempts
    seconds_left: int
    seconds_total: int
    credits_total: int  # micro-credits at the machine's price
    at_start_seconds: int | None
    at_start_credits: int | None


def _machine_seconds(job: TrainingJob, now) -> float:
    return sum(
        ((attempt.ended_at or now) - attempt.started_at).total_seconds()
        for attempt in job.attempt_rows.all()
    )


def _final_validation_seconds(job: TrainingJob) -> float:
    """The last validation Ultralytics runs on best.pt after the epochs, from the model."""
    try:
        config = config_of_job(job)
        cal = calibration_for(job.gpu_type)
        # Measured when the job was estimated at submit; a page never waits on a measurement.
        cost = model_cost(config.model_family, config.model_size, config.task, measure=False)
        return _parts(config, job.gpu_type, cost, cal).validation * cal.factor
    except Exception:  # no FLOPs figure (not measured yet, or offline): leave it out
        return 0.0


def reestimate(job: TrainingJob, *, now=None) -> Reestimate | None:
    """The job's time and credits from its own measured epochs (None before the first one):
    machine time used so far, plus the epochs left at the pace of its recent epochs, plus the
    final validation. A finished job's figure is simply what it used."""
    from django.utils import timezone

    now = now or timezone.now()
    measured = list(
        job.epoch_metrics.filter(seconds__isnull=False)
        .order_by("epoch")
        .values_list("epoch", "seconds", "recorded_at")
    )
    if not measured:
        return None
    recent = [seconds for _, seconds, _ in measured[-RECENT_EPOCHS:]]
    per_epoch = sum(recent) / len(recent)
    done, _, last_at = measured[-1]
    used = _machine_seconds(job, now)
    if job.is_final:
        left = 0.0
    else:
        running = job.state == JobState.RUNNING
        into_next = max(0.0, (now - last_at).total_seconds()) if running else 0.0
        pending = max(0, job.epochs - done) * per_epoch
        left = max(0.0, pending - into_next) + (_final_validation_seconds(job) if pending else 0)
    total = used + left
    start = job.estimated_seconds
    return Reestimate(
        after_epoch=done,
        epoch_seconds=per_epoch,
        seconds_used=round(used),
        seconds_left=round(left),
        seconds_total=round(total),
        credits_total=microcredits(total, job.gpu_type),
        at_start_seconds=start,
        at_start_credits=microcredits(start, job.gpu_type) if start is not None else None,
    )
